#include "ui/workbench.h"

#include <QApplication>
#include <QTimer>
#include <cstdio>

#include "ui/graph_view.h"
#include "ui/main_window.h"

namespace qs::ui {

namespace {

// Grabs the window after the event loop has painted it, saves it and quits.
void scheduleScreenshot(MainWindow& window, const QString& path) {
  QTimer::singleShot(400, &window, [&window, path] {
    const QByteArray select = qgetenv("QS_SCREENSHOT_SELECT");
    if (!select.isEmpty()) window.findNext(QString::fromUtf8(select));
    const QByteArray zoom = qgetenv("QS_SCREENSHOT_ZOOM");
    if (zoom == "fit") {
      window.graphView()->fitToWindow();
    } else if (!zoom.isEmpty()) {
      window.graphView()->setZoom(zoom.toDouble());
    }
    QTimer::singleShot(300, &window, [&window, path] {
      const bool ok = window.grab().save(path);
      std::fprintf(stderr, "quantscope: %s %s\n", ok ? "saved screenshot" : "could not save screenshot",
                   path.toLocal8Bit().constData());
      QApplication::exit(ok ? 0 : 1);
    });
  });
}

}  // namespace

int runWorkbench(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("Quantscope"));
  QApplication::setApplicationName(QStringLiteral("Quantscope"));
  QApplication::setApplicationVersion(QStringLiteral(QS_VERSION));
  QApplication::setDesktopFileName(QStringLiteral("quantscope"));

  MainWindow window;
  const QByteArray size = qgetenv("QS_SCREENSHOT_SIZE");
  if (!size.isEmpty()) {
    const QList<QByteArray> wh = size.split('x');
    if (wh.size() == 2) window.resize(wh[0].toInt(), wh[1].toInt());
  }
  window.show();

  QString file;
  const QStringList args = app.arguments();
  for (int i = 1; i < args.size(); ++i)
    if (!args[i].startsWith(QLatin1Char('-'))) {
      file = args[i];
      break;
    }

  const QString screenshot = qEnvironmentVariable("QS_SCREENSHOT");
  if (!screenshot.isEmpty()) {
    window.setErrorDialogsEnabled(false);
    if (file.isEmpty()) {
      scheduleScreenshot(window, screenshot);
    } else {
      QObject::connect(&window, &MainWindow::modelShown, &window, [&window, screenshot] { scheduleScreenshot(window, screenshot); });
      QObject::connect(&window, &MainWindow::openFailed, &window, [&window, screenshot] { scheduleScreenshot(window, screenshot); });
    }
  }
  if (!file.isEmpty()) window.openFile(file);
  return app.exec();
}

}  // namespace qs::ui
