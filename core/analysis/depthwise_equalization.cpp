#include "core/analysis/depthwise_equalization.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "core/exec/executor.h"
#include "core/quant/equalization.h"

namespace qs {

namespace {

// The smallest scale applied: a channel below 1/1024 of the largest range (a dead channel) is
// lifted by 1024 at most.
constexpr double kMinScale = 1.0 / 1024;

// The constants of producer `p` that take 1/s per output channel, or an empty list when `p` is
// not a producer this pass can rescale with `channels` output channels.
std::vector<ValueId> scaledConstants(const Graph& g, const Node& p, int64_t channels) {
  if (!p.domain.empty() || p.outputs.empty()) return {};
  auto perChannel = [&](ValueId id) {
    return isOwnFloatConstant(g, id) && g.value(id).constant->rank() == 1 && g.value(id).constant->dim(0) == channels;
  };
  if (p.opType == "BatchNormalization") {
    if (p.inputs.size() < 5 || p.outputs.size() != 1 || !perChannel(p.inputs[1]) || !perChannel(p.inputs[2])) return {};
    return {p.inputs[1], p.inputs[2]};  // scale, B
  }
  if (p.opType == "Conv") {
    if (p.inputs.size() < 2 || !isOwnFloatConstant(g, p.inputs[1])) return {};
    const Tensor& w = *g.value(p.inputs[1]).constant;
    if (w.rank() < 3 || w.dim(0) != channels) return {};
    if (p.inputs.size() > 2 && p.inputs[2] != kNoValue) {
      if (!perChannel(p.inputs[2])) return {};
      return {p.inputs[1], p.inputs[2]};
    }
    return {p.inputs[1]};
  }
  return {};
}

struct Pair {
  NodeId producer = -1, consumer = -1;
  ValueId input = kNoValue;  // the depthwise Conv's input, whose channel ranges are measured
  int64_t channels = 0;
  std::vector<ValueId> scaled;
};

std::vector<Pair> findPairs(const Graph& g, bool throughRelu) {
  std::vector<Pair> pairs;
  for (NodeId id : g.topoOrder) {
    const Node& d = g.nodes[(size_t)id];
    const int64_t c = depthwiseChannels(g, d);
    if (c < 0) continue;
    const ValueId x = d.inputs[0];
    if (soleConsumer(g, x) != id) continue;
    NodeId p = g.value(x).producer;
    if (p < 0) continue;
    if (isPositiveHomogeneous(g, g.nodes[(size_t)p])) {
      if (!throughRelu) continue;
      const ValueId y = g.nodes[(size_t)p].inputs[0];
      if (y == kNoValue || soleConsumer(g, y) != p) continue;
      p = g.value(y).producer;
      if (p < 0) continue;
    }
    auto scaled = scaledConstants(g, g.nodes[(size_t)p], c);
    if (scaled.empty()) continue;
    pairs.push_back(Pair{p, id, x, c, std::move(scaled)});
  }
  return pairs;
}

// Per watched value, the largest |x| per channel (axis 1) over the batches seen.
class RangeObserver : public ExecutionObserver {
 public:
  explicit RangeObserver(const std::vector<Pair>& pairs) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      index_[pairs[i].input] = i;
      ranges_.emplace_back((size_t)pairs[i].channels, 0.0);
    }
  }
  void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& value) override {
    auto it = index_.find(id);
    if (it == index_.end() || value.dtype() != DType::Float || value.rank() < 2) return;
    if (!accumulateChannelAbsMax(value, ranges_[it->second])) mismatch_ = true;
  }
  const std::vector<double>& ranges(size_t pair) const { return ranges_[pair]; }
  bool mismatch() const { return mismatch_; }

 private:
  std::unordered_map<ValueId, size_t> index_;
  std::vector<std::vector<double>> ranges_;
  bool mismatch_ = false;
};

}  // namespace

bool accumulateChannelAbsMax(const Tensor& value, std::vector<double>& range) {
  if (value.dtype() != DType::Float || value.rank() < 2 || value.dim(1) != (int64_t)range.size()) return false;
  const int64_t C = value.dim(1);
  int64_t inner = 1;
  for (int i = 2; i < value.rank(); ++i) inner *= value.dim(i);
  const float* p = value.data<float>();
  for (int64_t n = 0; n < value.dim(0); ++n)
    for (int64_t ch = 0; ch < C; ++ch) {
      const float* q = p + (n * C + ch) * inner;
      float m = 0;
      for (int64_t i = 0; i < inner; ++i) m = std::max(m, std::fabs(q[i]));
      range[(size_t)ch] = std::max(range[(size_t)ch], (double)m);
    }
  return true;
}

static int64_t groupOf(const Node& n) {
  const Attribute* a = n.attr("group");
  return a ? a->i : 1;
}

int64_t depthwiseChannels(const Graph& g, const Node& n) {
  if (n.opType != "Conv" || !n.domain.empty() || n.inputs.size() < 2 || n.outputs.empty()) return -1;
  if (n.inputs[0] == kNoValue || g.value(n.inputs[0]).constant || !isOwnFloatConstant(g, n.inputs[1])) return -1;
  const Tensor& w = *g.value(n.inputs[1]).constant;
  if (w.rank() < 3 || w.dim(1) != 1 || groupOf(n) != w.dim(0) || w.dim(0) < 2) return -1;
  return w.dim(0);
}

std::vector<DepthwiseEqualizedPair> findDepthwiseEqualizablePairs(const Model& model, bool throughRelu) {
  std::vector<DepthwiseEqualizedPair> out;
  for (const Pair& p : findPairs(model.graph, throughRelu)) out.push_back({p.producer, p.consumer, (int)p.channels, 0, {}});
  return out;
}

namespace {

// Rescales pairs of a model copy's graph: the producer's channel c (every constant of p.scaled: a
// weight's output channel, a BN's scale and B) by 1/s_c, the depthwise weights of channel c by s_c
// (its bias unchanged). Each constant is cloned once, on first change.
class PairScaler {
 public:
  explicit PairScaler(Graph& g) : m_g(g) {}
  void apply(const Pair& p, const std::vector<float>& s) {
    for (ValueId v : p.scaled) {
      Tensor& t = own(v);
      const int64_t block = t.numel() / p.channels;
      float* d = t.data<float>();
      for (int64_t c = 0; c < p.channels; ++c)
        for (int64_t k = 0; k < block; ++k) d[c * block + k] /= s[(size_t)c];
    }
    Tensor& w = own(m_g.nodes[(size_t)p.consumer].inputs[1]);
    const int64_t block = w.numel() / p.channels;
    float* d = w.data<float>();
    for (int64_t c = 0; c < p.channels; ++c)
      for (int64_t k = 0; k < block; ++k) d[c * block + k] *= s[(size_t)c];
  }
  // res with the changed initializers' names and the copy as its model (the input when no pair changed).
  DepthwiseEqualizationResult finish(std::shared_ptr<const Model> input, std::shared_ptr<Model> copy,
                                     DepthwiseEqualizationResult res) const {
    for (ValueId id : m_changed) res.changedInitializers.push_back(m_g.value(id).name);
    std::sort(res.changedInitializers.begin(), res.changedInitializers.end());
    if (res.pairs.empty()) {
      res.model = std::move(input);
    } else {
      res.model = std::move(copy);
    }
    return res;
  }

 private:
  Tensor& own(ValueId id) {
    Tensor& t = *m_g.value(id).constant;
    if (m_changed.insert(id).second) t = t.clone();
    return t;
  }
  Graph& m_g;
  std::set<ValueId> m_changed;
};

}  // namespace

Result<DepthwiseEqualizationResult> equalizeDepthwiseInputs(std::shared_ptr<const Model> model,
                                                            const CalibrationData& data, int threads, bool throughRelu,
                                                            int maxBatches, const ProgressFn& progress) {
  DepthwiseEqualizationResult res;
  const std::vector<Pair> pairs = findPairs(model->graph, throughRelu);
  if (pairs.empty()) {
    res.model = std::move(model);
    return res;
  }
  ExecutorOptions eo;
  eo.threads = threads;
  auto exec = Executor::create(model, eo);
  if (!exec) return exec.status();
  RangeObserver observer(pairs);
  RunOptions ro;
  ro.observer = &observer;
  const int64_t batches = maxBatches > 0 ? std::min<int64_t>(maxBatches, data.batchCount()) : data.batchCount();
  for (int64_t b = 0; b < batches; ++b) {
    if (progress && !progress((double)b / (double)batches, "depthwise equalization"))
      return Status(StatusCode::Cancelled, model->path + ": depthwise equalization cancelled");
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    auto out = (*exec)->run(*feeds, ro);
    if (!out) return out.status();
  }
  if (observer.mismatch()) {
    return runtimeError(model->path + ": depthwise equalization: an input of a depthwise Conv has another channel "
                                      "count at run time than its weight");
  }

  auto copy = std::make_shared<Model>(*model);
  PairScaler scaler(copy->graph);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const Pair& p = pairs[i];
    const std::vector<double>& r = observer.ranges(i);
    const double top = *std::max_element(r.begin(), r.end());
    if (!(top > 0) || !std::isfinite(top)) continue;
    double lowest = top;
    for (double v : r)
      if (v >= top * kMinScale) lowest = std::min(lowest, v);
    if (lowest >= top * 0.999) continue;  // already even
    std::vector<float> s((size_t)p.channels);
    for (int64_t c = 0; c < p.channels; ++c) s[(size_t)c] = (float)std::max(kMinScale, r[(size_t)c] / top);
    scaler.apply(p, s);
    res.pairs.push_back({p.producer, p.consumer, (int)p.channels, top / lowest, std::vector<double>(s.begin(), s.end())});
  }
  return scaler.finish(std::move(model), std::move(copy), std::move(res));
}

Result<DepthwiseEqualizationResult> applyDepthwiseEqualization(std::shared_ptr<const Model> model,
                                                               const std::vector<DepthwiseSmoothingScale>& saved,
                                                               const std::string& where) {
  DepthwiseEqualizationResult res;
  const std::vector<Pair> pairs = findPairs(model->graph, true);
  auto copy = std::make_shared<Model>(*model);
  PairScaler scaler(copy->graph);
  std::set<NodeId> done;
  for (const DepthwiseSmoothingScale& sc : saved) {
    const std::string what = where + ": quantscope.depthwise_equalize: node '" + sc.consumer + "'";
    const Pair* p = nullptr;
    for (const Pair& q : pairs)
      if (model->graph.nodes[(size_t)q.consumer].name == sc.consumer) p = &q;
    if (!p) {
      return invalidArgument(what + " is not a depthwise Conv with a producer to pair: the config was made for "
                                    "another model than " + model->path);
    }
    if (!done.insert(p->consumer).second) return invalidArgument(what + " is listed twice");
    if ((int64_t)sc.scale.size() != p->channels) {
      return invalidArgument(what + ": " + std::to_string(sc.scale.size()) + " scales for " +
                             std::to_string(p->channels) + " channels");
    }
    std::vector<float> s;
    for (double v : sc.scale) {
      if (!(v > 0) || !std::isfinite(v) || !std::isfinite((float)v) || !((float)v > 0))
        return invalidArgument(what + ": a scale is not a positive number");
      s.push_back((float)v);
    }
    scaler.apply(*p, s);
    const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
    res.pairs.push_back({p->producer, p->consumer, (int)p->channels, (double)*hi / (double)*lo, sc.scale});
  }
  return scaler.finish(std::move(model), std::move(copy), std::move(res));
}

}  // namespace qs
