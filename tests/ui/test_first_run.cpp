// Offscreen tests of the first minutes with the workbench (README: scripts/run.sh opens PP-OCRv4
// det with sample data chosen): one click on Calibrate gives the graph coloured by SNR; a model
// opened without data asks for it; random inputs work on det through the dialog's shape fields and
// a project keeps those shapes; a project whose data went missing opens the dialog with the error.
#include <QAction>
#include <QComboBox>
#include <QFile>
#include <QFileInfo>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <set>

#include "tests/support/text_images.h"
#include "tests/ui/window_parts.h"
#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/calibration_dialog.h"
#include "ui/graph_view.h"
#include "ui/input_shape_fields.h"
#include "ui/main_window.h"
#include "ui/node_table_model.h"
#include "ui/project_controller.h"
#include "ui/project_file.h"

using namespace qs;
using namespace qs::ui;

namespace {

QString detModel() { return QStringLiteral(QS_MODELS_DIR "/ch_PP-OCRv4_det_infer.onnx"); }

// The project scripts/make_samples.sh writes for det (data chosen, not calibrated), with `side`-pixel pages.
bool writeDetProject(const QString& path, const QString& images, int side) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return false;
  f.write(QStringLiteral(R"({
  "quantscope_project": 1,
  "model": "%1",
  "calibration": {"data": "%2", "samples": -1, "width": %3, "height": %3, "scale": 0.00392156862745098,
                  "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "bgr": false, "nhwc": false,
                  "method": "max", "percentile": 99.99, "mode": "int8"},
  "calibrated": false,
  "excluded_nodes": [], "quantized_nodes": [],
  "view": {"colouring": "graphwise", "threshold_db": 20}
}
)")
              .arg(detModel(), images)
              .arg(side)
              .toUtf8());
  f.close();
  return f.error() == QFile::NoError;
}

bool openAndWait(MainWindow& w, const QString& path) {
  QSignalSpy shown(&w, &MainWindow::modelShown);
  w.openFile(path);
  return shown.wait(120000);
}

// The fills of the graph's node boxes under the view's colouring now.
std::vector<QRgb> nodeFills(const MainWindow& w) {
  const GraphView* view = test::part<GraphView>(w, "graphView");
  std::vector<QRgb> fills;
  const auto& layout = *w.current()->layout;
  for (size_t i = 0; i < layout.items.size(); ++i)
    if (layout.items[i].kind == LayoutItem::Kind::Node) fills.push_back(view->itemFill((int)i).rgb());
  return fills;
}

}  // namespace

class FirstRunTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_tmp;
  QString m_pages;

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeTests"));
    QCoreApplication::setApplicationName(QStringLiteral("qs_ui_first_run_tests"));
    QSettings().clear();
    QVERIFY(m_tmp.isValid());
    if (!QFileInfo::exists(detModel())) QSKIP("det model missing: run scripts/setup.sh");
    // Two pages of 160x160 keep the run short; make_samples.sh renders eight of 640x640.
    m_pages = m_tmp.filePath(QStringLiteral("det"));
    test::writeTextImages(m_pages.toStdString(), 2, 160, 160, 21);
  }

  // The README's path: the project names the data, so Calibrate runs at once (no dialog) and the
  // graph comes back coloured by graph-wise SNR, the table filled with the figures.
  void readmeProjectCalibratesWithOneClick() {
    const QString project = m_tmp.filePath(QStringLiteral("det.qsproj"));
    QVERIFY(writeDetProject(project, m_pages, 160));
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(openAndWait(w, project));
    QVERIFY(!w.analysis()->hasResult());  // "calibrated": false: nothing runs on its own
    auto* calibrate = test::part<QAction>(w, "calibrateAction");
    QVERIFY(calibrate->isEnabled());
    QCOMPARE(calibrate->text(), QStringLiteral("&Calibrate"));  // no "…": it runs, it does not ask
    QVERIFY(w.analysisActions()->calibratesDirectly());

    QSignalSpy shown(&w, &MainWindow::analysisShown);
    calibrate->trigger();
    QVERIFY(w.analysis()->isBusy());
    QVERIFY(!test::part<CalibrationDialog>(w, "calibrationDialog")->isVisible());
    QVERIFY(shown.wait(300000));
    QVERIFY(!test::part<CalibrationDialog>(w, "calibrationDialog")->isVisible());

    const auto result = w.analysis()->result();
    QVERIFY(result);
    QCOMPARE(result->samples, (int64_t)2);
    QCOMPARE(w.analysis()->request().data.path, m_pages.toStdString());
    QCOMPARE(w.analysis()->request().data.image.width, 160);

    // The table holds graph-wise SNR figures, the graph is coloured by them.
    auto* table = test::part<NodeTableModel>(w, "nodeTableModel");
    QCOMPARE(table->result(), result);
    int withSnr = 0;
    for (int r = 0; r < table->rowCount(); ++r) {
      const QModelIndex i = table->index(r, NodeTableModel::GraphSnrColumn);
      withSnr += !i.data().toString().isEmpty() && std::isfinite(i.data(NodeTableModel::SortRole).toDouble());
    }
    QVERIFY2(withSnr > 100, qPrintable(QString::number(withSnr)));
    GraphView* view = test::part<GraphView>(w, "graphView");
    QCOMPARE(view->colouring(), GraphView::Colouring::GraphwiseSnr);
    const std::vector<QRgb> bySnr = nodeFills(w);
    QVERIFY2(std::set<QRgb>(bySnr.begin(), bySnr.end()).size() >= 4, "several SNR colours");
    auto* colour = test::part<QComboBox>(w, "colourCombo");
    colour->setCurrentIndex(colour->findData(QStringLiteral("op")));
    const std::vector<QRgb> byOp = nodeFills(w);
    colour->setCurrentIndex(colour->findData(QStringLiteral("graphwise")));
    QCOMPARE(nodeFills(w), bySnr);
    int differ = 0;
    for (size_t i = 0; i < bySnr.size(); ++i) differ += bySnr[i] != byOp[i];
    QVERIFY2(differ > (int)bySnr.size() / 2, qPrintable(QStringLiteral("%1 of %2").arg(differ).arg(bySnr.size())));

    // Calibrate again runs again, with the same settings.
    QVERIFY(w.analysisActions()->calibratesDirectly());
    QCOMPARE(calibrate->text(), QStringLiteral("&Calibrate"));
  }

  // A model opened alone names no data: Calibrate opens the dialog. Random inputs on det (x is
  // [N, 3, H, W], all symbolic but C) need its shape fields, prefilled from the resize; the run
  // gets what they say; a saved project keeps them and reopens with them.
  void randomInputsOnDetThroughShapeFields() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, detModel()));
    auto* calibrate = test::part<QAction>(w, "calibrateAction");
    QCOMPARE(calibrate->text(), QStringLiteral("&Calibrate…"));
    calibrate->trigger();
    auto* d = test::part<CalibrationDialog>(w, "calibrationDialog");
    QVERIFY(d->isVisible());
    QVERIFY(!w.analysis()->isBusy());

    InputShapeFields* fields = d->shapeFields();
    d->sourceCombo()->setCurrentIndex(d->sourceCombo()->findData(CalibrationDialog::ImageFolder));
    QVERIFY(!fields->isEnabled());  // image data has its own shape
    QVERIFY(d->request().data.shapes.empty());
    // Random, two samples (what the form does not show comes from setRequest).
    AnalysisRequest two = d->request();
    two.data.path.clear();
    two.data.maxSamples = 2;
    d->setRequest(two);
    QCOMPARE(d->sourceCombo()->currentData().toInt(), (int)CalibrationDialog::Random);
    QVERIFY(fields->isEnabled());
    QVERIFY(fields->hasFields());
    QSpinBox* batch = fields->field(QStringLiteral("x"), 0);
    QSpinBox* height = fields->field(QStringLiteral("x"), 2);
    QSpinBox* width = fields->field(QStringLiteral("x"), 3);
    QVERIFY(batch && height && width);
    QVERIFY(!fields->field(QStringLiteral("x"), 1));  // the channels are fixed at 3
    QCOMPARE(batch->value(), 1);
    QCOMPARE(height->value(), 640);  // the resize fields' size for det's free sides
    QCOMPARE(width->value(), 640);
    QCOMPARE(batch, fields->findChild<QSpinBox*>(QStringLiteral("shape:x:0")));
    height->setValue(96);
    width->setValue(128);
    const Shape wanted{1, 3, 96, 128};
    QCOMPARE(d->request().data.shapes.at("x"), wanted);

    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QSignalSpy failed(w.analysis(), &AnalysisController::failed);
    QTest::mouseClick(d->calibrateButton(), Qt::LeftButton);
    QVERIFY2(calibrated.wait(300000), failed.isEmpty() ? "timeout" : qPrintable(failed.first().at(1).toString()));
    QVERIFY(w.analysis()->data()->isRandom());
    QCOMPARE(w.analysis()->result()->samples, (int64_t)2);
    QCOMPARE(w.analysis()->request().data.shapes.at("x"), wanted);
    QCOMPARE(calibrate->text(), QStringLiteral("&Calibrate"));  // the settings are chosen now

    // The project keeps the shapes; reopened, it calibrates with them and the fields show them.
    const QString project = m_tmp.filePath(QStringLiteral("det-random.qsproj"));
    QVERIFY(w.projects()->save(project));
    QFile f(project);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray json = f.readAll();
    QVERIFY2(json.contains("\"shapes\"") && json.contains("96"), json.constData());
    MainWindow w2;
    w2.setErrorDialogsEnabled(false);
    QSignalSpy calibrated2(w2.analysis(), &AnalysisController::calibrated);
    QVERIFY(w2.projects()->open(project));
    QVERIFY(calibrated2.wait(300000));
    QCOMPARE(w2.analysis()->request().data.shapes.at("x"), wanted);
    CalibrationDialog* d2 = w2.analysisActions()->calibrationDialog();
    QCOMPARE(d2->sourceCombo()->currentData().toInt(), (int)CalibrationDialog::Random);
    QCOMPARE(d2->shapeFields()->field(QStringLiteral("x"), 2)->value(), 96);
    QCOMPARE(d2->shapeFields()->field(QStringLiteral("x"), 3)->value(), 128);
    QCOMPARE(d2->request().data.shapes, w.analysis()->request().data.shapes);
    QVERIFY(!w2.projects()->hasUnsavedChanges());
  }

  // A project whose data folder is gone: Calibrate tries, and opens the dialog with the one line
  // naming the folder, beside the settings to fix.
  void missingDataOpensTheDialogWithTheError() {
    const QString gone = m_tmp.filePath(QStringLiteral("moved-away"));
    const QString project = m_tmp.filePath(QStringLiteral("det-gone.qsproj"));
    QVERIFY(writeDetProject(project, gone, 160));
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, project));
    QSignalSpy failed(w.analysis(), &AnalysisController::failed);
    test::part<QAction>(w, "calibrateAction")->trigger();
    QCOMPARE(failed.count(), 1);
    auto* d = test::part<CalibrationDialog>(w, "calibrationDialog");
    QVERIFY(d->isVisible());
    QVERIFY2(d->errorText().contains(gone) && d->errorText().contains(QStringLiteral("no such")), qPrintable(d->errorText()));
    QCOMPARE(d->pathEdit()->text(), gone);
    QVERIFY(!w.analysis()->isBusy());
    QVERIFY(!w.analysis()->hasResult());
  }
};

int runFirstRunTests(int argc, char** argv) {
  FirstRunTest t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_first_run.moc"
