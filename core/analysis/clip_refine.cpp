#include "core/analysis/clip_refine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/analysis/batch_schedule.h"
#include "core/numeric/metrics.h"
#include "core/quant/calibrator.h"
#include "core/quant/high_precision.h"
#include "core/util/memory_budget.h"

namespace qs {
namespace {

// Smallest relative gain (dB) a candidate must bring on the check samples to be kept: equal
// figures (a candidate whose scale rounds to the same values) never count as a change.
constexpr double kMinGainDb = 1e-3;

// Worst graph-output SNR (dB) of summed accumulators; NaN counts as the worst.
double worstDb(const std::vector<ErrorAccumulator>& acc) {
  double worst = std::numeric_limits<double>::infinity();
  for (const ErrorAccumulator& a : acc) {
    const double db = a.metrics().snrDb;
    if (std::isnan(db)) return -std::numeric_limits<double>::infinity();
    worst = std::min(worst, db);
  }
  return worst;
}

// One check batch: its float graph outputs and the quantized table at the current scales.
struct CheckBatch {
  std::vector<Tensor> floatOut;  // per graph output (the quantized tables are kept per realisation)
};

void addOutputs(const PassContext& c, const CheckBatch& b, const std::vector<Tensor>& table,
                std::vector<ErrorAccumulator>& acc) {
  const Graph& g = c.model.graph;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Tensor& a = b.floatOut[i];
    const Tensor& q = table[(size_t)g.outputs[i]];
    if (!a.empty() && a.numel() == q.numel()) acc[i].add(a, q, c.threads());
  }
}

// Batches [first, first + count) of `data` clipped to what it has.
std::pair<int64_t, int64_t> batchRange(const CalibrationData& data, int64_t firstSample, int64_t samples) {
  const int64_t perBatch = std::max<int64_t>(1, data.batchSize());
  const int64_t first = std::min<int64_t>(data.batchCount(), (firstSample + perBatch - 1) / perBatch);
  const int64_t count = std::min<int64_t>(data.batchCount() - first, (samples + perBatch - 1) / perBatch);
  return {first, std::max<int64_t>(0, count)};
}

// The worst output SNR of the held-out batches under each of `tables` (act restored by the caller).
Result<std::vector<double>> heldOutSnr(const PassContext& c, std::map<ValueId, ActivationQuant>& act,
                                       const std::vector<std::map<ValueId, ActivationQuant>>& tables,
                                       const std::vector<char>& enabled, const CalibrationData& data, int64_t first,
                                       int64_t count) {
  const Graph& g = c.model.graph;
  std::vector<std::vector<ErrorAccumulator>> acc(tables.size(), std::vector<ErrorAccumulator>(g.outputs.size()));
  std::vector<ErrorAccumulator> nodeAcc(g.nodes.size());
  const std::vector<NodeId> none;
  for (int64_t b = first; b < first + count; ++b) {
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    auto ft = floatPass(c, *feeds);
    if (!ft) return ft.status();
    for (size_t k = 0; k < tables.size(); ++k) {
      act = tables[k];
      const FakeQuantTransform t(c.state, c.paths, enabled);
      QS_RETURN_IF_ERROR(quantizedPass(c, *feeds, *ft, t, &none, nodeAcc, acc[k]));
    }
  }
  std::vector<double> out;
  for (const auto& a : acc) out.push_back(worstDb(a));
  return out;
}

}  // namespace

std::vector<ClipCandidate> refineCandidates(float current, float absMax, const std::vector<ClipCandidate>& extra) {
  std::vector<ClipCandidate> out;
  auto near = [&](double a) {
    if (std::fabs(a - current) <= 0.03 * current) return true;
    for (const ClipCandidate& x : out)
      if (std::fabs(a - x.amax) <= 0.03 * x.amax) return true;
    return false;
  };
  auto add = [&](const std::string& name, double a) {
    if (!(a > 0) || !std::isfinite(a) || near(a)) return;
    out.push_back(ClipCandidate{name, (float)a});
  };
  auto grid = [&](int k) {
    const double a = std::min((double)absMax, current * std::pow(2.0, k / 4.0));
    char name[32];
    std::snprintf(name, sizeof name, "clip_%.4g", absMax > 0 ? a / absMax : 0.0);
    add(name, a);
  };
  auto extraAt = [&](size_t i) { add(extra[i].name, std::min(extra[i].amax, absMax > 0 ? absMax : extra[i].amax)); };
  grid(-1);
  grid(1);
  if (!extra.empty()) extraAt(0);
  grid(-2);
  grid(2);
  for (size_t i = 1; i < extra.size(); ++i) extraAt(i);
  return out;
}

Result<ClipRefineResult> refineClipsOnOutputs(const PassContext& c, const QuantPlan& plan,
                                              std::map<ValueId, ActivationQuant>& act,
                                              const std::vector<RefineTarget>& targets, const std::vector<char>& enabled,
                                              const CalibrationData& data, const RefineOptions& o,
                                              HighPrecision highPrecision, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const Graph& g = c.model.graph;
  const std::map<ValueId, ActivationQuant> before = act;
  ClipRefineResult res;
  const int R = std::max(1, o.realisations);
  res.realisations = R;
  const auto [checkFirst, checkCount] = batchRange(data, 0, std::max<int64_t>(1, o.checkSamples));
  const int64_t perBatch = std::max<int64_t>(1, data.batchSize());
  res.checkSamples = std::min(data.sampleCount(), checkCount * perBatch);
  const int64_t checkBatches = checkCount;  // a plain copy: clang does not capture structured bindings
  const auto [heldFirst, heldCount] = batchRange(data, checkCount * perBatch, std::max<int64_t>(0, o.heldOutSamples));
  res.heldOutSamples = std::min(data.sampleCount() - res.checkSamples, heldCount * perBatch);

  auto fail = [&](Status st) -> Status {
    act = before;
    return st;
  };
  // Runs `fn` with act's scales those of realisation k (act's own scales restored after).
  auto inRealisation = [&](int k, auto&& fn) -> Status {
    if (k <= 0) return fn();
    const std::map<ValueId, ActivationQuant> base = act;
    ditherActivationScales(act, k, o.realisationDither);
    Status st = fn();
    act = base;
    return st;
  };
  // The check batches: float outputs and, per realisation, the quantized table at the current scales.
  std::vector<CheckBatch> batches((size_t)checkCount);
  std::vector<std::vector<std::vector<Tensor>>> quant((size_t)R, std::vector<std::vector<Tensor>>((size_t)checkCount));
  for (int64_t b = 0; b < checkCount; ++b) {
    if (!keepGoing(c.cancel, progress, 0.05 * (double)b / (double)checkCount, "refining clip ranges"))
      return fail(c.cancelled());
    auto feeds = data.batch(checkFirst + b);
    if (!feeds) return fail(feeds.status());
    auto ft = floatPass(c, *feeds);
    if (!ft) return fail(ft.status());
    CheckBatch& cb = batches[(size_t)b];
    for (ValueId o : g.outputs) cb.floatOut.push_back((*ft)[(size_t)o]);
    for (int k = 0; k < R; ++k) {
      Status st = inRealisation(k, [&]() -> Status {
        auto table = c.executor.makeValueTable(*feeds);
        if (!table) return table.status();
        FakeQuantTransform t(c.state, c.paths, enabled);
        RunOptions ro;
        ro.cancel = &c.cancel.flag();
        ro.inputTransform = &t;
        QS_RETURN_IF_ERROR(c.executor.runNodes(g.topoOrder, *table, ro));
        if (R > 1 && k == 0 && b == 0 && o.memoryBudgetBytes > 0) {
          // R tables per check batch: refuse before holding more than the budget (rec at R = 8: 20.7 GB).
          uint64_t bytes = 0;
          for (const Tensor& v : *table) bytes += v.byteSize();
          const uint64_t all = bytes * (uint64_t)R * (uint64_t)checkBatches;
          if (all > o.memoryBudgetBytes)
            return invalidArgument(
                "--calibration-refine-realisations " + std::to_string(R) + ": the refinement would hold " +
                std::to_string(R) + " x " + std::to_string(checkBatches) + " quantized tables of " + formatByteSize(bytes) +
                " (" + formatByteSize(all) + "), above the memory budget of " + formatByteSize(o.memoryBudgetBytes) +
                ": use fewer realisations or a larger --memory-budget");
        }
        quant[(size_t)k][(size_t)b] = std::move(table).value();
        return Status::ok();
      });
      if (!st) return fail(st);
    }
  }
  // The worst output SNR of each realisation at the current scales.
  std::vector<double> current((size_t)R);
  for (int k = 0; k < R; ++k) {
    std::vector<ErrorAccumulator> acc(g.outputs.size());
    for (size_t b = 0; b < batches.size(); ++b) addOutputs(c, batches[b], quant[(size_t)k][b], acc);
    current[(size_t)k] = worstDb(acc);
  }
  res.checkBeforeDb = res.checkAfterDb = current[0];

  // Each node's work (estimated FLOPs on the first check batch) and the whole graph's, for the cap.
  std::vector<double> nodeWork(g.nodes.size(), 0.0);
  double graphWork = 0;
  if (!batches.empty()) {
    const std::vector<Tensor>& v = quant[0][0];
    for (NodeId id : g.topoOrder) {
      const Node& n = g.nodes[(size_t)id];
      std::vector<const Tensor*> in;
      std::vector<Tensor> out;
      for (ValueId x : n.inputs) in.push_back(x == kNoValue ? nullptr : &v[(size_t)x]);
      for (ValueId x : n.outputs) out.push_back(x == kNoValue ? Tensor() : v[(size_t)x]);
      nodeWork[(size_t)id] = std::max(1.0, Executor::estimateFlops(n, in, out));
      graphWork += nodeWork[(size_t)id];
    }
  }
  res.workCap = o.workCap > 0 ? o.workCap : 0;

  // Each target's cone: every consumer of the tensor and what lies downstream; its work in whole-graph
  // runs, once per realisation.
  const size_t nTargets = o.maxTargets > 0 ? std::min(targets.size(), (size_t)o.maxTargets) : targets.size();
  std::vector<std::vector<NodeId>> cones(nTargets);
  std::vector<double> coneWork(nTargets, 0.0);
  for (size_t i = 0; i < nTargets; ++i) {
    std::vector<NodeId> roots = g.value(targets[i].value).consumers;
    std::sort(roots.begin(), roots.end());
    roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
    cones[i] = coneOf(g, roots);
    for (NodeId n : cones[i]) coneWork[i] += nodeWork[(size_t)n];
    if (graphWork > 0) coneWork[i] /= graphWork;
    coneWork[i] *= R;
  }
  auto candidateCount = [&](const RefineTarget& t) {
    return o.maxCandidates > 0 ? std::min(t.candidates.size(), (size_t)o.maxCandidates) : t.candidates.size();
  };
  size_t tried = 0, total = 0;
  for (size_t i = 0; i < nTargets; ++i) total += candidateCount(targets[i]);
  total *= (size_t)std::max(1, o.passes);
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / (double)v.size();
  };

  for (int pass = 0; pass < o.passes; ++pass) {
    ++res.passes;
    bool anyChange = false;
    const double passStartDb = mean(current);
    for (size_t i = 0; i < nTargets; ++i) {
      const RefineTarget& tg = targets[i];
      auto q = act.find(tg.value);
      if (q == act.end() || q->second.scaleGroup >= 0 || cones[i].empty()) continue;
      const ActivationQuant cur = q->second;
      double bestMean = mean(current);
      int bestK = -1;
      bool ranAny = false;
      std::vector<double> bestWorst;
      std::vector<std::vector<std::vector<Tensor>>> bestTables;
      for (size_t k = 0; k < candidateCount(tg); ++k, ++tried) {
        if (!keepGoing(c.cancel, progress, 0.05 + 0.85 * (double)tried / (double)std::max<size_t>(1, total),
                       "refining clip ranges on the outputs"))
          return fail(c.cancelled());
        ActivationQuant trial = cur;
        trial.amax = tg.candidates[k].amax;
        trial.scale = roundScale(scaleFromAmax(trial.amax, plan.mode), highPrecision);
        if (trial.scale == cur.scale) continue;
        if (res.workCap > 0 && res.work + coneWork[i] > res.workCap) {
          ++res.cappedRuns;  // a cheaper cone later may still fit
          continue;
        }
        act[tg.value] = trial;
        std::vector<double> worst((size_t)R);
        std::vector<std::vector<std::vector<Tensor>>> tables((size_t)R);
        for (int r = 0; r < R; ++r) {
          Status st = inRealisation(r, [&]() -> Status {
            std::vector<ErrorAccumulator> tacc(g.outputs.size());
            FakeQuantTransform t(c.state, c.paths, enabled);
            RunOptions ro;
            ro.cancel = &c.cancel.flag();
            ro.inputTransform = &t;
            for (size_t b = 0; b < batches.size(); ++b) {
              std::vector<Tensor> table = quant[(size_t)r][b];  // shares the buffers; the cone's outputs replace entries
              QS_RETURN_IF_ERROR(c.executor.runNodes(cones[i], table, ro));
              addOutputs(c, batches[b], table, tacc);
              tables[(size_t)r].push_back(std::move(table));
            }
            worst[(size_t)r] = worstDb(tacc);
            return Status::ok();
          });
          if (!st) return fail(st);
        }
        ++res.coneRuns;
        res.work += coneWork[i];
        ranAny = true;
        // The paired gain over the current scales, realisation by realisation.
        std::vector<double> d((size_t)R);
        for (int r = 0; r < R; ++r) d[(size_t)r] = worst[(size_t)r] - current[(size_t)r];
        const double gain = mean(d);
        bool clears = gain > kMinGainDb;
        if (clears && R > 1) {
          double ss = 0;
          for (double x : d) ss += (x - gain) * (x - gain);
          const double se = std::sqrt(ss / (double)(R - 1) / (double)R);
          // Non-finite figures (an output at -inf or +inf) cannot say: not kept.
          if (!std::isfinite(gain) || !(gain > o.marginSe * se)) {
            clears = false;
            ++res.rejectedByMargin;
          }
        }
        const double m = mean(worst);
        if (clears && m > bestMean + kMinGainDb) {
          bestMean = m;
          bestK = (int)k;
          bestWorst = worst;
          bestTables = std::move(tables);
        }
      }
      if (ranAny && pass == 0) ++res.targetsTried;
      if (bestK < 0) {
        act[tg.value] = cur;
        continue;
      }
      ActivationQuant chosen = cur;
      chosen.amax = tg.candidates[(size_t)bestK].amax;
      chosen.scale = roundScale(scaleFromAmax(chosen.amax, plan.mode), highPrecision);
      act[tg.value] = chosen;
      quant = std::move(bestTables);
      current = bestWorst;
      res.checkAfterDb = current[0];
      res.changed[tg.value] = tg.candidates[(size_t)bestK];
      anyChange = true;
    }
    if (!anyChange || mean(current) - passStartDb < o.minPassGainDb) break;
  }
  batches.clear();
  quant.clear();

  const std::map<ValueId, ActivationQuant> after = act;
  if (heldCount > 0) {
    auto h = heldOutSnr(c, act, {before, after}, enabled, data, heldFirst, heldCount);
    act = after;
    if (!h) return fail(h.status());
    res.heldOutBeforeDb = (*h)[0];
    res.heldOutAfterDb = (*h)[1];
  }
  // The same figures on the mean of measureRealisations realisations, for runs of any R alike.
  if (o.measureRealisations > 1) {
    const int M = o.measureRealisations;
    res.measureRealisations = M;
    std::vector<std::map<ValueId, ActivationQuant>> tables;
    for (const auto* base : {&before, &after})
      for (int k = 0; k < M; ++k) {
        tables.push_back(*base);
        ditherActivationScales(tables.back(), k, o.realisationDither);
      }
    auto meanOf = [&](const std::vector<double>& v, size_t from) {
      double s = 0;
      for (int k = 0; k < M; ++k) s += v[from + (size_t)k];
      return s / M;
    };
    auto ch = heldOutSnr(c, act, tables, enabled, data, checkFirst, checkCount);
    act = after;
    if (!ch) return fail(ch.status());
    res.checkMeanBeforeDb = meanOf(*ch, 0);
    res.checkMeanAfterDb = meanOf(*ch, (size_t)M);
    if (heldCount > 0) {
      auto h = heldOutSnr(c, act, tables, enabled, data, heldFirst, heldCount);
      act = after;
      if (!h) return fail(h.status());
      res.heldOutMeanBeforeDb = meanOf(*h, 0);
      res.heldOutMeanAfterDb = meanOf(*h, (size_t)M);
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  keepGoing(c.cancel, progress, 1.0, "clip ranges refined");
  return res;
}

}  // namespace qs
