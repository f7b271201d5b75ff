#include "ui/main_window.h"

#include <QAction>
#include <QApplication>
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
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTableView>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

#include "ui/app_icon.h"
#include "ui/graph_view.h"
#include "ui/node_properties.h"
#include "ui/node_table_model.h"
#include "ui/property_tree_model.h"
#include "ui/start_page.h"

namespace qs::ui {

namespace {

constexpr int kMaxRecentFiles = 10;
const char* const kRecentKey = "recentFiles";
const char* const kSampleModelName = "ch_PP-OCRv4_det_infer.onnx";

bool isOnnxUrl(const QUrl& url) { return url.isLocalFile() && url.toLocalFile().endsWith(QStringLiteral(".onnx"), Qt::CaseInsensitive); }

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

  buildDocks();
  buildActions();
  buildStatusBar();
  m_startPage->setRecentFiles(recentFiles());

  resize(1440, 900);
  QSettings settings;
  restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  // The docks have nothing to show until a model is open: the start page gets the whole window,
  // and the saved dock layout comes back with the first model.
  m_savedState = settings.value(QStringLiteral("window/state")).toByteArray();
  for (QDockWidget* d : {m_inspectorDock, m_tableDock, m_logDock}) d->hide();
}

void MainWindow::showDocks() {
  if (m_docksShown) return;
  m_docksShown = true;
  if (m_savedState.isEmpty() || !restoreState(m_savedState)) {
    for (QDockWidget* d : {m_inspectorDock, m_tableDock, m_logDock}) d->show();
    m_tableDock->raise();
  }
}

MainWindow::~MainWindow() = default;

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
  resizeDocks({m_tableDock}, {220}, Qt::Vertical);
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
  m_viewMenu->addAction(m_logDock->toggleViewAction());

  QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
  help->addAction(QStringLiteral("&About Quantscope"), this, [this] {
    QMessageBox::about(this, QStringLiteral("About Quantscope"),
                       QStringLiteral("<b>Quantscope %1</b><p>INT8 quantization error analysis for ONNX models.</p>"
                                      "<p>Graph layout: igraph's Sugiyama layout. Built with Qt %2.</p>")
                           .arg(QStringLiteral(QS_VERSION), QString::fromLatin1(qVersion())));
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
  m_view->setGraphLayout(result->layout);
  m_tableModel->setModel(result->model);
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
  emit modelShown(result->path);
}

void MainWindow::onFailed(const QString& path, const QString& message) {
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
  m_syncing = false;
}

void MainWindow::onTableCurrentChanged(const QModelIndex& current) {
  if (m_syncing || !current.isValid() || !m_current) return;
  const NodeId node = current.data(NodeTableModel::NodeIdRole).toInt();
  m_syncing = true;
  const int item = m_current->layout->itemOfNode[(size_t)node];
  m_view->setSelectedItem(item, true);
  showInspectorFor(item);
  m_syncing = false;
}

void MainWindow::showInspectorFor(int item) {
  if (!m_current) {
    m_inspectorModel->setEntries({});
    return;
  }
  const Model& model = *m_current->model;
  if (item < 0) {
    m_inspectorModel->setEntries(modelSummary(model, *m_current->info));
    m_inspectorDock->setWindowTitle(QStringLiteral("Inspector — model"));
  } else {
    const LayoutItem& it = m_current->layout->items[(size_t)item];
    if (it.kind == LayoutItem::Kind::Node) {
      m_inspectorModel->setEntries(nodeProperties(model, it.id));
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
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  if (m_docksShown) settings.setValue(QStringLiteral("window/state"), saveState());
  m_loader->cancel();
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

}  // namespace qs::ui
