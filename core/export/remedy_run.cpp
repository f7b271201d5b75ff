#include "core/export/remedy_run.h"

#include <algorithm>
#include <set>

namespace qs {

namespace {

bool anyRemedy(const AnalysisRequest& rq) { return rq.equalize || rq.biasCorrection; }

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
  const bool bias = run.request.biasCorrection;
  const double split = bias ? 0.5 : 1.0;
  QS_RETURN_IF_ERROR(run.baselineSession->calibrate(*run.calibrationData, part(progress, 0, split * 0.4)));
  auto before = run.baselineSession->analyze(run.analysisData, part(progress, split * 0.4, split));
  if (!before) return before.status();
  run.remedies.before = *before;
  run.baselineSession.reset();  // its cached activations are not needed any more
  if (!bias) return Status::ok();

  auto corrected = correctBias(*run.session, *run.calibrationData, part(progress, 0.5, 0.75));
  if (!corrected) return corrected.status();
  auto session = QuantSession::create(corrected->model, run.sessionConfig, run.session->options());
  if (!session) return session.status();
  std::shared_ptr<QuantSession> next(std::move(session).value());
  if (cancel) next->setCancelToken(cancel);
  QS_RETURN_IF_ERROR(next->calibrate(*run.calibrationData, part(progress, 0.75, 1.0)));
  run.model = corrected->model;
  run.session = std::move(next);
  run.remedies.applied.push_back("bias_correction");
  run.remedies.biasShifts = std::move(corrected->nodes);
  run.remedies.biasSkipped = std::move(corrected->skipped);
  addChanged(run.remedies, corrected->changedInitializers);
  return Status::ok();
}

}  // namespace qs
