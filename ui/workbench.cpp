#include "ui/workbench.h"

#include <QApplication>
#include <QComboBox>
#include <QDockWidget>
#include <QTabWidget>
#include <QLineEdit>
#include <QTimer>
#include <cstdio>

#include "core/util/memory_budget.h"
#include "qs_version.h"
#include "ui/analysis_actions.h"
#include "ui/autosave.h"
#include "ui/calibration_dialog.h"
#include "ui/graph_view.h"
#include "ui/main_window.h"
#include "ui/plots_panel.h"
#include "ui/project_controller.h"

namespace qs::ui {

namespace {

// The calibration QS_CALIBRATE asks for: a folder (or "random"), with QS_CALIBRATE_PRESET
// (det: ImageNet mean/std, cls: 0.5/0.5), QS_CALIBRATE_SIZE=WxH, QS_CALIBRATE_SAMPLES, QS_CALIBRATE_METHOD.
AnalysisRequest calibrationFromEnv() {
  AnalysisRequest r;
  const QString source = qEnvironmentVariable("QS_CALIBRATE");
  if (source != QStringLiteral("random")) r.data.path = source.toStdString();
  r.data.maxSamples = qEnvironmentVariableIntValue("QS_CALIBRATE_SAMPLES");
  if (r.data.maxSamples <= 0) r.data.maxSamples = 8;
  const QString preset = qEnvironmentVariable("QS_CALIBRATE_PRESET");
  if (preset == QStringLiteral("det")) {
    r.data.image.mean = {0.485f, 0.456f, 0.406f};
    r.data.image.std = {0.229f, 0.224f, 0.225f};
  } else {
    r.data.image.mean = {0.5f, 0.5f, 0.5f};
    r.data.image.std = {0.5f, 0.5f, 0.5f};
  }
  const QStringList wh = qEnvironmentVariable("QS_CALIBRATE_SIZE").split(QLatin1Char('x'));
  if (wh.size() == 2) {
    r.data.image.width = wh[0].toInt();
    r.data.image.height = wh[1].toInt();
  }
  // QS_CALIBRATE_REMEDIES=equalize,bias_correction,smoothquant,weight_clip_search,depthwise_smooth,pointwise_smooth: the
  // dialog's remedy switches; no_depthwise_equalize and no_integer_conv clear the two that are on by default; auto is
  // the "Remedies: auto" choice (--remedies auto).
  for (const QString& remedy : qEnvironmentVariable("QS_CALIBRATE_REMEDIES").split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    if (remedy == QStringLiteral("equalize")) r.equalize = true;
    else if (remedy == QStringLiteral("bias_correction")) r.biasCorrection = true;
    else if (remedy == QStringLiteral("smoothquant")) r.smoothQuant = true;
    else if (remedy == QStringLiteral("weight_clip_search")) r.weightClipSearch = true;
    else if (remedy == QStringLiteral("no_depthwise_equalize")) r.depthwiseEqualize = false;
    else if (remedy == QStringLiteral("depthwise_smooth")) r.depthwiseSmooth = true;
    else if (remedy == QStringLiteral("pointwise_smooth")) r.pointwiseSmooth = true;
    else if (remedy == QStringLiteral("auto")) r.remedies = RemedyMode::Auto;
    else if (remedy == QStringLiteral("no_integer_conv")) r.integerConv = false;
    else
      std::fprintf(stderr, "quantscope: QS_CALIBRATE_REMEDIES: '%s': expected equalize, bias_correction, smoothquant, "
                   "weight_clip_search, depthwise_smooth, pointwise_smooth, auto, no_depthwise_equalize or no_integer_conv\n", qPrintable(remedy));
  }
  // QS_CALIBRATE_MEMORY_BUDGET=SIZE: the dialog's Memory budget (--memory-budget's syntax, 512M, 2G).
  if (const QString budget = qEnvironmentVariable("QS_CALIBRATE_MEMORY_BUDGET"); !budget.isEmpty())
    if (Status st = parseByteSize(budget.toStdString(), r.memoryBudgetBytes, "QS_CALIBRATE_MEMORY_BUDGET"); !st)
      std::fprintf(stderr, "quantscope: %s\n", st.message().c_str());
  // QS_CALIBRATE_REALISATIONS=auto|N: the dialog's Realisations (--realisations, 1 to 64).
  if (const QString n = qEnvironmentVariable("QS_CALIBRATE_REALISATIONS"); !n.isEmpty()) {
    bool ok = false;
    const int count = n.toInt(&ok);
    if (n == QStringLiteral("auto")) r.realisationsAuto = true;
    else if (ok && count >= 1 && count <= 64) r.realisations = count;
    else std::fprintf(stderr, "quantscope: QS_CALIBRATE_REALISATIONS: '%s': expected auto or a count from 1 to 64\n", qPrintable(n));
  }
  const std::string method = qEnvironmentVariable("QS_CALIBRATE_METHOD", QStringLiteral("auto")).toStdString();
  if (Status st = parseCalibrationMethod(method, r.calibration.method); !st)
    std::fprintf(stderr, "quantscope: QS_CALIBRATE_METHOD: %s\n", st.message().c_str());
  return r;
}

// Arranges the window for QS_SCREENSHOT_VIEW: graph (default), table, remedies (the layer table
// alone across the window's width, for the remedy columns), snr, histogram, scatter,
// fallback, calibration (the dialog alone is saved).
void arrangeView(MainWindow& window, const QString& view) {
  if (view == QStringLiteral("remedies")) {
    auto* table = window.findChild<QDockWidget*>(QStringLiteral("nodesDock"));
    window.findChild<QDockWidget*>(QStringLiteral("plotsDock"))->hide();
    table->show();
    table->raise();
    window.resizeDocks({table}, {window.height() * 3 / 5}, Qt::Vertical);
  } else if (view == QStringLiteral("table")) {
    auto* dock = window.findChild<QDockWidget*>(QStringLiteral("nodesDock"));
    dock->show();
    dock->raise();
  } else if (view == QStringLiteral("snr") || view == QStringLiteral("histogram") || view == QStringLiteral("scatter") ||
             view == QStringLiteral("fallback")) {
    auto* dock = window.findChild<QDockWidget*>(QStringLiteral("plotsDock"));
    dock->show();
    dock->raise();
    window.findChild<PlotsPanel*>(QStringLiteral("plotsPanel"))->tabs()->setCurrentIndex(view == QStringLiteral("snr") ? PlotsPanel::SnrTab
                                                 : view == QStringLiteral("histogram") ? PlotsPanel::HistogramTab
                                                 : view == QStringLiteral("fallback")  ? PlotsPanel::FallbackTab
                                                                                       : PlotsPanel::ScatterTab);
  }
}

// Grabs the window after the event loop has painted it, saves it and quits.
void scheduleScreenshot(MainWindow& window, const QString& path) {
  QTimer::singleShot(400, &window, [&window, path] {
    if (qEnvironmentVariableIsSet("QS_SCREENSHOT_COLOUR"))
      window.analysisActions()->setColouringKey(qEnvironmentVariable("QS_SCREENSHOT_COLOUR"));
    if (qEnvironmentVariableIsSet("QS_SCREENSHOT_THRESHOLD")) {
      auto* plots = window.findChild<PlotsPanel*>(QStringLiteral("plotsPanel"));
      plots->setThreshold(qEnvironmentVariable("QS_SCREENSHOT_THRESHOLD").toDouble());
      emit plots->thresholdChanged(plots->threshold());
    }
    const QString view = qEnvironmentVariable("QS_SCREENSHOT_VIEW");
    arrangeView(window, view);
    // The layer table's filter (a regular expression on name or op), e.g. MatMul|Gemm.
    if (qEnvironmentVariableIsSet("QS_SCREENSHOT_FILTER"))
      if (auto* filter = window.findChild<QLineEdit*>(QStringLiteral("nodeFilter"))) filter->setText(qEnvironmentVariable("QS_SCREENSHOT_FILTER"));
    // Control-flow nodes to draw expanded, by name, comma-separated (before the selection).
    const QStringList expand = qEnvironmentVariable("QS_SCREENSHOT_EXPAND").split(QLatin1Char(','), Qt::SkipEmptyParts);
    auto* graphView = window.findChild<GraphView*>(QStringLiteral("graphView"));
    for (const QString& name : expand) {
      const auto& layout = graphView->graphLayout();
      for (int i = 0; layout && i < (int)layout->items.size(); ++i) {
        const Node* node = layout->nodeOf(i);
        if (node && QString::fromStdString(node->name) == name && graphView->isExpandable(i)) {
          graphView->setExpanded(i, true);
          break;
        }
      }
    }
    const QByteArray select = qgetenv("QS_SCREENSHOT_SELECT");
    if (!select.isEmpty()) window.findNext(QString::fromUtf8(select));
    if (view == QStringLiteral("calibration")) {
      CalibrationDialog* d = window.analysisActions()->calibrationDialog();
      if (qEnvironmentVariableIsSet("QS_CALIBRATE")) d->setRequest(calibrationFromEnv());
      window.analysisActions()->showCalibrationDialog();
      QTimer::singleShot(500, &window, [d, path] {
        const bool ok = d->grab().save(path);
        std::fprintf(stderr, "quantscope: %s %s\n", ok ? "saved screenshot" : "could not save screenshot", path.toLocal8Bit().constData());
        QApplication::exit(ok ? 0 : 1);
      });
      return;
    }
    const QByteArray zoom = qgetenv("QS_SCREENSHOT_ZOOM");
    auto* graph = window.findChild<GraphView*>(QStringLiteral("graphView"));
    if (zoom == "fit") {
      graph->fitToWindow();
    } else if (!zoom.isEmpty()) {
      graph->setZoom(zoom.toDouble());
    }
    const int wait = view == QStringLiteral("scatter") ? 4000 : 300;  // the float pass of the scatter plot
    QTimer::singleShot(wait, &window, [&window, path] {
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
  QApplication::setApplicationVersion(QStringLiteral(QS_VERSION_STRING));
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
    window.autosave()->setDirectory(QString());  // documentation runs neither leave nor offer autosaves
    if (file.isEmpty()) {
      scheduleScreenshot(window, screenshot);
    } else {
      if (qEnvironmentVariableIsSet("QS_CALIBRATE") && qEnvironmentVariable("QS_SCREENSHOT_VIEW") != QStringLiteral("calibration")) {
        // Documentation only: calibrate once the model is shown, optionally exclude nodes, then grab.
        QObject::connect(&window, &MainWindow::modelShown, &window, [&window] {
          // QS_CALIBRATE_MODE=int4: the INT4 weight-only run (QS_INT4_METHOD, QS_INT4_BLOCK).
          if (qEnvironmentVariable("QS_CALIBRATE_MODE") == QStringLiteral("int4")) {
            Int4Settings s;
            s.on = true;
            if (Status st = parseInt4Method(qEnvironmentVariable("QS_INT4_METHOD", QStringLiteral("awq_lite")).toStdString(), s.method); !st)
              std::fprintf(stderr, "quantscope: QS_INT4_METHOD: %s\n", st.message().c_str());
            if (qEnvironmentVariableIsSet("QS_INT4_BLOCK")) s.blockSize = qEnvironmentVariableIntValue("QS_INT4_BLOCK");
            window.analysisActions()->setInt4Settings(s);
            window.analysis()->calibrateInt4(calibrationFromEnv(), s);
            return;
          }
          window.analysis()->calibrate(calibrationFromEnv());
        });
        QObject::connect(window.analysis(), &AnalysisController::calibrated, &window, [&window, screenshot] {
          // QS_SCREENSHOT_FALLBACK=DB: the auto-fallback to that target first (its curve in the plots).
          if (qEnvironmentVariableIsSet("QS_SCREENSHOT_FALLBACK")) {
            QObject::connect(window.analysis(), &AnalysisController::fallbackFinished, &window,
                             [&window, screenshot] { scheduleScreenshot(window, screenshot); }, Qt::SingleShotConnection);
            window.analysis()->autoFallback(qEnvironmentVariable("QS_SCREENSHOT_FALLBACK").toDouble());
            return;
          }
          const QStringList exclude = qEnvironmentVariable("QS_SCREENSHOT_EXCLUDE").split(QLatin1Char(','), Qt::SkipEmptyParts);
          std::vector<std::pair<NodeId, bool>> states;
          for (const QString& name : exclude)
            for (size_t i = 0; i < window.current()->model->graph.nodes.size(); ++i)
              if (window.current()->model->graph.nodes[i].name == name.toStdString()) states.emplace_back((NodeId)i, false);
          if (states.empty()) {
            scheduleScreenshot(window, screenshot);
            return;
          }
          QObject::connect(window.analysis(), &AnalysisController::idle, &window, [&window, screenshot] { scheduleScreenshot(window, screenshot); },
                           Qt::SingleShotConnection);
          window.analysisActions()->requestQuantized(states, QStringLiteral("Exclude"));
        });
        QObject::connect(window.analysis(), &AnalysisController::failed, &window, [&window, screenshot](AnalysisController::Job, const QString& m) {
          std::fprintf(stderr, "quantscope: calibration failed: %s\n", m.toLocal8Bit().constData());
          scheduleScreenshot(window, screenshot);
        });
      } else {
        QObject::connect(&window, &MainWindow::modelShown, &window, [&window, screenshot] { scheduleScreenshot(window, screenshot); });
      }
      QObject::connect(&window, &MainWindow::openFailed, &window, [&window, screenshot] { scheduleScreenshot(window, screenshot); });
    }
  }
  // A session that did not close cleanly is offered back first; restoring it replaces the file
  // named on the command line.
  const bool restored = window.projects()->offerAutosaveRestore();
  if (!file.isEmpty() && !restored) window.openFile(file);
  return app.exec();
}

}  // namespace qs::ui
