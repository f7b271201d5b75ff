#include "core/analysis/streaming.h"

#include <algorithm>
#include <climits>
#include <numeric>

namespace qs {

MemoryPlan planMemory(uint64_t budget, uint64_t cacheBudget, uint64_t floatTableBytes, int64_t batches, int threads,
                      bool cones) {
  MemoryPlan p;
  p.cacheBudget = std::min(cacheBudget, budget / 2);
  p.batchThreads = std::max(1, threads);
  if (floatTableBytes == 0) return p;
  // The cones read a whole float table per batch: batches run side by side only as far as their
  // tables fit together in half the budget, and at most in the cache budget or 1 GiB (as before
  // budgets existed; a run that keeps nothing for toggles still runs its cones side by side).
  const uint64_t coneTables = std::min(budget / 2, std::max<uint64_t>(cacheBudget, uint64_t(1) << 30));
  if (cones)
    p.batchThreads = (int)std::max<uint64_t>(1, std::min<uint64_t>((uint64_t)p.batchThreads, coneTables / (floatTableBytes + 1)));
  const uint64_t held = cones ? (uint64_t)std::max<int64_t>(1, std::min<int64_t>(p.batchThreads, batches)) : 1;
  p.streaming = floatTableBytes > budget / held;
  // Streamed batches hold two live sets each, not tables: side by side again.
  if (p.streaming) p.batchThreads = std::max(1, threads);
  return p;
}

uint64_t boundedCacheBudget(uint64_t cacheBudget, double factor, uint64_t weightBytes, uint64_t activationBytes,
                            uint64_t residentBytes, uint64_t passBytes, uint64_t floorBytes) {
  if (!(factor > 0)) return cacheBudget;
  const double bound = factor * ((double)weightBytes + (double)activationBytes);
  const double left = bound - (double)residentBytes - (double)passBytes;
  const uint64_t fits = left >= (double)cacheBudget ? cacheBudget : left >= 1 ? (uint64_t)left : 0;
  return std::max(fits, std::min(floorBytes, cacheBudget));
}

namespace {

// A float walk over the nodes in topological order, each value freed after its last consumer
// (graph outputs, feeds and constants kept); before(k) runs before the node at position k, when
// `table` holds exactly the values that nodes from position k on read.
class FloatWalk {
 public:
  FloatWalk(const PassContext& c, const std::vector<NamedTensor>& feeds) : m_c(c), m_g(c.model.graph), m_feeds(feeds) {
    m_uses.assign(m_g.values.size(), 0);
    for (const Node& n : m_g.nodes)
      for (ValueId v : n.inputs)
        if (v != kNoValue) ++m_uses[(size_t)v];
    for (ValueId v : m_g.outputs) m_uses[(size_t)v] = INT32_MAX;
  }

  Status run(std::vector<Tensor>& table, const std::function<Status(size_t)>& before = {}) const {
    auto t = m_c.executor.makeValueTable(m_feeds);
    if (!t) return t.status();
    table = std::move(t).value();
    std::vector<char> persistent(table.size());
    for (size_t v = 0; v < table.size(); ++v) persistent[v] = !table[v].empty();
    std::vector<int32_t> uses = m_uses;
    RunOptions ro;
    ro.cancel = &m_c.cancel.flag();
    const std::vector<NodeId>& order = m_g.topoOrder;
    for (size_t k = 0; k < order.size(); ++k) {
      if (m_c.cancel.cancelled()) return m_c.cancelled();
      if (before) QS_RETURN_IF_ERROR(before(k));
      QS_RETURN_IF_ERROR(m_c.executor.runNodes(std::span<const NodeId>(&order[k], 1), table, ro));
      const Node& n = m_g.nodes[(size_t)order[k]];
      for (ValueId v : n.inputs)
        if (v != kNoValue && --uses[(size_t)v] == 0 && !persistent[(size_t)v]) table[(size_t)v] = Tensor();
      for (ValueId v : n.outputs)
        if (v != kNoValue && uses[(size_t)v] == 0) table[(size_t)v] = Tensor();
    }
    return Status::ok();
  }

 private:
  const PassContext& m_c;
  const Graph& m_g;
  const std::vector<NamedTensor>& m_feeds;
  std::vector<int32_t> m_uses;  // consumers of each value; graph outputs never die
};

}  // namespace

Result<uint64_t> measureFloatTableBytes(const PassContext& c, const std::vector<NamedTensor>& feeds) {
  struct Bytes : ExecutionObserver {
    uint64_t bytes = 0;
    void onGraphInput(ValueId, const Tensor& t) override { bytes += t.byteSize(); }
    void onNodeOutput(NodeId, size_t, ValueId, const Tensor& t) override { bytes += t.byteSize(); }
  } counter;
  RunOptions ro;
  ro.cancel = &c.cancel.flag();
  ro.observer = &counter;
  auto out = c.executor.run(feeds, ro);
  if (!out) return out.status();
  return counter.bytes;
}

Status streamingSensitivity(const PassContext& c, const std::vector<NamedTensor>& feeds,
                            const std::vector<NodeId>& nodes, const std::vector<std::vector<NodeId>>& cones,
                            std::vector<ErrorAccumulator>& sums, const std::function<bool(double)>& report) {
  const Graph& g = c.model.graph;
  const std::vector<NodeId>& order = g.topoOrder;
  const FloatWalk walk(c, feeds);
  // The float graph outputs, the reference of every cone: a walk of their own, before the one
  // that runs the cones mid-way.
  std::vector<Tensor> reference;
  QS_RETURN_IF_ERROR(walk.run(reference));
  std::vector<size_t> position(g.nodes.size(), SIZE_MAX);
  for (size_t k = 0; k < order.size(); ++k) position[(size_t)order[k]] = k;
  std::vector<size_t> byPosition(nodes.size());
  std::iota(byPosition.begin(), byPosition.end(), 0);
  std::stable_sort(byPosition.begin(), byPosition.end(),
                   [&](size_t a, size_t b) { return position[(size_t)nodes[a]] < position[(size_t)nodes[b]]; });
  size_t next = 0, done = 0;
  std::vector<char> inCone(g.nodes.size()), needed(g.nodes.size()), wanted(g.values.size());
  std::vector<size_t> lastUse(g.values.size());
  std::vector<const Tensor*> inputs;

  // The cone of nodes[i], whose node sits at position p, over the walk's live values `live`.
  auto cone = [&](size_t i, size_t p, const std::vector<Tensor>& live) -> Status {
    std::fill(inCone.begin(), inCone.end(), 0);
    for (NodeId id : cones[i]) inCone[(size_t)id] = 1;
    // Needed from p on: the cone, and the float nodes whose outputs it reads (transitively).
    std::fill(wanted.begin(), wanted.end(), 0);
    for (size_t q = order.size(); q-- > p;) {
      const Node& n = g.nodes[(size_t)order[q]];
      bool need = inCone[(size_t)order[q]] != 0;
      for (ValueId v : n.outputs) need = need || (v != kNoValue && wanted[(size_t)v]);
      needed[(size_t)order[q]] = need;
      if (!need) continue;
      for (ValueId v : n.inputs)
        if (v != kNoValue) wanted[(size_t)v] = 1;
    }
    std::fill(lastUse.begin(), lastUse.end(), 0);
    for (size_t q = p; q < order.size(); ++q)
      if (needed[(size_t)order[q]])
        for (ValueId v : g.nodes[(size_t)order[q]].inputs)
          if (v != kNoValue) lastUse[(size_t)v] = q;
    for (ValueId v : g.outputs) lastUse[(size_t)v] = SIZE_MAX;
    FakeQuantTransform t(c.state, c.paths, nodes[i]);
    std::vector<Tensor> table = live;  // shares the live buffers; the cone's own go after their last reader
    for (size_t q = p; q < order.size(); ++q) {
      const NodeId id = order[q];
      if (!needed[(size_t)id]) continue;
      if (c.cancel.cancelled()) return c.cancelled();
      const Node& n = g.nodes[(size_t)id];
      inputs.assign(n.inputs.size(), nullptr);
      for (size_t j = 0; j < n.inputs.size(); ++j)
        if (n.inputs[j] != kNoValue) inputs[j] = &table[(size_t)n.inputs[j]];
      auto outs = c.executor.runNode(id, inputs, inCone[(size_t)id] ? &t : nullptr);
      if (!outs) return outs.status();
      inputs.clear();
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        const ValueId v = n.outputs[o];
        if (v != kNoValue && lastUse[(size_t)v] > q) table[(size_t)v] = std::move((*outs)[o]);
      }
      for (ValueId v : n.inputs)
        if (v != kNoValue && lastUse[(size_t)v] == q) table[(size_t)v] = Tensor();
    }
    // As sensitivityPass: outputs outside the cone are the float ones, compared with themselves.
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      const ValueId out = g.outputs[o];
      const Tensor& a = reference[(size_t)out];
      const NodeId producer = g.value(out).producer;
      const Tensor& b = producer >= 0 && inCone[(size_t)producer] ? table[(size_t)out] : a;
      if (!a.empty() && a.numel() == b.numel()) sums[i].add(a, b, c.threads());
    }
    return Status::ok();
  };

  std::vector<Tensor> live;
  QS_RETURN_IF_ERROR(walk.run(live, [&](size_t k) -> Status {
    while (next < byPosition.size() && position[(size_t)nodes[byPosition[next]]] == k) {
      QS_RETURN_IF_ERROR(cone(byPosition[next], k, live));
      ++next;
      if (report && !report((double)++done / (double)nodes.size())) return c.cancelled();
    }
    return Status::ok();
  }));
  return Status::ok();
}

Status streamingToggleBatch(const PassContext& c, const QuantPlan& plan, const std::vector<char>& enabled,
                            const CalibrationData& data, int64_t b, const std::vector<NodeId>& cone,
                            std::vector<ErrorAccumulator>& nodeAcc, std::vector<ErrorAccumulator>& outAcc,
                            std::vector<AgreementAccumulator>* outAgreement) {
  const BatchSweep sweep(c, plan, enabled, false, false);
  BatchSums S;
  std::unique_ptr<BatchCache> none;
  uint64_t bytes = 0;
  QS_RETURN_IF_ERROR(sweep.run(data, b, false, 0, &none, bytes, S,
                               [&](double, const std::string&) { return !c.cancel.cancelled(); }));
  for (NodeId id : cone) nodeAcc[(size_t)id] = S.node[(size_t)id];
  for (size_t o = 0; o < outAcc.size() && o < S.out.size(); ++o) outAcc[o] = S.out[o];
  if (outAgreement)
    for (size_t o = 0; o < outAgreement->size() && o < S.agree.size(); ++o) (*outAgreement)[o] = S.agree[o];
  return Status::ok();
}

}  // namespace qs
