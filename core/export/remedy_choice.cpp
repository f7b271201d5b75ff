#include "core/export/remedy_choice.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <optional>
#include <utility>

#include "core/export/remedy_run.h"

namespace qs {

namespace {

// A candidate of the choice: its name (quant_cfg.json's key), its request flag, how a run applies it
// and where the run records what it changed.
struct Candidate {
  const char* name;
  bool AnalysisRequest::*flag;
  Status (*apply)(AnalysisRun&);
  std::vector<DepthwiseSmoothedInput> RemedySummary::*items;
};

Status applyDepthwiseSmooth(AnalysisRun& run) { return smoothRunDepthwise(run); }
Status applyPointwiseSmooth(AnalysisRun& run) { return smoothRunPointwise(run); }

// In the order a run applies them (pointwise smoothing measures the depthwise-smoothed model).
const Candidate kCandidates[] = {
    {"depthwise_smooth", &AnalysisRequest::depthwiseSmooth, applyDepthwiseSmooth, &RemedySummary::depthwiseSmoothed},
    {"pointwise_smooth", &AnalysisRequest::pointwiseSmooth, applyPointwiseSmooth, &RemedySummary::pointwiseSmoothed},
};

struct Figures {
  double choice = NAN, heldOut = NAN;  // worst output SNR (dB) on each part
};

// The run's model calibrated on `choice` with the run's configuration and `options`, then analysed on
// `choice` and `heldOut` (when given): their worst output SNRs.
Result<Figures> measure(const AnalysisRun& run, const AnalysisOptions& options,
                        const std::shared_ptr<const CalibrationData>& choice,
                        const std::shared_ptr<const CalibrationData>& heldOut, const ProgressFn& progress,
                        const std::shared_ptr<CancelToken>& cancel) {
  auto created = QuantSession::create(run.model, run.sessionConfig, options);
  if (!created) return created.status();
  std::shared_ptr<QuantSession> session(std::move(created).value());
  if (cancel) session->setCancelToken(cancel);
  auto part = [&](double lo, double hi) -> ProgressFn {
    if (!progress) return {};
    return [&progress, lo, hi](double f, const std::string& stage) { return progress(lo + (hi - lo) * f, stage); };
  };
  QS_RETURN_IF_ERROR(session->calibrate(*choice, part(0, 0.5)));
  Figures f;
  auto a = session->analyze(choice, part(0.5, heldOut ? 0.75 : 1.0));
  if (!a) return a.status();
  f.choice = (*a)->worstOutputSnrDb();
  if (heldOut) {
    auto h = session->analyze(heldOut, part(0.75, 1.0));
    if (!h) return h.status();
    f.heldOut = (*h)->worstOutputSnrDb();
  }
  return f;
}

std::string db(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f dB", v);
  return buf;
}

}  // namespace

Status chooseRunRemedies(AnalysisRun& run, const ProgressFn& progress, const std::shared_ptr<CancelToken>& cancel) {
  AnalysisRequest& rq = run.request;
  RemedyChoice& ch = run.remedies.choice;
  ch = RemedyChoice{};
  ch.mode = "auto";
  ch.marginDb = rq.remedyMarginDb;
  std::vector<const Candidate*> cands;
  bool laterOn = false;  // a remedy applied after this one is on already: this one cannot go before it now
  for (auto it = std::rbegin(kCandidates); it != std::rend(kCandidates); ++it) {
    const bool fixed = std::find(rq.remediesFixed.begin(), rq.remediesFixed.end(), it->name) != rq.remediesFixed.end();
    if (!(rq.*(it->flag)) && !fixed && !laterOn) cands.insert(cands.begin(), &*it);
    laterOn = laterOn || rq.*(it->flag);
  }
  if (cands.empty()) {
    ch.note = "every candidate is set by a flag";
    return Status::ok();
  }
  if (run.calibrationData->isRandom()) {
    ch.note = "random calibration data: nothing measured";
    return Status::ok();
  }
  const auto wall0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();

  // The choice samples and the held-out ones: the first half of the batches and the rest.
  const std::shared_ptr<const CalibrationData>& data = run.calibrationData;
  const int64_t batches = data->batchCount();
  std::shared_ptr<const CalibrationData> choice = data, heldOut;
  if (batches >= 2) {
    choice = selectBatches(data, 0, batches / 2);
    heldOut = selectBatches(data, batches / 2, batches - batches / 2);
  }
  ch.choiceSamples = choice->sampleCount();
  ch.heldOutSamples = heldOut ? heldOut->sampleCount() : 0;

  AnalysisOptions ao = run.session->options();
  ao.layerwise = false;
  ao.sensitivity = false;
  ao.cacheBudgetBytes = 0;
  // The trials' run: the model as it stands (cross-layer and depthwise equalization, the remedies a flag
  // turned on), quantized as the run's session is (its exclusions and restrictions), the choice samples as
  // its calibration data.
  AnalysisRun trial;
  trial.request = rq;
  trial.model = run.model;
  trial.originalModel = run.model;
  trial.sessionConfig = run.sessionConfig;
  trial.calibrationData = choice;
  const double steps = (double)cands.size() + 1;
  auto share = [&](double k) -> ProgressFn {
    if (!progress) return {};
    return [&progress, k, steps](double f, const std::string&) {
      return progress((k + f) / steps, "choosing remedies");
    };
  };
  std::optional<Figures> current;  // measured when the first candidate that changes something needs it
  for (size_t i = 0; i < cands.size(); ++i) {
    const Candidate& c = *cands[i];
    RemedyTrial t;
    t.remedy = c.name;
    AnalysisRun next = trial;
    next.request.*(c.flag) = true;
    QS_RETURN_IF_ERROR(c.apply(next));
    t.items = (int)(next.remedies.*(c.items)).size();
    if (t.items == 0) {
      t.reason = "nothing to change on this model";
      ch.trials.push_back(std::move(t));
      continue;
    }
    if (!current) {
      auto base = measure(trial, ao, choice, heldOut, share(0), cancel);
      if (!base) return base.status();
      current = *base;
    }
    t.beforeDb = current->choice;
    t.heldOutBeforeDb = current->heldOut;
    auto after = measure(next, ao, choice, heldOut, share((double)i + 1), cancel);
    if (!after) return after.status();
    t.afterDb = after->choice;
    t.heldOutAfterDb = after->heldOut;
    const double gain = t.afterDb - t.beforeDb, heldGain = t.heldOutAfterDb - t.heldOutBeforeDb;
    if (!(gain >= rq.remedyMarginDb)) {
      t.reason = db(gain) + " on the choice samples, below the margin of " + db(rq.remedyMarginDb).substr(1);
    } else if (heldOut && !(heldGain > 0)) {
      t.reason = db(gain) + " on the choice samples but " + db(heldGain) + " on the held-out ones";
    } else {
      t.kept = true;
      t.reason = db(gain) + " on the choice samples" + (heldOut ? ", " + db(heldGain) + " on the held-out ones" : "");
      trial = std::move(next);
      current = *after;
      ch.kept.push_back(c.name);
    }
    ch.trials.push_back(std::move(t));
  }
  if (progress) progress(1.0, "choosing remedies");
  ch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  ch.cpuSeconds = (double)(std::clock() - cpu0) / CLOCKS_PER_SEC;
  if (ch.kept.empty()) return Status::ok();

  // The kept remedies as their flags apply them, on the whole calibration data; the sessions again.
  for (const Candidate& c : kCandidates) {
    if (std::find(ch.kept.begin(), ch.kept.end(), c.name) == ch.kept.end()) continue;
    rq.*(c.flag) = true;
    QS_RETURN_IF_ERROR(c.apply(run));
  }
  const AnalysisOptions options = run.session->options();
  auto session = QuantSession::create(run.model, run.sessionConfig, options);
  if (!session) return session.status();
  run.session = std::shared_ptr<QuantSession>(std::move(session).value());
  if (cancel) run.session->setCancelToken(cancel);
  if (run.baselineSession) QS_RETURN_IF_ERROR(createBaselineSession(run, run.sessionConfig, options, cancel));
  return Status::ok();
}

}  // namespace qs
