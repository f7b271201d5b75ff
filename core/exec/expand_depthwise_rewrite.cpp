// The 1x1 expansion and the depthwise conv after it as one BlockedExpandDepthwise: see expand_depthwise_rewrite.h.
#include "core/exec/expand_depthwise_rewrite.h"

#include <cstdlib>
#include <string>

#include "core/kernels/blocked_layout.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/depthwise_blocked.h"
#include "core/kernels/expand_depthwise_blocked.h"

namespace qs {

namespace {

bool envIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}

const Tensor* constantOf(const Graph& g, const Node& n, size_t i) {
  if (n.inputs.size() <= i || n.inputs[i] == kNoValue) return nullptr;
  const Value& v = g.value(n.inputs[i]);
  if (!v.constant || v.isGraphInput || v.isOverridable) return nullptr;
  return &*v.constant;
}

int64_t intAttr(const Node& n, const char* key, int64_t def) {
  const Attribute* a = n.attr(key);
  return a && a->type == Attribute::Type::Int ? a->i : def;
}

// Every entry of the ints attribute `key` equal to `value` (absent: the default, which is).
bool allInts(const Node& n, const char* key, int64_t value) {
  const Attribute* a = n.attr(key);
  if (!a) return true;
  if (a->type != Attribute::Type::Ints) return false;
  for (int64_t v : a->ints)
    if (v != value) return false;
  return true;
}

bool noAutoPad(const Node& n) {
  const Attribute* a = n.attr("auto_pad");
  return !a || (a->type == Attribute::Type::String && (a->s == "NOTSET" || a->s == "VALID"));
}

// A BlockedConv of nChw16c reading a blocked input, without a residual, and its post-ops.
bool blockedConv16(const Graph& g, const Node& n, std::vector<FusedActivation>& acts) {
  if (n.opType != kBlockedConvOp || n.domain != kFusedDomain || n.outputs.size() != 1) return false;
  if (n.inputs.size() > 3 && n.inputs[3] != kNoValue) return false;
  if (intAttr(n, "block", 8) != 16 || intAttr(n, "plain_input", 0) != 0) return false;
  if (!constantOf(g, n, 1) || (n.inputs.size() > 2 && n.inputs[2] != kNoValue && !constantOf(g, n, 2))) return false;
  const Attribute* names = n.attr("activations");
  const Attribute* params = n.attr("activation_params");
  return parseFusedActivations(names ? names->strings : std::vector<std::string>{},
                               params ? params->floats : std::vector<float>{}, acts)
      .isOk();
}

}  // namespace

Status fuseExpandDepthwise(Model& model, std::vector<NodeId>& origin, std::vector<std::vector<NodeId>>& absorbed,
                           int* fused) {
  int count = 0;
  if (fused) *fused = 0;
  if (envIs("QS_EXPAND_DW", "0") || envIs("QS_CONV1X1", "dnnl") || envIs("QS_DW", "dnnl") ||
      !Conv1x1Blocked::available() || !DepthwiseBlocked::available())
    return Status::ok();
  Graph& g = model.graph;
  const size_t n = g.nodes.size();
  std::vector<NodeId> pairOf(n, -1);  // the 1x1 -> its depthwise conv
  std::vector<char> gone(n, 0);
  for (NodeId a = 0; a < (NodeId)n; ++a) {
    const Node& A = g.nodes[(size_t)a];
    std::vector<FusedActivation> actsA, actsD;
    if (gone[(size_t)a] || !blockedConv16(g, A, actsA) || !Conv1x1Blocked::supported(actsA, false)) continue;
    const Tensor& W1 = *constantOf(g, A, 1);
    if (W1.rank() != 4 || W1.dim(2) != 1 || W1.dim(3) != 1 || intAttr(A, "group", 1) != 1 || !allInts(A, "strides", 1) ||
        !allInts(A, "pads", 0) || !allInts(A, "dilations", 1) || !noAutoPad(A))
      continue;
    const Value& mid = g.value(A.outputs[0]);
    if (mid.isGraphOutput || mid.consumers.size() != 1) continue;
    const NodeId d = mid.consumers[0];
    const Node& D = g.nodes[(size_t)d];
    if (gone[(size_t)d] || pairOf[(size_t)d] >= 0 || !blockedConv16(g, D, actsD) ||
        !DepthwiseBlocked::supported(actsD) || D.inputs[0] != A.outputs[0])
      continue;
    const Tensor& Wd = *constantOf(g, D, 1);
    if (Wd.rank() != 4 || Wd.dim(1) != 1 || Wd.dim(0) != W1.dim(0) || intAttr(D, "group", 1) != Wd.dim(0) ||
        !allInts(D, "dilations", 1))
      continue;
    pairOf[(size_t)a] = d;
    gone[(size_t)d] = 1;
    ++count;
  }
  if (count == 0) return Status::ok();
  std::vector<Node> nodes;
  std::vector<NodeId> newOrigin;
  std::vector<std::vector<NodeId>> newAbsorbed;
  for (NodeId id = 0; id < (NodeId)n; ++id) {
    if (gone[(size_t)id]) continue;
    const NodeId d = pairOf[(size_t)id];
    if (d < 0) {
      nodes.push_back(std::move(g.nodes[(size_t)id]));
      newOrigin.push_back(origin[(size_t)id]);
      newAbsorbed.push_back(std::move(absorbed[(size_t)id]));
      continue;
    }
    const Node& A = g.nodes[(size_t)id];
    const Node& D = g.nodes[(size_t)d];
    Node f;
    f.name = A.name + "+" + D.name;
    f.opType = kBlockedExpandDepthwiseOp;
    f.domain = kFusedDomain;
    f.inputs = {A.inputs[0], A.inputs[1], A.inputs.size() > 2 ? A.inputs[2] : kNoValue, D.inputs[1],
                D.inputs.size() > 2 ? D.inputs[2] : kNoValue};
    f.outputs = D.outputs;
    f.attributes = D.attributes;
    f.attributes.erase("residual_relu");
    for (const char* key : {"activations", "activation_params"})
      if (const Attribute* at = A.attr(key)) f.attributes[std::string("expand_") + key] = *at;
    nodes.push_back(std::move(f));
    newOrigin.push_back(origin[(size_t)id]);
    std::vector<NodeId> abs = std::move(absorbed[(size_t)id]);
    abs.push_back(origin[(size_t)d]);
    abs.insert(abs.end(), absorbed[(size_t)d].begin(), absorbed[(size_t)d].end());
    newAbsorbed.push_back(std::move(abs));
  }
  g.nodes = std::move(nodes);
  origin = std::move(newOrigin);
  absorbed = std::move(newAbsorbed);
  if (fused) *fused = count;
  return g.finalize(model.path + " (expansions with their depthwise convs)");
}

}  // namespace qs
