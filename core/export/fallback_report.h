// The fallback curve in the report (docs/report-schema.md, "fallback"): report.json's
// "fallback.curve" and an HTML section with an inline SVG line chart (no script) of the worst output
// SNR against the number of excluded nodes, the target as a dashed line, the chosen point ringed.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "core/analysis/fallback_curve.h"
#include "core/ir/graph.h"

namespace qs {

/// report.json's "fallback.curve" array: one point per exclusion count, 0 first.
nlohmann::ordered_json fallbackCurveJson(const Graph& g, const FallbackCurve& curve);
/// An HTML section (heading, chart, table of the points past the chosen one).
std::string fallbackCurveHtml(const Graph& g, const FallbackCurve& curve, double targetSnrDb, double targetAgreement);

}  // namespace qs
