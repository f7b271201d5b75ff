// FakeQuantTransform with a high precision of fp16 or bf16 (--high-precision-dtype): what the
// exported model computes where its float part is in that type. Each node then reads its float
// inputs rounded to the high precision (graph inputs through the Cast the export adds, weights and
// other constants as converted initializers; node outputs are already rounded), its quantization
// points (where the node is enabled) fake-quantize that rounded input with the rounded scale and
// round the dequantized value again (DequantizeLinear's output takes the scale's type), and the
// node's float outputs are rounded as the kernel's fp16/bf16 output would be. ONNX Runtime's CPU
// provider computes most fp16 nodes in float32 between Casts (its InsertCastTransformer), which is
// exactly this; TensorRT's fp16 kernels accumulate in fp32 or fp16, which is close to it.
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
      storage = fakeQuantize(rounded, {q->scale}, 0, m_s.mode, kActQmin, kActQmax, m_s.threads);
      roundInPlace(storage, m_s.highPrecision);
      return &storage;
    }
  }
  if (auto it = m_s.roundedConstants.find(id); it != m_s.roundedConstants.end()) return &it->second;
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
  for (size_t o = 0; o < outputs.size() && o < outs->size(); ++o) {
    Tensor& t = (*outs)[o];
    if (t.dtype() == DType::Float && !t.empty()) {
      // A kernel may return a view of an input (Reshape, Identity): round a copy then, never a
      // buffer another value shares.
      bool shared = false;
      for (size_t i = 0; i < in.size() && !shared; ++i)
        shared = (in[i] && t.sharesBufferWith(*in[i])) || (inputs[i] && t.sharesBufferWith(*inputs[i]));
      if (shared) {
        Tensor own(DType::Float, t.shape());
        std::copy(t.data<float>(), t.data<float>() + t.numel(), own.data<float>());
        t = std::move(own);
      }
      roundInPlace(t, m_s.highPrecision);
    }
    outputs[o] = std::move(t);
  }
  status = Status::ok();
  return true;
}

}  // namespace qs
