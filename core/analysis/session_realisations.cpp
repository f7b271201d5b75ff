// QuantSession's realisations of the rounding noise (--realisations N|auto): the output SNR with the
// activation scales dithered, the probe's decision, and the dithered state an export can write
// (docs/quality.md, "Realisations of the rounding noise" and the sections after it).
#include "core/analysis/quant_session.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/batch_sweep.h"

namespace qs {

Result<std::vector<std::vector<double>>> QuantSession::realisationSnrDb(int realisations, double dither,
                                                                        const ProgressFn& progress) const {
  if (!m_result || !m_data) return invalidArgument(m_model->path + ": realisations need a prior analyze()");
  const Graph& g = m_model->graph;
  std::vector<std::vector<double>> out(g.outputs.size());
  for (size_t o = 0; o < g.outputs.size(); ++o) out[o].push_back(m_result->outputs[o].metrics.snrDb);
  const int64_t batches = m_data->batchCount();
  for (int k = 1; k < realisations; ++k) {
    const QuantState state = realisationState(k, dither);
    const PassContext c{*m_model, *m_executor, state, m_paths, *m_cancelToken, m_outputKinds};
    const FakeQuantTransform t(state, m_paths, enabledMask());
    std::vector<ErrorAccumulator> outAcc(g.outputs.size());
    for (int64_t b = 0; b < batches; ++b) {
      if (!keepGoing(*m_cancelToken, progress, ((double)(k - 1) * (double)batches + (double)b) /
                                                   ((double)(realisations - 1) * (double)batches),
                     "realisation " + std::to_string(k + 1) + " of " + std::to_string(realisations)))
        return cancelled();
      auto feeds = m_data->batch(b);
      if (!feeds) return feeds.status();
      std::vector<ErrorAccumulator> nodeAcc(g.nodes.size()), acc(g.outputs.size());
      const std::vector<NodeId> none;
      if (b < (int64_t)m_cache.size()) {
        QS_RETURN_IF_ERROR(quantizedPass(c, *feeds, m_cache[(size_t)b]->floatTable, t, &none, nodeAcc, acc));
      } else {
        auto ft = floatPass(c, *feeds);
        if (!ft) return ft.status();
        QS_RETURN_IF_ERROR(quantizedPass(c, *feeds, *ft, t, &none, nodeAcc, acc));
      }
      for (size_t o = 0; o < acc.size(); ++o) outAcc[o].merge(acc[o]);
    }
    for (size_t o = 0; o < g.outputs.size(); ++o) out[o].push_back(outAcc[o].metrics().snrDb);
  }
  return out;
}

void QuantSession::decideRealisations(std::vector<double> worst, const std::string& where, int64_t samples) {
  m_probe = RealisationProbe{};
  m_probe.ran = true;
  m_probe.where = where;
  m_probe.samples = samples;
  m_probe.thresholdDb = m_options.realisationSpreadSdDb;
  double mean = 0;
  for (double v : worst) mean += v;
  mean /= (double)worst.size();
  double ss = 0;
  for (double v : worst) ss += (v - mean) * (v - mean);
  m_probe.sdDb = worst.size() > 1 ? std::sqrt(ss / (double)(worst.size() - 1)) : std::nan("");
  m_probe.worstSnrDb = std::move(worst);
  // A NaN sd (an output at -inf or +inf) reads as not spread: the figures cannot say.
  m_probe.chosen = m_probe.sdDb > m_probe.thresholdDb ? std::max(2, m_options.realisationsWhenSpread) : 1;
  m_options.realisations = m_probe.chosen;
}

QuantState QuantSession::realisationState(int realisation, double dither) const {
  QuantState state = m_state;
  ditherActivationScales(state.act, realisation, dither);
  return state;
}

Result<std::shared_ptr<const AnalysisResult>> QuantSession::measureRealisations(const ProgressFn& progress) {
  if (m_options.realisations <= 1) {
    if (!m_result) return invalidArgument(m_model->path + ": realisations need a prior analyze()");
    return m_result;
  }
  auto v = realisationSnrDb(m_options.realisations, m_options.realisationDither, progress);
  if (!v) return v.status();
  auto r = std::make_shared<AnalysisResult>(*m_result);
  for (size_t o = 0; o < r->outputs.size() && o < v->size(); ++o) r->outputs[o].realisationSnrDb = (*v)[o];
  m_result = r;
  return m_result;
}

}  // namespace qs
