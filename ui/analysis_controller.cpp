#include "ui/analysis_controller.h"

#include <QFileInfo>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <atomic>
#include <chrono>

#include "core/analysis/fallback_curve.h"
#include "core/analysis/result_projection.h"
#include "ui/realisation_text.h"

namespace qs::ui {

namespace {

QString megabytes(uint64_t bytes) { return QStringLiteral("%1 MB").arg((double)bytes / 1e6, 0, 'f', bytes < 10000000 ? 1 : 0); }

}  // namespace

QString toggleCacheSummary(const QuantSession& session, double lastToggleSeconds) {
  const int64_t batches = session.analysedBatches();
  if (batches <= 0) return {};
  const int64_t cached = std::min(session.cachedBatches(), batches);
  QString s = QStringLiteral("Toggle cache: %1 of %2 batches").arg(cached).arg(batches);
  if (session.streaming()) s += QStringLiteral(" (streamed: memory budget)");
  if (cached == batches) s += QStringLiteral(" · toggles re-run the changed cone only");
  else if (cached == 0) s += QStringLiteral(" · toggles recompute every batch in full");
  else s += QStringLiteral(" · toggles recompute %1 batches in full").arg(batches - cached);
  if (lastToggleSeconds >= 0) s += QStringLiteral(" · last toggle %1 s").arg(lastToggleSeconds, 0, 'f', 2);
  return s;
}

QString toggleCacheDetails(const QuantSession& session) {
  const AnalysisOptions& o = session.options();
  QString s = QStringLiteral("Activations kept for toggles: %1 (float and quantized tables of %2 batches), limit %3.")
                  .arg(megabytes(session.cachedBytes()))
                  .arg(session.cachedBatches())
                  .arg(megabytes(session.cacheLimitBytes()));
  if (session.batchTableBytes() > 0)
    s += QStringLiteral("\nOne batch's tables: %1.").arg(megabytes(session.batchTableBytes()));
  s += QStringLiteral("\nThe limit: at most %1").arg(megabytes(o.cacheBudgetBytes));
  if (o.memoryBudgetBytes != UINT64_MAX) s += QStringLiteral(", half the memory budget (%1)").arg(megabytes(o.memoryBudgetBytes));
  if (o.cacheRssBound > 0)
    s += QStringLiteral(", and within %1 x (weights + the float activations of every batch) beside what the workbench "
                        "already holds").arg(o.cacheRssBound, 0, 'g', 3);
  s += QStringLiteral(".\nBatches beyond the cache are recomputed on each toggle: the same figures, more time.");
  return s;
}

struct AnalysisController::Outcome {
  Job job = Job::None;
  uint64_t generation = 0;
  Status status;
  std::shared_ptr<AnalysisRun> run;  // a calibration's new run
  std::shared_ptr<const AnalysisResult> result;
  std::shared_ptr<const FallbackCurve> curve;  // a fallback's, steps past the target included
  std::shared_ptr<const Int4Result> int4;  // an INT4 calibration's
  double seconds = 0;
};

namespace {

bool isCancelled(const Status& st) { return st.code() == StatusCode::Cancelled; }

}  // namespace

AnalysisController::AnalysisController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<std::shared_ptr<const qs::AnalysisResult>>();
  qRegisterMetaType<qs::ui::AnalysisController::Job>();
  m_debounce.setSingleShot(true);
  m_debounce.setInterval(40);
  connect(&m_debounce, &QTimer::timeout, this, [this] {
    if (m_job == Job::None && m_dirty) startToggleJob();
  });
}

AnalysisController::~AnalysisController() {
  if (m_watcher) {
    cancel();
    m_watcher->disconnect(this);
    m_watcher->waitForFinished();
  }
}

void AnalysisController::setModel(std::shared_ptr<const Model> model) {
  if (m_watcher) {
    cancel();
    m_watcher->disconnect(this);
    m_watcher->waitForFinished();
    m_watcher->deleteLater();
    m_watcher = nullptr;
  }
  ++m_generation;
  m_job = Job::None;
  m_cancel.reset();
  m_model = std::move(model);
  m_run.reset();
  m_result.reset();
  m_runResult.reset();
  m_runOf.clear();
  m_shownOf.clear();
  m_int4.reset();
  m_requested.clear();
  m_inFlight.clear();
  m_dirty = false;
  m_debounce.stop();
  emit resultChanged(nullptr);
}

std::vector<std::pair<NodeId, bool>> AnalysisController::diffAgainst(const QuantPlan& plan) const {
  std::vector<std::pair<NodeId, bool>> toggles;
  for (auto [shown, on] : m_requested) {
    const NodeId id = runNode(shown);
    if (id >= 0 && (size_t)id < plan.nodes.size() && plan.nodes[(size_t)id].quantized != on) toggles.emplace_back(id, on);
  }
  return toggles;
}

NodeId AnalysisController::runNode(NodeId id) const {
  if (m_runOf.empty()) return id;
  return id >= 0 && (size_t)id < m_runOf.size() ? m_runOf[(size_t)id] : -1;
}

NodeId AnalysisController::shownNode(NodeId id) const {
  if (m_shownOf.empty()) return id;
  return id >= 0 && (size_t)id < m_shownOf.size() ? m_shownOf[(size_t)id] : -1;
}

std::shared_ptr<const AnalysisResult> AnalysisController::onShownModel(std::shared_ptr<const AnalysisResult> r) const {
  if (!r || m_runOf.empty() || !m_model || !m_run || !m_run->model) return r;
  return std::make_shared<const AnalysisResult>(projectResult(*r, m_run->model->graph, m_model->graph));
}

std::map<NodeId, bool> AnalysisController::unappliedStates() const {
  if (!m_dirty && m_job != Job::Toggle && m_job != Job::Calibrate) return {};
  std::map<NodeId, bool> out;
  const QuantPlan* plan = m_result ? &m_result->plan : nullptr;
  for (auto [id, on] : m_requested)
    if (!plan || ((size_t)id < plan->nodes.size() && plan->nodes[(size_t)id].quantizable && plan->nodes[(size_t)id].quantized != on))
      out[id] = on;
  return out;
}

void AnalysisController::requestStates(const std::vector<std::pair<NodeId, bool>>& states) {
  for (auto [id, on] : states) m_requested[id] = on;
  m_dirty = true;
  if (m_run) m_debounce.start();
}

void AnalysisController::setRequestedStates(const std::map<NodeId, bool>& states) {
  m_requested = states;
  m_dirty = true;
  if (m_run) m_debounce.start();
}

bool AnalysisController::calibrate(const AnalysisRequest& given) {
  if (!m_model || m_job != Job::None) return false;
  const QString path = QString::fromStdString(given.data.path);
  if (!path.isEmpty()) {
    // The checks that need no thread, in one line naming the path.
    QFileInfo fi(path);
    QString why;
    if (!fi.exists()) why = QStringLiteral("no such file or folder");
    else if (!fi.isReadable()) why = QStringLiteral("permission denied");
    else if (fi.isFile() && fi.size() == 0) why = QStringLiteral("the file is empty");
    if (!why.isEmpty()) {
      emit failed(Job::Calibrate, path + QStringLiteral(": ") + why);
      return false;
    }
  }
  m_debounce.stop();
  AnalysisRequest request = given;
  request.modelPath = m_model->path;  // the open model, which prepareRun takes as it is
  // The user's node states are toggles on the new analysis, in the same job: the request's lists
  // stay what the user configured, so an export records the states as states.
  const std::map<NodeId, bool> requested = m_requested;
  m_inFlight = requested;
  m_dirty = false;
  m_pendingRequest = request;  // becomes request() when the run succeeds
  auto token = std::make_shared<CancelToken>();
  launch(Job::Calibrate, token, [model = m_model, request, requested, token](const ProgressFn& report) {
    auto out = std::make_shared<Outcome>();
    RunCallbacks callbacks;
    callbacks.progress = report;
    callbacks.cancel = token;
    callbacks.overallProgress = true;
    report(0, "Reading calibration data");
    auto prepared = prepareRun(request, callbacks, model);
    if (!prepared) {
      out->status = prepared.status();
      return out;
    }
    auto run = std::make_shared<AnalysisRun>(std::move(prepared).value());
    out->status = executeRun(*run, callbacks);
    if (!out->status) return out;
    std::shared_ptr<const AnalysisResult> result = run->result();
    // The requested states are by the open model's ids; a run that inserted nodes has its own.
    const bool sameIds = !run->model || sameNodeIds(model->graph, run->model->graph);
    const std::vector<NodeId> runOf = sameIds ? std::vector<NodeId>{} : nodesByName(model->graph, run->model->graph);
    std::vector<std::pair<NodeId, bool>> toggles;
    for (auto [shown, on] : requested) {
      const NodeId id = sameIds ? shown : (size_t)shown < runOf.size() ? runOf[(size_t)shown] : -1;
      if (id >= 0 && (size_t)id < run->session->plan().nodes.size() && run->session->plan().nodes[(size_t)id].quantized != on)
        toggles.emplace_back(id, on);
    }
    if (!toggles.empty()) {
      // executeRun reports up to 0.97 without a fallback target; the toggles take the rest.
      auto toggled = run->session->setQuantized(toggles, [&report](double f, const std::string& stage) {
        return report(0.97 + 0.03 * f, stage);
      });
      if (!toggled) {
        out->status = toggled.status();
        return out;
      }
      result = std::move(toggled).value();
      // A toggle keeps no realisations (its figures change): measured again at the states shown, as a
      // configured exclusion has them on the command line (--realisations N; auto's decision is kept).
      if (run->session->options().realisations > 1) {
        auto measured = run->session->measureRealisations(report);
        if (!measured) {
          out->status = measured.status();
          return out;
        }
        result = std::move(measured).value();
      }
    }
    out->result = std::move(result);
    out->run = std::move(run);
    return out;
  });
  return true;
}

bool AnalysisController::calibrateInt4(const AnalysisRequest& given, const Int4Settings& settings) {
  if (!m_model || m_job != Job::None) return false;
  const QString path = QString::fromStdString(given.data.path);
  if (!path.isEmpty() && !QFileInfo::exists(path)) {
    emit failed(Job::Calibrate, path + QStringLiteral(": no such file or folder"));
    return false;
  }
  m_debounce.stop();
  AnalysisRequest request = given;
  request.modelPath = m_model->path;
  m_pendingRequest = request;
  m_pendingInt4 = settings;
  m_pendingInt4.on = true;
  Int4Options options;  // what the CLI's finishInt4Options sets
  options.method = settings.method;
  options.blockSize = settings.blockSize;
  options.config = request.config;
  options.threads = request.threads;
  auto token = std::make_shared<CancelToken>();
  launch(Job::Calibrate, token, [model = m_model, request, options, token](const ProgressFn& report) {
    auto out = std::make_shared<Outcome>();
    report(0, "Reading calibration data");
    auto data = CalibrationData::open(*model, request.data);
    if (!data) {
      out->status = data.status();
      return out;
    }
    auto r = runInt4Analysis(model, **data, options, report, token.get());
    if (!r) {
      out->status = r.status();
      return out;
    }
    auto int4 = std::make_shared<const Int4Result>(std::move(r).value());
    out->result = int4AsAnalysisResult(*model, *int4);
    out->int4 = std::move(int4);
    return out;
  });
  return true;
}

void AnalysisController::startToggleJob() {
  if (!m_run || m_job != Job::None) return;
  auto session = m_run->session;
  auto toggles = diffAgainst(session->plan());
  m_inFlight = m_requested;
  m_dirty = false;
  auto token = std::make_shared<CancelToken>();
  session->setCancelToken(token);  // no job runs on the session now
  launch(Job::Toggle, token, [session, toggles](const ProgressFn& report) {
    auto out = std::make_shared<Outcome>();
    auto result = session->setQuantized(toggles, report);
    if (!result) out->status = result.status();
    else out->result = std::move(result).value();
    return out;
  });
}

bool AnalysisController::autoFallback(double targetDb) {
  if (!m_run || m_job != Job::None) return false;
  m_debounce.stop();
  m_fallbackTarget = targetDb;
  auto session = m_run->session;
  m_inFlight.clear();
  // Pending toggles first, so that the fallback starts from what the user sees.
  auto toggles = diffAgainst(session->plan());
  m_dirty = false;
  auto token = std::make_shared<CancelToken>();
  session->setCancelToken(token);
  launch(Job::Fallback, token, [session, toggles, targetDb](const ProgressFn& report) {
    auto out = std::make_shared<Outcome>();
    if (!toggles.empty()) {
      auto r = session->setQuantized(toggles, report);
      if (!r) {
        out->status = r.status();
        return out;
      }
    }
    // The re-measuring fallback (core/analysis/fallback_curve.h), with the CLI's steps past the
    // target: the dialog lists the exclusions made, the plots panel shows the whole curve, and the
    // session is left at the first point that reaches the target.
    FallbackOptions fo;
    fo.targetSnrDb = targetDb;
    auto curve = qs::fallbackCurve(*session, fo, report);
    if (!curve) out->status = curve.status();
    else out->curve = std::make_shared<const FallbackCurve>(std::move(curve).value());
    out->result = session->result();  // partial progress of a cancelled run is kept, as the session keeps it
    return out;
  });
  return true;
}

bool AnalysisController::exactSensitivity(const std::vector<NodeId>& shownNodes) {
  if (!m_run || m_job != Job::None || shownNodes.empty()) return false;
  std::vector<NodeId> nodes;
  for (NodeId id : shownNodes)
    if (runNode(id) >= 0) nodes.push_back(runNode(id));
  if (nodes.empty()) return false;
  m_debounce.stop();
  auto session = m_run->session;
  auto toggles = diffAgainst(session->plan());
  m_inFlight = m_requested;
  m_dirty = false;
  auto token = std::make_shared<CancelToken>();
  session->setCancelToken(token);
  launch(Job::ExactSensitivity, token, [session, toggles, nodes](const ProgressFn& report) {
    auto out = std::make_shared<Outcome>();
    if (!toggles.empty()) {
      auto r = session->setQuantized(toggles, report);
      if (!r) {
        out->status = r.status();
        return out;
      }
    }
    auto result = session->exactSensitivity(nodes, report);
    if (!result) out->status = result.status();
    else out->result = std::move(result).value();
    return out;
  });
  return true;
}

void AnalysisController::cancel() {
  m_debounce.stop();
  if (m_cancel) m_cancel->cancel();
}

void AnalysisController::launch(Job job, std::shared_ptr<CancelToken> cancel, Work work) {
  m_job = job;
  m_cancel = cancel;
  const uint64_t generation = ++m_generation;
  // Progress hops to the GUI thread, at most once per percent; a stale job's reports are dropped.
  auto lastPercent = std::make_shared<std::atomic<int>>(-1);
  ProgressFn report = [this, generation, cancel, lastPercent](double f, const std::string& stage) {
    const int percent = std::clamp((int)(f * 100), 0, 100);
    if (lastPercent->exchange(percent) != percent) {
      const QString label = QString::fromStdString(stage);
      QMetaObject::invokeMethod(
          this,
          [this, generation, percent, label] {
            if (generation == m_generation) emit progress(percent, label);
          },
          Qt::QueuedConnection);
    }
    return !cancel->cancelled();
  };
  m_watcher = new QFutureWatcher<std::shared_ptr<Outcome>>(this);
  connect(m_watcher, &QFutureWatcherBase::finished, this, [this, watcher = m_watcher] {
    auto outcome = watcher->result();
    watcher->deleteLater();
    if (watcher == m_watcher) m_watcher = nullptr;
    finish(outcome);
  });
  m_watcher->setFuture(QtConcurrent::run([work = std::move(work), report, job, generation] {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = work(report);
    out->job = job;
    out->generation = generation;
    out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }));
  emit jobStarted(job);
}

void AnalysisController::finish(const std::shared_ptr<Outcome>& out) {
  if (out->generation != m_generation) return;  // the model changed meanwhile
  const Job job = m_job;
  m_job = Job::None;
  m_cancel.reset();
  m_lastSeconds = out->seconds;
  m_lastJob = job;
  const bool ok = out->status.isOk();
  if (job == Job::Calibrate && ok) {
    m_run = out->run;  // null for an INT4 run: no session to toggle
    m_runOf.clear();
    m_shownOf.clear();
    if (m_run && m_run->model && m_model && !sameNodeIds(m_model->graph, m_run->model->graph)) {
      m_runOf = nodesByName(m_model->graph, m_run->model->graph);
      m_shownOf.assign(m_run->model->graph.nodes.size(), -1);
      for (size_t i = 0; i < m_runOf.size(); ++i)
        if (m_runOf[i] >= 0) m_shownOf[(size_t)m_runOf[i]] = (NodeId)i;
    }
    m_int4 = out->int4;
    m_int4Settings = out->int4 ? m_pendingInt4 : Int4Settings{};
    m_request = m_pendingRequest;
    if (m_curve) {
      m_curve.reset();
      emit fallbackCurveChanged(nullptr, m_fallbackTarget);
    }
  }
  if (out->result && (ok || job == Job::Fallback)) {
    m_runResult = out->result;
    m_result = onShownModel(out->result);
    emit resultChanged(m_result);
  }
  if (job == Job::Fallback && out->curve && !m_shownOf.empty()) {
    // Its steps name the run's nodes; the views, the undo stack and the requests use the shown ones.
    auto curve = std::make_shared<FallbackCurve>(*out->curve);
    for (FallbackStep& s : curve->steps) s.excluded = shownNode(s.excluded);
    for (NodeId& id : curve->reincluded) id = shownNode(id);
    out->curve = std::move(curve);
  }
  if (job == Job::Fallback) {
    // The fallback's exclusions become the user's own, so that later toggles and projects keep them.
    const std::vector<FallbackStep> steps = out->curve ? out->curve->chosenSteps() : std::vector<FallbackStep>{};
    if (m_result)
      for (const FallbackStep& s : steps)
        if (s.excluded >= 0) m_requested[s.excluded] = false;
    if (ok) {
      m_curve = out->curve;
      emit fallbackCurveChanged(m_curve, m_fallbackTarget);
      // With realisations (--realisations) the target is reached where their mean reaches it too, as the core checks.
      const int worstMean = m_result ? worstRealisationOutput(*m_result) : -1;
      const bool onMean = worstMean < 0 || m_result->outputs[(size_t)worstMean].realisationMeanDb() >= m_fallbackTarget;
      emit fallbackFinished(steps, m_result && m_result->worstOutputSnrDb() >= m_fallbackTarget && onMean);
    }
  }
  if (ok && job == Job::Calibrate) emit calibrated();
  if (!ok) {
    if (isCancelled(out->status)) {
      emit cancelled(job);
    } else {
      QString message = QString::fromStdString(out->status.message()).simplified();
      emit failed(job, message);
    }
    // A failed or cancelled toggle leaves the requested states unapplied: retry them only when asked again.
    if (job == Job::Toggle && m_result) {
      for (auto it = m_requested.begin(); it != m_requested.end();) {
        const auto& st = m_result->plan.nodes[(size_t)it->first];
        if (st.quantized != it->second && !m_dirty) it = m_requested.erase(it);
        else ++it;
      }
    }
  }
  m_inFlight.clear();
  if (m_dirty && m_run) {
    startToggleJob();
    return;
  }
  emit idle();
}

}  // namespace qs::ui
