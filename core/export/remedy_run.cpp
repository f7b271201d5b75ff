#include "core/export/remedy_run.h"

#include <algorithm>
#include <set>

namespace qs {

namespace {

bool anyRemedy(const AnalysisRequest& rq) {
  return rq.equalize || rq.biasCorrection || rq.smoothQuant || rq.weightClipSearch;
}

void addChanged(RemedySummary& s, const std::vector<std::string>& names) {
  std::set<std::string> all(s.changedInitializers.begin(), s.changedInitializers.end());
  all.insert(names.begin(), names.end());
  s.changedInitializers.assign(all.begin(), all.end());
}

// A progress function for the part [lo, hi] of `progress`.
ProgressFn part(const ProgressFn& progress, double lo, double hi) {
  if (!progress) return {};
  return [progress, lo, hi](double f, const std::string& stage) { return progress(lo + (hi - lo) * f, stage); };
}

// A calibrated session on `model` with the run's configuration and `options`, in place of run.session.
Status replaceSession(AnalysisRun& run, std::shared_ptr<const Model> model, const AnalysisOptions& options,
                      const ProgressFn& progress, const std::shared_ptr<CancelToken>& cancel) {
  auto session = QuantSession::create(model, run.sessionConfig, options);
  if (!session) return session.status();
  std::shared_ptr<QuantSession> next(std::move(session).value());
  if (cancel) next->setCancelToken(cancel);
  QS_RETURN_IF_ERROR(next->calibrate(*run.calibrationData, progress));
  run.model = std::move(model);
  run.session = std::move(next);
  return Status::ok();
}

// Adopts a remedy that replaces run.model by a copy keeping its float output (depthwise input
// equalization, depthwise and pointwise smoothing): `apply` on run.model, nothing when its result
// lists no item. The baseline of the before/after (run.originalModel) follows: the same copy when it
// was the same model, else (--equalize) with `rerunOnBaseline` its own `apply` (the calibrated forms;
// the saved forms keep the baseline). Records the items in `list`, appends the inserted nodes (the
// remedies run one after the other, each adding its Muls) and adds the changed initializers.
template <class Apply, class R, class Item>
Status adoptSmoothing(AnalysisRun& run, const Apply& apply, std::vector<Item> R::*items,
                      std::vector<Item> RemedySummary::*list, bool rerunOnBaseline) {
  const bool same = run.originalModel == run.model;
  Result<R> res = apply(run.model);
  if (!res) return res.status();
  if (((*res).*items).empty()) return Status::ok();
  run.model = res->model;
  if (same) {
    run.originalModel = run.model;
  } else if (run.originalModel && rerunOnBaseline) {
    Result<R> base = apply(run.originalModel);
    if (!base) return base.status();
    run.originalModel = base->model;
  }
  run.remedies.*list = std::move((*res).*items);
  if constexpr (requires { res->insertedNodes; })
    run.remedies.insertedNodes.insert(run.remedies.insertedNodes.end(), res->insertedNodes.begin(),
                                      res->insertedNodes.end());
  addChanged(run.remedies, res->changedInitializers);
  return Status::ok();
}

}  // namespace

Status equalizeRunModel(AnalysisRun& run) {
  run.originalModel = run.model;
  if (!run.request.equalize) return Status::ok();
  auto eq = equalizeCrossLayer(*run.model);
  if (!eq) return eq.status();
  run.model = eq->model;
  run.remedies.applied.push_back("equalize");
  run.remedies.pairs = eq->pairs;
  addChanged(run.remedies, eq->changedInitializers);
  return Status::ok();
}

Status equalizeRunDepthwise(AnalysisRun& run) {
  auto apply = [&](const std::shared_ptr<const Model>& model) {
    return equalizeDepthwiseInputs(model, *run.calibrationData, run.request.threads);
  };
  return adoptSmoothing(run, apply, &DepthwiseEqualizationResult::pairs, &RemedySummary::depthwisePairs, true);
}

Status equalizeRunDepthwise(AnalysisRun& run, const std::vector<DepthwiseSmoothingScale>& saved,
                            const std::string& where) {
  auto apply = [&](const std::shared_ptr<const Model>& model) { return applyDepthwiseEqualization(model, saved, where); };
  return adoptSmoothing(run, apply, &DepthwiseEqualizationResult::pairs, &RemedySummary::depthwisePairs, false);
}

Status smoothRunDepthwise(AnalysisRun& run) {
  auto apply = [&](const std::shared_ptr<const Model>& model) {
    DepthwiseSmoothingOptions o;
    for (const DepthwiseEqualizedPair& p : findDepthwiseEqualizablePairs(*model)) o.skip.push_back(p.consumer);
    return smoothDepthwiseInputs(model, *run.calibrationData, run.request.threads, o);
  };
  return adoptSmoothing(run, apply, &DepthwiseSmoothingResult::inputs, &RemedySummary::depthwiseSmoothed, true);
}

Status smoothRunDepthwise(AnalysisRun& run, const std::vector<DepthwiseSmoothingScale>& saved, const std::string& where) {
  auto apply = [&](const std::shared_ptr<const Model>& model) { return applyDepthwiseSmoothing(model, saved, where); };
  return adoptSmoothing(run, apply, &DepthwiseSmoothingResult::inputs, &RemedySummary::depthwiseSmoothed, false);
}

Status smoothRunPointwise(AnalysisRun& run) {
  auto apply = [&](const std::shared_ptr<const Model>& model) {
    return smoothPointwiseInputs(model, *run.calibrationData, run.request.threads);
  };
  return adoptSmoothing(run, apply, &DepthwiseSmoothingResult::inputs, &RemedySummary::pointwiseSmoothed, true);
}

Status smoothRunPointwise(AnalysisRun& run, const std::vector<DepthwiseSmoothingScale>& saved, const std::string& where) {
  auto apply = [&](const std::shared_ptr<const Model>& model) { return applyPointwiseSmoothing(model, saved, where); };
  return adoptSmoothing(run, apply, &DepthwiseSmoothingResult::inputs, &RemedySummary::pointwiseSmoothed, false);
}

Status createBaselineSession(AnalysisRun& run, const QuantConfig& config, const AnalysisOptions& options,
                             const std::shared_ptr<CancelToken>& cancel) {
  run.sessionConfig = config;
  if (!anyRemedy(run.request)) return Status::ok();
  AnalysisOptions ao = options;
  ao.sensitivity = false;  // before/after: graph-wise and layer-wise errors and the outputs
  auto base = QuantSession::create(run.originalModel ? run.originalModel : run.model, config, ao);
  if (!base) return base.status();
  run.baselineSession = std::shared_ptr<QuantSession>(std::move(base).value());
  if (cancel) run.baselineSession->setCancelToken(cancel);
  return Status::ok();
}

Status runRemedies(AnalysisRun& run, const ProgressFn& progress, const std::shared_ptr<CancelToken>& cancel) {
  if (!run.baselineSession) return Status::ok();
  const AnalysisRequest& rq = run.request;
  const bool bias = rq.biasCorrection, smooth = rq.smoothQuant, clip = rq.weightClipSearch;
  // Equal shares of the bar: the baseline, then each remedy after calibration.
  const int steps = 1 + (int)bias + (int)smooth + (int)clip;
  int step = 0;
  auto share = [&](double lo, double hi) {
    return part(progress, ((double)step + lo) / steps, ((double)step + hi) / steps);
  };
  QS_RETURN_IF_ERROR(run.baselineSession->calibrate(*run.calibrationData, share(0, 0.35)));
  if (headWeightScaleSearched(run)) {
    auto head = applyHeadWeightScale(*run.baselineSession, *run.calibrationData, share(0.35, 0.4));
    if (!head) return head.status();
  }
  if (headBiasCorrected(run)) {
    auto bias = applyHeadBiasCorrection(*run.baselineSession, *run.calibrationData, share(0.35, 0.4));
    if (!bias) return bias.status();
  }
  auto before = run.baselineSession->analyze(run.analysisData, share(0.4, 1.0));
  if (!before) return before.status();
  run.remedies.before = *before;
  run.baselineSession.reset();  // its cached activations are not needed any more
  ++step;

  if (smooth) {
    SmoothQuantOptions so;
    so.alpha = rq.smoothQuantAlpha;
    auto sq = smoothQuant(*run.session, *run.calibrationData, so, share(0, 0.5));
    if (!sq) return sq.status();
    if (!sq->groups.empty()) QS_RETURN_IF_ERROR(replaceSession(run, sq->model, run.session->options(), share(0.5, 1.0), cancel));
    run.remedies.applied.push_back("smoothquant");
    run.remedies.smoothed = std::move(sq->groups);
    run.remedies.smoothSkipped = std::move(sq->skipped);
    addChanged(run.remedies, sq->changedInitializers);
    ++step;
  }
  if (clip) {
    auto wc = searchWeightClip(*run.session, *run.calibrationData, {}, share(0, 0.5));
    if (!wc) return wc.status();
    if (!wc->ratios.empty()) {
      AnalysisOptions ao = run.session->options();
      ao.weightClip = std::move(wc->ratios);
      QS_RETURN_IF_ERROR(replaceSession(run, run.model, ao, share(0.5, 1.0), cancel));
    }
    run.remedies.applied.push_back("weight_clip_search");
    run.remedies.weightClips = std::move(wc->nodes);
    ++step;
  }
  if (!bias) return Status::ok();

  // The corrections go into the session, applied where their node is quantized: the session stays
  // on the float model, whose output is the reference of the figures and of ONNX Runtime's check
  // (a session on a corrected copy compared the export with a float model that nobody runs: det,
  // 4 pages at 256x256, predicted 17.46 dB against ONNX Runtime's 16.24). No recalibration: the
  // scales stay those the corrections were measured with.
  auto corrected = correctBias(*run.session, *run.calibrationData, share(0, 1.0));
  if (!corrected) return corrected.status();
  QS_RETURN_IF_ERROR(run.session->setConstantCorrections(std::move(corrected->corrections)));
  run.remedies.applied.push_back("bias_correction");
  run.remedies.biasShifts = std::move(corrected->nodes);
  run.remedies.biasSkipped = std::move(corrected->skipped);
  addChanged(run.remedies, corrected->changedInitializers);
  return Status::ok();
}

}  // namespace qs
