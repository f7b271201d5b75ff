#include "ui/main_window.h"

#include <QAction>
#include <QCloseEvent>
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTableView>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

#include "qs_version.h"
#include "ui/analysis_actions.h"
#include "ui/fallback_curve_plot.h"
#include "ui/app_icon.h"
#include "ui/autosave.h"
#include "ui/graph_view.h"
#include "ui/int4_run.h"
#include "ui/node_properties.h"
#include "ui/node_table_model.h"
#include "ui/plots_panel.h"
#include "ui/remedy_notes.h"
#include "ui/remedy_view.h"
#include "ui/project_controller.h"
#include "ui/property_tree_model.h"
#include "ui/quant_properties.h"
#include "ui/realisation_text.h"
#include "ui/search_bar.h"
#include "ui/start_page.h"

namespace qs::ui {

namespace {

constexpr int kMaxRecentFiles = 10;
const char* const kRecentKey = "recentFiles";
const char* const kSampleModelName = "ch_PP-OCRv4_det_infer.onnx";

bool isOnnxUrl(const QUrl& url) {
  return url.isLocalFile() && (url.toLocalFile().endsWith(QStringLiteral(".onnx"), Qt::CaseInsensitive) ||
                               url.toLocalFile().endsWith(QStringLiteral(".qsproj"), Qt::CaseInsensitive));
}

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
  m_loader->setObjectName(QStringLiteral("modelLoader"));
  connect(m_loader, &ModelLoader::started, this, &MainWindow::onStarted);
  connect(m_loader, &ModelLoader::progress, this, &MainWindow::onProgress);
  connect(m_loader, &ModelLoader::loaded, this, &MainWindow::onLoaded);
  connect(m_loader, &ModelLoader::failed, this, &MainWindow::onFailed);

  buildCentre();
  m_analysis = new AnalysisController(this);
  m_analysis->setObjectName(QStringLiteral("analysis"));
  buildDocks();
  m_actions = new AnalysisActions(this, m_analysis);
  m_autosave = new Autosave(this);
  m_projects = new ProjectController(this, m_loader, m_actions, m_plots, m_autosave);
  connect(m_projects, &ProjectController::failed, this, &MainWindow::onFailed);
  connect(m_projects, &ProjectController::used, this, &MainWindow::addRecentFile);
  buildActions();
  buildStatusBar();
  connectAnalysis();
  m_startPage->setRecentFiles(recentFiles());

  resize(1440, 900);
  QSettings settings;
  restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  // The docks have nothing to show until a model is open: the start page gets the whole window,
  // and the saved dock layout comes back with the first model.
  m_savedState = settings.value(QStringLiteral("window/state")).toByteArray();
  for (QDockWidget* d : {m_inspectorDock, m_tableDock, m_plotsDock, m_logDock}) d->hide();
  updateActions();
}

// No clean-close path here: a window destroyed without closeEvent (a crash, as far as the autosave
// is concerned) leaves its autosave; the lock goes, as it would with the process.
MainWindow::~MainWindow() = default;

void MainWindow::buildCentre() {
  // The start page, or the graph with its search bar.
  m_stack = new QStackedWidget(this);
  m_startPage = new StartPage(m_stack);
  m_startPage->setObjectName(QStringLiteral("startPage"));
  m_startPage->setSampleModel(sampleModelPath());
  connect(m_startPage, &StartPage::openDialogRequested, this, &MainWindow::showOpenDialog);
  connect(m_startPage, &StartPage::openRequested, this, &MainWindow::openFile);
  m_stack->addWidget(m_startPage);

  m_graphPage = new QWidget(m_stack);
  auto* gl = new QVBoxLayout(m_graphPage);
  gl->setContentsMargins(0, 0, 0, 0);
  gl->setSpacing(0);
  m_view = new GraphView(m_graphPage);
  m_view->setObjectName(QStringLiteral("graphView"));
  m_search = new SearchBar(m_view, m_graphPage);
  m_search->hide();
  connect(m_search, &SearchBar::matchSelected, this, [this](int item) { selectItem(item, true); });
  gl->addWidget(m_search);
  gl->addWidget(m_view, 1);
  m_stack->addWidget(m_graphPage);
  setCentralWidget(m_stack);
  LayoutOptions layoutOptions = m_view->layoutOptions();
  layoutOptions.groupAbove = kDefaultGroupAbove;  // large models open grouped (group_layout.h)
  m_loader->setLayoutOptions(layoutOptions);

  connect(m_view, &GraphView::itemSelected, this, [this](int item) { selectItem(item, false); });
  connect(m_view, &GraphView::showInTableRequested, this, &MainWindow::showInTable);
}

void MainWindow::showDocks() {
  if (m_docksShown) return;
  m_docksShown = true;
  if (m_savedState.isEmpty() || !restoreState(m_savedState)) {
    for (QDockWidget* d : {m_inspectorDock, m_tableDock, m_plotsDock, m_logDock}) d->show();
    m_tableDock->raise();
  }
}

void MainWindow::buildDocks() {
  // Inspector.
  m_inspectorDock = new QDockWidget(QStringLiteral("Inspector"), this);
  m_inspectorDock->setObjectName(QStringLiteral("inspectorDock"));
  m_inspectorModel = new PropertyTreeModel(this);
  m_inspectorModel->setObjectName(QStringLiteral("inspectorModel"));
  m_inspector = new QTreeView(m_inspectorDock);
  m_inspector->setObjectName(QStringLiteral("inspector"));
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
  m_filterEdit->setObjectName(QStringLiteral("nodeFilter"));
  m_filterEdit->setPlaceholderText(QStringLiteral("Filter by name or op (regular expression)"));
  m_filterEdit->setClearButtonEnabled(true);
  m_tableModel = new NodeTableModel(this);
  m_tableModel->setObjectName(QStringLiteral("nodeTableModel"));
  m_proxy = new NodeFilterProxyModel(this);
  m_proxy->setObjectName(QStringLiteral("nodeProxyModel"));
  m_proxy->setSourceModel(m_tableModel);
  m_table = new QTableView(tableBox);
  m_table->setObjectName(QStringLiteral("nodeTable"));
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
  for (int c = NodeTableModel::FirstRemedyColumn; c <= NodeTableModel::LastRemedyColumn; ++c) m_table->setColumnHidden(c, true);

  // Plots.
  m_plotsDock = new QDockWidget(QStringLiteral("Plots"), this);
  m_plotsDock->setObjectName(QStringLiteral("plotsDock"));
  m_plots = new PlotsPanel(m_plotsDock);
  m_plots->setObjectName(QStringLiteral("plotsPanel"));
  m_plotsDock->setWidget(m_plots);
  addDockWidget(Qt::BottomDockWidgetArea, m_plotsDock);

  // Log.
  m_logDock = new QDockWidget(QStringLiteral("Log"), this);
  m_logDock->setObjectName(QStringLiteral("logDock"));
  m_log = new QPlainTextEdit(m_logDock);
  m_log->setObjectName(QStringLiteral("log"));
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
  file->addAction(QStringLiteral("Open &Project…"), m_projects, &ProjectController::openDialog)
      ->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  m_saveProjectAction = file->addAction(QStringLiteral("&Save Project"), this, [this] {
    if (m_projects->path().isEmpty()) m_projects->saveAs();
    else m_projects->save(m_projects->path());
  });
  m_saveProjectAction->setShortcut(QKeySequence::Save);
  m_saveProjectAsAction = file->addAction(QStringLiteral("Save Project &As…"), m_projects, &ProjectController::saveAs);
  m_saveProjectAsAction->setShortcut(QKeySequence::SaveAs);
  file->addSeparator();
  file->addAction(m_actions->exportAction());
  file->addSeparator();
  QAction* quit = file->addAction(QStringLiteral("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* edit = menuBar()->addMenu(QStringLiteral("&Edit"));
  edit->addAction(m_actions->undoAction());
  edit->addAction(m_actions->redoAction());

  QMenu* view = menuBar()->addMenu(QStringLiteral("&View"));
  QAction* find = view->addAction(QStringLiteral("&Find…"), this, [this] {
    if (m_current) m_search->open();
  });
  find->setShortcut(QKeySequence::Find);
  QAction* fit = view->addAction(QStringLiteral("Fit to &Window"), m_view, &GraphView::fitToWindow);
  fit->setShortcut(QKeySequence(Qt::Key_F));
  fit->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  m_view->addAction(fit);  // F only while the graph has focus, so that typing elsewhere is not eaten
  QAction* zin = view->addAction(QStringLiteral("Zoom &In"), m_view, &GraphView::zoomIn);
  zin->setShortcuts({QKeySequence::ZoomIn, QKeySequence(Qt::CTRL | Qt::Key_Equal)});
  QAction* zout = view->addAction(QStringLiteral("Zoom &Out"), m_view, &GraphView::zoomOut);
  zout->setShortcut(QKeySequence::ZoomOut);
  QAction* actual = view->addAction(QStringLiteral("&Actual Size"), m_view, &GraphView::resetZoom);
  actual->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_0));
  m_goToWorst = view->addAction(QStringLiteral("Go to &Worst Node"), this, [this] { m_view->goToWorstNode(); });
  m_goToWorst->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_W));
  m_goToWorst->setToolTip(QStringLiteral("Select the node with the lowest graph-wise SNR, opening its groups"));
  view->addSeparator();
  for (QDockWidget* d : {m_inspectorDock, m_tableDock, m_plotsDock, m_logDock}) view->addAction(d->toggleViewAction());

  QMenu* analysis = menuBar()->addMenu(QStringLiteral("&Analysis"));
  analysis->addAction(m_actions->calibrateAction());
  analysis->addAction(m_actions->calibrationSettingsAction());
  analysis->addAction(m_actions->fallbackAction());
  analysis->addAction(m_actions->cancelAction());

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
  m_statusInfo->setObjectName(QStringLiteral("statusInfo"));
  m_statusZoom = new QLabel(this);
  m_statusZoom->setMinimumWidth(56);
  m_statusZoom->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
  m_statusCache = new QLabel(this);
  m_statusCache->setObjectName(QStringLiteral("toggleCacheLabel"));
  statusBar()->addWidget(m_statusInfo, 1);
  statusBar()->addWidget(m_statusCache);
  statusBar()->addPermanentWidget(m_statusStage);
  statusBar()->addPermanentWidget(m_progress);
  m_cancelAnalysis = new QToolButton(this);
  m_cancelAnalysis->setText(QStringLiteral("Cancel"));
  m_cancelAnalysis->setAutoRaise(true);
  m_cancelAnalysis->hide();
  connect(m_cancelAnalysis, &QToolButton::clicked, m_analysis, &AnalysisController::cancel);
  statusBar()->addPermanentWidget(m_cancelAnalysis);
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
    m_projects->open(path);
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
  m_actions->modelOpened(result->model.get());
  m_analysis->setModel(result->model);  // emits resultChanged(null): empties the analysis views
  m_view->setGraphLayout(result->layout);
  m_tableModel->setModel(result->model);
  for (int c = NodeTableModel::FirstAnalysisColumn; c <= NodeTableModel::LastAnalysisColumn; ++c) m_table->setColumnHidden(c, true);
  m_table->resizeColumnsToContents();
  for (int c : {NodeTableModel::InputsColumn, NodeTableModel::OutputsColumn})
    m_table->setColumnWidth(c, std::min(m_table->columnWidth(c), 260));
  m_search->reset();
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
  m_projects->modelOpened();
  emit modelShown(result->path);
  m_projects->applyPending();
}

void MainWindow::onFailed(const QString& path, const QString& message) {
  m_projects->openFailed();
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
  const GraphLayout* layout = m_current ? m_view->graphLayout().get() : nullptr;
  if (!layout || node < 0 || (size_t)node >= layout->itemOfNode.size()) return;
  selectItem(m_view->revealNode(node));
}

void MainWindow::selectItem(int item, bool centerInView) {
  if (m_syncing) return;
  m_syncing = true;
  // The view's layout: it has the items of expanded subgraphs (main-graph items keep their indices).
  const GraphLayout* layout = m_current ? m_view->graphLayout().get() : nullptr;
  if (!layout || item >= (int)layout->items.size()) item = -1;
  // Nodes inside subgraphs have no table row, no analysis and no plots.
  const bool mainNode = item >= 0 && layout->items[(size_t)item].kind == LayoutItem::Kind::Node &&
                        layout->items[(size_t)item].frame < 0;
  if (m_view->selectedItem() != item || centerInView) m_view->setSelectedItem(item, centerInView);
  // The table row of a node; boxes of graph inputs and outputs have none.
  QModelIndex proxyIndex;
  if (mainNode) {
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
  m_plots->setSelectedNode(mainNode ? layout->items[(size_t)item].id : -1);
  m_syncing = false;
}

void MainWindow::onTableCurrentChanged(const QModelIndex& current) {
  if (m_syncing || !current.isValid() || !m_current) return;
  const NodeId node = current.data(NodeTableModel::NodeIdRole).toInt();
  m_syncing = true;
  const int item = m_view->revealNode(node);  // opens the groups that hide it
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
      // An INT4 run's own summary (method, block, weight bytes before and after, outputs).
      auto a = m_analysis->int4Result() ? int4Summary(*m_analysis->int4Result()) : analysisSummary(model, *result);
      if (const auto run = m_analysis->run(); run && !m_analysis->int4Result())
        for (PropertyEntry& e : remedySummaryProperties(model.graph, *result, run->remedies)) a.push_back(std::move(e));
      entries.insert(entries.begin() + std::min<size_t>(1, entries.size()), a.begin(), a.end());
    }
    m_inspectorModel->setEntries(entries);
    m_inspectorDock->setWindowTitle(QStringLiteral("Inspector — model"));
  } else {
    const GraphLayout& layout = *m_view->graphLayout();
    const LayoutItem& it = layout.items[(size_t)item];
    if (it.frame >= 0) {
      const Graph& sub = layout.graphOf(item);
      if (it.kind == LayoutItem::Kind::Node)
        m_inspectorModel->setEntries(subgraphNodeProperties(sub, it.id, layout.scopeOf(item)));
      else
        m_inspectorModel->setEntries(subgraphValueProperties(sub, it.id, layout.scopeOf(item)));
      m_inspectorDock->setWindowTitle(
          QStringLiteral("Inspector — %1 (subgraph)")
              .arg(it.kind == LayoutItem::Kind::Node ? QString::fromStdString(sub.nodes[(size_t)it.id].opType)
                                                     : QStringLiteral("tensor")));
    } else if (it.kind == LayoutItem::Kind::Node) {
      std::vector<PropertyEntry> entries = nodeProperties(model, it.id);
      if (result) {
        // Quantization first after the node's identity: it is what one looks at with results.
        auto q = quantizationProperties(model, *result, it.id);
        if (const auto run = m_analysis->run(); run && !m_analysis->int4Result())
          if (run->model)
            for (PropertyEntry& e : remedyNodeProperties(model.graph, run->model->graph, run->remedies, it.id)) q.push_back(std::move(e));
        entries.insert(entries.begin() + std::min<size_t>(1, entries.size()), q.begin(), q.end());
      }
      m_inspectorModel->setEntries(entries);
      m_inspectorDock->setWindowTitle(QStringLiteral("Inspector — %1").arg(QString::fromStdString(model.graph.nodes[(size_t)it.id].opType)));
    } else if (it.kind == LayoutItem::Kind::Group) {
      m_inspectorModel->setEntries(groupProperties(*layout.grouping, it.id, m_view->groupSnr(it.id)));
      m_inspectorDock->setWindowTitle(QStringLiteral("Inspector — group"));
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
  const GraphLayout& layout = *m_view->graphLayout();
  if ((size_t)item >= layout.items.size()) return;
  const LayoutItem& it = layout.items[(size_t)item];
  if (it.kind != LayoutItem::Kind::Node || it.frame >= 0) return;
  m_tableDock->show();
  m_tableDock->raise();
  const QModelIndex src = m_tableModel->index(m_tableModel->rowOfNode(it.id), NodeTableModel::NameColumn);
  if (!m_proxy->mapFromSource(src).isValid()) m_filterEdit->clear();  // filtered out: show everything
  selectItem(item, false);
  m_table->setFocus();
}

bool MainWindow::findNext(const QString& text, bool backwards) {
  if (!m_current) return false;
  return m_search->findNext(text, backwards);
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
  m_autosave->release();
  m_autosave->setStopped(true);
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

void MainWindow::connectAnalysis() {
  m_view->setColouring(m_actions->colouring());
  connect(m_actions, &AnalysisActions::colouringChanged, m_view, &GraphView::setColouring);
  connect(m_actions, &AnalysisActions::requestsChanged, this, &MainWindow::refreshUnapplied);
  connect(m_analysis, &AnalysisController::resultChanged, this, &MainWindow::onResultChanged);
  connect(m_analysis, &AnalysisController::jobStarted, this, &MainWindow::onAnalysisStarted);
  connect(m_analysis, &AnalysisController::progress, this, &MainWindow::onAnalysisProgress);
  connect(m_analysis, &AnalysisController::idle, this, &MainWindow::onAnalysisEnded);
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

  connect(m_tableModel, &NodeTableModel::quantizeRequested, m_actions, &AnalysisActions::requestNode);
  installExactSensitivityMenu(*m_table, *m_analysis);
  connect(m_view, &GraphView::quantizeRequested, m_actions, &AnalysisActions::requestNode);
  connect(m_view, &GraphView::opTypeQuantizeRequested, m_actions, &AnalysisActions::requestOpType);
  connect(m_view, &GraphView::histogramRequested, this, [this](NodeId id) {
    m_plotsDock->show();
    m_plotsDock->raise();
    m_plots->tabs()->setCurrentIndex(PlotsPanel::HistogramTab);
    selectNode(id);
  });
  connect(m_plots, &PlotsPanel::nodeClicked, this, [this](NodeId id) { selectNode(id); });
  connect(m_plots, &PlotsPanel::thresholdChanged, this, [this] { m_view->setHighlightedNodes(m_plots->nodesBelowThreshold()); });
  // The auto-fallback's curve in its tab; a click on a point asks for that point's exclusions.
  connect(m_analysis, &AnalysisController::fallbackCurveChanged, this,
          [this](std::shared_ptr<const FallbackCurve> curve, double target) {
            m_plots->fallbackCurvePlot()->setCurve(curve, target);
            if (!curve) return;
            m_plotsDock->show();
            m_plots->tabs()->setCurrentIndex(PlotsPanel::FallbackTab);
          });
  connect(m_plots->fallbackCurvePlot(), &FallbackCurvePlot::pointClicked, this,
          [this](int point) { m_actions->requestFallbackPoint(point); });
}

void MainWindow::refreshUnapplied() { m_tableModel->setUnappliedStates(m_analysis->unappliedStates()); }

void MainWindow::onResultChanged(const std::shared_ptr<const AnalysisResult>& result) {
  const bool had = m_tableModel->result() != nullptr;
  m_tableModel->setResult(result);
  refreshUnapplied();
  m_view->setAnalysis(result);
  m_plots->setAnalysis(m_current ? m_current->model : nullptr, result, m_analysis->session(), m_analysis->data());
  m_view->setHighlightedNodes(result ? m_plots->nodesBelowThreshold() : std::vector<char>());
  showRemedies(*m_analysis, *m_tableModel, *m_table, *m_plots);
  if (result) m_plots->fallbackCurvePlot()->matchResult(*result);
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
    // With realisations (--realisations), the worst output's mean and sd beside the analysis's figure.
    const QString realisations = worstRealisationsShortText(*result);
    const QString probe = realisationProbeShortText(result->realisationProbe);
    m_statusInfo->setText(QStringLiteral("%1 nodes · %2 of %3 quantizable nodes quantized · worst output SNR %4 dB%5 · %6 samples%7")
                              .arg(m_current ? m_current->model->graph.nodes.size() : 0)
                              .arg(quantized)
                              .arg(quantizable)
                              .arg(result->worstOutputSnrDb(), 0, 'f', 2)
                              .arg(realisations.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(realisations))
                              .arg(result->samples)
                              .arg(probe.isEmpty() ? QString() : QStringLiteral(" · realisations %1").arg(probe)));
  }
  // The toggle cache (issue 16): read here, between jobs, as the session's other state is.
  if (const std::shared_ptr<QuantSession> session = m_analysis->session(); result && session) {
    const bool toggled = m_analysis->lastJob() == AnalysisController::Job::Toggle;
    m_statusCache->setText(toggleCacheSummary(*session, toggled ? m_analysis->lastJobSeconds() : -1));
    m_statusCache->setToolTip(toggleCacheDetails(*session));
  } else {
    m_statusCache->clear();
    m_statusCache->setToolTip({});
  }
  m_actions->resultShown(result);
  updateActions();
  if (result && m_analysis->unappliedStates().empty()) m_projects->autosaveNow();
  if (result) emit analysisShown();
}

void MainWindow::onAnalysisStarted(AnalysisController::Job job) {
  static const char* const names[] = {"", "Calibrating", "Re-analysing", "Auto-fallback", "Exact sensitivity"};
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
  m_projects->autosaveNow();  // after an auto-fallback, whose exclusions become requested states only now
  if (!m_loader->isBusy()) {
    m_progress->hide();
    m_statusStage->clear();
  }
  m_cancelAnalysis->hide();
  updateActions();
}

void MainWindow::updateActions() {
  const bool savable = m_current && QFileInfo(m_current->path).isFile();
  m_actions->updateActions();
  m_saveProjectAction->setEnabled(savable);
  m_saveProjectAsAction->setEnabled(savable);
  m_goToWorst->setEnabled(m_current && m_analysis->result());
}

}  // namespace qs::ui
