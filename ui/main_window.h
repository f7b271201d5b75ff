// The workbench window: graph view in the centre (a start page while no model is open) with its
// search bar, docks for the inspector, the layer table, the plots and the log, and the status bar
// with the progress of the loader and of the analysis. The analysis commands live in
// AnalysisActions, project files and the autosave in ProjectController and Autosave.
//
// Object names, for findChild: "graphView", "searchBar", "searchEdit", "startPage", "nodeTable",
// "nodeTableModel", "nodeProxyModel", "nodeFilter", "inspector", "inspectorModel", "log",
// "plotsPanel", "modelLoader", the docks "inspectorDock", "nodesDock", "plotsDock", "logDock",
// and those of AnalysisActions ("undoStack", "colourCombo", the dialogs).
#pragma once

#include <QByteArray>
#include <QMainWindow>
#include <memory>

#include "ui/analysis_controller.h"
#include "ui/model_loader.h"

class QAction;
class QDockWidget;
class QLabel;
class QLineEdit;
class QMenu;
class QPlainTextEdit;
class QProgressBar;
class QStackedWidget;
class QTableView;
class QToolButton;
class QTreeView;

namespace qs::ui {

class AnalysisActions;
class Autosave;
class GraphView;
class NodeFilterProxyModel;
class NodeTableModel;
class PlotsPanel;
class ProjectController;
class PropertyTreeModel;
class SearchBar;
class StartPage;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Opens a model file (or a .qsproj project) in the background; errors go to the log and a message box.
  void openFile(const QString& path);
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
  bool errorDialogsEnabled() const { return m_errorDialogs; }
  /// Appends one line, with the time, to the log.
  void log(const QString& line);

  // The window's parts that are not widgets.
  AnalysisController* analysis() const { return m_analysis; }
  /// Calibrate, fallback, export, toggles with undo.
  AnalysisActions* analysisActions() const { return m_actions; }
  /// Project files, unsaved changes, crash restore.
  ProjectController* projects() const { return m_projects; }
  Autosave* autosave() const { return m_autosave; }

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
  void buildCentre();
  void buildActions();
  void buildDocks();
  void buildStatusBar();
  void connectAnalysis();
  void showDocks();
  void showOpenDialog();
  void onStarted(const QString& path);
  void onProgress(int percent, const QString& stage);
  void onLoaded(const LoadedModelPtr& result);
  void onFailed(const QString& path, const QString& message);
  void onTableCurrentChanged(const QModelIndex& current);
  void showInspectorFor(int item);
  void showInTable(int item);
  void addRecentFile(const QString& path);
  QStringList recentFiles() const;
  void rebuildRecentMenu();
  void onResultChanged(const std::shared_ptr<const AnalysisResult>& result);
  void onAnalysisStarted(AnalysisController::Job job);
  void onAnalysisProgress(int percent, const QString& stage);
  void onAnalysisEnded();
  void updateActions();
  void refreshUnapplied();

  ModelLoader* m_loader = nullptr;
  LoadedModelPtr m_current;
  QStackedWidget* m_stack = nullptr;
  StartPage* m_startPage = nullptr;
  QWidget* m_graphPage = nullptr;
  GraphView* m_view = nullptr;
  SearchBar* m_search = nullptr;
  QDockWidget* m_inspectorDock = nullptr;
  QDockWidget* m_tableDock = nullptr;
  QDockWidget* m_plotsDock = nullptr;
  QDockWidget* m_logDock = nullptr;
  QTreeView* m_inspector = nullptr;
  PropertyTreeModel* m_inspectorModel = nullptr;
  QTableView* m_table = nullptr;
  NodeTableModel* m_tableModel = nullptr;
  NodeFilterProxyModel* m_proxy = nullptr;
  QLineEdit* m_filterEdit = nullptr;
  QPlainTextEdit* m_log = nullptr;
  PlotsPanel* m_plots = nullptr;
  QLabel* m_statusInfo = nullptr;
  QLabel* m_statusStage = nullptr;
  QLabel* m_statusZoom = nullptr;
  QLabel* m_statusCache = nullptr;  // the toggle cache: batches kept, what a toggle recomputes
  QProgressBar* m_progress = nullptr;
  QToolButton* m_cancelAnalysis = nullptr;
  QMenu* m_recentMenu = nullptr;
  QAction* m_saveProjectAction = nullptr;
  QAction* m_saveProjectAsAction = nullptr;
  QAction* m_goToWorst = nullptr;  // View > Go to Worst Node
  QByteArray m_savedState;
  bool m_docksShown = false;
  bool m_syncing = false;
  bool m_errorDialogs = true;

  AnalysisController* m_analysis = nullptr;
  AnalysisActions* m_actions = nullptr;
  Autosave* m_autosave = nullptr;
  ProjectController* m_projects = nullptr;
};

}  // namespace qs::ui
