#include "core/analysis/node_paths.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/kernels/depthwise_planes.h"

namespace qs {

namespace {

// A scalar float constant feeding an elementwise op (its value in c).
bool scalarConstant(const Graph& g, ValueId v, float& c) {
  const auto& k = g.value(v).constant;
  if (!k || k->dtype() != DType::Float || k->numel() != 1) return false;
  c = k->data<float>()[0];
  return true;
}

// The op `id` as a ChainOp over `values` (chain values so far), or false.
bool asChainOp(const Graph& g, const QuantState& s, NodeId id, const std::vector<ValueId>& values, ChainOp& op) {
  const Node& n = g.nodes[(size_t)id];
  if (!s.pointsByNode[(size_t)id].empty() || n.outputs.size() != 1 || n.outputs[0] == kNoValue) return false;
  // Input i as a chain value (its index in `values`) or a scalar constant (index -1, value c).
  auto operand = [&](size_t i, int& index, float& c) {
    if (i >= n.inputs.size() || n.inputs[i] == kNoValue) return false;
    index = -1;
    if (g.value(n.inputs[i]).constant) return scalarConstant(g, n.inputs[i], c);
    auto it = std::find(values.begin(), values.end(), n.inputs[i]);
    index = (int)(it - values.begin());
    return it != values.end();
  };
  op = ChainOp{};
  const std::string& t = n.opType;
  if (t == "Add" || t == "Sub" || t == "Mul" || t == "Div") {
    op.kind = t == "Add" ? ChainOp::kAdd : t == "Sub" ? ChainOp::kSub : t == "Mul" ? ChainOp::kMul : ChainOp::kDiv;
    if (n.inputs.size() != 2 || !operand(0, op.a, op.ca) || !operand(1, op.b, op.cb)) return false;
    return op.a >= 0 || op.b >= 0;
  }
  if (t == "Clip") {  // bounds as constant inputs (opset 11+), not as attributes
    if (n.attr("min") || n.attr("max") || n.inputs.size() > 3 || !operand(0, op.a, op.ca) || op.a < 0) return false;
    op.kind = ChainOp::kClip;
    op.lo = std::numeric_limits<float>::lowest();
    op.hi = std::numeric_limits<float>::max();
    if (n.inputs.size() > 1 && n.inputs[1] != kNoValue && !scalarConstant(g, n.inputs[1], op.lo)) return false;
    return !(n.inputs.size() > 2 && n.inputs[2] != kNoValue && !scalarConstant(g, n.inputs[2], op.hi));
  }
  return false;
}

// The chain headed by `head` over its first non-constant input, its members marked 2 in
// `member` (nodes in a chain already are 1 and not taken), or null.
std::shared_ptr<ElementwiseChain> growChain(const Graph& g, const QuantState& s, NodeId head,
                                            const std::vector<int>& topoIndex, std::vector<char>& member) {
  constexpr size_t kMaxChainOps = 32;
  const Node& hn = g.nodes[(size_t)head];
  // The head's activation: its first non-constant input.
  ValueId x = kNoValue;
  for (ValueId v : hn.inputs)
    if (v != kNoValue && !g.value(v).constant) {
      x = v;
      break;
    }
  if (x == kNoValue) return nullptr;
  auto chain = std::make_shared<ElementwiseChain>();
  chain->input = x;
  std::vector<ValueId> values = {x};
  ChainOp op;
  NodeId node = head;
  if (!asChainOp(g, s, head, values, op)) return nullptr;
  for (;;) {
    chain->ops.push_back(op);
    chain->nodes.push_back(node);
    member[(size_t)node] = 2;
    values.push_back(g.nodes[(size_t)node].outputs[0]);
    if (chain->ops.size() == kMaxChainOps) break;
    // The next member: the earliest consumer of a chain value that is a chain op over them.
    NodeId next = -1;
    ChainOp nextOp;
    for (ValueId v : values)
      for (NodeId c : g.value(v).consumers) {
        if (member[(size_t)c] || (next >= 0 && topoIndex[(size_t)c] >= topoIndex[(size_t)next])) continue;
        ChainOp candidate;
        if (asChainOp(g, s, c, values, candidate)) {
          next = c;
          nextOp = candidate;
        }
      }
    if (next < 0) break;
    op = nextOp;
    node = next;
  }
  return chain;
}

}  // namespace

std::vector<AffineOp> findAffineOps(const Graph& g, const QuantState& s) {
  std::vector<AffineOp> affine(g.nodes.size(), AffineOp{});
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const std::string& op = n.opType;
    if ((op != "Add" && op != "Sub" && op != "Mul" && op != "Div") || n.inputs.size() != 2 || n.outputs.empty() ||
        !s.pointsByNode[i].empty() || n.inputs[0] == kNoValue || n.inputs[1] == kNoValue)
      continue;
    const bool const0 = (bool)g.value(n.inputs[0]).constant, const1 = (bool)g.value(n.inputs[1]).constant;
    float c = 0;
    if (const0 == const1 || !scalarConstant(g, n.inputs[const0 ? 0 : 1], c) || !std::isfinite(c)) continue;
    AffineOp a;
    a.input = const0 ? 1 : 0;
    if (op == "Add") a.b = c;
    else if (op == "Mul") a.a = c;
    else if (op == "Sub") {
      a.a = a.input == 0 ? 1 : -1;
      a.b = a.input == 0 ? -c : c;
    } else {
      if (a.input != 0 || c == 0) continue;  // c / x is not affine
      a.a = 1.0 / c;
    }
    affine[i] = a;
  }
  return affine;
}

std::vector<signed char> findBinaryOps(const Graph& g, const std::vector<AffineOp>& affine) {
  std::vector<signed char> kind(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if ((!n.domain.empty() && n.domain != "ai.onnx") || n.inputs.size() != 2 || n.outputs.size() != 1 || n.inputs[0] == kNoValue ||
        n.inputs[1] == kNoValue || n.outputs[0] == kNoValue || (i < affine.size() && affine[i].input >= 0))
      continue;
    if (n.opType == "Add") kind[i] = ChainOp::kAdd + 1;
    else if (n.opType == "Sub") kind[i] = ChainOp::kSub + 1;
    else if (n.opType == "Mul") kind[i] = ChainOp::kMul + 1;
    else if (n.opType == "Div") kind[i] = ChainOp::kDiv + 1;
  }
  return kind;
}

std::vector<std::shared_ptr<const ElementwiseChain>> findElementwiseChains(const Graph& g, const QuantState& s) {
  std::vector<std::shared_ptr<const ElementwiseChain>> chainAt(g.nodes.size());
  std::vector<int> topoIndex(g.nodes.size(), 0);
  for (size_t k = 0; k < g.topoOrder.size(); ++k) topoIndex[(size_t)g.topoOrder[k]] = (int)k;
  std::vector<char> member(g.nodes.size(), 0);  // in a chain (1) or in the one being built (2)
  for (NodeId head : g.topoOrder) {
    if (member[(size_t)head]) continue;
    auto chain = growChain(g, s, head, topoIndex, member);
    if (!chain) continue;
    const bool keep = chain->ops.size() >= 2;  // one op: nothing to fuse
    for (NodeId node : chain->nodes) {
      const Value& v = g.value(g.nodes[(size_t)node].outputs[0]);
      bool outside = v.isGraphOutput;
      for (NodeId c : v.consumers) outside = outside || member[(size_t)c] != 2;
      chain->stored.push_back(outside ? 1 : 0);
    }
    for (NodeId node : chain->nodes) member[(size_t)node] = keep ? 1 : 0;
    if (keep) chainAt[(size_t)head] = std::move(chain);
  }
  return chainAt;
}

std::vector<std::shared_ptr<const DepthwiseNode>> findDepthwiseConvs(const Graph& g, const QuantPlan& plan,
                                                                      const QuantState& s) {
  std::vector<std::shared_ptr<const DepthwiseNode>> dwConv(g.nodes.size());
  for (size_t k = 0; k < plan.weights.size(); ++k) {
    const WeightPoint& w = plan.weights[k];
    const Node& n = g.nodes[(size_t)w.node];
    const Tensor& W = *g.value(w.value).constant;
    if (n.opType != "Conv" || w.inputIndex != 1 || w.axis != 0 || W.rank() < 3 || W.rank() > 4 || W.dim(1) != 1) continue;
    auto dw = std::make_shared<DepthwiseNode>();
    dw->weight = (int)k;
    dw->act = s.inputActPoint(w.node);
    if (dw->act == kNoValue) continue;
    KernelInit init{n, 0, g};
    AttrReader a(init);
    dw->attrs = readWindowAttrs(a, true);
    if (!a.ok() || dw->attrs.group != W.dim(0)) continue;
    dwConv[(size_t)w.node] = std::move(dw);
  }
  return dwConv;
}

std::vector<std::shared_ptr<const IntConvNode>> findIntConvs(const Graph& g, const QuantPlan& plan,
                                                             const QuantState& s) {
  std::vector<std::shared_ptr<const IntConvNode>> intConv(g.nodes.size());
  if (plan.mode != QuantMode::Int8 || std::string(qconvKernelName()) == "generic") return intConv;
  for (size_t k = 0; k < plan.weights.size(); ++k) {
    const WeightPoint& w = plan.weights[k];
    const Node& n = g.nodes[(size_t)w.node];
    const bool transposed = n.opType == "ConvTranspose";
    if (!(n.opType == "Conv" || transposed) || w.inputIndex != 1 || w.axis != (transposed ? 1 : 0)) continue;
    auto ic = std::make_shared<IntConvNode>();
    ic->act = s.inputActPoint(w.node);
    if (ic->act == kNoValue) continue;
    ic->conv = prepareIntConv(n, g, *g.value(w.value).constant, s.weights[k].scale);
    if (ic->conv) intConv[(size_t)w.node] = std::move(ic);
  }
  return intConv;
}

bool runIntConvNode(const QuantState& s, const IntConvNode& ic, std::span<const Tensor* const> inputs,
                    const QConvOutputs& out, int64_t referenceElements) {
  const ActivationQuant* act = s.activation(ic.act);
  return act && runIntConv(*ic.conv, act->scale, inputs, s.threads, out, referenceElements);
}

bool runDepthwiseNode(const QuantState& s, const DepthwiseNode& dw, std::span<const Tensor* const> inputs, Tensor* y,
                      const Tensor* ref, ErrorAccumulator* const sums[3]) {
  const ActivationQuant* act = s.activation(dw.act);
  if (!act) return false;
  DepthwiseQuant dq;
  dq.attrs = &dw.attrs;
  dq.inputScale = act->scale;
  dq.mode = s.mode;
  dq.quantizedWeights = &s.fakeWeights[(size_t)dw.weight];
  dq.threads = s.threads;
  return depthwisePlanes(dq, inputs, y, ref, sums);
}

std::vector<std::shared_ptr<const PackedMatMulWeight>> findPackedMatMulWeights(const Graph& g, const QuantState& s,
                                                                               bool dnnl) {
  std::vector<std::shared_ptr<const PackedMatMulWeight>> out(g.nodes.size());
  dnnl = dnnl && DnnlMatMul::preferred();
  for (size_t i = 0; i < g.nodes.size() && i < s.pointsByNode.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.opType != "MatMul" || !n.domain.empty() || n.inputs.size() != 2) continue;
    for (const PointRef& r : s.pointsByNode[i]) {
      if (r.inputIndex != 1 || r.weight < 0 || (size_t)r.weight >= s.fakeWeights.size()) continue;
      const Tensor& wq = s.fakeWeights[(size_t)r.weight];
      if (wq.dtype() != DType::Float || wq.rank() != 2 || wq.numel() == 0) break;
      auto pw = std::make_shared<PackedMatMulWeight>();
      pw->weight = r.weight;
      pw->source = wq;
      if (dnnl && PackedMatMulWeight::dnnlPays(wq.dim(0), wq.dim(1)))
        pw->dnnl = DnnlMatMul::create(wq.data<float>(), wq.dim(1), false, wq.dim(0), wq.dim(1), nullptr, 1.f, false);
      pw->panels = PackedPanels(wq.data<float>(), wq.dim(1), false, wq.dim(0), wq.dim(1));
      out[i] = std::move(pw);
      break;
    }
  }
  return out;
}

bool runPackedMatMul(const PackedMatMulWeight& pw, const Tensor& a, int threads, Tensor& y) {
  const int64_t K = pw.panels.rows(), N = pw.panels.cols();
  if (a.dtype() != DType::Float || a.rank() < 2 || a.shape().back() != K || K <= 0) return false;
  const int64_t M = a.numel() / K;
  if (M <= 2) return false;  // MatMulKernel's small-rows GEMM sums in another order
  Shape ys(a.shape().begin(), a.shape().end() - 1);
  ys.push_back(N);
  y = Tensor(DType::Float, ys);
  sgemmPacked(false, M, 1.f, a.data<float>(), K, pw.panels, false, y.data<float>(), N, threads);
  return true;
}

}  // namespace qs
