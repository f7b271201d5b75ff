#include "core/analysis/fallback_curve.h"

#include <algorithm>
#include <limits>
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
std::pair<double, double> score(const AnalysisResult& r, const FallbackOptions& o) {
  const double snr = r.worstOutputSnrDb();
  double agr = r.worstAgreement();
  if (std::isnan(agr)) agr = -1;
  const bool agreementFirst =
      !std::isnan(o.targetAgreement) && (std::isnan(o.targetSnrDb) || agr < o.targetAgreement);
  return agreementFirst ? std::make_pair(agr, snr) : std::make_pair(snr, agr);
}

bool reaches(const AnalysisResult& r, const FallbackOptions& o) {
  const bool snr = std::isnan(o.targetSnrDb) || r.worstOutputSnrDb() >= o.targetSnrDb;
  const bool agree = std::isnan(o.targetAgreement) || r.worstAgreement() >= o.targetAgreement;
  return snr && agree;
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
  for (const NodeQuantState& n : session.plan().nodes) curve.quantizable += n.quantizable ? 1 : 0;
  const int past = std::max(0, std::min(options.extraSteps, std::max(1, curve.quantizable / 4)));
  int reachedAt = reaches(*first, options) ? 0 : -1;

  auto stage = [&](const std::string& what) -> ProgressFn {
    const double f = std::min(0.99, (double)curve.steps.size() / std::max(1, curve.quantizable));
    return [&progress, f, what](double, const std::string&) { return !progress || progress(f, "fallback: " + what); };
  };
  while (reachedAt < 0 || (int)curve.steps.size() - reachedAt < past) {
    // Rank by sensitivity; with the fast method the top ones get their exact figure first.
    auto ranked = [&] {
      const AnalysisResult& r = *session.result();
      std::vector<NodeId> v;
      for (size_t i = 0; i < session.plan().nodes.size(); ++i)
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
    top.resize(std::min(top.size(), (size_t)curve.candidates));

    // Each candidate excluded in turn (the previous one restored in the same update).
    NodeId best = top[0], current = -1;
    std::pair<double, double> bestScore{-std::numeric_limits<double>::infinity(), 0};
    if (top.size() > 1) {
      for (size_t c = 0; c < top.size(); ++c) {
        std::vector<std::pair<NodeId, bool>> toggles{{top[c], false}};
        if (current >= 0) toggles.insert(toggles.begin(), {current, true});
        auto r = session.setQuantized(toggles, stage("trying " + std::to_string(c + 1) + " of " +
                                                     std::to_string(top.size())));
        if (!r) return r.status();
        current = top[c];
        const auto s = score(**r, options);
        if (s > bestScore) {
          bestScore = s;
          best = top[c];
        }
      }
    }
    if (current != best) {
      std::vector<std::pair<NodeId, bool>> toggles{{best, false}};
      if (current >= 0) toggles.insert(toggles.begin(), {current, true});
      auto r = session.setQuantized(toggles, stage("excluding"));
      if (!r) return r.status();
    }
    curve.steps.push_back(stepOf(best, *session.result()));
    if (reachedAt < 0 && reaches(*session.result(), options)) reachedAt = (int)curve.steps.size();
  }
  curve.reached = reachedAt >= 0;
  curve.chosen = curve.reached ? reachedAt : (int)curve.steps.size();
  QS_RETURN_IF_ERROR(applyFallbackPoint(session, curve, curve.chosen, progress));
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
