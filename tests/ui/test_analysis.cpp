// Offscreen tests of the analysis in the workbench: calibration through the worker (progress,
// cancel, errors in the data), the layer table against the core's numbers after a toggle, undo and
// redo, the graph's SNR colours and quantization points, the plots, auto-fallback, project files,
// export, and a rendered screenshot with results.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLineEdit>
#include <QProgressBar>
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

#include "core/analysis/quant_session.h"
#include "core/io/calibration_data.h"
#include "tests/support/text_images.h"
#include "ui/analysis_controller.h"
#include "ui/calibration_dialog.h"
#include "ui/export_dialog.h"
#include "ui/graph_view.h"
#include "ui/main_window.h"
#include "ui/node_table_model.h"
#include "ui/plots_panel.h"
#include "ui/project_file.h"

using namespace qs;
using namespace qs::ui;

namespace {

const char* const kClsModel = "ch_ppocr_mobile_v2.0_cls_infer.onnx";
QString modelFile(const char* name) { return QStringLiteral(QS_MODELS_DIR "/") + QLatin1String(name); }

CalibrationRequest clsRequest(const QString& folder, int samples) {
  CalibrationRequest r;
  r.data.path = folder.toStdString();
  r.data.maxSamples = samples;
  r.data.image.width = 192;  // cls takes 3x48x192 (its height and width are symbolic in the file)
  r.data.image.height = 48;
  r.data.image.mean = {0.5f, 0.5f, 0.5f};
  r.data.image.std = {0.5f, 0.5f, 0.5f};
  r.calibration.method = CalibMethod::Entropy;
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
std::shared_ptr<const AnalysisResult> freshAnalysis(std::shared_ptr<const Model> model, const CalibrationRequest& req,
                                                    const std::vector<std::string>& excluded) {
  QuantConfig cfg;
  for (const std::string& n : excluded) cfg.nodesToExclude.push_back(n + "$");
  AnalysisOptions o;
  o.calibration = req.calibration;
  auto s = QuantSession::create(model, cfg, o);
  if (!s) return nullptr;
  auto data = CalibrationData::open(*model, req.data);
  if (!data) return nullptr;
  std::shared_ptr<const CalibrationData> d(std::move(data).value());
  if (!(*s)->calibrate(*d)) return nullptr;
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
    CalibrationDialog* d = w.calibrationDialog();
    d->setRequest(clsRequest(m_images4, 4));
    QSignalSpy started(w.analysis(), &AnalysisController::jobStarted);
    QSignalSpy progress(w.analysis(), &AnalysisController::progress);
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QSignalSpy results(w.analysis(), &AnalysisController::resultChanged);
    w.showCalibrationDialog();
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
    NodeTableModel* m = w.nodeTableModel();
    QCOMPARE(m->result(), first);
    compareTable(*m, *first);
    QVERIFY(!w.nodeTable()->isColumnHidden(NodeTableModel::GraphSnrColumn));
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
    CalibrationRequest missing = clsRequest(m_tmp.filePath(QStringLiteral("nowhere")), 4);
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
    d->sourceCombo()->setCurrentIndex(CalibrationDialog::Random);
    d->show();
    QVERIFY(d->randomWarning()->isVisible());
    d->close();
  }

  // Toggling a checkbox gives exactly a fresh session's full analysis with that node excluded; undo
  // brings back the original numbers, redo the toggled ones. Context-menu op-type exclusion too.
  void toggleUndoRedoMatchCore() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, modelFile(kClsModel)));
    const CalibrationRequest req = clsRequest(m_images4, 4);
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(w.analysis()->calibrate(req));
    QVERIFY(calibrated.wait(180000));
    auto base = w.analysis()->result();
    const Graph& g = w.current()->model->graph;
    NodeTableModel* m = w.nodeTableModel();
    QAbstractItemModelTester tester(m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester proxyTester(w.nodeProxyModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);

    // A quantized Conv in the middle of the graph.
    NodeId target = -1;
    const auto& order = g.topoOrder;
    for (size_t k = order.size() / 2; k < order.size() && target < 0; ++k)
      if (g.nodes[(size_t)order[k]].opType == "Conv" && base->plan.nodes[(size_t)order[k]].quantized) target = order[k];
    QVERIFY(target >= 0);
    const QModelIndex check = w.nodeProxyModel()->mapFromSource(m->index(m->rowOfNode(target), NodeTableModel::QuantizedColumn));
    QVERIFY(m->flags(m->index(m->rowOfNode(target), NodeTableModel::QuantizedColumn)) & Qt::ItemIsUserCheckable);
    QVERIFY(w.nodeProxyModel()->setData(check, Qt::Unchecked, Qt::CheckStateRole));
    QCOMPARE(check.data(Qt::CheckStateRole).toInt(), (int)Qt::Unchecked);  // shows the request at once
    QVERIFY(waitSettled(w));
    auto toggled = w.analysis()->result();
    QVERIFY(toggled != base);
    QVERIFY(!toggled->plan.nodes[(size_t)target].quantized);
    auto fresh = freshAnalysis(w.current()->model, req, {g.nodes[(size_t)target].name});
    QVERIFY(fresh);
    compareTable(*m, *fresh);
    QCOMPARE(w.undoStack()->count(), 1);
    qInfo("toggle on cls (4 samples): %.0f ms from request to table and graph", w.lastToggleLatencyMs());

    // The graph shows the excluded node differently and drops its quantization point.
    GraphView* view = w.graphView();
    const int pointsToggled = view->quantizationPointCount();

    w.undoStack()->undo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *base);
    QVERIFY(view->quantizationPointCount() > pointsToggled);
    w.undoStack()->redo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *fresh);
    w.undoStack()->undo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *base);

    // Several quick toggles are debounced into few re-analyses and still end exactly right.
    QSignalSpy jobs(w.analysis(), &AnalysisController::jobStarted);
    std::vector<NodeId> convs;
    for (NodeId id : order)
      if (g.nodes[(size_t)id].opType == "Conv" && base->plan.nodes[(size_t)id].quantized && convs.size() < 3) convs.push_back(id);
    for (NodeId id : convs) w.nodeProxyModel()->setData(w.nodeProxyModel()->mapFromSource(m->index(m->rowOfNode(id), NodeTableModel::QuantizedColumn)),
                                                        Qt::Unchecked, Qt::CheckStateRole);
    QVERIFY(waitSettled(w));
    QVERIFY(jobs.count() < (int)convs.size());
    std::vector<std::string> names;
    for (NodeId id : convs) names.push_back(g.nodes[(size_t)id].name);
    compareTable(*m, *freshAnalysis(w.current()->model, req, names));
    for (size_t k = 0; k < convs.size(); ++k) w.undoStack()->undo();
    QVERIFY(waitSettled(w));
    compareTable(*m, *base);

    // "Exclude every Conv node" from the graph's context menu: one undo step.
    const int before = w.undoStack()->index();
    emit view->opTypeQuantizeRequested(QStringLiteral("Conv"), false);
    QVERIFY(waitSettled(w));
    QCOMPARE(w.undoStack()->index(), before + 1);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].opType == "Conv") QVERIFY(!w.analysis()->result()->plan.nodes[i].quantized);
    w.undoStack()->undo();
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
    GraphView* view = w.graphView();
    QCOMPARE(view->colouring(), GraphView::Colouring::GraphwiseSnr);
    QVERIFY(view->quantizationPointCount() > 10);
    std::set<QRgb> fills;
    const auto& layout = *w.current()->layout;
    for (size_t i = 0; i < layout.items.size(); ++i)
      if (layout.items[i].kind == LayoutItem::Kind::Node) fills.insert(view->itemFill((int)i).rgb());
    QVERIFY2(fills.size() >= 5, qPrintable(QString::number(fills.size())));
    w.colourCombo()->setCurrentIndex(2);  // layer-wise: non-quantizable nodes are grey
    QCOMPARE(view->colouring(), GraphView::Colouring::LayerwiseSnr);
    bool greySeen = false;
    for (size_t i = 0; i < layout.items.size(); ++i)
      greySeen |= layout.items[i].kind == LayoutItem::Kind::Node && view->itemFill((int)i) == SnrScale::noValue();
    QVERIFY(greySeen);
    w.colourCombo()->setCurrentIndex(1);

    // Select a quantized Conv: histogram and scatter.
    const Graph& g = w.current()->model->graph;
    NodeId conv = -1;
    for (NodeId id : g.topoOrder)
      if (g.nodes[(size_t)id].opType == "Conv" && w.analysis()->result()->plan.nodes[(size_t)id].quantized) conv = id;
    w.selectNode(conv);
    PlotsPanel* plots = w.plotsPanel();
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
    QCOMPARE(w.undoStack()->count(), 1);
    auto afterFallback = w.analysis()->result();

    // Project round trip.
    const QString project = m_tmp.filePath(QStringLiteral("cls.qsproj"));
    QVERIFY(w.saveProject(project));
    MainWindow w2;
    w2.setErrorDialogsEnabled(false);
    QSignalSpy calibrated2(w2.analysis(), &AnalysisController::calibrated);
    QVERIFY(w2.openProject(project));
    QVERIFY(calibrated2.wait(180000));
    QVERIFY(waitSettled(w2));
    QCOMPARE(w2.analysis()->requestedStates(), w.analysis()->requestedStates());
    compareTable(*w2.nodeTableModel(), *afterFallback);
    Project p;
    QString error;
    QVERIFY(!projectFromJson("{\"nope\": 1}", project, p, error));
    QVERIFY(error.startsWith(project));

    // Export.
    QSignalSpy exported(&w, &MainWindow::analysisShown);
    ExportInput in;
    in.modelPath = w.current()->path.toStdString();
    in.model = w.current()->model;
    in.result = w.analysis()->result();
    in.session = w.analysis()->session();
    in.data = w.analysis()->data();
    ExportDialog dialog(in);
    const QString out = m_tmp.filePath(QStringLiteral("export"));
    dialog.folderEdit()->setText(out);
    QSignalSpy done(&dialog, &ExportDialog::exported);
    QSignalSpy failed(&dialog, &ExportDialog::exportFailed);
    dialog.start();
    QVERIFY(done.wait(120000) || !failed.isEmpty());
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(0).toString()));
    for (const char* f : {"quantized.onnx", "quant_cfg.json", "calibration.cache", "report.json"})
      QVERIFY2(QFileInfo(out + QLatin1Char('/') + QLatin1String(f)).size() > 0, f);
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
    NodeTableModel* m = w.nodeTableModel();
    std::vector<double> ms;
    int n = 0;
    for (NodeId id : g.topoOrder) {
      if (g.nodes[(size_t)id].opType != "Conv" || n >= 5) continue;
      if (n++ % 2) continue;  // spread over the graph
      const QModelIndex check = w.nodeProxyModel()->mapFromSource(m->index(m->rowOfNode(id), NodeTableModel::QuantizedColumn));
      w.nodeProxyModel()->setData(check, Qt::Unchecked, Qt::CheckStateRole);
      QVERIFY(waitSettled(w));
      ms.push_back(w.lastToggleLatencyMs());
      w.undoStack()->undo();
      QVERIFY(waitSettled(w));
      ms.push_back(w.lastToggleLatencyMs());
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
