#include "ui/analysis_actions.h"

#include <QAction>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QInputDialog>
#include <QLabel>
#include <QToolBar>
#include <QTreeWidget>
#include <QUndoStack>
#include <QVBoxLayout>
#include <cmath>
#include <functional>

#include "ui/calibration_dialog.h"
#include "ui/export_dialog.h"
#include "ui/main_window.h"
#include "ui/realisation_text.h"

namespace qs::ui {

namespace {

double nowMs() {
  static QElapsedTimer clock = [] {
    QElapsedTimer t;
    t.start();
    return t;
  }();
  return (double)clock.nsecsElapsed() / 1e6;
}

// One undo step: node states before and after. The first redo() is skipped when the states are
// already applied (an automatic fallback ran them in the session).
class ToggleCommand : public QUndoCommand {
 public:
  using Apply = std::function<void(const std::vector<std::pair<NodeId, bool>>&)>;
  ToggleCommand(Apply apply, std::vector<std::pair<NodeId, bool>> after, std::vector<std::pair<NodeId, bool>> before,
                const QString& text, bool applied)
      : m_apply(std::move(apply)), m_after(std::move(after)), m_before(std::move(before)), m_skip(applied) {
    setText(text);
  }
  void redo() override {
    if (m_skip) {
      m_skip = false;
      return;
    }
    m_apply(m_after);
  }
  void undo() override { m_apply(m_before); }

 private:
  Apply m_apply;
  std::vector<std::pair<NodeId, bool>> m_after, m_before;
  bool m_skip;
};

// The colourings, in the order of the toolbar's combo box, with the names projects store.
struct ColouringChoice {
  GraphView::Colouring colouring;
  const char* key;
  const char* label;
};
constexpr ColouringChoice kColourings[] = {
    {GraphView::Colouring::OpType, "op", "Op type"},
    {GraphView::Colouring::GraphwiseSnr, "graphwise", "Graph-wise SNR"},
    {GraphView::Colouring::LayerwiseSnr, "layerwise", "Layer-wise SNR"},
    {GraphView::Colouring::Sensitivity, "sensitivity", "Sensitivity"},
};

}  // namespace

AnalysisActions::AnalysisActions(MainWindow* window, AnalysisController* analysis)
    : QObject(window), m_window(window), m_analysis(analysis) {
  setObjectName(QStringLiteral("analysisActions"));
  m_undo = new QUndoStack(this);
  m_undo->setObjectName(QStringLiteral("undoStack"));
  m_undoAction = m_undo->createUndoAction(this, QStringLiteral("&Undo"));
  m_undoAction->setShortcut(QKeySequence::Undo);
  m_redoAction = m_undo->createRedoAction(this, QStringLiteral("&Redo"));
  m_redoAction->setShortcuts({QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Z), QKeySequence::Redo});
  m_calibrate = new QAction(QStringLiteral("&Calibrate…"), this);
  m_calibrate->setObjectName(QStringLiteral("calibrateAction"));
  m_calibrate->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_K));
  connect(m_calibrate, &QAction::triggered, this, &AnalysisActions::calibrate);
  m_calibrationSettings = new QAction(QStringLiteral("Calibration &Settings…"), this);
  m_calibrationSettings->setObjectName(QStringLiteral("calibrationSettingsAction"));
  m_calibrationSettings->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_K));
  m_calibrationSettings->setToolTip(QStringLiteral("Choose the calibration data, its preprocessing and the method (Ctrl+Shift+K)"));
  connect(m_calibrationSettings, &QAction::triggered, this, &AnalysisActions::showCalibrationDialog);
  m_fallback = new QAction(QStringLiteral("&Auto-Fallback…"), this);
  m_fallback->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_F));
  connect(m_fallback, &QAction::triggered, this, &AnalysisActions::showAutoFallback);
  m_export = new QAction(QStringLiteral("&Export Quantized Model…"), this);
  m_export->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  connect(m_export, &QAction::triggered, this, &AnalysisActions::showExportDialog);
  m_cancel = new QAction(QStringLiteral("C&ancel Running Analysis"), this);
  m_cancel->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
  connect(m_cancel, &QAction::triggered, m_analysis, &AnalysisController::cancel);

  // Toolbar: calibrate, colouring, undo/redo, fallback, export.
  QToolBar* tb = m_window->addToolBar(QStringLiteral("Analysis"));
  tb->setObjectName(QStringLiteral("analysisToolBar"));
  tb->setMovable(false);
  tb->setToolButtonStyle(Qt::ToolButtonTextOnly);
  tb->addAction(m_calibrate);
  tb->addAction(m_calibrationSettings);
  tb->addSeparator();
  tb->addWidget(new QLabel(QStringLiteral("  Colour by "), tb));
  m_colourCombo = new QComboBox(tb);
  m_colourCombo->setObjectName(QStringLiteral("colourCombo"));
  for (const ColouringChoice& c : kColourings) m_colourCombo->addItem(QLatin1String(c.label), QLatin1String(c.key));
  setColouringKey(QStringLiteral("graphwise"));
  m_colourCombo->setToolTip(QStringLiteral("Graph-wise: every enabled point on (accumulated error). Layer-wise: the node alone "
                                           "with float inputs. Sensitivity: graph outputs with only this node quantized."));
  connect(m_colourCombo, &QComboBox::currentIndexChanged, this, [this] { emit colouringChanged(colouring()); });
  tb->addWidget(m_colourCombo);
  tb->addSeparator();
  tb->addAction(m_undo->createUndoAction(tb, QStringLiteral("Undo")));
  tb->addAction(m_undo->createRedoAction(tb, QStringLiteral("Redo")));
  tb->addSeparator();
  tb->addAction(m_fallback);
  tb->addAction(m_export);

  connect(m_analysis, &AnalysisController::fallbackFinished, this, &AnalysisActions::onFallbackFinished);
  // A calibration that ran chose the settings: Calibrate runs them again without asking.
  connect(m_analysis, &AnalysisController::failed, this, [this](AnalysisController::Job job, const QString&) {
    if (job != AnalysisController::Job::Calibrate || !m_directRun) return;
    m_directRun = false;
    showCalibrationDialog();  // it shows the error, beside the settings that led to it
  });
  connect(m_analysis, &AnalysisController::cancelled, this, [this] { m_directRun = false; });
  connect(m_analysis, &AnalysisController::calibrated, this, [this] {
    m_directRun = false;
    m_settingsChosen = true;
    const AnalysisRequest& r = m_analysis->request();
    const auto data = m_analysis->data();
    if (const auto int4 = m_analysis->int4Result()) {
      m_window->log(QStringLiteral("INT4 weight-only (%1, block %2): %3 weights, %4 -> %5 bytes, in %6 s; worst output SNR %7 dB")
                        .arg(QString::fromStdString(int4MethodName(int4->method)))
                        .arg(int4->blockSize)
                        .arg(int4->layers.size())
                        .arg(int4->bytesBefore)
                        .arg(int4->bytesAfter)
                        .arg(m_analysis->lastJobSeconds(), 0, 'f', 2)
                        .arg(m_analysis->result()->worstOutputSnrDb(), 0, 'f', 2));
      return;
    }
    m_window->log(QStringLiteral("Calibrated on %1 (%2 samples, %3, %4) in %5 s; worst output SNR %6 dB")
                      .arg(data ? QString::fromStdString(data->description()) : QString())
                      .arg(m_analysis->result()->samples)
                      .arg(QString::fromStdString(calibMethodName(r.calibration.method)),
                           QString::fromStdString(quantModeName(r.calibration.mode)))
                      .arg(m_analysis->lastJobSeconds(), 0, 'f', 2)
                      .arg(m_analysis->result()->worstOutputSnrDb(), 0, 'f', 2));
    // --realisations: auto's decision and each output's realisations, the lines the CLI prints.
    if (const QString probe = realisationProbeText(*m_analysis->result()); !probe.isEmpty()) m_window->log(probe);
    for (const OutputResult& o : m_analysis->result()->outputs)
      if (const QString text = outputRealisationsText(o); !text.isEmpty())
        m_window->log(QStringLiteral("Output %1: %2").arg(QString::fromStdString(o.name), text));
    for (const std::string& w : m_analysis->warnings()) m_window->log(QStringLiteral("Warning: ") + QString::fromStdString(w));
  });
}

QString AnalysisActions::colouringKey() const { return m_colourCombo->currentData().toString(); }

void AnalysisActions::setColouringKey(const QString& key) {
  const int index = m_colourCombo->findData(key);
  if (index >= 0) m_colourCombo->setCurrentIndex(index);
}

GraphView::Colouring AnalysisActions::colouring() const {
  for (const ColouringChoice& c : kColourings)
    if (colouringKey() == QLatin1String(c.key)) return c.colouring;
  return GraphView::Colouring::GraphwiseSnr;
}

void AnalysisActions::modelOpened(const Model* model) {
  m_undo->clear();
  m_settingsChosen = false;
  if (m_calibDialog) m_calibDialog->setModel(model);
}

void AnalysisActions::updateActions() {
  const LoadedModelPtr& current = m_window->current();
  const bool idle = !m_analysis->isBusy();
  const bool result = m_analysis->hasResult();
  m_calibrate->setEnabled((bool)current);
  m_calibrationSettings->setEnabled((bool)current);
  // "Calibrate" runs; "Calibrate…" asks first (the dialog).
  const QString data = QString::fromStdString(formRequest().data.path);
  m_calibrate->setText(m_settingsChosen ? QStringLiteral("&Calibrate") : QStringLiteral("&Calibrate…"));
  m_calibrate->setToolTip(m_settingsChosen ? QStringLiteral("Calibrate and analyse on %1 (Ctrl+K)")
                                                 .arg(data.isEmpty() ? QStringLiteral("random inputs") : QFileInfo(data).fileName())
                                           : QStringLiteral("Choose the calibration data, then calibrate and analyse (Ctrl+K)"));
  m_fallback->setEnabled(result && idle && !m_analysis->int4Result());  // int4 has no session to fall back in
  m_export->setEnabled(result && idle && current && QFileInfo(current->path).isFile());
}

CalibrationDialog* AnalysisActions::calibrationDialog() {
  if (!m_calibDialog) {
    m_calibDialog = new CalibrationDialog(m_analysis, m_window);
    m_calibDialog->setObjectName(QStringLiteral("calibrationDialog"));
    if (const LoadedModelPtr& current = m_window->current()) m_calibDialog->setModel(current->model.get());
    if (m_analysis->hasResult()) {
      m_calibDialog->setRequest(m_analysis->request());
      m_calibDialog->setInt4Settings(m_analysis->int4Settings());
    }
  }
  return m_calibDialog;
}

AnalysisRequest AnalysisActions::formRequest() const { return m_calibDialog ? m_calibDialog->request() : AnalysisRequest{}; }

Int4Settings AnalysisActions::formInt4Settings() const { return m_calibDialog ? m_calibDialog->int4Settings() : Int4Settings{}; }

void AnalysisActions::setInt4Settings(const Int4Settings& settings) { calibrationDialog()->setInt4Settings(settings); }

void AnalysisActions::setCalibrationSettings(const AnalysisRequest& request) {
  calibrationDialog()->setRequest(request);
  m_settingsChosen = !request.data.path.empty();
  updateActions();
}

void AnalysisActions::calibrate() {
  if (!m_window->current()) return;
  if (!m_settingsChosen || m_analysis->isBusy()) {
    showCalibrationDialog();
    return;
  }
  const QString data = QString::fromStdString(formRequest().data.path);
  m_window->log(QStringLiteral("Calibrating on %1 (Calibration Settings… changes the data and the method)")
                    .arg(data.isEmpty() ? QStringLiteral("random inputs") : data));
  m_directRun = true;
  if (!calibrationDialog()->start()) {  // refused before any thread: the dialog says why
    m_directRun = false;
    showCalibrationDialog();
  }
}

void AnalysisActions::showCalibrationDialog() {
  if (!m_window->current()) return;
  CalibrationDialog* d = calibrationDialog();
  d->show();
  d->raise();
  d->activateWindow();
}

bool AnalysisActions::currentQuantized(NodeId id) const {
  const auto& requested = m_analysis->requestedStates();
  auto it = requested.find(id);
  if (it != requested.end()) return it->second;
  auto r = m_analysis->result();
  return r && r->plan.nodes[(size_t)id].quantized;
}

void AnalysisActions::applyStates(const std::vector<std::pair<NodeId, bool>>& states) {
  m_toggleStartMs = nowMs();
  m_analysis->requestStates(states);
  emit requestsChanged();
}

void AnalysisActions::requestQuantized(const std::vector<std::pair<NodeId, bool>>& states, const QString& text) {
  if (!m_analysis->hasResult() || states.empty()) return;
  std::vector<std::pair<NodeId, bool>> before;
  for (auto [id, on] : states) before.emplace_back(id, currentQuantized(id));
  m_undo->push(new ToggleCommand([this](const auto& s) { applyStates(s); }, states, before, text, false));
}

bool AnalysisActions::requestFallbackPoint(int point) {
  const auto curve = m_analysis->fallbackCurve();
  if (!curve || point < 0 || point > (int)curve->steps.size() || !m_analysis->hasResult()) return false;
  std::vector<std::pair<NodeId, bool>> states;
  for (int i = 0; i < (int)curve->steps.size(); ++i) {
    const NodeId id = curve->steps[(size_t)i].excluded;
    const bool on = i >= point;
    if (currentQuantized(id) != on) states.emplace_back(id, on);
  }
  if (states.empty()) return true;
  requestQuantized(states, QStringLiteral("Fallback curve: %1 excluded").arg(point));
  m_window->log(QStringLiteral("Fallback curve: point %1 (%2 node(s) excluded, %3 dB measured)")
                    .arg(point)
                    .arg(point)
                    .arg(curve->worstSnrDb(point), 0, 'f', 2));
  return true;
}

void AnalysisActions::requestNode(NodeId id, bool on) {
  const LoadedModelPtr& current = m_window->current();
  if (!current) return;
  const QString name = QString::fromStdString(current->model->graph.nodes[(size_t)id].name);
  requestQuantized({{id, on}}, (on ? QStringLiteral("Quantize %1") : QStringLiteral("Exclude %1")).arg(name));
}

void AnalysisActions::requestOpType(const QString& op, bool on) {
  const auto result = m_analysis->result();
  const LoadedModelPtr& current = m_window->current();
  if (!result || !current) return;
  std::vector<std::pair<NodeId, bool>> states;
  const std::string opType = op.toStdString();
  const Graph& g = current->model->graph;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].opType == opType && result->plan.nodes[i].quantizable && currentQuantized((NodeId)i) != on)
      states.emplace_back((NodeId)i, on);
  if (states.empty()) return;
  requestQuantized(states, (on ? QStringLiteral("Quantize every %1 node") : QStringLiteral("Exclude every %1 node")).arg(op));
}

void AnalysisActions::resultShown(const std::shared_ptr<const AnalysisResult>& result) {
  if (result && m_toggleStartMs >= 0 && m_analysis->unappliedStates().empty()) {
    m_lastToggleMs = nowMs() - m_toggleStartMs;
    m_toggleStartMs = -1;
    m_window->log(QStringLiteral("Re-analysed in %1 ms (toggle to table and graph; worker %2 ms); worst output SNR %3 dB")
                      .arg(m_lastToggleMs, 0, 'f', 0)
                      .arg(m_analysis->lastJobSeconds() * 1000, 0, 'f', 0)
                      .arg(result->worstOutputSnrDb(), 0, 'f', 2));
  }
}

void AnalysisActions::showAutoFallback() {
  if (!m_analysis->hasResult() || m_analysis->isBusy()) return;
  bool ok = false;
  const double worst = m_analysis->result()->worstOutputSnrDb();
  const double target = QInputDialog::getDouble(
      m_window, QStringLiteral("Auto-fallback"),
      QStringLiteral("Exclude the most sensitive nodes, one at a time, until every graph output reaches this SNR (dB).\n"
                     "Worst output now: %1 dB.")
          .arg(worst, 0, 'f', 2),
      std::isfinite(worst) ? std::ceil(worst) + 5 : 30, -100, 300, 1, &ok);
  if (!ok) return;
  m_window->log(QStringLiteral("Auto-fallback to %1 dB").arg(target, 0, 'f', 1));
  m_analysis->autoFallback(target);
}

void AnalysisActions::onFallbackFinished(const std::vector<FallbackStep>& steps, bool reached) {
  const Graph& g = m_window->current()->model->graph;
  std::vector<std::pair<NodeId, bool>> after, before;
  for (const FallbackStep& s : steps) {
    after.emplace_back(s.excluded, false);
    before.emplace_back(s.excluded, true);
  }
  if (!steps.empty()) {
    m_undo->push(new ToggleCommand([this](const auto& s) { applyStates(s); }, after, before,
                                   QStringLiteral("Auto-fallback (%1 nodes)").arg(steps.size()), true));
  }
  const double worst = m_analysis->result()->worstOutputSnrDb();
  // With realisations the target is checked on their mean too: shown beside the analysis's figure.
  QString mean = worstRealisationsShortText(*m_analysis->result());
  if (!mean.isEmpty()) mean = QStringLiteral(" (%1)").arg(mean);
  m_window->log(QStringLiteral("Auto-fallback excluded %1 node(s); worst output SNR %2 dB%3%4")
                    .arg(steps.size())
                    .arg(worst, 0, 'f', 2)
                    .arg(mean, reached ? QString() : QStringLiteral(" (target not reached)")));
  if (!m_window->errorDialogsEnabled()) return;
  auto* dialog = new QDialog(m_window);
  dialog->setObjectName(QStringLiteral("fallbackDialog"));
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(QStringLiteral("Auto-fallback"));
  auto* layout = new QVBoxLayout(dialog);
  auto* summary = new QLabel(reached ? QStringLiteral("Target reached after excluding %1 node(s). Worst output: %2 dB%3.")
                                           .arg(steps.size())
                                           .arg(worst, 0, 'f', 2)
                                           .arg(mean)
                                     : QStringLiteral("Target not reached: %1 node(s) excluded, worst output %2 dB%3.")
                                           .arg(steps.size())
                                           .arg(worst, 0, 'f', 2)
                                           .arg(mean),
                             dialog);
  summary->setObjectName(QStringLiteral("fallbackSummary"));
  layout->addWidget(summary);
  auto* list = new QTreeWidget(dialog);
  list->setHeaderLabels({QStringLiteral("Step"), QStringLiteral("Excluded node"), QStringLiteral("Op"), QStringLiteral("Worst output SNR after (dB)")});
  list->setRootIsDecorated(false);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Node& n = g.nodes[(size_t)steps[i].excluded];
    auto* item = new QTreeWidgetItem(list, {QString::number(i + 1), QString::fromStdString(n.name), QString::fromStdString(n.opType),
                                            QString::number(steps[i].worstOutputSnrDb(), 'f', 2)});
    item->setData(0, Qt::UserRole, steps[i].excluded);
  }
  for (int c = 0; c < 4; ++c) list->resizeColumnToContents(c);
  connect(list, &QTreeWidget::itemActivated, this, [this](QTreeWidgetItem* item) { m_window->selectNode(item->data(0, Qt::UserRole).toInt()); });
  layout->addWidget(list);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
  connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::close);
  layout->addWidget(buttons);
  dialog->resize(560, 380);
  dialog->open();
}

void AnalysisActions::showExportDialog() {
  if (!m_analysis->hasResult() || !m_window->current()) return;
  auto* dialog = new ExportDialog(m_analysis, m_window);
  dialog->setObjectName(QStringLiteral("exportDialog"));
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &ExportDialog::exported, m_window,
          [this](const QStringList& files) { m_window->log(QStringLiteral("Exported %1").arg(files.join(QStringLiteral(", ")))); });
  connect(dialog, &ExportDialog::exportFailed, m_window, [this](const QString& m) { m_window->log(QStringLiteral("Error: ") + m); });
  dialog->open();
}

}  // namespace qs::ui
