// Runs the quantization analysis of the open model off the GUI thread: calibration plus the full
// analysis, the debounced incremental re-analysis after toggles, and the automatic fallback.
//
// One job runs at a time. Progress and results arrive through signals. Cancel stops a job through
// the session's atomic flag. A cancelled or failed job leaves the previous session and its results
// in place. A calibration builds a new QuantSession in the worker, so the old one stays usable
// until the new one has succeeded. Toggles requested while a job runs are kept and applied when it
// ends.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <QTimer>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/analysis/quant_session.h"
#include "core/io/calibration_data.h"
#include "ui/calibration_request.h"

Q_DECLARE_METATYPE(std::shared_ptr<const qs::AnalysisResult>)

namespace qs::ui {

class AnalysisController : public QObject {
  Q_OBJECT
 public:
  enum class Job { None, Calibrate, Toggle, Fallback };

  explicit AnalysisController(QObject* parent = nullptr);
  ~AnalysisController() override;  // cancels and waits for the running job

  /// Drops the session, the results and the node states (a new model was opened).
  void setModel(std::shared_ptr<const Model> model);
  const std::shared_ptr<const Model>& model() const { return m_model; }

  /// Starts calibration and analysis. A path that does not exist is reported through failed() at
  /// once and false is returned; no thread starts. Returns false also while a job runs.
  bool calibrate(const CalibrationRequest& request);
  /// Excludes the most sensitive nodes until every output reaches `targetDb`.
  bool autoFallback(double targetDb);
  /// Stops the running job; the previous results stay.
  void cancel();

  /// Requests quantized/excluded states for nodes. Applied in the background after a short pause
  /// (requests within it are merged into one re-analysis).
  void requestStates(const std::vector<std::pair<NodeId, bool>>& states);
  /// The states the user asked for (explicit toggles only), applied or not.
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
  std::shared_ptr<const AnalysisResult> result() const { return m_result; }
  /// The session that produced result(); only read it (stats(), executor()) while no job runs or
  /// from what a job does not change (a toggle changes neither statistics nor the executor).
  std::shared_ptr<QuantSession> session() const { return m_session; }
  std::shared_ptr<const CalibrationData> data() const { return m_data; }
  /// The request that produced result() (valid once hasResult()).
  const CalibrationRequest& request() const { return m_request; }
  /// Warnings of the last successful calibration (data conversions, random data, config).
  const std::vector<std::string>& warnings() const { return m_warnings; }
  /// Seconds the last finished job took in the worker.
  double lastJobSeconds() const { return m_lastSeconds; }

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
  /// One line naming the file or node and the reason.
  void failed(qs::ui::AnalysisController::Job job, const QString& message);
  void cancelled(qs::ui::AnalysisController::Job job);
  /// The running job ended (after resultChanged/failed/cancelled) and nothing is queued.
  void idle();

 private:
  struct Outcome;
  void startToggleJob();
  void launch(Job job, std::function<std::shared_ptr<Outcome>(const std::function<bool(double, const std::string&)>&)> work);
  void finish(const std::shared_ptr<Outcome>& outcome);
  std::vector<std::pair<NodeId, bool>> diffAgainst(const QuantPlan& plan) const;

  std::shared_ptr<const Model> m_model;
  std::shared_ptr<QuantSession> m_session;
  std::shared_ptr<const CalibrationData> m_data;
  std::shared_ptr<const AnalysisResult> m_result;
  CalibrationRequest m_request, m_pendingRequest;
  double m_fallbackTarget = 0;
  std::vector<std::string> m_warnings;
  std::map<NodeId, bool> m_requested;
  std::map<NodeId, bool> m_inFlight;  // states the running job applies
  bool m_dirty = false;               // requests not yet handed to a job
  QTimer m_debounce;
  Job m_job = Job::None;
  uint64_t m_generation = 0;
  double m_lastSeconds = 0;
  // Cancel reaches the running job's session, which may still be under construction in the worker.
  struct CancelState {
    std::mutex mutex;
    std::atomic<bool> cancel{false};
    QuantSession* session = nullptr;
  };
  std::shared_ptr<CancelState> m_cancel;
  QFutureWatcher<std::shared_ptr<Outcome>>* m_watcher = nullptr;
};

}  // namespace qs::ui
