#include "core/exec/model_info.h"

#include "core/exec/executor.h"

namespace qs {

int64_t lookupTableRows(const Graph& g, ValueId v) {
  for (NodeId n : g.value(v).consumers) {
    const Node& node = g.nodes[(size_t)n];
    if (node.opType != "Gather" || !node.domain.empty() || node.inputs.size() < 2 || node.inputs[1] != v) continue;
    const Attribute* axis = node.attr("axis");
    if (axis && axis->i != 0) continue;
    const Value& table = g.value(node.inputs[0]);
    if (table.constant && table.constant->rank() >= 1) return table.constant->shape()[0];
  }
  return -1;
}

std::string dimsToString(const std::optional<std::vector<Dim>>& dims) {
  if (!dims) return "?";
  std::string s = "[";
  for (size_t i = 0; i < dims->size(); ++i) {
    const Dim& d = (*dims)[i];
    s += (i ? "," : "") + (d.isFixed() ? std::to_string(d.value) : d.symbol.empty() ? std::string("?") : d.symbol);
  }
  return s + "]";
}

ModelInfo describeModel(const Model& model, const KernelRegistry& registry) {
  ModelInfo info;
  const Graph& g = model.graph;
  info.path = model.path;
  info.irVersion = model.irVersion;
  info.producerName = model.producerName;
  info.shapeInference = model.shapeInference;
  info.producerVersion = model.producerVersion;
  info.opsets = model.opsets;
  for (ValueId id : g.inputs) info.inputs.push_back({g.value(id).name, g.value(id).dtype, g.value(id).shape});
  for (ValueId id : g.outputs) info.outputs.push_back({g.value(id).name, g.value(id).dtype, g.value(id).shape});
  for (const Node& n : g.nodes) ++info.opHistogram[n.domain.empty() ? n.opType : n.domain + "::" + n.opType];
  info.nodeCount = (int64_t)g.nodes.size();
  for (const NestedNode& nn : nestedNodes(g)) {
    ++info.subgraphNodeCount;
    ++info.subgraphOpHistogram[nn.node->domain.empty() ? nn.node->opType : nn.node->domain + "::" + nn.node->opType];
  }
  for (const Value& v : g.values) {
    if (!v.constant) continue;
    info.parameterCount += v.constant->numel();
    info.parameterBytes += v.constant->byteSize();
  }
  info.unsupported = unsupportedOps(model, registry);
  return info;
}

}  // namespace qs
