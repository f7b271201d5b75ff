// Offscreen tests of autosave and crash restore: a calibrated session with an excluded node is
// autosaved, the window is destroyed without its clean-close path (a crash, as far as the autosave
// can tell), and a new window restores the model, the exclusion and the results; a clean close and
// an explicit save leave no autosave; a live session's autosave is never offered; the message box
// answers.
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <QUndoStack>
#include <cmath>

#include "tests/support/text_images.h"
#include "tests/ui/window_parts.h"
#include "ui/analysis_actions.h"
#include "ui/analysis_controller.h"
#include "ui/autosave.h"
#include "ui/main_window.h"
#include "ui/node_table_model.h"
#include "ui/project_controller.h"
#include "ui/project_file.h"

using namespace qs;
using namespace qs::ui;

namespace {

QString clsModel() { return QStringLiteral(QS_MODELS_DIR "/ch_ppocr_mobile_v2.0_cls_infer.onnx"); }

AnalysisRequest clsRequest(const QString& folder) {
  AnalysisRequest r;
  r.data.path = folder.toStdString();
  r.data.maxSamples = 4;
  r.data.image.width = 192;  // cls takes 3x48x192
  r.data.image.height = 48;
  r.data.image.mean = {0.5f, 0.5f, 0.5f};
  r.data.image.std = {0.5f, 0.5f, 0.5f};
  r.calibration.method = CalibMethod::Max;
  return r;
}

// Waits until no job runs and every requested state is in the results.
bool settled(MainWindow& w, int timeoutMs = 180000) {
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < timeoutMs) {
    QTest::qWait(10);
    if (!w.analysis()->isBusy() && w.analysis()->unappliedStates().empty()) {
      QTest::qWait(60);  // past the debounce
      if (!w.analysis()->isBusy() && w.analysis()->unappliedStates().empty()) return true;
    }
  }
  return false;
}

// Opens cls in `w` and calibrates it on `images`.
bool openAndCalibrate(MainWindow& w, const QString& images) {
  QSignalSpy shown(&w, &MainWindow::modelShown);
  w.openFile(clsModel());
  if (!shown.wait(120000)) return false;
  QSignalSpy calibrated(w.analysis(), &AnalysisController::calibrated);
  return w.analysis()->calibrate(clsRequest(images)) && calibrated.wait(180000) && settled(w);
}

// A quantized Conv in the middle of the graph.
NodeId middleConv(const MainWindow& w) {
  const Graph& g = w.current()->model->graph;
  const auto result = w.analysis()->result();
  for (size_t k = g.topoOrder.size() / 2; k < g.topoOrder.size(); ++k) {
    const NodeId id = g.topoOrder[k];
    if (g.nodes[(size_t)id].opType == "Conv" && result->plan.nodes[(size_t)id].quantized) return id;
  }
  return -1;
}

// Excludes `node` through the table's checkbox, as a click does, and waits for the results.
bool excludeInTable(MainWindow& w, NodeId node) {
  auto* m = test::part<NodeTableModel>(w, "nodeTableModel");
  auto* proxy = test::part<NodeFilterProxyModel>(w, "nodeProxyModel");
  const QModelIndex check = proxy->mapFromSource(m->index(m->rowOfNode(node), NodeTableModel::QuantizedColumn));
  return proxy->setData(check, Qt::Unchecked, Qt::CheckStateRole) && settled(w);
}

QStringList autosavesIn(const QString& dir) {
  return QDir(dir).entryList({QStringLiteral("autosave-*")}, QDir::Files | QDir::Hidden, QDir::Name);
}

}  // namespace

class AutosaveTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_tmp;
  QString m_images;

  // A fresh autosave folder per test, so that one test's leftovers are not another's orphans.
  QString freshDir(const char* name) {
    const QString dir = m_tmp.filePath(QLatin1String(name));
    QDir(dir).removeRecursively();
    return dir;
  }

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeTests"));
    QCoreApplication::setApplicationName(QStringLiteral("qs_ui_autosave_tests"));
    QSettings().clear();
    QVERIFY(m_tmp.isValid());
    m_images = m_tmp.filePath(QStringLiteral("cls4"));
    test::writeTextImages(m_images.toStdString(), 4, 192, 48, 5);
    if (!QFileInfo::exists(clsModel())) QSKIP("cls model missing: run scripts/setup.sh");
  }

  // Open, calibrate and exclude a node: the autosave holds the session. The window is destroyed
  // without closeEvent; a new window finds the autosave, restores it and shows the same model,
  // exclusion and results, and takes the autosave over until it closes cleanly.
  void crashThenRestore() {
    const QString dir = freshDir("crash");
    auto* w = new MainWindow;
    w->setErrorDialogsEnabled(false);
    w->autosave()->setDirectory(dir);
    w->show();
    QVERIFY(openAndCalibrate(*w, m_images));
    QVERIFY(!w->autosave()->file().isEmpty());  // written right after the calibration
    const NodeId conv = middleConv(*w);
    QVERIFY(conv >= 0);
    const QString convName = QString::fromStdString(w->current()->model->graph.nodes[(size_t)conv].name);
    QVERIFY(excludeInTable(*w, conv));
    const QString autosave = w->autosave()->file();
    QVERIFY(autosave.startsWith(dir));
    Project saved;
    QString error;
    QVERIFY2(loadProject(autosave, saved, error), qPrintable(error));  // written right after the toggle
    QCOMPARE(saved.excludedNodes, QStringList{convName});
    QVERIFY(saved.calibrated);
    QCOMPARE(saved.modelPath, clsModel());

    // The periodic autosave picks up what is not a toggle (the colouring).
    w->autosave()->setIntervalMs(50);
    test::part<QComboBox>(*w, "colourCombo")->setCurrentIndex(2);
    QTRY_VERIFY_WITH_TIMEOUT(loadProject(autosave, saved, error) && saved.colouring == QStringLiteral("layerwise"), 10000);
    QVERIFY(w->projects()->hasUnsavedChanges());  // the autosave is not a project file

    // A second live window does not offer the first one's autosave.
    {
      MainWindow other;
      other.autosave()->setDirectory(dir);
      QVERIFY(other.autosave()->findOrphan().isEmpty());
      QVERIFY(!other.projects()->offerAutosaveRestore(ProjectController::RestoreChoice::Restore));
    }

    // "Crash": no closeEvent.
    const auto before = w->analysis()->result();
    delete w;
    QVERIFY(QFileInfo::exists(autosave));

    MainWindow w2;
    w2.setErrorDialogsEnabled(false);
    w2.autosave()->setDirectory(dir);
    w2.show();
    QCOMPARE(w2.autosave()->findOrphan(), autosave);
    QSignalSpy shown(&w2, &MainWindow::modelShown);
    QSignalSpy calibrated(w2.analysis(), &AnalysisController::calibrated);
    QVERIFY(w2.projects()->offerAutosaveRestore(ProjectController::RestoreChoice::Restore));
    QVERIFY(shown.wait(120000));
    QCOMPARE(w2.current()->path, clsModel());
    QVERIFY(calibrated.wait(180000));
    QVERIFY(settled(w2));
    // The exclusion is back, requested and applied.
    const Graph& g = w2.current()->model->graph;
    NodeId restored = -1;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].name == convName.toStdString()) restored = (NodeId)i;
    QCOMPARE(restored, conv);
    QCOMPARE(w2.analysis()->requestedStates(), (std::map<NodeId, bool>{{conv, false}}));
    const auto after = w2.analysis()->result();
    QVERIFY(after);
    QVERIFY(!after->plan.nodes[(size_t)conv].quantized);
    QCOMPARE(test::part<QComboBox>(w2, "colourCombo")->currentIndex(), 2);
    // The same calibration on the same data: the same numbers, in the table too.
    QCOMPARE(after->nodes.size(), before->nodes.size());
    for (size_t i = 0; i < after->nodes.size(); ++i) {
      QCOMPARE(after->plan.nodes[i].quantized, before->plan.nodes[i].quantized);
      QCOMPARE(after->nodes[i].hasGraphwise, before->nodes[i].hasGraphwise);
      if (after->nodes[i].hasGraphwise && std::isfinite(before->nodes[i].graphwise.snrDb))
        QCOMPARE(after->nodes[i].graphwise.snrDb, before->nodes[i].graphwise.snrDb);
    }
    auto* m = test::part<NodeTableModel>(w2, "nodeTableModel");
    QCOMPARE(m->result(), after);
    QCOMPARE(m->index(m->rowOfNode(conv), NodeTableModel::QuantizedColumn).data(Qt::CheckStateRole).toInt(), (int)Qt::Unchecked);
    QVERIFY(w2.windowTitle().contains(QStringLiteral("(restored)")));

    // The restored session owns the autosave now: nothing is left to offer, and a clean close removes it.
    QCOMPARE(w2.autosave()->file(), autosave);
    QVERIFY(QFileInfo::exists(autosave));
    {
      MainWindow other;
      other.autosave()->setDirectory(dir);
      QVERIFY(other.autosave()->findOrphan().isEmpty());
    }
    w2.close();
    QVERIFY(autosavesIn(dir).isEmpty());
  }

  // A clean close and an explicit save leave no autosave; undo back to the saved state removes it.
  void cleanCloseLeavesNoAutosave() {
    const QString dir = freshDir("clean");
    {
      MainWindow w;
      w.setErrorDialogsEnabled(false);
      w.autosave()->setDirectory(dir);
      w.show();
      QVERIFY(openAndCalibrate(w, m_images));
      const NodeId conv = middleConv(w);
      QVERIFY(excludeInTable(w, conv));
      QVERIFY(QFileInfo::exists(w.autosave()->file()));
      QVERIFY(w.projects()->hasUnsavedChanges());

      // An explicit save holds the session: the autosave goes.
      const QString project = m_tmp.filePath(QStringLiteral("clean.qsproj"));
      QVERIFY(w.projects()->save(project));
      QVERIFY(!w.projects()->hasUnsavedChanges());
      QVERIFY(w.autosave()->file().isEmpty());
      QVERIFY(autosavesIn(dir).isEmpty());
      // A change after it comes back; undoing it returns to the saved state and removes it again.
      auto* undo = test::part<QUndoStack>(w, "undoStack");
      undo->undo();
      QVERIFY(settled(w));
      QVERIFY(w.projects()->hasUnsavedChanges());
      QVERIFY(QFileInfo::exists(w.autosave()->file()));
      undo->redo();
      QVERIFY(settled(w));
      QVERIFY(!w.projects()->hasUnsavedChanges());
      QVERIFY(autosavesIn(dir).isEmpty());
      undo->undo();
      QVERIFY(settled(w));
      QVERIFY(QFileInfo::exists(w.autosave()->file()));

      // Clean close.
      QVERIFY(w.close());
      QVERIFY2(autosavesIn(dir).isEmpty(), qPrintable(autosavesIn(dir).join(QLatin1Char(' '))));
    }
    MainWindow next;
    next.autosave()->setDirectory(dir);
    QVERIFY(next.autosave()->findOrphan().isEmpty());
    QVERIFY(!next.projects()->offerAutosaveRestore());  // nothing to offer: no message box, no restore
    QVERIFY(!next.current());
  }

  // The message box: Not Now keeps the autosave for the next start, Discard deletes it. An autosave
  // that cannot be read is deleted with a line in the log.
  void askKeepDiscardAndUnreadable() {
    const QString dir = freshDir("ask");
    QVERIFY(QDir().mkpath(dir));
    const QString orphan = dir + QStringLiteral("/autosave-999999-1.qsproj");  // no lock: its session is gone
    Project p;
    p.modelPath = clsModel();
    p.excludedNodes = {QStringLiteral("conv1")};
    QString error;
    QVERIFY2(saveProject(p, orphan, error), qPrintable(error));

    auto answer = [](const QString& button) {
      QTimer::singleShot(0, [button] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        QVERIFY(box);
        QVERIFY(box->informativeText().contains(QStringLiteral("1 node(s) excluded")));
        for (QAbstractButton* b : box->buttons())
          if (b->text() == button) b->click();
      });
    };
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.autosave()->setDirectory(dir);
    w.show();
    answer(QStringLiteral("Not Now"));
    QVERIFY(!w.projects()->offerAutosaveRestore());
    QVERIFY(QFileInfo::exists(orphan));
    QCOMPARE(w.autosave()->findOrphan(), orphan);
    answer(QStringLiteral("Discard"));
    QVERIFY(!w.projects()->offerAutosaveRestore());
    QVERIFY(!QFileInfo::exists(orphan));
    QVERIFY(!w.current());

    QFile junk(orphan);
    QVERIFY(junk.open(QIODevice::WriteOnly));
    junk.write("{ not json");
    junk.close();
    QVERIFY(!w.projects()->offerAutosaveRestore(ProjectController::RestoreChoice::Restore));
    QVERIFY(!QFileInfo::exists(orphan));
    QVERIFY(test::part<QPlainTextEdit>(w, "log")->toPlainText().contains(orphan));
  }
};

int runAutosaveTests(int argc, char** argv) {
  AutosaveTest t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_autosave.moc"
