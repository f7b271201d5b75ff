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

// A squared error (any magnitude) with 4 significant digits; "" for NaN.
std::string sig(double v) {
  if (!std::isfinite(v)) return reportNumber(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// "-12.3%": a search's layer-wise error change; "" without a before.
std::string change(double before, double after) {
  if (!(before > 0) || !std::isfinite(after)) return "";
  const double pct = 100.0 * (after - before) / before;
  return (pct > 0 ? "+" : "") + reportNumber(pct, 1) + "%";
}

// Per node, what each remedy did there, for the node table's "remedies" column.
std::vector<std::string> remedyTags(const Graph& g, const RemedySummary& s) {
  std::vector<std::string> tags(g.nodes.size());
  auto add = [&](NodeId id, const std::string& t) {
    if (id >= 0 && (size_t)id < tags.size()) tags[(size_t)id] += (tags[(size_t)id].empty() ? "" : ", ") + t;
  };
  for (const DepthwiseEqualizedPair& p : s.depthwisePairs) add(p.producer, "depthwise eq."), add(p.consumer, "depthwise eq.");
  for (const EqualizedPair& p : s.pairs) add(p.first, "CLE"), add(p.second, "CLE");
  for (const SmoothedGroup& sg : s.smoothed) {
    add(sg.producer, "SmoothQuant 1/s");
    for (NodeId c : sg.consumers) add(c, "SmoothQuant alpha " + reportNumber(sg.alpha, 1));
  }
  for (const WeightClipNode& w : s.weightClips)
    if (w.clipped > 0) add(w.node, "weight clip " + reportNumber(w.meanRatio, 3));
  for (const BiasShift& b : s.biasShifts) add(b.node, "bias");
  return tags;
}

// One table per remedy that did something: what it changed, and for the searched ones (SmoothQuant,
// weight clip) the layer-wise squared error before and after, which the output and node tables
// above, holding all remedies together, cannot separate.
std::string remedyDetailsHtml(const Graph& g, const RemedySummary& s) {
  std::ostringstream h;
  auto name = [&](NodeId id) { return htmlEscape(g.nodes[(size_t)id].name); };
  if (!s.pairs.empty()) {
    h << "<h3>Cross-layer equalization</h3><table class=\"sortable\"><tr><th>first</th><th>second</th><th>channels</th>"
         "<th>max |log s|</th></tr>";
    for (const EqualizedPair& p : s.pairs)
      h << "<tr><td class=l>" << name(p.first) << "</td><td class=l>" << name(p.second) << "</td><td>" << p.channels << "</td><td>"
        << reportNumber(p.maxLogScale, 3) << "</td></tr>";
    h << "</table>";
  }
  if (!s.smoothed.empty()) {
    h << "<h3>SmoothQuant</h3><table class=\"sortable\"><tr><th>LayerNormalization</th><th>consumers</th><th>channels</th>"
         "<th>alpha</th><th>max |log s|</th><th>layer-wise error before</th><th>after</th><th>change</th></tr>";
    for (const SmoothedGroup& sg : s.smoothed) {
      std::string consumers;
      for (NodeId c : sg.consumers) consumers += (consumers.empty() ? "" : ", ") + name(c);
      h << "<tr><td class=l>" << name(sg.producer) << "</td><td class=l>" << consumers << "</td><td>" << sg.channels << "</td><td>"
        << reportNumber(sg.alpha, 2) << "</td><td>" << reportNumber(sg.maxLogScale, 3) << "</td><td>" << sig(sg.errorBefore)
        << "</td><td>" << sig(sg.errorAfter) << "</td><td>" << change(sg.errorBefore, sg.errorAfter) << "</td></tr>";
    }
    h << "</table>";
  }
  if (!s.smoothSkipped.empty()) {
    h << "<p>SmoothQuant skipped: ";
    for (size_t i = 0; i < s.smoothSkipped.size(); ++i) h << (i ? "; " : "") << htmlEscape(s.smoothSkipped[i]);
    h << "</p>";
  }
  if (!s.weightClips.empty()) {
    h << "<h3>Weight clip search</h3><table class=\"sortable\"><tr><th>node</th><th>clipped channels</th><th>channels</th>"
         "<th>mean ratio</th><th>layer-wise error before</th><th>after</th><th>change</th></tr>";
    for (const WeightClipNode& w : s.weightClips)
      h << "<tr><td class=l>" << name(w.node) << "</td><td>" << w.clipped << "</td><td>" << w.channels << "</td><td>"
        << reportNumber(w.meanRatio, 3) << "</td><td>" << sig(w.errorBefore) << "</td><td>" << sig(w.errorAfter) << "</td><td>"
        << change(w.errorBefore, w.errorAfter) << "</td></tr>";
    h << "</table>";
  }
  if (!s.biasShifts.empty()) {
    h << "<h3>Bias correction</h3><table class=\"sortable\"><tr><th>node</th><th>channels</th><th>mean |shift|</th></tr>";
    for (const BiasShift& b : s.biasShifts)
      h << "<tr><td class=l>" << name(b.node) << "</td><td>" << b.shift.size() << "</td><td>" << sig(b.meanAbsShift) << "</td></tr>";
    h << "</table>";
  }
  if (!s.depthwisePairs.empty()) {
    h << "<h3>Depthwise input equalization (float-preserving, in the before figures too)</h3><table class=\"sortable\">"
         "<tr><th>producer</th><th>depthwise Conv</th><th>channels</th><th>channel range ratio before</th></tr>";
    for (const DepthwiseEqualizedPair& p : s.depthwisePairs)
      h << "<tr><td class=l>" << name(p.producer) << "</td><td class=l>" << name(p.consumer) << "</td><td>" << p.channels << "</td><td>"
        << reportNumber(p.rangeRatio, 1) << "</td></tr>";
    h << "</table>";
  }
  return h.str();
}

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
       "<th>layer-wise SNR dB before</th><th>after</th><th>remedies</th></tr>";
  const std::vector<std::string> tags = remedyTags(g, s);
  for (NodeId id : g.topoOrder) {
    if (!after.plan.nodes[(size_t)id].quantizable) continue;
    const NodeResult& a = after.nodes[(size_t)id];
    const NodeResult* b = s.before && (size_t)id < s.before->nodes.size() ? &s.before->nodes[(size_t)id] : nullptr;
    h << "<tr><td class=l>" << htmlEscape(g.nodes[(size_t)id].name) << "</td><td>"
      << reportNumber(b ? snrOr(b->hasGraphwise, b->graphwise) : NAN) << "</td><td>" << reportNumber(snrOr(a.hasGraphwise, a.graphwise))
      << "</td><td>" << reportNumber(b ? snrOr(b->hasLayerwise, b->layerwise) : NAN) << "</td><td>"
      << reportNumber(snrOr(a.hasLayerwise, a.layerwise)) << "</td><td class=l>" << htmlEscape(tags[(size_t)id]) << "</td></tr>";
  }
  h << "</table>" << remedyDetailsHtml(g, s);
  return h.str();
}

Json remedyChoiceJson(const RemedyChoice& c) {
  Json trials = Json::array();
  for (const RemedyTrial& t : c.trials) {
    trials.push_back(Json{{"remedy", t.remedy},
                          {"items", t.items},
                          {"before_db", num(t.beforeDb)},
                          {"after_db", num(t.afterDb)},
                          {"held_out_before_db", num(t.heldOutBeforeDb)},
                          {"held_out_after_db", num(t.heldOutAfterDb)},
                          {"kept", t.kept},
                          {"reason", t.reason}});
  }
  Json j{{"mode", c.mode}, {"from_config", c.fromConfig}, {"kept", c.kept}};
  if (!c.fromConfig) {
    j["choice_samples"] = c.choiceSamples;
    j["held_out_samples"] = c.heldOutSamples;
    j["margin_db"] = c.marginDb;
    j["trials"] = std::move(trials);
    if (!c.note.empty()) j["note"] = c.note;
  }
  return j;
}

std::string remedyChoiceHtml(const RemedyChoice& c) {
  std::ostringstream h;
  std::string kept;
  for (const auto& k : c.kept) kept += (kept.empty() ? "" : ", ") + k;
  h << "<h2>Remedy choice (" << htmlEscape(c.mode) << ")</h2><p>Kept: " << htmlEscape(kept.empty() ? "none" : kept);
  if (c.fromConfig) return h.str() + " (from the loaded quant_cfg.json).</p>";
  if (!c.note.empty()) h << ". " << htmlEscape(c.note);
  h << ". Worst output SNR of the INT8 simulation, calibrated on " << c.choiceSamples << " sample(s) and checked on "
    << c.heldOutSamples << " held out; a remedy is kept where it gains " << reportNumber(c.marginDb)
    << " dB or more on the first and does not lose on the second.</p>";
  if (c.trials.empty()) return h.str();
  h << "<table class=\"sortable\"><tr><th>remedy</th><th>inputs</th><th>before dB</th><th>after dB</th>"
       "<th>held-out before dB</th><th>held-out after dB</th><th>kept</th><th>why</th></tr>";
  for (const RemedyTrial& t : c.trials) {
    h << "<tr><td class=l>" << htmlEscape(t.remedy) << "</td><td>" << t.items << "</td><td>" << reportNumber(t.beforeDb)
      << "</td><td>" << reportNumber(t.afterDb) << "</td><td>" << reportNumber(t.heldOutBeforeDb) << "</td><td>"
      << reportNumber(t.heldOutAfterDb) << "</td><td>" << (t.kept ? "yes" : "no") << "</td><td class=l>"
      << htmlEscape(t.reason) << "</td></tr>";
  }
  h << "</table>";
  return h.str();
}

std::string remedyChoiceText(const RemedyChoice& c) {
  std::string kept;
  for (const auto& k : c.kept) kept += (kept.empty() ? "" : ", ") + k;
  std::string out = "remedies " + c.mode + ": kept " + (kept.empty() ? "none" : kept);
  if (c.fromConfig) return out + " (from the loaded config)\n";
  if (!c.note.empty()) return out + " (" + c.note + ")\n";
  char buf[160];
  std::snprintf(buf, sizeof buf, " (%lld choice + %lld held-out samples, %.1f s)\n", (long long)c.choiceSamples,
                (long long)c.heldOutSamples, c.seconds);
  out += buf;
  for (const RemedyTrial& t : c.trials) {
    if (t.items == 0) {
      out += "  " + t.remedy + ": " + t.reason + "\n";
      continue;
    }
    std::snprintf(buf, sizeof buf, "  %s (%d inputs): %.2f -> %.2f dB, held out %.2f -> %.2f dB: %s, ", t.remedy.c_str(),
                  t.items, t.beforeDb, t.afterDb, t.heldOutBeforeDb, t.heldOutAfterDb, t.kept ? "kept" : "not kept");
    out += buf + t.reason + "\n";
  }
  return out;
}

}  // namespace qs
