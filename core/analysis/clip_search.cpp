#include "core/analysis/clip_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/clip_refine.h"
#include "core/analysis/quant_session.h"
#include "core/exec/parallel.h"
#include "core/numeric/fake_quant.h"
#include "core/numeric/metrics.h"

namespace qs {

namespace {

constexpr double kPercentiles[] = {99.9, 99.99, 99.999};

std::string fractionName(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "clip_%.4g", f);
  return buf;
}

// Adds a candidate unless one with (nearly) the same amax is there: equal scales give equal
// errors, and the first name (a histogram method) is the one to report.
void addCandidate(std::vector<ClipCandidate>& c, std::string name, double amax) {
  if (!(amax > 0) || !std::isfinite(amax)) return;
  for (const ClipCandidate& x : c)
    if (std::fabs((double)x.amax - amax) <= 1e-6 * amax) return;
  c.push_back(ClipCandidate{std::move(name), (float)amax});
}

struct Consumer {
  NodeId node;
  std::vector<size_t> inputs;  // the inputs of `node` that read the tensor at a point
};

struct Target {
  ValueId value = kNoValue;
  float absMax = 0;
  std::vector<Consumer> consumers;
  std::vector<ClipCandidate> candidates;
  size_t named = 0;                               // candidates[0, named) are histogram methods
  std::vector<std::vector<ErrorAccumulator>> acc;  // [candidate][consumer]
  Status status;
};

// noise / signal summed over the consumers (the inverse of a pooled linear SNR); NaN counts as worst.
double score(const Target& t, size_t k) {
  double s = 0;
  for (const ErrorAccumulator& a : t.acc[k]) {
    const double db = a.metrics().snrDb;
    if (std::isnan(db)) return std::numeric_limits<double>::infinity();
    s += std::isinf(db) ? 0.0 : std::pow(10.0, -db / 10.0);
  }
  return s;
}

double scoreDb(double s) { return s > 0 ? -10.0 * std::log10(s) : std::numeric_limits<double>::infinity(); }

// One target's consumers, each on its float inputs with its weights fake-quantized and the
// tensor fake-quantized at candidates [from, end), accumulated against the float output.
Status evaluate(const Graph& g, const Executor& ex, const QuantState& s, const std::vector<Tensor>& table, Target& t,
                size_t from) {
  const Tensor& x = table[(size_t)t.value];
  if (x.dtype() != DType::Float) return Status::ok();
  for (size_t ci = 0; ci < t.consumers.size(); ++ci) {
    const Consumer& c = t.consumers[ci];
    const Node& n = g.nodes[(size_t)c.node];
    if (n.outputs.empty() || n.outputs[0] == kNoValue) continue;
    const Tensor& ref = table[(size_t)n.outputs[0]];
    if (ref.dtype() != DType::Float) continue;
    std::vector<const Tensor*> in(n.inputs.size(), nullptr);
    for (size_t j = 0; j < n.inputs.size(); ++j)
      if (n.inputs[j] != kNoValue) in[j] = &table[(size_t)n.inputs[j]];
    for (const PointRef& r : s.pointsByNode[(size_t)c.node])
      if (r.weight >= 0) in[r.inputIndex] = &s.fakeWeights[(size_t)r.weight];
    for (size_t k = from; k < t.candidates.size(); ++k) {
      const Tensor q = fakeQuantize(x, {scaleFromAmax(t.candidates[k].amax, s.mode)}, 0, s.mode, kActQmin, kActQmax);
      for (size_t j : c.inputs) in[j] = &q;
      auto outs = ex.runNode(c.node, in);
      if (!outs) return outs.status();
      t.acc[k][ci].add(ref, (*outs)[0]);
    }
  }
  return Status::ok();
}

}  // namespace

double clipScoreAt(const ClipScores& scores, float amax) {
  for (const auto& [a, db] : scores)
    if (std::fabs((double)a - (double)amax) <= 1e-6 * (double)amax) return db;
  return std::nan("");
}

bool histogramTooSparse(const TensorStats& stats) {
  return stats.count() < (int64_t)kMinValuesPerBin * stats.initialBins();
}

std::vector<std::string> sparseHistogramWarnings(const Graph& g, const QuantPlan& plan,
                                                 const std::map<ValueId, TensorStats>& stats,
                                                 const CalibrationSettings& settings) {
  if (settings.method == CalibMethod::Max) return {};
  std::vector<std::string> names;
  std::vector<char> seen(g.values.size(), 0);
  for (const ActivationPoint& a : plan.activations) {
    if (seen[(size_t)a.value]) continue;
    seen[(size_t)a.value] = 1;
    auto st = stats.find(a.value);
    if (st == stats.end() || !(st->second.absMax() > 0) || !histogramTooSparse(st->second)) continue;
    names.push_back("'" + g.value(a.value).name + "' (" + std::to_string(st->second.count()) + ")");
  }
  if (names.empty()) return {};
  std::string list;
  for (size_t i = 0; i < names.size() && i < 5; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 5) list += ", ...";
  const int64_t need = (int64_t)kMinValuesPerBin * settings.bins;
  return {std::to_string(names.size()) + " activation tensor(s) have fewer than " + std::to_string(need) +
          " calibration values, too few for a trustworthy histogram (entropy, percentile and mse then follow a few "
          "values; more calibration samples help): " + list};
}

std::vector<ClipCandidate> clipCandidates(const TensorStats& stats, const CalibrationSettings& settings) {
  std::vector<ClipCandidate> c;
  const double absMax = stats.absMax();
  if (!(absMax > 0)) return c;
  CalibrationSettings s = settings;
  addCandidate(c, "mse", stats.amax(CalibMethod::Mse, s));
  addCandidate(c, "entropy", stats.amax(CalibMethod::Entropy, s));
  for (double p : kPercentiles) {
    s.percentile = p;
    char buf[32];
    std::snprintf(buf, sizeof buf, "percentile_%g", p);
    addCandidate(c, buf, stats.amax(CalibMethod::Percentile, s));
  }
  addCandidate(c, "max", absMax);
  for (int k = 1; k < kClipGridSteps; ++k) {
    const double f = std::pow(2.0, -0.5 * k);
    addCandidate(c, fractionName(f), f * absMax);
  }
  return c;
}

Result<std::map<ValueId, ClipChoice>> searchClipRanges(const Model& model, const Executor& executor,
                                                        const QuantPlan& plan, const QuantState& state,
                                                        const std::map<ValueId, TensorStats>& stats,
                                                        const CalibrationSettings& settings,
                                                        const CalibrationData& data, const ClipSearchOptions& options,
                                                        CancelToken& cancel, const ProgressFn& progress,
                                                        std::map<ValueId, ClipScores>* scores) {
  const Graph& g = model.graph;
  std::map<ValueId, size_t> index;
  std::vector<Target> targets;
  for (const ActivationPoint& a : plan.activations) {
    auto st = stats.find(a.value);
    if (st == stats.end() || !(st->second.absMax() > 0)) continue;
    const NodeId producer = g.value(a.value).producer;
    if (settings.pinSoftmax && producer >= 0 && g.nodes[(size_t)producer].opType == "Softmax") continue;
    auto [it, fresh] = index.try_emplace(a.value, targets.size());
    if (fresh) {
      Target t;
      t.value = a.value;
      t.absMax = (float)st->second.absMax();
      t.candidates = clipCandidates(st->second, settings);
      t.named = 0;
      while (t.named < t.candidates.size() && t.candidates[t.named].name.rfind("clip_", 0) != 0) ++t.named;
      targets.push_back(std::move(t));
    }
    Target& t = targets[it->second];
    auto c = std::find_if(t.consumers.begin(), t.consumers.end(), [&](const Consumer& x) { return x.node == a.node; });
    if (c == t.consumers.end()) t.consumers.push_back(Consumer{a.node, {a.inputIndex}});
    else c->inputs.push_back(a.inputIndex);
  }
  std::map<ValueId, ClipChoice> out;
  if (targets.empty()) return out;

  const int64_t perBatch = std::max<int64_t>(1, data.batchSize());
  const int64_t batches =
      std::min<int64_t>(data.batchCount(), std::max<int64_t>(1, (options.maxSamples + perBatch - 1) / perBatch));
  const Status cancelled(StatusCode::Cancelled, model.path + ": calibration cancelled");

  // One pass over the sample batches: the float table of each, then every target's new candidates.
  auto pass = [&](const std::vector<size_t>& from, double lo, double hi) -> Status {
    for (int64_t b = 0; b < batches; ++b) {
      if (!keepGoing(cancel, progress, lo + (hi - lo) * (double)b / (double)batches, "searching clip ranges"))
        return cancelled;
      auto feeds = data.batch(b);
      if (!feeds) return feeds.status();
      auto table = executor.makeValueTable(*feeds);
      if (!table) return table.status();
      RunOptions ro;
      ro.cancel = &cancel.flag();
      QS_RETURN_IF_ERROR(executor.runNodes(g.topoOrder, *table, ro));
      parallelForEach(executor.threads(), (int64_t)targets.size(), [&](int64_t i) {
        Target& t = targets[(size_t)i];
        if (!t.status || from[(size_t)i] >= t.candidates.size() || cancel.cancelled()) return;
        t.status = evaluate(g, executor, state, *table, t, from[(size_t)i]);
      });
      if (cancel.cancelled()) return cancelled;
      for (const Target& t : targets)
        if (!t.status) return t.status.withContext(model.path + ": clip search of '" + g.value(t.value).name + "'");
    }
    return Status::ok();
  };

  std::vector<size_t> from(targets.size(), 0);
  for (Target& t : targets) t.acc.assign(t.candidates.size(), std::vector<ErrorAccumulator>(t.consumers.size()));
  QS_RETURN_IF_ERROR(pass(from, 0.0, 0.7));

  // Refinement around each coarse winner.
  auto best = [](const Target& t, size_t end) {
    size_t b = 0;
    double bs = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < end; ++k) {
      const double s = score(t, k);
      if (s < bs) {
        bs = s;
        b = k;
      }
    }
    return b;
  };
  bool refine = false;
  for (size_t i = 0; i < targets.size(); ++i) {
    Target& t = targets[i];
    from[i] = t.candidates.size();
    const double centre = t.candidates[best(t, t.candidates.size())].amax;
    for (int j = -kClipRefineSteps; j <= kClipRefineSteps; ++j) {
      const double a = std::min((double)t.absMax, centre * std::pow(2.0, j / 8.0));
      if (j != 0) addCandidate(t.candidates, fractionName(a / t.absMax), a);
    }
    t.acc.resize(t.candidates.size(), std::vector<ErrorAccumulator>(t.consumers.size()));
    refine = refine || from[i] < t.candidates.size();
  }
  if (refine) QS_RETURN_IF_ERROR(pass(from, 0.7, 1.0));

  for (const Target& t : targets) {
    ClipChoice c;
    const size_t w = best(t, t.candidates.size());
    const size_t m = best(t, t.named);
    c.winner = t.candidates[w].name;
    c.amax = t.candidates[w].amax;
    c.absMax = t.absMax;
    c.consumerSnrDb = scoreDb(score(t, w));
    c.bestMethod = t.named > 0 ? t.candidates[m].name : std::string();
    c.bestMethodSnrDb = t.named > 0 ? scoreDb(score(t, m)) : std::nan("");
    c.candidates = (int)t.candidates.size();
    out[t.value] = c;
    if (scores) {
      ClipScores& sc = (*scores)[t.value];
      for (size_t k = 0; k < t.candidates.size(); ++k) sc.emplace_back(t.candidates[k].amax, scoreDb(score(t, k)));
    }
  }
  keepGoing(cancel, progress, 1.0, "clip ranges searched");
  return out;
}

Result<std::vector<double>> outputSnrOfScales(const PassContext& c, std::map<ValueId, ActivationQuant>& act,
                                              const std::vector<std::map<ValueId, ActivationQuant>>& tables,
                                              const std::vector<char>& enabled, const CalibrationData& data,
                                              int64_t maxSamples, const ProgressFn& progress) {
  const Graph& g = c.model.graph;
  const int64_t perBatch = std::max<int64_t>(1, data.batchSize());
  const int64_t batches =
      std::min<int64_t>(data.batchCount(), std::max<int64_t>(1, (maxSamples + perBatch - 1) / perBatch));
  std::vector<std::vector<ErrorAccumulator>> outAcc(tables.size(), std::vector<ErrorAccumulator>(g.outputs.size()));
  std::vector<ErrorAccumulator> nodeAcc(g.nodes.size());
  const std::vector<NodeId> none;
  const std::map<ValueId, ActivationQuant> saved = act;
  Status st = Status::ok();
  for (int64_t b = 0; b < batches && st; ++b) {
    if (!keepGoing(c.cancel, progress, (double)b / (double)batches, "checking clip ranges on the outputs")) {
      st = c.cancelled();
      break;
    }
    auto feeds = data.batch(b);
    if (!feeds) {
      st = feeds.status();
      break;
    }
    auto ft = floatPass(c, *feeds);
    if (!ft) {
      st = ft.status();
      break;
    }
    for (size_t k = 0; k < tables.size() && st; ++k) {
      act = tables[k];
      const FakeQuantTransform t(c.state, c.paths, enabled);
      st = quantizedPass(c, *feeds, *ft, t, &none, nodeAcc, outAcc[k]);
    }
  }
  act = saved;
  if (!st) return st;
  std::vector<double> out;
  for (const auto& acc : outAcc) {
    double worst = std::numeric_limits<double>::infinity();
    for (const ErrorAccumulator& a : acc) {
      const double db = a.metrics().snrDb;
      worst = std::isnan(db) ? -std::numeric_limits<double>::infinity() : std::min(worst, db);
    }
    out.push_back(worst);
  }
  return out;
}

// QuantSession's step after the statistics (declared in quant_session.h, kept here with the search).
namespace {

// A tensor's own amax under a single-method table ("mse", "percentile_99.9", ...): the method's
// amax of the tensor itself, not its Concat group's largest.
float ownAmax(const std::string& table, const ActivationQuant& q) {
  if (table == "max") return q.methodAmax[(size_t)CalibMethod::Max];
  if (table == "entropy") return q.methodAmax[(size_t)CalibMethod::Entropy];
  if (table == "mse") return q.methodAmax[(size_t)CalibMethod::Mse];
  return q.methodAmax[(size_t)CalibMethod::Percentile];  // the table's own percentile
}

}  // namespace

Status QuantSession::searchClips(const CalibrationData& data, const ProgressFn& progress) {
  m_clipChoices.clear();
  m_calibrationWarnings = sparseHistogramWarnings(m_model->graph, m_plan, m_stats, m_options.calibration);
  if (m_options.calibration.method != CalibMethod::Auto) return Status::ok();
  std::map<ValueId, ClipScores> layerScores;
  auto choices = searchClipRanges(*m_model, *m_executor, m_plan, m_state, m_stats, m_options.calibration, data,
                                  m_options.clipSearch, *m_cancelToken, progress, &layerScores);
  if (!choices) return choices.status();
  m_clipChoices = std::move(choices).value();
  // Consumers chosen one by one can still add up badly on the outputs: the layer-wise choice is
  // checked on the whole graph against each single method, and the best of them is kept.
  const Graph& g = m_model->graph;
  std::vector<std::pair<std::string, std::map<ValueId, ActivationQuant>>> tables;
  tables.emplace_back("layerwise", computeScales(g, m_plan, m_stats, scaleOverrides(), m_options.calibration));
  for (CalibMethod method : {CalibMethod::Mse, CalibMethod::Entropy, CalibMethod::Percentile, CalibMethod::Max}) {
    CalibrationSettings cs = m_options.calibration;
    cs.method = method;
    for (double p : {99.9, 99.99, 99.999}) {
      cs.percentile = p;
      std::string name = calibMethodName(method);
      if (method == CalibMethod::Percentile) name = p == 99.9 ? "percentile_99.9" : p == 99.99 ? "percentile_99.99" : "percentile_99.999";
      tables.emplace_back(name, computeScales(g, m_plan, m_stats, m_amaxOverride, cs));
      if (method != CalibMethod::Percentile) break;
    }
  }
  std::vector<std::map<ValueId, ActivationQuant>> scales;
  for (const auto& t : tables) scales.push_back(t.second);
  auto snr = outputSnrOfScales(passContext(), m_state.act, scales, enabledMask(), data,
                               m_options.clipSearch.checkSamples, progress);
  if (!snr) return snr.status();
  std::vector<double> first = *snr;  // realisation 0 of every table (the plain figures)
  // --realisations auto: the probe, on the best table of realisation 0 (the all-INT8 start), once.
  const int probeN = std::max(2, m_options.realisationProbe);
  const double dither = m_options.realisationDither;
  const int64_t checked = std::min<int64_t>(
      data.sampleCount(),
      std::min<int64_t>(data.batchCount(), std::max<int64_t>(1, (m_options.clipSearch.checkSamples +
                                                                  std::max<int64_t>(1, data.batchSize()) - 1) /
                                                                     std::max<int64_t>(1, data.batchSize()))) *
          std::max<int64_t>(1, data.batchSize()));
  // The score of each table on the mean of probeN realisations (realisation 0 given in `plain`).
  auto onMean = [&](const std::vector<std::map<ValueId, ActivationQuant>>& t,
                    const std::vector<double>& plain) -> Result<std::vector<double>> {
    std::vector<std::map<ValueId, ActivationQuant>> dithered;
    for (const auto& table : t)
      for (int k = 1; k < probeN; ++k) {
        dithered.push_back(table);
        ditherActivationScales(dithered.back(), k, dither);
      }
    auto v = outputSnrOfScales(passContext(), m_state.act, dithered, enabledMask(), data,
                               m_options.clipSearch.checkSamples, progress);
    if (!v) return v.status();
    std::vector<double> mean;
    for (size_t i = 0; i < t.size(); ++i) {
      double sum = plain[i];
      for (int k = 1; k < probeN; ++k) sum += (*v)[i * (size_t)(probeN - 1) + (size_t)(k - 1)];
      mean.push_back(sum / probeN);
    }
    return mean;
  };
  if (m_options.realisationsAuto && !m_probe.ran) {
    size_t top = 0;
    for (size_t k = 1; k < first.size(); ++k)
      if (first[k] > first[top]) top = k;
    std::vector<std::map<ValueId, ActivationQuant>> dithered;
    for (int k = 1; k < probeN; ++k) {
      dithered.push_back(scales[top]);
      ditherActivationScales(dithered.back(), k, dither);
    }
    auto v = outputSnrOfScales(passContext(), m_state.act, dithered, enabledMask(), data,
                               m_options.clipSearch.checkSamples, progress);
    if (!v) return v.status();
    std::vector<double> worst{first[top]};
    worst.insert(worst.end(), v->begin(), v->end());
    decideRealisations(std::move(worst), "table check", checked);
  }
  const bool spread = m_options.realisationsAuto && m_probe.ran && m_probe.chosen > 1;
  if (spread) {  // every table scored on the mean (probeN - 1 quantized passes more each)
    auto mean = onMean(scales, first);
    if (!mean) return mean.status();
    *snr = std::move(mean).value();
  }
  size_t single = 1;
  for (size_t k = 2; k < snr->size(); ++k)
    if ((*snr)[k] > (*snr)[single]) single = k;
  // Mixed tables: the best single method, except on the tensors whose layer-wise winner beats that
  // method's amax on its consumers by more than a margin (the clear cases only).
  scales.clear();
  const size_t firstMixed = tables.size();
  for (double margin : {0.5, 2.0, 6.0}) {
    std::map<ValueId, float> mixed = m_amaxOverride;
    for (const auto& [id, c] : m_clipChoices) {
      if (m_amaxOverride.count(id)) continue;
      auto a = tables[single].second.find(id);
      if (a == tables[single].second.end()) continue;
      const float own = ownAmax(tables[single].first, a->second);
      // A method's amax the search did not score (never: every method is a candidate) keeps the method.
      const double there = clipScoreAt(layerScores[id], own);
      mixed[id] = there < c.consumerSnrDb - margin ? c.amax : own;
    }
    char name[48];
    std::snprintf(name, sizeof name, "%s+layerwise>%gdB", tables[single].first.c_str(), margin);
    tables.emplace_back(name, computeScales(g, m_plan, m_stats, mixed, m_options.calibration));
    scales.push_back(tables.back().second);
  }
  auto mixedSnr = outputSnrOfScales(passContext(), m_state.act, scales, enabledMask(), data,
                                    m_options.clipSearch.checkSamples, progress);
  if (!mixedSnr) return mixedSnr.status();
  first.insert(first.end(), mixedSnr->begin(), mixedSnr->end());
  if (spread) {
    auto mean = onMean(scales, *mixedSnr);
    if (!mean) return mean.status();
    *mixedSnr = std::move(mean).value();
  }
  snr->insert(snr->end(), mixedSnr->begin(), mixedSnr->end());
  size_t best = 0, bestFirst = 0;
  for (size_t k = 1; k < snr->size(); ++k) {
    if ((*snr)[k] > (*snr)[best]) best = k;
    if (first[k] > first[bestFirst]) bestFirst = k;
  }
  std::map<ValueId, ClipCandidate> layerwise;  // the per-tensor winners, candidates of the refinement
  for (const auto& [id, c] : m_clipChoices) layerwise[id] = ClipCandidate{c.winner, c.amax};
  for (auto& [id, c] : m_clipChoices) {
    c.layerwiseWinner = c.winner;
    c.selection = tables[best].first;
    c.selectionOutputSnrDb = (*snr)[best];
    c.layerwiseOutputSnrDb = (*snr)[0];
    c.selectionRealisations = spread ? probeN : 1;
    c.selectionFirstRealisationDb = first[best];
    c.selectionOnFirst = tables[bestFirst].first;
    c.selectionOnFirstSnrDb = first[bestFirst];
    if (best == 0) continue;
    auto a = tables[best].second.find(id);
    if (a == tables[best].second.end()) continue;
    const bool mixedTable = best >= firstMixed;
    const bool keepsLayerwise = mixedTable && std::fabs(a->second.amax - c.amax) <= 1e-6f * c.amax;
    if (!keepsLayerwise) c.winner = mixedTable ? tables[single].first : tables[best].first;
    c.amax = a->second.amax;
  }
  return refineClips(data, layerScores, layerwise, progress);
}

// The refinement on the outputs (clip_refine.h) of the choices above: the noisiest tensors first.
Status QuantSession::refineClips(const CalibrationData& data, const std::map<ValueId, ClipScores>& layerScores,
                                 const std::map<ValueId, ClipCandidate>& layerwise, const ProgressFn& progress) {
  const ClipSearchOptions& o = m_options.clipSearch;
  if (o.refine.passes <= 0 || m_clipChoices.empty()) return Status::ok();
  const Graph& g = m_model->graph;
  std::vector<std::pair<double, ValueId>> order;
  for (const auto& [id, c] : m_clipChoices) {
    if (m_amaxOverride.count(id)) continue;
    auto sc = layerScores.find(id);
    double db = sc == layerScores.end() ? std::nan("") : clipScoreAt(sc->second, c.amax);
    if (std::isnan(db)) db = c.consumerSnrDb;
    order.emplace_back(db, id);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::map<ValueId, ActivationQuant> saved = m_state.act;
  m_state.act = computeScales(g, m_plan, m_stats, scaleOverrides(), m_options.calibration);
  std::vector<RefineTarget> targets;
  for (const auto& [db, id] : order) {
    auto q = m_state.act.find(id);
    if (q == m_state.act.end() || q->second.scaleGroup >= 0) continue;
    const ClipChoice& c = m_clipChoices[id];
    // The layer-wise winner first: refineCandidates() puts it right after the +-1/4 pair.
    std::vector<ClipCandidate> extra;
    if (auto l = layerwise.find(id); l != layerwise.end()) extra.push_back(l->second);
    else extra.push_back(ClipCandidate{"", 0.f});  // none: skipped, keeps the histogram methods after the grid
    for (CalibMethod m : {CalibMethod::Mse, CalibMethod::Percentile, CalibMethod::Max, CalibMethod::Entropy})
      extra.push_back(ClipCandidate{m == CalibMethod::Percentile ? "percentile" : calibMethodName(m),
                                    q->second.methodAmax[(size_t)m]});
    targets.push_back(RefineTarget{id, refineCandidates(c.amax, c.absMax, extra)});
  }
  RefineOptions ro = o.refine;
  ro.checkSamples = o.checkSamples;
  // 0: the session's realisations (--realisations N, or what --realisations auto's probe chose).
  if (ro.realisations <= 0) ro.realisations = std::max(1, m_options.realisations);
  ro.realisationDither = m_options.realisationDither;
  ro.memoryBudgetBytes = m_options.memoryBudgetBytes == UINT64_MAX ? 0 : m_options.memoryBudgetBytes;
  auto r = refineClipsOnOutputs(passContext(), m_plan, m_state.act, targets, enabledMask(), data, ro,
                                m_options.calibration.highPrecision, progress);
  m_state.act = saved;
  if (!r) return r.status();
  for (auto& [id, c] : m_clipChoices) {
    c.refineRan = true;
    c.refinePasses = r->passes;
    c.refineConeRuns = r->coneRuns;
    c.refineCheckSamples = r->checkSamples;
    c.refineHeldOutSamples = r->heldOutSamples;
    c.refineCheckBeforeDb = r->checkBeforeDb;
    c.refineCheckAfterDb = r->checkAfterDb;
    c.refineHeldOutBeforeDb = r->heldOutBeforeDb;
    c.refineHeldOutAfterDb = r->heldOutAfterDb;
    c.refineSeconds = r->seconds;
    c.refineTargetsTried = r->targetsTried;
    c.refineWork = r->work;
    c.refineWorkCap = r->workCap;
    c.refineCappedRuns = r->cappedRuns;
    c.refineRealisations = r->realisations;
    c.refineRejectedByMargin = r->rejectedByMargin;
    c.refineMeasureRealisations = r->measureRealisations;
    c.refineCheckMeanBeforeDb = r->checkMeanBeforeDb;
    c.refineCheckMeanAfterDb = r->checkMeanAfterDb;
    c.refineHeldOutMeanBeforeDb = r->heldOutMeanBeforeDb;
    c.refineHeldOutMeanAfterDb = r->heldOutMeanAfterDb;
    if (auto ch = r->changed.find(id); ch != r->changed.end()) {
      c.refinedFrom = c.winner;
      c.refinedFromAmax = c.amax;
      c.winner = ch->second.name;
      c.amax = ch->second.amax;
    }
  }
  return Status::ok();
}

}  // namespace qs
