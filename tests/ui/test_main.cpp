// Runs every GUI test class in one offscreen process: the workbench (loader, layout, view, table)
// and the analysis (calibration worker, toggles, undo, plots, projects, export).
#include <QApplication>
#include <QtTest>

int runWorkbenchTests(int argc, char** argv);
int runAnalysisTests(int argc, char** argv);

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  int failures = 0;
  const QByteArray only = qgetenv("QS_UI_TESTS");  // "workbench" or "analysis" to run one class
  if (only.isEmpty() || only == "workbench") failures += runWorkbenchTests(argc, argv);
  if (only.isEmpty() || only == "analysis") failures += runAnalysisTests(argc, argv);
  return failures;
}
