// Offscreen tests of the workbench: the loader worker, the layout, the item models, selection sync
// between view, table and inspector, search, the error path and a rendered screenshot.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStackedWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>
#include <QTreeView>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "tests/ui/chain_model.h"
#include "tests/ui/window_parts.h"
#include "ui/graph_layout.h"
#include "ui/graph_view.h"
#include "ui/main_window.h"
#include "ui/model_loader.h"
#include "ui/node_properties.h"
#include "ui/node_table_model.h"
#include "ui/property_tree_model.h"
#include "ui/start_page.h"

using namespace qs;
using namespace qs::ui;

namespace {

QString modelPath(const char* name) { return QStringLiteral(QS_MODELS_DIR "/") + QLatin1String(name); }

// The generated chain of tests/ui/chain_model.h.
std::shared_ptr<Model> chainModel(int n) {
  auto model = test::chainModel(n);
  if (!model) qFatal("generated chain of %d nodes does not finalize", n);
  return model;
}

LayoutOptions defaultLayoutOptions() {
  GraphView view;
  return view.layoutOptions();
}

// Every node has a finite, non-empty box; boxes in one layer do not overlap; edges are finite.
void checkLayout(const GraphLayout& layout) {
  const Graph& g = layout.model->graph;
  QCOMPARE(layout.itemOfNode.size(), g.nodes.size());
  std::map<int32_t, std::vector<QRectF>> byLayer;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const int32_t item = layout.itemOfNode[n];
    QVERIFY2(item >= 0, qPrintable(QStringLiteral("node %1 has no box").arg(n)));
    const QRectF r = layout.items[(size_t)item].rect;
    QVERIFY(std::isfinite(r.x()) && std::isfinite(r.y()) && r.width() > 0 && r.height() > 0);
  }
  for (const LayoutItem& it : layout.items) byLayer[it.layer].push_back(it.rect);
  for (auto& [layer, rects] : byLayer) {
    std::sort(rects.begin(), rects.end(), [](const QRectF& a, const QRectF& b) { return a.left() < b.left(); });
    for (size_t k = 1; k < rects.size(); ++k)
      QVERIFY2(rects[k - 1].right() <= rects[k].left() + 1e-6,
               qPrintable(QStringLiteral("overlap in layer %1 at x=%2").arg(layer).arg(rects[k].left())));
  }
  for (const LayoutEdge& e : layout.edges) {
    QVERIFY(e.points.size() >= 2);
    for (const QPointF& p : e.points) QVERIFY(std::isfinite(p.x()) && std::isfinite(p.y()));
    // Edges run downwards, from the bottom of the source to the top of the target.
    QVERIFY(e.points.front().y() < e.points.back().y());
  }
}

LoadedModelPtr waitForLoad(ModelLoader& loader, QSignalSpy& spy) {
  if (spy.isEmpty() && !spy.wait(120000)) return nullptr;
  return spy.takeFirst().at(0).value<LoadedModelPtr>();
}

// Fraction of pixels that differ from `background`, and how many pixels carry each node colour.
struct ImageCensus {
  double foreground = 0;
  int categoriesPresent = 0;
};
ImageCensus census(const QImage& image, const QColor& background) {
  const QImage img = image.convertToFormat(QImage::Format_RGB32);
  std::map<QRgb, int> counts;
  int64_t fg = 0;
  for (int y = 0; y < img.height(); ++y) {
    const QRgb* line = reinterpret_cast<const QRgb*>(img.constScanLine(y));
    for (int x = 0; x < img.width(); ++x) {
      if ((line[x] & 0xffffff) != (background.rgb() & 0xffffff)) ++fg;
      ++counts[line[x] | 0xff000000];
    }
  }
  ImageCensus c;
  c.foreground = (double)fg / (double)(img.width() * img.height());
  for (int k = 0; k < kOpCategoryCount; ++k)
    if (counts[opCategoryColor((OpCategory)k).rgb() | 0xff000000] >= 40) ++c.categoriesPresent;
  return c;
}

}  // namespace

class WorkbenchTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeTests"));
    QCoreApplication::setApplicationName(QStringLiteral("qs_ui_tests"));
    QSettings().clear();
  }

  void loaderLaysOutEveryNode() {
    const QString path = modelPath("ch_ppocr_mobile_v2.0_cls_infer.onnx");
    if (!QFile::exists(path)) QSKIP("cls model missing: run scripts/setup.sh");
    ModelLoader loader;
    loader.setLayoutOptions(defaultLayoutOptions());
    QSignalSpy loaded(&loader, &ModelLoader::loaded);
    QSignalSpy failed(&loader, &ModelLoader::failed);
    QSignalSpy progress(&loader, &ModelLoader::progress);
    QVERIFY(loader.open(path));
    LoadedModelPtr result = waitForLoad(loader, loaded);
    QVERIFY(result);
    QCOMPARE(failed.count(), 0);
    QVERIFY(progress.count() > 0);
    QCOMPARE(result->path, path);
    QVERIFY(result->model->graph.nodes.size() > 50);
    QVERIFY(result->info && result->info->nodeCount == (int64_t)result->model->graph.nodes.size());
    checkLayout(*result->layout);
    // Weights are not drawn: no edge carries an initializer.
    for (const LayoutEdge& e : result->layout->edges) QVERIFY(!result->model->graph.value(e.value).constant);
    // The spatial index finds every box at its centre.
    for (size_t i = 0; i < result->layout->items.size(); ++i)
      QCOMPARE(result->layout->itemAt(result->layout->items[i].rect.center()), (int32_t)i);
    qInfo("cls: %zu nodes, %d layers, %lld bend points, layout %.3f s",
          result->model->graph.nodes.size(), result->layout->layerCount,
          (long long)result->layout->bendPointCount, result->layoutSeconds);
  }

  void newerRequestDropsStaleResult() {
    const QString path = modelPath("ch_ppocr_mobile_v2.0_cls_infer.onnx");
    if (!QFile::exists(path)) QSKIP("cls model missing: run scripts/setup.sh");
    ModelLoader loader;
    loader.setLayoutOptions(defaultLayoutOptions());
    QSignalSpy loaded(&loader, &ModelLoader::loaded);
    QVERIFY(loader.open(path));
    loader.openModel(chainModel(40), QStringLiteral("second"));
    QTRY_COMPARE_WITH_TIMEOUT(loader.runningJobs(), 0, 120000);
    QCOMPARE(loaded.count(), 1);
    QCOMPARE(loaded.first().at(0).value<LoadedModelPtr>()->path, QStringLiteral("second"));
  }

  void cancelDropsResult() {
    ModelLoader loader;
    loader.setLayoutOptions(defaultLayoutOptions());
    QSignalSpy loaded(&loader, &ModelLoader::loaded);
    QSignalSpy failed(&loader, &ModelLoader::failed);
    loader.openModel(chainModel(3000), QStringLiteral("cancelled"));
    loader.cancel();
    QTRY_COMPARE_WITH_TIMEOUT(loader.runningJobs(), 0, 120000);
    QCOMPARE(loaded.count(), 0);
    QCOMPARE(failed.count(), 0);
    // The layout itself stops on the token.
    std::atomic<bool> cancel{true};
    auto r = computeGraphLayout(chainModel(100), defaultLayoutOptions(), {}, &cancel);
    QVERIFY(!r.isOk());
    QCOMPARE(r.status().code(), StatusCode::Cancelled);
  }

  void generatedChainLayout() {
    auto model = chainModel(5000);
    auto t0 = std::chrono::steady_clock::now();
    auto r = computeGraphLayout(model, defaultLayoutOptions());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY2(r.isOk(), r.status().message().c_str());
    const GraphLayout& layout = *r.value();
    checkLayout(layout);
    QVERIFY(layout.bounds.isValid());
    qInfo("generated chain: 5000 nodes, %zu edges, %d layers, %lld bend points, layout %.3f s", layout.edges.size(),
          layout.layerCount, (long long)layout.bendPointCount, seconds);
  }

  // Issue 6: a 100,000-node chain lays out: every node gets a finite box, layers do not overlap.
  // Our own code walks the graph without recursion, but igraph's Sugiyama layout recurses, its
  // depth growing with the graph: this chain needs 2 to 3 MiB of stack (50,000 nodes: 1 to
  // 1.5 MiB). The layout runs here on a thread with a 4 MiB stack, half of the 8 MiB that Linux
  // gives the loader's pool threads by default, so that a deeper recursion shows up as a crash
  // with room to spare in the application.
  // Through the loader's own worker threads, as opening such a model does: igraph's Sugiyama layout
  // recurses (2-3 MiB of stack at 100,000 nodes), and those threads reserve enough stack for it.
  void hundredThousandChainLayout() {
    ModelLoader loader;
    loader.setLayoutOptions(defaultLayoutOptions());
    QSignalSpy loaded(&loader, &ModelLoader::loaded);
    QSignalSpy failed(&loader, &ModelLoader::failed);
    loader.openModel(chainModel(100000), QStringLiteral("chain100k"));
    QTRY_COMPARE_WITH_TIMEOUT(loader.runningJobs(), 0, 300000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(1).toString()));
    QCOMPARE(loaded.count(), 1);
    const LoadedModelPtr m = loaded.first().at(0).value<LoadedModelPtr>();
    QVERIFY(m && m->layout);
    const GraphLayout& layout = *m->layout;
    checkLayout(layout);
    QCOMPARE(layout.itemOfNode.size(), size_t(100000));
    QVERIFY(layout.bounds.isValid());
    qInfo("generated chain: 100000 nodes, %zu edges, %d layers, %lld bend points, layout %.2f s", layout.edges.size(),
          layout.layerCount, (long long)layout.bendPointCount, m->layoutSeconds);
  }

  void degenerateGraphs() {
    // No nodes at all: an input that is also the output.
    auto empty = std::make_shared<Model>();
    Graph& g = empty->graph;
    const ValueId x = g.valueId("x");
    g.value(x).isGraphInput = true;
    g.value(x).isGraphOutput = true;
    g.inputs.push_back(x);
    g.outputs.push_back(x);
    QVERIFY(g.finalize("empty").isOk());
    auto r = computeGraphLayout(empty, defaultLayoutOptions());
    QVERIFY2(r.isOk(), r.status().message().c_str());
    // An input box, an output box and the edge between them.
    QCOMPARE(r.value()->items.size(), size_t(2));
    QCOMPARE(r.value()->edges.size(), size_t(1));
    checkLayout(*r.value());
    // One node fed only by weights (no graph input edge) and a graph with no nodes but a view on it.
    auto single = chainModel(1);
    r = computeGraphLayout(single, defaultLayoutOptions());
    QVERIFY(r.isOk());
    checkLayout(*r.value());
    GraphView view;
    view.resize(400, 300);
    view.setGraphLayout(r.value());
    view.fitToWindow();
    QVERIFY(!view.grab().isNull());
    view.setGraphLayout(nullptr);
    QVERIFY(!view.grab().isNull());
  }

  void largeGraphLayoutAndPaint() {
    // 50,000 nodes: opt-in (QS_UI_LARGE=1), it takes a while on a shared machine.
    if (qEnvironmentVariableIsEmpty("QS_UI_LARGE")) QSKIP("set QS_UI_LARGE=1 to lay out and paint 50,000 nodes");
    auto model = chainModel(50000);
    auto t0 = std::chrono::steady_clock::now();
    auto r = computeGraphLayout(model, defaultLayoutOptions());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY2(r.isOk(), r.status().message().c_str());
    checkLayout(*r.value());
    GraphView view;
    view.resize(1400, 900);
    view.setGraphLayout(r.value());
    for (double zoom : {1.0, 0.2, 0.02, 0.0}) {
      if (zoom > 0) view.setZoom(zoom);
      else view.fitToWindow();
      QImage img(view.size(), QImage::Format_ARGB32_Premultiplied);
      auto p0 = std::chrono::steady_clock::now();
      for (int k = 0; k < 5; ++k) view.render(&img);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count() / 5;
      qInfo("50k nodes: frame at zoom %.4f: %.1f ms", view.zoom(), ms);
    }
    qInfo("50k nodes: layout %.3f s, %lld bend points", seconds, (long long)r.value()->bendPointCount);
  }

  void itemModelsPassTester() {
    auto model = chainModel(60);
    NodeTableModel table;
    QAbstractItemModelTester t1(&table, QAbstractItemModelTester::FailureReportingMode::QtTest);
    table.setModel(model);
    QCOMPARE(table.rowCount(), 60);
    NodeFilterProxyModel proxy;
    QAbstractItemModelTester t2(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&table);
    proxy.sort(NodeTableModel::NameColumn, Qt::DescendingOrder);
    QVERIFY(proxy.setPattern(QStringLiteral("^Add$")));
    QVERIFY(proxy.rowCount() > 0 && proxy.rowCount() < 60);
    for (int r = 0; r < proxy.rowCount(); ++r)
      QCOMPARE(proxy.index(r, NodeTableModel::OpColumn).data().toString(), QStringLiteral("Add"));
    QVERIFY(!proxy.setPattern(QStringLiteral("(")));  // invalid: keeps the previous filter
    QVERIFY(proxy.setPattern(QStringLiteral("NODE_1")));  // case-insensitive, on the name
    QVERIFY(proxy.rowCount() > 1);
    QVERIFY(proxy.setPattern(QString()));
    QCOMPARE(proxy.rowCount(), 60);
    table.setModel(chainModel(10));

    PropertyTreeModel props;
    QAbstractItemModelTester t3(&props, QAbstractItemModelTester::FailureReportingMode::QtTest);
    props.setEntries(nodeProperties(*model, 0));
    QVERIFY(props.findKey(QStringLiteral("Weights")).isValid());  // node 0 is a Conv with a weight
    props.setEntries(valueProperties(*model, model->graph.inputs[0]));
    ModelInfo info = describeModel(*model, KernelRegistry::builtin());
    props.setEntries(modelSummary(*model, info));
    QVERIFY(props.findKey(QStringLiteral("Operators")).isValid());
    props.setEntries({});
    QCOMPARE(props.rowCount(), 0);
  }

  void weightStatistics() {
    Tensor t = Tensor::fromVector<float>({1.f, 2.f, 3.f, 4.f, NAN}, {5});
    WeightStats s = tensorStats(t);
    QCOMPARE(s.count, (int64_t)5);
    QCOMPARE(s.nonFinite, (int64_t)1);
    QCOMPARE(s.min, 1.0);
    QCOMPARE(s.max, 4.0);
    QCOMPARE(s.mean, 2.5);
    QVERIFY(std::abs(s.stddev - std::sqrt(1.25)) < 1e-12);
  }

  void selectionSyncsTableViewInspector() {
    const QString path = modelPath("ch_ppocr_mobile_v2.0_cls_infer.onnx");
    if (!QFile::exists(path)) QSKIP("cls model missing: run scripts/setup.sh");
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy shown(&w, &MainWindow::modelShown);
    w.openFile(path);
    QVERIFY(shown.wait(120000));
    const LoadedModelPtr cur = w.current();
    QVERIFY(cur);
    QVERIFY(!test::part<StartPage>(w, "startPage")->isVisible());
    const Graph& g = cur->model->graph;
    auto* table = test::part<QTableView>(w, "nodeTable");
    auto* proxy = test::part<NodeFilterProxyModel>(w, "nodeProxyModel");
    auto* inspector = test::part<PropertyTreeModel>(w, "inspectorModel");
    GraphView* view = test::part<GraphView>(w, "graphView");

    // Table -> view and inspector.
    const int row = 7;
    const NodeId node = g.topoOrder[(size_t)row];
    QModelIndex proxyIndex = proxy->mapFromSource(test::part<NodeTableModel>(w, "nodeTableModel")->index(row, NodeTableModel::NameColumn));
    table->selectionModel()->setCurrentIndex(proxyIndex, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    QCOMPARE(view->selectedItem(), cur->layout->itemOfNode[(size_t)node]);
    QModelIndex head = inspector->findKey(QStringLiteral("Node"));
    QVERIFY(head.isValid());
    QModelIndex nameRow = inspector->findKey(QStringLiteral("Name"), head);
    QCOMPARE(nameRow.siblingAtColumn(1).data().toString(), QString::fromStdString(g.nodes[(size_t)node].name));

    // View (a real click) -> table and inspector.
    const NodeId other = g.topoOrder[3];
    const int item = cur->layout->itemOfNode[(size_t)other];
    view->setZoom(1.0);
    view->centerOn(cur->layout->items[(size_t)item].rect.center());
    const QPoint at = view->mapFromScene(cur->layout->items[(size_t)item].rect.center()).toPoint();
    QTest::mouseClick(view, Qt::LeftButton, {}, at);
    QCOMPARE(view->selectedItem(), item);
    QCOMPARE(table->currentIndex().data(NodeTableModel::NodeIdRole).toInt(), other);
    head = inspector->findKey(QStringLiteral("Node"));
    nameRow = inspector->findKey(QStringLiteral("Name"), head);
    QCOMPARE(nameRow.siblingAtColumn(1).data().toString(), QString::fromStdString(g.nodes[(size_t)other].name));

    // A click on empty space clears the selection and shows the model summary.
    const QPointF empty = cur->layout->bounds.topLeft() - QPointF(200, 200);
    view->centerOn(empty);
    QTest::mouseClick(view, Qt::LeftButton, {}, view->rect().center());
    QCOMPARE(view->selectedItem(), -1);
    QVERIFY(!table->selectionModel()->hasSelection());
    QVERIFY(inspector->findKey(QStringLiteral("Model")).isValid());

    // A filtered table still follows the view: rows filtered out are simply not selected.
    test::part<QLineEdit>(w, "nodeFilter")->setText(QStringLiteral("^Conv$"));
    QVERIFY(proxy->rowCount() > 0);
    w.selectNode(node);
    QCOMPARE(view->selectedItem(), cur->layout->itemOfNode[(size_t)node]);
  }

  void searchFindsNodesAndTensors() {
    const QString path = modelPath("ch_ppocr_mobile_v2.0_cls_infer.onnx");
    if (!QFile::exists(path)) QSKIP("cls model missing: run scripts/setup.sh");
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QSignalSpy shown(&w, &MainWindow::modelShown);
    w.openFile(path);
    QVERIFY(shown.wait(120000));
    const LoadedModelPtr cur = w.current();
    const Graph& g = cur->model->graph;
    const NodeId target = g.topoOrder[g.topoOrder.size() / 2];
    const QString name = QString::fromStdString(g.nodes[(size_t)target].name);
    GraphView* view = test::part<GraphView>(w, "graphView");
    QVERIFY(w.findNext(name));
    QCOMPARE(view->selectedItem(), cur->layout->itemOfNode[(size_t)target]);
    // A weight's name finds the node that reads it.
    NodeId withWeight = -1;
    ValueId weight = kNoValue;
    for (NodeId n : g.topoOrder) {
      for (ValueId v : g.nodes[(size_t)n].inputs)
        if (v != kNoValue && g.value(v).constant && g.value(v).consumers.size() == 1) weight = v;
      if (weight != kNoValue) {
        withWeight = n;
        break;
      }
    }
    QVERIFY(weight != kNoValue);
    QVERIFY(w.findNext(QString::fromStdString(g.value(weight).name)));
    QCOMPARE(view->selectedItem(), cur->layout->itemOfNode[(size_t)withWeight]);
    // Enter moves on to the next of several matches.
    QVERIFY(w.findNext(QStringLiteral("conv")));
    const int first = view->selectedItem();
    QVERIFY(w.findNext(QStringLiteral("conv")));
    QVERIFY(view->selectedItem() != first);
    QVERIFY(!w.findNext(QStringLiteral("no-such-name-anywhere")));
    // Ctrl+F opens the search bar.
    QTest::keyClick(&w, Qt::Key_F, Qt::ControlModifier);
    QVERIFY(test::part<QLineEdit>(w, "searchEdit")->isVisible());
  }

  void loadErrorKeepsPreviousModel() {
    const QString path = modelPath("ch_ppocr_mobile_v2.0_cls_infer.onnx");
    if (!QFile::exists(path)) QSKIP("cls model missing: run scripts/setup.sh");
    MainWindow w;
    w.show();
    QSignalSpy shown(&w, &MainWindow::modelShown);
    QSignalSpy failed(&w, &MainWindow::openFailed);
    w.setErrorDialogsEnabled(false);
    w.openFile(path);
    QVERIFY(shown.wait(120000));
    shown.clear();
    const LoadedModelPtr before = w.current();

    QTemporaryDir dir;
    const QString corrupt = dir.filePath(QStringLiteral("corrupt.onnx"));
    {
      QFile f(corrupt);
      QVERIFY(f.open(QIODevice::WriteOnly));
      // A valid protobuf tag followed by a length far past the end of the file.
      f.write(QByteArray("\x08\x07\x3a\xff\xff\xff\x0f", 7) + QByteArray(64, '\x11'));
    }
    w.setErrorDialogsEnabled(true);
    w.openFile(corrupt);
    QVERIFY(failed.wait(60000));
    const QString message = failed.takeFirst().at(0).toString();
    QVERIFY2(message.startsWith(corrupt), qPrintable(message));
    QVERIFY(!message.contains(QLatin1Char('\n')));
    QCOMPARE(w.current(), before);  // the previous model stays
    QCOMPARE(shown.count(), 0);
    QVERIFY(test::part<QPlainTextEdit>(w, "log")->toPlainText().contains(message));
    auto* box = w.findChild<QMessageBox*>();
    QVERIFY(box);
    QCOMPARE(box->informativeText(), message);
    box->close();

    // Missing files are refused before any thread starts.
    w.setErrorDialogsEnabled(false);
    const QString missing = dir.filePath(QStringLiteral("missing.onnx"));
    w.openFile(missing);
    QCOMPARE(failed.count(), 1);
    QCOMPARE(failed.takeFirst().at(0).toString(), missing + QStringLiteral(": no such file"));
    QCOMPARE(w.current(), before);
  }

  void screenshotHasContent() {
    const QString path = modelPath("ch_ppocr_mobile_v2.0_cls_infer.onnx");
    if (!QFile::exists(path)) QSKIP("cls model missing: run scripts/setup.sh");
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy shown(&w, &MainWindow::modelShown);
    w.openFile(path);
    QVERIFY(shown.wait(120000));
    QCoreApplication::processEvents();
    const QImage window = w.grab().toImage();
    QVERIFY(!window.isNull());
    window.save(QDir::temp().filePath(QStringLiteral("qs_ui_tests_window.png")));
    const QImage graph = test::part<GraphView>(w, "graphView")->grab().toImage();
    const ImageCensus c = census(graph, QColor(0xfa, 0xfb, 0xfc));
    qInfo("graph view: %.1f%% foreground, %d node colours", c.foreground * 100, c.categoriesPresent);
    QVERIFY2(c.foreground > 0.04, qPrintable(QString::number(c.foreground)));
    QVERIFY2(c.categoriesPresent >= 3, qPrintable(QString::number(c.categoriesPresent)));
  }

  void startPageOffersSample() {
    MainWindow w;
    auto* stack = w.findChild<QStackedWidget*>();
    QVERIFY(stack);
    auto* start = test::part<StartPage>(w, "startPage");
    QCOMPARE(stack->currentWidget(), static_cast<QWidget*>(start));
    auto* sample = start->findChild<QPushButton*>(QStringLiteral("sampleButton"));
    QVERIFY(sample);
    QCOMPARE(sample->isEnabled(), !MainWindow::sampleModelPath().isEmpty());
    if (!MainWindow::sampleModelPath().isEmpty())
      QVERIFY(MainWindow::sampleModelPath().endsWith(QStringLiteral("ch_PP-OCRv4_det_infer.onnx")));
  }

  void layoutTimesOfSampleModels() {
    // Reported, not asserted (timings belong in benchmarks).
    for (const char* name : {"ch_ppocr_mobile_v2.0_cls_infer.onnx", "ch_PP-OCRv4_det_infer.onnx",
                             "ch_PP-OCRv4_rec_infer.onnx"}) {
      const QString path = modelPath(name);
      if (!QFile::exists(path)) continue;
      ModelLoader loader;
      loader.setLayoutOptions(defaultLayoutOptions());
      QSignalSpy loaded(&loader, &ModelLoader::loaded);
      QVERIFY(loader.open(path));
      LoadedModelPtr r = waitForLoad(loader, loaded);
      QVERIFY(r);
      checkLayout(*r->layout);
      qInfo("%s: %zu nodes, %d layers, %lld bend points, load %.3f s, layout %.3f s", name,
            r->model->graph.nodes.size(), r->layout->layerCount, (long long)r->layout->bendPointCount, r->loadSeconds,
            r->layoutSeconds);
    }
  }
};

int runWorkbenchTests(int argc, char** argv) {
  WorkbenchTest t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_workbench.moc"
