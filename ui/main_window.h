// The workbench window: graph view in the centre (a start page while no model is open), docks for
// the inspector, the layer table, the plots and the log, and the status bar with the progress of the
// loader and of the analysis. Calibration, toggles (with undo), auto-fallback, export and project
// files are driven from here through the AnalysisController. The session is autosaved as a project
// file while it has unsaved changes, and offered back after a crash.
#pragma once

#include <QMainWindow>
#include <QTimer>
#include <memory>
#include <optional>

#include "ui/analysis_controller.h"
#include "ui/model_loader.h"
#include "ui/project_file.h"

class QLabel;
class QLineEdit;
class QMenu;
class QPlainTextEdit;
class QProgressBar;
class QStackedWidget;
class QTableView;
class QTreeView;
class QDockWidget;
class QComboBox;
class QToolButton;
class QUndoStack;
class QLockFile;

namespace qs::ui {

class GraphView;
class NodeFilterProxyModel;
class NodeTableModel;
class PropertyTreeModel;
class StartPage;
class PlotsPanel;
class CalibrationDialog;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Opens a model file (or a .qsproj project) in the background; errors go to the log and a message box.
  void openFile(const QString& path);
  /// Opens a project: its model, its node states and, when it was calibrated, a new calibration.
  bool openProject(const QString& path);
  /// Saves the session as a project file.
  bool saveProject(const QString& path);
  /// The session as a project (model, calibration settings, node states, view).
  Project currentProject() const;
  /// Sets nodes' states through the undo stack (one undo step), as the table and the graph do.
  void requestQuantized(const std::vector<std::pair<NodeId, bool>>& states, const QString& text);
  /// Milliseconds from the last toggle request to the table and graph showing its result.
  double lastToggleLatencyMs() const { return m_lastToggleMs; }
  /// Shows a model built in code (tests, generated graphs); laid out in the background.
  void openModel(std::shared_ptr<const Model> model, const QString& name);
  /// The model shown now (null before the first successful open).
  const LoadedModelPtr& current() const { return m_current; }

  /// Selects a layout item (node or graph input/output box; -1 clears) everywhere: view, table, inspector.
  void selectItem(int item, bool centerInView = true);
  /// Selects the item of a node.
  void selectNode(NodeId node);
  /// Moves to the next match of `text` (node or tensor name); false when nothing matches.
  bool findNext(const QString& text, bool backwards = false);

  /// Sample model offered on the start page: QS_SAMPLE_MODEL_DIR, then beside the executable.
  static QString sampleModelPath();
  /// Whether failures also open a message box (on by default; the log always gets the line).
  void setErrorDialogsEnabled(bool on) { m_errorDialogs = on; }

  GraphView* graphView() const { return m_view; }
  QTableView* nodeTable() const { return m_table; }
  NodeTableModel* nodeTableModel() const { return m_tableModel; }
  NodeFilterProxyModel* nodeProxyModel() const { return m_proxy; }
  QLineEdit* nodeFilterEdit() const { return m_filterEdit; }
  QTreeView* inspectorView() const { return m_inspector; }
  PropertyTreeModel* inspectorModel() const { return m_inspectorModel; }
  QPlainTextEdit* logView() const { return m_log; }
  ModelLoader* loader() const { return m_loader; }
  StartPage* startPage() const { return m_startPage; }
  QLineEdit* searchEdit() const { return m_searchEdit; }
  AnalysisController* analysis() const { return m_analysis; }
  PlotsPanel* plotsPanel() const { return m_plots; }
  QDockWidget* plotsDock() const { return m_plotsDock; }
  QDockWidget* tableDock() const { return m_tableDock; }
  QDockWidget* inspectorDock() const { return m_inspectorDock; }
  QUndoStack* undoStack() const { return m_undo; }
  QComboBox* colourCombo() const { return m_colourCombo; }
  /// The calibration dialog (created on first use), shown with showCalibrationDialog().
  CalibrationDialog* calibrationDialog();
  void showCalibrationDialog();
  /// Asks for a target and runs the automatic fallback.
  void showAutoFallback();
  void showExportDialog();

  // ---- Autosave and crash restore ----
  // While a model file is open and the session has changes that are not in a project file (a
  // toggle, a calibration, the colouring), the session is written atomically as a project to
  // `autosave-<pid>-<n>.qsproj` in the autosave folder: right after each applied toggle or
  // calibration, and every autosaveIntervalMs() otherwise. A lock file beside it marks it as owned
  // by a live session. A clean close (closeEvent) and an explicit save remove it; a crash leaves it,
  // with a stale lock, for the next start to offer back.

  /// The autosave folder: QS_AUTOSAVE_DIR, else "autosave" in the application's data folder.
  static QString defaultAutosaveDirectory();
  /// Where this window autosaves and looks for autosaves left by crashed sessions; empty turns
  /// autosave off. Set it before the first change (tests, screenshots).
  void setAutosaveDirectory(const QString& dir);
  QString autosaveDirectory() const { return m_autosaveDir; }
  /// Milliseconds between periodic autosaves (default 30 s).
  void setAutosaveIntervalMs(int ms) { m_autosaveTimer.setInterval(ms); }
  int autosaveIntervalMs() const { return m_autosaveTimer.interval(); }
  /// The file this session autosaves to (empty until it has written or adopted one).
  QString autosaveFile() const { return m_autosaveFile; }
  /// Whether the session differs from what was opened or last saved as a project (autosaves aside).
  bool hasUnsavedChanges() const;
  /// Brings the autosave up to date now: writes it when a model file is open, no calibration is
  /// running and the session has unsaved changes the autosave does not hold yet; removes it when
  /// the session is back to its saved state. True when a file was written.
  bool autosaveNow();
  /// The newest autosave in the folder whose session is gone (its lock is stale), or "".
  QString findOrphanedAutosave() const;

  enum class RestoreChoice { Ask, Restore, Discard, Keep };
  /// At startup: when a session ended without a clean close and left an autosave, asks whether to
  /// restore it (Ask: a message box; tests pass the answer) and reopens it as a project: the model,
  /// the node states and, when it was calibrated, a new calibration. The restored session takes the
  /// autosave over. Discard deletes it; Keep leaves it for the next start. Returns true when a
  /// restore started.
  bool offerAutosaveRestore(RestoreChoice choice = RestoreChoice::Ask);

 signals:
  /// A model was opened and is on screen.
  void modelShown(const QString& path);
  /// An open failed; `message` is the one line shown in the log.
  void openFailed(const QString& message);
  /// New analysis results are on screen (table, graph, plots, inspector).
  void analysisShown();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildActions();
  void buildDocks();
  void buildStatusBar();
  void showDocks();
  void showOpenDialog();
  void onStarted(const QString& path);
  void onProgress(int percent, const QString& stage);
  void onLoaded(const LoadedModelPtr& result);
  void onFailed(const QString& path, const QString& message);
  void onTableCurrentChanged(const QModelIndex& current);
  void showInspectorFor(int item);
  void showInTable(int item);
  void showSearch();
  void updateSearch(const QString& text);
  void log(const QString& line);
  void addRecentFile(const QString& path);
  QStringList recentFiles() const;
  void rebuildRecentMenu();
  void buildAnalysisUi();
  void onResultChanged(const std::shared_ptr<const AnalysisResult>& result);
  void onAnalysisStarted(AnalysisController::Job job);
  void onAnalysisProgress(int percent, const QString& stage);
  void onAnalysisEnded();
  void onFallbackFinished(const std::vector<FallbackStep>& steps, bool reached);
  void applyPendingProject();
  void updateActions();
  void refreshUnapplied();
  bool currentQuantized(NodeId id) const;
  void saveProjectAs();
  void openProjectDialog();
  bool startProject(const Project& p, const QString& projectPath);
  void releaseAutosave();
  bool claimAutosaveFile();
  QByteArray projectKey(Project p) const;

  ModelLoader* m_loader = nullptr;
  LoadedModelPtr m_current;
  QStackedWidget* m_stack = nullptr;
  StartPage* m_startPage = nullptr;
  QWidget* m_graphPage = nullptr;
  GraphView* m_view = nullptr;
  QWidget* m_searchBar = nullptr;
  QLineEdit* m_searchEdit = nullptr;
  QLabel* m_searchCount = nullptr;
  std::vector<int32_t> m_matches;
  QString m_matchText;
  int m_matchIndex = -1;
  QDockWidget* m_inspectorDock = nullptr;
  QDockWidget* m_tableDock = nullptr;
  QDockWidget* m_logDock = nullptr;
  QTreeView* m_inspector = nullptr;
  PropertyTreeModel* m_inspectorModel = nullptr;
  QTableView* m_table = nullptr;
  NodeTableModel* m_tableModel = nullptr;
  NodeFilterProxyModel* m_proxy = nullptr;
  QLineEdit* m_filterEdit = nullptr;
  QPlainTextEdit* m_log = nullptr;
  QLabel* m_statusInfo = nullptr;
  QLabel* m_statusStage = nullptr;
  QLabel* m_statusZoom = nullptr;
  QProgressBar* m_progress = nullptr;
  QMenu* m_recentMenu = nullptr;
  QMenu* m_viewMenu = nullptr;
  QByteArray m_savedState;
  bool m_docksShown = false;
  bool m_syncing = false;
  bool m_errorDialogs = true;

  AnalysisController* m_analysis = nullptr;
  QUndoStack* m_undo = nullptr;
  PlotsPanel* m_plots = nullptr;
  QDockWidget* m_plotsDock = nullptr;
  CalibrationDialog* m_calibDialog = nullptr;
  QComboBox* m_colourCombo = nullptr;
  QToolButton* m_cancelAnalysis = nullptr;
  QAction* m_calibrateAction = nullptr;
  QAction* m_fallbackAction = nullptr;
  QAction* m_exportAction = nullptr;
  QAction* m_saveProjectAction = nullptr;
  QAction* m_saveProjectAsAction = nullptr;
  QString m_projectPath;
  std::optional<Project> m_pendingProject;
  double m_toggleStartMs = -1;
  double m_lastToggleMs = -1;

  QString m_autosaveDir;
  QString m_autosaveFile;
  std::unique_ptr<QLockFile> m_autosaveLock;
  QTimer m_autosaveTimer;
  QByteArray m_savedKey;      // projectKey() of the session as last opened or saved
  QByteArray m_autosavedKey;  // projectKey() of what the autosave file holds
  bool m_autosaveStopped = false;  // closed cleanly: no more autosaves until a model opens
  bool m_restoring = false;        // the pending project comes from an autosave
};

}  // namespace qs::ui
