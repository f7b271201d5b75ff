// Runs every GUI test class in one offscreen process: the workbench (loader, layout, view, table),
// the analysis (calibration worker, toggles, undo, plots, projects, export), autosave/restore, the
// project file reader, the first run (one click on Calibrate, random inputs with shapes), control-flow display, grouped graphs, the int4 mode, the remedy switches, the remedy choice and the realisations of the rounding noise.
#include <QApplication>
#include <QTemporaryDir>
#include <QtTest>

int runWorkbenchTests(int argc, char** argv);
int runAnalysisTests(int argc, char** argv);
int runAutosaveTests(int argc, char** argv);
int runProjectFileTests(int argc, char** argv);
int runFirstRunTests(int argc, char** argv);
int runControlFlowTests(int argc, char** argv);
int runGroupsTests(int argc, char** argv);
int runRemedyTests(int argc, char** argv);
int runInt4Tests(int argc, char** argv);
int runRemedySwitchTests(int argc, char** argv);
int runRemedyChoiceTests(int argc, char** argv);
int runRealisationsTests(int argc, char** argv);

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  // Windows that tests destroy without closing leave autosaves: keep them out of the user's data folder.
  QTemporaryDir autosaves;
  qputenv("QS_AUTOSAVE_DIR", autosaves.path().toLocal8Bit());
  int failures = 0;
  const QByteArray only = qgetenv("QS_UI_TESTS");  // "workbench", "analysis", "autosave", "project", "firstrun", "controlflow" or "groups": one class
  if (only.isEmpty() || only == "workbench") failures += runWorkbenchTests(argc, argv);
  if (only.isEmpty() || only == "analysis") failures += runAnalysisTests(argc, argv);
  if (only.isEmpty() || only == "autosave") failures += runAutosaveTests(argc, argv);
  if (only.isEmpty() || only == "project") failures += runProjectFileTests(argc, argv);
  if (only.isEmpty() || only == "firstrun") failures += runFirstRunTests(argc, argv);
  if (only.isEmpty() || only == "controlflow") failures += runControlFlowTests(argc, argv);
  if (only.isEmpty() || only == "groups") failures += runGroupsTests(argc, argv);
  if (only.isEmpty() || only == "remedies") failures += runRemedyTests(argc, argv);
  if (only.isEmpty() || only == "int4") failures += runInt4Tests(argc, argv);
  if (only.isEmpty() || only == "remedyswitches") failures += runRemedySwitchTests(argc, argv);
  if (only.isEmpty() || only == "remedychoice") failures += runRemedyChoiceTests(argc, argv);
  if (only.isEmpty() || only == "realisations") failures += runRealisationsTests(argc, argv);
  return failures;
}
