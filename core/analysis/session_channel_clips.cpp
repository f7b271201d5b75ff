// QuantSession::searchChannelClips: `--what-if activations-per-channel --what-if-channel-amax searched`,
// each channel's clip of least fake-quantization MSE on its calibration values (docs/quality.md,
// "Bounds", "The searched per-channel clip").
#include "core/analysis/quant_session.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/batch_sweep.h"

namespace qs {

Status QuantSession::searchChannelClips(const CalibrationData& data, const ProgressFn& progress) {
  // Per (value, axis): the candidates' amax and scales per channel, and their summed squared errors.
  struct Search {
    std::vector<std::vector<double>> amax;
    std::vector<std::vector<float>> scales;
    std::vector<std::vector<double>> err;
    std::vector<double> count;
  };
  std::map<std::pair<ValueId, int>, Search> searches;
  std::multimap<ValueId, int> axes;
  for (const auto& [key, maxima] : m_channelMax) {
    const ActivationQuant* q = m_state.activation(key.first);
    if (!q || q->scale <= 0 || maxima.empty()) continue;
    Search s;
    for (double c : maxima) {
      s.amax.push_back(c > 0 ? searchedClipCandidates(c, q->amax) : std::vector<double>{});
      std::vector<float> sc;
      for (double a : s.amax.back()) sc.push_back(channelScale(a, m_plan.mode, m_options.calibration.highPrecision));
      s.scales.push_back(std::move(sc));
      s.err.emplace_back(s.scales.back().size(), 0.0);
    }
    s.count.assign(maxima.size(), 0.0);
    searches.emplace(key, std::move(s));
    axes.emplace(key.first, key.second);
  }
  struct Observer : ExecutionObserver {
    std::map<std::pair<ValueId, int>, Search>* searches;
    const std::multimap<ValueId, int>* axes;
    QuantMode mode;
    void see(ValueId id, const Tensor& t) {
      if (t.dtype() != DType::Float) return;
      for (auto [it, end] = axes->equal_range(id); it != end; ++it) {
        Search& s = searches->at({id, it->second});
        accumulateChannelClipErrors(t, it->second, s.scales, mode, s.err, s.count);
      }
    }
    void onGraphInput(ValueId id, const Tensor& t) override { see(id, t); }
    void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& t) override { see(id, t); }
  } observer;
  observer.searches = &searches;
  observer.axes = &axes;
  observer.mode = m_plan.mode;
  const int64_t n = data.batchCount();
  for (int64_t b = 0; b < n && !searches.empty(); ++b) {
    if (!keepGoing(*m_cancelToken, progress, (double)b / (double)n, "searching channel clips")) return cancelled();
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    RunOptions ro;
    ro.observer = &observer;
    ro.cancel = &m_cancelToken->flag();
    auto out = m_executor->run(*feeds, ro);
    if (!out) return out.status();
  }
  m_channelSearched.clear();
  m_channelClipSearch = ChannelClipSearch{};
  double ratioSum = 0;
  int64_t ratioCount = 0;
  for (auto& [key, s] : searches) {
    std::vector<double> chosen(s.amax.size(), 0.0);
    for (size_t c = 0; c < s.amax.size(); ++c) {
      if (s.amax[c].empty()) continue;  // an all-zero channel: computeChannelScales keeps the tensor's scale
      size_t best = 0;                  // capped's, unless a candidate is strictly better
      for (size_t j = 1; j < s.err[c].size(); ++j)
        if (s.err[c][j] < s.err[c][best]) best = j;
      chosen[c] = s.amax[c][best];
      ++m_channelClipSearch.channels;
      if (s.amax[c][best] < s.amax[c][0]) ++m_channelClipSearch.belowCapped;
      m_channelClipSearch.errorCapped += s.err[c][0];
      m_channelClipSearch.errorSearched += s.err[c][best];
      if (s.err[c][best] > 0 && s.err[c][0] > 0) {
        ratioSum += 10 * std::log10(s.err[c][0] / s.err[c][best]);
        ++ratioCount;
      }
    }
    m_channelSearched[key] = std::move(chosen);
    ++m_channelClipSearch.points;
  }
  m_channelClipSearch.meanRatioDb = ratioCount ? ratioSum / (double)ratioCount : 0;
  return Status::ok();
}

}  // namespace qs
