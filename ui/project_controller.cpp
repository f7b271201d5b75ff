#include "ui/project_controller.h"

#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <map>

#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/autosave.h"
#include "ui/main_window.h"
#include "ui/model_loader.h"
#include "ui/plots_panel.h"

namespace qs::ui {

ProjectController::ProjectController(MainWindow* window, ModelLoader* loader, AnalysisActions* actions, PlotsPanel* plots,
                                     Autosave* autosave)
    : QObject(window), m_window(window), m_loader(loader), m_actions(actions), m_plots(plots), m_autosave(autosave) {
  setObjectName(QStringLiteral("projects"));
  connect(m_autosave, &Autosave::due, this, [this] { autosaveNow(); });
  connect(m_autosave, &Autosave::warning, m_window, &MainWindow::log);
}

Project ProjectController::currentProject() const {
  Project p;
  const LoadedModelPtr& current = m_window->current();
  if (!current) return p;
  const AnalysisController* analysis = m_actions->controller();
  p.modelPath = QFileInfo(current->path).absoluteFilePath();
  p.calibration = analysis->hasResult() ? analysis->request() : m_actions->formRequest();
  p.calibrated = analysis->hasResult();
  p.int4 = analysis->hasResult() ? analysis->int4Settings() : m_actions->formInt4Settings();
  const Graph& g = current->model->graph;
  for (auto [id, on] : analysis->requestedStates())
    (on ? p.quantizedNodes : p.excludedNodes) << QString::fromStdString(g.nodes[(size_t)id].name);
  p.colouring = m_actions->colouringKey();
  p.thresholdDb = m_plots->threshold();
  return p;
}

bool ProjectController::hasUnsavedChanges() const { return m_window->current() && projectKey(currentProject()) != m_savedKey; }

bool ProjectController::save(const QString& path) {
  QString error;
  if (!m_window->current() || !saveProject(currentProject(), path, error)) {
    m_window->log(QStringLiteral("Error: ") + (error.isEmpty() ? QStringLiteral("no model open") : error));
    if (m_window->errorDialogsEnabled() && !error.isEmpty()) QMessageBox::warning(m_window, QStringLiteral("Cannot save project"), error);
    return false;
  }
  m_path = path;
  m_savedKey = projectKey(currentProject());
  m_autosave->release();  // the project file holds the session now
  emit used(QFileInfo(path).absoluteFilePath());
  m_window->log(QStringLiteral("Saved project %1").arg(path));
  return true;
}

void ProjectController::saveAs() {
  const LoadedModelPtr& current = m_window->current();
  if (!current) return;
  QString suggestion = m_path;
  if (suggestion.isEmpty()) {
    const QFileInfo model(current->path);
    suggestion = model.absoluteDir().filePath(model.completeBaseName() + QStringLiteral(".qsproj"));
  }
  const QString path = QFileDialog::getSaveFileName(m_window, QStringLiteral("Save project"), suggestion,
                                                    QStringLiteral("Quantscope projects (*.qsproj)"));
  if (!path.isEmpty()) save(path.endsWith(QStringLiteral(".qsproj")) ? path : path + QStringLiteral(".qsproj"));
}

void ProjectController::openDialog() {
  QSettings settings;
  const QString dir = settings.value(QStringLiteral("lastOpenDir"), QDir::homePath()).toString();
  const QString path = QFileDialog::getOpenFileName(m_window, QStringLiteral("Open project"), dir,
                                                    QStringLiteral("Quantscope projects (*.qsproj);;All files (*)"));
  if (!path.isEmpty()) open(path);
}

bool ProjectController::open(const QString& path) {
  Project p;
  QString error;
  if (!loadProject(path, p, error)) {
    emit failed(path, error);
    return false;
  }
  m_window->log(QStringLiteral("Opening project %1").arg(path));
  m_restoring = false;
  if (!start(p, QFileInfo(path).absoluteFilePath())) return false;
  emit used(m_path);
  return true;
}

bool ProjectController::start(const Project& p, const QString& projectPath) {
  m_pending = p;
  m_path = projectPath;
  return m_loader->open(p.modelPath);
}

void ProjectController::modelOpened() {
  if (!m_pending) m_path.clear();
  if (!m_restoring) m_autosave->release();  // the user left the previous session for this one
  m_autosave->setStopped(false);
  if (!m_pending) m_savedKey = projectKey(currentProject());
}

void ProjectController::openFailed() {
  m_pending.reset();
  m_restoring = false;
}

void ProjectController::applyPending() {
  const LoadedModelPtr& current = m_window->current();
  if (!m_pending || !current) return;
  const Project p = *m_pending;
  m_pending.reset();
  const Graph& g = current->model->graph;
  std::map<std::string, NodeId> byName;
  for (size_t i = 0; i < g.nodes.size(); ++i) byName.emplace(g.nodes[i].name, (NodeId)i);
  std::map<NodeId, bool> states;
  QStringList missing;
  for (const auto& [list, on] : {std::make_pair(&p.excludedNodes, false), std::make_pair(&p.quantizedNodes, true)})
    for (const QString& name : *list) {
      auto it = byName.find(name.toStdString());
      if (it == byName.end()) missing << name;
      else states[it->second] = on;
    }
  if (!missing.isEmpty())
    m_window->log(QStringLiteral("Warning: the project names nodes this model lacks: %1").arg(missing.join(QStringLiteral(", "))));
  AnalysisController* analysis = m_actions->controller();
  analysis->setRequestedStates(states);
  m_actions->setColouringKey(p.colouring);
  m_plots->setThreshold(p.thresholdDb);
  m_actions->setCalibrationSettings(p.calibration);  // Calibrate runs them when they name the data
  m_actions->setInt4Settings(p.int4);
  if (p.calibrated && p.int4.on) analysis->calibrateInt4(p.calibration, p.int4);
  else if (p.calibrated) analysis->calibrate(p.calibration);
  const QString title = m_path.isEmpty() ? QFileInfo(p.modelPath).fileName() : QFileInfo(m_path).fileName();
  m_window->setWindowTitle(QStringLiteral("%1%2 — Quantscope").arg(title, m_restoring ? QStringLiteral(" (restored)") : QString()));
  if (m_restoring) {
    // Nothing of the restored session is in a project file: it stays in the autosave (taken over
    // from the crashed session) until it is saved or the window closes cleanly.
    m_restoring = false;
    m_savedKey.clear();
    m_autosave->setHeldKey(projectKey(p));
    m_window->log(QStringLiteral("Restored the autosaved session%1").arg(p.calibrated ? QStringLiteral("; calibrating again") : QString()));
  } else {
    Project saved = currentProject();
    saved.calibrated = p.calibrated;
    if (p.calibrated) saved.calibration = p.calibration;
    m_savedKey = projectKey(saved);
  }
}

bool ProjectController::autosaveNow() {
  const LoadedModelPtr& current = m_window->current();
  if (!current || m_pending || !QFileInfo(current->path).isFile()) return false;
  // A calibration in flight is not in the results yet; the autosave keeps the state before it.
  if (m_actions->controller()->job() == AnalysisController::Job::Calibrate) return false;
  return m_autosave->update(currentProject(), m_path, m_savedKey);
}

bool ProjectController::offerAutosaveRestore(RestoreChoice choice) {
  Autosave::Orphan orphan = m_autosave->takeOrphan();
  if (orphan.file.isEmpty()) return false;
  const QString file = orphan.file;
  Project p;
  QString error;
  if (!loadProject(file, p, error)) {
    m_window->log(QStringLiteral("Warning: the autosave %1 cannot be restored (%2); deleted").arg(file, error));
    QFile::remove(file);
    return false;
  }
  if (choice == RestoreChoice::Ask) {
    QMessageBox box(QMessageBox::Question, QStringLiteral("Restore session"),
                    QStringLiteral("Quantscope did not close cleanly. Restore the session autosaved %1?")
                        .arg(p.autosavedAt.isValid() ? p.autosavedAt.toString(QStringLiteral("'on' yyyy-MM-dd 'at' HH:mm")) : QString()),
                    QMessageBox::NoButton, m_window);
    box.setInformativeText(QStringLiteral("Model: %1\n%2 node(s) excluded, %3 switched back on%4")
                               .arg(p.modelPath)
                               .arg(p.excludedNodes.size())
                               .arg(p.quantizedNodes.size())
                               .arg(p.calibrated ? QStringLiteral("; calibrated (the calibration runs again)") : QString()));
    QPushButton* restore = box.addButton(QStringLiteral("Restore"), QMessageBox::AcceptRole);
    QPushButton* discard = box.addButton(QStringLiteral("Discard"), QMessageBox::DestructiveRole);
    QPushButton* later = box.addButton(QStringLiteral("Not Now"), QMessageBox::RejectRole);
    box.setDefaultButton(restore);
    box.setEscapeButton(later);
    box.exec();
    choice = box.clickedButton() == restore   ? RestoreChoice::Restore
             : box.clickedButton() == discard ? RestoreChoice::Discard
                                              : RestoreChoice::Keep;
  }
  if (choice == RestoreChoice::Keep) return false;  // the lock goes, the file stays for the next start
  if (choice == RestoreChoice::Discard) {
    QFile::remove(file);
    m_window->log(QStringLiteral("Discarded the autosaved session %1").arg(file));
    return false;
  }
  m_autosave->adopt(std::move(orphan));
  m_restoring = true;
  m_window->log(QStringLiteral("Restoring the session autosaved in %1").arg(file));
  return start(p, p.autosaveOf);
}

}  // namespace qs::ui
