// Offscreen tests of the remedy switches that the calibration dialog's "Remedies and precision" box
// (ui/remedy_options.h) adds beside equalization and bias correction: SmoothQuant (alpha searched or
// fixed), weight clip search, depthwise input equalization and integer Convs. Each switch, ticked
// in the dialog, runs what the CLI's flag runs: the GUI session's figures equal a core run
// (runAnalysis, the CLI's pipeline) of a request built from scratch with that flag; the layer
// table's remedy columns and its "Remedy" column show what the remedy did per node; the export
// equals `quantscope export` with the same flags byte for byte; projects keep the keys, and old
// projects without them load with the CLI's defaults.
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <random>

#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"
#include "tests/ui/export_helpers.h"
#include "tests/ui/window_parts.h"
#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/calibration_dialog.h"
#include "ui/export_dialog.h"
#include "ui/main_window.h"
#include "ui/node_table_model.h"
#include "ui/plots_panel.h"
#include "ui/project_file.h"
#include "ui/remedy_notes.h"
#include "ui/remedy_options.h"
#include "ui/remedy_settings.h"

using namespace qs;
using namespace qs::ui;

using qs::test::exportThroughDialog;
using qs::test::readAll;

namespace {

QString clsModel() { return QStringLiteral(QS_MODELS_DIR "/ch_ppocr_mobile_v2.0_cls_infer.onnx"); }
QString recModel() { return QStringLiteral(QS_MODELS_DIR "/ch_PP-OCRv4_rec_infer.onnx"); }

// Text lines in `folder` at `w` x `h`, 0.5/0.5 normalization, max calibration (the quickest),
// sensitivity off; the CLI's defaults otherwise.
AnalysisRequest imageRequest(const QString& folder, int w, int h) {
  AnalysisRequest r;
  r.data.path = folder.toStdString();
  r.data.image.width = w;
  r.data.image.height = h;
  r.data.image.mean = {0.5f, 0.5f, 0.5f};
  r.data.image.std = {0.5f, 0.5f, 0.5f};
  r.calibration.method = CalibMethod::Max;
  r.sensitivity = false;
  return r;
}

// x [4, 16, 32] -> LayerNormalization (two outlier channels in its scale) -> MatMul q, MatMul k ->
// Add -> y: one SmoothQuant group (tests/export/test_remedies_smooth.cpp has the same shape).
QString writeLnModel(const QString& dir) {
  std::mt19937 rng(5);
  constexpr int64_t kC = 32, kN = 24;
  test::OnnxBuilder b(17);
  b.input("x", {4, 16, kC}).output("y", {4, 16, kN});
  std::vector<float> gamma = test::randomValues(kC, rng, 0.5f, 1.5f);
  gamma[3] = 40.f;
  gamma[17] = -25.f;
  b.initializer("gamma", {kC}, gamma);
  b.initializer("beta", {kC}, test::randomValues(kC, rng, -0.1f, 0.1f));
  b.initializer("wq", {kC, kN}, test::randomValues(kC * kN, rng, -0.3f, 0.3f));
  b.initializer("wk", {kC, kN}, test::randomValues(kC * kN, rng, -0.3f, 0.3f));
  auto& ln = b.node("LayerNormalization", {"x", "gamma", "beta"}, {"h"}, "ln");
  test::OnnxBuilder::attrInt(ln, "axis", -1);
  b.node("MatMul", {"h", "wq"}, {"q"}, "q_proj");
  b.node("MatMul", {"h", "wk"}, {"k"}, "k_proj");
  b.node("Add", {"q", "k"}, {"y"}, "add");
  const QString path = dir + QStringLiteral("/ln.onnx");
  b.save(path.toStdString());
  return path;
}

bool openAndWait(MainWindow& w, const QString& path) {
  QSignalSpy shown(&w, &MainWindow::modelShown);
  w.openFile(path);
  return shown.wait(120000);
}

bool calibrateThroughDialog(MainWindow& w, const AnalysisRequest& base, const std::function<void(RemedyOptions&)>& setUp) {
  CalibrationDialog* d = w.analysisActions()->calibrationDialog();
  d->setRequest(base);
  setUp(*d->remedyOptions());
  QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
  QSignalSpy failed(w.analysis(), &AnalysisController::failed);
  QTest::mouseClick(d->calibrateButton(), Qt::LeftButton);
  for (int i = 0; i < 18000 && calibrated.isEmpty() && failed.isEmpty(); ++i) QTest::qWait(10);
  if (!failed.isEmpty()) qWarning("calibration failed: %s", qPrintable(failed.first().at(1).toString()));
  return !calibrated.isEmpty();
}

// The CLI's run of the GUI's data and method, with the remedy flags `flags` sets on a fresh request.
std::shared_ptr<const AnalysisRun> coreRun(const QString& model, const AnalysisRequest& gui, const std::function<void(AnalysisRequest&)>& flags) {
  AnalysisRequest r;
  r.modelPath = model.toStdString();
  r.data = gui.data;
  r.calibration.method = gui.calibration.method;
  r.sensitivity = false;
  r.keepForToggles = false;  // as finishAnalysisOptions() sets it
  flags(r);
  auto run = runAnalysis(r);
  if (!run) qWarning("core run failed: %s", run.status().message().c_str());
  return run ? std::make_shared<const AnalysisRun>(std::move(run).value()) : nullptr;
}

// The GUI's result equals the core run's, per node (graph-wise and layer-wise SNR) and per output.
bool sameFigures(const AnalysisResult& gui, const AnalysisResult& core) {
  if (gui.nodes.size() != core.nodes.size() || gui.outputs.size() != core.outputs.size()) return false;
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b || std::abs(a - b) < 1e-9; };
  for (size_t i = 0; i < gui.nodes.size(); ++i) {
    const NodeResult &a = gui.nodes[i], &b = core.nodes[i];
    if (a.hasGraphwise != b.hasGraphwise || a.hasLayerwise != b.hasLayerwise) return false;
    if (a.hasGraphwise && !same(a.graphwise.snrDb, b.graphwise.snrDb)) return false;
    if (a.hasLayerwise && !same(a.layerwise.snrDb, b.layerwise.snrDb)) return false;
  }
  for (size_t i = 0; i < gui.outputs.size(); ++i)
    if (!same(gui.outputs[i].metrics.snrDb, core.outputs[i].metrics.snrDb)) return false;
  return true;
}

QString noteOf(const NodeTableModel& m, const Graph& g, const std::string& name) {
  for (NodeId id = 0; id < (NodeId)g.nodes.size(); ++id)
    if (g.nodes[(size_t)id].name == name) return m.index(m.rowOfNode(id), NodeTableModel::RemedyNoteColumn).data().toString();
  return QStringLiteral("(no node %1)").arg(QString::fromStdString(name));
}

}  // namespace

class RemedySwitchTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_tmp;
  QString m_cls, m_rec;

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeTests"));
    QCoreApplication::setApplicationName(QStringLiteral("qs_ui_remedy_switch_tests"));
    QSettings().clear();
    QVERIFY(m_tmp.isValid());
    m_cls = m_tmp.filePath(QStringLiteral("cls4"));
    test::writeTextImages(m_cls.toStdString(), 4, 192, 48, 7);
    m_rec = m_tmp.filePath(QStringLiteral("rec1"));
    test::writeTextImages(m_rec.toStdString(), 1, 320, 48, 11);
  }

  // The new switches start at the CLI's defaults (SmoothQuant and weight clip search off, depthwise
  // equalization and integer Convs on), map onto the request and back; the alpha box is for
  // SmoothQuant only, an alpha alone turns it on (as --smoothquant-alpha alone does), and the
  // int8-only switches are disabled for fp8.
  void formMapsOntoTheRequest() {
    RemedyOptions box;
    AnalysisRequest r;
    r.smoothQuant = r.weightClipSearch = true;
    r.depthwiseEqualize = r.integerConv = r.headWeightScale = false;
    r.headBiasCorrection = true;
    r.depthwiseSmooth = true;
    r.calibrationRefine.passes = 3;
    r.smoothQuantAlpha = 0.3;
    box.apply(r);
    const AnalysisRequest defaults;
    QCOMPARE(r.smoothQuant, defaults.smoothQuant);
    QVERIFY(std::isnan(r.smoothQuantAlpha));
    QCOMPARE(r.weightClipSearch, defaults.weightClipSearch);
    QCOMPARE(r.depthwiseEqualize, defaults.depthwiseEqualize);
    QCOMPARE(r.integerConv, defaults.integerConv);
    QVERIFY(r.headWeightScale && box.headWeightScaleBox()->isChecked());  // on by default
    QVERIFY(!r.headBiasCorrection && !box.headBiasCorrectionBox()->isChecked());  // off by default
    QCOMPARE(r.depthwiseSmooth, defaults.depthwiseSmooth);
    QCOMPARE(r.calibrationRefine.passes, defaults.calibrationRefine.passes);
    QVERIFY(!box.smoothQuantAlphaBox()->isEnabled());
    QCOMPARE(box.smoothQuantAlphaBox()->text(), QStringLiteral("alpha searched per layer"));

    box.smoothQuantBox()->setChecked(true);
    QVERIFY(box.smoothQuantAlphaBox()->isEnabled());
    box.apply(r);
    QVERIFY(r.smoothQuant && std::isnan(r.smoothQuantAlpha));  // searched
    box.smoothQuantAlphaBox()->setValue(0.5);
    box.weightClipBox()->setChecked(true);
    box.depthwiseEqualizeBox()->setChecked(false);
    box.integerConvBox()->setChecked(false);
    box.headWeightScaleBox()->setChecked(false);
    box.headBiasCorrectionBox()->setChecked(true);
    box.depthwiseSmoothBox()->setChecked(true);
    box.calibrationRefineBox()->setValue(2);
    box.apply(r);
    QVERIFY(!r.headWeightScale && r.headBiasCorrection);
    QJsonObject saved;
    writeRemedySettings(r, saved);
    QCOMPARE(saved.value(QStringLiteral("head_weight_scale")), QJsonValue(false));
    QCOMPARE(saved.value(QStringLiteral("head_bias_correction")), QJsonValue(true));
    AnalysisRequest reread;
    QString error;
    QVERIFY(readRemedySettings(saved, QStringLiteral("p.qsproj"), reread, error));
    QVERIFY(!reread.headWeightScale && reread.headBiasCorrection);
    QJsonObject atDefaults;  // on, the default, is not written (older projects read as on)
    writeRemedySettings(AnalysisRequest{}, atDefaults);
    QVERIFY(!atDefaults.contains(QStringLiteral("head_weight_scale")));
    QVERIFY(!atDefaults.contains(QStringLiteral("head_bias_correction")));
    QCOMPARE(r.calibrationRefine.passes, 2);
    QVERIFY(r.smoothQuant && r.weightClipSearch && !r.depthwiseEqualize && !r.integerConv && r.depthwiseSmooth);
    QCOMPARE(r.smoothQuantAlpha, 0.5);
    box.smoothQuantBox()->setChecked(false);
    box.apply(r);
    QVERIFY(!r.smoothQuant && std::isnan(r.smoothQuantAlpha));

    AnalysisRequest alphaAlone;
    alphaAlone.smoothQuantAlpha = 0.7;
    RemedyOptions again;
    again.setRequest(alphaAlone);
    QVERIFY(again.smoothQuantBox()->isChecked() && again.smoothQuantAlphaBox()->isEnabled());
    AnalysisRequest back;
    again.apply(back);
    QVERIFY(back.smoothQuant);
    QCOMPARE(back.smoothQuantAlpha, 0.7);

    MainWindow w;
    CalibrationDialog* dialog = w.analysisActions()->calibrationDialog();
    AnalysisRequest fp8;
    fp8.calibration.mode = QuantMode::Fp8;
    dialog->setRequest(fp8);
    RemedyOptions* o = dialog->remedyOptions();
    QVERIFY(!o->depthwiseEqualizeBox()->isEnabled() && !o->integerConvBox()->isEnabled());
    QVERIFY(!o->depthwiseSmoothBox()->isEnabled() && !o->headWeightScaleBox()->isEnabled());
    QVERIFY(!o->headBiasCorrectionBox()->isEnabled());
    QVERIFY(o->smoothQuantBox()->isEnabled() && o->weightClipBox()->isEnabled());
    dialog->setRequest(AnalysisRequest{});
    QVERIFY(o->depthwiseEqualizeBox()->isEnabled() && o->integerConvBox()->isEnabled() && o->depthwiseSmoothBox()->isEnabled());
  }

  // Weight clip search on cls: the GUI's figures are the CLI's with --weight-clip-search (its
  // report.json and quantized.onnx equal the GUI export's byte for byte), the before/after columns
  // and the SNR plot's no-remedies curve appear, and the "Remedy" column names the clipped nodes
  // (and only them). Integer Convs off rides along (`--integer-conv off`).
  void weightClipSearchOnCls() {
    if (!QFileInfo::exists(clsModel())) QSKIP("cls model missing: run scripts/setup.sh");
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(openAndWait(w, clsModel()));
    auto* table = test::part<QTableView>(w, "nodeTable");
    auto* model = test::part<NodeTableModel>(w, "nodeTableModel");
    auto* plots = test::part<PlotsPanel>(w, "plotsPanel");
    const AnalysisRequest base = imageRequest(m_cls, 192, 48);
    QVERIFY(calibrateThroughDialog(w, base, [](RemedyOptions&) {}));
    const auto plain = w.analysis()->result();
    QVERIFY(!model->baseline() && !model->hasRemedyNotes());
    QVERIFY(table->isColumnHidden(NodeTableModel::RemedyNoteColumn));

    QVERIFY(calibrateThroughDialog(w, base, [](RemedyOptions& o) {
      o.weightClipBox()->setChecked(true);
      o.integerConvBox()->setChecked(false);
    }));
    const AnalysisRequest& rq = w.analysis()->request();
    QVERIFY(rq.weightClipSearch && !rq.integerConv && !rq.smoothQuant && rq.depthwiseEqualize);
    const auto run = w.analysis()->run();
    QCOMPARE(run->remedies.applied, std::vector<std::string>{"weight_clip_search"});
    // The figures against the CLI's: its report.json, below, equals the GUI export's byte for byte.
    QVERIFY(w.analysis()->result()->worstOutputSnrDb() != plain->worstOutputSnrDb());
    qInfo("cls, 4 samples, max: worst output SNR %.3f dB plain, %.3f dB with weight clip search (before %.3f dB, integer Convs off)",
          plain->worstOutputSnrDb(), w.analysis()->result()->worstOutputSnrDb(), run->remedies.before->worstOutputSnrDb());

    QVERIFY(model->baseline());
    for (int c = NodeTableModel::FirstRemedyColumn; c <= NodeTableModel::LastRemedyColumn; ++c) QVERIFY(!table->isColumnHidden(c));
    QVERIFY(plots->baselinePointCount() > 0);
    const Graph& g = w.current()->model->graph;
    int clipped = 0;
    for (const WeightClipNode& n : run->remedies.weightClips) {
      const QModelIndex cell = model->index(model->rowOfNode(n.node), NodeTableModel::RemedyNoteColumn);
      if (n.clipped == 0) {
        QVERIFY2(cell.data().toString().isEmpty(), g.nodes[(size_t)n.node].name.c_str());
        continue;
      }
      ++clipped;
      QVERIFY2(cell.data().toString().startsWith(QStringLiteral("clip 0.")), qPrintable(cell.data().toString()));
      QVERIFY(cell.data(Qt::ToolTipRole).toString().contains(QStringLiteral("%1 of %2 channels clipped").arg(n.clipped).arg(n.channels)));
    }
    QVERIFY(clipped > 0);

    const QString gui = m_tmp.filePath(QStringLiteral("wc-gui"));
    QVERIFY(exportThroughDialog(w, gui));
    const QString cli = m_tmp.filePath(QStringLiteral("wc-cli"));
    QProcess quantscope;
    quantscope.start(QStringLiteral(QS_BINARY),
                     {QStringLiteral("export"), clsModel(), QStringLiteral("--calibration-data"), m_cls, QStringLiteral("--image-size"),
                      QStringLiteral("192x48"), QStringLiteral("--mean"), QStringLiteral("0.5,0.5,0.5"), QStringLiteral("--std"),
                      QStringLiteral("0.5,0.5,0.5"), QStringLiteral("--calibration-method"), QStringLiteral("max"),
                      QStringLiteral("--weight-clip-search"), QStringLiteral("--integer-conv"), QStringLiteral("off"),
                      QStringLiteral("--sensitivity"), QStringLiteral("off"), QStringLiteral("--output-dir"), cli});
    QVERIFY(quantscope.waitForFinished(300000));
    QVERIFY2(quantscope.exitStatus() == QProcess::NormalExit && quantscope.exitCode() == 0, quantscope.readAllStandardError().constData());
    const QStringList files = QDir(gui).entryList(QDir::Files, QDir::Name);
    QCOMPARE(files, QDir(cli).entryList(QDir::Files, QDir::Name));
    QVERIFY(files.contains(QStringLiteral("report.json")) && files.contains(QStringLiteral("quantized.onnx")));
    for (const QString& f : files) QVERIFY2(readAll(gui + QLatin1Char('/') + f) == readAll(cli + QLatin1Char('/') + f), qPrintable(f));
    const QByteArray report = readAll(gui + QStringLiteral("/report.json"));
    QVERIFY(report.contains("\"weight_clip_search\": \"on\"") && report.contains("\"integer_conv\": \"off\""));
    // The CLI's figures, which the GUI export's report.json equals, are the GUI session's.
    const QJsonArray outputs = QJsonDocument::fromJson(report).object().value(QStringLiteral("remedies")).toObject().value(QStringLiteral("outputs")).toArray();
    QCOMPARE(outputs.size(), (qsizetype)w.analysis()->result()->outputs.size());
    QCOMPARE(outputs.at(0).toObject().value(QStringLiteral("snr_db")).toDouble(), w.analysis()->result()->outputs[0].metrics.snrDb);
    QCOMPARE(outputs.at(0).toObject().value(QStringLiteral("snr_db_before")).toDouble(), run->remedies.before->outputs[0].metrics.snrDb);
  }

  // Depthwise input equalization on rec (one pair at the PP-OCRv4 stem): on by default, it names
  // the pair in the "Remedy" column; unticked, the column goes, the figures change, and they are
  // the CLI pipeline's with --depthwise-equalize off.
  void depthwiseEqualizationOnRec() {
    if (!QFileInfo::exists(recModel())) QSKIP("rec model missing: run scripts/setup.sh");
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(openAndWait(w, recModel()));
    auto* table = test::part<QTableView>(w, "nodeTable");
    auto* model = test::part<NodeTableModel>(w, "nodeTableModel");
    const AnalysisRequest base = imageRequest(m_rec, 320, 48);
    QVERIFY(calibrateThroughDialog(w, base, [](RemedyOptions& o) { QVERIFY(o.depthwiseEqualizeBox()->isChecked()); }));
    QVERIFY(w.analysis()->request().depthwiseEqualize);
    const auto on = w.analysis()->run();
    QCOMPARE(on->remedies.depthwisePairs.size(), size_t(1));
    QVERIFY(on->remedies.empty() && !model->baseline());  // float-preserving: no before/after of its own
    QVERIFY(model->hasRemedyNotes() && !table->isColumnHidden(NodeTableModel::RemedyNoteColumn));
    QVERIFY(table->isColumnHidden(NodeTableModel::GraphSnrBeforeColumn));
    const Graph& g = w.current()->model->graph;
    const DepthwiseEqualizedPair& pair = on->remedies.depthwisePairs.front();
    for (NodeId id : {pair.producer, pair.consumer}) {
      const QModelIndex cell = model->index(model->rowOfNode(id), NodeTableModel::RemedyNoteColumn);
      QCOMPARE(cell.data().toString(), QStringLiteral("DW eq"));
      QVERIFY(cell.data(Qt::ToolTipRole).toString().contains(QStringLiteral("%1 channels").arg(pair.channels)));
    }
    const double withEq = w.analysis()->result()->worstOutputSnrDb();

    QVERIFY(calibrateThroughDialog(w, base, [](RemedyOptions& o) { o.depthwiseEqualizeBox()->setChecked(false); }));
    QVERIFY(!w.analysis()->request().depthwiseEqualize);
    QVERIFY(w.analysis()->run()->remedies.depthwisePairs.empty());
    QVERIFY(!model->hasRemedyNotes() && table->isColumnHidden(NodeTableModel::RemedyNoteColumn));
    QCOMPARE(noteOf(*model, g, g.nodes[(size_t)pair.consumer].name), QString());
    const auto core = coreRun(recModel(), w.analysis()->request(), [](AnalysisRequest& r) { r.depthwiseEqualize = false; });
    QVERIFY(core);
    QVERIFY(sameFigures(*w.analysis()->result(), *core->result()));
    QVERIFY(w.analysis()->result()->worstOutputSnrDb() != withEq);
    qInfo("rec, 1 sample, max: worst output SNR %.3f dB with depthwise input equalization, %.3f dB without", withEq,
          w.analysis()->result()->worstOutputSnrDb());
  }

  // SmoothQuant on a LayerNormalization -> two MatMuls model (random inputs): searched, then with a
  // fixed alpha, each the CLI pipeline's figures; the "Remedy" column marks the LayerNormalization
  // and its two readers with the alpha, and the remedy columns show the before/after.
  void smoothQuantOnLnModel() {
    const QString path = writeLnModel(m_tmp.path());
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, path));
    auto* model = test::part<NodeTableModel>(w, "nodeTableModel");
    AnalysisRequest base;  // random inputs, the CLI's seed
    base.calibration.method = CalibMethod::Max;
    base.sensitivity = false;
    QVERIFY(calibrateThroughDialog(w, base, [](RemedyOptions&) {}));
    const double plain = w.analysis()->result()->worstOutputSnrDb();
    QVERIFY(calibrateThroughDialog(w, base, [](RemedyOptions& o) { o.smoothQuantBox()->setChecked(true); }));
    QVERIFY(w.analysis()->request().smoothQuant && std::isnan(w.analysis()->request().smoothQuantAlpha));
    const auto searched = w.analysis()->run();
    QCOMPARE(searched->remedies.applied, std::vector<std::string>{"smoothquant"});
    QCOMPARE(searched->remedies.smoothed.size(), size_t(1));
    const auto core = coreRun(path, w.analysis()->request(), [](AnalysisRequest& r) { r.smoothQuant = true; });
    QVERIFY(core);
    QVERIFY(sameFigures(*w.analysis()->result(), *core->result()));
    QCOMPARE(core->remedies.smoothed.front().alpha, searched->remedies.smoothed.front().alpha);
    QVERIFY(model->baseline());
    QVERIFY(std::abs(model->baseline()->worstOutputSnrDb() - plain) < 1e-9);  // the before is the run without remedies
    const Graph& g = w.current()->model->graph;
    const QString alpha = QStringLiteral("SQ α %1").arg(searched->remedies.smoothed.front().alpha, 0, 'f', 1);
    QCOMPARE(noteOf(*model, g, "q_proj"), alpha);
    QCOMPARE(noteOf(*model, g, "k_proj"), alpha);
    QCOMPARE(noteOf(*model, g, "ln"), QStringLiteral("SQ ÷s"));
    QCOMPARE(noteOf(*model, g, "add"), QString());
    // The inspector: the model summary's "Remedies" section and the node's.
    const auto summary = remedySummaryProperties(g, *w.analysis()->result(), searched->remedies);
    QCOMPARE(summary.size(), size_t(1));
    QCOMPARE(summary[0].value, QStringLiteral("smoothquant"));
    auto child = [](const PropertyEntry& e, const QString& key) {
      for (const PropertyEntry& c : e.children)
        if (c.key == key) return c.value;
      return QStringLiteral("(none)");
    };
    QCOMPARE(child(summary[0], QStringLiteral("SmoothQuant groups")), QStringLiteral("1"));
    QVERIFY(child(summary[0], QStringLiteral("Output y")).contains(QStringLiteral("%1 dB without").arg(plain, 0, 'f', 2)));
    NodeId q = -1;
    for (NodeId id = 0; id < (NodeId)g.nodes.size(); ++id) q = g.nodes[(size_t)id].name == "q_proj" ? id : q;
    const auto node = remedyNodeProperties(g, searched->remedies, q);
    QCOMPARE(node.size(), size_t(1));
    QVERIFY(child(node[0], QStringLiteral("SmoothQuant")).contains(QStringLiteral("weight rows times s (32 channels")));
    qInfo("LN -> MatMul model, random inputs, max: worst output SNR %.2f dB plain, %.2f dB with SmoothQuant (alpha %.1f searched)", plain,
          w.analysis()->result()->worstOutputSnrDb(), searched->remedies.smoothed.front().alpha);

    QVERIFY(calibrateThroughDialog(w, base, [](RemedyOptions& o) {
      o.smoothQuantBox()->setChecked(true);
      o.smoothQuantAlphaBox()->setValue(0.2);
    }));
    QCOMPARE(w.analysis()->request().smoothQuantAlpha, 0.2);
    const auto fixed = w.analysis()->run();
    QCOMPARE(fixed->remedies.smoothed.size(), size_t(1));
    QCOMPARE(fixed->remedies.smoothed.front().alpha, 0.2);
    QCOMPARE(noteOf(*model, g, "q_proj"), QStringLiteral("SQ α 0.2"));
    const auto coreFixed = coreRun(path, w.analysis()->request(), [](AnalysisRequest& r) { r.smoothQuantAlpha = 0.2; r.smoothQuant = true; });
    QVERIFY(coreFixed);
    QVERIFY(sameFigures(*w.analysis()->result(), *coreFixed->result()));
  }

  // Projects keep the new keys (written only when they differ from the CLI's defaults), a project
  // without them loads with those defaults, and bad values are one line naming the file and key.
  void projectRoundTrip() {
    const QString path = m_tmp.filePath(QStringLiteral("s.qsproj"));
    Project p;
    p.modelPath = clsModel();
    p.calibration = imageRequest(m_cls, 192, 48);
    const QByteArray plain = projectToJson(p, path);
    for (const char* key : {"\"smoothquant\"", "\"smoothquant_alpha\"", "\"weight_clip_search\"", "\"depthwise_equalize\"", "\"depthwise_smooth\"",
                            "\"integer_conv\"", "\"calibration_refine\""})
      QVERIFY2(!plain.contains(key), key);
    Project q;
    QString error;
    q.calibration.depthwiseEqualize = q.calibration.integerConv = false;  // overwritten only where the file says so
    QVERIFY(projectFromJson(plain, path, q, error));
    QVERIFY(!q.calibration.smoothQuant && !q.calibration.weightClipSearch && std::isnan(q.calibration.smoothQuantAlpha));
    QVERIFY2(q.calibration.depthwiseEqualize && q.calibration.integerConv, "an old project reads as the CLI's defaults (on)");
    QVERIFY2(!q.calibration.depthwiseSmooth, "an old project reads as the CLI's default (smoothing off)");

    p.calibration.smoothQuant = p.calibration.weightClipSearch = true;
    p.calibration.smoothQuantAlpha = 0.4;
    p.calibration.depthwiseEqualize = p.calibration.integerConv = false;
    p.calibration.depthwiseSmooth = true;
    p.calibration.calibrationRefine.passes = 2;
    const QByteArray all = projectToJson(p, path);
    QVERIFY(all.contains("\"depthwise_equalize\": false") && all.contains("\"integer_conv\": false"));
    QVERIFY(all.contains("\"depthwise_smooth\": true") && all.contains("\"calibration_refine\": 2"));
    Project r;
    QVERIFY2(projectFromJson(all, path, r, error), qPrintable(error));
    QVERIFY(r.calibration.smoothQuant && r.calibration.weightClipSearch && !r.calibration.depthwiseEqualize && !r.calibration.integerConv);
    QVERIFY(r.calibration.depthwiseSmooth);
    QCOMPARE(r.calibration.calibrationRefine.passes, 2);
    QCOMPARE(r.calibration.smoothQuantAlpha, 0.4);

    // An alpha alone asks for SmoothQuant, as --smoothquant-alpha alone does.
    QByteArray alone = all;
    alone.replace("\"smoothquant\": true,", "");
    QVERIFY(!alone.contains("\"smoothquant\":"));
    Project s;
    QVERIFY2(projectFromJson(alone, path, s, error), qPrintable(error));
    QVERIFY(s.calibration.smoothQuant);

    for (auto [from, to, key] : {std::tuple{"\"smoothquant_alpha\": 0.4", "\"smoothquant_alpha\": 1.5", "smoothquant_alpha"},
                                 std::tuple{"\"smoothquant_alpha\": 0.4", "\"smoothquant_alpha\": \"auto\"", "smoothquant_alpha"},
                                 std::tuple{"\"weight_clip_search\": true", "\"weight_clip_search\": 1", "weight_clip_search"},
                                 std::tuple{"\"depthwise_equalize\": false", "\"depthwise_equalize\": \"off\"", "depthwise_equalize"},
                                 std::tuple{"\"depthwise_smooth\": true", "\"depthwise_smooth\": \"on\"", "depthwise_smooth"},
                                 std::tuple{"\"calibration_refine\": 2", "\"calibration_refine\": 17", "calibration_refine"},
                                 std::tuple{"\"calibration_refine\": 2", "\"calibration_refine\": 1.5", "calibration_refine"},
                                 std::tuple{"\"integer_conv\": false", "\"integer_conv\": null", "integer_conv"}}) {
      QByteArray bad = all;
      QVERIFY2(bad.contains(from), from);
      bad.replace(from, to);
      Project b;
      QVERIFY2(!projectFromJson(bad, path, b, error), to);
      QVERIFY2(error.startsWith(path) && error.contains(QLatin1String(key)) && !error.contains(QLatin1Char('\n')), qPrintable(error));
    }
  }
};

int runRemedySwitchTests(int argc, char** argv) {
  RemedySwitchTest t;
  return QTest::qExec(&t, argc, argv);
}

#include "test_remedy_switches.moc"
