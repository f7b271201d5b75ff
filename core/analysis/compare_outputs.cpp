#include "core/analysis/compare_outputs.h"

#include <algorithm>

namespace qs {

CompareOutputs::CompareOutputs(const Graph& g, const std::vector<Tensor>& ref, const std::vector<NodeId>* nodes,
                               std::vector<ErrorAccumulator>& acc, int threads, const std::vector<AffineOp>& affine)
    : m_g(g), m_ref(ref), m_wanted(g.nodes.size(), nodes ? 0 : 1), m_done(g.nodes.size(), 0), m_acc(acc),
      m_threads(threads), m_affine(affine) {
  if (nodes)
    for (NodeId id : *nodes) m_wanted[(size_t)id] = 1;
}

void CompareOutputs::onNodeOutput(NodeId node, size_t output, ValueId id, const Tensor& t) {
  if (output != 0 || !m_wanted[(size_t)node]) return;
  m_wanted[(size_t)node] = 0;  // what is left set was not run (see remaining())
  const Tensor& a = m_ref[(size_t)id];
  if (a.dtype() != DType::Float || t.dtype() != DType::Float || a.numel() != t.numel()) return;
  m_done[(size_t)node] = 1;
  if (!derive(node, a.numel())) m_acc[(size_t)node].add(a, t, m_threads);
}

bool CompareOutputs::derive(NodeId node, int64_t elements, NodeId source) {
  const NodeId p = source >= 0 && source == affineSource(node) ? source : affineProducer(node, elements);
  if (p < 0 || !m_done[(size_t)p]) return false;
  const AffineOp& op = m_affine[(size_t)node];
  m_wanted[(size_t)node] = 0;
  m_done[(size_t)node] = 1;
  m_acc[(size_t)node].merge(m_acc[(size_t)p].affine(op.a, op.b));
  return true;
}

NodeId CompareOutputs::affineProducer(NodeId node, int64_t elements) const {
  const NodeId p = affineSource(node);
  return p >= 0 && m_ref[(size_t)m_g.nodes[(size_t)p].outputs[0]].numel() == elements ? p : -1;
}

NodeId CompareOutputs::affineSource(NodeId node) const {
  const AffineOp& op = m_affine[(size_t)node];
  if (op.input < 0) return -1;
  const ValueId in = m_g.nodes[(size_t)node].inputs[(size_t)op.input];
  const NodeId p = m_g.value(in).producer;
  return p >= 0 && m_g.nodes[(size_t)p].outputs[0] == in ? p : -1;
}

const Tensor* CompareOutputs::reference(NodeId node) {
  if (!m_wanted[(size_t)node]) return nullptr;
  const Node& n = m_g.nodes[(size_t)node];
  if (n.outputs.empty() || n.outputs[0] == kNoValue) return nullptr;
  const Tensor& a = m_ref[(size_t)n.outputs[0]];
  return a.dtype() == DType::Float ? &a : nullptr;
}

void CompareOutputs::compared(NodeId node, const ErrorAccumulator& sums) {
  m_wanted[(size_t)node] = 0;
  m_done[(size_t)node] = 1;
  m_acc[(size_t)node].merge(sums);
}

std::vector<NodeId> CompareOutputs::remaining(const std::vector<NodeId>& nodes) const {
  std::vector<NodeId> r;
  for (NodeId id : nodes)
    if (m_wanted[(size_t)id]) r.push_back(id);
  return r;
}

void accumulateOutputs(const Graph& g, const std::vector<Tensor>& ref, const std::vector<Tensor>& got,
                       std::vector<ErrorAccumulator>& acc, const std::vector<OutputKind>* kinds,
                       std::vector<AgreementAccumulator>* agreement) {
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Tensor& a = ref[(size_t)g.outputs[i]];
    const Tensor& b = got[(size_t)g.outputs[i]];
    if (a.numel() == b.numel() && !a.empty()) acc[i].add(a, b);
    if (agreement && !a.empty()) accumulateAgreement(g, i, a, b, kinds, (*agreement)[i]);
  }
}

void accumulateAgreement(const Graph& g, size_t output, const Tensor& ref, const Tensor& got,
                         const std::vector<OutputKind>* kinds, AgreementAccumulator& acc) {
  const OutputKind requested = kinds && output < kinds->size() ? (*kinds)[output] : OutputKind::Auto;
  acc.add(ref, got, outputKind(g, g.outputs[output], ref, requested));
}

namespace {
// Which ops of a chain are compared for real: those CompareOutputs will not derive, i.e. all but
// the a x + b ops whose producer is compared by then (an earlier op of the chain, or done before it).
// `pair`: the chain's float outputs are not in the table yet (runChainPair), but will have n values.
std::vector<char> comparedForReal(const ElementwiseChain& ch, const CompareOutputs& compare, int64_t n, bool pair) {
  const size_t K = ch.ops.size();
  std::vector<char> real(K, 1);
  for (size_t i = 0; i < K; ++i) {
    const auto before = ch.nodes.begin() + (std::ptrdiff_t)i;
    const NodeId source = compare.affineSource(ch.nodes[i]);
    const NodeId p = pair && std::find(ch.nodes.begin(), before, source) != before
                         ? source : compare.affineProducer(ch.nodes[i], n);
    const bool inChain = std::find(ch.nodes.begin(), before, p) != before;
    real[i] = !(p >= 0 && (inChain || compare.done(p)));
  }
  return real;
}

// A chain's operands are chain values (x's shape) or one-element constants; one of more dims
// than x would broadcast the output to more dims.
bool constantsFit(const Graph& g, const ElementwiseChain& ch, const Tensor& x) {
  for (NodeId id : ch.nodes)
    for (ValueId v : g.nodes[(size_t)id].inputs)
      if (v != kNoValue && g.value(v).constant && g.value(v).constant->rank() > x.rank()) return false;
  return true;
}
}  // namespace

bool runChain(const Graph& g, const ElementwiseChain& ch, std::vector<Tensor>& quantTable,
              const std::vector<Tensor>& floatTable, CompareOutputs& compare, bool storeAll) {
  const Tensor& x = quantTable[(size_t)ch.input];
  if (x.dtype() != DType::Float) return false;
  const size_t K = ch.ops.size();
  std::vector<ValueId> out(K);
  for (size_t i = 0; i < K; ++i) {
    out[i] = g.nodes[(size_t)ch.nodes[i]].outputs[0];
    const Tensor& r = floatTable[(size_t)out[i]];
    if (r.dtype() != DType::Float || r.shape() != x.shape()) return false;
  }
  const int64_t n = x.numel();
  const std::vector<char> real = comparedForReal(ch, compare, n, false);
  // Outputs stored: those read outside the chain (and all where the batch is kept for toggles);
  // the others live in one piece of scratch each, while their piece is in cache.
  std::vector<Tensor> outs(K);
  std::vector<ErrorAccumulator> sums(K);
  std::vector<ChainOutput> targets(K);
  for (size_t i = 0; i < K; ++i) {
    if (storeAll || ch.stored[i]) {
      outs[i] = Tensor(DType::Float, x.shape());
      targets[i].store = outs[i].data<float>();
    }
    if (real[i]) {
      targets[i].reference = floatTable[(size_t)out[i]].data<float>();
      targets[i].sums = &sums[i];
    }
  }
  runElementwiseChain(ch.ops, x.data<float>(), n, targets);
  for (size_t i = 0; i < K; ++i)
    if (!outs[i].empty()) quantTable[(size_t)out[i]] = std::move(outs[i]);
  // In chain order, so that a derived op finds its producer compared.
  for (size_t i = 0; i < K; ++i) {
    if (real[i]) compare.compared(ch.nodes[i], sums[i]);
    else compare.derive(ch.nodes[i], n);
  }
  return true;
}

namespace {
// How `s` broadcasts to `out` (rank >= s's): value i of out reads s's (i / inner) % period. False
// where s's dims other than 1 are not one block of out's.
bool broadcastOperand(const Shape& s, const Shape& out, ChainOperand& e) {
  const size_t R = out.size(), r = s.size();
  auto dim = [&](size_t k) { return k + r < R ? int64_t(1) : s[k + r - R]; };
  size_t f = R, l = 0;
  for (size_t k = 0; k < R; ++k)
    if (dim(k) != 1) {
      f = std::min(f, k);
      l = k;
    }
  e.inner = 1;
  e.period = 1;
  if (f == R) {  // one value
    for (int64_t d : out) e.inner *= d;
    return true;
  }
  for (size_t k = f; k <= l; ++k) {
    if (dim(k) != out[k]) return false;
    e.period *= out[k];
  }
  for (size_t k = l + 1; k < R; ++k) e.inner *= out[k];
  if (e.inner == 1 && f == 0) e.period = 0;  // out's own shape
  return true;
}
}  // namespace

bool runComparedBinary(int kind, const Tensor& a, const Tensor& b, const Tensor& ref, Tensor& out,
                       ErrorAccumulator& sums, int threads) {
  if (a.dtype() != DType::Float || b.dtype() != DType::Float || ref.dtype() != DType::Float) return false;
  const Shape &sa = a.shape(), &sb = b.shape();
  const size_t R = std::max(sa.size(), sb.size());
  Shape shape(R);
  for (size_t k = 0; k < R; ++k) {
    const int64_t da = k + sa.size() < R ? 1 : sa[k + sa.size() - R], db = k + sb.size() < R ? 1 : sb[k + sb.size() - R];
    if (da != db && da != 1 && db != 1) return false;
    shape[k] = da == 1 ? db : da;
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  ChainOperand operands[2];
  if (n <= 0 || ref.numel() != n || !broadcastOperand(sa, shape, operands[0]) || !broadcastOperand(sb, shape, operands[1]))
    return false;
  operands[0].data = a.data<float>();
  operands[1].data = b.data<float>();
  ChainOp op;
  op.kind = (ChainOp::Kind)kind;
  op.a = -2;
  op.b = -3;
  Tensor o(DType::Float, shape);
  ChainOutput target;
  target.store = o.data<float>();
  target.reference = ref.data<float>();
  target.sums = &sums;
  runElementwiseChain(std::span<const ChainOp>(&op, 1), nullptr, n, std::span<const ChainOutput>(&target, 1), operands,
                      threads);
  out = std::move(o);
  return true;
}

bool runFloatChain(const Graph& g, const ElementwiseChain& ch, std::vector<Tensor>& floatTable) {
  const Tensor& x = floatTable[(size_t)ch.input];
  if (x.dtype() != DType::Float || !constantsFit(g, ch, x)) return false;
  const size_t K = ch.ops.size();
  std::vector<Tensor> outs(K);
  std::vector<ChainOutput> targets(K);
  for (size_t i = 0; i < K; ++i) {
    outs[i] = Tensor(DType::Float, x.shape());
    targets[i].store = outs[i].data<float>();
  }
  runElementwiseChain(ch.ops, x.data<float>(), x.numel(), targets);
  for (size_t i = 0; i < K; ++i) floatTable[(size_t)g.nodes[(size_t)ch.nodes[i]].outputs[0]] = std::move(outs[i]);
  return true;
}

bool runChainPair(const Graph& g, const ElementwiseChain& ch, std::vector<Tensor>& floatTable,
                  std::vector<Tensor>& quantTable, CompareOutputs& compare, bool storeAll,
                  const std::vector<char>& storeFloat) {
  const Tensor &xf = floatTable[(size_t)ch.input], &x = quantTable[(size_t)ch.input];
  if (xf.dtype() != DType::Float || x.dtype() != DType::Float || xf.shape() != x.shape() || !constantsFit(g, ch, x))
    return false;
  const size_t K = ch.ops.size();
  const int64_t n = x.numel();
  const std::vector<char> real = comparedForReal(ch, compare, n, true);
  std::vector<Tensor> floatOuts(K), outs(K);
  std::vector<float*> floatStores(K, nullptr);
  std::vector<ErrorAccumulator> sums(K);
  std::vector<ChainOutput> targets(K);
  for (size_t i = 0; i < K; ++i) {
    if (storeFloat[i]) {
      floatOuts[i] = Tensor(DType::Float, x.shape());
      floatStores[i] = floatOuts[i].data<float>();
    }
    if (storeAll || ch.stored[i]) {
      outs[i] = Tensor(DType::Float, x.shape());
      targets[i].store = outs[i].data<float>();
    }
    if (real[i]) targets[i].sums = &sums[i];
  }
  runElementwiseChainPair(ch.ops, xf.data<float>(), x.data<float>(), n, floatStores, targets);
  for (size_t i = 0; i < K; ++i) {
    const ValueId v = g.nodes[(size_t)ch.nodes[i]].outputs[0];
    if (!floatOuts[i].empty()) floatTable[(size_t)v] = std::move(floatOuts[i]);
    if (!outs[i].empty()) quantTable[(size_t)v] = std::move(outs[i]);
  }
  for (size_t i = 0; i < K; ++i) {
    if (real[i]) compare.compared(ch.nodes[i], sums[i]);
    else compare.derive(ch.nodes[i], n, compare.affineSource(ch.nodes[i]));
  }
  return true;
}

}  // namespace qs
