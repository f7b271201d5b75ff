#include "core/quant/equalization.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace qs {

namespace {

enum class LayerKind { Conv, MatrixNK, MatrixKN };  // Conv W[O, I/G, ...]; Gemm transB B[N, K]; B[K, N]

// A layer whose weights (and bias) are constants that only it reads.
struct Layer {
  NodeId node = -1;
  LayerKind kind = LayerKind::Conv;
  ValueId weight = kNoValue, bias = kNoValue;
  int64_t group = 1;
};

bool isActivation(const Graph& g, ValueId id) { return id != kNoValue && !g.value(id).constant; }

std::optional<Layer> asLayer(const Graph& g, NodeId id) {
  const Node& n = g.nodes[(size_t)id];
  if (!n.domain.empty() || n.inputs.size() < 2 || n.outputs.empty() || n.outputs[0] == kNoValue) return std::nullopt;
  if (!isActivation(g, n.inputs[0]) || !isOwnFloatConstant(g, n.inputs[1])) return std::nullopt;
  Layer l;
  l.node = id;
  l.weight = n.inputs[1];
  const Tensor& w = *g.value(l.weight).constant;
  if (n.opType == "Conv") {
    if (w.rank() < 3 || n.inputs.size() > 3) return std::nullopt;
    const Attribute* group = n.attr("group");
    l.group = group ? group->i : 1;
    if (l.group < 1 || w.dim(0) % l.group != 0) return std::nullopt;
    l.kind = LayerKind::Conv;
  } else if (n.opType == "Gemm" || n.opType == "MatMul") {
    if (w.rank() != 2) return std::nullopt;
    const Attribute* ta = n.attr("transA");
    const Attribute* tb = n.attr("transB");
    if (ta && ta->i != 0) return std::nullopt;  // the channel axis of A must be its last
    l.kind = tb && tb->i != 0 ? LayerKind::MatrixNK : LayerKind::MatrixKN;
    if (n.opType == "MatMul" && n.inputs.size() != 2) return std::nullopt;
  } else {
    return std::nullopt;
  }
  if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
    if (!isOwnFloatConstant(g, n.inputs[2])) return std::nullopt;
    const Tensor& b = *g.value(n.inputs[2]).constant;
    const int64_t outC = l.kind == LayerKind::MatrixKN ? w.dim(1) : w.dim(0);
    if (b.rank() != 1 || b.dim(0) != outC) return std::nullopt;  // a broadcast Gemm C is left alone
    l.bias = n.inputs[2];
  }
  return l;
}

int64_t outChannels(const Layer& l, const Tensor& w) { return l.kind == LayerKind::MatrixKN ? w.dim(1) : w.dim(0); }
int64_t inChannels(const Layer& l, const Tensor& w) {
  if (l.kind == LayerKind::Conv) return w.dim(1) * l.group;
  return l.kind == LayerKind::MatrixKN ? w.dim(0) : w.dim(1);
}

// Calls fn(float&) on every weight of output channel `c`.
template <class W, class Fn>
void forOutChannel(const Layer& l, W& w, int64_t c, Fn fn) {
  auto* d = w.template data<float>();
  if (l.kind == LayerKind::MatrixKN) {
    const int64_t n = w.dim(1);
    for (int64_t k = 0; k < w.dim(0); ++k) fn(d[k * n + c]);
    return;
  }
  const int64_t block = w.numel() / w.dim(0);
  for (int64_t i = 0; i < block; ++i) fn(d[c * block + i]);
}

// Calls fn(float&) on every weight that reads input channel `c`.
template <class W, class Fn>
void forInChannel(const Layer& l, W& w, int64_t c, Fn fn) {
  auto* d = w.template data<float>();
  if (l.kind == LayerKind::MatrixNK) {
    const int64_t k = w.dim(1);
    for (int64_t n = 0; n < w.dim(0); ++n) fn(d[n * k + c]);
    return;
  }
  if (l.kind == LayerKind::MatrixKN) {
    const int64_t n = w.dim(1);
    for (int64_t j = 0; j < n; ++j) fn(d[c * n + j]);
    return;
  }
  const int64_t cpg = w.dim(1), opg = w.dim(0) / l.group;
  const int64_t spatial = w.numel() / (w.dim(0) * w.dim(1));
  const int64_t grp = c / cpg, local = c % cpg;
  for (int64_t o = grp * opg; o < (grp + 1) * opg; ++o)
    for (int64_t i = 0; i < spatial; ++i) fn(d[(o * cpg + local) * spatial + i]);
}

struct Pair {
  Layer first, second;
};

std::vector<Pair> findPairs(const Graph& g) {
  std::vector<Pair> pairs;
  for (NodeId id : g.topoOrder) {
    auto a = asLayer(g, id);
    if (!a) continue;
    NodeId next = soleConsumer(g, g.nodes[(size_t)id].outputs[0]);
    if (next < 0) continue;
    const Node& mid = g.nodes[(size_t)next];
    if (isPositiveHomogeneous(g, mid)) {
      if (mid.inputs[0] != g.nodes[(size_t)id].outputs[0] || mid.outputs.empty()) continue;
      next = soleConsumer(g, mid.outputs[0]);
      if (next < 0) continue;
    }
    auto b = asLayer(g, next);
    if (!b) continue;
    const bool conv1 = a->kind == LayerKind::Conv, conv2 = b->kind == LayerKind::Conv;
    if (conv1 != conv2) continue;  // Conv's channel axis is 1, a matrix's the last
    const Tensor& w1 = *g.value(a->weight).constant;
    const Tensor& w2 = *g.value(b->weight).constant;
    if (outChannels(*a, w1) != inChannels(*b, w2)) continue;
    pairs.push_back(Pair{*a, *b});
  }
  return pairs;
}

}  // namespace

bool isOwnFloatConstant(const Graph& g, ValueId id) {
  if (id == kNoValue) return false;
  const Value& v = g.value(id);
  return v.constant && v.constant->dtype() == DType::Float && !v.isOverridable &&
         v.consumers.size() == 1;
}

bool isPositiveHomogeneous(const Graph& g, const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.opType == "Relu") return true;
  if (n.opType != "Clip") return false;
  auto scalarOf = [&](size_t slot, float& out) -> int {  // -1 absent, 0 not a constant scalar, 1 read
    if (slot >= n.inputs.size() || n.inputs[slot] == kNoValue) return -1;
    const Value& v = g.value(n.inputs[slot]);
    if (!v.constant || v.constant->numel() != 1 || v.constant->dtype() != DType::Float) return 0;
    out = v.constant->data<float>()[0];
    return 1;
  };
  float lo = 0, hi = 0;
  if (n.inputs.size() > 1) {
    if (scalarOf(1, lo) != 1 || lo != 0.f) return false;
    const int max = scalarOf(2, hi);
    return max == -1 || (max == 1 && std::isinf(hi) && hi > 0);
  }
  const Attribute* mn = n.attr("min");
  const Attribute* mx = n.attr("max");
  return mn && mn->f == 0.f && (!mx || (std::isinf(mx->f) && mx->f > 0));
}

NodeId soleConsumer(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  if (val.isGraphOutput || val.consumers.size() != 1) return -1;
  return val.consumers[0];
}

std::vector<EqualizedPair> findEqualizablePairs(const Model& model) {
  std::vector<EqualizedPair> out;
  for (const Pair& p : findPairs(model.graph)) {
    const Tensor& w1 = *model.graph.value(p.first.weight).constant;
    out.push_back(EqualizedPair{p.first.node, p.second.node, (int)outChannels(p.first, w1), 0});
  }
  return out;
}

Result<EqualizationResult> equalizeCrossLayer(const Model& model, int maxIterations, double tolerance) {
  auto copy = std::make_shared<Model>(model);
  Graph& g = copy->graph;
  const std::vector<Pair> pairs = findPairs(g);
  EqualizationResult res;
  std::set<ValueId> changed;
  // Each changed constant gets its own buffer (the copy shares the input's).
  auto own = [&](ValueId id) -> Tensor& {
    Tensor& t = *g.value(id).constant;
    if (changed.insert(id).second) t = t.clone();
    return t;
  };
  std::vector<std::vector<double>> logScale(pairs.size());
  for (size_t p = 0; p < pairs.size(); ++p) {
    const Tensor& w1 = *g.value(pairs[p].first.weight).constant;
    logScale[p].assign((size_t)outChannels(pairs[p].first, w1), 0.0);
  }
  for (int it = 0; it < maxIterations && !pairs.empty(); ++it) {
    double worst = 0;
    for (size_t p = 0; p < pairs.size(); ++p) {
      const Layer& a = pairs[p].first;
      const Layer& b = pairs[p].second;
      Tensor& w1 = own(a.weight);
      Tensor& w2 = own(b.weight);
      Tensor* bias = a.bias != kNoValue ? &own(a.bias) : nullptr;
      const int64_t channels = outChannels(a, w1);
      for (int64_t c = 0; c < channels; ++c) {
        float r1 = 0, r2 = 0;
        forOutChannel(a, w1, c, [&](float& x) { r1 = std::max(r1, std::fabs(x)); });
        forInChannel(b, w2, c, [&](float& x) { r2 = std::max(r2, std::fabs(x)); });
        if (!(r1 > 0) || !(r2 > 0) || !std::isfinite(r1) || !std::isfinite(r2)) continue;
        const double s = std::sqrt((double)r1 * r2) / r2;
        if (!(s > 0) || !std::isfinite(s)) continue;
        const float inv = (float)(1.0 / s), fs = (float)s;
        forOutChannel(a, w1, c, [&](float& x) { x *= inv; });
        if (bias) bias->data<float>()[c] *= inv;
        forInChannel(b, w2, c, [&](float& x) { x *= fs; });
        logScale[p][(size_t)c] += std::log(s);
        worst = std::max(worst, std::fabs(s - 1.0));
      }
    }
    res.iterations = it + 1;
    if (worst <= tolerance) break;
  }
  for (size_t p = 0; p < pairs.size(); ++p) {
    EqualizedPair e{pairs[p].first.node, pairs[p].second.node, (int)logScale[p].size(), 0};
    for (double l : logScale[p]) e.maxLogScale = std::max(e.maxLogScale, std::fabs(l));
    res.pairs.push_back(e);
  }
  for (ValueId id : changed) res.changedInitializers.push_back(g.value(id).name);
  std::sort(res.changedInitializers.begin(), res.changedInitializers.end());
  res.model = std::move(copy);
  return res;
}

}  // namespace qs
