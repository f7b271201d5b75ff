#include "core/analysis/batch_sweep.h"

#include <climits>

#include "core/analysis/compare_outputs.h"
#include "core/analysis/layerwise_matmul.h"
#include "core/analysis/split_gram.h"

namespace qs {

Status PassContext::cancelled() const { return Status(StatusCode::Cancelled, model.path + ": analysis cancelled"); }

std::vector<NodeId> coneOf(const Graph& g, const std::vector<NodeId>& roots) {
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

uint64_t tableBytes(const Graph& g, const std::vector<Tensor>& t) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < t.size(); ++i)
    if (!g.values[i].constant) bytes += t[i].byteSize();
  return bytes;
}

Result<std::vector<Tensor>> floatPass(const PassContext& c, const std::vector<NamedTensor>& feeds) {
  auto table = c.executor.makeValueTable(feeds);
  if (!table) return table.status();
  RunOptions ro;
  ro.cancel = &c.cancel.flag();
  QS_RETURN_IF_ERROR(c.executor.runNodes(c.model.graph.topoOrder, *table, ro));
  return table;
}

Status quantizedPass(const PassContext& c, const std::vector<NamedTensor>& feeds, const std::vector<Tensor>& floatTable,
                     const FakeQuantTransform& transform, const std::vector<NodeId>* nodes,
                     std::vector<ErrorAccumulator>& nodeAcc, std::vector<ErrorAccumulator>& outAcc,
                     std::vector<AgreementAccumulator>* outAgreement) {
  const Graph& g = c.model.graph;
  CompareOutputs compare(g, floatTable, nodes, nodeAcc, c.threads(), c.paths.affine);
  FakeQuantTransform t = transform;  // this pass's own, comparing what it takes over
  t.setCompare(&compare);
  RunOptions ro;
  ro.cancel = &c.cancel.flag();
  ro.inputTransform = &t;
  ro.observer = &compare;
  // Streamed: each node output is compared as it is produced, then freed after its last consumer.
  auto outs = c.executor.run(feeds, ro);
  if (!outs) return outs.status();
  for (size_t i = 0; i < g.outputs.size() && i < outs->size(); ++i) {
    const Tensor& a = floatTable[(size_t)g.outputs[i]];
    const Tensor& b = (*outs)[i];
    if (a.numel() == b.numel() && !a.empty()) outAcc[i].add(a, b, c.threads());
    if (outAgreement && !a.empty()) accumulateAgreement(g, i, a, b, &c.outputKinds, (*outAgreement)[i]);
  }
  return Status::ok();
}

Status sensitivityPass(const PassContext& c, const std::vector<NodeId>& cone, FakeQuantTransform& transform,
                       const std::vector<Tensor>& floatTable, ErrorAccumulator& acc) {
  // The cone over a copy of the float table (the copy shares buffers); what the cone computes is
  // released after its last reader in the cone, so at most the cone's live values are held.
  const Graph& g = c.model.graph;
  std::vector<Tensor> table = floatTable;
  std::vector<int> lastUse(g.values.size(), -1);
  for (size_t k = 0; k < cone.size(); ++k)
    for (ValueId v : g.nodes[(size_t)cone[k]].inputs)
      if (v != kNoValue) lastUse[(size_t)v] = (int)k;
  for (ValueId v : g.outputs) lastUse[(size_t)v] = INT32_MAX;
  std::vector<const Tensor*> inputs;
  for (size_t k = 0; k < cone.size(); ++k) {
    if (c.cancel.cancelled()) return c.cancelled();
    const NodeId id = cone[k];
    const Node& node = g.nodes[(size_t)id];
    inputs.assign(node.inputs.size(), nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue) inputs[i] = &table[(size_t)node.inputs[i]];
    auto outs = c.executor.runNode(id, inputs, &transform);
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
    if (!a.empty() && a.numel() == table[(size_t)out].numel()) acc.add(a, table[(size_t)out], c.threads());
  }
  return Status::ok();
}

Status updateCachedBatch(const PassContext& c, BatchCache& cache, const std::vector<char>& target,
                         const std::vector<NodeId>& changed, const std::vector<NodeId>& cone,
                         const FakeQuantTransform& transform, std::vector<ErrorAccumulator>& nodeAcc,
                         std::vector<ErrorAccumulator>& outAcc, std::vector<AgreementAccumulator>* outAgreement) {
  const Graph& g = c.model.graph;
  const size_t N = g.nodes.size();
  CompareOutputs compare(g, cache.floatTable, &cone, nodeAcc, c.threads(), c.paths.affine);
  FakeQuantTransform t = transform;  // this batch's: it compares the nodes it takes over
  t.setCompare(&compare);
  RunOptions ro;
  ro.cancel = &c.cancel.flag();
  ro.observer = &compare;
  ro.inputTransform = &t;
  if (cache.state != target) {
    std::vector<NodeId> diff;
    bool known = cache.state.size() == N;
    if (known)
      for (size_t i = 0; i < N; ++i)
        if (cache.state[i] != target[i]) diff.push_back((NodeId)i);
    cache.state.clear();  // unknown until the update completes
    Status st;
    if (!known) {
      cache.quantTable = cache.floatTable;  // inputs and constants; every node output is replaced
      st = c.executor.runNodes(g.topoOrder, cache.quantTable, ro);
    } else {
      st = c.executor.runNodes(diff == changed ? cone : coneOf(g, diff), cache.quantTable, ro);
    }
    if (!st) return st;
    cache.state = target;
  }
  // Cone nodes this batch did not re-run (its table was ahead, after an interrupted update):
  // run again, to the same outputs, so that their sums come as in any other pass.
  if (const std::vector<NodeId> rest = compare.remaining(cone); !rest.empty()) {
    const Status st = c.executor.runNodes(rest, cache.quantTable, ro);
    if (!st) return st;
  }
  accumulateOutputs(g, cache.floatTable, cache.quantTable, outAcc, &c.outputKinds, outAgreement);
  return Status::ok();
}

BatchSweep::BatchSweep(const PassContext& c, const QuantPlan& plan, std::vector<char> enabled, bool layerwise,
                       bool sensitivity)
    : m_c(c), m_g(c.model.graph), m_enabled(std::move(enabled)), m_layerwise(layerwise), m_sensitivity(sensitivity) {
  const size_t N = m_g.nodes.size();
  m_quantizable.assign(N, 0);
  m_hasWeight.assign(N, 0);
  m_hasAct.assign(N, 0);
  for (size_t i = 0; i < N; ++i) m_quantizable[i] = plan.nodes[i].quantizable;
  for (const auto& w : plan.weights) m_hasWeight[(size_t)w.node] = 1;
  for (const auto& a : plan.activations) m_hasAct[(size_t)a.node] = 1;
  for (NodeId id : m_g.topoOrder)
    if (m_quantizable[(size_t)id]) m_candidates.push_back(id);
  if (m_sensitivity) {
    m_cones.reserve(m_candidates.size());
    for (NodeId id : m_candidates) m_cones.push_back(coneOf(m_g, {id}));
  }
  // Consumers of each value (plus graph-output uses): a value is dead after its last consumer.
  m_useCount.assign(m_g.values.size(), 0);
  for (const Node& n : m_g.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++m_useCount[(size_t)v];
  for (ValueId v : m_g.outputs) ++m_useCount[(size_t)v];
  if (m_layerwise && m_c.paths.gramSplit) m_grams = std::make_shared<SplitGramCache>(N);
}

// The layer-wise runs of one node on its float inputs: both points, and for the split each
// kind alone (with one kind of point only, the other figure is the layer-wise one).
Status BatchSweep::layerwiseNode(NodeId id, const std::vector<Tensor>& floatTable, int64_t batches,
                                 BatchSums& S) const {
  const Node& n = m_g.nodes[(size_t)id];
  if (n.outputs.empty() || n.outputs[0] == kNoValue) return Status::ok();
  const Tensor& ref = floatTable[(size_t)n.outputs[0]];
  if (ref.dtype() != DType::Float) return Status::ok();
  const size_t k = n.inputs.size(), i = (size_t)id;
  const bool both = m_hasWeight[i] && m_hasAct[i];
  std::vector<const Tensor*> floatIn(k, nullptr);
  for (size_t j = 0; j < k; ++j)
    if (n.inputs[j] != kNoValue) floatIn[j] = &floatTable[(size_t)n.inputs[j]];
  // --bias-correction: the node runs with its corrected bias in all three runs (part of the node as
  // quantized, as in the export), compared with the original float output.
  for (size_t j = 0; j < k; ++j)
    if (const ConstantCorrection* c = m_c.state.correction(id, j); c && c->owner == id) floatIn[j] = &c->value;
  if (const IntConvNode* ic = m_c.paths.intConv[i].get(); ic && both) {
    // The integer GEMMs give both points, activations only and what weight quantization alone
    // changes, each compared with the float output in the GEMM's epilogue (nothing stored).
    QConvOutputs out;
    out.reference = ref.data<float>();
    out.fullSums = &S.layer[i];
    out.actSums = &S.act[i];
    out.weightSums = &S.weight[i];
    if (runIntConvNode(m_c.state, *ic, floatIn, out, ref.numel())) return Status::ok();
  }
  if (const DepthwiseNode* dw = m_c.paths.dwConv[i].get(); dw && both) {
    ErrorAccumulator* const sums[3] = {&S.layer[i], &S.act[i], &S.weight[i]};
    if (runDepthwiseNode(m_c.state, *dw, floatIn, nullptr, &ref, sums)) return Status::ok();
  }
  // Each input once: float, with its activation point applied, with its weight point applied
  // (a placement puts at most one point on an input).
  FakeQuantTransform ta(m_c.state, m_c.paths, id, FakeQuantTransform::kActivations);
  FakeQuantTransform tw(m_c.state, m_c.paths, id, FakeQuantTransform::kWeights);
  std::vector<const Tensor*> actIn = floatIn, weightIn = floatIn, inputs(k, nullptr);
  std::vector<Tensor> storage(k);
  Tensor unused;
  for (size_t j = 0; j < k; ++j) {
    if (!floatIn[j]) continue;
    if (const Tensor* q = ta.transform(id, j, *floatIn[j], storage[j])) actIn[j] = q;
    if (const Tensor* q = tw.transform(id, j, *floatIn[j], unused)) weightIn[j] = q;
  }
  // A MatMul with an activation point on A and a weight point on B: the three runs in one go,
  // Xq and Wq packed once (the same output bits as three runs of the node).
  if (both && k == 2 && n.opType == "MatMul" && floatIn[0] && floatIn[1] && actIn[0] != floatIn[0] &&
      weightIn[0] == floatIn[0] && actIn[1] == floatIn[1] && weightIn[1] != floatIn[1]) {
    // Where it costs less, the split from Gram matrices (split_gram.h): one product, not three.
    const Tensor &x = *floatIn[0], &w = *floatIn[1];
    const PackedMatMulWeight* pw = i < m_c.paths.packedWq.size() ? m_c.paths.packedWq[i].get() : nullptr;
    const bool packed = pw && pw->packs(*weightIn[1]);
    const PackedPanels* wqPanels = packed ? &pw->panels : nullptr;
    const DnnlMatMul* wqDnnl = packed ? pw->dnnl.get() : nullptr;
    if (m_grams && x.rank() >= 2 && w.rank() == 2 && x.shape().back() > 0 &&
        gramSplitPays(x.numel() / x.shape().back(), w.shape()[0], w.shape()[1], batches) &&
        layerwiseMatMulGram(x, *actIn[0], w, *weightIn[1], ref, m_c.threads(), m_grams->get(i, w, *weightIn[1]),
                            S.layer[i], S.weight[i], S.act[i], wqPanels, wqDnnl))
      return Status::ok();
    if (layerwiseMatMul(x, *actIn[0], w, *weightIn[1], ref, m_c.threads(), S.layer[i], S.weight[i], S.act[i], wqPanels,
                        wqDnnl))
      return Status::ok();
  }
  auto runWith = [&](int parts, ErrorAccumulator& acc) -> Status {
    for (size_t j = 0; j < k; ++j) {
      inputs[j] = floatIn[j];
      if ((parts & FakeQuantTransform::kActivations) && actIn[j] != floatIn[j]) inputs[j] = actIn[j];
      if ((parts & FakeQuantTransform::kWeights) && weightIn[j] != floatIn[j]) inputs[j] = weightIn[j];
    }
    auto outs = m_c.executor.runNode(id, inputs);
    if (!outs) return outs.status();
    acc.add(ref, (*outs)[0], m_c.threads());
    return Status::ok();
  };
  QS_RETURN_IF_ERROR(runWith(FakeQuantTransform::kBoth, S.layer[i]));
  if (both) {
    QS_RETURN_IF_ERROR(runWith(FakeQuantTransform::kWeights, S.weight[i]));
    QS_RETURN_IF_ERROR(runWith(FakeQuantTransform::kActivations, S.act[i]));
  } else if (m_hasWeight[i]) {
    S.weight[i] = S.layer[i];
  } else {
    S.act[i] = S.layer[i];
  }
  return Status::ok();
}

// Each quantizable node alone, its downstream cone re-run over the float table.
Status BatchSweep::sensitivity(const std::vector<Tensor>& floatTable, BatchSums& S, const Report& report) const {
  for (size_t c = 0; c < m_candidates.size(); ++c) {
    if (c % 8 == 0 && !report(0.6 + 0.4 * (double)c / (double)m_candidates.size(), "sensitivity"))
      return m_c.cancelled();
    FakeQuantTransform t(m_c.state, m_c.paths, m_candidates[c]);
    QS_RETURN_IF_ERROR(sensitivityPass(m_c, m_cones[c], t, floatTable, S.sens[(size_t)m_candidates[c]]));
  }
  return Status::ok();
}

// One sweep in topological order runs each node on float inputs, then with the enabled points on
// the quantized inputs (compared with the float output at once), then alone for the layer-wise
// figures: every tensor is used while it is still in cache, and values die after their last
// consumer, so a batch needs no more memory than two plain runs. With `keep`, both tables are
// kept for toggles while `budget` bytes allow (the float one also for the sensitivity cones);
// from the first node past it, dead values go and *kept is left empty.
Status BatchSweep::run(const CalibrationData& data, int64_t b, bool keep, uint64_t budget,
                       std::unique_ptr<BatchCache>* kept, uint64_t& batchBytes, BatchSums& S,
                       const Report& report, const std::vector<int32_t>* keepFloat) const {
  static const std::string kSweepStage = "float, graph-wise and layer-wise";
  const size_t N = m_g.nodes.size();
  const std::vector<NodeId>& order = m_g.topoOrder;
  S.node.resize(N);
  S.out.resize(m_g.outputs.size());
  S.agree.resize(m_g.outputs.size());
  S.layer.resize(N);
  S.weight.resize(N);
  S.act.resize(N);
  S.sens.resize(N);
  const double sweepShare = m_sensitivity ? 0.6 : 1.0;
  if (!report(0, kSweepStage)) return m_c.cancelled();
  auto feeds = data.batch(b);
  if (!feeds) return feeds.status();
  auto table = m_c.executor.makeValueTable(*feeds);
  if (!table) return table.status();
  std::vector<Tensor> floatTable = std::move(table).value();
  std::vector<char> persistent(m_g.values.size(), 0);  // constants and feeds: never freed
  for (size_t v = 0; v < floatTable.size(); ++v) persistent[v] = !floatTable[v].empty();
  std::vector<Tensor> quantTable = floatTable;  // shares the feeds' and constants' buffers
  std::vector<int32_t> uses = m_useCount;
  batchBytes = 2 * tableBytes(m_g, floatTable);  // the feeds, counted in both tables as the cache does
  bool keeping = keep && batchBytes <= budget;
  auto release = [&](ValueId v) {
    if (uses[(size_t)v] > 0 || persistent[(size_t)v]) return;
    quantTable[(size_t)v] = Tensor();
    if (!m_sensitivity) floatTable[(size_t)v] = Tensor();
  };
  CompareOutputs compare(m_g, floatTable, nullptr, S.node, m_c.threads(), m_c.paths.affine);
  FakeQuantTransform all(m_c.state, m_c.paths, m_enabled);  // this batch's: it compares the nodes it takes over
  all.setCompare(&compare);
  RunOptions rf, rq;
  rf.cancel = rq.cancel = &m_c.cancel.flag();
  rq.inputTransform = &all;
  rq.observer = &compare;
  // Chain members run at their head's turn (ElementwiseChain): float first, then quantized, each
  // in one pass.
  std::vector<char> floatDone(N, 0), quantDone(N, 0);
  for (size_t k = 0; k < order.size(); ++k) {
    const NodeId id = order[k];
    if (k % 16 == 0 && !report(sweepShare * (double)k / (double)order.size(), kSweepStage)) return m_c.cancelled();
    const std::span<const NodeId> one(&order[k], 1);
    if (const ElementwiseChain* ch = m_c.paths.chainAt[(size_t)id].get(); ch && !floatDone[(size_t)id]) {
      // Both passes piece by piece where they can: the float outputs that nothing reads after the
      // chain (not kept for toggles, the sensitivity cones or the caller) are never stored.
      std::vector<char> storeFloat(ch->nodes.size(), 1);
      if (!keeping && !m_sensitivity)
        for (size_t i = 0; i < ch->nodes.size(); ++i) {
          const ValueId v = m_g.nodes[(size_t)ch->nodes[i]].outputs[0];
          storeFloat[i] = ch->stored[i] || (keepFloat && (*keepFloat)[(size_t)v] > 0);
        }
      if (runChainPair(m_g, *ch, floatTable, quantTable, compare, keeping, storeFloat)) {
        for (NodeId member : ch->nodes) floatDone[(size_t)member] = quantDone[(size_t)member] = 1;
      } else {
        if (!runFloatChain(m_g, *ch, floatTable))
          for (const NodeId& member : ch->nodes)
            QS_RETURN_IF_ERROR(m_c.executor.runNodes(std::span<const NodeId>(&member, 1), floatTable, rf));
        for (NodeId member : ch->nodes) floatDone[(size_t)member] = 1;
        if (runChain(m_g, *ch, quantTable, floatTable, compare, keeping))
          for (NodeId member : ch->nodes) quantDone[(size_t)member] = 1;
      }
    }
    if (!floatDone[(size_t)id]) QS_RETURN_IF_ERROR(m_c.executor.runNodes(one, floatTable, rf));
    if (!quantDone[(size_t)id]) QS_RETURN_IF_ERROR(m_c.executor.runNodes(one, quantTable, rq));
    if (m_layerwise && m_quantizable[(size_t)id]) QS_RETURN_IF_ERROR(layerwiseNode(id, floatTable, data.batchCount(), S));
    const Node& n = m_g.nodes[(size_t)id];
    if (keepFloat)  // before the release below: a value nobody reads goes at once
      for (ValueId v : n.outputs)
        if (v != kNoValue && (*keepFloat)[(size_t)v] > 0 && !floatTable[(size_t)v].empty())
          S.keptFloat.emplace_back(v, floatTable[(size_t)v]);
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
  accumulateOutputs(m_g, floatTable, quantTable, S.out, &m_c.outputKinds, &S.agree);
  if (m_sensitivity) QS_RETURN_IF_ERROR(sensitivity(floatTable, S, report));
  if (!keeping)
    for (ValueId out : m_g.outputs) S.floatOutputs.push_back(floatTable[(size_t)out]);
  if (keeping) {
    auto bc = std::make_unique<BatchCache>();
    bc->floatTable = std::move(floatTable);
    bc->quantTable = std::move(quantTable);
    bc->state = m_enabled;
    *kept = std::move(bc);
  }
  return Status::ok();
}

}  // namespace qs
