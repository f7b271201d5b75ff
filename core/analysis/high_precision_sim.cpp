// FakeQuantTransform with a high precision of fp16 or bf16 (--high-precision-dtype): what ONNX
// Runtime's CPU provider computes on the exported model, whose float part is in that type. That
// provider has float16 kernels on x86 for Cast, QuantizeLinear, DequantizeLinear and a few ops that
// move or select values (ortCpuHasFloat16Kernel: Reshape, Transpose, Concat, Slice, Clip, ...);
// every other float16 node runs in float32 (its InsertCastTransformer adds Casts around it), and
// between two such nodes no Cast is left, so their outputs are not rounded. A node that has a
// float16 kernel but whose float16 neighbours all run in float32 (an "isolated" node) is moved to
// float32 too. Measured on PaddleOCR cls and PP-OCRv4 rec with ORT 1.30 (the optimized model
// written out at level disabled): float16 are the graph inputs (the Cast the export adds),
// weights and other constants (converted initializers), a quantization point's input (what its
// float16 QuantizeLinear reads) with the rounded scale, the dequantized weights (a
// DequantizeLinear with no input edge is never isolated), and the inputs of the non-isolated
// data-movement nodes: on rec, after a fallback, the float outputs of MatMul, Add and Mul that go
// into Reshape/Transpose/Squeeze chains (leaving them out predicted rec 30.61 dB against 27.47 in
// ORT). A dequantized activation is float16 only where its DequantizeLinear feeds such a node.
// Node outputs are otherwise not rounded (rounding each of them, as a float16 executor such as
// TensorRT's would, made the prediction of cls with ten nodes excluded 2.3 dB optimistic against
// ORT). The inputs of a node kept in float32 (high_precision_rules.h) read their constants as they are.
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

bool FakeQuantTransform::readsDequantized(NodeId node, size_t input) const {
  if (!enabled(node) || !(m_parts & kActivations)) return false;
  for (const PointRef& r : m_s.pointsByNode[(size_t)node])
    if (r.inputIndex == input && r.weight < 0) return m_s.activation(r.value) != nullptr;
  return false;
}

// ORT's choice for a node with a float16 kernel (InsertCastTransformer): float16 unless every
// float16 tensor it reads comes from a node that runs in float32 and every one it writes goes to
// such nodes only. In the export a tensor read through a Q/DQ pair comes from a DequantizeLinear, a
// graph input from the export's Cast, and a tensor read by a quantization point or a graph output
// goes to a QuantizeLinear or the output Cast: all float16 kernels.
bool FakeQuantTransform::runsInFloat16(NodeId node) const {
  const Graph& g = m_s.executor->model().graph;
  const Node& n = g.nodes[(size_t)node];
  if (!ortCpuHasFloat16Kernel(n.opType)) return false;
  bool anyEdge = false;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ValueId v = n.inputs[i];
    if (v == kNoValue || g.value(v).constant || g.value(v).dtype != DType::Float) continue;
    anyEdge = true;
    if (readsDequantized(node, i) || g.value(v).isGraphInput) return true;
    const NodeId p = g.value(v).producer;
    if (p < 0 || ortCpuHasFloat16Kernel(g.nodes[(size_t)p].opType)) return true;
  }
  if (!anyEdge) return true;  // fed by constants only: no edge, never moved
  for (ValueId o : n.outputs) {
    if (o == kNoValue || g.value(o).dtype != DType::Float) continue;
    if (g.value(o).isGraphOutput) return true;
    for (NodeId c : g.value(o).consumers) {
      const Node& cn = g.nodes[(size_t)c];
      if (ortCpuHasFloat16Kernel(cn.opType)) return true;
      for (size_t j = 0; j < cn.inputs.size(); ++j)
        if (cn.inputs[j] == o && readsDequantized(c, j)) return true;
    }
  }
  return false;
}

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
  const ValueId id = n.inputs[input];
  // A corrected constant (--bias-correction) is rounded as the constant it replaces would be.
  if (const ConstantCorrection* c = correctionFor(node, input)) {
    if (keepsFloat32Input(n.opType, input) || nodeKeptInFloat32(g, n, m_s.highPrecision) || c->rounded.empty())
      return &c->value;
    return &c->rounded;
  }
  if (keepsFloat32Input(n.opType, input)) return nullptr;
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
      // The dequantized activation stays float32 where ORT runs that DequantizeLinear in float32
      // (isolated between the float16 QuantizeLinear and float32 consumers); a consumer with a
      // float16 kernel among those reading it keeps it in float16.
      bool half = false;
      for (NodeId c : g.value(id).consumers) {
        if (!ortCpuHasFloat16Kernel(g.nodes[(size_t)c].opType)) continue;
        const Node& cn = g.nodes[(size_t)c];
        for (size_t j = 0; j < cn.inputs.size() && !half; ++j) half = cn.inputs[j] == id && readsDequantized(c, j);
        if (half) break;
      }
      if (half) roundInPlace(storage, m_s.highPrecision);
      return &storage;
    }
  }
  if (auto it = m_s.roundedConstants.find(id); it != m_s.roundedConstants.end()) return &it->second;
  // An activation: float16 where it enters the graph (the Cast the export adds) and where a node
  // that ORT runs in float16 reads it (a Cast to float16 in front of it); between float32 nodes it
  // stays float32 (above).
  if (!g.value(id).isGraphInput && !runsInFloat16(node)) return nullptr;
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
