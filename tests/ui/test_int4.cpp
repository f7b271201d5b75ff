// Offscreen tests of the workbench's INT4 weight-only mode (issue #15 item 5): the calibration
// dialog's int4 mode with block size and method, the run computing what `quantscope analyze
// --quantize-mode int4` computes (the core's runInt4Analysis on the same data), the weight SNR in
// the layer table, the weight bytes in the model summary, the export writing the CLI's int4 model
// byte for byte, and the project file keeping the int4 settings.
#include <QComboBox>
#include <QAction>
#include <QFile>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <random>

#include "core/analysis/int4_analysis.h"
#include "core/io/calibration_data.h"
#include "core/onnx/loader.h"
#include "tests/support/onnx_builder.h"
#include "tests/ui/export_helpers.h"
#include "tests/ui/window_parts.h"
#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/calibration_dialog.h"
#include "ui/export_dialog.h"
#include "ui/main_window.h"
#include "ui/node_table_model.h"
#include "ui/project_file.h"
#include "ui/property_tree_model.h"

using namespace qs;
using namespace qs::ui;

using qs::test::exportThroughDialog;
using qs::test::readAll;

namespace {

// x [N, 64] -> MatMul(W1 [64, 32]) -> Relu -> MatMul(W2 [32, 16]) -> y.
QString writeMatMulModel(const QString& dir) {
  qs::test::OnnxBuilder b(13);
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> w1(64 * 32), w2(32 * 16);
  for (float& v : w1) v = n(rng);
  for (float& v : w2) v = n(rng);
  b.input("x", {-1, 64}).output("y", {-1, 16});
  b.initializer("w1", {64, 32}, w1);
  b.initializer("w2", {32, 16}, w2);
  b.node("MatMul", {"x", "w1"}, {"h"}, "fc1");
  b.node("Relu", {"h"}, {"r"}, "relu");
  b.node("MatMul", {"r", "w2"}, {"y"}, "fc2");
  const QString path = dir + QStringLiteral("/matmul.onnx");
  qs::test::writeBytes(path.toStdString(), b.bytes());
  return path;
}

}  // namespace

class Int4ModeTest : public QObject {
  Q_OBJECT
 private slots:
  void int4ModeRunsShowsWeightSnrAndExportsTheCliModel() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString model = writeMatMulModel(dir.path());
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    QSignalSpy shown(&w, &MainWindow::modelShown);
    w.openFile(model);
    QVERIFY(shown.wait(60000));

    CalibrationDialog* d = w.analysisActions()->calibrationDialog();
    QComboBox* mode = d->modeCombo();
    const int int4Item = mode->findText(QStringLiteral("int4"), Qt::MatchStartsWith);
    QVERIFY(int4Item >= 0);
    QCOMPARE(d->blockSizeCombo()->count(), 3);
    QCOMPARE(d->int4MethodCombo()->count(), 3);
    d->sourceCombo()->setCurrentIndex(d->sourceCombo()->findData(CalibrationDialog::Random));
    mode->setCurrentIndex(int4Item);
    d->blockSizeCombo()->setCurrentIndex(d->blockSizeCombo()->findData(32));
    d->int4MethodCombo()->setCurrentIndex(d->int4MethodCombo()->findData((int)Int4Method::AwqLite));
    QVERIFY(d->int4Settings().on);
    QCOMPARE(d->int4Settings().blockSize, (int64_t)32);

    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(d->start());
    QVERIFY(calibrated.wait(60000));
    const auto int4 = w.analysis()->int4Result();
    QVERIFY(int4);
    QCOMPARE(int4->layers.size(), (size_t)2);
    QCOMPARE(int4->method, Int4Method::AwqLite);
    QCOMPARE(int4->blockSize, (int64_t)32);
    QVERIFY(w.analysisActions()->exportAction()->isEnabled());

    // What the CLI computes: runInt4Analysis with the dialog's data and options.
    auto m = loadModel(model.toStdString());
    QVERIFY(m);
    auto data = CalibrationData::open(**m, d->request().data);
    QVERIFY(data);
    Int4Options o;
    o.method = Int4Method::AwqLite;
    o.blockSize = 32;
    auto ref = runInt4Analysis(*m, **data, o);
    QVERIFY(ref);
    for (size_t i = 0; i < 2; ++i) {
      QCOMPARE(int4->layers[i].layerwise.snrDb, ref->layers[i].layerwise.snrDb);
      QCOMPARE(int4->layers[i].graphwise.snrDb, ref->layers[i].graphwise.snrDb);
    }
    QCOMPARE(int4->outputs[0].metrics.snrDb, ref->outputs[0].metrics.snrDb);

    // The table: weight SNR, layer-wise and graph-wise SNR on the two MatMuls, none on the Relu.
    auto* table = test::part<NodeTableModel>(w, "nodeTableModel");
    for (const Int4Layer& l : int4->layers) {
      const int row = table->rowOfNode(l.node);
      const double weightSnr = table->data(table->index(row, NodeTableModel::WeightSnrColumn), NodeTableModel::SortRole).toDouble();
      QVERIFY(std::isfinite(weightSnr));
      QVERIFY2(weightSnr > 10 && weightSnr < 40, qPrintable(QString::number(weightSnr)));  // int4 on normal weights: about 20 dB
      QCOMPARE(weightSnr, l.layerwise.snrDb);  // weight-only: the output with only the weight quantized
      QVERIFY(!table->data(table->index(row, NodeTableModel::WeightSnrColumn)).toString().isEmpty());
      QCOMPARE(table->data(table->index(row, NodeTableModel::LayerSnrColumn), NodeTableModel::SortRole).toDouble(), l.layerwise.snrDb);
      QCOMPARE(table->data(table->index(row, NodeTableModel::GraphSnrColumn), NodeTableModel::SortRole).toDouble(), l.graphwise.snrDb);
    }
    int relu = -1;
    for (size_t i = 0; i < (*m)->graph.nodes.size(); ++i)
      if ((*m)->graph.nodes[i].name == "relu") relu = table->rowOfNode((NodeId)i);
    QVERIFY(relu >= 0);
    QVERIFY(table->data(table->index(relu, NodeTableModel::WeightSnrColumn)).toString().isEmpty());

    // The model summary: weight bytes before and after.
    auto* inspector = test::part<PropertyTreeModel>(w, "inspectorModel");
    const QModelIndex bytes = inspector->findKey(QStringLiteral("Weight bytes"));
    QVERIFY(bytes.isValid());
    const QString text = inspector->index(bytes.row(), PropertyTreeModel::ValueColumn, bytes.parent()).data().toString();
    QVERIFY2(text.contains(QStringLiteral("MB ->")), qPrintable(text));
    QCOMPARE(int4->bytesBefore, (uint64_t)(64 * 32 + 32 * 16) * 4);
    QVERIFY(int4->bytesAfter < int4->bytesBefore / 4);

    // Export through the dialog: the CLI's int4 export of the same settings, byte for byte.
    w.analysisActions()->exportAction()->trigger();
    auto* exportDialog = test::part<ExportDialog>(w, "exportDialog");
    test::part<QLineEdit>(*exportDialog, "exportFolder")->setText(dir.path() + QStringLiteral("/gui"));
    QSignalSpy exported(exportDialog, &ExportDialog::exported);
    QTest::mouseClick(test::part<QPushButton>(*exportDialog, "exportButton"), Qt::LeftButton);
    QVERIFY(exported.wait(60000));
    exportDialog->close();
    const QByteArray gui = readAll(dir.path() + QStringLiteral("/gui/quantized.onnx"));
    QVERIFY(!gui.isEmpty());
    QProcess cli;
    cli.start(QStringLiteral(QS_BINARY),
              {QStringLiteral("export"), model, QStringLiteral("--quantize-mode"), QStringLiteral("int4"), QStringLiteral("--calibration-method"),
               QStringLiteral("awq_lite"), QStringLiteral("--block-size"), QStringLiteral("32"), QStringLiteral("--calibration-size"),
               QString::number(d->request().data.maxSamples), QStringLiteral("--output-dir"), dir.path() + QStringLiteral("/cli")});
    QVERIFY(cli.waitForFinished(60000));
    QVERIFY2(cli.exitCode() == 0, cli.readAllStandardError().constData());
    QCOMPARE(gui, readAll(dir.path() + QStringLiteral("/cli/quantized.onnx")));
  }

  void projectFileKeepsTheInt4Settings() {
    Project p;
    p.modelPath = QStringLiteral("/tmp/m.onnx");
    p.calibrated = true;
    p.int4.on = true;
    p.int4.method = Int4Method::AwqClip;
    p.int4.blockSize = 64;
    const QByteArray json = projectToJson(p, QStringLiteral("/tmp/p.qsproj"));
    Project back;
    QString error;
    QVERIFY2(projectFromJson(json, QStringLiteral("/tmp/p.qsproj"), back, error), qPrintable(error));
    QVERIFY(back.int4.on);
    QCOMPARE(back.int4.method, Int4Method::AwqClip);
    QCOMPARE(back.int4.blockSize, (int64_t)64);
    // int8 projects carry no int4 object and read back with int4 off.
    p.int4 = Int4Settings{};
    QVERIFY(!projectToJson(p, QStringLiteral("/tmp/p.qsproj")).contains("int4"));
    QVERIFY(projectFromJson(projectToJson(p, QStringLiteral("/tmp/p.qsproj")), QStringLiteral("/tmp/p.qsproj"), back, error));
    QVERIFY(!back.int4.on);
    // A bad block size is one line naming the file.
    QByteArray bad = json;
    bad.replace("\"block_size\": 64", "\"block_size\": 48");
    QVERIFY(bad != json);
    QVERIFY(!projectFromJson(bad, QStringLiteral("/tmp/p.qsproj"), back, error));
    QVERIFY2(error.contains(QStringLiteral("/tmp/p.qsproj")) && error.contains(QStringLiteral("--block-size 48")), qPrintable(error));
  }
};

int runInt4Tests(int argc, char** argv) {
  Int4ModeTest t;
  return QTest::qExec(&t, argc, argv);
}

#include "test_int4.moc"
