#include "core/export/report.h"
#include "core/export/fallback_report.h"
#include "core/export/remedy_report.h"
#include "core/export/report_format.h"
#include "core/export/report_json.h"

#include "core/quant/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace qs {

namespace {

using Json = nlohmann::ordered_json;

// An output's agreement with the float model (core/analysis/agreement.h); null for a dense output.
Json agreementJson(const AgreementMetrics& a) {
  if (a.kind == OutputKind::Dense || a.positions == 0) return nullptr;
  Json j{{"kind", outputKindName(a.kind)}, {"positions", a.positions}, {"top1", jsonNumber(a.top1)}, {"top5", jsonNumber(a.top5)}};
  if (a.kind == OutputKind::Sequence) {
    j["sequences"] = a.sequences;
    j["sequence_agreement"] = jsonNumber(a.sequenceAgreement);
    j["char_error_rate"] = jsonNumber(a.charErrorRate);
  }
  return j;
}

std::string fmtG(double v) {
  if (std::isnan(v)) return "";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

}  // namespace

std::string reportJson(const Model& model, const AnalysisResult& r, const ReportContext& ctx) {
  const Graph& g = model.graph;
  Json j;
  j["tool"] = {{"name", "quantscope"}, {"version", ctx.toolVersion}};
  j["model"] = ctx.modelPath.empty() ? model.path : ctx.modelPath;
  Json settings = Json::object();
  settings["quantize_mode"] = quantModeName(r.plan.mode);
  settings["calibration_method"] = calibMethodName(r.calibration.method);
  settings["percentile"] = r.calibration.percentile;
  settings["samples"] = r.samples;
  for (const auto& [k, v] : ctx.settings) settings[k] = v;
  // Settings arrive as text; the target is a number, as in "fallback" (docs/report.schema.json).
  if (settings.contains("target_snr_db")) settings["target_snr_db"] = jsonNumber(std::stod(ctx.settings.at("target_snr_db")));
  if (settings.contains("target_agreement"))
    settings["target_agreement"] = jsonNumber(std::stod(ctx.settings.at("target_agreement")));
  j["settings"] = settings;
  Json outputs = Json::array();
  for (const auto& o : r.outputs) {
    outputs.push_back({{"name", o.name}, {"snr_db", jsonNumber(o.metrics.snrDb)}, {"cosine", jsonNumber(o.metrics.cosine)},
                       {"mse", jsonNumber(o.metrics.mse)}, {"max_abs", jsonNumber(o.metrics.maxAbs)},
                       {"agreement", agreementJson(o.agreement)}});
    if (o.realisationSnrDb.size() > 1) {
      Json each = Json::array();
      for (double v : o.realisationSnrDb) each.push_back(jsonNumber(v));
      const auto [lo, hi] = std::minmax_element(o.realisationSnrDb.begin(), o.realisationSnrDb.end());
      outputs.back()["realisations"] = {{"snr_db", each}, {"mean_db", jsonNumber(o.realisationMeanDb())},
                                        {"sd_db", jsonNumber(o.realisationSdDb())}, {"min_db", jsonNumber(*lo)}, {"max_db", jsonNumber(*hi)}};
    }
  }
  j["outputs"] = outputs;
  // --realisations auto: the probe that decided the realisations (docs/report-schema.md, Realisations).
  if (r.realisationProbe.ran) {
    const RealisationProbe& p = r.realisationProbe;
    Json each = Json::array();
    for (double v : p.worstSnrDb) each.push_back(jsonNumber(v));
    j["realisation_probe"] = {{"where", p.where}, {"samples", p.samples}, {"worst_snr_db", each},
                              {"sd_db", jsonNumber(p.sdDb)}, {"threshold_db", jsonNumber(p.thresholdDb)},
                              {"realisations", p.chosen}};
  }
  Json layers = Json::array();
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    const NodeResult& nr = r.nodes[(size_t)id];
    const NodeQuantState& st = r.plan.nodes[(size_t)id];
    Json l;
    l["node"] = n.name;
    l["op_type"] = n.opType;
    l["quantizable"] = st.quantizable;
    l["quantized"] = st.quantized;
    l["reason"] = st.quantized ? "" : st.reason;
    l["graphwise"] = nr.hasGraphwise ? metricsJson(nr.graphwise) : Json(nullptr);
    l["layerwise"] = nr.hasLayerwise ? metricsJson(nr.layerwise) : Json(nullptr);
    l["weight_snr_db"] = jsonNumber(nr.weightSnrDb);
    l["activation_snr_db"] = jsonNumber(nr.activationSnrDb);
    l["sensitivity_snr_db"] = jsonNumber(nr.sensitivitySnrDb);
    l["sensitivity_exact"] = nr.sensitivityExact;
    // --activation-split on: the activation SNR's two parts at this node (activation_split.h).
    if (ctx.activationSplit) {
      auto s = ctx.activationSplit->nodes.find(id);
      const bool has = s != ctx.activationSplit->nodes.end();
      l["activation_clip_snr_db"] = has ? jsonNumber(s->second.clipSnrDb) : Json(nullptr);
      l["activation_rounding_snr_db"] = has ? jsonNumber(s->second.roundingSnrDb) : Json(nullptr);
    }
    layers.push_back(l);
  }
  j["layers"] = layers;
  // Nodes inside If branches and Loop/Scan bodies: listed, never quantized (the analysis observes
  // main-graph values only; docs/report.schema.json).
  Json nested = Json::array();
  for (const NestedNode& nn : nestedNodes(g)) {
    nested.push_back({{"node", nn.node->name}, {"op_type", nn.node->opType}, {"scope", nn.scope},
                      {"quantized", false}, {"reason", kInsideSubgraph}});
  }
  j["subgraph_nodes"] = nested;
  Json tensors = Json::array();
  for (const auto& [id, a] : r.activations) {
    Json methods = Json::object();
    for (CalibMethod m : {CalibMethod::Max, CalibMethod::Entropy, CalibMethod::Percentile, CalibMethod::Mse})
      methods[calibMethodName(m)] = jsonNumber(a.methodAmax[(size_t)m]);
    tensors.push_back({{"name", g.value(id).name}, {"amax", jsonNumber(a.amax)}, {"scale", jsonNumber(a.scale)}, {"axis", nullptr},
                       {"method", calibMethodName(r.calibration.method)}, {"scale_group", a.scaleGroup},
                       {"method_amax", methods}});
    if (ctx.activationSplit) {
      if (auto s = ctx.activationSplit->tensors.find(id); s != ctx.activationSplit->tensors.end()) {
        const TensorNoiseSplit& t = s->second;
        tensors.back()["noise_split"] = {
            {"elements", t.count}, {"clipped_fraction", jsonNumber(t.count > 0 ? (double)t.clipped / (double)t.count : 0.0)},
            {"snr_db", jsonNumber(t.snrDb())}, {"clip_snr_db", jsonNumber(t.clipSnrDb())},
            {"rounding_snr_db", jsonNumber(t.roundingSnrDb())}, {"clip_share", jsonNumber(t.clipShare())}};
      }
    }
    // Method auto: the clip search's winner (core/analysis/clip_search.h); absent for the others.
    if (auto c = r.clipChoices.find(id); c != r.clipChoices.end()) {
      const ClipChoice& cc = c->second;
      tensors.back()["auto"] = {{"winner", cc.winner}, {"amax", jsonNumber(cc.amax)},
                                {"clip_fraction", jsonNumber(cc.absMax > 0 ? cc.amax / cc.absMax : 0.f)},
                                {"consumer_snr_db", jsonNumber(cc.consumerSnrDb)}, {"best_method", cc.bestMethod},
                                {"best_method_snr_db", jsonNumber(cc.bestMethodSnrDb)}, {"candidates", cc.candidates},
                                {"layerwise_winner", cc.layerwiseWinner}, {"selection", cc.selection},
                                {"selection_output_snr_db", jsonNumber(cc.selectionOutputSnrDb)},
                                {"layerwise_output_snr_db", jsonNumber(cc.layerwiseOutputSnrDb)}};
      // --realisations auto on a spread model: the tables scored on the mean of realisations.
      if (cc.selectionRealisations > 1) {
        tensors.back()["auto"]["selection_realisations"] = cc.selectionRealisations;
        tensors.back()["auto"]["selection_first_realisation_db"] = jsonNumber(cc.selectionFirstRealisationDb);
        tensors.back()["auto"]["selection_on_first"] = cc.selectionOnFirst;
        tensors.back()["auto"]["selection_on_first_snr_db"] = jsonNumber(cc.selectionOnFirstSnrDb);
      }
      // The refinement on the outputs (core/analysis/clip_refine.h), when it ran.
      if (cc.refineRan)
        tensors.back()["auto"]["refine"] = {
            {"from", cc.refinedFrom.empty() ? Json(nullptr) : Json(cc.refinedFrom)},
            {"from_amax", cc.refinedFrom.empty() ? Json(nullptr) : jsonNumber(cc.refinedFromAmax)},
            {"passes", cc.refinePasses}, {"cone_runs", cc.refineConeRuns},
            {"check_samples", cc.refineCheckSamples}, {"held_out_samples", cc.refineHeldOutSamples},
            {"check_snr_db_before", jsonNumber(cc.refineCheckBeforeDb)}, {"check_snr_db_after", jsonNumber(cc.refineCheckAfterDb)},
            {"held_out_snr_db_before", cc.refineHeldOutSamples > 0 ? jsonNumber(cc.refineHeldOutBeforeDb) : Json(nullptr)},
            {"held_out_snr_db_after", cc.refineHeldOutSamples > 0 ? jsonNumber(cc.refineHeldOutAfterDb) : Json(nullptr)},
            {"seconds", jsonNumber(cc.refineSeconds)}, {"tensors_tried", cc.refineTargetsTried},
            {"work", jsonNumber(cc.refineWork)}, {"work_cap", cc.refineWorkCap > 0 ? jsonNumber(cc.refineWorkCap) : Json(nullptr)},
            {"capped_runs", cc.refineCappedRuns}, {"realisations", cc.refineRealisations},
            {"rejected_by_margin", cc.refineRejectedByMargin},
            {"measure_realisations", cc.refineMeasureRealisations},
            {"check_mean_snr_db_before", cc.refineMeasureRealisations > 1 ? jsonNumber(cc.refineCheckMeanBeforeDb) : Json(nullptr)},
            {"check_mean_snr_db_after", cc.refineMeasureRealisations > 1 ? jsonNumber(cc.refineCheckMeanAfterDb) : Json(nullptr)},
            {"held_out_mean_snr_db_before", cc.refineMeasureRealisations > 1 && cc.refineHeldOutSamples > 0 ? jsonNumber(cc.refineHeldOutMeanBeforeDb) : Json(nullptr)},
            {"held_out_mean_snr_db_after", cc.refineMeasureRealisations > 1 && cc.refineHeldOutSamples > 0 ? jsonNumber(cc.refineHeldOutMeanAfterDb) : Json(nullptr)}};
    }
  }
  for (const auto& w : r.weights) {
    Json amax = Json::array(), scale = Json::array();
    for (float a : w.amax) amax.push_back(jsonNumber(a));
    for (float s : w.scale) scale.push_back(jsonNumber(s));
    tensors.push_back({{"name", g.value(w.value).name}, {"amax", amax}, {"scale", scale}, {"axis", w.axis},
                       {"method", "max"}, {"node", g.nodes[(size_t)w.node].name},
                       {"enabled", r.plan.nodes[(size_t)w.node].quantized}});
  }
  j["tensors"] = tensors;
  j["warnings"] = ctx.warnings;
  if (ctx.peakRss && r.peakRssBytes > 0) j["peak_rss_bytes"] = r.peakRssBytes;
  if (ctx.peakRss && r.memoryBudgetBytes > 0) {
    j["memory_budget_bytes"] = r.memoryBudgetBytes;
    j["streamed"] = r.streamed;
  }
  if (!ctx.fallback.empty() || !std::isnan(ctx.targetSnrDb) || !std::isnan(ctx.targetAgreement)) {
    const bool agreement = !std::isnan(ctx.targetAgreement);
    Json steps = Json::array();
    for (const auto& s : ctx.fallback) {
      Json snr = Json::array();
      for (double v : s.outputSnrDb) snr.push_back(jsonNumber(v));
      Json step{{"excluded", g.nodes[(size_t)s.excluded].name}, {"outputs_snr_db", snr}};
      if (agreement) {
        Json agree = Json::array();
        for (double v : s.outputAgreement) agree.push_back(jsonNumber(v));
        step["outputs_agreement"] = agree;
      }
      steps.push_back(step);
    }
    const bool snrReached = std::isnan(ctx.targetSnrDb) || r.worstOutputSnrDb() >= ctx.targetSnrDb;
    const bool agreementReached = !agreement || r.worstAgreement() >= ctx.targetAgreement;
    j["fallback"] = {{"target_snr_db", jsonNumber(ctx.targetSnrDb)}, {"steps", steps}, {"reached", snrReached && agreementReached}};
    if (agreement) j["fallback"]["target_agreement"] = jsonNumber(ctx.targetAgreement);
    if (ctx.fallbackCurve) {
      j["fallback"]["quantizable_nodes"] = ctx.fallbackCurve->quantizable;
      j["fallback"]["candidates"] = ctx.fallbackCurve->candidates;
      j["fallback"]["chosen_point"] = ctx.fallbackCurve->chosen;
      const FallbackCurve& c = *ctx.fallbackCurve;
      j["fallback"]["forward_point"] = c.forwardChosen >= 0 ? Json(c.forwardChosen) : Json(nullptr);
      Json back = Json::array();
      for (NodeId id : c.reincluded) back.push_back(g.nodes[(size_t)id].name);
      j["fallback"]["reincluded"] = back;
      j["fallback"]["pair_steps"] = c.pairSteps;
      j["fallback"]["pairs_taken"] = c.pairsTaken;
      // --fallback-recalibrate on: calibrated again at the chosen point, then the backward pass again.
      if (c.recalibrated) {
        Json again = Json::array();
        for (NodeId id : c.reincludedAfterRecalibration) again.push_back(g.nodes[(size_t)id].name);
        j["fallback"]["recalibration"] = {{"worst_output_snr_db_before", jsonNumber(c.recalibratedBeforeDb)},
                                          {"worst_output_snr_db_after", jsonNumber(c.recalibratedAfterDb)},
                                          {"reincluded", again}};
      }
      j["fallback"]["curve"] = fallbackCurveJson(g, *ctx.fallbackCurve);
    }
  }
  if (ctx.remedies) j["remedies"] = remediesJson(g, r, *ctx.remedies);
  if (ctx.remedyChoice) j["remedy_choice"] = remedyChoiceJson(*ctx.remedyChoice);
  return j.dump(2) + "\n";
}

std::string layersCsv(const Model& model, const AnalysisResult& r) {
  const Graph& g = model.graph;
  std::ostringstream out;
  out << "index,node,op_type,quantizable,quantized,reason,graphwise_snr_db,graphwise_cosine,graphwise_mse,"
         "graphwise_max_abs,layerwise_snr_db,layerwise_cosine,layerwise_mse,layerwise_max_abs,weight_snr_db,"
         "activation_snr_db,sensitivity_snr_db\n";
  int idx = 0;
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    const NodeResult& nr = r.nodes[(size_t)id];
    const NodeQuantState& st = r.plan.nodes[(size_t)id];
    auto m = [&](bool has, const ErrorMetrics& e) {
      return has ? fmtG(e.snrDb) + "," + fmtG(e.cosine) + "," + fmtG(e.mse) + "," + fmtG(e.maxAbs) : std::string(",,,");
    };
    out << idx++ << "," << csvField(n.name) << "," << n.opType << "," << (st.quantizable ? 1 : 0) << ","
        << (st.quantized ? 1 : 0) << "," << csvField(st.quantized ? "" : st.reason) << ","
        << m(nr.hasGraphwise, nr.graphwise) << "," << m(nr.hasLayerwise, nr.layerwise) << "," << fmtG(nr.weightSnrDb)
        << "," << fmtG(nr.activationSnrDb) << "," << fmtG(nr.sensitivitySnrDb) << "\n";
  }
  return out.str();
}

std::string reportHtml(const Model& model, const AnalysisResult& r, const ReportContext& ctx) {
  const Graph& g = model.graph;
  std::ostringstream h;
  h << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Quantscope report: " << htmlEscape(model.path)
    << "</title><style>"
       "body{font-family:system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
       "table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}"
       "th{background:#f3f3f3;cursor:pointer;position:sticky;top:0}td.l{text-align:left}tr.off td{color:#999}"
       ".bad{background:#fbe3e3}.mid{background:#fdf3d9}.good{background:#e6f4e6}.chart{border:1px solid #ddd}"
       "</style></head><body>";
  h << "<h1>Quantscope report</h1><p>Model <b>" << htmlEscape(ctx.modelPath.empty() ? model.path : ctx.modelPath)
    << "</b> &middot; mode " << quantModeName(r.plan.mode) << " &middot; calibration "
    << calibMethodName(r.calibration.method) << " &middot; " << r.samples << " samples</p>";
  for (const auto& w : ctx.warnings) h << "<p class=\"mid\">warning: " << htmlEscape(w) << "</p>";
  auto cls = [](double snr) {
    if (std::isnan(snr)) return "";
    return snr < 10 ? "bad" : snr < 25 ? "mid" : "good";
  };
  h << "<h2>Outputs</h2><table class=\"sortable\"><tr><th>output</th><th>SNR dB</th><th>cosine</th><th>MSE</th><th>max abs</th><th>agreement with float</th></tr>";
  for (const auto& o : r.outputs) {
    h << "<tr><td class=l>" << htmlEscape(o.name) << "</td><td class=\"" << cls(o.metrics.snrDb) << "\">"
      << reportNumber(o.metrics.snrDb) << "</td><td>" << fmtG(o.metrics.cosine) << "</td><td>" << fmtG(o.metrics.mse) << "</td><td>"
      << fmtG(o.metrics.maxAbs) << "</td><td class=l>" << htmlEscape(describeAgreement(o.agreement)) << "</td></tr>";
  }
  h << "</table>";
  if (!ctx.fallback.empty()) {
    const bool agreement = !std::isnan(ctx.targetAgreement);
    std::string target = std::isnan(ctx.targetSnrDb) ? "" : reportNumber(ctx.targetSnrDb) + " dB";
    if (agreement) target += (target.empty() ? "agreement " : ", agreement ") + reportNumber(ctx.targetAgreement, 3);
    h << "<h2>Automatic fallback (target " << target << ")</h2><table><tr><th>step</th><th>excluded</th><th>worst output SNR dB</th>"
      << (agreement ? "<th>worst agreement</th>" : "") << "</tr>";
    int k = 1;
    for (const auto& s : ctx.fallback) {
      double worst = INFINITY;
      for (double v : s.outputSnrDb) worst = std::min(worst, v);
      h << "<tr><td>" << k++ << "</td><td class=l>" << htmlEscape(g.nodes[(size_t)s.excluded].name) << "</td><td>"
        << reportNumber(worst) << "</td>" << (agreement ? "<td>" + reportNumber(s.worstAgreement(), 3) + "</td>" : "") << "</tr>";
    }
    h << "</table>";
  }
  if (ctx.fallbackCurve) h << fallbackCurveHtml(g, *ctx.fallbackCurve, ctx.targetSnrDb, ctx.targetAgreement);
  if (ctx.remedyChoice) h << remedyChoiceHtml(*ctx.remedyChoice);
  if (ctx.remedies) h << remediesHtml(g, r, *ctx.remedies);
  // Per-layer SNR chart in topological order: graph-wise (blue) and layer-wise (orange), quantized nodes only.
  std::vector<NodeId> q;
  for (NodeId id : g.topoOrder)
    if (r.plan.nodes[(size_t)id].quantizable) q.push_back(id);
  const int W = 1100, H = 280, pad = 40;
  double lo = 0, hi = 10;
  for (NodeId id : q) {
    for (double v : {r.nodes[(size_t)id].graphwise.snrDb, r.nodes[(size_t)id].layerwise.snrDb}) {
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  }
  hi = std::ceil(hi / 10) * 10;
  auto y = [&](double v) {
    if (!std::isfinite(v)) v = v > 0 ? hi : lo;
    return H - pad - (v - lo) / (hi - lo) * (H - 2 * pad);
  };
  h << "<h2>Per-layer SNR (quantizable nodes, topological order)</h2><svg class=chart width=\"" << W << "\" height=\"" << H
    << "\" xmlns=\"http://www.w3.org/2000/svg\">";
  for (double t = lo; t <= hi + 1e-9; t += 10) {
    h << "<line x1=\"" << pad << "\" x2=\"" << W - 10 << "\" y1=\"" << y(t) << "\" y2=\"" << y(t)
      << "\" stroke=\"#eee\"/><text x=\"4\" y=\"" << y(t) + 4 << "\" font-size=\"10\">" << t << " dB</text>";
  }
  auto series = [&](bool layerwise, const char* color) {
    h << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < q.size(); ++i) {
      const NodeResult& nr = r.nodes[(size_t)q[i]];
      double v = layerwise ? nr.layerwise.snrDb : nr.graphwise.snrDb;
      double x = pad + (q.size() > 1 ? (double)i / (double)(q.size() - 1) : 0.5) * (W - pad - 10);
      h << x << "," << y(v) << " ";
    }
    h << "\"/>";
  };
  series(false, "#2b6cb0");
  series(true, "#dd6b20");
  h << "<text x=\"" << W - 260 << "\" y=\"16\" font-size=\"11\" fill=\"#2b6cb0\">graph-wise</text><text x=\"" << W - 180
    << "\" y=\"16\" font-size=\"11\" fill=\"#dd6b20\">layer-wise</text></svg>";

  h << "<h2>Layers</h2><p>Click a column header to sort.</p><table class=\"sortable\"><tr><th>#</th><th>node</th><th>op</th>"
       "<th>quantized</th><th>graph-wise SNR</th><th>layer-wise SNR</th><th>sensitivity SNR</th><th>weight SNR</th>"
       "<th>activation SNR</th><th>cosine</th><th>reason</th></tr>";
  int idx = 0;
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    const NodeResult& nr = r.nodes[(size_t)id];
    const NodeQuantState& st = r.plan.nodes[(size_t)id];
    h << "<tr" << (st.quantized ? "" : " class=off") << "><td>" << idx++ << "</td><td class=l>" << htmlEscape(n.name)
      << "</td><td class=l>" << htmlEscape(n.opType) << "</td><td>" << (st.quantized ? "yes" : "no") << "</td><td class=\""
      << cls(nr.hasGraphwise ? nr.graphwise.snrDb : NAN) << "\">" << (nr.hasGraphwise ? reportNumber(nr.graphwise.snrDb) : "")
      << "</td><td class=\"" << cls(nr.hasLayerwise ? nr.layerwise.snrDb : NAN) << "\">"
      << (nr.hasLayerwise ? reportNumber(nr.layerwise.snrDb) : "") << "</td><td class=\"" << cls(nr.sensitivitySnrDb) << "\">"
      << reportNumber(nr.sensitivitySnrDb) << "</td><td>" << reportNumber(nr.weightSnrDb) << "</td><td>" << reportNumber(nr.activationSnrDb)
      << "</td><td>" << (nr.hasGraphwise ? fmtG(nr.graphwise.cosine) : "") << "</td><td class=l>"
      << htmlEscape(st.quantized ? "" : st.reason) << "</td></tr>";
  }
  h << "</table><script>"
       "document.querySelectorAll('table.sortable').forEach(function(t){var hs=t.rows[0].cells;"
       "for(let c=0;c<hs.length;c++){hs[c].onclick=function(){var rows=Array.from(t.rows).slice(1);"
       "var asc=t.dataset.col==c&&t.dataset.dir!='asc';t.dataset.col=c;t.dataset.dir=asc?'asc':'desc';"
       "function v(r){var s=r.cells[c].textContent;if(s=='inf')return Infinity;if(s=='-inf')return -Infinity;"
       "var f=parseFloat(s);return isNaN(f)?s:f;}"
       "rows.sort(function(a,b){var x=v(a),y=v(b);if(typeof x!=typeof y){x=String(x);y=String(y);}"
       "return (x<y?-1:x>y?1:0)*(asc?1:-1);});rows.forEach(function(r){t.appendChild(r);});};}});"
       "</script></body></html>\n";
  return h.str();
}

}  // namespace qs
