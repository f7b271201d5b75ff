// The analysis commands of the workbench: Calibrate (runs at once with the session's calibration
// settings once they name the data, else opens the calibration dialog), Calibration Settings (the
// dialog), Auto-Fallback (its target and the list of what it excluded), Export (the export dialog)
// and Cancel; the analysis toolbar (colouring, undo, redo); and the node toggles of the table and
// the graph, as undoable requests to the AnalysisController.
#pragma once

#include <QObject>
#include <QString>
#include <memory>
#include <utility>
#include <vector>

#include "ui/analysis_controller.h"
#include "ui/graph_view.h"

class QAction;
class QComboBox;
class QUndoStack;

namespace qs::ui {

class CalibrationDialog;
class MainWindow;

class AnalysisActions : public QObject {
  Q_OBJECT
 public:
  /// Adds the analysis toolbar to `window` and drives `analysis`. Object names: "undoStack",
  /// "colourCombo", the actions "calibrateAction", "calibrationSettingsAction"; the dialogs
  /// "calibrationDialog", "exportDialog", "fallbackDialog".
  AnalysisActions(MainWindow* window, AnalysisController* analysis);

  AnalysisController* controller() const { return m_analysis; }
  QAction* calibrateAction() const { return m_calibrate; }
  QAction* calibrationSettingsAction() const { return m_calibrationSettings; }
  QAction* fallbackAction() const { return m_fallback; }
  QAction* exportAction() const { return m_export; }
  QAction* cancelAction() const { return m_cancel; }
  QAction* undoAction() const { return m_undoAction; }
  QAction* redoAction() const { return m_redoAction; }

  /// A new model is shown: no undo history, the calibration form adapted to its input, no
  /// calibration settings chosen for it yet.
  void modelOpened(const Model* model);
  /// Enables the actions for the window's model and the controller's state (the window calls it).
  void updateActions();
  /// Call once the views show `result`: measures and logs the latency of the toggle that led to it.
  void resultShown(const std::shared_ptr<const AnalysisResult>& result);
  /// Milliseconds from the last toggle request to the table and graph showing its result.
  double lastToggleLatencyMs() const { return m_lastToggleMs; }

  /// The calibration dialog (created on first use), shown with showCalibrationDialog().
  CalibrationDialog* calibrationDialog();
  /// What the calibration form holds (defaults while it was never opened).
  AnalysisRequest formRequest() const;
  /// Fills the calibration form with a project's settings; when they name calibration data,
  /// Calibrate runs with them at once.
  void setCalibrationSettings(const AnalysisRequest& request);
  /// The form's INT4 settings (on: the mode is int4), and setting them (a project's; after
  /// setCalibrationSettings, which sets the int8/fp8 mode).
  Int4Settings formInt4Settings() const;
  void setInt4Settings(const Int4Settings& settings);
  /// Whether Calibrate runs at once (the settings name the data: a project chose it, or a
  /// calibration of this model ran) rather than opening the dialog.
  bool calibratesDirectly() const { return m_settingsChosen; }
  /// What Calibrate does: runs the calibration with the form's settings when they are chosen, the
  /// progress in the status bar (a run that fails opens the dialog with the error); otherwise, or
  /// while a job runs, opens the dialog.
  void calibrate();
  void showCalibrationDialog();
  /// Asks for a target and runs the automatic fallback.
  void showAutoFallback();
  void showExportDialog();

  /// Sets nodes' states through the undo stack (one undo step), as the table and the graph do.
  void requestQuantized(const std::vector<std::pair<NodeId, bool>>& states, const QString& text);
  /// One node's checkbox (table) or context menu (graph).
  void requestNode(NodeId id, bool on);
  /// Every quantizable node of an op type (the graph's context menu).
  void requestOpType(const QString& op, bool on);
  /// Point `point` of the last fallback's curve (the plots panel's click): its first `point`
  /// exclusions excluded, the curve's later ones quantized, as one undo step. False when there is
  /// no curve or no such point.
  bool requestFallbackPoint(int point);

  /// The graph colouring, by the name projects store ("op", "graphwise", "layerwise", "sensitivity").
  QString colouringKey() const;
  void setColouringKey(const QString& key);
  GraphView::Colouring colouring() const;

 signals:
  void colouringChanged(qs::ui::GraphView::Colouring colouring);
  /// Node states were requested (their results follow): the views show them as pending.
  void requestsChanged();

 private:
  void applyStates(const std::vector<std::pair<NodeId, bool>>& states);
  bool currentQuantized(NodeId id) const;
  void onFallbackFinished(const std::vector<FallbackStep>& steps, bool reached);

  MainWindow* m_window;
  AnalysisController* m_analysis;
  QUndoStack* m_undo = nullptr;
  QComboBox* m_colourCombo = nullptr;
  CalibrationDialog* m_calibDialog = nullptr;
  QAction* m_calibrate = nullptr;
  QAction* m_calibrationSettings = nullptr;
  bool m_settingsChosen = false;  // calibrate() runs without asking
  bool m_directRun = false;       // the running calibration came from calibrate()
  QAction* m_fallback = nullptr;
  QAction* m_export = nullptr;
  QAction* m_cancel = nullptr;
  QAction* m_undoAction = nullptr;
  QAction* m_redoAction = nullptr;
  double m_toggleStartMs = -1;
  double m_lastToggleMs = -1;
};

}  // namespace qs::ui
