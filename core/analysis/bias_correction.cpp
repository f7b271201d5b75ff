#include "core/analysis/bias_correction.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/node_paths.h"

namespace qs {

namespace {

// The bias of a quantized Conv or Gemm that only it reads, one float per output channel; kNoValue
// where there is none to correct.
ValueId correctableBias(const Graph& g, const Node& n) {
  if (!n.domain.empty() || (n.opType != "Conv" && n.opType != "Gemm") || n.inputs.size() < 3) return kNoValue;
  const ValueId b = n.inputs[2];
  if (b == kNoValue) return kNoValue;
  const Value& v = g.value(b);
  if (!v.constant || v.constant->dtype() != DType::Float || v.constant->rank() != 1 || v.isOverridable || v.consumers.size() != 1)
    return kNoValue;
  return b;
}

// A Conv without bias whose output only a BatchNormalization reads (PaddleOCR's exports keep BN
// unfolded): a shift d of the Conv's output is removed by adding d to the BN's running mean.
// Returns the mean's value, or kNoValue.
ValueId correctableBnMean(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.opType != "Conv" || (n.inputs.size() > 2 && n.inputs[2] != kNoValue)) return kNoValue;
  if (n.outputs.empty() || n.outputs[0] == kNoValue) return kNoValue;
  const Value& y = g.value(n.outputs[0]);
  if (y.isGraphOutput || y.consumers.size() != 1) return kNoValue;
  const Node& bn = g.nodes[(size_t)y.consumers[0]];
  if (bn.opType != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() < 5 || bn.inputs[0] != n.outputs[0])
    return kNoValue;
  const Value& mean = g.value(bn.inputs[3]);
  if (!mean.constant || mean.constant->dtype() != DType::Float || mean.constant->rank() != 1 || mean.isOverridable || mean.consumers.size() != 1)
    return kNoValue;
  return bn.inputs[3];
}

// Where the correction of node `n` goes: its bias (sign -1) or its BatchNormalization's mean (+1).
std::pair<ValueId, float> correctionTarget(const Graph& g, const Node& n) {
  if (ValueId b = correctableBias(g, n); b != kNoValue) return {b, -1.f};
  if (ValueId m = correctableBnMean(g, n); m != kNoValue) return {m, 1.f};
  return {kNoValue, 0.f};
}

// The node that reads the corrected constant of `id` (itself, or its BatchNormalization) and on which input.
std::pair<NodeId, size_t> correctionReader(const Graph& g, NodeId id, ValueId target) {
  const Node& n = g.nodes[(size_t)id];
  if (n.inputs.size() > 2 && n.inputs[2] == target) return {id, 2};
  return {g.value(n.outputs[0]).consumers[0], 3};
}

}  // namespace

Result<BiasCorrectionResult> correctBias(const QuantSession& session, const CalibrationData& data,
                                         const ProgressFn& progress) {
  const Model& model = session.model();
  const Graph& g = model.graph;
  const QuantPlan& plan = session.plan();
  const Executor& exec = session.executor();
  const size_t N = g.nodes.size();

  // The quantization the analysis simulates: the plan's points, per-channel weights, and the
  // activation scales of the session's calibration (the clip search's choices of auto included).
  const QuantState& s = session.state();
  const NodePaths paths = plainPaths(N);

  BiasCorrectionResult res;
  std::vector<NodeId> targets;
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    if (!isNodeQuantized(plan, id)) continue;
    if (n.opType != "Conv" && n.opType != "Gemm" && n.opType != "MatMul") continue;
    if (correctionTarget(g, n).first == kNoValue) {
      res.skipped.push_back(n.name);
      continue;
    }
    targets.push_back(id);
  }
  // Per target: sum of y_q - y per output channel and the number of elements per channel.
  std::vector<std::vector<double>> sums(N);
  std::vector<int64_t> counts(N, 0);
  for (NodeId id : targets)
    sums[(size_t)id].assign((size_t)g.value(correctionTarget(g, g.nodes[(size_t)id]).first).constant->numel(), 0.0);

  const int64_t batches = data.batchCount();
  for (int64_t b = 0; b < batches && !targets.empty(); ++b) {
    if (!keepGoing(session.cancelToken(), progress, (double)b / (double)batches, "bias correction"))
      return Status(StatusCode::Cancelled, model.path + ": bias correction cancelled");
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    auto values = exec.makeValueTable(*feeds);
    if (!values) return values.status();
    QS_RETURN_IF_ERROR(exec.runNodes(g.topoOrder, *values));
    for (NodeId id : targets) {
      const Node& n = g.nodes[(size_t)id];
      std::vector<const Tensor*> inputs;
      for (ValueId v : n.inputs) inputs.push_back(v == kNoValue ? nullptr : &(*values)[(size_t)v]);
      FakeQuantTransform fq(s, paths, id);
      auto yq = exec.runNode(id, inputs, &fq);
      if (!yq) return yq.status();
      const Tensor& y = (*values)[(size_t)n.outputs[0]];
      const Tensor& q = (*yq)[0];
      std::vector<double>& sum = sums[(size_t)id];
      const int64_t C = (int64_t)sum.size();
      // Conv: [N, C, ...]; Gemm: [M, N], the channel last.
      const int axis = n.opType == "Conv" ? 1 : y.rank() - 1;
      if (y.dtype() != DType::Float || q.numel() != y.numel() || y.rank() <= axis || y.dim(axis) != C) {
        return runtimeError(model.path + ": node '" + n.name + "' (" + n.opType +
                            "): bias correction expects its output channels on axis " + std::to_string(axis) +
                            " to match its bias of " + std::to_string(C));
      }
      int64_t inner = 1;
      for (int i = axis + 1; i < y.rank(); ++i) inner *= y.dim(i);
      const int64_t outer = y.numel() / (C * inner);
      const float* py = y.data<float>();
      const float* pq = q.data<float>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t off = (o * C + c) * inner;
          double acc = 0;
          for (int64_t i = 0; i < inner; ++i) acc += (double)pq[off + i] - (double)py[off + i];
          sum[(size_t)c] += acc;
        }
      counts[(size_t)id] += outer * inner;
    }
  }

  std::set<std::string> changed;
  for (NodeId id : targets) {
    if (counts[(size_t)id] == 0) continue;
    const Node& n = g.nodes[(size_t)id];
    const auto [target, sign] = correctionTarget(g, n);
    const Value& bv = g.value(target);
    Tensor bias = bv.constant->clone();
    BiasShift shift;
    shift.node = id;
    float* pb = bias.data<float>();
    for (size_t c = 0; c < sums[(size_t)id].size(); ++c) {
      const float d = (float)(sums[(size_t)id][c] / (double)counts[(size_t)id]);
      shift.shift.push_back(d);
      shift.meanAbsShift += std::fabs(d);
      pb[c] += sign * d;
    }
    if (!shift.shift.empty()) shift.meanAbsShift /= (double)shift.shift.size();
    const auto [reader, input] = correctionReader(g, id, target);
    res.corrections.push_back(ConstantCorrection{id, reader, input, std::move(bias), Tensor()});
    changed.insert(bv.name);
    res.nodes.push_back(std::move(shift));
  }
  res.changedInitializers.assign(changed.begin(), changed.end());
  if (progress) progress(1.0, "bias correction");
  return res;
}

}  // namespace qs
