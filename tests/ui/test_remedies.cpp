// Offscreen tests of the calibration dialog's remedies and precision box (ui/remedy_options.h):
// each switch changes what the controller runs (the remedy columns and the SNR plot's
// no-remedies curve, the export against `quantscope export --equalize --bias-correction`, fp16
// for the nodes a fallback excluded, the sensitivity mode and the exact figure on demand), and
// the project file keeps them.
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLineEdit>
#include <QMenu>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>

#include "core/onnx/loader.h"
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
#include "ui/project_controller.h"
#include "ui/project_file.h"
#include "ui/remedy_options.h"
#include "ui/remedy_view.h"

using namespace qs;
using namespace qs::ui;

using qs::test::exportThroughDialog;
using qs::test::readAll;

namespace {

QString clsModel() { return QStringLiteral(QS_MODELS_DIR "/ch_ppocr_mobile_v2.0_cls_infer.onnx"); }

// cls on `folder`, max calibration (the quickest), the CLI's defaults otherwise.
AnalysisRequest clsRequest(const QString& folder) {
  AnalysisRequest r;
  r.data.path = folder.toStdString();
  r.data.image.width = 192;
  r.data.image.height = 48;
  r.data.image.mean = {0.5f, 0.5f, 0.5f};
  r.data.image.std = {0.5f, 0.5f, 0.5f};
  r.calibration.method = CalibMethod::Max;
  return r;
}

bool openAndWait(MainWindow& w) {
  QSignalSpy shown(&w, &MainWindow::modelShown);
  w.openFile(clsModel());
  return shown.wait(120000);
}

// Calibrates through the dialog's form and its Calibrate button, with the form's switches as
// `setUp` leaves them.
bool calibrateThroughDialog(MainWindow& w, const AnalysisRequest& base, const std::function<void(RemedyOptions&)>& setUp) {
  CalibrationDialog* d = w.analysisActions()->calibrationDialog();
  d->setRequest(base);
  setUp(*d->remedyOptions());
  QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
  QTest::mouseClick(d->calibrateButton(), Qt::LeftButton);
  return calibrated.wait(180000);
}

bool waitIdle(MainWindow& w) {
  for (int i = 0; i < 12000 && w.analysis()->isBusy(); ++i) QTest::qWait(10);
  return !w.analysis()->isBusy();
}

double sortValue(const NodeTableModel& m, NodeId id, int column) {
  return m.index(m.rowOfNode(id), column).data(NodeTableModel::SortRole).toDouble();
}

}  // namespace

class RemedyTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_tmp;
  QString m_images;

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeTests"));
    QCoreApplication::setApplicationName(QStringLiteral("qs_ui_remedy_tests"));
    QSettings().clear();
    QVERIFY(m_tmp.isValid());
    m_images = m_tmp.filePath(QStringLiteral("cls4"));
    test::writeTextImages(m_images.toStdString(), 4, 192, 48, 7);
    if (!QFileInfo::exists(clsModel())) QSKIP("cls model missing: run scripts/setup.sh");
  }

  // The box starts at the command line's defaults (AnalysisRequest{}), and what it shows is what
  // the request gets, and back.
  void formMapsOntoTheRequest() {
    RemedyOptions box;
    AnalysisRequest r;
    r.equalize = r.biasCorrection = true;  // overwritten by apply()
    box.apply(r);
    const AnalysisRequest defaults;
    QCOMPARE(r.equalize, defaults.equalize);
    QCOMPARE(r.biasCorrection, defaults.biasCorrection);
    QCOMPARE((int)r.calibration.highPrecision, (int)defaults.calibration.highPrecision);
    QCOMPARE(sensitivityOf(r), sensitivityOf(defaults));
    box.equalizeBox()->setChecked(true);
    box.biasCorrectionBox()->setChecked(true);
    box.highPrecisionCombo()->setCurrentIndex(box.highPrecisionCombo()->findData((int)HighPrecision::Bf16));
    box.sensitivityCombo()->setCurrentIndex(box.sensitivityCombo()->findData(RemedyOptions::SensitivityFast));
    box.apply(r);
    QVERIFY(r.equalize && r.biasCorrection && r.sensitivity);
    QCOMPARE((int)r.calibration.highPrecision, (int)HighPrecision::Bf16);
    QCOMPARE((int)r.sensitivityMethod, (int)SensitivityMethod::Fast);
    box.sensitivityCombo()->setCurrentIndex(box.sensitivityCombo()->findData(RemedyOptions::SensitivityOff));
    box.apply(r);
    QVERIFY(!r.sensitivity);
    RemedyOptions again;
    again.setRequest(r);
    AnalysisRequest back;
    again.apply(back);
    QVERIFY(back.equalize && back.biasCorrection && !back.sensitivity);
    QCOMPARE((int)back.calibration.highPrecision, (int)HighPrecision::Bf16);
  }

  // Plain run, then the same with both remedies ticked in the dialog: the table's remedy columns
  // appear, their "no remedies" figures are the plain run's, the remedies change the figures, the
  // SNR plot draws both curves, and the GUI's export writes what `quantscope export --equalize
  // --bias-correction` writes, byte for byte.
  void remedyColumnsAndExport() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(openAndWait(w));
    auto* table = test::part<QTableView>(w, "nodeTable");
    auto* model = test::part<NodeTableModel>(w, "nodeTableModel");
    auto* plots = test::part<PlotsPanel>(w, "plotsPanel");
    auto noSensitivity = [](RemedyOptions& o) { o.sensitivityCombo()->setCurrentIndex(o.sensitivityCombo()->findData(RemedyOptions::SensitivityOff)); };
    QVERIFY(calibrateThroughDialog(w, clsRequest(m_images), noSensitivity));
    const auto plain = w.analysis()->result();
    QVERIFY(!model->baseline());
    for (int c = NodeTableModel::FirstRemedyColumn; c <= NodeTableModel::LastRemedyColumn; ++c) QVERIFY(table->isColumnHidden(c));
    QCOMPARE(plots->baselinePointCount(), 0);

    QVERIFY(calibrateThroughDialog(w, clsRequest(m_images), [&](RemedyOptions& o) {
      noSensitivity(o);
      o.equalizeBox()->setChecked(true);
      o.biasCorrectionBox()->setChecked(true);
    }));
    QVERIFY(w.analysis()->request().equalize && w.analysis()->request().biasCorrection);
    const auto run = w.analysis()->run();
    QCOMPARE(run->remedies.applied, (std::vector<std::string>{"equalize", "bias_correction"}));
    QVERIFY(!run->remedies.changedInitializers.empty());
    QVERIFY(model->baseline());
    for (int c = NodeTableModel::FirstRemedyColumn; c <= NodeTableModel::LastRemedyColumn; ++c) QVERIFY(!table->isColumnHidden(c));
    QVERIFY(plots->baselinePointCount() > 0);
    const auto after = w.analysis()->result();
    const Graph& g = w.current()->model->graph;
    int compared = 0, changed = 0;
    for (NodeId id = 0; id < (NodeId)g.nodes.size(); ++id) {
      const NodeResult& p = plain->nodes[(size_t)id];
      if (!p.hasGraphwise || !std::isfinite(p.graphwise.snrDb)) continue;
      // The baseline is the plain run's analysis (same data, scales and states).
      QVERIFY2(std::abs(sortValue(*model, id, NodeTableModel::GraphSnrBeforeColumn) - p.graphwise.snrDb) < 1e-9, g.nodes[(size_t)id].name.c_str());
      const double delta = sortValue(*model, id, NodeTableModel::GraphSnrDeltaColumn);
      if (std::isfinite(after->nodes[(size_t)id].graphwise.snrDb)) {
        QVERIFY(std::abs(delta - (after->nodes[(size_t)id].graphwise.snrDb - p.graphwise.snrDb)) < 1e-9);
        changed += std::abs(delta) > 0.01;
      }
      ++compared;
    }
    QVERIFY(compared > 10);
    QVERIFY2(changed > compared / 4, qPrintable(QStringLiteral("%1 of %2 nodes changed").arg(changed).arg(compared)));
    QVERIFY(std::abs(after->worstOutputSnrDb() - plain->worstOutputSnrDb()) > 0.01);
    qInfo("cls, 4 samples, max: worst output SNR %.2f dB plain, %.2f dB with equalize + bias correction; %d of %d nodes' graph-wise SNR changed",
          plain->worstOutputSnrDb(), after->worstOutputSnrDb(), changed, compared);
    const QString header = model->headerData(NodeTableModel::GraphSnrDeltaColumn, Qt::Horizontal).toString();
    QVERIFY(header.contains(QStringLiteral("graph-wise")));

    const QString gui = m_tmp.filePath(QStringLiteral("remedies-gui"));
    QVERIFY(exportThroughDialog(w, gui));
    const QString cli = m_tmp.filePath(QStringLiteral("remedies-cli"));
    QProcess quantscope;
    quantscope.start(QStringLiteral(QS_BINARY),
                     {QStringLiteral("export"), clsModel(), QStringLiteral("--calibration-data"), m_images, QStringLiteral("--image-size"),
                      QStringLiteral("192x48"), QStringLiteral("--mean"), QStringLiteral("0.5,0.5,0.5"), QStringLiteral("--std"),
                      QStringLiteral("0.5,0.5,0.5"), QStringLiteral("--calibration-method"), QStringLiteral("max"),
                      QStringLiteral("--equalize"), QStringLiteral("--bias-correction"), QStringLiteral("--sensitivity"), QStringLiteral("off"),
                      QStringLiteral("--output-dir"), cli});
    QVERIFY(quantscope.waitForFinished(300000));
    QVERIFY2(quantscope.exitStatus() == QProcess::NormalExit && quantscope.exitCode() == 0, quantscope.readAllStandardError().constData());
    const QStringList files = QDir(gui).entryList(QDir::Files, QDir::Name);
    QCOMPARE(files, QDir(cli).entryList(QDir::Files, QDir::Name));
    QVERIFY(files.contains(QStringLiteral("quantized.onnx")));
    for (const QString& f : files) QVERIFY2(readAll(gui + QLatin1Char('/') + f) == readAll(cli + QLatin1Char('/') + f), qPrintable(f));
    // The export carries the remedied weights: an initializer the remedies changed differs from the model's.
    auto exported = loadModel((gui + QStringLiteral("/quantized.onnx")).toStdString());
    QVERIFY(exported.isOk());
    int differing = 0;
    for (const Value& v : (*exported)->graph.values) {
      if (!v.constant || v.constant->dtype() != DType::Float) continue;
      if (std::find(run->remedies.changedInitializers.begin(), run->remedies.changedInitializers.end(), v.name) ==
          run->remedies.changedInitializers.end())
        continue;
      for (const Value& o : g.values)
        if (o.name == v.name && o.constant && o.constant->numel() == v.constant->numel())
          for (int64_t i = 0; i < o.constant->numel(); ++i)
            if (o.constant->data<float>()[i] != v.constant->data<float>()[i]) {
              ++differing;
              break;
            }
    }
    QVERIFY2(differing > 0, "no remedied float initializer in quantized.onnx differs from the model's");

    // A saved project reopens with the remedies on: the same figures and the remedy columns again.
    const QString project = m_tmp.filePath(QStringLiteral("remedies.qsproj"));
    QVERIFY(w.projects()->save(project));
    MainWindow w2;
    w2.setErrorDialogsEnabled(false);
    QSignalSpy calibrated2(w2.analysis(), &AnalysisController::calibrated);
    QVERIFY(w2.projects()->open(project));
    QVERIFY(calibrated2.wait(180000));
    QVERIFY(w2.analysis()->request().equalize && w2.analysis()->request().biasCorrection && !w2.analysis()->request().sensitivity);
    QVERIFY(test::part<NodeTableModel>(w2, "nodeTableModel")->baseline());
    QCOMPARE(w2.analysis()->result()->worstOutputSnrDb(), after->worstOutputSnrDb());
  }

  // After a fallback excluded nodes, fp16 for them changes the predicted output SNR against fp32,
  // and the export writes the excluded part in float16.
  void fp16AfterFallback() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w));
    auto fast = [](RemedyOptions& o) { o.sensitivityCombo()->setCurrentIndex(o.sensitivityCombo()->findData(RemedyOptions::SensitivityFast)); };
    QVERIFY(calibrateThroughDialog(w, clsRequest(m_images), fast));
    const double worst = w.analysis()->result()->worstOutputSnrDb();
    QSignalSpy fallback(w.analysis(), &AnalysisController::fallbackFinished);
    QVERIFY(w.analysis()->autoFallback(worst + 1.5));
    QVERIFY(fallback.wait(180000));
    QVERIFY(!fallback.first().at(0).value<std::vector<FallbackStep>>().empty());
    QVERIFY(waitIdle(w));
    const auto fp32 = w.analysis()->result();
    QVERIFY(calibrateThroughDialog(w, clsRequest(m_images), [&](RemedyOptions& o) {
      fast(o);
      o.highPrecisionCombo()->setCurrentIndex(o.highPrecisionCombo()->findData((int)HighPrecision::Fp16));
    }));
    QVERIFY(waitIdle(w));
    const auto fp16 = w.analysis()->result();
    QCOMPARE((int)w.analysis()->request().calibration.highPrecision, (int)HighPrecision::Fp16);
    // The same nodes are excluded (the fallback's exclusions are the user's states now).
    for (size_t i = 0; i < fp32->plan.nodes.size(); ++i) QCOMPARE(fp16->plan.nodes[i].quantized, fp32->plan.nodes[i].quantized);
    qInfo("cls after a fallback: worst output SNR %.3f dB with the excluded nodes in fp32, %.3f dB in fp16", fp32->worstOutputSnrDb(),
          fp16->worstOutputSnrDb());
    QVERIFY(fp16->worstOutputSnrDb() != fp32->worstOutputSnrDb());
    QVERIFY(std::isfinite(fp16->worstOutputSnrDb()) && fp16->worstOutputSnrDb() > 10);
    const QString out = m_tmp.filePath(QStringLiteral("fp16"));
    QVERIFY(exportThroughDialog(w, out));
    auto exported = loadModel((out + QStringLiteral("/quantized.onnx")).toStdString());
    QVERIFY(exported.isOk());
    int halves = 0;
    for (const Value& v : (*exported)->graph.values) halves += v.constant && v.constant->dtype() == DType::Float16;
    QVERIFY2(halves > 0, "no float16 initializer in the fp16 export");
  }

  // Sensitivity off leaves the column empty; fast gives estimates, and the table's action computes
  // one node's exact figure, equal to what the exact mode gives.
  void sensitivityModes() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w));
    auto* model = test::part<NodeTableModel>(w, "nodeTableModel");
    const Graph& g = w.current()->model->graph;
    auto setMode = [](RemedyOptions::Sensitivity s) {
      return [s](RemedyOptions& o) { o.sensitivityCombo()->setCurrentIndex(o.sensitivityCombo()->findData(s)); };
    };
    QVERIFY(calibrateThroughDialog(w, clsRequest(m_images), setMode(RemedyOptions::SensitivityExact)));
    const auto exact = w.analysis()->result();
    QVERIFY(calibrateThroughDialog(w, clsRequest(m_images), setMode(RemedyOptions::SensitivityOff)));
    QVERIFY(!w.analysis()->request().sensitivity);
    for (const NodeResult& r : w.analysis()->result()->nodes) QVERIFY(std::isnan(r.sensitivitySnrDb));
    QVERIFY(calibrateThroughDialog(w, clsRequest(m_images), setMode(RemedyOptions::SensitivityFast)));
    QCOMPARE((int)w.analysis()->request().sensitivityMethod, (int)SensitivityMethod::Fast);
    // The first quantized Conv past the stem, whose estimate is not the exact figure.
    NodeId node = -1;
    for (NodeId id : g.topoOrder) {
      const NodeResult& r = w.analysis()->result()->nodes[(size_t)id];
      if (g.nodes[(size_t)id].opType == "Conv" && w.analysis()->result()->plan.nodes[(size_t)id].quantized && !r.sensitivityExact &&
          std::isfinite(exact->nodes[(size_t)id].sensitivitySnrDb) && r.sensitivitySnrDb != exact->nodes[(size_t)id].sensitivitySnrDb) {
        node = id;
        break;
      }
    }
    QVERIFY(node >= 0);
    auto tooltip = [&] { return model->index(model->rowOfNode(node), NodeTableModel::SensitivityColumn).data(Qt::ToolTipRole).toString(); };
    QVERIFY(tooltip().contains(QStringLiteral("estimate")));
    QMenu menu;
    QAction* action = addExactSensitivityAction(menu, node, *w.analysis());
    QVERIFY(action->isEnabled());
    QSignalSpy results(w.analysis(), &AnalysisController::resultChanged);
    action->trigger();
    QCOMPARE((int)w.analysis()->job(), (int)AnalysisController::Job::ExactSensitivity);
    QVERIFY(results.wait(120000));
    QVERIFY(waitIdle(w));
    const NodeResult& r = w.analysis()->result()->nodes[(size_t)node];
    QVERIFY(r.sensitivityExact);
    QCOMPARE(r.sensitivitySnrDb, exact->nodes[(size_t)node].sensitivitySnrDb);
    QCOMPARE(sortValue(*model, node, NodeTableModel::SensitivityColumn), r.sensitivitySnrDb);
    QVERIFY(!tooltip().contains(QStringLiteral("estimate")));
    // A node that is not quantizable gets a disabled action.
    NodeId other = -1;
    for (NodeId id : g.topoOrder)
      if (!w.analysis()->result()->plan.nodes[(size_t)id].quantizable) other = id;
    if (other >= 0) {
      QMenu menu2;
      QVERIFY(!addExactSensitivityAction(menu2, other, *w.analysis())->isEnabled());
    }
  }

  // The project file keeps the switches; defaults write no new keys; bad values are one line naming the file.
  void projectRoundTrip() {
    const QString path = m_tmp.filePath(QStringLiteral("r.qsproj"));
    Project p;
    p.modelPath = clsModel();
    p.calibration = clsRequest(m_images);
    const QByteArray plain = projectToJson(p, path);
    for (const char* key : {"\"equalize\"", "\"bias_correction\"", "\"sensitivity\""}) QVERIFY2(!plain.contains(key), key);
    p.calibration.equalize = p.calibration.biasCorrection = true;
    p.calibration.calibration.highPrecision = HighPrecision::Fp16;
    p.calibration.sensitivityMethod = SensitivityMethod::Fast;
    Project q;
    QString error;
    QVERIFY2(projectFromJson(projectToJson(p, path), path, q, error), qPrintable(error));
    QVERIFY(q.calibration.equalize && q.calibration.biasCorrection && q.calibration.sensitivity);
    QCOMPARE((int)q.calibration.calibration.highPrecision, (int)HighPrecision::Fp16);
    QCOMPARE((int)q.calibration.sensitivityMethod, (int)SensitivityMethod::Fast);
    p.calibration.sensitivity = false;
    QVERIFY(projectFromJson(projectToJson(p, path), path, q, error));
    QVERIFY(!q.calibration.sensitivity);
    QByteArray bad = projectToJson(p, path);
    bad.replace("\"sensitivity\": \"off\"", "\"sensitivity\": \"sloppy\\n\"");
    QVERIFY(!projectFromJson(bad, path, q, error));
    QVERIFY2(error.startsWith(path) && error.contains(QStringLiteral("expected exact, fast or off")) && !error.contains(QLatin1Char('\n')),
             qPrintable(error));
    bad = projectToJson(p, path);
    bad.replace("\"equalize\": true", "\"equalize\": \"yes\"");
    QVERIFY(!projectFromJson(bad, path, q, error));
    QVERIFY2(error.startsWith(path) && error.contains(QStringLiteral("\"equalize\"")), qPrintable(error));
  }
};

int runRemedyTests(int argc, char** argv) {
  RemedyTest t;
  return QTest::qExec(&t, argc, argv);
}

#include "test_remedies.moc"
