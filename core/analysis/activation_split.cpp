#include "core/analysis/activation_split.h"

#include <algorithm>
#include <vector>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/quant_session.h"
#include "core/exec/executor.h"
#include "core/io/calibration_data.h"
#include "core/numeric/fake_quant.h"
#include "core/numeric/metrics.h"

namespace qs {

namespace {

// One tensor's two partial inputs: `clipOnly` equals x except where x saturates (there the
// quantized value), `roundOnly` equals the quantized tensor except where x saturates (there x).
// Adds the tensor's sums to `sums`.
void splitTensor(const Tensor& x, float scale, QuantMode mode, Tensor& clipOnly, Tensor& roundOnly,
                 TensorNoiseSplit& sums) {
  const int64_t n = x.numel();
  clipOnly = Tensor(DType::Float, x.shape());
  roundOnly = Tensor(DType::Float, x.shape());
  Tensor q(DType::Float, x.shape());
  const float* xs = x.data<float>();
  float* qs = q.data<float>();
  if (mode == QuantMode::Fp8) {
    fakeQuantFp8(xs, qs, n, scale);
  } else {
    fakeQuantInt8(xs, qs, n, scale, kActQmin, kActQmax);
  }
  float* c = clipOnly.data<float>();
  float* r = roundOnly.data<float>();
  // Saturating: rne(x / scale) outside qmin..qmax (int8), |x / scale| beyond the largest FP8 value.
  // The division as fake quantization does it, so that the split is of the same elements.
  const float lo = mode == QuantMode::Fp8 ? -kFp8E4M3Max : (float)kActQmin;
  const float hi = mode == QuantMode::Fp8 ? kFp8E4M3Max : (float)kActQmax;
  double signal = 0, clip = 0, round = 0;
  int64_t clipped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = xs[i] / scale;
    const float k = mode == QuantMode::Fp8 ? v : std::nearbyint(v);
    const double e = (double)qs[i] - (double)xs[i];
    signal += (double)xs[i] * (double)xs[i];
    if (k < lo || k > hi) {
      ++clipped;
      clip += e * e;
      c[i] = qs[i];
      r[i] = xs[i];
    } else {
      round += e * e;
      c[i] = xs[i];
      r[i] = qs[i];
    }
  }
  sums.count += n;
  sums.clipped += clipped;
  sums.signal += signal;
  sums.clipNoise += clip;
  sums.roundingNoise += round;
}

}  // namespace

Result<ActivationNoiseSplit> activationNoiseSplit(const QuantSession& session, const CalibrationData& data,
                                                  const ProgressFn& progress) {
  const Graph& g = session.model().graph;
  const QuantState& st = session.state();
  const QuantPlan& plan = session.plan();
  const Executor& ex = session.executor();
  // The consumers: quantizable nodes with at least one activation point that has a scale, and a
  // float output to compare.
  std::vector<NodeId> consumers;
  std::vector<char> isPoint(g.values.size(), 0);
  for (NodeId id : g.topoOrder) {
    if (!plan.nodes[(size_t)id].quantizable) continue;
    bool any = false;
    for (const PointRef& p : st.pointsByNode[(size_t)id])
      if (p.weight < 0 && st.activation(p.value)) {
        isPoint[(size_t)p.value] = 1;
        any = true;
      }
    if (any) consumers.push_back(id);
  }
  ActivationNoiseSplit out;
  std::vector<ErrorAccumulator> clipAcc(g.nodes.size()), roundAcc(g.nodes.size());
  const int64_t batches = data.batchCount();
  for (int64_t b = 0; b < batches; ++b) {
    if (progress && !progress((double)b / (double)std::max<int64_t>(batches, 1), "activation noise split"))
      return Status(StatusCode::Cancelled, session.model().path + ": activation noise split cancelled");
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    auto table = ex.makeValueTable(*feeds);
    if (!table) return table.status();
    std::vector<Tensor> values = std::move(table).value();
    QS_RETURN_IF_ERROR(ex.runNodes(g.topoOrder, values));
    std::map<ValueId, std::pair<Tensor, Tensor>> parts;  // per point tensor: clip only, rounding only
    for (size_t v = 0; v < isPoint.size(); ++v) {
      if (!isPoint[v] || values[v].dtype() != DType::Float) continue;
      auto& [c, r] = parts[(ValueId)v];
      splitTensor(values[v], st.activation((ValueId)v)->scale, st.mode, c, r, out.tensors[(ValueId)v]);
    }
    for (NodeId id : consumers) {
      const Node& n = g.nodes[(size_t)id];
      if (n.outputs.empty() || n.outputs[0] == kNoValue) continue;
      const Tensor& ref = values[(size_t)n.outputs[0]];
      if (ref.dtype() != DType::Float) continue;
      const size_t k = n.inputs.size();
      std::vector<const Tensor*> floatIn(k, nullptr), clipIn, roundIn;
      for (size_t j = 0; j < k; ++j)
        if (n.inputs[j] != kNoValue) floatIn[j] = &values[(size_t)n.inputs[j]];
      // --bias-correction: the node as quantized reads its corrected constant (as the layer-wise runs).
      for (size_t j = 0; j < k; ++j)
        if (const ConstantCorrection* c = st.correction(id, j); c && c->owner == id) floatIn[j] = &c->value;
      clipIn = roundIn = floatIn;
      for (const PointRef& p : st.pointsByNode[(size_t)id]) {
        auto it = p.weight < 0 ? parts.find(p.value) : parts.end();
        if (it == parts.end()) continue;
        clipIn[p.inputIndex] = &it->second.first;
        roundIn[p.inputIndex] = &it->second.second;
      }
      auto clipOut = ex.runNode(id, clipIn);
      if (!clipOut) return clipOut.status();
      auto roundOut = ex.runNode(id, roundIn);
      if (!roundOut) return roundOut.status();
      clipAcc[(size_t)id].add(ref, (*clipOut)[0], ex.threads());
      roundAcc[(size_t)id].add(ref, (*roundOut)[0], ex.threads());
    }
  }
  for (NodeId id : consumers) {
    if (clipAcc[(size_t)id].metrics().count == 0) continue;
    out.nodes[id] = NodeNoiseSplit{clipAcc[(size_t)id].metrics().snrDb, roundAcc[(size_t)id].metrics().snrDb};
  }
  out.samples = data.sampleCount();
  if (progress) progress(1.0, "activation noise split");
  return out;
}

}  // namespace qs
