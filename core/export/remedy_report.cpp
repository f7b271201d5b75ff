#include "core/export/remedy_report.h"

#include "core/export/report_format.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace qs {

namespace {

using Json = nlohmann::ordered_json;

Json num(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

double snrOr(bool has, const ErrorMetrics& m) { return has ? m.snrDb : NAN; }

}  // namespace

Json remediesJson(const Graph& g, const AnalysisResult& after, const RemedySummary& s) {
  Json j;
  j["applied"] = s.applied;
  Json pairs = Json::array();
  for (const EqualizedPair& p : s.pairs) {
    pairs.push_back({{"first", g.nodes[(size_t)p.first].name}, {"second", g.nodes[(size_t)p.second].name},
                     {"channels", p.channels}, {"max_abs_log_scale", num(p.maxLogScale)}});
  }
  j["equalized_pairs"] = pairs;
  Json shifts = Json::array();
  for (const BiasShift& b : s.biasShifts)
    shifts.push_back({{"node", g.nodes[(size_t)b.node].name}, {"channels", b.shift.size()}, {"mean_abs_shift", num(b.meanAbsShift)}});
  j["bias_corrected"] = shifts;
  j["bias_correction_skipped"] = s.biasSkipped;
  Json smoothed = Json::array();
  for (const SmoothedGroup& sg : s.smoothed) {
    Json consumers = Json::array();
    for (NodeId c : sg.consumers) consumers.push_back(g.nodes[(size_t)c].name);
    smoothed.push_back({{"producer", g.nodes[(size_t)sg.producer].name}, {"consumers", consumers}, {"channels", sg.channels},
                        {"alpha", num(sg.alpha)}, {"max_abs_log_scale", num(sg.maxLogScale)},
                        {"layerwise_error_before", num(sg.errorBefore)}, {"layerwise_error_after", num(sg.errorAfter)}});
  }
  j["smoothquant"] = smoothed;
  j["smoothquant_skipped"] = s.smoothSkipped;
  Json clips = Json::array();
  for (const WeightClipNode& w : s.weightClips)
    clips.push_back({{"node", g.nodes[(size_t)w.node].name}, {"weight", g.value(w.weight).name}, {"channels", w.channels},
                     {"clipped_channels", w.clipped}, {"mean_ratio", num(w.meanRatio)},
                     {"layerwise_error_before", num(w.errorBefore)}, {"layerwise_error_after", num(w.errorAfter)}});
  j["weight_clip"] = clips;
  j["changed_initializers"] = s.changedInitializers;
  Json outputs = Json::array();
  for (size_t i = 0; i < after.outputs.size(); ++i) {
    const double before = s.before && i < s.before->outputs.size() ? s.before->outputs[i].metrics.snrDb : NAN;
    outputs.push_back({{"name", after.outputs[i].name}, {"snr_db_before", num(before)}, {"snr_db", num(after.outputs[i].metrics.snrDb)}});
  }
  j["outputs"] = outputs;
  Json layers = Json::array();
  for (NodeId id : g.topoOrder) {
    if (!after.plan.nodes[(size_t)id].quantizable) continue;
    const NodeResult& a = after.nodes[(size_t)id];
    const bool hasBefore = s.before && (size_t)id < s.before->nodes.size();
    const NodeResult* b = hasBefore ? &s.before->nodes[(size_t)id] : nullptr;
    layers.push_back({{"node", g.nodes[(size_t)id].name},
                      {"graphwise_snr_db_before", num(b ? snrOr(b->hasGraphwise, b->graphwise) : NAN)},
                      {"graphwise_snr_db", num(snrOr(a.hasGraphwise, a.graphwise))},
                      {"layerwise_snr_db_before", num(b ? snrOr(b->hasLayerwise, b->layerwise) : NAN)},
                      {"layerwise_snr_db", num(snrOr(a.hasLayerwise, a.layerwise))}});
  }
  j["layers"] = layers;
  return j;
}

std::string remediesHtml(const Graph& g, const AnalysisResult& after, const RemedySummary& s) {
  std::ostringstream h;
  std::string applied;
  for (const auto& a : s.applied) applied += (applied.empty() ? "" : ", ") + a;
  h << "<h2>Remedies (" << htmlEscape(applied) << ")</h2><p>" << s.pairs.size() << " equalized pair(s), "
    << s.biasShifts.size() << " bias-corrected node(s), " << s.smoothed.size() << " SmoothQuant group(s), "
    << s.weightClips.size() << " weight(s) clip-searched, " << s.changedInitializers.size()
    << " changed initializer(s).</p><table class=\"sortable\"><tr><th>output</th><th>SNR dB before</th><th>SNR dB after</th></tr>";
  for (size_t i = 0; i < after.outputs.size(); ++i) {
    const double before = s.before && i < s.before->outputs.size() ? s.before->outputs[i].metrics.snrDb : NAN;
    h << "<tr><td class=l>" << htmlEscape(after.outputs[i].name) << "</td><td>" << reportNumber(before) << "</td><td>"
      << reportNumber(after.outputs[i].metrics.snrDb) << "</td></tr>";
  }
  h << "</table><table class=\"sortable\"><tr><th>node</th><th>graph-wise SNR dB before</th><th>after</th>"
       "<th>layer-wise SNR dB before</th><th>after</th></tr>";
  for (NodeId id : g.topoOrder) {
    if (!after.plan.nodes[(size_t)id].quantizable) continue;
    const NodeResult& a = after.nodes[(size_t)id];
    const NodeResult* b = s.before && (size_t)id < s.before->nodes.size() ? &s.before->nodes[(size_t)id] : nullptr;
    h << "<tr><td class=l>" << htmlEscape(g.nodes[(size_t)id].name) << "</td><td>"
      << reportNumber(b ? snrOr(b->hasGraphwise, b->graphwise) : NAN) << "</td><td>" << reportNumber(snrOr(a.hasGraphwise, a.graphwise))
      << "</td><td>" << reportNumber(b ? snrOr(b->hasLayerwise, b->layerwise) : NAN) << "</td><td>"
      << reportNumber(snrOr(a.hasLayerwise, a.layerwise)) << "</td></tr>";
  }
  h << "</table>";
  return h.str();
}

}  // namespace qs
