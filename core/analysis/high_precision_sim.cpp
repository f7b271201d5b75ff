// FakeQuantTransform with a high precision of fp16 or bf16 (--high-precision-dtype): what ONNX
// Runtime's CPU provider computes on the exported model, whose float part is in that type. That
// provider has float16 kernels on x86 for Cast, QuantizeLinear, DequantizeLinear and the data
// movement ops only; every other float16 node runs in float32 (its InsertCastTransformer), and
// between two such nodes no Cast is left, so their outputs are never rounded (measured on
// PaddleOCR cls with ORT 1.30: only the tensors read by a QuantizeLinear are on the float16 grid).
// So the analysis rounds only what is float16 there: graph inputs (the Cast the export adds),
// weights and other constants (converted initializers), a quantization point's input (what its
// float16 QuantizeLinear reads) with the rounded scale, and its dequantized value (DequantizeLinear's
// output takes the scale's type). Node outputs are not rounded (rounding each of them, as a
// float16 executor such as TensorRT's would, made the prediction of cls with ten nodes excluded
// 2.3 dB optimistic against ORT). The inputs of a node kept in float32 (high_precision_rules.h) read
// their constants as they are.
#include <cmath>

#include "core/analysis/quant_state.h"
#include "core/numeric/fake_quant.h"
#include "core/quant/high_precision_rules.h"

namespace qs {

namespace {

// keptInFloat32() for an IR node: the largest |x| over its float constant inputs.
bool nodeKeptInFloat32(const Graph& g, const Node& n, HighPrecision p) {
  if (p != HighPrecision::Fp16) return false;
  float amax = 0;
  for (ValueId v : n.inputs) {
    if (v == kNoValue) continue;
    const auto& c = g.value(v).constant;
    if (!c || c->dtype() != DType::Float) continue;
    const float* d = c->data<float>();
    for (int64_t i = 0; i < c->numel(); ++i) amax = std::max(amax, std::fabs(d[i]));
  }
  return keptInFloat32(n.opType, amax, p);
}

}  // namespace

void roundConstants(const Graph& g, QuantState& s) {
  s.roundedConstants.clear();
  if (s.highPrecision == HighPrecision::Fp32) return;
  std::vector<char> keep(g.values.size(), 0), other(g.values.size(), 0);
  for (const Node& n : g.nodes) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ValueId v = n.inputs[i];
      if (v == kNoValue) continue;
      (keepsFloat32Input(n.opType, i) ? keep : other)[(size_t)v] = 1;
    }
  }
  for (size_t v = 0; v < g.values.size(); ++v) {
    const auto& c = g.values[v].constant;
    if (!c || c->dtype() != DType::Float || !other[v]) continue;
    Tensor t(DType::Float, c->shape());
    std::copy(c->data<float>(), c->data<float>() + c->numel(), t.data<float>());
    roundInPlace(t, s.highPrecision);
    s.roundedConstants.emplace((ValueId)v, std::move(t));
  }
}

const Tensor* FakeQuantTransform::transformRounded(NodeId node, size_t input, const Tensor& value, Tensor& storage) {
  if (value.dtype() != DType::Float) return nullptr;
  const Graph& g = m_s.executor->model().graph;
  const Node& n = g.nodes[(size_t)node];
  if (keepsFloat32Input(n.opType, input)) return nullptr;
  const ValueId id = n.inputs[input];
  // A node kept in float32 reads its constants as they are (its activations were rounded by
  // their producers, and casting them to float32 is exact).
  if (g.value(id).constant && nodeKeptInFloat32(g, n, m_s.highPrecision)) return nullptr;
  if (enabled(node)) {
    for (const PointRef& r : m_s.pointsByNode[(size_t)node]) {
      if (r.inputIndex != input) continue;
      if (r.weight >= 0) {
        // The int8 weight's dequantized value, already rounded (quantizeWeights).
        if (m_parts & kWeights) return &m_s.fakeWeights[(size_t)r.weight];
        break;
      }
      const ActivationQuant* q = m_s.activation(r.value);
      if (!(m_parts & kActivations) || !q) break;
      Tensor rounded(DType::Float, value.shape());
      std::copy(value.data<float>(), value.data<float>() + value.numel(), rounded.data<float>());
      roundInPlace(rounded, m_s.highPrecision);
      // The dequantized activation is not rounded: ORT runs that DequantizeLinear in float32
      // (an isolated float16 node between the float16 QuantizeLinear and a float32 consumer).
      storage = fakeQuantize(rounded, {q->scale}, 0, m_s.mode, kActQmin, kActQmax, m_s.threads);
      return &storage;
    }
  }
  if (auto it = m_s.roundedConstants.find(id); it != m_s.roundedConstants.end()) return &it->second;
  // An activation: float16 only where it enters the graph (the Cast the export adds); between
  // nodes it stays float32 (above).
  if (!g.value(id).isGraphInput) return nullptr;
  storage = Tensor(DType::Float, value.shape());
  std::copy(value.data<float>(), value.data<float>() + value.numel(), storage.data<float>());
  roundInPlace(storage, m_s.highPrecision);
  return &storage;
}

bool FakeQuantTransform::runNodeRounded(NodeId node, std::span<const Tensor* const> inputs, std::span<Tensor> outputs,
                                        Status& status) {
  std::vector<const Tensor*> in(inputs.begin(), inputs.end());
  std::vector<Tensor> storage(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i])
      if (const Tensor* t = transformRounded(node, i, *in[i], storage[i])) in[i] = t;
  auto outs = m_s.executor->runNode(node, in);
  if (!outs) {
    status = outs.status();
    return true;
  }
  // The outputs as the kernel computed them, in float32 (not rounded: see the top of the file).
  for (size_t o = 0; o < outputs.size() && o < outs->size(); ++o) outputs[o] = std::move((*outs)[o]);
  status = Status::ok();
  return true;
}

}  // namespace qs
