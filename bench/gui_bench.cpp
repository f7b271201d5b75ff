// GUI benchmark for docs/performance.md (Workbench): the workbench's targets from issue 5.
//   - PP-OCRv4 rec opened, laid out and painted for the first time (target < 2 s)
//   - a generated 5,000-node model laid out (< 1 s) and a 50,000-node one (< 10 s); 100,000 nodes
//   - panning frame time on the 50,000-node graph (< 30 ms a frame)
//   - toggle latency on cls with 32 calibration samples, from the click to the table and graph
//     updated (target 300 ms)
//   - issue 16: a generated 50,000-node graph of 500 repeated blocks opens grouped (< 2 s) and
//     expanding one group takes < 100 ms; the zoo's bert_encoder and swin_t open grouped
//     (--only-groups runs these alone; --screenshot-50k PNG saves the grouped graph fitted to a
//     1600x1000 window)
// Prints a table; asserts nothing. Run offscreen:
//   QT_QPA_PLATFORM=offscreen build/bench/qs_bench_gui [--runs N] [--skip-toggle] [--skip-50k] [--models DIR]
// --skip-50k also skips the panning and the 100,000-node layout.
#include <QAbstractItemModel>
#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QThread>
#include <QImage>
#include <QSettings>
#include <QTemporaryDir>
#include <QTimer>
#include <QUndoStack>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/onnx/loader.h"
#include "tests/support/text_images.h"
#include "tests/ui/block_model.h"
#include "tests/ui/chain_model.h"
#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/autosave.h"
#include "ui/graph_layout.h"
#include "ui/graph_view.h"
#include "ui/group_layout.h"
#include "ui/main_window.h"
#include "ui/node_table_model.h"

using namespace qs;
using namespace qs::ui;

namespace {

struct Stats {
  double median = 0, min = 0, max = 0, p95 = 0;
  size_t n = 0;
};

Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  s.p95 = v[std::min(v.size() - 1, (size_t)((double)v.size() * 0.95))];
  return s;
}

struct Row {
  std::string what;
  Stats s;
  std::string unit;
  double target = 0;  // in `unit`, against the median (0: none)
  std::string note;
};
std::vector<Row> g_rows;

void report(const std::string& what, const Stats& s, const std::string& unit, double target, const std::string& note = {}) {
  g_rows.push_back({what, s, unit, target, note});
  std::fprintf(stderr, "  %s: median %.3f %s (n=%zu)\n", what.c_str(), s.median, unit.c_str(), s.n);
}

double msSince(const QElapsedTimer& t) { return (double)t.nsecsElapsed() / 1e6; }

// Runs the event loop until `done` or `timeoutMs`.
bool waitFor(const std::function<bool()>& done, int timeoutMs) {
  QElapsedTimer t;
  t.start();
  while (!done()) {
    if (t.elapsed() > timeoutMs) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
  }
  return true;
}

// Opens `path` (or the model) in a fresh, shown window; milliseconds from the request to the
// window painted with the model (a synchronous repaint right when the model is shown).
struct OpenTiming {
  double totalMs = -1, loadS = 0, layoutS = 0, paintMs = 0;
};
OpenTiming openToFirstPaint(const QString& path, std::shared_ptr<const Model> model) {
  MainWindow w;
  w.setErrorDialogsEnabled(false);
  w.autosave()->setDirectory(QString());
  w.resize(1440, 900);
  w.show();
  waitFor([&] { return w.isVisible(); }, 5000);
  QCoreApplication::processEvents();
  OpenTiming r;
  QElapsedTimer t;
  bool shown = false, failed = false;
  QObject::connect(&w, &MainWindow::modelShown, &w, [&] {
    QElapsedTimer p;
    p.start();
    w.repaint();  // the whole window, the graph view included, painted now
    r.paintMs = msSince(p);
    r.totalMs = msSince(t);
    shown = true;
  });
  QObject::connect(&w, &MainWindow::openFailed, &w, [&](const QString& m) {
    std::fprintf(stderr, "open failed: %s\n", qPrintable(m));
    failed = true;
  });
  t.start();
  if (model) w.openModel(std::move(model), path);
  else w.openFile(path);
  waitFor([&] { return shown || failed; }, 600000);
  if (shown) {
    r.loadS = w.current()->loadSeconds;
    r.layoutS = w.current()->layoutSeconds;
  }
  return r;
}

void benchOpenRec(const QString& modelsDir, int runs) {
  const QString path = modelsDir + QStringLiteral("/ch_PP-OCRv4_rec_infer.onnx");
  std::vector<double> total, load, layout, paint;
  for (int k = 0; k < runs; ++k) {
    const OpenTiming t = openToFirstPaint(path, nullptr);
    if (t.totalMs < 0) return;
    total.push_back(t.totalMs / 1000);
    load.push_back(t.loadS);
    layout.push_back(t.layoutS);
    paint.push_back(t.paintMs);
  }
  report("PP-OCRv4 rec: open to first paint", stats(total), "s", 2.0, "window 1440x900");
  report("  of which load (parse, checks, shape inference)", stats(load), "s", 0);
  report("  of which layout", stats(layout), "s", 0);
  report("  of which first paint", stats(paint), "ms", 0);
}

void benchLayout(int nodes, int runs, double targetS, std::shared_ptr<const GraphLayout>* keep) {
  auto model = test::chainModel(nodes);
  LayoutOptions options;
  {
    GraphView view;
    options = view.layoutOptions();
  }
  std::vector<double> seconds;
  for (int k = 0; k < runs; ++k) {
    QElapsedTimer t;
    t.start();
    auto r = computeGraphLayout(model, options);
    seconds.push_back(msSince(t) / 1000);
    if (!r.isOk()) {
      std::fprintf(stderr, "layout failed: %s\n", r.status().message().c_str());
      return;
    }
    if (keep) *keep = r.value();
  }
  report("generated " + std::to_string(nodes) + "-node chain: layout", stats(seconds), "s", targetS);
  const OpenTiming open = openToFirstPaint(QStringLiteral("generated-%1").arg(nodes), model);
  if (open.totalMs >= 0)
    report("generated " + std::to_string(nodes) + "-node chain: open to first paint", stats({open.totalMs / 1000}), "s", 0,
           "model built in code; describe + layout + table + paint");
}

// Pans the view across the 50,000-node graph, 40 pixels a step, rendering each frame offscreen.
void benchPanning(const std::shared_ptr<const GraphLayout>& layout) {
  GraphView view;
  view.resize(1400, 900);
  view.setGraphLayout(layout);
  QImage img(view.size(), QImage::Format_ARGB32_Premultiplied);
  const QRectF b = layout->bounds;
  std::vector<QPointF> centres;  // of the boxes, top to bottom
  for (const LayoutItem& it : layout->items) centres.push_back(it.rect.center());
  std::sort(centres.begin(), centres.end(), [](const QPointF& a, const QPointF& c) { return a.y() < c.y(); });
  for (double zoom : {1.0, 0.2, 0.05}) {
    view.setZoom(zoom);
    std::vector<double> ms, visible, visibleEdges;
    const double step = 40 / zoom;  // scene units for 40 pixels
    // Down the chain, 40 pixels a frame, following its boxes sideways, as a hand drags along it.
    double y = b.top() + 450 / zoom;
    for (int k = 0; k < 300; ++k) {
      y += step;
      if (y > b.bottom()) y = b.top() + 450 / zoom;
      auto next = std::lower_bound(centres.begin(), centres.end(), y, [](const QPointF& c, double v) { return c.y() < v; });
      const QPointF at(next == centres.end() ? b.center().x() : next->x(), y);
      view.centerOn(at);
      QElapsedTimer t;
      t.start();
      view.render(&img);
      ms.push_back(msSince(t));
      if (k == 150) {
        std::vector<int32_t> items, edges;
        const QRectF seen(view.mapToScene(QPointF(0, 0)), view.mapToScene(QPointF(view.width(), view.height())));
        layout->index.query(seen, &items, &edges);
        visible.push_back((double)items.size());
        visibleEdges.push_back((double)edges.size());
        if (qEnvironmentVariableIsSet("QS_BENCH_FRAMES")) img.save(QStringLiteral("%1/pan-%2.png").arg(qEnvironmentVariable("QS_BENCH_FRAMES")).arg(zoom));
      }
    }
    char what[96];
    std::snprintf(what, sizeof what, "50,000 nodes: pan frame at zoom %.2f", zoom);
    report(what, stats(ms), "ms", 30,
           QStringLiteral("300 steps of 40 px, 1400x900 view rendered into a QImage; %1 boxes, %2 edges in the index cells on screen")
               .arg(visible.empty() ? 0 : visible[0]).arg(visibleEdges.empty() ? 0 : visibleEdges[0]).toStdString());
  }
  view.fitToWindow();
  std::vector<double> ms;
  for (int k = 0; k < 20; ++k) {
    QElapsedTimer t;
    t.start();
    view.render(&img);
    ms.push_back(msSince(t));
  }
  char what[96];
  std::snprintf(what, sizeof what, "50,000 nodes: whole graph frame (zoom %.4f)", view.zoom());
  report(what, stats(ms), "ms", 30);
}

// Unchecks Convs in the table (the path of a click on the checkbox) and undoes each; every
// latency runs from the request to the table and graph showing the re-analysis (the 40 ms
// debounce included), as AnalysisActions::lastToggleLatencyMs() measures it.
void benchToggle(const QString& modelsDir, const QString& images) {
  MainWindow w;
  w.setErrorDialogsEnabled(false);
  w.autosave()->setDirectory(QString());
  w.resize(1440, 900);
  w.show();
  bool shown = false;
  QObject::connect(&w, &MainWindow::modelShown, &w, [&] { shown = true; });
  w.openFile(modelsDir + QStringLiteral("/ch_ppocr_mobile_v2.0_cls_infer.onnx"));
  if (!waitFor([&] { return shown; }, 120000)) return;
  AnalysisRequest req;
  req.data.path = images.toStdString();
  req.data.maxSamples = 32;
  req.data.image.width = 192;
  req.data.image.height = 48;
  req.data.image.mean = {0.5f, 0.5f, 0.5f};
  req.data.image.std = {0.5f, 0.5f, 0.5f};
  req.calibration.method = CalibMethod::Entropy;
  QElapsedTimer cal;
  cal.start();
  if (!w.analysis()->calibrate(req)) return;
  auto settled = [&] { return !w.analysis()->isBusy() && w.analysis()->unappliedStates().empty(); };
  if (!waitFor([&] { return w.analysis()->hasResult() && settled(); }, 600000)) return;
  report("cls: calibrate + full analysis, 32 samples", stats({msSince(cal) / 1000}), "s", 0, "entropy, 192x48 text images");
  const Graph& g = w.current()->model->graph;
  auto* m = w.findChild<NodeTableModel*>(QStringLiteral("nodeTableModel"));
  auto* proxy = w.findChild<NodeFilterProxyModel*>(QStringLiteral("nodeProxyModel"));
  auto* undo = w.findChild<QUndoStack*>(QStringLiteral("undoStack"));
  std::vector<double> ms, worker;
  int convs = 0;
  for (NodeId id : g.topoOrder) {
    if (g.nodes[(size_t)id].opType != "Conv" || !w.analysis()->result()->plan.nodes[(size_t)id].quantized) continue;
    if (convs++ % 3) continue;  // spread over the graph
    const QModelIndex check = proxy->mapFromSource(m->index(m->rowOfNode(id), NodeTableModel::QuantizedColumn));
    proxy->setData(check, Qt::Unchecked, Qt::CheckStateRole);
    waitFor(settled, 120000);
    ms.push_back(w.analysisActions()->lastToggleLatencyMs());
    worker.push_back(w.analysis()->lastJobSeconds() * 1000);
    undo->undo();
    waitFor(settled, 120000);
    ms.push_back(w.analysisActions()->lastToggleLatencyMs());
    worker.push_back(w.analysis()->lastJobSeconds() * 1000);
    if (ms.size() >= 12) break;
  }
  std::string each;
  for (double v : ms) each += " " + std::to_string((int)std::lround(v));
  std::fprintf(stderr, "  toggle latencies in order (ms, exclude/undo pairs):%s\n", each.c_str());
  report("cls, 32 samples: toggle to table and graph updated", stats(ms), "ms", 300, "6 Convs excluded and undone; 40 ms debounce included");
  report("  of which the worker's re-analysis", stats(worker), "ms", 0);
}

}  // namespace

// Issue 16: grouped layouts. A generated model of `blocks` x `perBlock` nodes without scopes
// (repeated-block grouping): grouping + layout, open to first paint in the window, and expanding
// distinct groups one after the other (each group's first expansion: its skeleton is built then).
void benchGrouped(int blocks, int perBlock, int runs, const QString& screenshot) {
  auto model = test::blockModel(blocks, perBlock, false);
  LayoutOptions options;
  {
    GraphView view;
    options = view.layoutOptions();
  }
  options.groupAbove = kDefaultGroupAbove;
  const std::string name = "generated " + std::to_string(blocks * perBlock) + "-node graph, " + std::to_string(blocks) + " blocks";
  std::vector<double> seconds;
  std::shared_ptr<const GraphLayout> layout;
  for (int k = 0; k < runs; ++k) {
    QElapsedTimer t;
    t.start();
    auto r = computeModelLayout(model, options);
    seconds.push_back(msSince(t) / 1000);
    if (!r.isOk() || !r.value()->grouping) {
      std::fprintf(stderr, "grouped layout failed or not grouped\n");
      return;
    }
    layout = r.value();
  }
  report(name + ": grouping + grouped layout", stats(seconds), "s", 2.0,
         std::to_string(layout->grouping->groups.size()) + " groups of " + std::to_string(layout->grouping->blockLength) +
             " nodes (repeated blocks), " + std::to_string(layout->items.size()) + " boxes shown");
  const OpenTiming open = openToFirstPaint(QStringLiteral("generated-blocks"), model);
  if (open.totalMs >= 0) report(name + ": open to first paint, grouped", stats({open.totalMs / 1000}), "s", 2.0);
  GraphView view;
  view.resize(1400, 900);
  view.setGraphLayout(layout);
  QImage img(view.size(), QImage::Format_ARGB32_Premultiplied);
  std::vector<double> expand, collapse, paint;
  for (int k = 0; k < std::max(5, runs * 3); ++k) {
    const int32_t group = (int32_t)((k * 37 + 11) % (int)layout->grouping->groups.size());
    const int item = view.graphLayout()->itemOfGroup[(size_t)group];
    QElapsedTimer t;
    t.start();
    view.setExpanded(item, true);
    expand.push_back(msSince(t));
    t.restart();
    view.render(&img);
    paint.push_back(msSince(t));
    t.restart();
    view.setExpanded(view.graphLayout()->itemOfGroup[(size_t)group], false);
    collapse.push_back(msSince(t));
  }
  report(name + ": expand one group (first time)", stats(expand), "ms", 100, "layout of the group, placement of the top level, edges, index");
  report(name + ": collapse it again", stats(collapse), "ms", 100);
  report(name + ": paint with the group open, 1400x900", stats(paint), "ms", 0);
  if (!screenshot.isEmpty()) {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.autosave()->setDirectory(QString());
    w.resize(1600, 1000);
    w.show();
    bool shown = false;
    QObject::connect(&w, &MainWindow::modelShown, &w, [&] { shown = true; });
    w.openModel(model, QStringLiteral("generated-50k-blocks"));
    waitFor([&] { return shown; }, 60000);
    auto* graph = w.findChild<GraphView*>(QStringLiteral("graphView"));
    graph->fitToWindow();
    waitFor([] { return false; }, 300);
    std::fprintf(stderr, "screenshot %s: %s\n", qPrintable(screenshot), w.grab().save(screenshot) ? "saved" : "not saved");
  }
}

// The zoo's large models as the workbench opens them: grouping + layout, boxes shown, groups.
void benchZooGrouped(const QString& zooDir) {
  for (const char* file : {"bert_encoder.onnx", "gpt_decoder.onnx", "swin_t.onnx", "resnet50.onnx"}) {
    const QString path = zooDir + QLatin1Char('/') + QLatin1String(file);
    auto model = loadModel(path.toStdString());
    if (!model) continue;
    LayoutOptions options;
    {
      GraphView view;
      options = view.layoutOptions();
    }
    options.groupAbove = kDefaultGroupAbove;
    QElapsedTimer t;
    t.start();
    auto r = computeModelLayout(model.value(), options);
    const double s = msSince(t) / 1000;
    if (!r) continue;
    const GraphLayout& L = *r.value();
    const std::string note = std::to_string(model.value()->graph.nodes.size()) + " nodes; " +
                             (L.grouping ? std::to_string(L.grouping->groups.size()) + " groups (" +
                                               (L.grouping->source == NodeGrouping::Source::Scopes ? "scopes" : "repeated blocks") + "), " +
                                               std::to_string(L.items.size()) + " boxes shown"
                                         : std::string("not grouped (at most ") + std::to_string(kDefaultGroupAbove) + " nodes)");
    report(std::string(file) + ": layout as opened", stats({s}), "s", 0, note);
  }
}

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeBench"));
  QCoreApplication::setApplicationName(QStringLiteral("qs_bench_gui"));
  QSettings().clear();
  int runs = 3;
  bool toggle = true, big = true, onlyGroups = false;
  QString modelsDir = QStringLiteral(QS_MODELS_DIR), screenshot50k;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--skip-toggle")) toggle = false;
    else if (!std::strcmp(argv[i], "--skip-50k")) big = false;
    else if (!std::strcmp(argv[i], "--models") && i + 1 < argc) modelsDir = QString::fromLocal8Bit(argv[++i]);
    else if (!std::strcmp(argv[i], "--only-groups")) onlyGroups = true;
    else if (!std::strcmp(argv[i], "--screenshot-50k") && i + 1 < argc) screenshot50k = QString::fromLocal8Bit(argv[++i]);
  }
  std::fprintf(stderr, "qs_bench_gui: Qt %s, platform %s, %d hardware threads\n", qVersion(), qPrintable(QGuiApplication::platformName()),
               QThread::idealThreadCount());

  if (onlyGroups) toggle = big = false;
  if (!onlyGroups) {
    benchOpenRec(modelsDir, runs);
    benchLayout(5000, runs, 1.0, nullptr);
  }
  benchGrouped(500, 100, runs, screenshot50k);
  benchZooGrouped(QStringLiteral(QS_ZOO_DIR));
  if (big) {
    std::shared_ptr<const GraphLayout> layout50k;
    benchLayout(50000, 1, 10.0, &layout50k);
    if (layout50k) benchPanning(layout50k);
    benchLayout(100000, 1, 0, nullptr);  // issue 6's size; no target
  }
  if (toggle) {
    QTemporaryDir tmp;
    const QString images = tmp.filePath(QStringLiteral("cls32"));
    test::writeTextImages(images.toStdString(), 32, 192, 48, 11);
    benchToggle(modelsDir, images);
  }

  std::printf("| measurement | median | min | max | p95 | n | target | met |\n|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : g_rows) {
    const int prec = r.unit == "s" ? 3 : 1;
    const std::string target = r.target > 0 ? "< " + QString::number(r.target).toStdString() + " " + r.unit : "";
    const char* met = r.target <= 0 ? "" : r.s.median < r.target ? "yes" : "no";
    std::printf("| %s | %.*f %s | %.*f | %.*f | %.*f | %zu | %s | %s |\n", r.what.c_str(), prec, r.s.median, r.unit.c_str(), prec,
                r.s.min, prec, r.s.max, prec, r.s.p95, r.s.n, target.c_str(), met);
  }
  for (const Row& r : g_rows)
    if (!r.note.empty()) std::printf("- %s: %s\n", r.what.c_str(), r.note.c_str());
  return 0;
}
