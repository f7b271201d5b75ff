#include "core/analysis/weight_clip.h"

#include <algorithm>
#include <cmath>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/node_paths.h"
#include "core/numeric/fake_quant.h"
#include "core/quant/high_precision.h"

namespace qs {

namespace {

struct Target {
  NodeId node = -1;
  int weight = -1;  // index into QuantState::weights
  int axis = 1;     // the output's channel axis
  std::vector<std::vector<double>> err;  // [ratio][channel]
};

}  // namespace

Result<WeightClipResult> searchWeightClip(const QuantSession& session, const CalibrationData& data,
                                          const WeightClipOptions& options, const ProgressFn& progress) {
  const Model& model = session.model();
  const Graph& g = model.graph;
  const QuantPlan& plan = session.plan();
  const Executor& exec = session.executor();
  const size_t N = g.nodes.size();

  // The quantization the layer-wise analysis simulates, weights unclipped.
  // The session's activation scales (the clip search's choices of the auto method included).
  QuantState s = session.state();
  if (!s.weightClip.empty()) {
    s.weightClip.clear();
    s.weights.clear();
    s.fakeWeights.clear();
    s.pointsByNode = activationPointsByNode(g, plan);
    quantizeWeights(g, plan, s);
  }
  const NodePaths paths = plainPaths(N);

  std::vector<float> ratios{1.f};  // 1 first: the unsearched scales, which win ties
  const int steps = std::max(1, options.steps);
  if (options.ratios.empty()) {
    for (int k = 1; k <= steps; ++k) ratios.push_back((float)(1.0 - (1.0 - options.minRatio) * k / steps));
  } else {
    for (float r : options.ratios)
      if (r > 0 && r != 1.f) ratios.push_back(r);
  }

  std::vector<Target> targets;
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    if (!isNodeQuantized(plan, id) || !n.domain.empty()) continue;
    if (n.opType != "Conv" && n.opType != "Gemm" && n.opType != "MatMul") continue;
    if (!options.nodes.empty() && std::find(options.nodes.begin(), options.nodes.end(), id) == options.nodes.end())
      continue;
    for (size_t w = 0; w < s.weights.size(); ++w) {
      if (s.weights[w].node != id) continue;
      Target t;
      t.node = id;
      t.weight = (int)w;
      t.axis = n.opType == "Conv" ? 1 : -1;  // -1: the output's last axis
      t.err.assign(ratios.size(), std::vector<double>(s.weights[w].amax.size(), 0.0));
      targets.push_back(std::move(t));
      break;
    }
  }

  const int64_t batches = std::min<int64_t>(data.batchCount(), std::max(1, options.maxBatches));
  for (int64_t b = 0; b < batches && !targets.empty(); ++b) {
    if (!keepGoing(session.cancelToken(), progress, (double)b / (double)batches, "weight clip search"))
      return Status(StatusCode::Cancelled, model.path + ": weight clip search cancelled");
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    auto values = exec.makeValueTable(*feeds);
    if (!values) return values.status();
    QS_RETURN_IF_ERROR(exec.runNodes(g.topoOrder, *values));
    for (Target& t : targets) {
      const Node& n = g.nodes[(size_t)t.node];
      const WeightQuant& wq = s.weights[(size_t)t.weight];
      const Tensor& w = *g.value(wq.value).constant;
      const Tensor& y = (*values)[(size_t)n.outputs[0]];
      const int axis = t.axis < 0 ? y.rank() - 1 : t.axis;
      const int64_t C = (int64_t)wq.amax.size();
      if (y.dtype() != DType::Float || y.rank() <= axis || y.dim(axis) != C) {
        t.err.clear();  // output channels are not the weight's: not searched
        continue;
      }
      std::vector<const Tensor*> inputs;
      for (ValueId v : n.inputs) inputs.push_back(v == kNoValue ? nullptr : &(*values)[(size_t)v]);
      int64_t inner = 1;
      for (int i = axis + 1; i < y.rank(); ++i) inner *= y.dim(i);
      const int64_t outer = y.numel() / (C * inner);
      const Tensor saved = s.fakeWeights[(size_t)t.weight];
      for (size_t k = 0; k < ratios.size(); ++k) {
        std::vector<float> scales(wq.amax.size());
        for (size_t c = 0; c < scales.size(); ++c)
          scales[c] = roundScale(scaleFromAmax(wq.amax[c] * ratios[k], plan.mode), s.highPrecision);
        if (k == 0) {
          s.fakeWeights[(size_t)t.weight] = saved;
        } else {  // as quantizeWeights() makes them
          s.fakeWeights[(size_t)t.weight] = fakeQuantize(w, scales, wq.axis, plan.mode, kWeightQmin, kWeightQmax);
          roundInPlace(s.fakeWeights[(size_t)t.weight], s.highPrecision);
        }
        FakeQuantTransform fq(s, paths, t.node);
        auto yq = exec.runNode(t.node, inputs, &fq);
        if (!yq) return yq.status();
        const float* py = y.data<float>();
        const float* pq = (*yq)[0].data<float>();
        std::vector<double>& err = t.err[k];
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t c = 0; c < C; ++c) {
            const int64_t off = (o * C + c) * inner;
            double acc = 0;
            for (int64_t i = 0; i < inner; ++i) {
              const double d = (double)pq[off + i] - (double)py[off + i];
              acc += d * d;
            }
            err[(size_t)c] += acc;
          }
      }
      s.fakeWeights[(size_t)t.weight] = saved;
    }
  }

  WeightClipResult res;
  for (const Target& t : targets) {
    if (t.err.empty()) continue;
    const WeightQuant& wq = s.weights[(size_t)t.weight];
    WeightClipNode node;
    node.node = t.node;
    node.weight = wq.value;
    node.channels = (int)wq.amax.size();
    std::vector<float> chosen(wq.amax.size(), 1.f);
    double ratioSum = 0;
    for (size_t c = 0; c < chosen.size(); ++c) {
      size_t best = 0;
      for (size_t k = 1; k < ratios.size(); ++k)
        if (t.err[k][c] < t.err[best][c]) best = k;
      chosen[c] = ratios[best];
      node.errorBefore += t.err[0][c];
      node.errorAfter += t.err[best][c];
      if (best != 0) ++node.clipped;
      ratioSum += ratios[best];
    }
    node.meanRatio = chosen.empty() ? 1.0 : ratioSum / (double)chosen.size();
    if (node.clipped > 0) res.ratios[wq.value] = std::move(chosen);
    res.nodes.push_back(node);
  }
  if (progress) progress(1.0, "weight clip search");
  return res;
}

std::vector<NodeId> outputHeads(const QuantSession& session) {
  const Graph& g = session.model().graph;
  const QuantPlan& plan = session.plan();
  static const char* kPass[] = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Softmax",
                                "LogSoftmax"};
  auto passes = [&](const Node& n, ValueId in) {
    if (!n.domain.empty() || n.outputs.size() != 1) return false;
    if (n.opType == "Add") {  // the bias of a MatMul head, in either order
      if (n.inputs.size() != 2) return false;
      const ValueId other = n.inputs[0] == in ? n.inputs[1] : n.inputs[0];
      return other != in && other != kNoValue && g.value(other).constant;
    }
    if (n.inputs.empty() || n.inputs[0] != in) return false;
    return std::any_of(std::begin(kPass), std::end(kPass), [&](const char* op) { return n.opType == op; });
  };
  std::vector<NodeId> heads;
  for (const WeightPoint& w : plan.weights) {
    const Node& n = g.nodes[(size_t)w.node];
    if (!isNodeQuantized(plan, w.node) || !n.domain.empty() || (n.opType != "MatMul" && n.opType != "Gemm")) continue;
    if (n.outputs.empty() || n.outputs[0] == kNoValue) continue;
    ValueId v = n.outputs[0];
    for (size_t hops = 0; hops < g.nodes.size(); ++hops) {
      const Value& val = g.value(v);
      if (val.isGraphOutput) {
        if (val.consumers.empty()) heads.push_back(w.node);
        break;
      }
      if (val.consumers.size() != 1) break;
      const Node& next = g.nodes[(size_t)val.consumers[0]];
      if (!passes(next, v)) break;
      v = next.outputs[0];
    }
  }
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  return heads;
}

std::vector<float> headWeightScaleRatios() {
  std::vector<float> r{1.f};
  for (int k = 1; k <= 16; ++k) {
    r.push_back(1.f + (float)k / 256.f);
    r.push_back(1.f - (float)k / 256.f);
  }
  return r;
}

Result<WeightClipResult> applyHeadWeightScale(QuantSession& session, const CalibrationData& data,
                                              const ProgressFn& progress) {
  WeightClipOptions o;
  o.nodes = outputHeads(session);
  if (o.nodes.empty()) return WeightClipResult{};
  o.ratios = headWeightScaleRatios();
  auto found = searchWeightClip(session, data, o, progress);
  if (!found) return found.status();
  if (found->ratios.empty()) return found;
  std::map<ValueId, std::vector<float>> ratios = session.options().weightClip;
  for (const auto& [weight, r] : found->ratios) ratios[weight] = r;
  QS_RETURN_IF_ERROR(session.setWeightClip(std::move(ratios)));
  return found;
}

}  // namespace qs
