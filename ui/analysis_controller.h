// Runs the quantization analysis of the open model off the GUI thread: calibration plus the full
// analysis (the core pipeline, core/export/pipeline.h), the debounced incremental re-analysis after
// toggles, and the automatic fallback.
//
// One job runs at a time. Progress and results arrive through signals. Each job gets a fresh
// CancelToken, owned here; Cancel sets it. A cancelled or failed job leaves the previous run and
// its results in place. A calibration prepares and runs a new AnalysisRun in the worker, so the old
// one stays usable until the new one has succeeded. Toggles requested while a job runs are kept
// and applied when it ends.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <QTimer>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/export/pipeline.h"
#include "ui/int4_run.h"

Q_DECLARE_METATYPE(std::shared_ptr<const qs::AnalysisResult>)

namespace qs::ui {

/// The toggle cache of `session`'s last analysis, for the status bar: how many batches it keeps and
/// what a toggle recomputes (the changed cone on the kept batches, both passes on the others),
/// with `lastToggleSeconds` (< 0: none yet). Empty without an analysis.
QString toggleCacheSummary(const QuantSession& session, double lastToggleSeconds = -1);
/// Its tooltip: the cache's bytes against its limit and where that limit comes from.
QString toggleCacheDetails(const QuantSession& session);

class AnalysisController : public QObject {
  Q_OBJECT
 public:
  enum class Job { None, Calibrate, Toggle, Fallback, ExactSensitivity };

  explicit AnalysisController(QObject* parent = nullptr);
  ~AnalysisController() override;  // cancels and waits for the running job

  /// Drops the run, the results and the node states (a new model was opened).
  void setModel(std::shared_ptr<const Model> model);
  const std::shared_ptr<const Model>& model() const { return m_model; }

  /// Starts calibration and analysis of the open model with `request` (its model path is set to
  /// the open model's). A data path that does not exist is reported through failed() at once and
  /// false is returned; no thread starts. Returns false also while a job runs.
  bool calibrate(const AnalysisRequest& request);
  /// Starts the INT4 weight-only analysis (`quantscope analyze --quantize-mode int4`) of the open
  /// model on `request`'s data with `settings` (and the request's node lists); like calibrate(), its
  /// result arrives through resultChanged() and calibrated(). An INT4 result has no session: node
  /// toggles and the fallback do not apply to it.
  bool calibrateInt4(const AnalysisRequest& request, const Int4Settings& settings);
  /// The INT4 run behind result(), or null when result() is an int8/fp8 analysis.
  std::shared_ptr<const Int4Result> int4Result() const { return m_int4; }
  /// The settings of the last successful calibration (on: it was an INT4 run).
  const Int4Settings& int4Settings() const { return m_int4Settings; }
  /// Excludes the most sensitive nodes until every output reaches `targetDb`.
  bool autoFallback(double targetDb);
  /// The exact sensitivity of `nodes` (quantizable ones), on demand: each node's downstream cone
  /// re-run (QuantSession::exactSensitivity); the new figures arrive through resultChanged. Pending
  /// toggles are applied first. False while a job runs or before a calibration. By the open
  /// model's node ids.
  bool exactSensitivity(const std::vector<NodeId>& nodes);
  /// Stops the running job; the previous results stay.
  void cancel();

  /// Requests quantized/excluded states for nodes. Applied in the background after a short pause
  /// (requests within it are merged into one re-analysis).
  void requestStates(const std::vector<std::pair<NodeId, bool>>& states);
  /// The states the user asked for (explicit toggles only), applied or not; by the open model's
  /// node ids (the run's, where it inserted nodes, are mapped by name when they are applied).
  const std::map<NodeId, bool>& requestedStates() const { return m_requested; }
  /// Requested states the results do not show yet (pending or running).
  std::map<NodeId, bool> unappliedStates() const;
  /// Replaces the requested states wholesale (project file); applied like requestStates().
  void setRequestedStates(const std::map<NodeId, bool>& states);

  /// Milliseconds of quiet before toggles are applied.
  void setDebounceMs(int ms) { m_debounce.setInterval(ms); }

  bool isBusy() const { return m_job != Job::None; }
  Job job() const { return m_job; }
  bool hasResult() const { return (bool)m_result; }
  /// The current result on the open model's nodes and values (projectResult of the run's result
  /// when the run inserted nodes): what the views, the toggles and the inspector index by.
  std::shared_ptr<const AnalysisResult> result() const { return m_result; }
  /// The current result over the run's own model (run()->model; the same as result() when the run
  /// inserted no node).
  std::shared_ptr<const AnalysisResult> runResult() const { return m_runResult; }
  /// `r`, a result over the run's model (the run's remedies.before), on the open model's nodes.
  std::shared_ptr<const AnalysisResult> onShownModel(std::shared_ptr<const AnalysisResult> r) const;
  /// The run of the last successful calibration: its session (toggles and fallback change the
  /// session's results), data, warnings and what an export records. Only read it while no job runs,
  /// or what a job does not change (a toggle changes neither statistics nor the executor).
  std::shared_ptr<const AnalysisRun> run() const { return m_run; }
  /// The run's session, or null.
  std::shared_ptr<QuantSession> session() const { return m_run ? m_run->session : nullptr; }
  /// The data the results were computed on, or null.
  std::shared_ptr<const CalibrationData> data() const { return m_run ? m_run->analysisData : nullptr; }
  /// The request that produced result() (valid once hasResult()).
  const AnalysisRequest& request() const { return m_request; }
  /// Warnings of the last successful calibration (data conversions, random data, config).
  std::vector<std::string> warnings() const { return m_run ? m_run->warnings : std::vector<std::string>{}; }
  /// Seconds the last finished job took in the worker.
  double lastJobSeconds() const { return m_lastSeconds; }
  /// The job that finished last (None before any).
  Job lastJob() const { return m_lastJob; }
  /// The last auto-fallback's curve (its steps go past the target) and its target, or null
  /// (none since the last calibration).
  std::shared_ptr<const FallbackCurve> fallbackCurve() const { return m_curve; }
  double fallbackTarget() const { return m_fallbackTarget; }

 signals:
  void jobStarted(qs::ui::AnalysisController::Job job);
  /// percent in [0, 100].
  void progress(int percent, const QString& stage);
  /// New results (after a calibration, a toggle or a fallback).
  void resultChanged(std::shared_ptr<const qs::AnalysisResult> result);
  /// A calibration finished successfully (resultChanged came first).
  void calibrated();
  /// Auto-fallback finished: the nodes it excluded, in order, with the worst output SNR after each.
  void fallbackFinished(const std::vector<qs::FallbackStep>& steps, bool reached);
  /// The fallback curve changed (a fallback finished: its curve; a calibration: null).
  void fallbackCurveChanged(std::shared_ptr<const qs::FallbackCurve> curve, double targetDb);
  /// One line naming the file or node and the reason.
  void failed(qs::ui::AnalysisController::Job job, const QString& message);
  void cancelled(qs::ui::AnalysisController::Job job);
  /// The running job ended (after resultChanged/failed/cancelled) and nothing is queued.
  void idle();

 private:
  struct Outcome;
  using Work = std::function<std::shared_ptr<Outcome>(const ProgressFn& report)>;
  void startToggleJob();
  /// Runs `work` in a worker; `cancel` is the job's fresh token (the session's or the run's).
  void launch(Job job, std::shared_ptr<CancelToken> cancel, Work work);
  void finish(const std::shared_ptr<Outcome>& outcome);
  std::vector<std::pair<NodeId, bool>> diffAgainst(const QuantPlan& plan) const;
  /// The run's node of shown node `id` (-1: none; `id` itself when the run inserted no node).
  NodeId runNode(NodeId id) const;
  /// The shown node of the run's node `id` (-1: an inserted node).
  NodeId shownNode(NodeId id) const;

  std::shared_ptr<const Model> m_model;
  std::shared_ptr<AnalysisRun> m_run;
  std::shared_ptr<const AnalysisResult> m_result;     // on the shown model
  std::shared_ptr<const AnalysisResult> m_runResult;  // on the run's model
  // Node ids by name between the shown model and the run's (both empty: the same ids).
  std::vector<NodeId> m_runOf, m_shownOf;
  std::shared_ptr<const Int4Result> m_int4;
  Int4Settings m_int4Settings, m_pendingInt4;
  AnalysisRequest m_request, m_pendingRequest;
  double m_fallbackTarget = 0;
  std::shared_ptr<const FallbackCurve> m_curve;
  std::map<NodeId, bool> m_requested;
  std::map<NodeId, bool> m_inFlight;  // states the running job applies
  bool m_dirty = false;               // requests not yet handed to a job
  QTimer m_debounce;
  Job m_job = Job::None;
  Job m_lastJob = Job::None;
  uint64_t m_generation = 0;
  double m_lastSeconds = 0;
  std::shared_ptr<CancelToken> m_cancel;  // the running job's
  QFutureWatcher<std::shared_ptr<Outcome>>* m_watcher = nullptr;
};

}  // namespace qs::ui
