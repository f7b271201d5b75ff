// Offscreen tests of the calibration dialog's "Remedies: none / auto / custom" choice (ui/remedy_options.h). The
// form maps onto the request: none is the CLI's defaults, auto is `--remedies auto` with the remedy switches at
// those defaults (greyed), custom is the switches, whose state comes back after none or auto. Auto, clicked in the
// workbench on the pointwise smoothing model built in code, runs the pipeline's choice (core/export/remedy_choice.h,
// no second implementation in ui/): it keeps what the core run of `--remedies auto` keeps, with the same trials and
// figures, and its export equals `quantscope export --remedies auto`'s byte for byte (report.json's "remedy_choice"
// included); the inspector's model summary lists what it tried and kept and the layer table's "Remedy" column marks
// the smoothed Convs as kept by it (by node name: the inserted Muls move the ids of the run's model). The project file and the autosave keep the choice (not the remedies it kept: a
// reopened project chooses again); a bad value is one line naming the file and the key.
// After a run with pointwise smoothing (two Muls inserted), the table, the graph view and the SNR plot show each
// shown node the figures of the run node of the same name, and toggles by node and op type reach the run's nodes.
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <qcustomplot.h>
#include <cmath>
#include <random>

#include "core/io/npy.h"
#include "tests/support/model_helpers.h"
#include "tests/support/remedy_helpers.h"
#include "tests/ui/export_helpers.h"
#include "tests/ui/window_parts.h"
#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/autosave.h"
#include "ui/calibration_dialog.h"
#include "ui/main_window.h"
#include "ui/graph_view.h"
#include "ui/node_table_model.h"
#include "ui/plots_panel.h"
#include "ui/project_file.h"
#include "ui/property_tree_model.h"
#include "ui/remedy_notes.h"
#include "ui/remedy_options.h"

using namespace qs;
using namespace qs::ui;

using qs::test::exportThroughDialog;
using qs::test::nodeNamed;
using qs::test::readAll;

namespace {

bool openAndWait(MainWindow& w, const QString& path) {
  QSignalSpy shown(&w, &MainWindow::modelShown);
  w.openFile(path);
  return shown.wait(120000);
}

// The value of `key` under the inspector's top-level entry `section` (null when absent).
QString inspectorValue(const PropertyTreeModel& m, const QString& section, const QString& key = {}) {
  const QModelIndex s = m.findKey(section);
  if (!s.isValid()) return QString();
  if (key.isEmpty()) return s.siblingAtColumn(PropertyTreeModel::ValueColumn).data().toString();
  const QModelIndex k = m.findKey(key, s);
  return k.isValid() ? k.siblingAtColumn(PropertyTreeModel::ValueColumn).data().toString() : QString();
}

}  // namespace

class RemedyChoiceTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_tmp;
  QString m_model, m_data;

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeTests"));
    QCoreApplication::setApplicationName(QStringLiteral("qs_ui_remedy_choice_tests"));
    QSettings().clear();
    QVERIFY(m_tmp.isValid());
    // The model and data of RemedyChoice.KeepsPointwiseSmoothingWhereItPays... (tests/export/test_remedy_choice.cpp):
    // 16 samples in 4 batches, 2 to choose on and 2 held out; auto keeps pointwise smoothing there.
    std::mt19937 rng(5);
    m_model = QString::fromStdString(test::writePointwiseModel(m_tmp.path().toStdString(), rng));
    m_data = m_tmp.filePath(QStringLiteral("x.npy"));
    QVERIFY(writeNpy(m_data.toStdString(), test::randomTensor({16, 3, 12, 12}, rng, -1.f, 1.f)));
  }

  // None is the default (the CLI's); a switch changed under none makes the choice custom; auto greys the remedy
  // switches at the defaults and asks for --remedies auto; custom's switches come back; setRequest() shows the
  // choice a request stands for.
  void formMapsTheChoiceOntoTheRequest() {
    RemedyOptions box;
    QCOMPARE(box.remedyChoice(), RemediesNone);
    QCOMPARE(box.remedyChoiceCombo()->count(), 3);
    AnalysisRequest r;
    r.remedies = RemedyMode::Auto;
    box.apply(r);
    QVERIFY(r.remedies == RemedyMode::None && remedySwitchesAtDefaults(r));

    box.equalizeBox()->setChecked(true);
    QCOMPARE(box.remedyChoice(), RemediesCustom);
    box.pointwiseSmoothBox()->setChecked(true);
    box.apply(r);
    QVERIFY(r.equalize && r.pointwiseSmooth && r.remedies == RemedyMode::None);

    box.setRemedyChoice(RemediesAuto);
    for (QCheckBox* b : {box.equalizeBox(), box.biasCorrectionBox(), box.smoothQuantBox(), box.weightClipBox(),
                         box.depthwiseEqualizeBox(), box.depthwiseSmoothBox(), box.pointwiseSmoothBox()})
      QVERIFY2(!b->isEnabled(), qPrintable(b->objectName()));
    QVERIFY(!box.equalizeBox()->isChecked() && !box.pointwiseSmoothBox()->isChecked());
    QVERIFY(box.depthwiseEqualizeBox()->isChecked());  // the default auto starts from
    QVERIFY(box.integerConvBox()->isEnabled());        // not a remedy: auto leaves it to the user
    AnalysisRequest a;
    a.equalize = true;
    box.apply(a);
    QVERIFY(a.remedies == RemedyMode::Auto && remedySwitchesAtDefaults(a));
    QCOMPARE(remedyChoiceOf(a), RemediesAuto);

    box.setRemedyChoice(RemediesCustom);
    QVERIFY(box.equalizeBox()->isEnabled() && box.equalizeBox()->isChecked() && box.pointwiseSmoothBox()->isChecked());
    box.setRemedyChoice(RemediesNone);
    AnalysisRequest n;
    n.equalize = true;
    box.apply(n);
    QVERIFY(n.remedies == RemedyMode::None && remedySwitchesAtDefaults(n));
    QVERIFY(box.equalizeBox()->isEnabled());

    AnalysisRequest custom;
    custom.depthwiseEqualize = false;
    box.setRequest(custom);
    QCOMPARE(box.remedyChoice(), RemediesCustom);
    QVERIFY(!box.depthwiseEqualizeBox()->isChecked());
    box.setRequest(a);
    QCOMPARE(box.remedyChoice(), RemediesAuto);
    box.setRemedyChoice(RemediesCustom);  // the custom request shown before auto comes back
    QVERIFY(!box.depthwiseEqualizeBox()->isChecked());
    box.setRequest(AnalysisRequest{});
    QCOMPARE(box.remedyChoice(), RemediesNone);
    QCOMPARE(remedyChoiceName(RemediesAuto), QStringLiteral("auto"));
  }

  // Auto through the dialog: the core run's choice and figures, the CLI's export byte for byte, the inspector and
  // the layer table, and the autosave.
  void autoThroughTheWorkbenchIsTheClis() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    const QString autosaves = m_tmp.filePath(QStringLiteral("autosave"));
    QVERIFY(QDir().mkpath(autosaves));
    w.autosave()->setDirectory(autosaves);
    w.resize(1400, 900);
    w.show();
    QVERIFY(openAndWait(w, m_model));
    CalibrationDialog* d = w.analysisActions()->calibrationDialog();
    AnalysisRequest base;
    base.data.path = m_data.toStdString();
    base.calibration.method = CalibMethod::Max;
    base.sensitivity = false;
    d->setRequest(base);
    QComboBox* choice = d->remedyOptions()->remedyChoiceCombo();
    choice->setCurrentIndex(choice->findData(RemediesAuto));
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QSignalSpy failed(w.analysis(), &AnalysisController::failed);
    QTest::mouseClick(d->calibrateButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!calibrated.isEmpty() || !failed.isEmpty(), 180000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(1).toString()));
    QVERIFY(w.analysis()->request().remedies == RemedyMode::Auto);
    QVERIFY(!w.analysis()->request().pointwiseSmooth);  // the request as asked; the run's says what was kept
    const auto run = w.analysis()->run();
    const RemedyChoice& c = run->remedies.choice;
    QCOMPARE(c.mode, std::string("auto"));
    QCOMPARE(c.kept, std::vector<std::string>{"pointwise_smooth"});
    QVERIFY(run->request.pointwiseSmooth);
    QCOMPARE(run->remedies.pointwiseSmoothed.size(), size_t(2));

    // The core run of the CLI's request (--remedies auto, the GUI's data and method, no sensitivity).
    AnalysisRequest cli;
    cli.modelPath = m_model.toStdString();
    cli.data = base.data;
    cli.calibration.method = CalibMethod::Max;
    cli.sensitivity = false;
    cli.keepForToggles = false;
    cli.remedies = RemedyMode::Auto;
    auto core = runAnalysis(cli);
    QVERIFY2(core, core ? "" : core.status().message().c_str());
    const RemedyChoice& k = core->remedies.choice;
    QCOMPARE(k.kept, c.kept);
    QCOMPARE(k.choiceSamples, c.choiceSamples);
    QCOMPARE(k.heldOutSamples, c.heldOutSamples);
    QCOMPARE(k.trials.size(), c.trials.size());
    for (size_t i = 0; i < c.trials.size(); ++i) {
      const RemedyTrial &g = c.trials[i], &e = k.trials[i];
      QCOMPARE(g.remedy, e.remedy);
      QCOMPARE(g.items, e.items);
      QCOMPARE(g.kept, e.kept);
      QCOMPARE(g.reason, e.reason);
      for (auto [x, y] : {std::pair{g.beforeDb, e.beforeDb}, std::pair{g.afterDb, e.afterDb},
                          std::pair{g.heldOutBeforeDb, e.heldOutBeforeDb}, std::pair{g.heldOutAfterDb, e.heldOutAfterDb}})
        QVERIFY2((std::isnan(x) && std::isnan(y)) || std::abs(x - y) < 1e-9, qPrintable(QStringLiteral("%1 %2").arg(x).arg(y)));
    }
    const double gui = w.analysis()->result()->worstOutputSnrDb();
    QVERIFY(std::abs(gui - core->result()->worstOutputSnrDb()) < 1e-9);
    qInfo("auto through the workbench: kept %s, worst output SNR %.3f dB (pointwise smoothing %.2f -> %.2f dB on the "
          "choice samples, %.2f -> %.2f held out); the core run %.3f dB",
          c.kept.front().c_str(), gui, c.trials[1].beforeDb, c.trials[1].afterDb, c.trials[1].heldOutBeforeDb,
          c.trials[1].heldOutAfterDb, core->result()->worstOutputSnrDb());

    // The inspector's model summary (nothing selected): the choice, each candidate, the smoothed inputs.
    auto* inspector = test::part<PropertyTreeModel>(w, "inspectorModel");
    QCOMPARE(inspectorValue(*inspector, QStringLiteral("Remedy choice")), QStringLiteral("auto: kept pointwise_smooth"));
    QVERIFY(inspectorValue(*inspector, QStringLiteral("Remedy choice"), QStringLiteral("pointwise_smooth")).startsWith(QStringLiteral("kept (2 inputs)")));
    QCOMPARE(inspectorValue(*inspector, QStringLiteral("Remedy choice"), QStringLiteral("depthwise_smooth")),
             QStringLiteral("not tried: nothing to change on this model"));
    QVERIFY(inspectorValue(*inspector, QStringLiteral("Remedy choice"), QStringLiteral("Samples")).startsWith(QStringLiteral("8 to choose on, 8 held out")));
    QCOMPARE(inspectorValue(*inspector, QStringLiteral("Remedies"), QStringLiteral("Pointwise inputs smoothed")), QStringLiteral("2"));

    // The layer table's "Remedy" column: the smoothed Convs, kept by the choice.
    auto* table = test::part<NodeTableModel>(w, "nodeTableModel");
    const Graph& shown = w.current()->model->graph;
    for (const DepthwiseSmoothedInput& s : run->remedies.pointwiseSmoothed) {
      const std::string name = run->model->graph.nodes[(size_t)s.consumer].name;
      const NodeId id = nodeNamed(shown, name);
      QVERIFY2(id >= 0, name.c_str());
      const QModelIndex cell = table->index(table->rowOfNode(id), NodeTableModel::RemedyNoteColumn);
      QCOMPARE(cell.data().toString(), QStringLiteral("PW smooth"));
      QVERIFY2(cell.data(Qt::ToolTipRole).toString().contains(QStringLiteral("kept by the remedy choice (auto)")), name.c_str());
      // The inspector's section of that node (ids of the model shown, the summary's of the run's model).
      const auto props = remedyNodeProperties(shown, run->model->graph, run->remedies, id);
      QCOMPARE(props.size(), size_t(1));
      QCOMPARE(props[0].value, QStringLiteral("PW smooth"));
    }

    // The export through the dialog equals `quantscope export --remedies auto` byte for byte.
    const QString guiDir = m_tmp.filePath(QStringLiteral("gui"));
    QVERIFY(exportThroughDialog(w, guiDir));
    const QString cliDir = m_tmp.filePath(QStringLiteral("cli"));
    QProcess quantscope;
    quantscope.start(QStringLiteral(QS_BINARY),
                     {QStringLiteral("export"), m_model, QStringLiteral("--calibration-data"), m_data, QStringLiteral("--calibration-method"),
                      QStringLiteral("max"), QStringLiteral("--sensitivity"), QStringLiteral("off"), QStringLiteral("--remedies"),
                      QStringLiteral("auto"), QStringLiteral("--output-dir"), cliDir});
    QVERIFY(quantscope.waitForFinished(300000));
    QVERIFY2(quantscope.exitStatus() == QProcess::NormalExit && quantscope.exitCode() == 0, quantscope.readAllStandardError().constData());
    const QStringList files = QDir(guiDir).entryList(QDir::Files, QDir::Name);
    QCOMPARE(files, QDir(cliDir).entryList(QDir::Files, QDir::Name));
    QVERIFY(files.contains(QStringLiteral("report.json")) && files.contains(QStringLiteral("quantized.onnx")));
    for (const QString& f : files) QVERIFY2(readAll(guiDir + QLatin1Char('/') + f) == readAll(cliDir + QLatin1Char('/') + f), qPrintable(f));
    const QByteArray report = readAll(guiDir + QStringLiteral("/report.json"));
    QVERIFY(report.contains("\"remedy_choice\"") && report.contains("\"remedies\": \"auto: pointwise_smooth\""));

    // The autosave (written right after the calibration) holds the choice, not the remedies it kept.
    Project saved;
    QString error;
    QVERIFY(!w.autosave()->file().isEmpty());
    QVERIFY2(loadProject(w.autosave()->file(), saved, error), qPrintable(error));
    QVERIFY(saved.calibration.remedies == RemedyMode::Auto);
    QVERIFY(!saved.calibration.pointwiseSmooth);
    // The dialog shows auto again for the next run.
    d->setRequest(w.analysis()->request());
    QCOMPARE(d->remedyOptions()->remedyChoice(), RemediesAuto);
    QVERIFY(d->request().remedies == RemedyMode::Auto);
  }

  // Pointwise smoothing inserts a Mul before each smoothed Conv, so the run's model has more nodes than the one shown:
  // the table, the graph view and the SNR plot show each shown node the figures of the run node of the same name
  // (they showed none before), and a toggle by the shown ids (the table's) reaches the run's node and updates them.
  void perNodeFiguresAfterInsertedNodes() {
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(openAndWait(w, m_model));
    CalibrationDialog* d = w.analysisActions()->calibrationDialog();
    AnalysisRequest base;
    base.data.path = m_data.toStdString();
    base.calibration.method = CalibMethod::Max;
    base.sensitivity = false;
    d->setRequest(base);
    d->remedyOptions()->pointwiseSmoothBox()->setChecked(true);
    QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
    QSignalSpy failed(w.analysis(), &AnalysisController::failed);
    QTest::mouseClick(d->calibrateButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!calibrated.isEmpty() || !failed.isEmpty(), 180000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(1).toString()));
    const auto run = w.analysis()->run();
    const Graph& shown = w.current()->model->graph;
    const Graph& ran = run->model->graph;
    QCOMPARE(run->remedies.pointwiseSmoothed.size(), size_t(2));
    QCOMPARE(ran.nodes.size(), shown.nodes.size() + 2);  // the two inserted Muls

    auto* table = test::part<NodeTableModel>(w, "nodeTableModel");
    auto* view = test::part<GraphView>(w, "graphView");
    auto* plots = test::part<PlotsPanel>(w, "plotsPanel");
    // Every shown Conv's graph-wise SNR in the table and the graph view is the session's figure of its namesake.
    auto checkFigures = [&](const AnalysisResult& r) {
      int convs = 0;
      for (NodeId id = 0; id < (NodeId)shown.nodes.size(); ++id) {
        if (shown.nodes[(size_t)id].opType != "Conv") continue;
        const NodeId runId = nodeNamed(ran, shown.nodes[(size_t)id].name);
        if (runId < 0 || !r.nodes[(size_t)runId].hasGraphwise) return false;
        const double want = r.nodes[(size_t)runId].graphwise.snrDb;
        const QVariant cell = table->index(table->rowOfNode(id), NodeTableModel::GraphSnrColumn).data(NodeTableModel::SortRole);
        if (cell.toDouble() != want || !view->analysis() || view->analysis()->nodes[(size_t)id].graphwise.snrDb != want) {
          qWarning("%s: table %g, graph view %g, run %g", shown.nodes[(size_t)id].name.c_str(), cell.toDouble(),
                   view->analysis() ? view->analysis()->nodes[(size_t)id].graphwise.snrDb : NAN, want);
          return false;
        }
        ++convs;
      }
      return convs >= 2;
    };
    QVERIFY(checkFigures(*w.analysis()->session()->result()));
    int withGraphwise = 0;
    for (const NodeResult& n : w.analysis()->session()->result()->nodes) withGraphwise += n.hasGraphwise;
    // The plot: one point per shown node with a figure (the inserted Muls have none on the model shown).
    const int plotted = plots->plot(PlotsPanel::SnrTab)->graph(0)->dataCount();
    QVERIFY2(plotted > 0 && plotted <= withGraphwise - 2, qPrintable(QStringLiteral("%1 of %2").arg(plotted).arg(withGraphwise)));

    // The histogram of a smoothed Conv's point: the session's tensor it quantizes (the inserted Mul's output).
    {
      const DepthwiseSmoothedInput& first = run->remedies.pointwiseSmoothed.front();
      const Node& runConv = ran.nodes[(size_t)first.consumer];
      const TensorStats* stats = w.analysis()->session()->stats(runConv.inputs[0]);
      QVERIFY(stats);
      const NodeId shownConv = nodeNamed(shown, runConv.name);
      // Here the smoothing keeps the largest channel's max: the ids tell the two tensors apart.
      QCOMPARE(plots->sessionTensor(shownConv, shown.nodes[(size_t)shownConv].inputs[0]), runConv.inputs[0]);
      plots->setSelectedNode(shownConv);
      auto* title = qobject_cast<QCPTextElement*>(plots->plot(PlotsPanel::HistogramTab)->plotLayout()->element(0, 0));
      QVERIFY(title);
      const QString max = QStringLiteral("max %1").arg(stats->absMax(), 0, 'g', 4);
      QVERIFY2(title->text().endsWith(max), qPrintable(title->text() + QStringLiteral(" / ") + max));
    }
    // A toggle from the table (shown ids): the last smoothed Conv excluded, in the session under its run id.
    const DepthwiseSmoothedInput& last = run->remedies.pointwiseSmoothed.back();
    const std::string convName = ran.nodes[(size_t)last.consumer].name;
    const NodeId conv = nodeNamed(shown, convName);
    QVERIFY(conv >= 0);
    const double before = table->index(table->rowOfNode(conv), NodeTableModel::GraphSnrColumn).data(NodeTableModel::SortRole).toDouble();
    QSignalSpy idle(w.analysis(), &AnalysisController::idle);
    w.analysis()->setDebounceMs(0);
    w.analysisActions()->requestNode(conv, false);
    QVERIFY(idle.wait(120000));
    QVERIFY(!w.analysis()->session()->plan().nodes[(size_t)last.consumer].quantized);
    QVERIFY(!w.analysis()->result()->plan.nodes[(size_t)conv].quantized);
    QVERIFY(w.analysis()->unappliedStates().empty());
    QVERIFY(checkFigures(*w.analysis()->session()->result()));
    const double after = table->index(table->rowOfNode(conv), NodeTableModel::GraphSnrColumn).data(NodeTableModel::SortRole).toDouble();
    QVERIFY2(after != before, qPrintable(QStringLiteral("%1 dB before and after").arg(before)));
    // By op type: every Conv back on, in the session too.
    w.analysisActions()->requestOpType(QStringLiteral("Conv"), true);
    QVERIFY(idle.wait(120000));
    for (NodeId id = 0; id < (NodeId)ran.nodes.size(); ++id)
      if (ran.nodes[(size_t)id].opType == "Conv" && w.analysis()->session()->plan().nodes[(size_t)id].quantizable)
        QVERIFY2(w.analysis()->session()->plan().nodes[(size_t)id].quantized, ran.nodes[(size_t)id].name.c_str());
    QVERIFY(checkFigures(*w.analysis()->session()->result()));
    QCOMPARE(table->index(table->rowOfNode(conv), NodeTableModel::GraphSnrColumn).data(NodeTableModel::SortRole).toDouble(), before);
  }

  // The project file: "remedies": "auto" written for auto only, "pointwise_smooth" when on; read back; bad values
  // are one line naming the file and the key.
  void projectKeepsTheChoice() {
    const QString path = m_tmp.filePath(QStringLiteral("c.qsproj"));
    Project p;
    p.modelPath = m_model;
    p.calibration.data.path = m_data.toStdString();
    const QByteArray none = projectToJson(p, path);
    QVERIFY(!none.contains("\"remedies\"") && !none.contains("\"pointwise_smooth\""));
    Project q;
    QString error;
    QVERIFY2(projectFromJson(none, path, q, error), qPrintable(error));
    QVERIFY(q.calibration.remedies == RemedyMode::None);

    p.calibration.remedies = RemedyMode::Auto;
    p.calibration.pointwiseSmooth = true;
    const QByteArray all = projectToJson(p, path);
    QVERIFY(all.contains("\"remedies\": \"auto\"") && all.contains("\"pointwise_smooth\": true"));
    Project r;
    QVERIFY2(projectFromJson(all, path, r, error), qPrintable(error));
    QVERIFY(r.calibration.remedies == RemedyMode::Auto && r.calibration.pointwiseSmooth);

    for (auto [to, shown] : {std::pair{"\"remedies\": \"some\"", "'some'"}, std::pair{"\"remedies\": 1", "'(not a string)'"},
                             std::pair{"\"remedies\": \"a\\nb\"", "'a?b'"}}) {
      QByteArray bad = all;
      bad.replace("\"remedies\": \"auto\"", to);
      Project b;
      QVERIFY2(!projectFromJson(bad, path, b, error), to);
      QVERIFY2(error.startsWith(path) && error.contains(QStringLiteral("\"remedies\": %1: expected auto or none").arg(QLatin1String(shown))) &&
                   !error.contains(QLatin1Char('\n')),
               qPrintable(error));
    }
    QByteArray off = all;
    off.replace("\"pointwise_smooth\": true", "\"pointwise_smooth\": \"on\"");
    Project b;
    QVERIFY(!projectFromJson(off, path, b, error));
    QVERIFY2(error.startsWith(path) && error.contains(QStringLiteral("pointwise_smooth")), qPrintable(error));
  }
};

int runRemedyChoiceTests(int argc, char** argv) {
  RemedyChoiceTest t;
  return QTest::qExec(&t, argc, argv);
}

#include "test_remedy_choice.moc"
