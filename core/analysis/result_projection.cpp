#include "core/analysis/result_projection.h"

#include <unordered_map>

namespace qs {

std::vector<NodeId> nodesByName(const Graph& to, const Graph& from) {
  std::vector<NodeId> out(to.nodes.size(), -1);
  if (&to == &from) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = (NodeId)i;
    return out;
  }
  std::unordered_map<std::string, NodeId> ids;
  for (NodeId id = 0; id < (NodeId)from.nodes.size(); ++id) ids.emplace(from.nodes[(size_t)id].name, id);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto it = ids.find(to.nodes[i].name);
    if (it != ids.end()) out[i] = it->second;
  }
  return out;
}

bool sameNodeIds(const Graph& shown, const Graph& run) {
  if (&shown == &run) return true;
  if (shown.nodes.size() != run.nodes.size()) return false;
  for (size_t i = 0; i < shown.nodes.size(); ++i)
    if (shown.nodes[i].name != run.nodes[i].name) return false;
  return true;
}

namespace {

// The shown node's input in slot `index` (kNoValue when it has none there).
ValueId shownInput(const Graph& shown, NodeId node, size_t index) {
  const Node& n = shown.nodes[(size_t)node];
  return index < n.inputs.size() ? n.inputs[index] : kNoValue;
}

}  // namespace

AnalysisResult projectResult(const AnalysisResult& r, const Graph& run, const Graph& shown) {
  const std::vector<NodeId> runOf = nodesByName(shown, run);
  std::vector<NodeId> shownOf(run.nodes.size(), -1);
  for (size_t s = 0; s < runOf.size(); ++s)
    if (runOf[s] >= 0) shownOf[(size_t)runOf[s]] = (NodeId)s;

  // Run values to shown values: the points' slots first (a smoothed input is renamed in the run),
  // then every other tensor by name.
  std::unordered_map<ValueId, ValueId> valueOf;
  for (const ActivationPoint& p : r.plan.activations)
    if (p.node >= 0 && (size_t)p.node < shownOf.size() && shownOf[(size_t)p.node] >= 0)
      valueOf.emplace(p.value, shownInput(shown, shownOf[(size_t)p.node], p.inputIndex));
  for (ValueId v = 0; v < (ValueId)run.values.size(); ++v)
    if (!valueOf.count(v)) {
      const ValueId s = shown.findValue(run.values[(size_t)v].name);
      if (s != kNoValue) valueOf.emplace(v, s);
    }
  const auto mapValue = [&valueOf](ValueId v) {
    const auto it = valueOf.find(v);
    return it == valueOf.end() ? kNoValue : it->second;
  };

  AnalysisResult out;
  out.plan.mode = r.plan.mode;
  out.nodes.resize(shown.nodes.size());
  out.plan.nodes.resize(shown.nodes.size());
  for (size_t s = 0; s < runOf.size(); ++s) {
    const NodeId id = runOf[s];
    if (id < 0) {
      out.plan.nodes[s].reason = "not in the analysed model";
      continue;
    }
    if ((size_t)id < r.nodes.size()) out.nodes[s] = r.nodes[(size_t)id];
    if ((size_t)id < r.plan.nodes.size()) out.plan.nodes[s] = r.plan.nodes[(size_t)id];
  }
  for (ActivationPoint p : r.plan.activations) {
    if (p.node < 0 || (size_t)p.node >= shownOf.size() || shownOf[(size_t)p.node] < 0) continue;
    p.node = shownOf[(size_t)p.node];
    p.value = shownInput(shown, p.node, p.inputIndex);
    out.plan.activations.push_back(p);
  }
  for (WeightPoint p : r.plan.weights) {
    if (p.node < 0 || (size_t)p.node >= shownOf.size() || shownOf[(size_t)p.node] < 0) continue;
    p.node = shownOf[(size_t)p.node];
    p.value = shownInput(shown, p.node, p.inputIndex);
    out.plan.weights.push_back(p);
  }
  for (WeightQuant w : r.weights) {
    if (w.node < 0 || (size_t)w.node >= shownOf.size() || shownOf[(size_t)w.node] < 0) continue;
    w.node = shownOf[(size_t)w.node];
    w.value = shownInput(shown, w.node, w.inputIndex);
    out.weights.push_back(std::move(w));
  }
  for (const auto& [v, a] : r.activations)
    if (const ValueId s = mapValue(v); s != kNoValue) {
      ActivationQuant q = a;
      q.value = s;
      out.activations[s] = q;
    }
  for (const auto& [v, amax] : r.tensorRanges)
    if (const ValueId s = mapValue(v); s != kNoValue) out.tensorRanges[s] = amax;
  for (const auto& [v, c] : r.clipChoices)
    if (const ValueId s = mapValue(v); s != kNoValue) out.clipChoices[s] = c;
  out.outputs = r.outputs;
  for (OutputResult& o : out.outputs)
    if (const ValueId s = mapValue(o.value); s != kNoValue) o.value = s;
  out.samples = r.samples;
  out.calibration = r.calibration;
  out.peakRssBytes = r.peakRssBytes;
  out.streamed = r.streamed;
  out.memoryBudgetBytes = r.memoryBudgetBytes;
  return out;
}

}  // namespace qs
