// Offscreen tests of the realisations of the rounding noise in the workbench (issue #14; --realisations
// auto|N, docs/quality.md "Realisations of the rounding noise"): the dialog's setting reaches the request
// the GUI runs, the project file keeps it (an old project reads as 1, a bad value is one line naming the
// file and the key), the run's result carries the realisations and the workbench shows their figures, and
// a GUI run and `quantscope analyze` on the same model, data and settings print the same figures.
#include <QApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QSpinBox>
#include <QLabel>
#include <QPlainTextEdit>
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "tests/support/text_images.h"
#include "tests/ui/export_helpers.h"
#include "tests/ui/window_parts.h"
#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/calibration_dialog.h"
#include "ui/main_window.h"
#include "ui/project_controller.h"
#include "ui/project_file.h"
#include "ui/property_tree_model.h"
#include "ui/realisation_text.h"
#include "ui/remedy_options.h"

using namespace qs;
using namespace qs::ui;

namespace {

QString clsModel() { return QStringLiteral(QS_MODELS_DIR "/ch_ppocr_mobile_v2.0_cls_infer.onnx"); }

// What the CLI flags below say, the rest at the CLI's defaults (the request the GUI builds from them).
AnalysisRequest clsRequest(const QString& folder) {
  AnalysisRequest r;
  r.data.path = folder.toStdString();
  r.data.image.width = 192;  // cls takes 3x48x192
  r.data.image.height = 48;
  r.data.image.mean = {0.5f, 0.5f, 0.5f};
  r.data.image.std = {0.5f, 0.5f, 0.5f};
  r.calibration.method = CalibMethod::Max;
  return r;
}

QStringList clsFlags(const QString& folder) {
  return {QStringLiteral("--calibration-data"), folder, QStringLiteral("--image-size"), QStringLiteral("192x48"),
          QStringLiteral("--mean"), QStringLiteral("0.5,0.5,0.5"), QStringLiteral("--std"), QStringLiteral("0.5,0.5,0.5"),
          QStringLiteral("--calibration-method"), QStringLiteral("max")};
}

bool openAndWait(MainWindow& w, const QString& path) {
  QSignalSpy shown(&w, &MainWindow::modelShown);
  w.openFile(path);
  return shown.wait(120000);
}

// The value of the inspector's row `key` anywhere under `parent` ("" when there is none).
QString inspectorValue(const QAbstractItemModel& m, const QString& key, const QModelIndex& parent = {}) {
  for (int r = 0; r < m.rowCount(parent); ++r) {
    const QModelIndex k = m.index(r, 0, parent);
    if (k.data().toString() == key) return m.index(r, 1, parent).data().toString();
    if (const QString v = inspectorValue(m, key, k); !v.isEmpty()) return v;
  }
  return {};
}

// Waits until no job runs and every requested state is in the results.
bool waitSettled(MainWindow& w, int timeoutMs = 300000) {
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

// `quantscope analyze` on cls with `flags`: stdout and stderr together; empty when it failed (reported).
QString runCli(const QStringList& flags) {
  QProcess quantscope;
  quantscope.start(QStringLiteral(QS_BINARY), QStringList{QStringLiteral("analyze"), clsModel()} + flags);
  if (!quantscope.waitForFinished(300000) || quantscope.exitStatus() != QProcess::NormalExit || quantscope.exitCode() != 0) {
    qWarning("quantscope analyze failed: %s", quantscope.readAllStandardError().constData());
    return {};
  }
  return QString::fromUtf8(quantscope.readAllStandardOutput()) + QString::fromUtf8(quantscope.readAllStandardError());
}

}  // namespace

class RealisationsTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_tmp;
  QString m_images;

 private slots:
  void initTestCase() {
    QVERIFY(m_tmp.isValid());
    m_images = m_tmp.filePath(QStringLiteral("cls4"));
    test::writeTextImages(m_images.toStdString(), 4, 192, 48, 7);
    if (!QFileInfo::exists(clsModel())) QSKIP("cls model missing: run scripts/setup.sh");
  }

  // The dialog's box: 1 by default (the CLI's), auto at its minimum, N as given; request() carries it and
  // setRequest() shows it.
  void dialogSetting() {
    RemedyOptions box;
    QSpinBox* n = box.realisationsBox();
    QCOMPARE(n->value(), 1);
    QCOMPARE(n->minimum(), RemedyOptions::kAutoRealisations);
    QCOMPARE(n->text(), QStringLiteral("1"));
    AnalysisRequest r;
    n->setValue(RemedyOptions::kAutoRealisations);
    QCOMPARE(n->text(), QStringLiteral("auto"));
    box.apply(r);
    QVERIFY(r.realisationsAuto);
    QCOMPARE(realisationsSettingText(r), QStringLiteral("auto"));
    n->setValue(8);
    box.apply(r);
    QVERIFY(!r.realisationsAuto);
    QCOMPARE(r.realisations, 8);
    AnalysisRequest shown;
    shown.realisations = 5;
    box.setRequest(shown);
    QCOMPARE(n->value(), 5);
    shown.realisationsAuto = true;
    box.setRequest(shown);
    QCOMPARE(n->value(), RemedyOptions::kAutoRealisations);
    box.setRequest(AnalysisRequest{});
    QCOMPARE(n->value(), 1);
  }

  // The project file's "realisations": absent for 1 (an old project reads as 1), "auto" or the count,
  // and a bad value refused in one line naming the file and the key.
  void projectKey() {
    const QString path = m_tmp.filePath(QStringLiteral("r.qsproj"));
    Project p;
    p.modelPath = clsModel();
    p.calibration = clsRequest(m_images);
    const QByteArray plain = projectToJson(p, path);
    QVERIFY(!plain.contains("\"realisations\""));
    Project q;
    QString error;
    QVERIFY2(projectFromJson(plain, path, q, error), qPrintable(error));
    QCOMPARE(q.calibration.realisations, 1);
    QVERIFY(!q.calibration.realisationsAuto);

    p.calibration.realisationsAuto = true;
    const QByteArray autoJson = projectToJson(p, path);
    QVERIFY(autoJson.contains("\"realisations\": \"auto\""));
    Project a;
    QVERIFY2(projectFromJson(autoJson, path, a, error), qPrintable(error));
    QVERIFY(a.calibration.realisationsAuto);

    p.calibration.realisationsAuto = false;
    p.calibration.realisations = 8;
    const QByteArray eight = projectToJson(p, path);
    QVERIFY(eight.contains("\"realisations\": 8"));
    Project e;
    QVERIFY2(projectFromJson(eight, path, e, error), qPrintable(error));
    QVERIFY(!e.calibration.realisationsAuto);
    QCOMPARE(e.calibration.realisations, 8);

    for (const char* to : {"\"realisations\": 0", "\"realisations\": 65", "\"realisations\": 2.5", "\"realisations\": \"8\"",
                           "\"realisations\": \"Auto\"", "\"realisations\": true", "\"realisations\": null",
                           "\"realisations\": \"a\\nb\""}) {
      QByteArray bad = eight;
      bad.replace("\"realisations\": 8", to);
      Project b;
      QVERIFY2(!projectFromJson(bad, path, b, error), to);
      QVERIFY2(error.startsWith(path) && error.contains(QLatin1String("\"realisations\"")) && !error.contains(QLatin1Char('\n')),
               qPrintable(error));
    }
  }

  // A run with N = 4 set in the dialog: the result carries 4 realisations per output, the mean lies within
  // their min..max, the inspector, the status bar and the log show the CLI's figures, and `quantscope
  // analyze --realisations 4` on the same data prints the same lines; a saved project brings the setting back.
  void guiRunMatchesTheCli() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(openAndWait(w, clsModel()));
    CalibrationDialog* d = w.analysisActions()->calibrationDialog();
    d->setRequest(clsRequest(m_images));
    test::part<QSpinBox>(*d, "realisationsBox")->setValue(4);
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    w.analysisActions()->showCalibrationDialog();
    QVERIFY(d->start());
    QVERIFY(calibrated.wait(300000));
    QCOMPARE(w.analysis()->request().realisations, 4);
    QVERIFY(!w.analysis()->request().realisationsAuto);
    const auto result = w.analysis()->result();
    QVERIFY(result);
    QVERIFY(!result->realisationProbe.ran);
    QVERIFY(!result->outputs.empty());
    const QString cli = runCli(clsFlags(m_images) + QStringList{QStringLiteral("--realisations"), QStringLiteral("4")});
    QVERIFY(!cli.isEmpty());
    const auto* inspector = test::part<PropertyTreeModel>(w, "inspectorModel");
    const QString status = test::part<QLabel>(w, "statusInfo")->text();
    const QString log = test::part<QPlainTextEdit>(w, "log")->toPlainText();
    for (const OutputResult& o : result->outputs) {
      QCOMPARE((int)o.realisationSnrDb.size(), 4);
      const auto [lo, hi] = std::minmax_element(o.realisationSnrDb.begin(), o.realisationSnrDb.end());
      QVERIFY(*lo <= o.realisationMeanDb() && o.realisationMeanDb() <= *hi);
      QVERIFY(o.realisationSdDb() >= 0);
      const QString line = outputRealisationsText(o);
      QVERIFY(line.startsWith(QStringLiteral("4 realisations: mean %1 dB, sd ").arg(o.realisationMeanDb(), 0, 'f', 2)));
      QVERIFY2(cli.contains(line), qPrintable(QStringLiteral("GUI '%1' not in the CLI's output:\n%2").arg(line, cli)));
      QVERIFY2(log.contains(line), qPrintable(log));
      const QString row = inspectorValue(*inspector, QStringLiteral("Output %1").arg(QString::fromStdString(o.name)));
      QVERIFY2(row.contains(QString::asprintf("mean of 4 %.2f dB, sd %.2f dB", o.realisationMeanDb(), o.realisationSdDb())) &&
                   inspectorValue(*inspector, QStringLiteral("Over 4 realisations")) == line,
               qPrintable(row));
    }
    QCOMPARE(inspectorValue(*inspector, QStringLiteral("Realisations")), QStringLiteral("4"));
    QVERIFY2(status.contains(worstRealisationsShortText(*result)) && !worstRealisationsShortText(*result).isEmpty(),
             qPrintable(status));

    // The auto-fallback checks its target on the mean too, and leaves the chosen point's realisations, which the
    // curve's title shows; `quantscope analyze --target-snr` stops at the same point with the same figures.
    const double target = std::ceil(result->worstOutputSnrDb()) + 1;
    QSignalSpy fallback(w.analysis(), &AnalysisController::fallbackFinished);
    QVERIFY(w.analysis()->autoFallback(target));
    QVERIFY(fallback.wait(300000));
    const auto after = w.analysis()->result();
    const QString cliFallback = runCli(clsFlags(m_images) + QStringList{QStringLiteral("--realisations"), QStringLiteral("4"),
                                                                        QStringLiteral("--target-snr"), QString::number(target)});
    QVERIFY(!cliFallback.isEmpty());
    QVERIFY2(cliFallback.contains(QStringLiteral("%1 node(s) excluded").arg(fallback.first().at(0).value<std::vector<FallbackStep>>().size())),
             qPrintable(cliFallback));
    for (const OutputResult& o : after->outputs) {
      QCOMPARE((int)o.realisationSnrDb.size(), 4);
      QVERIFY2(cliFallback.contains(outputRealisationsText(o)), qPrintable(outputRealisationsText(o) + QLatin1Char('\n') + cliFallback));
    }
    const bool reached = fallback.first().at(1).toBool();
    const int worstMean = worstRealisationOutput(*after);
    QCOMPARE(reached, after->worstOutputSnrDb() >= target && after->outputs[(size_t)worstMean].realisationMeanDb() >= target);
    QVERIFY(test::part<QCustomPlot>(w, "fallbackCurvePlot")->plotLayout()->elementCount() > 0);
    auto* title = qobject_cast<QCPTextElement*>(test::part<QCustomPlot>(w, "fallbackCurvePlot")->plotLayout()->element(0, 0));
    QVERIFY(title);
    QVERIFY2(title->text().contains(worstRealisationsShortText(*after)), qPrintable(title->text()));

    // The workbench's export writes the realisations into report.json, as the CLI's export does.
    const QString exported = m_tmp.filePath(QStringLiteral("export"));
    QVERIFY(test::exportThroughDialog(w, exported));
    const QJsonObject report = QJsonDocument::fromJson(test::readAll(exported + QStringLiteral("/report.json"))).object();
    QCOMPARE(report.value(QStringLiteral("settings")).toObject().value(QStringLiteral("realisations")).toString(), QStringLiteral("4"));
    const QJsonArray outputs = report.value(QStringLiteral("outputs")).toArray();
    QCOMPARE(outputs.size(), (qsizetype)after->outputs.size());
    for (qsizetype i = 0; i < outputs.size(); ++i) {
      const QJsonObject r = outputs[i].toObject().value(QStringLiteral("realisations")).toObject();
      QCOMPARE(r.value(QStringLiteral("snr_db")).toArray().size(), (qsizetype)4);
      QCOMPARE(QString::asprintf("%.2f", r.value(QStringLiteral("mean_db")).toDouble()),
               QString::asprintf("%.2f", after->outputs[(size_t)i].realisationMeanDb()));
    }

    // The project keeps the setting; opening it shows it in the dialog and runs with it.
    const QString project = m_tmp.filePath(QStringLiteral("cls4.qsproj"));
    QVERIFY(w.projects()->save(project));
    MainWindow w2;
    w2.setErrorDialogsEnabled(false);
    QSignalSpy calibrated2(w2.analysis(), &AnalysisController::calibrated);
    QVERIFY(w2.projects()->open(project));
    QVERIFY(calibrated2.wait(300000));
    QCOMPARE(w2.analysis()->request().realisations, 4);
    QCOMPARE(test::part<QSpinBox>(*w2.analysisActions()->calibrationDialog(), "realisationsBox")->value(), 4);
    QVERIFY(waitSettled(w2));
    // The fallback's exclusions come back as the user's states: the calibration measures the realisations there.
    for (size_t i = 0; i < after->outputs.size(); ++i)
      QCOMPARE(w2.analysis()->result()->outputs[i].realisationSnrDb, after->outputs[i].realisationSnrDb);
  }

  // auto: the probe's decision in the result, the status bar and the inspector, and the same line as the CLI's
  // (stderr) for the same run; with N > 1 chosen, the same figures per output too.
  void autoMatchesTheCli() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.show();
    QVERIFY(openAndWait(w, clsModel()));
    AnalysisRequest request = clsRequest(m_images);
    request.realisationsAuto = true;
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QVERIFY(w.analysis()->calibrate(request));
    QVERIFY(calibrated.wait(300000));
    const auto result = w.analysis()->result();
    const RealisationProbe& p = result->realisationProbe;
    QVERIFY(p.ran);
    QCOMPARE((int)p.worstSnrDb.size(), 4);
    QVERIFY(p.chosen == 1 || p.chosen == 8);
    QCOMPARE(p.chosen > 1, p.sdDb > p.thresholdDb);
    for (const OutputResult& o : result->outputs) QCOMPARE((int)o.realisationSnrDb.size(), p.chosen > 1 ? p.chosen : 0);
    const QString cli = runCli(clsFlags(m_images) + QStringList{QStringLiteral("--realisations"), QStringLiteral("auto")});
    QVERIFY(!cli.isEmpty());
    const QString line = realisationProbeText(*result);
    QVERIFY2(cli.contains(line), qPrintable(QStringLiteral("GUI '%1' not in the CLI's output:\n%2").arg(line, cli)));
    for (const OutputResult& o : result->outputs)
      if (!outputRealisationsText(o).isEmpty()) QVERIFY2(cli.contains(outputRealisationsText(o)), qPrintable(cli));
    const QString shortText = realisationProbeShortText(p);
    QCOMPARE(shortText, QStringLiteral("auto: probe sd %1 dB -> %2").arg(p.sdDb, 0, 'f', 2).arg(p.chosen));
    QVERIFY2(test::part<QLabel>(w, "statusInfo")->text().contains(shortText), qPrintable(test::part<QLabel>(w, "statusInfo")->text()));
    QCOMPARE(inspectorValue(*test::part<PropertyTreeModel>(w, "inspectorModel"), QStringLiteral("Realisations")),
             QStringLiteral("%1 (auto: probe sd %2 dB)").arg(p.chosen).arg(p.sdDb, 0, 'f', 2));
    QCOMPARE(inspectorValue(*test::part<PropertyTreeModel>(w, "inspectorModel"), QStringLiteral("Probe")), line);
    qInfo("cls, 4 samples, max: %s", qPrintable(line));
  }
};

int runRealisationsTests(int argc, char** argv) {
  RealisationsTest t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_realisations.moc"
