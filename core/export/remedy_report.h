// The "remedies" part of report.json and of the HTML report (docs/report-schema.md): what
// cross-layer equalization and bias correction changed, and per output and per node the SNR
// before (the analysis without remedies) and after (the run's result). The HTML adds per node the
// remedies that touched it, and one table per remedy (SmoothQuant and weight clip search with their
// layer-wise error before and after; depthwise input equalization's pairs).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/analysis/remedies.h"

namespace qs {

/// report.json's "remedy_choice" object: what --remedies auto tried, each candidate's figures, what it kept.
nlohmann::ordered_json remedyChoiceJson(const RemedyChoice& c);
/// The HTML report's section of the same.
std::string remedyChoiceHtml(const RemedyChoice& c);
/// The CLI summary's lines of the same ("remedies auto: ..."), one per candidate, newline-terminated.
std::string remedyChoiceText(const RemedyChoice& c);

/// report.json's "remedies" object.
nlohmann::ordered_json remediesJson(const Graph& g, const AnalysisResult& after, const RemedySummary& s);
/// An HTML section (heading and tables) for the report page.
std::string remediesHtml(const Graph& g, const AnalysisResult& after, const RemedySummary& s);

}  // namespace qs
