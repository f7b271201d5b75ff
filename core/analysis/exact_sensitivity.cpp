// QuantSession::exactSensitivity: the cone re-run for chosen nodes after an analysis (the
// selected node in the GUI, autoFallback's top candidates with the fast method).
#include <algorithm>
#include <cmath>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/batch_sweep.h"
#include "core/analysis/fast_sensitivity.h"
#include "core/analysis/quant_session.h"
#include "core/analysis/streaming.h"

namespace qs {

namespace {

// The values that the cone of each of `cones` reads from outside itself (graph inputs and
// constants excepted: they are in every value table), marked in `out`.
void markConeInputs(const Graph& g, const std::vector<NodeId>& cone, std::vector<char>& out) {
  std::vector<char> in(g.nodes.size(), 0);
  for (NodeId id : cone) in[(size_t)id] = 1;
  for (NodeId id : cone)
    for (ValueId v : g.nodes[(size_t)id].inputs)
      if (v != kNoValue && g.value(v).producer >= 0 && !in[(size_t)g.value(v).producer]) out[(size_t)v] = 1;
}

}  // namespace

std::vector<double> QuantSession::estimateFrom(const std::vector<ErrorAccumulator>& node,
                                               const std::vector<ErrorAccumulator>& layer,
                                               const std::vector<ErrorAccumulator>& out, const BatchSweep& sweep) const {
  const size_t N = m_model->graph.nodes.size();
  SensitivityInputs si;
  si.graphwise = &node;
  si.layerwise = &layer;
  si.outputs = &out;
  si.enabled = enabledMask();
  si.quantizable.resize(N);
  for (size_t i = 0; i < N; ++i) si.quantizable[i] = sweep.quantizable(i);
  return estimateSensitivity(m_model->graph, si);
}

std::vector<int32_t> QuantSession::chooseConeInputs(std::span<const BatchSums> first, const BatchSweep& sweep) {
  const Graph& g = m_model->graph;
  const size_t N = g.nodes.size();
  std::vector<ErrorAccumulator> node(N), layer(N), out(g.outputs.size());
  for (const BatchSums& S : first) {
    for (size_t i = 0; i < N && i < S.node.size(); ++i) {
      node[i].merge(S.node[i]);
      layer[i].merge(S.layer[i]);
    }
    for (size_t o = 0; o < out.size() && o < S.out.size(); ++o) out[o].merge(S.out[o]);
  }
  const std::vector<double> estimate = estimateFrom(node, layer, out, sweep);
  std::vector<NodeId> ranked;
  for (size_t i = 0; i < N; ++i)
    if (sweep.quantizable(i) && !std::isnan(estimate[i])) ranked.push_back((NodeId)i);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](NodeId a, NodeId b) { return estimate[(size_t)a] < estimate[(size_t)b]; });
  ranked.resize(std::min(ranked.size(), (size_t)m_options.fallbackExactTopK));
  m_coneInputNodes = ranked;
  std::vector<int32_t> rank(g.values.size(), 0);
  std::vector<char> reads(g.values.size(), 0);
  for (size_t k = 0; k < ranked.size(); ++k) {
    std::fill(reads.begin(), reads.end(), 0);
    markConeInputs(g, coneOf(g, {ranked[k]}), reads);
    for (size_t v = 0; v < reads.size(); ++v)
      if (reads[v] && rank[v] == 0) rank[v] = (int32_t)k + 1;
  }
  return rank;
}

Result<std::shared_ptr<const AnalysisResult>> QuantSession::exactSensitivity(const std::vector<NodeId>& nodes,
                                                                             const ProgressFn& progress) {
  if (!m_result || !m_data) return invalidArgument(m_model->path + ": exact sensitivity needs a prior analyze()");
  const Graph& g = m_model->graph;
  std::vector<NodeId> todo;
  for (NodeId id : nodes) {
    if (id < 0 || (size_t)id >= g.nodes.size())
      return invalidArgument(m_model->path + ": node id " + std::to_string(id) + " out of range");
    if (!m_plan.nodes[(size_t)id].quantizable) {
      return invalidArgument(m_model->path + ": node '" + g.nodes[(size_t)id].name + "' (" + g.nodes[(size_t)id].opType +
                             ") is not quantizable: it has no sensitivity");
    }
    if (std::find(todo.begin(), todo.end(), id) == todo.end()) todo.push_back(id);
  }
  if (todo.empty()) return m_result;
  std::vector<std::vector<NodeId>> cones;
  for (NodeId id : todo) cones.push_back(coneOf(g, {id}));
  // For a batch not cached but whose float outputs were kept: the float pass of only what the
  // cones read from outside themselves (and what that needs), not of the cones too.
  // The cone inputs kept by analyze() (keepConeInputs) leave out what they hold, down to nothing
  // for the nodes they were kept for: the cones alone.
  std::vector<char> coneInputs(g.values.size(), 0);
  for (const std::vector<NodeId>& cone : cones) markConeInputs(g, cone, coneInputs);
  auto feedingOf = [&](const std::vector<Tensor>& table) {
    std::vector<char> need(g.nodes.size(), 0);
    for (size_t v = 0; v < coneInputs.size(); ++v)
      if (coneInputs[v] && table[v].empty()) need[(size_t)g.value((ValueId)v).producer] = 1;
    for (auto it = g.topoOrder.rbegin(); it != g.topoOrder.rend(); ++it)
      if (need[(size_t)*it])
        for (ValueId v : g.nodes[(size_t)*it].inputs)
          if (v != kNoValue && g.value(v).producer >= 0 && table[(size_t)v].empty()) need[(size_t)g.value(v).producer] = 1;
    std::vector<NodeId> feeding;
    for (NodeId id : g.topoOrder)
      if (need[(size_t)id]) feeding.push_back(id);
    return feeding;
  };
  const PassContext c = passContext();
  const int64_t batches = m_data->batchCount();
  // Per batch and node, merged in batch order: the figures equal those of an exact analyze().
  std::vector<std::vector<ErrorAccumulator>> sums((size_t)batches, std::vector<ErrorAccumulator>(todo.size()));
  BatchSchedule schedule(batches, *m_cancelToken, progress);
  static const char* const kStage = "exact sensitivity";
  schedule.report(0, kStage);
  // One batch at a time with threaded kernels: a float table of a large model is held once.
  schedule.run(1, 0, batches, [&](int64_t b) -> Status {
    std::vector<Tensor> own;
    const std::vector<Tensor>* table = nullptr;
    if ((size_t)b < m_cache.size() && m_cache[(size_t)b]) {
      table = &m_cache[(size_t)b]->floatTable;
    } else if ((size_t)b < m_floatOutputs.size() && m_floatOutputs[(size_t)b].size() == g.outputs.size()) {
      auto feeds = m_data->batch(b);
      if (!feeds) return feeds.status();
      auto ft = m_executor->makeValueTable(*feeds);
      if (!ft) return ft.status();
      own = std::move(ft).value();
      if ((size_t)b < m_coneInputs.size())
        for (const auto& [v, t] : m_coneInputs[(size_t)b]) own[(size_t)v] = t;
      for (size_t o = 0; o < g.outputs.size(); ++o) own[(size_t)g.outputs[o]] = m_floatOutputs[(size_t)b][o];
      RunOptions ro;
      ro.cancel = &m_cancelToken->flag();
      QS_RETURN_IF_ERROR(m_executor->runNodes(feedingOf(own), own, ro));
      table = &own;
    } else {
      auto feeds = m_data->batch(b);
      if (!feeds) return feeds.status();
      // Within the memory budget only without a float table: the cones from a shared float prefix.
      if (m_streaming)
        return streamingSensitivity(c, *feeds, todo, cones, sums[(size_t)b],
                                    [&](double f) { return schedule.report(f, kStage); });
      auto ft = floatPass(c, *feeds);
      if (!ft) return ft.status();
      own = std::move(ft).value();
      table = &own;
    }
    for (size_t k = 0; k < todo.size(); ++k) {
      FakeQuantTransform t(m_state, m_paths, todo[k]);
      QS_RETURN_IF_ERROR(sensitivityPass(c, cones[k], t, *table, sums[(size_t)b][k]));
      if (!schedule.report((double)(k + 1) / (double)todo.size(), kStage)) return cancelled();
    }
    return Status::ok();
  }, kStage);
  QS_RETURN_IF_ERROR(schedule.result(cancelled()));
  auto r = std::make_shared<AnalysisResult>(*m_result);
  for (size_t k = 0; k < todo.size(); ++k) {
    ErrorAccumulator a;
    for (int64_t b = 0; b < batches; ++b) a.merge(sums[(size_t)b][k]);
    NodeResult& nr = r->nodes[(size_t)todo[k]];
    nr.sensitivitySnrDb = a.metrics().snrDb;
    nr.sensitivityExact = true;
  }
  m_result = r;
  keepGoing(*m_cancelToken, progress, 1.0, "exact sensitivity");
  return m_result;
}

}  // namespace qs
