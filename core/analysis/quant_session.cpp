#include "core/analysis/quant_session.h"

#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <limits>
#include <optional>
#include <thread>

#include "core/exec/parallel.h"
#include "core/kernels/conv.h"
#include "core/kernels/qconv.h"
#include "core/numeric/fake_quant.h"
#include "core/quant/placement.h"

namespace qs {

// Activations of one analysed batch: the float run and the quantized run. `state` is the enabled
// mask quantTable was computed with (empty: unknown after an interrupted update, rebuilt in full
// by the next toggle). Toggles update quantTable in place, so each entry carries its own state.
struct QuantSession::BatchCache {
  std::vector<Tensor> floatTable, quantTable;
  std::vector<char> state;
};

// A group-1 Conv whose input X and weights W both carry INT8 points: run as u8 x s8 -> int32.
// A ConvTranspose whose windows tile its output (kernel == strides, no padding, dilation 1)
// runs as the 1x1 Conv of X with W as [Cout * kh * kw, Cin] ("columns", one row per output
// channel and tap) followed by the permutation of columns to output pixels.
struct QuantSession::IntConv {
  std::shared_ptr<const QConvWeights> weights;
  WindowAttrs attrs;
  ValueId act = kNoValue;  // X's activation point
  bool transposed = false;
  int64_t kh = 1, kw = 1;  // transposed: the kernel (== strides)
};

namespace {
// ConvTranspose output [N, M, H*kh, W*kw] <-> columns [N, M*kh*kw, H, W] of tiling windows:
// col[n][(m*kh + a)*kw + b][i][j] = out[n][m][i*kh + a][j*kw + b]. Row by row: an output row
// (i, a) holds the kw column rows (a, b) interleaved; kw == 2 (det's upsampling) with shuffles.
template <bool kToColumns>
void permuteTiles(const float* src, float* dst, int64_t N, int64_t M, int64_t H, int64_t W, int64_t kh, int64_t kw) {
  const int64_t OW = W * kw, plane = H * W;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t a = 0; a < kh; ++a)
        for (int64_t i = 0; i < H; ++i) {
          // Offsets of the output row (i, a) and of column row (a, b) at (i, 0).
          const int64_t outRow = (n * M + m) * plane * kh * kw + (i * kh + a) * OW;
          auto colRow = [&](int64_t b) { return ((n * M + m) * kh * kw + a * kw + b) * plane + i * W; };
          int64_t j = 0;
          if (kw == 2) {
            const int64_t c0 = colRow(0), c1 = colRow(1);
            for (; j + 8 <= W; j += 8) {
              if constexpr (kToColumns) {  // 16 interleaved -> 8 even, 8 odd
                const __m256 lo = _mm256_loadu_ps(src + outRow + 2 * j), hi = _mm256_loadu_ps(src + outRow + 2 * j + 8);
                const __m256 even = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
                const __m256 odd = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
                _mm256_storeu_ps(dst + c0 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)));
                _mm256_storeu_ps(dst + c1 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xD8)));
              } else {  // 8 + 8 -> 16 interleaved
                const __m256 e = _mm256_loadu_ps(src + c0 + j), o = _mm256_loadu_ps(src + c1 + j);
                const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
                _mm256_storeu_ps(dst + outRow + 2 * j, _mm256_permute2f128_ps(lo, hi, 0x20));
                _mm256_storeu_ps(dst + outRow + 2 * j + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
              }
            }
          }
          for (int64_t b = 0; b < kw; ++b) {
            const int64_t c = colRow(b);
            for (int64_t jj = j; jj < W; ++jj) {
              if constexpr (kToColumns) dst[c + jj] = src[outRow + jj * kw + b];
              else dst[outRow + jj * kw + b] = src[c + jj];
            }
          }
        }
}
}  // namespace

// One op of an ElementwiseChain: out = a op b, each operand a chain value (0: the chain's input,
// i + 1: the output of op i) or a scalar constant (-1).
struct ChainOp {
  enum Kind { kAdd, kSub, kMul, kDiv, kClip } kind = kAdd;
  NodeId node = -1;
  int a = -1, b = -1;
  float ca = 0, cb = 0;  // the constants of constant operands
  float lo = 0, hi = 0;  // Clip's bounds (operand a only)
};
struct ElementwiseChain {
  ValueId input = kNoValue;
  std::vector<ChainOp> ops;  // in an order that respects their dependences
  std::vector<char> stored;  // per op: its output is read outside the chain (or is a graph output)
};

// A depthwise Conv (one filter per channel) whose input X and weights W both carry points.
struct QuantSession::DepthwiseConv {
  WindowAttrs attrs;
  ValueId act = kNoValue;  // X's activation point
  int weight = -1;         // index into m_weights / m_fakeWeights
};

// Where a take-over (Transform::runNode) may compare a node's output with its float reference
// itself, while the output is in cache: reference() is the float output to compare with, or null
// when the node is not to be compared in this pass; compared() records the sums.
class NodeCompare {
 public:
  virtual ~NodeCompare() = default;
  virtual const Tensor* reference(NodeId node) = 0;
  virtual void compared(NodeId node, const ErrorAccumulator& sums) = 0;
};

// Fake-quantizes node inputs at the quantization points of the enabled nodes.
class QuantSession::Transform : public InputTransform {
 public:
  enum Parts { kActivations = 1, kWeights = 2, kBoth = 3 };
  // Every node whose mask entry is set.
  Transform(const QuantSession& s, std::vector<char> enabled, int parts = kBoth)
      : m_s(s), m_enabled(std::move(enabled)), m_parts(parts) {}
  // One node alone (layer-wise, sensitivity): no per-node mask to build.
  Transform(const QuantSession& s, NodeId only, int parts = kBoth) : m_s(s), m_only(only), m_parts(parts) {}
  // Outputs of taken-over nodes compared through `c` (one Transform per thread then).
  void setCompare(NodeCompare* c) { m_compare = c; }

  const Tensor* transform(NodeId node, size_t input, const Tensor& value, Tensor& storage) override {
    if (m_only >= 0 ? node != m_only : !m_enabled[(size_t)node]) return nullptr;
    const auto& refs = m_s.m_pointsByNode[(size_t)node];
    for (const PointRef& r : refs) {
      if (r.inputIndex != input) continue;
      if (r.weight >= 0) {
        if (!(m_parts & kWeights)) return nullptr;
        return &m_s.m_fakeWeights[(size_t)r.weight];
      }
      if (!(m_parts & kActivations) || value.dtype() != DType::Float) return nullptr;
      auto it = m_s.m_act.find(r.value);
      if (it == m_s.m_act.end()) return nullptr;
      storage = fakeQuantize(value, {it->second.scale}, 0, m_s.m_plan.mode, kActQmin, kActQmax, m_s.m_executor->threads());
      return &storage;
    }
    return nullptr;
  }

  // With both kinds of points on, an integer Conv replaces fake quantization plus FP32 Conv, and
  // a depthwise Conv runs plane by plane (X fake-quantized per plane, never stored whole),
  // comparing each output plane as it goes where a NodeCompare is set.
  bool runNode(NodeId node, std::span<const Tensor* const> inputs, std::span<Tensor> outputs, Status&) override {
    if (m_parts != kBoth || outputs.empty() || (m_only >= 0 ? node != m_only : !m_enabled[(size_t)node])) return false;
    // (The integer Conv's output is compared by the observer: measured, comparing it in the
    // epilogue, row run by row run across the output planes, was slower than one pass over it.)
    if (const IntConv* ic = m_s.m_intConv[(size_t)node].get()) return m_s.runIntConv(*ic, inputs, QConvOutputs{&outputs[0]});
    const Tensor* ref = m_compare ? m_compare->reference(node) : nullptr;
    ErrorAccumulator sums;
    if (const DepthwiseConv* dw = m_s.m_dwConv[(size_t)node].get()) {
      ErrorAccumulator* const planeSums[3] = {ref ? &sums : nullptr, nullptr, nullptr};
      if (!m_s.depthwisePlanes(*dw, inputs, &outputs[0], ref, planeSums)) return false;
      if (ref) m_compare->compared(node, sums);
      return true;
    }
    return false;
  }

 private:
  const QuantSession& m_s;
  std::vector<char> m_enabled;
  NodeId m_only = -1;
  int m_parts;
  NodeCompare* m_compare = nullptr;
};

QuantSession::~QuantSession() = default;

bool QuantSession::keepGoing(const ProgressFn& progress, double fraction, const std::string& stage) const {
  if (m_cancelToken->cancelled()) return false;
  return !progress || progress(std::min(1.0, std::max(0.0, fraction)), stage);
}

static Status cancelled(const Model& m) { return Status(StatusCode::Cancelled, m.path + ": analysis cancelled"); }

Result<std::unique_ptr<QuantSession>> QuantSession::create(std::shared_ptr<const Model> model, const QuantConfig& config,
                                                           const AnalysisOptions& options,
                                                           std::vector<std::string>* warnings) {
  std::unique_ptr<QuantSession> s(new QuantSession());
  s->m_model = model;
  s->m_options = options;
  ExecutorOptions eo;
  eo.threads = options.threads;
  auto ex = Executor::create(model, eo);
  if (!ex) return ex.status();
  s->m_executor = std::move(ex).value();
  s->m_plan = planQuantization(model->graph, options.calibration.mode);
  std::vector<std::string> w;
  auto summary = applyConfig(s->m_plan, model->graph, config, w);
  if (!summary) return summary.status();
  if (warnings) warnings->insert(warnings->end(), w.begin(), w.end());
  s->indexPoints();
  return s;
}

void QuantSession::indexPoints() {
  const Graph& g = m_model->graph;
  m_pointsByNode.assign(g.nodes.size(), {});
  m_weights.clear();
  m_fakeWeights.clear();
  for (const ActivationPoint& a : m_plan.activations)
    m_pointsByNode[(size_t)a.node].push_back(PointRef{a.inputIndex, a.value, -1});
  for (const WeightPoint& w : m_plan.weights) {
    const Tensor& t = *g.value(w.value).constant;
    WeightQuant wq;
    wq.node = w.node;
    wq.inputIndex = w.inputIndex;
    wq.value = w.value;
    wq.axis = w.axis;
    auto amax = perChannelAbsMax(t, w.axis);
    if (amax) wq.amax = std::move(amax).value();
    else wq.amax.assign((size_t)t.dim(w.axis), 0.f);  // the plan only emits valid axes
    for (float a : wq.amax) wq.scale.push_back(scaleFromAmax(a, m_plan.mode));
    m_fakeWeights.push_back(fakeQuantize(t, wq.scale, w.axis, m_plan.mode, kWeightQmin, kWeightQmax));
    m_pointsByNode[(size_t)w.node].push_back(PointRef{w.inputIndex, w.value, (int)m_weights.size()});
    m_weights.push_back(std::move(wq));
  }
  // A scalar float constant feeding an elementwise op (its value in c).
  auto scalarConstant = [&](ValueId v, float& c) {
    const auto& k = g.value(v).constant;
    if (!k || k->dtype() != DType::Float || k->numel() != 1) return false;
    c = k->data<float>()[0];
    return true;
  };
  // Elementwise ops with a scalar constant and no point of their own: y = a x + b.
  m_affine.assign(g.nodes.size(), AffineOp{});
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const std::string& op = n.opType;
    if ((op != "Add" && op != "Sub" && op != "Mul" && op != "Div") || n.inputs.size() != 2 || n.outputs.empty() ||
        !m_pointsByNode[i].empty() || n.inputs[0] == kNoValue || n.inputs[1] == kNoValue)
      continue;
    const bool const0 = (bool)g.value(n.inputs[0]).constant, const1 = (bool)g.value(n.inputs[1]).constant;
    float c = 0;
    if (const0 == const1 || !scalarConstant(n.inputs[const0 ? 0 : 1], c) || !std::isfinite(c)) continue;
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
    m_affine[i] = a;
  }
  // Elementwise chains: from an activation, every op over it and the chain's values (earliest in
  // topological order first) that has no point of its own and only scalar constants besides, up
  // to kMaxChainOps (a longer run of such ops makes several chains).
  m_chainAt.assign(g.nodes.size(), nullptr);
  if (m_options.fuseElementwise) {
    constexpr size_t kMaxChainOps = 32;
    std::vector<int> topoIndex(g.nodes.size(), 0);
    for (size_t k = 0; k < g.topoOrder.size(); ++k) topoIndex[(size_t)g.topoOrder[k]] = (int)k;
    // The op `id` as a ChainOp over `values` (chain values so far), or false.
    auto asChainOp = [&](NodeId id, const std::vector<ValueId>& values, ChainOp& op) {
      const Node& n = g.nodes[(size_t)id];
      if (!m_pointsByNode[(size_t)id].empty() || n.outputs.size() != 1 || n.outputs[0] == kNoValue) return false;
      // Input i as a chain value (its index in `values`) or a scalar constant (index -1, value c).
      auto operand = [&](size_t i, int& index, float& c) {
        if (i >= n.inputs.size() || n.inputs[i] == kNoValue) return false;
        index = -1;
        if (g.value(n.inputs[i]).constant) return scalarConstant(n.inputs[i], c);
        auto it = std::find(values.begin(), values.end(), n.inputs[i]);
        index = (int)(it - values.begin());
        return it != values.end();
      };
      op = ChainOp{};
      op.node = id;
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
        if (n.inputs.size() > 1 && n.inputs[1] != kNoValue && !scalarConstant(n.inputs[1], op.lo)) return false;
        return !(n.inputs.size() > 2 && n.inputs[2] != kNoValue && !scalarConstant(n.inputs[2], op.hi));
      }
      return false;
    };
    std::vector<char> member(g.nodes.size(), 0);  // in a chain (1) or in the one being built (2)
    for (NodeId head : g.topoOrder) {
      if (member[(size_t)head]) continue;
      const Node& hn = g.nodes[(size_t)head];
      // The head's activation: its first non-constant input.
      ValueId x = kNoValue;
      for (ValueId v : hn.inputs)
        if (v != kNoValue && !g.value(v).constant) {
          x = v;
          break;
        }
      if (x == kNoValue) continue;
      auto chain = std::make_shared<ElementwiseChain>();
      chain->input = x;
      std::vector<ValueId> values = {x};
      ChainOp op;
      if (!asChainOp(head, values, op)) continue;
      for (;;) {
        chain->ops.push_back(op);
        member[(size_t)op.node] = 2;
        values.push_back(g.nodes[(size_t)op.node].outputs[0]);
        if (chain->ops.size() == kMaxChainOps) break;
        // The next member: the earliest consumer of a chain value that is a chain op over them.
        NodeId next = -1;
        ChainOp nextOp;
        for (ValueId v : values)
          for (NodeId c : g.value(v).consumers) {
            if (member[(size_t)c] || (next >= 0 && topoIndex[(size_t)c] >= topoIndex[(size_t)next])) continue;
            ChainOp candidate;
            if (asChainOp(c, values, candidate)) {
              next = c;
              nextOp = candidate;
            }
          }
        if (next < 0) break;
        op = nextOp;
      }
      const bool keep = chain->ops.size() >= 2;  // one op: nothing to fuse
      for (const ChainOp& o : chain->ops) {
        const Value& v = g.value(g.nodes[(size_t)o.node].outputs[0]);
        bool outside = v.isGraphOutput;
        for (NodeId c : v.consumers) outside = outside || member[(size_t)c] != 2;
        chain->stored.push_back(outside ? 1 : 0);
      }
      for (const ChainOp& o : chain->ops) member[(size_t)o.node] = keep ? 1 : 0;
      if (keep) m_chainAt[(size_t)head] = std::move(chain);
    }
  }
  // The activation point on a node's input 0 (kNoValue: none).
  auto inputActPoint = [&](NodeId node) {
    for (const PointRef& r : m_pointsByNode[(size_t)node])
      if (r.weight < 0 && r.inputIndex == 0) return r.value;
    return kNoValue;
  };
  // Depthwise Convs: their layer-wise runs go plane by plane (any CPU, any mode).
  m_dwConv.assign(g.nodes.size(), nullptr);
  for (size_t k = 0; m_options.planeLayerwise && k < m_plan.weights.size(); ++k) {
    const WeightPoint& w = m_plan.weights[k];
    const Node& n = g.nodes[(size_t)w.node];
    const Tensor& W = *g.value(w.value).constant;
    if (n.opType != "Conv" || w.inputIndex != 1 || w.axis != 0 || W.rank() < 3 || W.rank() > 4 || W.dim(1) != 1) continue;
    auto dw = std::make_shared<DepthwiseConv>();
    dw->weight = (int)k;
    dw->act = inputActPoint(w.node);
    if (dw->act == kNoValue) continue;
    KernelInit init{n, 0, g};
    AttrReader a(init);
    dw->attrs = readWindowAttrs(a, true);
    if (!a.ok() || dw->attrs.group != W.dim(0)) continue;
    m_dwConv[(size_t)w.node] = std::move(dw);
  }
  // Integer Convs: only where VNNI makes them faster than FP32 (the portable integer path is not).
  m_intConv.assign(g.nodes.size(), nullptr);
  if (!m_options.integerConv || m_plan.mode != QuantMode::Int8 || std::string(qconvKernelName()) != "avx512vnni") return;
  for (size_t k = 0; k < m_plan.weights.size(); ++k) {
    const WeightPoint& w = m_plan.weights[k];
    const Node& n = g.nodes[(size_t)w.node];
    const bool transposed = n.opType == "ConvTranspose";
    if (!(n.opType == "Conv" || transposed) || w.inputIndex != 1 || w.axis != (transposed ? 1 : 0)) continue;
    auto ic = std::make_shared<IntConv>();
    ic->act = inputActPoint(w.node);
    if (ic->act == kNoValue) continue;
    KernelInit init{n, 0, g};
    AttrReader a(init);
    ic->attrs = readWindowAttrs(a, true);
    if (!a.ok() || ic->attrs.group != 1) continue;
    const Tensor& W = *g.value(w.value).constant;
    Tensor columns;  // transposed: W [Cin, M, kh, kw] as [M * kh * kw, Cin, 1, 1]
    std::vector<float> rowScales;
    if (transposed) {
      if (W.rank() != 4 || W.dtype() != DType::Float) continue;
      const int64_t Cin = W.dim(0), M = W.dim(1), kh = W.dim(2), kw = W.dim(3);
      auto allAre = [](const std::vector<int64_t>& v, int64_t x) {
        return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
      };
      const std::vector<int64_t> kernel = {kh, kw};
      if ((!ic->attrs.kernelShape.empty() && ic->attrs.kernelShape != kernel) || ic->attrs.strides != kernel ||
          !allAre(ic->attrs.dilations, 1) || !allAre(ic->attrs.pads, 0) ||
          (ic->attrs.autoPad != "NOTSET" && ic->attrs.autoPad != "VALID") || n.attr("output_padding") ||
          n.attr("output_shape"))
        continue;
      ic->transposed = true;
      ic->kh = kh;
      ic->kw = kw;
      columns = Tensor(DType::Float, {M * kh * kw, Cin, 1, 1});
      const float* src = W.data<float>();
      float* dst = columns.data<float>();
      for (int64_t c = 0; c < Cin; ++c)
        for (int64_t r = 0; r < M * kh * kw; ++r) dst[r * Cin + c] = src[c * M * kh * kw + r];
      for (int64_t r = 0; r < M * kh * kw; ++r) rowScales.push_back(m_weights[k].scale[(size_t)(r / (kh * kw))]);
    }
    auto packed = transposed ? prepareQConvWeights(columns, rowScales) : prepareQConvWeights(W, m_weights[k].scale);
    if (!packed) continue;  // e.g. an all-zero channel (scale 0): FP32 handles it
    ic->weights = std::move(packed).value();
    m_intConv[(size_t)w.node] = std::move(ic);
  }
}

bool QuantSession::runIntConv(const IntConv& ic, std::span<const Tensor* const> inputs, const QConvOutputs& out,
                              int64_t referenceElements) const {
  auto act = m_act.find(ic.act);
  if (act == m_act.end() || inputs.empty() || !inputs[0] || inputs[0]->dtype() != DType::Float) return false;
  const Tensor& X = *inputs[0];
  if (ic.transposed) return runIntConvTranspose(ic, X, act->second.scale, inputs, out, referenceElements);
  const Shape& k = ic.weights->kernelShape();
  if (X.rank() != (int64_t)k.size() + 2) return false;
  const float* bias = nullptr;
  if (inputs.size() > 2 && inputs[2]) {
    if (inputs[2]->dtype() != DType::Float || inputs[2]->numel() != ic.weights->outChannels()) return false;
    bias = inputs[2]->data<float>();
  }
  WindowGeometry geo;
  if (!resolveWindow(ic.attrs, std::vector<int64_t>(X.shape().begin() + 2, X.shape().end()),
                     std::vector<int64_t>(k.begin(), k.end()), false, geo))
    return false;
  if (out.reference && referenceElements != X.dim(0) * ic.weights->outChannels() * geo.outSize()) return false;
  // Refused input (NaN or Inf in X, a shape mismatch): the FP32 path computes or reports it.
  return qconv(X, act->second.scale, *ic.weights, bias, geo, m_executor->threads(), out).isOk();
}

bool QuantSession::depthwisePlanes(const DepthwiseConv& dw, std::span<const Tensor* const> inputs, Tensor* y,
                                   const Tensor* ref, ErrorAccumulator* const sums[3]) const {
  auto act = m_act.find(dw.act);
  if (act == m_act.end() || inputs.size() < 2 || !inputs[0] || !inputs[1] || (!y && !ref)) return false;
  const Tensor& X = *inputs[0];
  const Tensor& W = *inputs[1];
  const Tensor& Wq = m_fakeWeights[(size_t)dw.weight];
  const int64_t nd = W.rank() - 2;
  if (X.dtype() != DType::Float || W.dtype() != DType::Float || X.rank() != W.rank() || Wq.shape() != W.shape() ||
      X.dim(1) != W.dim(0) || (ref && ref->dtype() != DType::Float))
    return false;
  const float* bias = nullptr;
  if (inputs.size() > 2 && inputs[2]) {
    if (inputs[2]->dtype() != DType::Float || inputs[2]->numel() != W.dim(0)) return false;
    bias = inputs[2]->data<float>();
  }
  WindowGeometry geo;
  if (!resolveWindow(dw.attrs, std::vector<int64_t>(X.shape().begin() + 2, X.shape().end()),
                     std::vector<int64_t>(W.shape().begin() + 2, W.shape().end()), false, geo) ||
      geo.nd != nd)
    return false;
  const int64_t N = X.dim(0), C = X.dim(1), inSize = geo.inSize(), outSize = geo.outSize(), kSize = geo.kSize();
  if ((ref && ref->numel() != N * C * outSize) || N * C == 0 || outSize == 0) return false;
  const float sx = act->second.scale;
  const QuantMode mode = m_plan.mode;
  const float* x = X.data<float>();
  const float* w = W.data<float>();
  const float* wq = Wq.data<float>();
  const float* r = ref ? ref->data<float>() : nullptr;
  float* out = nullptr;
  if (y) {
    Shape shape = {N, C};
    for (int64_t v : geo.outShape()) shape.push_back(v);
    *y = Tensor(DType::Float, shape);
    out = y->data<float>();
  }
  // Per plane: X fake-quantized as the Transform does (the same function per element), then the
  // Conv kernel's depthwise path (the same bits as the node run on fake-quantized inputs),
  // compared at once. Per-plane sums merged in plane order: independent of threads.
  std::vector<std::array<ErrorAccumulator, 3>> acc(ref ? (size_t)(N * C) : 0);
  parallelFor(m_executor->threads(), N * C, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    if (buf.size() < (size_t)(inSize + 2 * outSize)) buf.resize((size_t)(inSize + 2 * outSize));
    float* xq = buf.data();
    float* o1 = xq + inSize;
    float* o2 = o1 + outSize;
    for (int64_t p = b; p < e; ++p) {
      const int64_t c = p % C;
      const float* xp = x + p * inSize;
      const float* rp = r ? r + p * outSize : nullptr;
      const float bv = bias ? bias[c] : 0.f;
      if (mode == QuantMode::Fp8) fakeQuantFp8(xp, xq, inSize, sx);
      else fakeQuantInt8(xp, xq, inSize, sx, kActQmin, kActQmax);
      if (out) {  // the quantized pass: both points
        depthwiseConvPlane(xq, wq + c * kSize, bv, geo, out + p * outSize);
        if (rp && sums[0]) acc[(size_t)p][0].add(rp, out + p * outSize, outSize);
        continue;
      }
      // Layer-wise: both points and activations only from one read of the plane, weights only.
      depthwiseConvPlane2(xq, wq + c * kSize, w + c * kSize, bv, geo, o1, o2);
      if (sums[0]) acc[(size_t)p][0].add(rp, o1, outSize);
      if (sums[1]) acc[(size_t)p][1].add(rp, o2, outSize);
      if (sums[2]) {
        depthwiseConvPlane(xp, wq + c * kSize, bv, geo, o1);
        acc[(size_t)p][2].add(rp, o1, outSize);
      }
    }
  });
  for (const auto& a : acc)
    for (int k = 0; k < 3; ++k)
      if (sums[k]) sums[k]->merge(a[(size_t)k]);
  return true;
}

// The tiling ConvTranspose as columns: a 1x1 integer Conv of X, its rows permuted to pixels
// (the output) or the reference permuted to columns (sums only: no output stored at all).
bool QuantSession::runIntConvTranspose(const IntConv& ic, const Tensor& X, float sx, std::span<const Tensor* const> inputs,
                                       const QConvOutputs& out, int64_t referenceElements) const {
  const int64_t rows = ic.weights->outChannels(), taps = ic.kh * ic.kw, M = rows / taps;
  if (X.rank() != 4 || X.dim(1) != ic.weights->inChannels() || out.actOnly || out.weightError) return false;
  const int64_t N = X.dim(0), H = X.dim(2), W = X.dim(3);
  std::vector<float> bias;
  if (inputs.size() > 2 && inputs[2]) {
    if (inputs[2]->dtype() != DType::Float || inputs[2]->numel() != M) return false;
    for (int64_t r = 0; r < rows; ++r) bias.push_back(inputs[2]->data<float>()[r / taps]);
  }
  WindowAttrs one;
  WindowGeometry geo;
  if (!resolveWindow(one, {H, W}, {1, 1}, false, geo)) return false;
  QConvOutputs cols = out;
  Tensor full, refCols;
  if (out.reference) {
    if (referenceElements != N * rows * H * W) return false;
    refCols = Tensor(DType::Float, {N, rows, H, W});
    permuteTiles<true>(out.reference, refCols.data<float>(), N, M, H, W, ic.kh, ic.kw);
    cols.reference = refCols.data<float>();
  }
  cols.full = out.full ? &full : nullptr;
  if (!qconv(X, sx, *ic.weights, bias.empty() ? nullptr : bias.data(), geo, m_executor->threads(), cols).isOk()) return false;
  if (out.full) {
    *out.full = Tensor(DType::Float, {N, M, H * ic.kh, W * ic.kw});
    permuteTiles<false>(full.data<float>(), out.full->data<float>(), N, M, H, W, ic.kh, ic.kw);
  }
  return true;
}

Status QuantSession::calibrate(const CalibrationData& data, const ProgressFn& progress) {
  const Graph& g = m_model->graph;
  std::vector<char> wanted(g.values.size(), 0);
  for (const ActivationPoint& a : m_plan.activations) wanted[(size_t)a.value] = 1;
  std::map<ValueId, TensorStats> stats;
  for (const ActivationPoint& a : m_plan.activations) stats.try_emplace(a.value, m_options.calibration.bins);

  struct Collector : ExecutionObserver {
    const std::vector<char>* wanted;
    std::map<ValueId, TensorStats>* stats;
    uint64_t bytes = 0;  // of the batch's graph inputs and node outputs
    void see(ValueId id, const Tensor& t) {
      bytes += t.byteSize();
      if ((*wanted)[(size_t)id] && t.dtype() == DType::Float) stats->at(id).add(t.data<float>(), t.numel());
    }
    void onGraphInput(ValueId id, const Tensor& t) override { see(id, t); }
    void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& t) override { see(id, t); }
  } collector;
  collector.wanted = &wanted;
  collector.stats = &stats;
  // Inputs that are also initializers (and constants feeding points) are seen once here.
  for (auto& [id, st] : stats) {
    const Value& v = g.value(id);
    if (v.constant && v.constant->dtype() == DType::Float) st.add(v.constant->data<float>(), v.constant->numel());
  }
  int64_t n = data.batchCount();
  uint64_t batchBytes = 0;
  for (int64_t b = 0; b < n; ++b) {
    if (!keepGoing(progress, (double)b / (double)n, "calibrating")) return cancelled(*m_model);
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    RunOptions ro;
    ro.observer = &collector;
    ro.cancel = &m_cancelToken->flag();
    collector.bytes = 0;
    auto out = m_executor->run(*feeds, ro);
    if (!out) return out.status();
    // What analyze() will hold per batch (float and quantized tables) if it keeps one.
    batchBytes = std::max(batchBytes, 2 * collector.bytes);
  }
  m_batchBytes = batchBytes;
  m_stats = std::move(stats);
  m_calibratedSamples = data.sampleCount();
  computeScales();
  keepGoing(progress, 1.0, "calibrated");
  return Status::ok();
}

Status QuantSession::setActivationAmax(const std::map<std::string, float>& amaxByTensor) {
  const Graph& g = m_model->graph;
  for (const auto& [name, amax] : amaxByTensor) {
    ValueId id = g.findValue(name);
    if (id == kNoValue) return invalidArgument(m_model->path + ": amax given for unknown tensor '" + name + "'");
    if (!(amax >= 0) || !std::isfinite(amax)) {
      return invalidArgument(m_model->path + ": amax of tensor '" + name + "' is " + std::to_string(amax));
    }
    m_amaxOverride[id] = amax;
  }
  computeScales();
  return Status::ok();
}

void QuantSession::computeScales() {
  m_act.clear();
  std::map<int, float> groupAmax;
  for (const ActivationPoint& a : m_plan.activations) {
    if (m_act.count(a.value)) continue;
    ActivationQuant q;
    q.value = a.value;
    q.scaleGroup = a.scaleGroup;
    auto st = m_stats.find(a.value);
    if (st != m_stats.end()) {
      q.methodAmax = st->second.allAmax(m_options.calibration);
      NodeId producer = m_model->graph.value(a.value).producer;
      bool softmax = producer >= 0 && m_model->graph.nodes[(size_t)producer].opType == "Softmax";
      q.amax = calibratedAmax(st->second, m_options.calibration, softmax);
    }
    auto ov = m_amaxOverride.find(a.value);
    if (ov != m_amaxOverride.end()) q.amax = ov->second;
    if (st == m_stats.end() && ov == m_amaxOverride.end()) continue;  // neither calibrated nor given
    m_act[a.value] = q;
    if (a.scaleGroup >= 0) groupAmax[a.scaleGroup] = std::max(groupAmax[a.scaleGroup], q.amax);
  }
  for (auto& [id, q] : m_act) {
    if (q.scaleGroup >= 0) q.amax = groupAmax[q.scaleGroup];
    q.scale = scaleFromAmax(q.amax, m_plan.mode);
  }
}

const TensorStats* QuantSession::stats(ValueId value) const {
  auto it = m_stats.find(value);
  return it == m_stats.end() ? nullptr : &it->second;
}

std::vector<NodeId> QuantSession::coneOf(const std::vector<NodeId>& roots) const {
  const Graph& g = m_model->graph;
  std::vector<char> in(g.nodes.size(), 0);
  for (NodeId r : roots) in[(size_t)r] = 1;
  std::vector<NodeId> cone;
  for (NodeId id : g.topoOrder) {  // one pass in topological order marks every descendant
    if (!in[(size_t)id]) {
      for (ValueId v : g.nodes[(size_t)id].inputs) {
        if (v == kNoValue) continue;
        NodeId p = g.value(v).producer;
        if (p >= 0 && in[(size_t)p]) {
          in[(size_t)id] = 1;
          break;
        }
      }
    }
    if (in[(size_t)id]) cone.push_back(id);
  }
  return cone;
}

namespace {
void accumulateOutputs(const Graph& g, const std::vector<Tensor>& ref, const std::vector<Tensor>& got,
                       std::vector<ErrorAccumulator>& acc) {
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Tensor& a = ref[(size_t)g.outputs[i]];
    const Tensor& b = got[(size_t)g.outputs[i]];
    if (a.numel() == b.numel() && !a.empty()) acc[i].add(a, b);
  }
}
// Compares node outputs with the float table as they are produced (while they are in cache: a
// separate pass over whole tables is bound by memory bandwidth), for the nodes of `nodes` or all.
// A node that applies a constant a x + b to one activation (affine[node].input >= 0) whose
// producer was compared in this pass gets its sums from the producer's (ErrorAccumulator::affine)
// without reading the outputs: the same rule in every pass (analysis, toggles), so the figures
// agree between them.
class CompareOutputs : public ExecutionObserver, public NodeCompare {
 public:
  CompareOutputs(const Graph& g, const std::vector<Tensor>& ref, const std::vector<NodeId>* nodes,
                 std::vector<ErrorAccumulator>& acc, int threads, const std::vector<AffineOp>& affine)
      : m_g(g), m_ref(ref), m_wanted(g.nodes.size(), nodes ? 0 : 1), m_done(g.nodes.size(), 0), m_acc(acc),
        m_threads(threads), m_affine(affine) {
    if (nodes)
      for (NodeId id : *nodes) m_wanted[(size_t)id] = 1;
  }
  void onNodeOutput(NodeId node, size_t output, ValueId id, const Tensor& t) override {
    if (output != 0 || !m_wanted[(size_t)node]) return;
    m_wanted[(size_t)node] = 0;  // what is left set was not run (see remaining())
    const Tensor& a = m_ref[(size_t)id];
    if (a.dtype() != DType::Float || t.dtype() != DType::Float || a.numel() != t.numel()) return;
    m_done[(size_t)node] = 1;
    if (!derive(node, a.numel())) m_acc[(size_t)node].add(a, t, m_threads);
  }
  // The sums of an a x + b op from its producer's, when that was compared in this pass and the
  // output has `elements` values as its input does; false otherwise (nothing changed).
  bool derive(NodeId node, int64_t elements) {
    const NodeId p = affineProducer(node, elements);
    if (p < 0 || !m_done[(size_t)p]) return false;
    const AffineOp& op = m_affine[(size_t)node];
    m_wanted[(size_t)node] = 0;
    m_done[(size_t)node] = 1;
    m_acc[(size_t)node].merge(m_acc[(size_t)p].affine(op.a, op.b));
    return true;
  }
  // The node whose sums an a x + b op's derive from (its input's producer, whose first output
  // that input is, with `elements` values as the op's output has), or -1.
  NodeId affineProducer(NodeId node, int64_t elements) const {
    const AffineOp& op = m_affine[(size_t)node];
    if (op.input < 0) return -1;
    const ValueId in = m_g.nodes[(size_t)node].inputs[(size_t)op.input];
    const NodeId p = m_g.value(in).producer;
    return p >= 0 && m_g.nodes[(size_t)p].outputs[0] == in && m_ref[(size_t)in].numel() == elements ? p : -1;
  }
  const Tensor* reference(NodeId node) override {
    if (!m_wanted[(size_t)node]) return nullptr;
    const Node& n = m_g.nodes[(size_t)node];
    if (n.outputs.empty() || n.outputs[0] == kNoValue) return nullptr;
    const Tensor& a = m_ref[(size_t)n.outputs[0]];
    return a.dtype() == DType::Float ? &a : nullptr;
  }
  void compared(NodeId node, const ErrorAccumulator& sums) override {
    m_wanted[(size_t)node] = 0;
    m_done[(size_t)node] = 1;
    m_acc[(size_t)node].merge(sums);
  }
  bool done(NodeId node) const { return m_done[(size_t)node] != 0; }
  // Wanted nodes that did not run, in the order of `nodes`.
  std::vector<NodeId> remaining(const std::vector<NodeId>& nodes) const {
    std::vector<NodeId> r;
    for (NodeId id : nodes)
      if (m_wanted[(size_t)id]) r.push_back(id);
    return r;
  }

 private:
  const Graph& m_g;
  const std::vector<Tensor>& m_ref;
  std::vector<char> m_wanted, m_done;
  std::vector<ErrorAccumulator>& m_acc;
  int m_threads;
  const std::vector<AffineOp>& m_affine;
};

// The ops of `ch` over the quantized table in one pass: pieces of kPiece values, every op of a
// piece while it is in cache, each op in its own loop (the same float operations as the op-by-op
// kernels, so the same output bits). Outputs are stored as op by op would. The comparisons give
// the same sums as CompareOutputs: blocks of ErrorAccumulator::kBlock, each summed over its
// pieces with its lanes kept (kPiece is a multiple of the lane blocks), merged in order; an op
// a x + b whose producer is compared gets its sums derived. False (nothing stored) where a
// reference is not of the input's shape.
bool runChain(const Graph& g, const ElementwiseChain& ch, std::vector<Tensor>& quantTable,
              const std::vector<Tensor>& floatTable, CompareOutputs& compare, bool storeAll) {
  constexpr int64_t kPiece = 4096;
  static_assert(ErrorAccumulator::kBlock % kPiece == 0 && kPiece % (ErrorAccumulator::kLaneBlock * 16) == 0);
  const Tensor& x = quantTable[(size_t)ch.input];
  if (x.dtype() != DType::Float) return false;
  const size_t K = ch.ops.size();
  std::vector<ValueId> out(K);
  for (size_t i = 0; i < K; ++i) {
    out[i] = g.nodes[(size_t)ch.ops[i].node].outputs[0];
    const Tensor& r = floatTable[(size_t)out[i]];
    if (r.dtype() != DType::Float || r.shape() != x.shape()) return false;
  }
  // Which ops are compared for real: those CompareOutputs will not derive, i.e. all but the a x + b
  // ops whose producer is compared by then (an earlier op of the chain, or done before it).
  const int64_t n = x.numel();
  std::vector<char> real(K, 1);
  for (size_t i = 0; i < K; ++i) {
    const NodeId p = compare.affineProducer(ch.ops[i].node, n);
    const bool inChain = std::any_of(ch.ops.begin(), ch.ops.begin() + (std::ptrdiff_t)i, [p](const ChainOp& o) { return o.node == p; });
    real[i] = !(p >= 0 && (inChain || compare.done(p)));
  }
  // Outputs stored: those read outside the chain (and all where the batch is kept for toggles);
  // the others live in one piece of scratch each, while their piece is in cache.
  std::vector<Tensor> outs(K);
  thread_local std::vector<float> pieces;
  if (pieces.size() < K * (size_t)kPiece) pieces.resize(K * (size_t)kPiece);
  for (size_t i = 0; i < K; ++i)
    if (storeAll || ch.stored[i]) outs[i] = Tensor(DType::Float, x.shape());
  // Where op i writes the piece at `off`, and chain value v (0: the input, i + 1: op i's output).
  auto target = [&](size_t i, int64_t off) -> float* {
    return outs[i].empty() ? pieces.data() + i * kPiece : outs[i].data<float>() + off;
  };
  auto value = [&](int v, int64_t off) -> const float* { return v == 0 ? x.data<float>() + off : target((size_t)v - 1, off); };
  std::vector<ErrorAccumulator> sums(K), part(K);
  std::vector<ErrorAccumulator::Lanes> lanes(K);
  for (int64_t off = 0; off < n; off += kPiece) {
    const int64_t len = std::min(kPiece, n - off);
    for (size_t i = 0; i < K; ++i) {
      const ChainOp& op = ch.ops[i];
      const float* A = op.a >= 0 ? value(op.a, off) : nullptr;
      const float* B = op.b >= 0 ? value(op.b, off) : nullptr;
      float* o = target(i, off);
      const float ca = op.ca, cb = op.cb;
      switch (op.kind) {
        case ChainOp::kAdd:
          if (A && B) for (int64_t j = 0; j < len; ++j) o[j] = A[j] + B[j];
          else if (A) for (int64_t j = 0; j < len; ++j) o[j] = A[j] + cb;
          else for (int64_t j = 0; j < len; ++j) o[j] = ca + B[j];
          break;
        case ChainOp::kSub:
          if (A && B) for (int64_t j = 0; j < len; ++j) o[j] = A[j] - B[j];
          else if (A) for (int64_t j = 0; j < len; ++j) o[j] = A[j] - cb;
          else for (int64_t j = 0; j < len; ++j) o[j] = ca - B[j];
          break;
        case ChainOp::kMul:
          if (A && B) for (int64_t j = 0; j < len; ++j) o[j] = A[j] * B[j];
          else if (A) for (int64_t j = 0; j < len; ++j) o[j] = A[j] * cb;
          else for (int64_t j = 0; j < len; ++j) o[j] = ca * B[j];
          break;
        case ChainOp::kDiv:
          if (A && B) for (int64_t j = 0; j < len; ++j) o[j] = A[j] / B[j];
          else if (A) for (int64_t j = 0; j < len; ++j) o[j] = A[j] / cb;
          else for (int64_t j = 0; j < len; ++j) o[j] = ca / B[j];
          break;
        case ChainOp::kClip:  // as the Clip kernel: NaN passes through
          for (int64_t j = 0; j < len; ++j) {
            const float v = A[j] < op.lo ? op.lo : A[j];
            o[j] = v > op.hi ? op.hi : v;
          }
          break;
      }
      if (real[i]) part[i].add(lanes[i], floatTable[(size_t)out[i]].data<float>() + off, o, len);
    }
    if ((off + len) % ErrorAccumulator::kBlock == 0 || off + len == n)
      for (size_t i = 0; i < K; ++i)
        if (real[i]) {
          part[i].flush(lanes[i]);
          sums[i].merge(part[i]);
          part[i] = ErrorAccumulator();
        }
  }
  for (size_t i = 0; i < K; ++i)
    if (!outs[i].empty()) quantTable[(size_t)out[i]] = std::move(outs[i]);
  // In chain order, so that a derived op finds its producer compared.
  for (size_t i = 0; i < K; ++i) {
    if (real[i]) compare.compared(ch.ops[i].node, sums[i]);
    else compare.derive(ch.ops[i].node, n);
  }
  return true;
}

// Runs fn(i) for i in [0, n) on up to `threads` threads, the caller included, each claiming the
// next item when done. Own threads rather than parallelFor: the executor's pool backs off to
// serial for up to a second after the many small regions of an analysis, while these items are
// milliseconds each, where a late helper costs nothing (the caller takes the remaining items).
// With more than one thread at work, the kernels inside run serially; with one, as usual.
void forEachItem(int threads, int64_t n, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  const bool shared = std::min<int64_t>(threads, n) > 1;
  auto work = [&] {
    // Items side by side: the kernels inside run serially (no pool workers on top of them).
    std::optional<SerialScope> serial;
    if (shared) serial.emplace();
    for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < std::min<int64_t>(threads, n); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& h : helpers) h.join();
}
uint64_t tableBytes(const Graph& g, const std::vector<Tensor>& t) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < t.size(); ++i)
    if (!g.values[i].constant) bytes += t[i].byteSize();
  return bytes;
}
}  // namespace

std::vector<char> QuantSession::enabledMask() const {
  std::vector<char> m(m_plan.nodes.size(), 0);
  for (size_t i = 0; i < m.size(); ++i) m[i] = m_plan.nodes[i].quantized ? 1 : 0;
  return m;
}

Status QuantSession::quantizedPass(const std::vector<NamedTensor>& feeds, const std::vector<Tensor>& floatTable,
                                   Transform& transform, const std::vector<NodeId>* nodes,
                                   std::vector<ErrorAccumulator>& nodeAcc, std::vector<ErrorAccumulator>& outAcc) const {
  const Graph& g = m_model->graph;
  CompareOutputs compare(g, floatTable, nodes, nodeAcc, m_executor->threads(), m_affine);
  Transform t = transform;  // this pass's own, comparing what it takes over
  t.setCompare(&compare);
  RunOptions ro;
  ro.cancel = &m_cancelToken->flag();
  ro.inputTransform = &t;
  ro.observer = &compare;
  // Streamed: each node output is compared as it is produced, then freed after its last consumer.
  auto outs = m_executor->run(feeds, ro);
  if (!outs) return outs.status();
  for (size_t i = 0; i < g.outputs.size() && i < outs->size(); ++i) {
    const Tensor& a = floatTable[(size_t)g.outputs[i]];
    const Tensor& b = (*outs)[i];
    if (a.numel() == b.numel() && !a.empty()) outAcc[i].add(a, b, m_executor->threads());
  }
  return Status::ok();
}

Result<std::vector<Tensor>> QuantSession::floatPass(const std::vector<NamedTensor>& feeds) const {
  auto table = m_executor->makeValueTable(feeds);
  if (!table) return table.status();
  RunOptions ro;
  ro.cancel = &m_cancelToken->flag();
  QS_RETURN_IF_ERROR(m_executor->runNodes(m_model->graph.topoOrder, *table, ro));
  return table;
}

Status QuantSession::sensitivityPass(const std::vector<NodeId>& cone, Transform& transform,
                                     const std::vector<Tensor>& floatTable, ErrorAccumulator& acc) const {
  // The cone over a copy of the float table (the copy shares buffers); what the cone computes is
  // released after its last reader in the cone, so at most the cone's live values are held.
  const Graph& g = m_model->graph;
  std::vector<Tensor> table = floatTable;
  std::vector<int> lastUse(g.values.size(), -1);
  for (size_t k = 0; k < cone.size(); ++k)
    for (ValueId v : g.nodes[(size_t)cone[k]].inputs)
      if (v != kNoValue) lastUse[(size_t)v] = (int)k;
  for (ValueId v : g.outputs) lastUse[(size_t)v] = INT32_MAX;
  std::vector<const Tensor*> inputs;
  for (size_t k = 0; k < cone.size(); ++k) {
    if (m_cancelToken->cancelled()) return cancelled(*m_model);
    const NodeId id = cone[k];
    const Node& node = g.nodes[(size_t)id];
    inputs.assign(node.inputs.size(), nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue) inputs[i] = &table[(size_t)node.inputs[i]];
    auto outs = m_executor->runNode(id, inputs, &transform);
    if (!outs) return outs.status();
    inputs.clear();
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const ValueId v = node.outputs[o];
      if (v == kNoValue) continue;
      // Never read again in the cone: back to the float entry, which frees the new buffer.
      table[(size_t)v] = lastUse[(size_t)v] > (int)k ? std::move((*outs)[o]) : floatTable[(size_t)v];
    }
    for (ValueId v : node.inputs)
      if (v != kNoValue && lastUse[(size_t)v] == (int)k) table[(size_t)v] = floatTable[(size_t)v];
  }
  for (ValueId out : g.outputs) {
    const Tensor& a = floatTable[(size_t)out];
    if (!a.empty() && a.numel() == table[(size_t)out].numel()) acc.add(a, table[(size_t)out], m_executor->threads());
  }
  return Status::ok();
}

Result<std::shared_ptr<const AnalysisResult>> QuantSession::analyze(std::shared_ptr<const CalibrationData> data,
                                                                    const ProgressFn& progress) {
  if (m_act.empty() && !m_plan.activations.empty()) {
    return invalidArgument(m_model->path + ": analyze() needs calibrate() or explicit amax values first");
  }
  // Activations cached by an earlier analysis go now rather than at the end, so that two sets are
  // never held; until this one completes, toggles re-run every batch of the previous data.
  m_cache.clear();
  m_cachedBytes = 0;
  const Graph& g = m_model->graph;
  const size_t N = g.nodes.size();
  std::vector<char> quantizable(N, 0), hasWeight(N, 0), hasAct(N, 0);
  for (size_t i = 0; i < N; ++i) quantizable[i] = m_plan.nodes[i].quantizable;
  for (const auto& w : m_plan.weights) hasWeight[(size_t)w.node] = 1;
  for (const auto& a : m_plan.activations) hasAct[(size_t)a.node] = 1;
  std::vector<NodeId> candidates;
  for (NodeId id : g.topoOrder)
    if (quantizable[(size_t)id]) candidates.push_back(id);
  std::vector<std::vector<NodeId>> cones;
  if (m_options.sensitivity) {
    cones.reserve(candidates.size());
    for (NodeId id : candidates) cones.push_back(coneOf({id}));
  }

  const int64_t batches = data->batchCount();
  const auto enabled = enabledMask();
  // Consumers of each value (plus graph-output uses): a value is dead after its last consumer.
  std::vector<int32_t> useCount(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++useCount[(size_t)v];
  for (ValueId v : g.outputs) ++useCount[(size_t)v];

  // Sums of one batch; merged in batch order at the end, so the results do not depend on which
  // thread ran which batch (the same scheme as setQuantized()).
  struct BatchSums {
    std::vector<ErrorAccumulator> node, out, layer, weight, act, sens;
  };
  std::vector<BatchSums> sums((size_t)batches);

  // The layer-wise runs of one node on its float inputs: both points, and for the split each
  // kind alone (with one kind of point only, the other figure is the layer-wise one).
  auto layerwiseNode = [&](NodeId id, const std::vector<Tensor>& floatTable, BatchSums& S) -> Status {
    const Node& n = g.nodes[(size_t)id];
    if (n.outputs.empty() || n.outputs[0] == kNoValue) return Status::ok();
    const Tensor& ref = floatTable[(size_t)n.outputs[0]];
    if (ref.dtype() != DType::Float) return Status::ok();
    const size_t k = n.inputs.size(), i = (size_t)id;
    const int threads = m_executor->threads();
    std::vector<const Tensor*> floatIn(k, nullptr);
    for (size_t j = 0; j < k; ++j)
      if (n.inputs[j] != kNoValue) floatIn[j] = &floatTable[(size_t)n.inputs[j]];
    if (const IntConv* ic = m_intConv[i].get(); ic && hasWeight[i] && hasAct[i]) {
      // The integer GEMMs give both points, activations only and what weight quantization alone
      // changes, each compared with the float output in the GEMM's epilogue (nothing stored).
      QConvOutputs out;
      out.reference = ref.data<float>();
      out.fullSums = &S.layer[i];
      out.actSums = &S.act[i];
      out.weightSums = &S.weight[i];
      if (runIntConv(*ic, floatIn, out, ref.numel())) return Status::ok();
    }
    if (const DepthwiseConv* dw = m_dwConv[i].get(); dw && hasWeight[i] && hasAct[i]) {
      ErrorAccumulator* const sums[3] = {&S.layer[i], &S.act[i], &S.weight[i]};
      if (depthwisePlanes(*dw, floatIn, nullptr, &ref, sums)) return Status::ok();
    }
    // Each input once: float, with its activation point applied, with its weight point applied
    // (a placement puts at most one point on an input).
    Transform ta(*this, id, Transform::kActivations), tw(*this, id, Transform::kWeights);
    std::vector<const Tensor*> actIn = floatIn, weightIn = floatIn, inputs(k, nullptr);
    std::vector<Tensor> storage(k);
    Tensor unused;
    for (size_t j = 0; j < k; ++j) {
      if (!floatIn[j]) continue;
      if (const Tensor* q = ta.transform(id, j, *floatIn[j], storage[j])) actIn[j] = q;
      if (const Tensor* q = tw.transform(id, j, *floatIn[j], unused)) weightIn[j] = q;
    }
    auto runWith = [&](int parts, ErrorAccumulator& acc) -> Status {
      for (size_t j = 0; j < k; ++j) {
        inputs[j] = floatIn[j];
        if ((parts & Transform::kActivations) && actIn[j] != floatIn[j]) inputs[j] = actIn[j];
        if ((parts & Transform::kWeights) && weightIn[j] != floatIn[j]) inputs[j] = weightIn[j];
      }
      auto outs = m_executor->runNode(id, inputs);
      if (!outs) return outs.status();
      acc.add(ref, (*outs)[0], threads);
      return Status::ok();
    };
    QS_RETURN_IF_ERROR(runWith(Transform::kBoth, S.layer[i]));
    if (hasWeight[i] && hasAct[i]) {
      QS_RETURN_IF_ERROR(runWith(Transform::kWeights, S.weight[i]));
      QS_RETURN_IF_ERROR(runWith(Transform::kActivations, S.act[i]));
    } else if (hasWeight[i]) {
      S.weight[i] = S.layer[i];
    } else {
      S.act[i] = S.layer[i];
    }
    return Status::ok();
  };

  // One batch. One sweep in topological order runs each node on float inputs, then with the
  // enabled points on the quantized inputs (compared with the float output at once), then alone
  // for the layer-wise figures: every tensor is used while it is still in cache, and values die
  // after their last consumer, so a batch needs no more memory than two plain runs. With `keep`,
  // both tables are kept for toggles while `budget` bytes allow (the float one also for the
  // sensitivity cones); from the first node past it, dead values go and *kept is left empty.
  // `report(fraction of this batch, stage)` returns false to stop.
  const std::vector<NodeId>& order = g.topoOrder;
  static const std::string kSweepStage = "float, graph-wise and layer-wise";
  auto runBatch = [&](int64_t b, bool keep, uint64_t budget, std::unique_ptr<BatchCache>* kept, uint64_t& batchBytes,
                      const std::function<bool(double, const std::string&)>& report) -> Status {
    BatchSums& S = sums[(size_t)b];
    S.node.resize(N);
    S.out.resize(g.outputs.size());
    S.layer.resize(N);
    S.weight.resize(N);
    S.act.resize(N);
    S.sens.resize(N);
    const double sweepShare = m_options.sensitivity ? 0.6 : 1.0;
    if (!report(0, kSweepStage)) return cancelled(*m_model);
    auto feeds = data->batch(b);
    if (!feeds) return feeds.status();
    auto table = m_executor->makeValueTable(*feeds);
    if (!table) return table.status();
    std::vector<Tensor> floatTable = std::move(table).value();
    std::vector<char> persistent(g.values.size(), 0);  // constants and feeds: never freed
    for (size_t v = 0; v < floatTable.size(); ++v) persistent[v] = !floatTable[v].empty();
    std::vector<Tensor> quantTable = floatTable;  // shares the feeds' and constants' buffers
    std::vector<int32_t> uses = useCount;
    batchBytes = 2 * tableBytes(g, floatTable);  // the feeds, counted in both tables as the cache does
    bool keeping = keep && batchBytes <= budget;
    auto release = [&](ValueId v) {
      if (uses[(size_t)v] > 0 || persistent[(size_t)v]) return;
      quantTable[(size_t)v] = Tensor();
      if (!m_options.sensitivity) floatTable[(size_t)v] = Tensor();
    };
    CompareOutputs compare(g, floatTable, nullptr, S.node, m_executor->threads(), m_affine);
    Transform all(*this, enabled);  // this batch's: it compares the nodes it takes over
    all.setCompare(&compare);
    RunOptions rf, rq;
    rf.cancel = rq.cancel = &m_cancelToken->flag();
    rq.inputTransform = &all;
    rq.observer = &compare;
    // Chain members run at their head's turn (ElementwiseChain): float first, then in one pass.
    std::vector<char> floatDone(N, 0), quantDone(N, 0);
    for (size_t k = 0; k < order.size(); ++k) {
      const NodeId id = order[k];
      if (k % 16 == 0 && !report(sweepShare * (double)k / (double)order.size(), kSweepStage)) return cancelled(*m_model);
      const std::span<const NodeId> one(&order[k], 1);
      if (const ElementwiseChain* ch = m_chainAt[(size_t)id].get(); ch && !floatDone[(size_t)id]) {
        for (const ChainOp& op : ch->ops) {
          QS_RETURN_IF_ERROR(m_executor->runNodes(std::span<const NodeId>(&op.node, 1), floatTable, rf));
          floatDone[(size_t)op.node] = 1;
        }
        if (runChain(g, *ch, quantTable, floatTable, compare, keeping))
          for (const ChainOp& op : ch->ops) quantDone[(size_t)op.node] = 1;
      }
      if (!floatDone[(size_t)id]) QS_RETURN_IF_ERROR(m_executor->runNodes(one, floatTable, rf));
      if (!quantDone[(size_t)id]) QS_RETURN_IF_ERROR(m_executor->runNodes(one, quantTable, rq));
      if (m_options.layerwise && quantizable[(size_t)id]) QS_RETURN_IF_ERROR(layerwiseNode(id, floatTable, S));
      const Node& n = g.nodes[(size_t)id];
      for (ValueId v : n.inputs)
        if (v != kNoValue) --uses[(size_t)v];
      for (ValueId v : n.outputs)
        if (v != kNoValue) batchBytes += floatTable[(size_t)v].byteSize() + quantTable[(size_t)v].byteSize();
      if (keeping && batchBytes > budget) {
        keeping = false;
        for (size_t v = 0; v < uses.size(); ++v) release((ValueId)v);
      } else if (!keeping) {
        for (ValueId v : n.inputs)
          if (v != kNoValue) release(v);
        for (ValueId v : n.outputs)
          if (v != kNoValue) release(v);
      }
    }
    accumulateOutputs(g, floatTable, quantTable, S.out);
    if (m_options.sensitivity) {
      for (size_t c = 0; c < candidates.size(); ++c) {
        if (c % 8 == 0 && !report(0.6 + 0.4 * (double)c / (double)candidates.size(), "sensitivity"))
          return cancelled(*m_model);
        Transform t(*this, candidates[c]);
        QS_RETURN_IF_ERROR(sensitivityPass(cones[c], t, floatTable, S.sens[(size_t)candidates[c]]));
      }
    }
    if (keeping) {
      auto bc = std::make_unique<BatchCache>();
      bc->floatTable = std::move(floatTable);
      bc->quantTable = std::move(quantTable);
      bc->state = enabled;
      *kept = std::move(bc);
    }
    return Status::ok();
  };

  // Batches are independent: each thread takes whole batches, the kernels inside then run
  // serially (no fork and join per node for the many small ops of an analysis). The first
  // batches whose tables fit the cache budget are kept for toggles; the size of one batch comes
  // from calibration, or else from running the first batch alone.
  std::vector<std::unique_ptr<BatchCache>> kept((size_t)batches);
  std::vector<Status> status((size_t)batches);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  const auto caller = std::this_thread::get_id();
  auto report = [&](double f, const std::string& stage) {
    if (stop.load() || m_cancelToken->cancelled()) return false;
    // The callback runs on the calling thread only (a GUI's callback need not be thread-safe).
    if (std::this_thread::get_id() != caller) return true;
    if (!keepGoing(progress, ((double)done.load() + f) / (double)batches, stage)) stop = true;
    return !stop.load();
  };
  int64_t first = 0, keepCount = 0;
  const uint64_t budget = m_options.cacheBudgetBytes;
  if (m_batchBytes == 0 && batches > 0) {
    uint64_t bytes = 0;
    QS_RETURN_IF_ERROR(runBatch(0, true, budget, &kept[0], bytes, report));
    m_batchBytes = bytes;
    ++done;
    first = 1;
  }
  if (m_batchBytes > 0) keepCount = std::min<int64_t>(batches, (int64_t)(budget / m_batchBytes));
  if (first == 1 && !kept[0]) keepCount = 0;  // the first batch did not fit: none will
  // The sensitivity cones read the whole float table (half a batch's bytes): batches run side by
  // side only as far as their tables fit the cache budget together, so that memory stays bounded.
  int batchThreads = m_executor->threads();
  if (m_options.sensitivity && m_batchBytes > 0)
    batchThreads = (int)std::max<uint64_t>(1, std::min<uint64_t>((uint64_t)batchThreads, budget / (m_batchBytes / 2 + 1)));
  forEachItem(batchThreads, batches - first, [&](int64_t i) {
    const int64_t b = first + i;
    if (stop.load() || m_cancelToken->cancelled()) return;
    uint64_t bytes = 0;
    // Each kept batch may use an equal share of the budget (at least the estimate).
    const uint64_t own = b < keepCount ? budget / (uint64_t)keepCount : 0;
    status[(size_t)b] = runBatch(b, b < keepCount, own, &kept[(size_t)b], bytes, report);
    if (!status[(size_t)b]) stop = true;
    ++done;
  });
  for (const Status& st : status)
    if (!st && st.code() != StatusCode::Cancelled) return st;
  if (stop.load() || m_cancelToken->cancelled()) return cancelled(*m_model);

  std::vector<ErrorAccumulator> nodeAcc(N), outAcc(g.outputs.size());
  std::vector<ErrorAccumulator> layerAcc(N), weightAcc(N), actAcc(N), sensAcc(N);
  for (const BatchSums& S : sums) {
    for (size_t i = 0; i < N; ++i) {
      nodeAcc[i].merge(S.node[i]);
      layerAcc[i].merge(S.layer[i]);
      weightAcc[i].merge(S.weight[i]);
      actAcc[i].merge(S.act[i]);
      sensAcc[i].merge(S.sens[i]);
    }
    for (size_t o = 0; o < g.outputs.size(); ++o) outAcc[o].merge(S.out[o]);
  }
  // Toggles use cached batches 0..k-1: the cache ends at the first batch not kept.
  std::vector<std::unique_ptr<BatchCache>> cache;
  uint64_t cachedBytes = 0;
  for (auto& bc : kept) {
    if (!bc) break;
    cachedBytes += tableBytes(g, bc->floatTable) + tableBytes(g, bc->quantTable);
    cache.push_back(std::move(bc));
  }

  auto r = std::make_shared<AnalysisResult>();
  r->nodes.resize(N);
  for (size_t i = 0; i < N; ++i) {
    NodeResult& nr = r->nodes[i];
    if (quantizable[i] && m_options.layerwise && layerAcc[i].metrics().count > 0) {
      nr.hasLayerwise = true;
      nr.layerwise = layerAcc[i].metrics();
      if (hasWeight[i]) nr.weightSnrDb = weightAcc[i].metrics().snrDb;
      if (hasAct[i]) nr.activationSnrDb = actAcc[i].metrics().snrDb;
    }
    if (quantizable[i] && m_options.sensitivity && sensAcc[i].metrics().count > 0) {
      nr.sensitivitySnrDb = sensAcc[i].metrics().snrDb;
    }
  }
  r->samples = data->sampleCount();
  m_nodeAcc = std::move(nodeAcc);
  m_outAcc = std::move(outAcc);
  m_cache = std::move(cache);
  m_cachedBytes = cachedBytes;
  m_data = std::move(data);
  finishResult(*r, m_nodeAcc, m_outAcc);
  m_result = r;
  keepGoing(progress, 1.0, "analysed");
  return m_result;
}

void QuantSession::finishResult(AnalysisResult& r, const std::vector<ErrorAccumulator>& nodeAcc,
                                const std::vector<ErrorAccumulator>& outAcc) const {
  const Graph& g = m_model->graph;
  r.plan = m_plan;
  r.calibration = m_options.calibration;
  r.activations = m_act;
  r.weights = m_weights;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    r.nodes[i].hasGraphwise = nodeAcc[i].metrics().count > 0;
    r.nodes[i].graphwise = nodeAcc[i].metrics();
  }
  r.outputs.clear();
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    r.outputs.push_back(OutputResult{g.outputs[i], g.value(g.outputs[i]).name, outAcc[i].metrics()});
  }
}

Result<std::shared_ptr<const AnalysisResult>> QuantSession::setQuantized(const std::vector<std::pair<NodeId, bool>>& toggles,
                                                                         const ProgressFn& progress) {
  if (!m_result) return invalidArgument(m_model->path + ": setQuantized() needs a prior analyze()");
  const Graph& g = m_model->graph;
  const size_t N = g.nodes.size();
  QuantPlan previous = m_plan;
  for (auto [id, on] : toggles) {
    if (id < 0 || (size_t)id >= N) return invalidArgument("node id " + std::to_string(id) + " out of range");
  }
  for (auto [id, on] : toggles) setNodeQuantized(m_plan, g, id, on);
  std::vector<NodeId> changed;
  for (size_t i = 0; i < N; ++i)
    if (previous.nodes[i].quantized != m_plan.nodes[i].quantized) changed.push_back((NodeId)i);
  if (changed.empty()) {
    auto r = std::make_shared<AnalysisResult>(*m_result);
    r->plan = m_plan;
    m_result = r;
    return m_result;
  }
  // Only the graph-wise figures of the changed nodes' downstream cone and the outputs change.
  const std::vector<NodeId> cone = coneOf(changed);
  const std::vector<char> target = enabledMask();
  const int64_t batches = m_data->batchCount();
  const int64_t cachedCount = std::min<int64_t>((int64_t)m_cache.size(), batches);
  // Per-batch accumulators, merged in batch order afterwards: the sums are then bit-identical to
  // those of analyze(), which adds batch after batch, whatever thread ran which batch.
  std::vector<std::vector<ErrorAccumulator>> nodeB((size_t)batches), outB((size_t)batches);
  std::vector<Status> statusB((size_t)batches);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  const auto caller = std::this_thread::get_id();
  Transform t(*this, target);  // copied per batch (each copy compares its batch)
  RunOptions ro;
  ro.cancel = &m_cancelToken->flag();
  ro.inputTransform = &t;
  auto report = [&] {
    // The callback runs on the calling thread only (a GUI's callback need not be thread-safe).
    if (std::this_thread::get_id() != caller) return;
    if (!keepGoing(progress, (double)done.load() / (double)batches, "re-analysing")) stop = true;
  };

  // A cached batch: bring its quantized table to `target` in place, re-running only the cone of
  // what differs from the state it holds (the toggled nodes, unless an earlier update of this
  // batch was interrupted), so no table is copied and replaced buffers return to the pool at once.
  auto updateCached = [&](int64_t b) -> Status {
    BatchCache& c = *m_cache[(size_t)b];
    nodeB[(size_t)b].resize(N);
    outB[(size_t)b].resize(g.outputs.size());
    CompareOutputs compare(g, c.floatTable, &cone, nodeB[(size_t)b], m_executor->threads(), m_affine);
    Transform tb = t;  // this batch's: it compares the nodes it takes over
    tb.setCompare(&compare);
    RunOptions co = ro;
    co.observer = &compare;
    co.inputTransform = &tb;
    if (c.state != target) {
      std::vector<NodeId> diff;
      bool known = c.state.size() == N;
      if (known)
        for (size_t i = 0; i < N; ++i)
          if (c.state[i] != target[i]) diff.push_back((NodeId)i);
      c.state.clear();  // unknown until the update completes
      Status st;
      if (!known) {
        c.quantTable = c.floatTable;  // inputs and constants; every node output is replaced
        st = m_executor->runNodes(g.topoOrder, c.quantTable, co);
      } else {
        st = m_executor->runNodes(diff == changed ? cone : coneOf(diff), c.quantTable, co);
      }
      if (!st) return st;
      c.state = target;
    }
    // Cone nodes this batch did not re-run (its table was ahead, after an interrupted update):
    // run again, to the same outputs, so that their sums come as in any other pass.
    if (const std::vector<NodeId> rest = compare.remaining(cone); !rest.empty()) {
      const Status st = m_executor->runNodes(rest, c.quantTable, co);
      if (!st) return st;
    }
    accumulateOutputs(g, c.floatTable, c.quantTable, outB[(size_t)b]);
    return Status::ok();
  };
  // A batch beyond the cache budget: float and quantized passes in full.
  auto recompute = [&](int64_t b) -> Status {
    auto feeds = m_data->batch(b);
    if (!feeds) return feeds.status();
    auto ft = floatPass(*feeds);
    if (!ft) return ft.status();
    nodeB[(size_t)b].resize(N);
    outB[(size_t)b].resize(g.outputs.size());
    return quantizedPass(*feeds, *ft, t, &cone, nodeB[(size_t)b], outB[(size_t)b]);
  };

  report();
  // Cached batches in parallel, one batch per thread (the kernels then run serially inside,
  // which suits small per-sample ops); the others one at a time with threaded kernels, so that
  // two full tables of a large model are never built at once.
  forEachItem(m_executor->threads(), cachedCount, [&](int64_t b) {
    if (stop.load() || m_cancelToken->cancelled()) return;
    statusB[(size_t)b] = updateCached(b);
    if (!statusB[(size_t)b]) stop = true;
    ++done;
    report();
  });
  for (int64_t b = cachedCount; b < batches && !stop.load() && !m_cancelToken->cancelled(); ++b) {
    statusB[(size_t)b] = recompute(b);
    if (!statusB[(size_t)b]) stop = true;
    ++done;
    report();
  }
  if (stop.load() || m_cancelToken->cancelled()) {
    m_plan = previous;  // cached tables keep their own states; the next toggle brings them along
    for (const Status& st : statusB)
      if (!st && st.code() != StatusCode::Cancelled) return st;
    return cancelled(*m_model);
  }

  std::vector<ErrorAccumulator> nodeAcc = m_nodeAcc, outAcc(g.outputs.size());
  for (NodeId id : cone) {
    ErrorAccumulator a;
    for (int64_t b = 0; b < batches; ++b) a.merge(nodeB[(size_t)b][(size_t)id]);
    nodeAcc[(size_t)id] = a;
  }
  for (size_t o = 0; o < g.outputs.size(); ++o)
    for (int64_t b = 0; b < batches; ++b) outAcc[o].merge(outB[(size_t)b][o]);
  m_nodeAcc = std::move(nodeAcc);
  m_outAcc = std::move(outAcc);
  auto r = std::make_shared<AnalysisResult>(*m_result);
  finishResult(*r, m_nodeAcc, m_outAcc);
  m_result = r;
  keepGoing(progress, 1.0, "re-analysed");
  return m_result;
}

Result<std::vector<FallbackStep>> QuantSession::autoFallback(double targetDb, const ProgressFn& progress) {
  if (!m_result) return invalidArgument(m_model->path + ": auto fallback needs a prior analysis");
  std::vector<FallbackStep> steps;
  while (m_result->worstOutputSnrDb() < targetDb) {
    NodeId worst = -1;
    double worstSnr = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < m_plan.nodes.size(); ++i) {
      if (!m_plan.nodes[i].quantized) continue;
      double s = m_result->nodes[i].sensitivitySnrDb;
      if (std::isnan(s)) continue;
      if (worst < 0 || s < worstSnr) {
        worst = (NodeId)i;
        worstSnr = s;
      }
    }
    if (worst < 0) break;
    auto r = setQuantized({{worst, false}}, [&](double f, const std::string& stage) {
      return !progress || progress(f, "fallback: " + stage);
    });
    if (!r) return r.status();
    FallbackStep step;
    step.excluded = worst;
    for (const auto& o : m_result->outputs) step.outputSnrDb.push_back(o.metrics.snrDb);
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace qs
