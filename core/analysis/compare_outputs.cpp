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

bool CompareOutputs::derive(NodeId node, int64_t elements) {
  const NodeId p = affineProducer(node, elements);
  if (p < 0 || !m_done[(size_t)p]) return false;
  const AffineOp& op = m_affine[(size_t)node];
  m_wanted[(size_t)node] = 0;
  m_done[(size_t)node] = 1;
  m_acc[(size_t)node].merge(m_acc[(size_t)p].affine(op.a, op.b));
  return true;
}

NodeId CompareOutputs::affineProducer(NodeId node, int64_t elements) const {
  const AffineOp& op = m_affine[(size_t)node];
  if (op.input < 0) return -1;
  const ValueId in = m_g.nodes[(size_t)node].inputs[(size_t)op.input];
  const NodeId p = m_g.value(in).producer;
  return p >= 0 && m_g.nodes[(size_t)p].outputs[0] == in && m_ref[(size_t)in].numel() == elements ? p : -1;
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
  // Which ops are compared for real: those CompareOutputs will not derive, i.e. all but the a x + b
  // ops whose producer is compared by then (an earlier op of the chain, or done before it).
  const int64_t n = x.numel();
  std::vector<char> real(K, 1);
  for (size_t i = 0; i < K; ++i) {
    const NodeId p = compare.affineProducer(ch.nodes[i], n);
    const auto before = ch.nodes.begin() + (std::ptrdiff_t)i;
    const bool inChain = std::find(ch.nodes.begin(), before, p) != before;
    real[i] = !(p >= 0 && (inChain || compare.done(p)));
  }
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

bool runFloatChain(const Graph& g, const ElementwiseChain& ch, std::vector<Tensor>& floatTable) {
  const Tensor& x = floatTable[(size_t)ch.input];
  if (x.dtype() != DType::Float) return false;
  // A chain's operands are chain values (x's shape) or one-element constants; one of more dims
  // than x would broadcast the output to more dims.
  for (NodeId id : ch.nodes)
    for (ValueId v : g.nodes[(size_t)id].inputs)
      if (v != kNoValue && g.value(v).constant && g.value(v).constant->rank() > x.rank()) return false;
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

}  // namespace qs
