#include "core/analysis/fallback_curve.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "core/analysis/quant_session.h"

namespace qs {
namespace {

double lowest(const std::vector<double>& v, bool skipNan) {
  double w = std::numeric_limits<double>::infinity();
  bool any = false;
  for (double x : v) {
    if (std::isnan(x)) {
      if (skipNan) continue;
      return x;
    }
    w = std::min(w, x);
    any = true;
  }
  return any || !skipNan ? w : NAN;
}

FallbackStep stepOf(NodeId excluded, const AnalysisResult& r) {
  FallbackStep s;
  s.excluded = excluded;
  for (const OutputResult& o : r.outputs) {
    s.outputSnrDb.push_back(o.metrics.snrDb);
    s.outputAgreement.push_back(o.agreement.primary());
  }
  return s;
}

// Larger is better, compared in order: the figure still short of its target first (agreement
// when an agreement target is not met or is the only target), then the other.
bool agreementFirst(double agr, const FallbackOptions& o) {
  return !std::isnan(o.targetAgreement) && (std::isnan(o.targetSnrDb) || agr < o.targetAgreement);
}

std::pair<double, double> scoreOf(double snr, double agr, const FallbackOptions& o) {
  if (std::isnan(agr)) agr = -1;
  return agreementFirst(agr, o) ? std::make_pair(agr, snr) : std::make_pair(snr, agr);
}

std::pair<double, double> score(const AnalysisResult& r, const FallbackOptions& o) {
  return scoreOf(r.worstOutputSnrDb(), r.worstAgreement(), o);
}

// score() of a step's figures (the figures of one measured point).
std::pair<double, double> score(const FallbackStep& s, const FallbackOptions& o) {
  return scoreOf(lowest(s.outputSnrDb, /*skipNan=*/false), lowest(s.outputAgreement, /*skipNan=*/true), o);
}

bool reaches(const AnalysisResult& r, const FallbackOptions& o) {
  const bool snr = std::isnan(o.targetSnrDb) || r.worstOutputSnrDb() >= o.targetSnrDb;
  const bool agree = std::isnan(o.targetAgreement) || r.worstAgreement() >= o.targetAgreement;
  return snr && agree;
}

// AnalysisOptions::realisations > 1: the SNR target checked on each output's mean over the
// realisations of the rounding noise at the session's current point as well (the figure of the
// point itself is realisation 0, the one the greedy and backward passes select on, so it is biased
// upward: docs/quality.md, "Realisations of the rounding noise"). True without an SNR target or
// realisations.
Result<bool> meanReaches(const QuantSession& session, const FallbackOptions& o, const ProgressFn& progress) {
  const int n = session.options().realisations;
  if (n <= 1 || std::isnan(o.targetSnrDb)) return true;
  auto v = session.realisationSnrDb(n, session.options().realisationDither, progress);
  if (!v) return v.status();
  for (const std::vector<double>& each : *v) {
    double sum = 0;
    for (double x : each) sum += x;
    if (!(sum / (double)each.size() >= o.targetSnrDb)) return false;
  }
  return true;
}

bool reachesAt(const FallbackCurve& c, int i, const FallbackOptions& o) {
  const bool snr = std::isnan(o.targetSnrDb) || c.worstSnrDb(i) >= o.targetSnrDb;
  const bool agree = std::isnan(o.targetAgreement) || c.worstAgreement(i) >= o.targetAgreement;
  return snr && agree;
}

using StageFn = std::function<ProgressFn(const std::string&)>;

// The backward pass, on a session at point curve.chosen (> 0), which reaches the targets: each
// excluded node re-included in turn, the one whose exclusion gained least first, and kept
// quantized when the targets still hold. Then the curve is rewritten so that its points stay
// prefixes of `steps`, every one measured (FallbackCurve::reincluded), and the session is left at
// its first point reaching the targets.
Status backwardPass(QuantSession& session, const FallbackOptions& options, FallbackCurve& curve, const StageFn& stage) {
  const int r = curve.chosen;
  std::vector<int> order((size_t)r);
  std::iota(order.begin(), order.end(), 0);
  auto gain = [&](int i) {
    const double g = curve.worstSnrDb(i + 1) - curve.worstSnrDb(i);
    return std::isnan(g) ? 0.0 : g;
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return gain(a) < gain(b); });
  std::vector<char> back((size_t)r, 0);
  std::vector<FallbackStep> accepted;  // the figures after each re-inclusion kept
  NodeId pending = -1;                 // re-included for a trial that failed: excluded again with the next toggle
  for (int k = 0; k < r; ++k) {
    const NodeId id = curve.steps[(size_t)order[(size_t)k]].excluded;
    std::vector<std::pair<NodeId, bool>> toggles{{id, true}};
    if (pending >= 0) toggles.insert(toggles.begin(), {pending, false});
    auto res =
        session.setQuantized(toggles, stage("re-including " + std::to_string(k + 1) + " of " + std::to_string(r)));
    if (!res) return res.status();
    bool keep = reaches(**res, options);
    if (keep) {
      auto mean = meanReaches(session, options, stage("realisations"));
      if (!mean) return mean.status();
      keep = *mean;
    }
    if (keep) {
      back[(size_t)order[(size_t)k]] = 1;
      curve.reincluded.push_back(id);
      accepted.push_back(stepOf(id, **res));
      pending = -1;
    } else {
      pending = id;
    }
  }
  if (pending >= 0) {
    auto res = session.setQuantized({{pending, false}}, stage("re-including"));
    if (!res) return res.status();
  }
  if (curve.reincluded.empty()) return Status::ok();

  // Kept exclusions first, then the re-included ones in reverse: point kept + i is the state
  // before the i-th re-inclusion from the last, measured by the pass (point r: the forward pass's).
  std::vector<FallbackStep> steps;
  for (int i = 0; i < r; ++i)
    if (!back[(size_t)i]) steps.push_back(curve.steps[(size_t)i]);
  const int kept = (int)steps.size(), j = (int)curve.reincluded.size();
  if (kept > 0) {
    const NodeId id = steps.back().excluded;
    steps.back() = accepted.back();
    steps.back().excluded = id;
  }
  for (int i = 1; i <= j; ++i) {
    FallbackStep s = j - i == 0 ? curve.steps[(size_t)r - 1] : accepted[(size_t)(j - i - 1)];
    s.excluded = curve.reincluded[(size_t)(j - i)];
    steps.push_back(std::move(s));
  }
  // Points 1..kept-1 were never measured: re-include the kept exclusions from the last.
  for (int p = kept - 1; p >= 1; --p) {
    auto res = session.setQuantized({{steps[(size_t)p].excluded, true}},
                                    stage("re-measuring point " + std::to_string(p) + " of " + std::to_string(kept)));
    if (!res) return res.status();
    const NodeId id = steps[(size_t)p - 1].excluded;
    steps[(size_t)p - 1] = stepOf(id, **res);
  }
  steps.insert(steps.end(), curve.steps.begin() + r, curve.steps.end());
  curve.steps = std::move(steps);
  curve.chosen = (int)curve.steps.size();
  for (int i = 0; i <= (int)curve.steps.size(); ++i)
    if (reachesAt(curve, i, options)) {
      curve.chosen = i;
      break;
    }
  // With realisations, only the pass's own end (the kept exclusions) was checked on their mean.
  if (session.options().realisations > 1) curve.chosen = std::max(curve.chosen, kept);
  return applyFallbackPoint(session, curve, curve.chosen, stage("applying the chosen point"));
}

}  // namespace

double FallbackCurve::worstSnrDb(int i) const {
  return lowest(i == 0 ? startSnrDb : steps[(size_t)i - 1].outputSnrDb, /*skipNan=*/false);
}

double FallbackCurve::worstAgreement(int i) const {
  return lowest(i == 0 ? startAgreement : steps[(size_t)i - 1].outputAgreement, /*skipNan=*/true);
}

std::vector<FallbackStep> FallbackCurve::chosenSteps() const {
  return {steps.begin(), steps.begin() + std::min<ptrdiff_t>(chosen, (ptrdiff_t)steps.size())};
}

Result<FallbackCurve> fallbackCurve(QuantSession& session, const FallbackOptions& options, const ProgressFn& progress) {
  auto first = session.result();
  if (!first) return invalidArgument(session.model().path + ": auto fallback needs a prior analysis");
  if (!std::isnan(options.targetAgreement) && std::isnan(first->worstAgreement())) {
    std::string names;
    for (const OutputResult& o : first->outputs) names += (names.empty() ? "" : ", ") + o.name;
    return invalidArgument(session.model().path + ": --target-agreement: no graph output has a class axis (" + names +
                           " are dense; --output-kind NAME=classes|sequence names one)");
  }
  FallbackCurve curve;
  curve.candidates = std::max(1, options.candidates);
  for (const OutputResult& o : first->outputs) {
    curve.startSnrDb.push_back(o.metrics.snrDb);
    curve.startAgreement.push_back(o.agreement.primary());
  }
  const size_t nodeCount = session.plan().nodes.size();
  for (const NodeQuantState& n : session.plan().nodes) curve.quantizable += n.quantizable ? 1 : 0;
  const int past = std::max(0, std::min(options.extraSteps, std::max(1, curve.quantizable / 4)));
  int reachedAt = -1;
  if (reaches(*first, options)) {
    auto mean = meanReaches(session, options, progress);
    if (!mean) return mean.status();
    if (*mean) reachedAt = 0;
  }
  const bool byGain = options.rankByGain && curve.candidates > 1;
  // Per node: the worst output's noise (relative power, 10^(-SNR/10)) that excluding it removed,
  // at the last step that measured it (NaN: never). Kept as a power, not as dB gained, since the
  // same power removed is worth more dB once the rest of the noise is gone.
  std::vector<double> measuredNoise(nodeCount, NAN);

  auto stage = [&](const std::string& what) -> ProgressFn {
    const double f = std::min(0.99, (double)curve.steps.size() / std::max(1, curve.quantizable));
    return [&progress, f, what](double, const std::string&) { return !progress || progress(f, "fallback: " + what); };
  };
  while (reachedAt < 0 || (int)curve.steps.size() - reachedAt < past) {
    // Rank by sensitivity; with the fast method the top ones get their exact figure first.
    auto ranked = [&] {
      const AnalysisResult& r = *session.result();
      std::vector<NodeId> v;
      for (size_t i = 0; i < nodeCount; ++i)
        if (session.plan().nodes[i].quantized && !std::isnan(r.nodes[i].sensitivitySnrDb)) v.push_back((NodeId)i);
      std::stable_sort(v.begin(), v.end(), [&](NodeId a, NodeId b) {
        return r.nodes[(size_t)a].sensitivitySnrDb < r.nodes[(size_t)b].sensitivitySnrDb;
      });
      return v;
    };
    std::vector<NodeId> top = ranked();
    const size_t exactK = (size_t)std::max(curve.candidates, session.options().fallbackExactTopK);
    std::vector<NodeId> estimated(top.begin(), top.begin() + std::min(top.size(), exactK));
    std::erase_if(estimated, [&](NodeId id) { return session.result()->nodes[(size_t)id].sensitivityExact; });
    if (!estimated.empty()) {
      auto refined = session.exactSensitivity(estimated, stage("exact sensitivity"));
      if (!refined) return refined.status();
      top = ranked();
    }
    if (top.empty()) break;
    const double now = session.result()->worstOutputSnrDb();
    if (byGain && std::isfinite(now)) {
      // The gain each node is expected to bring, as if the output's noise were the sum of the
      // nodes' own: the noise its exclusion removed where an earlier step measured it, else its
      // sensitivity's. Measured useless, a node makes room for the next one in sensitivity order.
      const AnalysisResult& r = *session.result();
      const double noise = std::pow(10.0, -now / 10);
      auto expected = [&](NodeId id) {
        const double own = std::isnan(measuredNoise[(size_t)id])
                               ? std::pow(10.0, -r.nodes[(size_t)id].sensitivitySnrDb / 10)
                               : measuredNoise[(size_t)id];
        return 10 * std::log10(noise / std::max(noise - own, noise * 1e-6));
      };
      std::vector<double> key(nodeCount, 0);
      for (NodeId id : top) key[(size_t)id] = expected(id);
      std::stable_sort(top.begin(), top.end(), [&](NodeId a, NodeId b) { return key[(size_t)a] > key[(size_t)b]; });
    }
    top.resize(std::min(top.size(), (size_t)curve.candidates));

    // Each candidate excluded in turn (the previous one restored in the same update); `out` is the
    // set of candidates the session has excluded for the trials.
    std::vector<NodeId> out;
    using Measured = Result<std::shared_ptr<const AnalysisResult>>;
    auto moveTo = [&](std::vector<NodeId> want, const std::string& what) -> Measured {
      std::vector<std::pair<NodeId, bool>> toggles;
      for (NodeId id : out)
        if (std::find(want.begin(), want.end(), id) == want.end()) toggles.push_back({id, true});
      for (NodeId id : want)
        if (std::find(out.begin(), out.end(), id) == out.end()) toggles.push_back({id, false});
      out = std::move(want);
      if (toggles.empty()) return session.result();
      return session.setQuantized(toggles, stage(what));
    };
    const auto nowScore = score(*session.result(), options);
    const double nowAgreement = session.result()->worstAgreement();
    const bool snrFirst = !agreementFirst(std::isnan(nowAgreement) ? -1 : nowAgreement, options);
    NodeId best = top[0];
    std::pair<double, double> bestScore{-std::numeric_limits<double>::infinity(), 0};
    std::vector<FallbackStep> single(top.size());  // the figures with each candidate excluded alone
    bool singleReaches = false;
    if (top.size() > 1) {
      for (size_t c = 0; c < top.size(); ++c) {
        auto r = moveTo({top[c]}, "trying " + std::to_string(c + 1) + " of " + std::to_string(top.size()));
        if (!r) return r.status();
        single[c] = stepOf(top[c], **r);
        singleReaches = singleReaches || reaches(**r, options);
        const double snr = (*r)->worstOutputSnrDb();
        if (std::isfinite(now)) measuredNoise[(size_t)top[c]] = std::pow(10.0, -now / 10) - std::pow(10.0, -snr / 10);
        const auto s = score(**r, options);
        if (s > bestScore) {
          bestScore = s;
          best = top[c];
        }
      }
    }
    // The pairs, where no single exclusion gains enough: the first component of the score is the
    // worst SNR in dB, or the agreement while it is short of its target.
    const double singleGain = bestScore.first - nowScore.first;
    std::vector<NodeId> pair;
    FallbackStep pairStep;
    if (options.pairs && top.size() > 1 && !singleReaches &&
        (snrFirst ? !(singleGain >= options.pairBelowDb) : !(singleGain > 0))) {
      ++curve.pairSteps;
      std::pair<double, double> bestPair{-std::numeric_limits<double>::infinity(), 0};
      bool pairReaches = false;
      const size_t total = top.size() * (top.size() - 1) / 2;
      size_t tried = 0;
      for (size_t i = 0; i < top.size(); ++i)
        for (size_t j = i + 1; j < top.size(); ++j) {
          auto r = moveTo({top[i], top[j]}, "trying pair " + std::to_string(++tried) + " of " + std::to_string(total));
          if (!r) return r.status();
          const auto s = score(**r, options);
          if (s > bestPair) {
            bestPair = s;
            pairReaches = reaches(**r, options);
            // The point after the first of the two is the better of their singles' (measured above).
            const bool iFirst = score(single[i], options).first >= score(single[j], options).first;
            pair = iFirst ? std::vector<NodeId>{top[i], top[j]} : std::vector<NodeId>{top[j], top[i]};
            pairStep = stepOf(pair[1], **r);
          }
        }
      const double pairGain = bestPair.first - nowScore.first;
      if (!(pairReaches || (pairGain > 0 && pairGain > 2 * std::max(0.0, singleGain)))) pair.clear();
    }
    if (!pair.empty()) {
      ++curve.pairsTaken;
      auto r = moveTo(pair, "excluding a pair");
      if (!r) return r.status();
      const size_t first = (size_t)(std::find(top.begin(), top.end(), pair[0]) - top.begin());
      curve.steps.push_back(single[first]);
      // (Not with realisations: the session is at the pair, where their mean cannot be measured.)
      if (reachedAt < 0 && session.options().realisations <= 1 && reachesAt(curve, (int)curve.steps.size(), options))
        reachedAt = (int)curve.steps.size();
      curve.steps.push_back(pairStep);
    } else {
      auto r = moveTo({best}, "excluding");
      if (!r) return r.status();
      curve.steps.push_back(stepOf(best, *session.result()));
    }
    if (reachedAt < 0 && reaches(*session.result(), options)) {
      auto mean = meanReaches(session, options, stage("realisations"));
      if (!mean) return mean.status();
      if (*mean) reachedAt = (int)curve.steps.size();
    }
  }
  curve.reached = reachedAt >= 0;
  curve.forwardChosen = reachedAt;
  curve.chosen = curve.reached ? reachedAt : (int)curve.steps.size();
  QS_RETURN_IF_ERROR(applyFallbackPoint(session, curve, curve.chosen, progress));
  if (options.backward && reachedAt > 0) QS_RETURN_IF_ERROR(backwardPass(session, options, curve, stage));
  // The chosen point's realisations into the session's result (the toggles left it without).
  if (auto r = session.measureRealisations(stage("realisations")); !r) return r.status();
  return curve;
}

Result<FallbackCurve> fallbackCurveRecalibrated(QuantSession& session, const CalibrationData& calibration,
                                                std::shared_ptr<const CalibrationData> analysis,
                                                const FallbackOptions& options, const ProgressFn& progress) {
  auto first = fallbackCurve(session, options, progress);
  if (!first) return first.status();
  FallbackCurve curve = std::move(first).value();
  if (!options.recalibrate || !curve.reached || curve.chosen == 0) return curve;
  auto stage = [&](const std::string& what) -> ProgressFn {
    return [&progress, what](double, const std::string&) { return !progress || progress(0.99, "fallback: " + what); };
  };
  // The chosen point's exclusions are the session's now: the selection among the clip tables (and
  // the refinement) is checked on the nodes that stay quantized. On det it chose the same table
  // (docs/quality.md, "Clip noise and rounding noise, and the levers measured on det").
  const int c = curve.chosen;
  curve.recalibratedBeforeDb = curve.worstSnrDb(c);
  QS_RETURN_IF_ERROR(session.calibrate(calibration, stage("re-calibrating at the chosen point")));
  auto r = session.analyze(std::move(analysis), stage("re-analysing at the chosen point"));
  if (!r) return r.status();
  curve.recalibrated = true;
  curve.recalibratedAfterDb = (*r)->worstOutputSnrDb();
  // Only the chosen exclusions, the last point measured now; the backward pass re-measures the others.
  curve.steps.resize((size_t)c);
  curve.steps.back() = stepOf(curve.steps.back().excluded, **r);
  curve.chosen = c;
  curve.reached = reaches(**r, options);
  if (curve.reached) {
    std::vector<NodeId> firstPass = std::move(curve.reincluded);
    curve.reincluded.clear();
    QS_RETURN_IF_ERROR(backwardPass(session, options, curve, stage));
    curve.reincludedAfterRecalibration = std::move(curve.reincluded);
    curve.reincluded = std::move(firstPass);
  }
  if (curve.reincludedAfterRecalibration.empty()) {
    // Nothing re-included: points 1..c-1 are still the old scales' figures; re-measure them from the
    // last, re-including the exclusions one by one.
    for (int p = c - 1; p >= 1; --p) {
      auto m = session.setQuantized({{curve.steps[(size_t)p].excluded, true}},
                                    stage("re-measuring point " + std::to_string(p) + " of " + std::to_string(c)));
      if (!m) return m.status();
      curve.steps[(size_t)p - 1] = stepOf(curve.steps[(size_t)p - 1].excluded, **m);
    }
  }
  // Point 0 at the new scales, then back to the chosen point.
  QS_RETURN_IF_ERROR(applyFallbackPoint(session, curve, 0, stage("re-measuring point 0")));
  curve.startSnrDb.clear();
  curve.startAgreement.clear();
  for (const OutputResult& o : session.result()->outputs) {
    curve.startSnrDb.push_back(o.metrics.snrDb);
    curve.startAgreement.push_back(o.agreement.primary());
  }
  QS_RETURN_IF_ERROR(applyFallbackPoint(session, curve, curve.chosen, stage("applying the chosen point")));
  if (auto m = session.measureRealisations(stage("realisations")); !m) return m.status();
  return curve;
}

Status applyFallbackPoint(QuantSession& session, const FallbackCurve& curve, int point, const ProgressFn& progress) {
  if (point < 0 || point > (int)curve.steps.size())
    return invalidArgument("fallback curve: point " + std::to_string(point) + " outside 0.." +
                           std::to_string(curve.steps.size()));
  std::vector<std::pair<NodeId, bool>> toggles;
  for (size_t i = 0; i < curve.steps.size(); ++i) {
    const NodeId id = curve.steps[i].excluded;
    const bool quantized = (int)i >= point;
    if (session.plan().nodes[(size_t)id].quantized != quantized) toggles.push_back({id, quantized});
  }
  if (toggles.empty()) return Status::ok();
  auto r = session.setQuantized(toggles, progress);
  return r ? Status::ok() : r.status();
}

}  // namespace qs
