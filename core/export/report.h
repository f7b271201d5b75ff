// The analysis report in the formats users keep: report.json (schema in docs/report-schema.md),
// a self-contained HTML page (sortable tables, per-layer SNR chart) and a per-layer CSV.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <optional>

#include "core/analysis/activation_split.h"
#include "core/analysis/fallback_curve.h"
#include "core/analysis/remedies.h"
#include "core/analysis/results.h"
#include "qs_version.h"

namespace qs {

struct ReportContext {
  std::string modelPath;
  std::map<std::string, std::string> settings;  // flag -> value, as given
  std::vector<std::string> warnings;
  std::vector<FallbackStep> fallback;           // empty unless --target-snr ran
  std::optional<FallbackCurve> fallbackCurve;   // the fallback's whole curve (past the target), when it ran
  std::optional<ActivationNoiseSplit> activationSplit;  // --activation-split on: clip and rounding noise
  double targetSnrDb = NAN;
  double targetAgreement = NAN;                 // --target-agreement (NaN: none)
  std::string toolVersion = kVersion;
  std::optional<RemedySummary> remedies;        // --equalize / --bias-correction: what they did, and before
  std::optional<RemedyChoice> remedyChoice;     // --remedies auto: what was tried and kept ("remedy_choice")
  /// Write the analysis's peak RSS ("peak_rss_bytes"): `analyze --report` does; an export bundle's
  /// report.json does not, so that it stays the same bytes from run to run and front end to front end.
  bool peakRss = false;
};

/// report.json: model, settings, outputs, layers, tensors, weights, warnings, fallback.
std::string reportJson(const Model& model, const AnalysisResult& r, const ReportContext& ctx);
/// One self-contained HTML file (no external resources).
std::string reportHtml(const Model& model, const AnalysisResult& r, const ReportContext& ctx);
/// layers.csv: one row per node in topological order.
std::string layersCsv(const Model& model, const AnalysisResult& r);

}  // namespace qs
