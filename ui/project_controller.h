// The workbench session as a project file (ui/project_file.h): saving it, opening one (the project
// waits while its model opens; its node states, view and calibration are applied once the model is
// shown), whether the session has unsaved changes, its autosave (ui/autosave.h) and the restore of
// a session that crashed.
#pragma once

#include <QObject>
#include <QString>
#include <optional>

#include "ui/project_file.h"

namespace qs::ui {

class AnalysisActions;
class Autosave;
class MainWindow;
class ModelLoader;
class PlotsPanel;

class ProjectController : public QObject {
  Q_OBJECT
 public:
  /// Works on `window`'s session: its model (opened through `loader`), analysis and calibration
  /// settings (`actions`), threshold (`plots`); autosaves through `autosave`.
  ProjectController(MainWindow* window, ModelLoader* loader, AnalysisActions* actions, PlotsPanel* plots, Autosave* autosave);

  /// The session as a project (model, calibration settings, node states, view).
  Project currentProject() const;
  /// Saves the session as a project file; the session then has no unsaved changes.
  bool save(const QString& path);
  /// Asks where, then save(); Save Project without a project file.
  void saveAs();
  /// Asks for a project file, then open().
  void openDialog();
  /// Opens a project: its model, its node states and, when it was calibrated, a new calibration.
  bool open(const QString& path);
  /// The project file the session was opened from or saved to ("" for none).
  QString path() const { return m_path; }
  /// Whether the session differs from what was opened or last saved as a project (autosaves aside).
  bool hasUnsavedChanges() const;

  /// Brings the autosave up to date now: writes it when a model file is open, no calibration is
  /// running and the session has unsaved changes the autosave does not hold yet; removes it when
  /// the session is back to its saved state. True when a file was written.
  bool autosaveNow();
  enum class RestoreChoice { Ask, Restore, Discard, Keep };
  /// At startup: when a session ended without a clean close and left an autosave, asks whether to
  /// restore it (Ask: a message box; tests pass the answer) and reopens it as a project: the model,
  /// the node states and, when it was calibrated, a new calibration. The restored session takes the
  /// autosave over. Discard deletes it; Keep leaves it for the next start. Returns true when a
  /// restore started.
  bool offerAutosaveRestore(RestoreChoice choice = RestoreChoice::Ask);

  /// The window shows a new model (before modelShown): a model opened on its own leaves the
  /// project and the previous session's autosave behind; the saved state is the new one.
  void modelOpened();
  /// The window showed the model: applies the project that was waiting for it, if any.
  void applyPending();
  /// The model did not open: the project that was waiting for it is dropped.
  void openFailed();

 signals:
  /// A project that cannot be read: one line naming the file.
  void failed(const QString& path, const QString& message);
  /// A project file was opened or saved (for the recent files).
  void used(const QString& path);

 private:
  bool start(const Project& p, const QString& projectPath);

  MainWindow* m_window;
  ModelLoader* m_loader;
  AnalysisActions* m_actions;
  PlotsPanel* m_plots;
  Autosave* m_autosave;
  QString m_path;
  std::optional<Project> m_pending;
  QByteArray m_savedKey;     // projectKey() of the session as last opened or saved
  bool m_restoring = false;  // the pending project comes from an autosave
};

}  // namespace qs::ui
