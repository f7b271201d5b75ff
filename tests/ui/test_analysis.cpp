// Offscreen tests of the analysis in the workbench: calibration through the worker (progress,
// cancel, errors in the data), the layer table against the core's numbers after a toggle, undo and
// redo, the graph's SNR colours and quantization points, the plots, auto-fallback, project files,
// export, and a rendered screenshot with results.
#include <QAbstractItemModelTester>
#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QUndoStack>
#include <cmath>
#include <set>
#include <qcustomplot.h>

#include "core/analysis/head_bias_correction.h"
#include "core/analysis/quant_session.h"
#include "core/analysis/weight_clip.h"
#include "core/export/quant_files.h"
#include "core/io/calibration_data.h"
#include "core/quant/quant_config.h"
#include "tests/support/text_images.h"
#include "tests/ui/export_helpers.h"
#include "tests/ui/window_parts.h"
#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/calibration_dialog.h"
#include "ui/export_dialog.h"
#include "ui/graph_view.h"
#include "ui/fallback_curve_plot.h"
#include "ui/main_window.h"
#include "ui/node_table_model.h"
#include "ui/plots_panel.h"
#include "ui/project_controller.h"
#include "ui/project_file.h"

using namespace qs;
using namespace qs::ui;

using qs::test::exportThroughDialog;
using qs::test::readAll;

namespace {

const char* const kClsModel = "ch_ppocr_mobile_v2.0_cls_infer.onnx";
QString modelFile(const char* name) { return QStringLiteral(QS_MODELS_DIR "/") + QLatin1String(name); }

AnalysisRequest clsRequest(const QString& folder, int samples) {
  AnalysisRequest r;
  r.data.path = folder.toStdString();
  r.data.maxSamples = samples;
  r.data.image.width = 192;  // cls takes 3x48x192 (its height and width are symbolic in the file)
  r.data.image.height = 48;
  r.data.image.mean = {0.5f, 0.5f, 0.5f};
  r.data.image.std = {0.5f, 0.5f, 0.5f};
  r.calibration.method = CalibMethod::Entropy;
  // The exact sweep: these tests compare every cell with a fresh session whose exclusions are
  // configured, and only the exact figure does not depend on the other nodes' states (the fast
  // estimate is computed from the graph-wise sums of the states the analysis ran with).
  r.sensitivityMethod = SensitivityMethod::Exact;
  return r;
}

bool openAndWait(MainWindow& w, const QString& path) {
  QSignalSpy shown(&w, &MainWindow::modelShown);
  w.openFile(path);
  return shown.wait(120000);
}

// Waits until no job runs and every requested state is in the results.
bool waitSettled(MainWindow& w, int timeoutMs = 120000) {
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < timeoutMs) {
    QTest::qWait(10);
    if (!w.analysis()->isBusy() && w.analysis()->unappliedStates().empty()) {
      QTest::qWait(60);  // past the debounce, in case a request is still queued
      if (!w.analysis()->isBusy() && w.analysis()->unappliedStates().empty()) return true;
    }
  }
  return false;
}

// NaN-aware equality: the table's sort value of a cell against the core's number.
bool sameNumber(double table, double core) {
  if (std::isnan(core)) return table == -std::numeric_limits<double>::max();
  return table == core;  // exactly: both come from the same accumulators
}

double cell(const NodeTableModel& m, NodeId id, int column) {
  return m.index(m.rowOfNode(id), column).data(NodeTableModel::SortRole).toDouble();
}

// Checks every analysis cell of the table against `r`.
void compareTable(const NodeTableModel& m, const AnalysisResult& r) {
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const NodeResult& n = r.nodes[i];
    const NodeId id = (NodeId)i;
    const QString where = QStringLiteral("node %1").arg(i);
    QVERIFY2(sameNumber(cell(m, id, NodeTableModel::GraphSnrColumn), n.hasGraphwise ? n.graphwise.snrDb : NAN), qPrintable(where));
    QVERIFY2(sameNumber(cell(m, id, NodeTableModel::LayerSnrColumn), n.hasLayerwise ? n.layerwise.snrDb : NAN), qPrintable(where));
    QVERIFY2(sameNumber(cell(m, id, NodeTableModel::SensitivityColumn), n.sensitivitySnrDb), qPrintable(where));
    QVERIFY2(sameNumber(cell(m, id, NodeTableModel::CosineColumn), n.hasGraphwise ? n.graphwise.cosine : NAN), qPrintable(where));
    QVERIFY2(sameNumber(cell(m, id, NodeTableModel::WeightSnrColumn), n.weightSnrDb), qPrintable(where));
    QVERIFY2(sameNumber(cell(m, id, NodeTableModel::ActivationSnrColumn), n.activationSnrDb), qPrintable(where));
    const QVariant check = m.index(m.rowOfNode(id), NodeTableModel::QuantizedColumn).data(Qt::CheckStateRole);
    if (r.plan.nodes[i].quantizable) QCOMPARE(check.toInt() == Qt::Checked, r.plan.nodes[i].quantized);
    else QVERIFY(!check.isValid());
  }
}

// The full analysis of a fresh session with `excluded` switched off by configuration.
std::shared_ptr<const AnalysisResult> freshAnalysis(std::shared_ptr<const Model> model, const AnalysisRequest& req,
                                                    const std::vector<std::string>& excluded) {
  QuantConfig cfg;
  for (const std::string& n : excluded) cfg.nodesToExclude.push_back(n + "$");
  AnalysisOptions o;
  o.calibration = req.calibration;
  o.sensitivity = req.sensitivity;
  o.sensitivityMethod = req.sensitivityMethod;
  auto s = QuantSession::create(model, cfg, o);
  if (!s) return nullptr;
  auto data = CalibrationData::open(*model, req.data);
  if (!data) return nullptr;
  std::shared_ptr<const CalibrationData> d(std::move(data).value());
  if (!(*s)->calibrate(*d)) return nullptr;
  // The default head weight scale search (weight_clip.h) as the workbench's run has it: layer-wise
  // on float inputs, so the exclusions of other nodes do not change what it finds.
  if (req.headWeightScale && req.calibration.mode == QuantMode::Int8 && !applyHeadWeightScale(**s, *d)) return nullptr;
  // The default head bias correction (head_bias_correction.h) after it, measured with the whole
  // quantized model of this session's plan.
  if (req.headBiasCorrection && req.calibration.mode == QuantMode::Int8 && !applyHeadBiasCorrection(**s, *d)) return nullptr;
  auto r = (*s)->analyze(d);
  return r ? *r : nullptr;
}

}  // namespace

class AnalysisTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_tmp;
  QString m_images4, m_images32, m_badImages;

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeTests"));
    QCoreApplication::setApplicationName(QStringLiteral("qs_ui_analysis_tests"));
    QSettings().clear();
    QVERIFY(m_tmp.isValid());
    m_images4 = m_tmp.filePath(QStringLiteral("cls4"));
    m_images32 = m_tmp.filePath(QStringLiteral("cls32"));
    m_badImages = m_tmp.filePath(QStringLiteral("bad"));
    test::writeTextImages(m_images4.toStdString(), 4, 192, 48, 7);
    test::writeTextImages(m_images32.toStdString(), 32, 192, 48, 11);
    QDir().mkpath(m_badImages);
    QFile bad(m_badImages + QStringLiteral("/broken.png"));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("\x89PNG\r\n\x1a\n this is not a PNG body");
    bad.close();
    if (!QFileInfo::exists(modelFile(kClsModel))) QSKIP("cls model missing: run scripts/setup.sh");
  }

  // Open cls, calibrate through the dialog's worker; results reach the table; a second run that
  // is cancelled mid-way keeps them; bad data shows one line in the dialog and keeps them too.
  void calibrateCancelAndErrors() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(openAndWait(w, modelFile(kClsModel)));
    CalibrationDialog* d = w.analysisActions()->calibrationDialog();
    d->setRequest(clsRequest(m_images4, 4));
    QSignalSpy started(w.analysis(), &AnalysisController::jobStarted);
    QSignalSpy progress(w.analysis(), &AnalysisController::progress);
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QSignalSpy results(w.analysis(), &AnalysisController::resultChanged);
    w.analysisActions()->showCalibrationDialog();
    QTest::mouseClick(d->calibrateButton(), Qt::LeftButton);
    QCOMPARE(started.count(), 1);
    QVERIFY(w.analysis()->isBusy());
    QVERIFY(d->cancelButton()->isEnabled());
    QVERIFY(calibrated.wait(180000));
    QVERIFY(progress.count() >= 3);  // the event loop ran while the worker did
    QVERIFY(!d->isVisible());         // closes on success
    auto first = w.analysis()->result();
    QVERIFY(first);
    QCOMPARE(first->samples, (int64_t)4);
    auto* m = test::part<NodeTableModel>(w, "nodeTableModel");
    QCOMPARE(m->result(), first);
    compareTable(*m, *first);
    QVERIFY(!test::part<QTableView>(w, "nodeTable")->isColumnHidden(NodeTableModel::GraphSnrColumn));
    int withSnr = 0;
    for (int r = 0; r < m->rowCount(); ++r)
      withSnr += !m->index(r, NodeTableModel::GraphSnrColumn).data().toString().isEmpty();
    QVERIFY(withSnr > 100);

    // Cancel mid-run: 32 samples with the sensitivity sweep take long enough.
    QSignalSpy cancelled(w.analysis(), &AnalysisController::cancelled);
    d->setRequest(clsRequest(m_images32, 32));
    QVERIFY(d->start());
    QVERIFY(progress.wait(60000));
    QTRY_VERIFY_WITH_TIMEOUT(progress.count() > 6, 60000);
    QTest::mouseClick(d->cancelButton(), Qt::LeftButton);
    QVERIFY(cancelled.wait(60000));
    QCOMPARE(w.analysis()->result(), first);
    QCOMPARE(m->result(), first);
    QCOMPARE(w.analysis()->request().data.path, m_images4.toStdString());
    compareTable(*m, *first);
    QVERIFY(d->calibrateButton()->isEnabled());

    // Errors in the data: one line in the dialog naming the path; results kept.
    QSignalSpy failed(w.analysis(), &AnalysisController::failed);
    AnalysisRequest missing = clsRequest(m_tmp.filePath(QStringLiteral("nowhere")), 4);
    d->setRequest(missing);
    QVERIFY(!d->start());
    QVERIFY2(d->errorText().contains(QStringLiteral("nowhere")) && d->errorText().contains(QStringLiteral("no such")),
             qPrintable(d->errorText()));
    d->setRequest(clsRequest(m_badImages, 4));
    QVERIFY(d->start());
    QVERIFY(failed.wait(60000));
    QVERIFY2(d->errorText().contains(QStringLiteral("broken.png")), qPrintable(d->errorText()));
    QVERIFY(!d->errorText().contains(QLatin1Char('\n')));
    QCOMPARE(w.analysis()->result(), first);
    // Random data: the warning is visible.
    d->sourceCombo()->setCurrentIndex(d->sourceCombo()->findData(CalibrationDialog::Random));
    d->show();
    QVERIFY(d->randomWarning()->isVisible());
    d->close();
  }

  // The calibration form fills the core's request: the method and mode through item data, what
  // the form does not show kept, and where nothing was changed the CLI's defaults (1/255 is no
  // number the scale box can show).
  void calibrationFormRoundTrips() {
    AnalysisController controller;
    CalibrationDialog d(&controller);
    QCOMPARE(d.request().data.image.scale, AnalysisRequest{}.data.image.scale);
    AnalysisRequest r = clsRequest(m_images4, 4);
    r.data.image.scale = 1.0f / 127.5f;
    r.data.batchSize = 2;
    r.calibration.method = CalibMethod::Percentile;
    r.calibration.percentile = 99.9;
    r.calibration.mode = QuantMode::Fp8;
    d.setRequest(r);
    const AnalysisRequest back = d.request();
    QCOMPARE(back.data.path, r.data.path);
    QCOMPARE(back.data.image.scale, r.data.image.scale);
    QVERIFY(back.data.image.mean == r.data.image.mean && back.data.image.std == r.data.image.std);
    QCOMPARE(back.data.batchSize, (int64_t)2);
    QVERIFY(back.calibration.method == CalibMethod::Percentile && back.calibration.mode == QuantMode::Fp8);
    QCOMPARE(back.calibration.percentile, 99.9);
  }

  // Issue 16: the status bar says how many batches the toggle cache keeps and what a toggle
  // recomputes; a session whose cache holds fewer batches than the data says so.
  void toggleCacheInStatusBar() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, modelFile(kClsModel)));
    AnalysisRequest req = clsRequest(m_images4, 4);
    req.calibration.method = CalibMethod::Max;
    req.sensitivityMethod = SensitivityMethod::Fast;
    req.cacheRssBound = 1.5;  // the bound is off by default (AnalysisRequest::cacheRssBound)
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(w.analysis()->calibrate(req));
    QVERIFY(calibrated.wait(180000));
    auto* label = test::part<QLabel>(w, "toggleCacheLabel");
    // How many of the four batches fit depends on the process's RSS (the bound): the label shows the session's.
    const std::shared_ptr<QuantSession> shown = w.analysis()->session();
    QVERIFY(shown->cachedBatches() >= 1);  // the 64 MiB floor holds at least one of cls's batches
    QCOMPARE(label->text(), toggleCacheSummary(*shown));
    QVERIFY2(label->text().startsWith(QStringLiteral("Toggle cache: %1 of 4 batches · ").arg(shown->cachedBatches())),
             qPrintable(label->text()));
    QVERIFY2(label->toolTip().contains(QStringLiteral("1.5 x (weights")), qPrintable(label->toolTip()));
    NodeId node = -1;
    for (NodeId id : w.current()->model->graph.topoOrder)
      if (w.analysis()->result()->plan.nodes[(size_t)id].quantized) node = id;
    QSignalSpy idle(w.analysis(), &AnalysisController::idle);
    w.analysis()->setDebounceMs(0);
    w.analysis()->requestStates({{node, false}});
    QVERIFY(idle.wait(60000));
    QVERIFY2(label->text().contains(QStringLiteral(" · last toggle ")), qPrintable(label->text()));

    // A session keeping one batch of four.
    std::shared_ptr<const Model> model = w.current()->model;
    auto opened = CalibrationData::open(*model, req.data);
    QVERIFY(opened);
    std::shared_ptr<const CalibrationData> data(std::move(opened).value());
    AnalysisOptions probe;
    probe.calibration = req.calibration;
    probe.sensitivityMethod = SensitivityMethod::Fast;
    auto p = QuantSession::create(model, {}, probe);
    QVERIFY(p && (*p)->calibrate(*data));
    AnalysisOptions o = probe;
    o.cacheBudgetBytes = (*p)->batchTableBytes() * 3 / 2;
    auto s = QuantSession::create(model, {}, o);
    QVERIFY(s && (*s)->calibrate(*data) && (*s)->analyze(data));
    QCOMPARE((*s)->cachedBatches(), (int64_t)1);
    QCOMPARE(toggleCacheSummary(**s), QStringLiteral("Toggle cache: 1 of 4 batches · toggles recompute 3 batches in full"));
    QCOMPARE(toggleCacheSummary(**s, 0.25),
             QStringLiteral("Toggle cache: 1 of 4 batches · toggles recompute 3 batches in full · last toggle 0.25 s"));
    QVERIFY2(toggleCacheDetails(**s).startsWith(QStringLiteral("Activations kept for toggles: ")), qPrintable(toggleCacheDetails(**s)));
  }

  // Toggling a checkbox gives exactly a fresh session's full analysis with that node excluded; undo
  // brings back the original numbers, redo the toggled ones. Context-menu op-type exclusion too.
  void toggleUndoRedoMatchCore() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, modelFile(kClsModel)));
    const AnalysisRequest req = clsRequest(m_images4, 4);
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(w.analysis()->calibrate(req));
    QVERIFY(calibrated.wait(180000));
    auto base = w.analysis()->result();
    const Graph& g = w.current()->model->graph;
    auto* m = test::part<NodeTableModel>(w, "nodeTableModel");
    auto* proxy = test::part<NodeFilterProxyModel>(w, "nodeProxyModel");
    auto* undo = test::part<QUndoStack>(w, "undoStack");
    QAbstractItemModelTester tester(m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester proxyTester(proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);

    // A quantized Conv in the middle of the graph.
    NodeId target = -1;
    const auto& order = g.topoOrder;
    for (size_t k = order.size() / 2; k < order.size() && target < 0; ++k)
      if (g.nodes[(size_t)order[k]].opType == "Conv" && base->plan.nodes[(size_t)order[k]].quantized) target = order[k];
    QVERIFY(target >= 0);
    const QModelIndex check = proxy->mapFromSource(m->index(m->rowOfNode(target), NodeTableModel::QuantizedColumn));
    QVERIFY(m->flags(m->index(m->rowOfNode(target), NodeTableModel::QuantizedColumn)) & Qt::ItemIsUserCheckable);
    QVERIFY(proxy->setData(check, Qt::Unchecked, Qt::CheckStateRole));
    QCOMPARE(check.data(Qt::CheckStateRole).toInt(), (int)Qt::Unchecked);  // shows the request at once
    QVERIFY(waitSettled(w));
    auto toggled = w.analysis()->result();
    QVERIFY(toggled != base);
    QVERIFY(!toggled->plan.nodes[(size_t)target].quantized);
    auto fresh = freshAnalysis(w.current()->model, req, {g.nodes[(size_t)target].name});
    QVERIFY(fresh);
    compareTable(*m, *fresh);
    QCOMPARE(undo->count(), 1);
    qInfo("toggle on cls (4 samples): %.0f ms from request to table and graph", w.analysisActions()->lastToggleLatencyMs());

    // The graph shows the excluded node differently and drops its quantization point.
    GraphView* view = test::part<GraphView>(w, "graphView");
    const int pointsToggled = view->quantizationPointCount();

    undo->undo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *base);
    QVERIFY(view->quantizationPointCount() > pointsToggled);
    undo->redo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *fresh);
    undo->undo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *base);

    // Several quick toggles are debounced into few re-analyses and still end exactly right.
    QSignalSpy jobs(w.analysis(), &AnalysisController::jobStarted);
    std::vector<NodeId> convs;
    for (NodeId id : order)
      if (g.nodes[(size_t)id].opType == "Conv" && base->plan.nodes[(size_t)id].quantized && convs.size() < 3) convs.push_back(id);
    for (NodeId id : convs) proxy->setData(proxy->mapFromSource(m->index(m->rowOfNode(id), NodeTableModel::QuantizedColumn)),
                                                        Qt::Unchecked, Qt::CheckStateRole);
    QVERIFY(waitSettled(w));
    QVERIFY(jobs.count() < (int)convs.size());
    std::vector<std::string> names;
    for (NodeId id : convs) names.push_back(g.nodes[(size_t)id].name);
    compareTable(*m, *freshAnalysis(w.current()->model, req, names));
    for (size_t k = 0; k < convs.size(); ++k) undo->undo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *base);

    // "Exclude every Conv node" from the graph's context menu: one undo step.
    const int before = undo->index();
    emit view->opTypeQuantizeRequested(QStringLiteral("Conv"), false);
    QVERIFY(waitSettled(w));
    QCOMPARE(undo->index(), before + 1);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].opType == "Conv") QVERIFY(!w.analysis()->result()->plan.nodes[i].quantized);
    undo->undo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *base);
  }

  // Colours by SNR, hatched exclusions, quantization points, the legend; the plots for a selected
  // node (histogram with clip ranges, scatter from a float pass), saved as PNG and PDF; a rendered
  // screenshot with several SNR colours.
  void graphPlotsAndScreenshot() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(openAndWait(w, modelFile(kClsModel)));
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(w.analysis()->calibrate(clsRequest(m_images4, 4)));
    QVERIFY(calibrated.wait(180000));
    GraphView* view = test::part<GraphView>(w, "graphView");
    auto* colour = test::part<QComboBox>(w, "colourCombo");
    QCOMPARE(view->colouring(), GraphView::Colouring::GraphwiseSnr);
    QVERIFY(view->quantizationPointCount() > 10);
    std::set<QRgb> fills;
    const auto& layout = *w.current()->layout;
    for (size_t i = 0; i < layout.items.size(); ++i)
      if (layout.items[i].kind == LayoutItem::Kind::Node) fills.insert(view->itemFill((int)i).rgb());
    QVERIFY2(fills.size() >= 5, qPrintable(QString::number(fills.size())));
    colour->setCurrentIndex(2);  // layer-wise: non-quantizable nodes are grey
    QCOMPARE(view->colouring(), GraphView::Colouring::LayerwiseSnr);
    bool greySeen = false;
    for (size_t i = 0; i < layout.items.size(); ++i)
      greySeen |= layout.items[i].kind == LayoutItem::Kind::Node && view->itemFill((int)i) == SnrScale::noValue();
    QVERIFY(greySeen);
    colour->setCurrentIndex(1);

    // Select a quantized Conv: histogram and scatter.
    const Graph& g = w.current()->model->graph;
    NodeId conv = -1;
    for (NodeId id : g.topoOrder)
      if (g.nodes[(size_t)id].opType == "Conv" && w.analysis()->result()->plan.nodes[(size_t)id].quantized) conv = id;
    w.selectNode(conv);
    PlotsPanel* plots = test::part<PlotsPanel>(w, "plotsPanel");
    QCOMPARE(plots->selectedNode(), conv);
    QVERIFY(plots->selectedTensor() != kNoValue);
    QVERIFY(plots->plot(PlotsPanel::HistogramTab)->graphCount() >= 5);  // histogram + 4 clip ranges
    QVERIFY(plots->plot(PlotsPanel::SnrTab)->graph(0)->dataCount() > 100);
    QSignalSpy scatter(plots, &PlotsPanel::scatterUpdated);
    plots->tabs()->setCurrentIndex(PlotsPanel::ScatterTab);
    QVERIFY(scatter.wait(60000));
    QVERIFY(plots->scatterPointCount() > 100);
    for (const char* name : {"snr.png", "snr.pdf"}) {
      const QString path = m_tmp.filePath(QLatin1String(name));
      QVERIFY(plots->savePlot(PlotsPanel::SnrTab, path));
      QVERIFY(QFileInfo(path).size() > 1000);
    }
    // Threshold: nodes below it.
    plots->setThreshold(1000);
    const auto below = plots->nodesBelowThreshold();
    QVERIFY(std::count(below.begin(), below.end(), 1) > 100);

    // Screenshot: the window with results, several SNR colours on screen.
    plots->tabs()->setCurrentIndex(PlotsPanel::SnrTab);
    view->fitToWindow();
    QTest::qWait(100);
    const QImage img = w.grab().toImage().convertToFormat(QImage::Format_RGB32);
    QVERIFY(!img.isNull());
    std::map<QRgb, int> counts;
    for (int y = 0; y < img.height(); ++y) {
      const QRgb* line = reinterpret_cast<const QRgb*>(img.constScanLine(y));
      for (int x = 0; x < img.width(); ++x) ++counts[line[x] | 0xff000000];
    }
    int coloursOnScreen = 0;
    for (QRgb c : fills)
      if (counts[c | 0xff000000] >= 20) ++coloursOnScreen;
    QVERIFY2(coloursOnScreen >= 3, qPrintable(QString::number(coloursOnScreen)));
    img.save(m_tmp.filePath(QStringLiteral("analysis-screenshot.png")));
  }

  // Auto-fallback excludes nodes as one undo step; a project saves and reopens the session; the
  // export writes its four files.
  void fallbackProjectAndExport() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, modelFile(kClsModel)));
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(w.analysis()->calibrate(clsRequest(m_images4, 4)));
    QVERIFY(calibrated.wait(180000));
    const double worst = w.analysis()->result()->worstOutputSnrDb();
    QSignalSpy fallback(w.analysis(), &AnalysisController::fallbackFinished);
    QVERIFY(w.analysis()->autoFallback(worst + 2));
    QVERIFY(fallback.wait(180000));
    const auto steps = fallback.first().at(0).value<std::vector<FallbackStep>>();
    QVERIFY(!steps.empty());
    QVERIFY(w.analysis()->result()->worstOutputSnrDb() > worst);
    for (const FallbackStep& s : steps) QVERIFY(!w.analysis()->result()->plan.nodes[(size_t)s.excluded].quantized);
    QCOMPARE(test::part<QUndoStack>(w, "undoStack")->count(), 1);
    auto afterFallback = w.analysis()->result();

    // Project round trip.
    const QString project = m_tmp.filePath(QStringLiteral("cls.qsproj"));
    QVERIFY(w.projects()->save(project));
    MainWindow w2;
    w2.setErrorDialogsEnabled(false);
    QSignalSpy calibrated2(w2.analysis(), &AnalysisController::calibrated);
    QVERIFY(w2.projects()->open(project));
    QVERIFY(calibrated2.wait(180000));
    QVERIFY(waitSettled(w2));
    QCOMPARE(w2.analysis()->requestedStates(), w.analysis()->requestedStates());
    compareTable(*test::part<NodeTableModel>(w2, "nodeTableModel"), *afterFallback);
    Project p;
    QString error;
    QVERIFY(!projectFromJson("{\"nope\": 1}", project, p, error));
    QVERIFY(error.startsWith(project));

    // Export: the four files, and quant_cfg.json records the fallback's exclusions by name.
    const QString out = m_tmp.filePath(QStringLiteral("export"));
    QStringList written;
    QVERIFY(exportThroughDialog(w, out, &written));
    QCOMPARE(written.size(), 4);
    for (const char* f : {"quantized.onnx", "quant_cfg.json", "calibration.cache", "report.json"})
      QVERIFY2(QFileInfo(out + QLatin1Char('/') + QLatin1String(f)).size() > 0, f);
    auto saved = readQuantConfig((out + QStringLiteral("/quant_cfg.json")).toStdString());
    QVERIFY2(saved.isOk(), saved.isOk() ? "" : saved.status().message().c_str());
    const Graph& g = w.current()->model->graph;
    for (const FallbackStep& s : steps) {
      const std::string pattern = exactNamePattern(g.nodes[(size_t)s.excluded].name);
      QVERIFY2(std::count(saved->config.nodesToExclude.begin(), saved->config.nodesToExclude.end(), pattern) == 1, pattern.c_str());
    }

    // The curve in the plots panel: every measured point (past the target too), the model at the
    // chosen one; a click on point 0 quantizes the curve's nodes again (one undo step) and gives
    // the figure the fallback measured there; undo brings back the chosen point.
    auto* plot = test::part<PlotsPanel>(w, "plotsPanel")->fallbackCurvePlot();
    const auto curve = w.analysis()->fallbackCurve();
    QVERIFY(curve);
    QCOMPARE((int)curve->chosenSteps().size(), (int)steps.size());
    QVERIFY(curve->steps.size() >= steps.size());
    QCOMPARE(plot->pointCount(), (int)curve->steps.size() + 1);
    QCOMPARE(plot->currentPoint(), curve->chosen);
    emit plot->pointClicked(0);
    QVERIFY(waitSettled(w));
    for (const FallbackStep& s : curve->steps) QVERIFY(w.analysis()->result()->plan.nodes[(size_t)s.excluded].quantized);
    QVERIFY(std::fabs(w.analysis()->result()->worstOutputSnrDb() - curve->worstSnrDb(0)) < 1e-6);
    QCOMPARE(plot->currentPoint(), 0);
    QCOMPARE(test::part<QUndoStack>(w, "undoStack")->count(), 2);
    test::part<QUndoStack>(w, "undoStack")->undo();
    QVERIFY(waitSettled(w));
    QCOMPARE(plot->currentPoint(), curve->chosen);
    QVERIFY(std::fabs(w.analysis()->result()->worstOutputSnrDb() - curve->worstSnrDb(curve->chosen)) < 1e-6);
  }

  // The workbench's Export and `quantscope export` write the same bytes for the same settings: one
  // request type, one pipeline and one bundle builder behind both.
  void guiAndCliExportsAreIdentical() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, modelFile(kClsModel)));
    AnalysisRequest request = clsRequest(m_images4, -1);  // what the flags below say, the rest at the CLI's defaults
    request.sensitivityMethod = AnalysisRequest{}.sensitivityMethod;
    request.calibration.method = CalibMethod::Max;
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(w.analysis()->calibrate(request));
    QVERIFY(calibrated.wait(180000));
    const QString gui = m_tmp.filePath(QStringLiteral("export-gui"));
    QStringList written;
    QVERIFY(exportThroughDialog(w, gui, &written));

    const QString cli = m_tmp.filePath(QStringLiteral("export-cli"));
    QProcess quantscope;
    quantscope.start(QStringLiteral(QS_BINARY),
                     {QStringLiteral("export"), QString::fromStdString(w.analysis()->request().modelPath),
                      QStringLiteral("--calibration-data"), m_images4, QStringLiteral("--image-size"), QStringLiteral("192x48"),
                      QStringLiteral("--mean"), QStringLiteral("0.5,0.5,0.5"), QStringLiteral("--std"), QStringLiteral("0.5,0.5,0.5"),
                      QStringLiteral("--calibration-method"), QStringLiteral("max"), QStringLiteral("--output-dir"), cli});
    QVERIFY(quantscope.waitForFinished(300000));
    QVERIFY2(quantscope.exitStatus() == QProcess::NormalExit && quantscope.exitCode() == 0,
             quantscope.readAllStandardError().constData());

    const QStringList files = QDir(gui).entryList(QDir::Files, QDir::Name);
    QCOMPARE(files, QDir(cli).entryList(QDir::Files, QDir::Name));
    QCOMPARE(files, (QStringList{QStringLiteral("calibration.cache"), QStringLiteral("quant_cfg.json"), QStringLiteral("quantized.onnx"),
                                 QStringLiteral("report.json")}));
    for (const QString& f : files) {
      const QByteArray a = readAll(gui + QLatin1Char('/') + f), b = readAll(cli + QLatin1Char('/') + f);
      qsizetype at = 0;
      while (at < std::min(a.size(), b.size()) && a[at] == b[at]) ++at;
      QVERIFY2(a == b, qPrintable(QStringLiteral("%1: %2 and %3 bytes, first difference at byte %4: GUI '%5', CLI '%6'")
                                      .arg(f)
                                      .arg(a.size())
                                      .arg(b.size())
                                      .arg(at)
                                      .arg(QString::fromUtf8(a.mid(std::max<qsizetype>(0, at - 40), 80)),
                                           QString::fromUtf8(b.mid(std::max<qsizetype>(0, at - 40), 80)))));
    }
  }

  // Toggle latency with 32 calibration samples (reported, never a pass/fail threshold).
  void toggleLatency32Samples() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, modelFile(kClsModel)));
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(w.analysis()->calibrate(clsRequest(m_images32, 32)));
    QVERIFY(calibrated.wait(300000));
    const Graph& g = w.current()->model->graph;
    auto* m = test::part<NodeTableModel>(w, "nodeTableModel");
    auto* proxy = test::part<NodeFilterProxyModel>(w, "nodeProxyModel");
    auto* undo = test::part<QUndoStack>(w, "undoStack");
    std::vector<double> ms;
    int n = 0;
    for (NodeId id : g.topoOrder) {
      if (g.nodes[(size_t)id].opType != "Conv" || n >= 5) continue;
      if (n++ % 2) continue;  // spread over the graph
      const QModelIndex check = proxy->mapFromSource(m->index(m->rowOfNode(id), NodeTableModel::QuantizedColumn));
      proxy->setData(check, Qt::Unchecked, Qt::CheckStateRole);
      QVERIFY(waitSettled(w));
      ms.push_back(w.analysisActions()->lastToggleLatencyMs());
      undo->undo();
      QVERIFY(waitSettled(w));
      ms.push_back(w.analysisActions()->lastToggleLatencyMs());
    }
    QString line;
    for (double v : ms) line += QStringLiteral(" %1").arg(v, 0, 'f', 0);
    qInfo("toggle latency on cls, 32 samples, request to table and graph (ms, 40 ms debounce included):%s", qPrintable(line));
  }
};

int runAnalysisTests(int argc, char** argv) {
  AnalysisTest t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_analysis.moc"
