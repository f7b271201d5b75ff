// The workbench's views of what the remedies and the sensitivity switches of the calibration
// dialog (ui/remedy_options.h) produced: the layer table's before/after columns and the SNR plot's
// no-remedies curve, and the layer table's "Exact sensitivity of this node" action.
#pragma once

class QAction;
class QMenu;
class QTableView;

namespace qs::ui {

class AnalysisController;
class NodeTableModel;
class PlotsPanel;

/// After each new result: gives the table and the plots the run's analysis without remedies
/// (none when the run applied no remedy) and shows the remedy columns only when there is one; the
/// "Remedy" column (what each remedy did per node, depthwise input equalization included) shows
/// whenever a remedy touched a node.
void showRemedies(const AnalysisController& controller, NodeTableModel& model, QTableView& table, PlotsPanel& plots);

/// Adds "Exact sensitivity of this node" to `menu` for node `id`, enabled for a quantizable node
/// once an analysis exists and no job runs; triggering it starts AnalysisController::exactSensitivity.
QAction* addExactSensitivityAction(QMenu& menu, int id, AnalysisController& controller);

/// Right click on a row of `table` (whose model maps rows to NodeTableModel::NodeIdRole): a menu
/// with "Exact sensitivity of this node", enabled for quantizable nodes once an analysis exists and
/// no job runs; it starts AnalysisController::exactSensitivity for that node.
void installExactSensitivityMenu(QTableView& table, AnalysisController& controller);

}  // namespace qs::ui
