#include "core/exec/residual_rewrites.h"

#include "core/exec/rewrite_queries.h"
#include "core/kernels/conv.h"
#include "core/kernels/normalization.h"

namespace qs {

bool softmaxOverLastAxis(const Graph& g, const Node& n, ValueId v, int64_t opset) {
  if (n.inputs.size() != 1 || n.inputs[0] != v) return false;
  const Attribute* a = n.attr("axis");
  const int64_t axis = a && a->type == Attribute::Type::Int ? a->i : (opset >= 13 ? -1 : 1);
  if (axis == -1) return true;
  const auto& shape = g.value(v).shape;
  return shape && axis == (int64_t)shape->size() - 1;
}

namespace {

using rewrite::fixedConstant;

size_t liveConsumers(const Graph& g, ValueId v, const std::vector<char>& removed) {
  size_t n = 0;
  for (NodeId c : g.value(v).consumers) n += removed[(size_t)c] ? 0 : 1;
  return n;
}

}  // namespace

bool addsBeforeLastAxisSoftmax(const Graph& g, const Node& add, size_t other, const std::vector<char>& removed,
                               int64_t opset) {
  if (add.inputs.size() != 2 || other > 1 || add.outputs.size() != 1 || add.inputs[other] == add.inputs[1 - other])
    return false;
  const DType t = g.value(add.inputs[other]).dtype;
  const ValueId sum = add.outputs[0];
  if ((t != DType::Float && t != DType::Undefined) || g.value(sum).isGraphOutput) return false;
  NodeId sid = -1;
  for (NodeId c : g.value(sum).consumers) {
    if (removed[(size_t)c]) continue;
    if (sid >= 0) return false;
    sid = c;
  }
  if (sid < 0) return false;
  const Node& sn = g.nodes[(size_t)sid];
  for (size_t o = 1; o < sn.outputs.size(); ++o)
    if (sn.outputs[o] != kNoValue) return false;
  return sn.opType == "Softmax" && sn.domain.empty() && !sn.outputs.empty() && softmaxOverLastAxis(g, sn, sum, opset);
}

int fuseSkipLayerNorms(Graph& g, std::vector<char>& removed, std::vector<std::vector<NodeId>>& absorbed) {
  int fused = 0;
  for (NodeId lnId : g.topoOrder) {
    if (removed[(size_t)lnId]) continue;
    const Node& ln = g.nodes[(size_t)lnId];
    if (ln.opType != "LayerNormalization" || !(ln.domain.empty() || ln.domain == kFusedDomain)) continue;
    if (ln.inputs.size() < 2 || ln.inputs[0] == kNoValue || !fixedConstant(g, ln.inputs[1]) ||
        (ln.inputs.size() > 2 && ln.inputs[2] != kNoValue && !fixedConstant(g, ln.inputs[2])) || ln.outputs.empty() ||
        ln.outputs[0] == kNoValue)
      continue;
    bool extraOutputs = false;  // Mean / InvStdDev read or graph outputs
    for (size_t o = 1; o < ln.outputs.size(); ++o)
      if (ln.outputs[o] != kNoValue)
        extraOutputs |= liveConsumers(g, ln.outputs[o], removed) > 0 || g.value(ln.outputs[o]).isGraphOutput;
    const Attribute* axis = ln.attr("axis");
    const Attribute* stash = ln.attr("stash_type");
    if (extraOutputs || (axis && (axis->type != Attribute::Type::Int || axis->i != -1)) || (stash && stash->i != 1))
      continue;
    const ValueId sum = ln.inputs[0];
    const NodeId addId = g.value(sum).producer;
    if (addId < 0 || removed[(size_t)addId]) continue;
    const Node& add = g.nodes[(size_t)addId];
    if (add.opType != "Add" || !add.domain.empty() || add.outputs.size() != 1 || add.outputs[0] != sum ||
        add.inputs.size() != 2 || add.inputs[0] == kNoValue || add.inputs[1] == kNoValue)
      continue;
    const bool sumRead = g.value(sum).isGraphOutput || liveConsumers(g, sum, removed) != 1;
    const Attribute* eps = ln.attr("epsilon");
    Attribute e;
    e.type = Attribute::Type::Float;
    e.f = eps && eps->type == Attribute::Type::Float ? eps->f : 1e-5f;
    const std::vector<ValueId> norm(ln.inputs.begin() + 1, ln.inputs.end());
    const ValueId y = ln.outputs[0];
    removed[(size_t)lnId] = 1;
    Node& f = g.nodes[(size_t)addId];
    f.opType = kSkipLayerNormOp;
    f.domain = kFusedDomain;
    f.inputs.insert(f.inputs.end(), norm.begin(), norm.end());
    f.outputs = {y};
    if (sumRead) f.outputs.push_back(sum);
    f.attributes.clear();
    f.attributes["epsilon"] = e;
    for (ValueId v : norm)
      if (v != kNoValue) g.value(v).consumers.push_back(addId);
    g.value(y).producer = addId;
    absorbed[(size_t)addId] = {lnId};
    ++fused;
  }
  return fused;
}

}  // namespace qs
