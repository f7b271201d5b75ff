#include "ui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QInputDialog>
#include <QLockFile>
#include <QStandardPaths>
#include <QToolBar>
#include <QTreeWidget>
#include <QUndoStack>
#include <QDialogButtonBox>
#include <QCloseEvent>
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTableView>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

#include "ui/app_icon.h"
#include "ui/calibration_dialog.h"
#include "ui/export_dialog.h"
#include "ui/graph_view.h"
#include "ui/node_properties.h"
#include "ui/node_table_model.h"
#include "ui/plots_panel.h"
#include "ui/property_tree_model.h"
#include "ui/quant_properties.h"
#include "ui/start_page.h"
#include "qs_version.h"

namespace qs::ui {

namespace {

constexpr int kMaxRecentFiles = 10;
const char* const kRecentKey = "recentFiles";
const char* const kSampleModelName = "ch_PP-OCRv4_det_infer.onnx";
constexpr int kAutosaveIntervalMs = 30000;
const char* const kAutosavePattern = "autosave-*.qsproj";

// A lock that marks an autosave as owned by a live session. Only a dead owner makes it stale: the
// age rule is off, so that a session left open for days keeps its autosave.
std::unique_ptr<QLockFile> autosaveLock(const QString& autosaveFile) {
  auto lock = std::make_unique<QLockFile>(autosaveFile + QStringLiteral(".lock"));
  lock->setStaleLockTime(0);
  if (!lock->tryLock(0)) return nullptr;
  return lock;
}

// The newest autosave in `dir` whose session is gone, locked for the caller; `skip` is the caller's own.
std::pair<QString, std::unique_ptr<QLockFile>> orphanedAutosave(const QString& dir, const QString& skip) {
  if (dir.isEmpty()) return {};
  const QFileInfoList files = QDir(dir).entryInfoList({QLatin1String(kAutosavePattern)}, QDir::Files, QDir::Time);
  for (const QFileInfo& fi : files) {
    const QString path = fi.absoluteFilePath();
    if (path == skip) continue;
    if (auto lock = autosaveLock(path)) return {path, std::move(lock)};
  }
  return {};
}

bool isOnnxUrl(const QUrl& url) {
  return url.isLocalFile() && (url.toLocalFile().endsWith(QStringLiteral(".onnx"), Qt::CaseInsensitive) ||
                               url.toLocalFile().endsWith(QStringLiteral(".qsproj"), Qt::CaseInsensitive));
}

double nowMs() {
  static QElapsedTimer clock = [] {
    QElapsedTimer t;
    t.start();
    return t;
  }();
  return (double)clock.nsecsElapsed() / 1e6;
}

// One undo step: node states before and after. The first redo() is skipped when the states are
// already applied (an automatic fallback ran them in the session).
class ToggleCommand : public QUndoCommand {
 public:
  using Apply = std::function<void(const std::vector<std::pair<NodeId, bool>>&)>;
  ToggleCommand(Apply apply, std::vector<std::pair<NodeId, bool>> after, std::vector<std::pair<NodeId, bool>> before,
                const QString& text, bool applied)
      : m_apply(std::move(apply)), m_after(std::move(after)), m_before(std::move(before)), m_skip(applied) {
    setText(text);
  }
  void redo() override {
    if (m_skip) {
      m_skip = false;
      return;
    }
    m_apply(m_after);
  }
  void undo() override { m_apply(m_before); }

 private:
  Apply m_apply;
  std::vector<std::pair<NodeId, bool>> m_after, m_before;
  bool m_skip;
};

const char* const kColouringKeys[] = {"op", "graphwise", "layerwise", "sensitivity"};

// Search field that reports Enter/Shift+Enter and Escape.
class SearchEdit : public QLineEdit {
 public:
  using QLineEdit::QLineEdit;
  std::function<void(bool backwards)> onNext;
  std::function<void()> onClose;

 protected:
  void keyPressEvent(QKeyEvent* e) override {
    if ((e->key() == Qt::Key_Return || e->key() == Qt::Key_Enter) && onNext) {
      onNext(e->modifiers() & Qt::ShiftModifier);
      return;
    }
    if (e->key() == Qt::Key_Escape && onClose) {
      onClose();
      return;
    }
    QLineEdit::keyPressEvent(e);
  }
};

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("Quantscope"));
  setWindowIcon(appIcon());
  setAcceptDrops(true);
  setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks);
  // The bottom docks (layers, plots) span the whole width: both are wide.
  setCorner(Qt::BottomRightCorner, Qt::BottomDockWidgetArea);
  setCorner(Qt::BottomLeftCorner, Qt::BottomDockWidgetArea);

  m_loader = new ModelLoader(this);
  connect(m_loader, &ModelLoader::started, this, &MainWindow::onStarted);
  connect(m_loader, &ModelLoader::progress, this, &MainWindow::onProgress);
  connect(m_loader, &ModelLoader::loaded, this, &MainWindow::onLoaded);
  connect(m_loader, &ModelLoader::failed, this, &MainWindow::onFailed);

  // Central area: the start page, or the graph with its search bar.
  m_stack = new QStackedWidget(this);
  m_startPage = new StartPage(m_stack);
  m_startPage->setSampleModel(sampleModelPath());
  connect(m_startPage, &StartPage::openDialogRequested, this, &MainWindow::showOpenDialog);
  connect(m_startPage, &StartPage::openRequested, this, &MainWindow::openFile);
  m_stack->addWidget(m_startPage);

  m_graphPage = new QWidget(m_stack);
  auto* gl = new QVBoxLayout(m_graphPage);
  gl->setContentsMargins(0, 0, 0, 0);
  gl->setSpacing(0);
  m_searchBar = new QWidget(m_graphPage);
  m_searchBar->setObjectName(QStringLiteral("searchBar"));
  m_searchBar->setStyleSheet(QStringLiteral("#searchBar { background: #eef1f4; border-bottom: 1px solid #d0d5db; }"));
  auto* sl = new QHBoxLayout(m_searchBar);
  sl->setContentsMargins(8, 4, 8, 4);
  auto* edit = new SearchEdit(m_searchBar);
  edit->setPlaceholderText(QStringLiteral("Find node or tensor name  (Enter: next, Shift+Enter: previous)"));
  edit->setClearButtonEnabled(true);
  edit->onNext = [this](bool back) { findNext(m_searchEdit->text(), back); };
  edit->onClose = [this] {
    m_searchBar->hide();
    m_view->setFocus();
  };
  m_searchEdit = edit;
  m_searchCount = new QLabel(m_searchBar);
  m_searchCount->setMinimumWidth(90);
  auto* closeSearch = new QToolButton(m_searchBar);
  closeSearch->setText(QStringLiteral("✕"));
  closeSearch->setAutoRaise(true);
  connect(closeSearch, &QToolButton::clicked, this, [this] { m_searchBar->hide(); });
  sl->addWidget(m_searchEdit, 1);
  sl->addWidget(m_searchCount);
  sl->addWidget(closeSearch);
  connect(m_searchEdit, &QLineEdit::textEdited, this, &MainWindow::updateSearch);
  m_searchBar->hide();
  m_view = new GraphView(m_graphPage);
  gl->addWidget(m_searchBar);
  gl->addWidget(m_view, 1);
  m_stack->addWidget(m_graphPage);
  setCentralWidget(m_stack);
  m_loader->setLayoutOptions(m_view->layoutOptions());

  connect(m_view, &GraphView::itemSelected, this, [this](int item) { selectItem(item, false); });
  connect(m_view, &GraphView::showInTableRequested, this, &MainWindow::showInTable);

  m_analysis = new AnalysisController(this);
  m_undo = new QUndoStack(this);
  buildDocks();
  buildActions();
  buildStatusBar();
  buildAnalysisUi();
  m_startPage->setRecentFiles(recentFiles());

  m_autosaveDir = defaultAutosaveDirectory();
  m_autosaveTimer.setInterval(kAutosaveIntervalMs);
  connect(&m_autosaveTimer, &QTimer::timeout, this, [this] { autosaveNow(); });
  m_autosaveTimer.start();

  resize(1440, 900);
  QSettings settings;
  restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  // The docks have nothing to show until a model is open: the start page gets the whole window,
  // and the saved dock layout comes back with the first model.
  m_savedState = settings.value(QStringLiteral("window/state")).toByteArray();
  for (QDockWidget* d : {m_inspectorDock, m_tableDock, m_plotsDock, m_logDock}) d->hide();
  updateActions();
}

void MainWindow::showDocks() {
  if (m_docksShown) return;
  m_docksShown = true;
  if (m_savedState.isEmpty() || !restoreState(m_savedState)) {
    for (QDockWidget* d : {m_inspectorDock, m_tableDock, m_plotsDock, m_logDock}) d->show();
    m_tableDock->raise();
  }
}

// No clean-close path here: a window destroyed without closeEvent (a crash, as far as the autosave
// is concerned) leaves its autosave; the lock goes, as it would with the process.
MainWindow::~MainWindow() { m_autosaveTimer.stop(); }

void MainWindow::buildDocks() {
  // Inspector.
  m_inspectorDock = new QDockWidget(QStringLiteral("Inspector"), this);
  m_inspectorDock->setObjectName(QStringLiteral("inspectorDock"));
  m_inspectorModel = new PropertyTreeModel(this);
  m_inspector = new QTreeView(m_inspectorDock);
  m_inspector->setModel(m_inspectorModel);
  m_inspector->setUniformRowHeights(true);
  m_inspector->setAlternatingRowColors(true);
  m_inspector->setSelectionMode(QAbstractItemView::ExtendedSelection);
  m_inspector->header()->setStretchLastSection(true);
  m_inspector->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_inspectorDock->setWidget(m_inspector);
  addDockWidget(Qt::RightDockWidgetArea, m_inspectorDock);

  // Node table with its filter.
  m_tableDock = new QDockWidget(QStringLiteral("Nodes"), this);
  m_tableDock->setObjectName(QStringLiteral("nodesDock"));
  auto* tableBox = new QWidget(m_tableDock);
  auto* tl = new QVBoxLayout(tableBox);
  tl->setContentsMargins(2, 2, 2, 2);
  tl->setSpacing(2);
  m_filterEdit = new QLineEdit(tableBox);
  m_filterEdit->setPlaceholderText(QStringLiteral("Filter by name or op (regular expression)"));
  m_filterEdit->setClearButtonEnabled(true);
  m_tableModel = new NodeTableModel(this);
  m_proxy = new NodeFilterProxyModel(this);
  m_proxy->setSourceModel(m_tableModel);
  m_table = new QTableView(tableBox);
  m_table->setModel(m_proxy);
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(NodeTableModel::IndexColumn, Qt::AscendingOrder);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setAlternatingRowColors(true);
  m_table->setWordWrap(false);
  m_table->verticalHeader()->hide();
  m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 6);
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  connect(m_filterEdit, &QLineEdit::textChanged, this, [this](const QString& text) {
    const bool ok = m_proxy->setPattern(text);
    m_filterEdit->setStyleSheet(ok ? QString() : QStringLiteral("QLineEdit { background: #fde2e1; }"));
    m_filterEdit->setToolTip(ok ? QString() : QStringLiteral("Not a valid regular expression"));
  });
  connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) { onTableCurrentChanged(current); });
  tl->addWidget(m_filterEdit);
  tl->addWidget(m_table);
  m_tableDock->setWidget(tableBox);
  addDockWidget(Qt::BottomDockWidgetArea, m_tableDock);
  m_tableDock->setWindowTitle(QStringLiteral("Layers"));
  for (int c = NodeTableModel::FirstAnalysisColumn; c <= NodeTableModel::LastAnalysisColumn; ++c) m_table->setColumnHidden(c, true);

  // Plots.
  m_plotsDock = new QDockWidget(QStringLiteral("Plots"), this);
  m_plotsDock->setObjectName(QStringLiteral("plotsDock"));
  m_plots = new PlotsPanel(m_plotsDock);
  m_plotsDock->setWidget(m_plots);
  addDockWidget(Qt::BottomDockWidgetArea, m_plotsDock);

  // Log.
  m_logDock = new QDockWidget(QStringLiteral("Log"), this);
  m_logDock->setObjectName(QStringLiteral("logDock"));
  m_log = new QPlainTextEdit(m_logDock);
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(5000);
  m_log->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_logDock->setWidget(m_log);
  addDockWidget(Qt::BottomDockWidgetArea, m_logDock);
  tabifyDockWidget(m_tableDock, m_logDock);
  m_tableDock->raise();
  resizeDocks({m_inspectorDock}, {380}, Qt::Horizontal);
  resizeDocks({m_tableDock, m_plotsDock}, {820, 620}, Qt::Horizontal);
  resizeDocks({m_tableDock}, {300}, Qt::Vertical);
}

void MainWindow::buildActions() {
  QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
  QAction* open = file->addAction(QStringLiteral("&Open…"), this, &MainWindow::showOpenDialog);
  open->setShortcut(QKeySequence::Open);
  m_recentMenu = file->addMenu(QStringLiteral("Open &Recent"));
  connect(m_recentMenu, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
  rebuildRecentMenu();
  QAction* sample = file->addAction(QStringLiteral("Open &Sample Model"), this, [this] { openFile(sampleModelPath()); });
  sample->setEnabled(!sampleModelPath().isEmpty());
  file->addSeparator();
  file->addAction(QStringLiteral("Open &Project…"), this, &MainWindow::openProjectDialog)
      ->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  m_saveProjectAction = file->addAction(QStringLiteral("&Save Project"), this, [this] {
    if (m_projectPath.isEmpty()) saveProjectAs();
    else saveProject(m_projectPath);
  });
  m_saveProjectAction->setShortcut(QKeySequence::Save);
  m_saveProjectAsAction = file->addAction(QStringLiteral("Save Project &As…"), this, &MainWindow::saveProjectAs);
  m_saveProjectAsAction->setShortcut(QKeySequence::SaveAs);
  file->addSeparator();
  m_exportAction = file->addAction(QStringLiteral("&Export Quantized Model…"), this, &MainWindow::showExportDialog);
  m_exportAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  file->addSeparator();
  QAction* quit = file->addAction(QStringLiteral("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  m_viewMenu = menuBar()->addMenu(QStringLiteral("&View"));
  QAction* find = m_viewMenu->addAction(QStringLiteral("&Find…"), this, &MainWindow::showSearch);
  find->setShortcut(QKeySequence::Find);
  QAction* fit = m_viewMenu->addAction(QStringLiteral("Fit to &Window"), m_view, &GraphView::fitToWindow);
  fit->setShortcut(QKeySequence(Qt::Key_F));
  fit->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  m_view->addAction(fit);  // F only while the graph has focus, so that typing elsewhere is not eaten
  QAction* zin = m_viewMenu->addAction(QStringLiteral("Zoom &In"), m_view, &GraphView::zoomIn);
  zin->setShortcuts({QKeySequence::ZoomIn, QKeySequence(Qt::CTRL | Qt::Key_Equal)});
  QAction* zout = m_viewMenu->addAction(QStringLiteral("Zoom &Out"), m_view, &GraphView::zoomOut);
  zout->setShortcut(QKeySequence::ZoomOut);
  QAction* actual = m_viewMenu->addAction(QStringLiteral("&Actual Size"), m_view, &GraphView::resetZoom);
  actual->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_0));
  m_viewMenu->addSeparator();
  m_viewMenu->addAction(m_inspectorDock->toggleViewAction());
  m_viewMenu->addAction(m_tableDock->toggleViewAction());
  m_viewMenu->addAction(m_plotsDock->toggleViewAction());
  m_viewMenu->addAction(m_logDock->toggleViewAction());

  QMenu* edit = menuBar()->addMenu(QStringLiteral("&Edit"));
  QAction* undo = m_undo->createUndoAction(this, QStringLiteral("&Undo"));
  undo->setShortcut(QKeySequence::Undo);
  QAction* redo = m_undo->createRedoAction(this, QStringLiteral("&Redo"));
  redo->setShortcuts({QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Z), QKeySequence::Redo});
  edit->addAction(undo);
  edit->addAction(redo);
  menuBar()->insertMenu(m_viewMenu->menuAction(), edit);

  QMenu* analysis = menuBar()->addMenu(QStringLiteral("&Analysis"));
  m_calibrateAction = analysis->addAction(QStringLiteral("&Calibrate…"), this, &MainWindow::showCalibrationDialog);
  m_calibrateAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_K));
  m_fallbackAction = analysis->addAction(QStringLiteral("&Auto-Fallback…"), this, &MainWindow::showAutoFallback);
  m_fallbackAction->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_F));
  analysis->addAction(QStringLiteral("C&ancel Running Analysis"), m_analysis, &AnalysisController::cancel)
      ->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));

  QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
  help->addAction(QStringLiteral("&About Quantscope"), this, [this] {
    QMessageBox::about(this, QStringLiteral("About Quantscope"),
                       QStringLiteral("<b>Quantscope %1</b><p>INT8 quantization error analysis for ONNX models.</p>"
                                      "<p>Graph layout: igraph's Sugiyama layout. Built with Qt %2.</p>")
                           .arg(QStringLiteral(QS_VERSION_STRING), QString::fromLatin1(qVersion())));
  });
}

void MainWindow::buildStatusBar() {
  m_statusStage = new QLabel(this);
  m_progress = new QProgressBar(this);
  m_progress->setMaximumWidth(180);
  m_progress->setMaximumHeight(16);
  m_progress->setTextVisible(false);
  m_progress->hide();
  m_statusInfo = new QLabel(this);
  m_statusZoom = new QLabel(this);
  m_statusZoom->setMinimumWidth(56);
  m_statusZoom->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
  statusBar()->addWidget(m_statusInfo, 1);
  statusBar()->addPermanentWidget(m_statusStage);
  statusBar()->addPermanentWidget(m_progress);
  statusBar()->addPermanentWidget(m_statusZoom);
  connect(m_view, &GraphView::zoomChanged, this,
          [this](double z) { m_statusZoom->setText(QStringLiteral("%1%").arg(qRound(z * 100))); });
}

QString MainWindow::sampleModelPath() {
  const QStringList candidates = {
      QStringLiteral(QS_SAMPLE_MODEL_DIR "/") + QLatin1String(kSampleModelName),
      QCoreApplication::applicationDirPath() + QStringLiteral("/") + QLatin1String(kSampleModelName),
      QCoreApplication::applicationDirPath() + QStringLiteral("/models/") + QLatin1String(kSampleModelName),
  };
  for (const QString& c : candidates)
    if (QFileInfo(c).isFile()) return QDir::cleanPath(c);
  return {};
}

void MainWindow::showOpenDialog() {
  QSettings settings;
  const QString dir = settings.value(QStringLiteral("lastOpenDir"), QDir::homePath()).toString();
  const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open ONNX model"), dir,
                                                    QStringLiteral("ONNX models (*.onnx);;All files (*)"));
  if (path.isEmpty()) return;
  settings.setValue(QStringLiteral("lastOpenDir"), QFileInfo(path).absolutePath());
  openFile(path);
}

void MainWindow::openFile(const QString& path) {
  if (path.isEmpty()) return;
  if (path.endsWith(QStringLiteral(".qsproj"), Qt::CaseInsensitive)) {
    openProject(path);
    return;
  }
  m_loader->open(QFileInfo(path).absoluteFilePath());
}

void MainWindow::openModel(std::shared_ptr<const Model> model, const QString& name) {
  m_loader->openModel(std::move(model), name);
}

void MainWindow::onStarted(const QString& path) {
  m_statusStage->setText(QStringLiteral("Opening %1").arg(QFileInfo(path).fileName()));
  m_progress->setRange(0, 0);
  m_progress->show();
  log(QStringLiteral("Opening %1").arg(path));
}

void MainWindow::onProgress(int percent, const QString& stage) {
  m_statusStage->setText(stage);
  if (percent < 0) {
    m_progress->setRange(0, 0);
  } else {
    m_progress->setRange(0, 100);
    m_progress->setValue(percent);
  }
}

void MainWindow::onLoaded(const LoadedModelPtr& result) {
  m_progress->hide();
  m_statusStage->clear();
  m_current = result;
  m_stack->setCurrentWidget(m_graphPage);
  showDocks();
  m_undo->clear();
  m_analysis->setModel(result->model);  // emits resultChanged(null): empties the analysis views
  if (!m_pendingProject) m_projectPath.clear();
  if (!m_restoring) releaseAutosave();  // the user left the previous session for this one
  m_autosaveStopped = false;
  m_view->setGraphLayout(result->layout);
  m_tableModel->setModel(result->model);
  for (int c = NodeTableModel::FirstAnalysisColumn; c <= NodeTableModel::LastAnalysisColumn; ++c) m_table->setColumnHidden(c, true);
  if (m_calibDialog) m_calibDialog->setModel(result->model.get());
  m_table->resizeColumnsToContents();
  for (int c : {NodeTableModel::InputsColumn, NodeTableModel::OutputsColumn})
    m_table->setColumnWidth(c, std::min(m_table->columnWidth(c), 260));
  m_matches.clear();
  m_matchText.clear();
  m_matchIndex = -1;
  showInspectorFor(-1);
  const QString name = QFileInfo(result->path).fileName();
  setWindowTitle(QStringLiteral("%1 — Quantscope").arg(name.isEmpty() ? result->path : name));
  const size_t nodes = result->model->graph.nodes.size();
  m_statusInfo->setText(QStringLiteral("%1 nodes · %2 layers · loaded in %3 s · laid out in %4 s")
                            .arg(nodes)
                            .arg(result->layout->layerCount)
                            .arg(result->loadSeconds, 0, 'f', 2)
                            .arg(result->layoutSeconds, 0, 'f', 3));
  log(QStringLiteral("Opened %1: %2 nodes, %3 edges, %4 layers; load %5 s, layout %6 s")
          .arg(result->path)
          .arg(nodes)
          .arg(result->layout->edges.size())
          .arg(result->layout->layerCount)
          .arg(result->loadSeconds, 0, 'f', 3)
          .arg(result->layoutSeconds, 0, 'f', 3));
  if (QFileInfo(result->path).isFile()) addRecentFile(result->path);
  m_view->setFocus();
  updateActions();
  if (!m_pendingProject) m_savedKey = projectKey(currentProject());
  emit modelShown(result->path);
  applyPendingProject();
}

void MainWindow::onFailed(const QString& path, const QString& message) {
  m_pendingProject.reset();
  m_restoring = false;
  m_progress->hide();
  m_statusStage->clear();
  log(QStringLiteral("Error: ") + message);
  if (m_errorDialogs) {
    auto* box = new QMessageBox(QMessageBox::Warning, QStringLiteral("Cannot open model"),
                                QStringLiteral("Cannot open %1").arg(QFileInfo(path).fileName()), QMessageBox::Ok,
                                this);
    box->setInformativeText(message);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();  // window-modal, does not block the event loop
  }
  emit openFailed(message);
}

void MainWindow::log(const QString& line) {
  m_log->appendPlainText(QDateTime::currentDateTime().toString(QStringLiteral("HH:mm:ss  ")) + line);
}

void MainWindow::selectNode(NodeId node) {
  if (!m_current || node < 0 || (size_t)node >= m_current->layout->itemOfNode.size()) return;
  selectItem(m_current->layout->itemOfNode[(size_t)node]);
}

void MainWindow::selectItem(int item, bool centerInView) {
  if (m_syncing) return;
  m_syncing = true;
  const GraphLayout* layout = m_current ? m_current->layout.get() : nullptr;
  if (!layout || item >= (int)layout->items.size()) item = -1;
  if (m_view->selectedItem() != item || centerInView) m_view->setSelectedItem(item, centerInView);
  // The table row of a node; boxes of graph inputs and outputs have none.
  QModelIndex proxyIndex;
  if (item >= 0 && layout->items[(size_t)item].kind == LayoutItem::Kind::Node) {
    const int row = m_tableModel->rowOfNode(layout->items[(size_t)item].id);
    proxyIndex = m_proxy->mapFromSource(m_tableModel->index(row, NodeTableModel::NameColumn));
  }
  if (proxyIndex.isValid()) {
    m_table->selectionModel()->setCurrentIndex(proxyIndex, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    m_table->scrollTo(proxyIndex);
  } else {
    m_table->selectionModel()->clearSelection();
    m_table->selectionModel()->setCurrentIndex(QModelIndex(), QItemSelectionModel::NoUpdate);
  }
  showInspectorFor(item);
  m_plots->setSelectedNode(item >= 0 && layout->items[(size_t)item].kind == LayoutItem::Kind::Node ? layout->items[(size_t)item].id : -1);
  m_syncing = false;
}

void MainWindow::onTableCurrentChanged(const QModelIndex& current) {
  if (m_syncing || !current.isValid() || !m_current) return;
  const NodeId node = current.data(NodeTableModel::NodeIdRole).toInt();
  m_syncing = true;
  const int item = m_current->layout->itemOfNode[(size_t)node];
  m_view->setSelectedItem(item, true);
  showInspectorFor(item);
  m_plots->setSelectedNode(node);
  m_syncing = false;
}

void MainWindow::showInspectorFor(int item) {
  if (!m_current) {
    m_inspectorModel->setEntries({});
    return;
  }
  const Model& model = *m_current->model;
  const std::shared_ptr<const AnalysisResult> result = m_analysis->result();
  if (item < 0) {
    std::vector<PropertyEntry> entries = modelSummary(model, *m_current->info);
    if (result) {
      auto a = analysisSummary(model, *result);
      entries.insert(entries.begin() + std::min<size_t>(1, entries.size()), a.begin(), a.end());
    }
    m_inspectorModel->setEntries(entries);
    m_inspectorDock->setWindowTitle(QStringLiteral("Inspector — model"));
  } else {
    const LayoutItem& it = m_current->layout->items[(size_t)item];
    if (it.kind == LayoutItem::Kind::Node) {
      std::vector<PropertyEntry> entries = nodeProperties(model, it.id);
      if (result) {
        // Quantization first after the node's identity: it is what one looks at with results.
        auto q = quantizationProperties(model, *result, it.id);
        entries.insert(entries.begin() + std::min<size_t>(1, entries.size()), q.begin(), q.end());
      }
      m_inspectorModel->setEntries(entries);
      m_inspectorDock->setWindowTitle(QStringLiteral("Inspector — %1").arg(QString::fromStdString(model.graph.nodes[(size_t)it.id].opType)));
    } else {
      m_inspectorModel->setEntries(valueProperties(model, it.id));
      m_inspectorDock->setWindowTitle(QStringLiteral("Inspector — tensor"));
    }
  }
  m_inspector->expandToDepth(0);
  // Weight statistics are what one looks for first: open them when there are few weights.
  const QModelIndex weights = m_inspectorModel->findKey(QStringLiteral("Weights"));
  if (weights.isValid() && m_inspectorModel->rowCount(weights) <= 3)
    for (int r = 0; r < m_inspectorModel->rowCount(weights); ++r) m_inspector->expand(m_inspectorModel->index(r, 0, weights));
  m_inspector->resizeColumnToContents(0);
  m_inspector->setColumnWidth(0, std::min(m_inspector->columnWidth(0) + 12, 220));
}

void MainWindow::showInTable(int item) {
  if (!m_current || item < 0) return;
  const LayoutItem& it = m_current->layout->items[(size_t)item];
  if (it.kind != LayoutItem::Kind::Node) return;
  m_tableDock->show();
  m_tableDock->raise();
  const QModelIndex src = m_tableModel->index(m_tableModel->rowOfNode(it.id), NodeTableModel::NameColumn);
  if (!m_proxy->mapFromSource(src).isValid()) m_filterEdit->clear();  // filtered out: show everything
  selectItem(item, false);
  m_table->setFocus();
}

void MainWindow::showSearch() {
  if (!m_current) return;
  m_searchBar->show();
  m_searchEdit->setFocus();
  m_searchEdit->selectAll();
}

void MainWindow::updateSearch(const QString& text) {
  m_matches = m_view->findItems(text);
  m_matchText = text;
  m_matchIndex = -1;
  if (text.isEmpty()) {
    m_searchCount->clear();
    m_searchEdit->setStyleSheet(QString());
    return;
  }
  findNext(text);
}

bool MainWindow::findNext(const QString& text, bool backwards) {
  if (!m_current) return false;
  m_searchBar->show();
  if (m_searchEdit->text() != text) m_searchEdit->setText(text);
  if (text != m_matchText || m_matchIndex < 0) {
    m_matches = m_view->findItems(text);
    m_matchText = text;
    m_matchIndex = -1;
  }
  const bool found = !m_matches.empty();
  m_searchEdit->setStyleSheet(found || text.isEmpty() ? QString() : QStringLiteral("QLineEdit { background: #fde2e1; }"));
  if (!found) {
    m_searchCount->setText(text.isEmpty() ? QString() : QStringLiteral("No matches"));
    m_matchIndex = -1;
    return false;
  }
  const int n = (int)m_matches.size();
  m_matchIndex = m_matchIndex < 0 ? (backwards ? n - 1 : 0) : (m_matchIndex + (backwards ? n - 1 : 1)) % n;
  m_searchCount->setText(QStringLiteral("%1 of %2").arg(m_matchIndex + 1).arg(n));
  selectItem(m_matches[(size_t)m_matchIndex], true);
  return true;
}

QStringList MainWindow::recentFiles() const {
  QStringList files = QSettings().value(QLatin1String(kRecentKey)).toStringList();
  files.erase(std::remove_if(files.begin(), files.end(), [](const QString& f) { return !QFileInfo(f).isFile(); }),
              files.end());
  return files;
}

void MainWindow::addRecentFile(const QString& path) {
  QStringList files = QSettings().value(QLatin1String(kRecentKey)).toStringList();
  files.removeAll(path);
  files.prepend(path);
  while (files.size() > kMaxRecentFiles) files.removeLast();
  QSettings().setValue(QLatin1String(kRecentKey), files);
  m_startPage->setRecentFiles(recentFiles());
}

void MainWindow::rebuildRecentMenu() {
  m_recentMenu->clear();
  const QStringList files = recentFiles();
  for (int i = 0; i < files.size(); ++i) {
    const QString path = files[i];
    QAction* a = m_recentMenu->addAction(QStringLiteral("&%1  %2").arg((i + 1) % 10).arg(QFileInfo(path).fileName()),
                                         this, [this, path] { openFile(path); });
    a->setToolTip(path);
    a->setStatusTip(path);
  }
  if (files.isEmpty()) m_recentMenu->addAction(QStringLiteral("(none)"))->setEnabled(false);
  else {
    m_recentMenu->addSeparator();
    m_recentMenu->addAction(QStringLiteral("Clear list"), this, [this] {
      QSettings().remove(QLatin1String(kRecentKey));
      m_startPage->setRecentFiles({});
    });
  }
}

void MainWindow::closeEvent(QCloseEvent* event) {
  // The clean-close path: nothing to restore at the next start.
  releaseAutosave();
  m_autosaveStopped = true;
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  if (m_docksShown) settings.setValue(QStringLiteral("window/state"), saveState());
  m_loader->cancel();
  m_analysis->cancel();
  QMainWindow::closeEvent(event);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  const auto urls = event->mimeData()->urls();
  if (std::any_of(urls.begin(), urls.end(), isOnnxUrl)) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  for (const QUrl& url : event->mimeData()->urls())
    if (isOnnxUrl(url)) {
      openFile(url.toLocalFile());
      event->acceptProposedAction();
      return;
    }
}


// ---- Analysis ------------------------------------------------------------------------------

void MainWindow::buildAnalysisUi() {
  // Toolbar: calibrate, colouring, undo/redo, fallback, export.
  QToolBar* tb = addToolBar(QStringLiteral("Analysis"));
  tb->setObjectName(QStringLiteral("analysisToolBar"));
  tb->setMovable(false);
  tb->setToolButtonStyle(Qt::ToolButtonTextOnly);
  tb->addAction(m_calibrateAction);
  tb->addSeparator();
  tb->addWidget(new QLabel(QStringLiteral("  Colour by "), tb));
  m_colourCombo = new QComboBox(tb);
  m_colourCombo->addItems({QStringLiteral("Op type"), QStringLiteral("Graph-wise SNR"), QStringLiteral("Layer-wise SNR"),
                           QStringLiteral("Sensitivity")});
  m_colourCombo->setCurrentIndex(1);
  m_colourCombo->setToolTip(QStringLiteral("Graph-wise: every enabled point on (accumulated error). Layer-wise: the node alone "
                                           "with float inputs. Sensitivity: graph outputs with only this node quantized."));
  connect(m_colourCombo, &QComboBox::currentIndexChanged, this,
          [this](int i) { m_view->setColouring((GraphView::Colouring)i); });
  m_view->setColouring(GraphView::Colouring::GraphwiseSnr);
  tb->addWidget(m_colourCombo);
  tb->addSeparator();
  QAction* undo = m_undo->createUndoAction(tb, QStringLiteral("Undo"));
  QAction* redo = m_undo->createRedoAction(tb, QStringLiteral("Redo"));
  tb->addAction(undo);
  tb->addAction(redo);
  tb->addSeparator();
  tb->addAction(m_fallbackAction);
  tb->addAction(m_exportAction);

  m_cancelAnalysis = new QToolButton(this);
  m_cancelAnalysis->setText(QStringLiteral("Cancel"));
  m_cancelAnalysis->setAutoRaise(true);
  m_cancelAnalysis->hide();
  connect(m_cancelAnalysis, &QToolButton::clicked, m_analysis, &AnalysisController::cancel);
  statusBar()->insertPermanentWidget(2, m_cancelAnalysis);

  connect(m_analysis, &AnalysisController::resultChanged, this, &MainWindow::onResultChanged);
  connect(m_analysis, &AnalysisController::jobStarted, this, &MainWindow::onAnalysisStarted);
  connect(m_analysis, &AnalysisController::progress, this, &MainWindow::onAnalysisProgress);
  connect(m_analysis, &AnalysisController::idle, this, &MainWindow::onAnalysisEnded);
  connect(m_analysis, &AnalysisController::fallbackFinished, this, &MainWindow::onFallbackFinished);
  connect(m_analysis, &AnalysisController::calibrated, this, [this] {
    const CalibrationRequest& r = m_analysis->request();
    log(QStringLiteral("Calibrated on %1 (%2 samples, %3, %4) in %5 s; worst output SNR %6 dB")
            .arg(m_analysis->data() ? QString::fromStdString(m_analysis->data()->description()) : QString())
            .arg(m_analysis->result()->samples)
            .arg(QString::fromStdString(calibMethodName(r.calibration.method)), QString::fromStdString(quantModeName(r.calibration.mode)))
            .arg(m_analysis->lastJobSeconds(), 0, 'f', 2)
            .arg(m_analysis->result()->worstOutputSnrDb(), 0, 'f', 2));
    for (const std::string& w : m_analysis->warnings()) log(QStringLiteral("Warning: ") + QString::fromStdString(w));
  });
  connect(m_analysis, &AnalysisController::failed, this, [this](AnalysisController::Job, const QString& message) {
    log(QStringLiteral("Error: ") + message);
    onAnalysisEnded();
  });
  connect(m_analysis, &AnalysisController::cancelled, this, [this](AnalysisController::Job job) {
    log(job == AnalysisController::Job::Calibrate ? QStringLiteral("Calibration cancelled; the previous results are kept")
                                                  : QStringLiteral("Analysis cancelled; the previous results are kept"));
    refreshUnapplied();
    onAnalysisEnded();
  });

  connect(m_tableModel, &NodeTableModel::quantizeRequested, this, [this](NodeId id, bool on) {
    const QString name = QString::fromStdString(m_current->model->graph.nodes[(size_t)id].name);
    requestQuantized({{id, on}}, (on ? QStringLiteral("Quantize %1") : QStringLiteral("Exclude %1")).arg(name));
  });
  connect(m_view, &GraphView::quantizeRequested, this, [this](NodeId id, bool on) {
    const QString name = QString::fromStdString(m_current->model->graph.nodes[(size_t)id].name);
    requestQuantized({{id, on}}, (on ? QStringLiteral("Quantize %1") : QStringLiteral("Exclude %1")).arg(name));
  });
  connect(m_view, &GraphView::opTypeQuantizeRequested, this, [this](const QString& op, bool on) {
    auto result = m_analysis->result();
    if (!result || !m_current) return;
    std::vector<std::pair<NodeId, bool>> states;
    const std::string opType = op.toStdString();
    const Graph& g = m_current->model->graph;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].opType == opType && result->plan.nodes[i].quantizable && currentQuantized((NodeId)i) != on)
        states.emplace_back((NodeId)i, on);
    if (states.empty()) return;
    requestQuantized(states, (on ? QStringLiteral("Quantize every %1 node") : QStringLiteral("Exclude every %1 node")).arg(op));
  });
  connect(m_view, &GraphView::histogramRequested, this, [this](NodeId id) {
    m_plotsDock->show();
    m_plotsDock->raise();
    m_plots->tabs()->setCurrentIndex(PlotsPanel::HistogramTab);
    selectNode(id);
  });
  connect(m_plots, &PlotsPanel::nodeClicked, this, [this](NodeId id) { selectNode(id); });
  connect(m_plots, &PlotsPanel::thresholdChanged, this, [this] { m_view->setHighlightedNodes(m_plots->nodesBelowThreshold()); });
}

CalibrationDialog* MainWindow::calibrationDialog() {
  if (!m_calibDialog) {
    m_calibDialog = new CalibrationDialog(m_analysis, this);
    if (m_current) m_calibDialog->setModel(m_current->model.get());
    if (m_analysis->hasResult()) m_calibDialog->setRequest(m_analysis->request());
  }
  return m_calibDialog;
}

void MainWindow::showCalibrationDialog() {
  if (!m_current) return;
  CalibrationDialog* d = calibrationDialog();
  d->show();
  d->raise();
  d->activateWindow();
}

bool MainWindow::currentQuantized(NodeId id) const {
  const auto& requested = m_analysis->requestedStates();
  auto it = requested.find(id);
  if (it != requested.end()) return it->second;
  auto r = m_analysis->result();
  return r && r->plan.nodes[(size_t)id].quantized;
}

void MainWindow::requestQuantized(const std::vector<std::pair<NodeId, bool>>& states, const QString& text) {
  if (!m_analysis->hasResult() || states.empty()) return;
  std::vector<std::pair<NodeId, bool>> before;
  for (auto [id, on] : states) before.emplace_back(id, currentQuantized(id));
  auto apply = [this](const std::vector<std::pair<NodeId, bool>>& s) {
    m_toggleStartMs = nowMs();
    m_analysis->requestStates(s);
    refreshUnapplied();
  };
  m_undo->push(new ToggleCommand(apply, states, before, text, false));
}

void MainWindow::refreshUnapplied() { m_tableModel->setUnappliedStates(m_analysis->unappliedStates()); }

void MainWindow::onResultChanged(const std::shared_ptr<const AnalysisResult>& result) {
  const bool had = m_tableModel->result() != nullptr;
  m_tableModel->setResult(result);
  refreshUnapplied();
  m_view->setAnalysis(result);
  m_plots->setAnalysis(m_current ? m_current->model : nullptr, result, m_analysis->session(), m_analysis->data());
  m_view->setHighlightedNodes(result ? m_plots->nodesBelowThreshold() : std::vector<char>());
  if (result && !had) {
    for (int c = NodeTableModel::FirstAnalysisColumn; c <= NodeTableModel::LastAnalysisColumn; ++c) {
      m_table->setColumnHidden(c, false);
      m_table->resizeColumnToContents(c);
    }
    m_table->setColumnWidth(NodeTableModel::QuantizedColumn, std::max(m_table->columnWidth(NodeTableModel::QuantizedColumn), 70));
  }
  if (m_current) showInspectorFor(m_view->selectedItem());
  if (result) {
    size_t quantized = 0, quantizable = 0;
    for (const NodeQuantState& st : result->plan.nodes) {
      quantized += st.quantized;
      quantizable += st.quantizable;
    }
    m_statusInfo->setText(QStringLiteral("%1 nodes · %2 of %3 quantizable nodes quantized · worst output SNR %4 dB · %5 samples")
                              .arg(m_current ? m_current->model->graph.nodes.size() : 0)
                              .arg(quantized)
                              .arg(quantizable)
                              .arg(result->worstOutputSnrDb(), 0, 'f', 2)
                              .arg(result->samples));
  }
  if (result && m_toggleStartMs >= 0 && m_analysis->unappliedStates().empty()) {
    m_lastToggleMs = nowMs() - m_toggleStartMs;
    m_toggleStartMs = -1;
    log(QStringLiteral("Re-analysed in %1 ms (toggle to table and graph; worker %2 ms); worst output SNR %3 dB")
            .arg(m_lastToggleMs, 0, 'f', 0)
            .arg(m_analysis->lastJobSeconds() * 1000, 0, 'f', 0)
            .arg(result->worstOutputSnrDb(), 0, 'f', 2));
  }
  updateActions();
  if (result && m_analysis->unappliedStates().empty()) autosaveNow();
  if (result) emit analysisShown();
}

void MainWindow::onAnalysisStarted(AnalysisController::Job job) {
  static const char* const names[] = {"", "Calibrating", "Re-analysing", "Auto-fallback"};
  m_statusStage->setText(QLatin1String(names[(int)job]));
  m_progress->setRange(0, 100);
  m_progress->setValue(0);
  m_progress->show();
  m_cancelAnalysis->show();
  updateActions();
}

void MainWindow::onAnalysisProgress(int percent, const QString& stage) {
  m_progress->setValue(percent);
  QString s = stage;
  if (!s.isEmpty()) s[0] = s[0].toUpper();
  m_statusStage->setText(s);
}

void MainWindow::onAnalysisEnded() {
  if (m_analysis->isBusy()) return;
  autosaveNow();  // after an auto-fallback, whose exclusions become requested states only now
  if (!m_loader->isBusy()) {
    m_progress->hide();
    m_statusStage->clear();
  }
  m_cancelAnalysis->hide();
  updateActions();
}

void MainWindow::updateActions() {
  const bool model = (bool)m_current;
  const bool idle = !m_analysis->isBusy();
  const bool result = m_analysis->hasResult();
  if (m_calibrateAction) m_calibrateAction->setEnabled(model);
  if (m_fallbackAction) m_fallbackAction->setEnabled(result && idle);
  if (m_exportAction) m_exportAction->setEnabled(result && idle && m_current && QFileInfo(m_current->path).isFile());
  if (m_saveProjectAction) m_saveProjectAction->setEnabled(model && QFileInfo(m_current->path).isFile());
  if (m_saveProjectAsAction) m_saveProjectAsAction->setEnabled(model && QFileInfo(m_current->path).isFile());
}

void MainWindow::showAutoFallback() {
  if (!m_analysis->hasResult() || m_analysis->isBusy()) return;
  bool ok = false;
  const double worst = m_analysis->result()->worstOutputSnrDb();
  const double target = QInputDialog::getDouble(
      this, QStringLiteral("Auto-fallback"),
      QStringLiteral("Exclude the most sensitive nodes, one at a time, until every graph output reaches this SNR (dB).\n"
                     "Worst output now: %1 dB.")
          .arg(worst, 0, 'f', 2),
      std::isfinite(worst) ? std::ceil(worst) + 5 : 30, -100, 300, 1, &ok);
  if (!ok) return;
  log(QStringLiteral("Auto-fallback to %1 dB").arg(target, 0, 'f', 1));
  m_analysis->autoFallback(target);
}

void MainWindow::onFallbackFinished(const std::vector<FallbackStep>& steps, bool reached) {
  const Graph& g = m_current->model->graph;
  std::vector<std::pair<NodeId, bool>> after, before;
  for (const FallbackStep& s : steps) {
    after.emplace_back(s.excluded, false);
    before.emplace_back(s.excluded, true);
  }
  if (!steps.empty())
    m_undo->push(new ToggleCommand(
        [this](const std::vector<std::pair<NodeId, bool>>& s) {
          m_toggleStartMs = nowMs();
          m_analysis->requestStates(s);
          refreshUnapplied();
        },
        after, before, QStringLiteral("Auto-fallback (%1 nodes)").arg(steps.size()), true));
  const double worst = m_analysis->result()->worstOutputSnrDb();
  log(QStringLiteral("Auto-fallback excluded %1 node(s); worst output SNR %2 dB%3")
          .arg(steps.size())
          .arg(worst, 0, 'f', 2)
          .arg(reached ? QString() : QStringLiteral(" (target not reached)")));
  if (!m_errorDialogs) return;
  auto* dialog = new QDialog(this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(QStringLiteral("Auto-fallback"));
  auto* layout = new QVBoxLayout(dialog);
  auto* label = new QLabel(reached ? QStringLiteral("Target reached after excluding %1 node(s). Worst output: %2 dB.").arg(steps.size()).arg(worst, 0, 'f', 2)
                                   : QStringLiteral("Target not reached: %1 node(s) excluded, worst output %2 dB.").arg(steps.size()).arg(worst, 0, 'f', 2),
                           dialog);
  layout->addWidget(label);
  auto* list = new QTreeWidget(dialog);
  list->setHeaderLabels({QStringLiteral("Step"), QStringLiteral("Excluded node"), QStringLiteral("Op"), QStringLiteral("Worst output SNR after (dB)")});
  list->setRootIsDecorated(false);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Node& n = g.nodes[(size_t)steps[i].excluded];
    double w = std::numeric_limits<double>::infinity();
    for (double v : steps[i].outputSnrDb) w = std::min(w, v);
    auto* item = new QTreeWidgetItem(list, {QString::number(i + 1), QString::fromStdString(n.name), QString::fromStdString(n.opType),
                                            QString::number(w, 'f', 2)});
    item->setData(0, Qt::UserRole, steps[i].excluded);
  }
  for (int c = 0; c < 4; ++c) list->resizeColumnToContents(c);
  connect(list, &QTreeWidget::itemActivated, this, [this](QTreeWidgetItem* item) { selectNode(item->data(0, Qt::UserRole).toInt()); });
  layout->addWidget(list);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
  connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::close);
  layout->addWidget(buttons);
  dialog->resize(560, 380);
  dialog->open();
}

void MainWindow::showExportDialog() {
  if (!m_analysis->hasResult() || !m_current) return;
  ExportInput in;
  in.modelPath = m_current->path.toStdString();
  in.model = m_current->model;
  in.result = m_analysis->result();
  in.session = m_analysis->session();
  in.data = m_analysis->data();
  for (auto [id, on] : m_analysis->requestedStates())
    if (!on) in.config.nodesToExclude.push_back(m_current->model->graph.nodes[(size_t)id].name + "$");
  auto* dialog = new ExportDialog(in, this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &ExportDialog::exported, this, [this](const QStringList& files) { log(QStringLiteral("Exported %1").arg(files.join(QStringLiteral(", ")))); });
  connect(dialog, &ExportDialog::exportFailed, this, [this](const QString& m) { log(QStringLiteral("Error: ") + m); });
  dialog->open();
}

// ---- Projects ------------------------------------------------------------------------------

Project MainWindow::currentProject() const {
  Project p;
  if (!m_current) return p;
  p.modelPath = QFileInfo(m_current->path).absoluteFilePath();
  p.calibration = m_analysis->hasResult() ? m_analysis->request()
                                          : (m_calibDialog ? m_calibDialog->request() : CalibrationRequest{});
  p.calibrated = m_analysis->hasResult();
  const Graph& g = m_current->model->graph;
  for (auto [id, on] : m_analysis->requestedStates())
    (on ? p.quantizedNodes : p.excludedNodes) << QString::fromStdString(g.nodes[(size_t)id].name);
  p.colouring = QLatin1String(kColouringKeys[m_colourCombo->currentIndex()]);
  p.thresholdDb = m_plots->threshold();
  return p;
}

bool MainWindow::saveProject(const QString& path) {
  QString error;
  if (!m_current || !qs::ui::saveProject(currentProject(), path, error)) {
    log(QStringLiteral("Error: ") + (error.isEmpty() ? QStringLiteral("no model open") : error));
    if (m_errorDialogs && !error.isEmpty()) QMessageBox::warning(this, QStringLiteral("Cannot save project"), error);
    return false;
  }
  m_projectPath = path;
  m_savedKey = projectKey(currentProject());
  releaseAutosave();  // the project file holds the session now
  addRecentFile(QFileInfo(path).absoluteFilePath());
  log(QStringLiteral("Saved project %1").arg(path));
  return true;
}

void MainWindow::saveProjectAs() {
  if (!m_current) return;
  QString suggestion = m_projectPath;
  if (suggestion.isEmpty()) suggestion = QFileInfo(m_current->path).absoluteDir().filePath(QFileInfo(m_current->path).completeBaseName() + QStringLiteral(".qsproj"));
  const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save project"), suggestion,
                                                    QStringLiteral("Quantscope projects (*.qsproj)"));
  if (!path.isEmpty()) saveProject(path.endsWith(QStringLiteral(".qsproj")) ? path : path + QStringLiteral(".qsproj"));
}

void MainWindow::openProjectDialog() {
  QSettings settings;
  const QString dir = settings.value(QStringLiteral("lastOpenDir"), QDir::homePath()).toString();
  const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open project"), dir,
                                                    QStringLiteral("Quantscope projects (*.qsproj);;All files (*)"));
  if (!path.isEmpty()) openProject(path);
}

bool MainWindow::openProject(const QString& path) {
  Project p;
  QString error;
  if (!loadProject(path, p, error)) {
    onFailed(path, error);
    return false;
  }
  log(QStringLiteral("Opening project %1").arg(path));
  m_restoring = false;
  if (!startProject(p, QFileInfo(path).absoluteFilePath())) return false;
  addRecentFile(m_projectPath);
  return true;
}

bool MainWindow::startProject(const Project& p, const QString& projectPath) {
  m_pendingProject = p;
  m_projectPath = projectPath;
  return m_loader->open(p.modelPath);
}

void MainWindow::applyPendingProject() {
  if (!m_pendingProject || !m_current) return;
  const Project p = *m_pendingProject;
  m_pendingProject.reset();
  const Graph& g = m_current->model->graph;
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
  if (!missing.isEmpty()) log(QStringLiteral("Warning: the project names nodes this model lacks: %1").arg(missing.join(QStringLiteral(", "))));
  m_analysis->setRequestedStates(states);
  for (int i = 0; i < 4; ++i)
    if (p.colouring == QLatin1String(kColouringKeys[i])) m_colourCombo->setCurrentIndex(i);
  m_plots->setThreshold(p.thresholdDb);
  calibrationDialog()->setRequest(p.calibration);
  if (p.calibrated) m_analysis->calibrate(p.calibration);
  const QString title = m_projectPath.isEmpty() ? QFileInfo(p.modelPath).fileName() : QFileInfo(m_projectPath).fileName();
  setWindowTitle(QStringLiteral("%1%2 — Quantscope").arg(title, m_restoring ? QStringLiteral(" (restored)") : QString()));
  if (m_restoring) {
    // Nothing of the restored session is in a project file: it stays in the autosave (taken over
    // from the crashed session) until it is saved or the window closes cleanly.
    m_restoring = false;
    m_savedKey.clear();
    m_autosavedKey = projectKey(p);
    log(QStringLiteral("Restored the autosaved session%1").arg(p.calibrated ? QStringLiteral("; calibrating again") : QString()));
  } else {
    Project saved = currentProject();
    saved.calibrated = p.calibrated;
    if (p.calibrated) saved.calibration = p.calibration;
    m_savedKey = projectKey(saved);
  }
}

// ---- Autosave ------------------------------------------------------------------------------

QString MainWindow::defaultAutosaveDirectory() {
  if (qEnvironmentVariableIsSet("QS_AUTOSAVE_DIR")) return qEnvironmentVariable("QS_AUTOSAVE_DIR");
  const QString base = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
  return base.isEmpty() ? QString() : base + QStringLiteral("/autosave");
}

void MainWindow::setAutosaveDirectory(const QString& dir) {
  if (dir == m_autosaveDir) return;
  releaseAutosave();
  m_autosaveDir = dir;
}

// The project without what does not change its meaning (the order of the node lists), as bytes.
QByteArray MainWindow::projectKey(Project p) const {
  p.excludedNodes.sort();
  p.quantizedNodes.sort();
  return projectToJson(p, QStringLiteral("/key.qsproj"));
}

bool MainWindow::hasUnsavedChanges() const { return m_current && projectKey(currentProject()) != m_savedKey; }

bool MainWindow::claimAutosaveFile() {
  if (!m_autosaveFile.isEmpty()) return true;
  if (m_autosaveDir.isEmpty() || !QDir().mkpath(m_autosaveDir)) return false;
  static int serial = 0;  // several windows in one process (tests) get one file each
  for (int attempt = 0; attempt < 100; ++attempt) {
    const QString file = QDir(m_autosaveDir).filePath(
        QStringLiteral("autosave-%1-%2.qsproj").arg(QCoreApplication::applicationPid()).arg(++serial));
    auto lock = autosaveLock(file);
    // An existing file with a free lock was left by a dead session with our pid: keep it for a restore.
    if (!lock || QFileInfo::exists(file)) continue;
    m_autosaveFile = file;
    m_autosaveLock = std::move(lock);
    return true;
  }
  return false;
}

void MainWindow::releaseAutosave() {
  if (!m_autosaveFile.isEmpty()) QFile::remove(m_autosaveFile);
  m_autosaveFile.clear();
  m_autosaveLock.reset();  // unlocks: removes the lock file
  m_autosavedKey.clear();
}

bool MainWindow::autosaveNow() {
  if (m_autosaveStopped || m_autosaveDir.isEmpty() || !m_current || m_pendingProject || !QFileInfo(m_current->path).isFile())
    return false;
  // A calibration in flight is not in the results yet; the autosave keeps the state before it.
  if (m_analysis->job() == AnalysisController::Job::Calibrate) return false;
  const Project p = currentProject();
  const QByteArray key = projectKey(p);
  if (key == m_savedKey) {
    if (!m_autosaveFile.isEmpty()) releaseAutosave();  // back to the saved state (undo)
    return false;
  }
  if (key == m_autosavedKey && !m_autosaveFile.isEmpty()) return false;
  if (!claimAutosaveFile()) {
    log(QStringLiteral("Warning: cannot autosave in %1").arg(m_autosaveDir));
    m_autosaveStopped = true;  // one line, not one per toggle; the next model tries again
    return false;
  }
  // The project, plus where the session came from, so that a restore saves back there.
  Project autosave = p;
  autosave.autosaveOf = m_projectPath;
  autosave.autosavedAt = QDateTime::currentDateTime();
  QString error;
  if (!qs::ui::saveProject(autosave, m_autosaveFile, error)) {
    log(QStringLiteral("Warning: cannot autosave (%1)").arg(error));
    return false;
  }
  m_autosavedKey = key;
  return true;
}

QString MainWindow::findOrphanedAutosave() const { return orphanedAutosave(m_autosaveDir, m_autosaveFile).first; }

bool MainWindow::offerAutosaveRestore(RestoreChoice choice) {
  auto [file, lock] = orphanedAutosave(m_autosaveDir, m_autosaveFile);
  if (file.isEmpty()) return false;
  Project p;
  QString error;
  if (!loadProject(file, p, error)) {
    log(QStringLiteral("Warning: the autosave %1 cannot be restored (%2); deleted").arg(file, error));
    QFile::remove(file);
    return false;
  }
  const QString projectPath = p.autosaveOf;
  const QDateTime savedAt = p.autosavedAt;
  if (choice == RestoreChoice::Ask) {
    QMessageBox box(QMessageBox::Question, QStringLiteral("Restore session"),
                    QStringLiteral("Quantscope did not close cleanly. Restore the session autosaved %1?")
                        .arg(savedAt.isValid() ? savedAt.toString(QStringLiteral("'on' yyyy-MM-dd 'at' HH:mm")) : QString()),
                    QMessageBox::NoButton, this);
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
    choice = box.clickedButton() == restore ? RestoreChoice::Restore
             : box.clickedButton() == discard ? RestoreChoice::Discard
                                              : RestoreChoice::Keep;
  }
  if (choice == RestoreChoice::Keep) return false;  // the lock goes, the file stays for the next start
  if (choice == RestoreChoice::Discard) {
    QFile::remove(file);
    log(QStringLiteral("Discarded the autosaved session %1").arg(file));
    return false;
  }
  releaseAutosave();
  m_autosaveFile = file;
  m_autosaveLock = std::move(lock);
  m_autosaveStopped = false;
  m_restoring = true;
  log(QStringLiteral("Restoring the session autosaved in %1").arg(file));
  return startProject(p, projectPath);
}

}  // namespace qs::ui
