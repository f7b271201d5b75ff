#include "ui/remedy_view.h"

#include <QHeaderView>
#include <QMenu>
#include <QTableView>

#include "ui/analysis_controller.h"
#include "ui/node_table_model.h"
#include "ui/plots_panel.h"
#include "ui/remedy_notes.h"

namespace qs::ui {

void showRemedies(const AnalysisController& controller, NodeTableModel& model, QTableView& table, PlotsPanel& plots) {
  const auto run = controller.run();
  std::shared_ptr<const AnalysisResult> before;
  const bool current = controller.hasResult() && run;
  // On the shown model's nodes, as result() is (the smoothings' inserted Muls move the run's ids).
  if (current && !run->remedies.empty()) before = controller.onShownModel(run->remedies.before);
  model.setBaseline(before);
  // By node name: the smoothings' inserted Muls can move the ids of the run's model from those of the model shown.
  const auto& loaded = controller.model();
  model.setRemedyNotes(current && run->model && loaded ? remedyNotesOnShown(loaded->graph, run->model->graph, run->remedies)
                                                       : std::vector<RemedyNote>{});
  plots.setBaseline(before);
  const bool shown = (bool)model.baseline();
  QHeaderView* header = table.horizontalHeader();
  for (int c = NodeTableModel::FirstRemedyColumn; c <= NodeTableModel::LastRemedyColumn; ++c) {
    const bool wasHidden = table.isColumnHidden(c);
    const bool show = c == NodeTableModel::RemedyNoteColumn ? model.hasRemedyNotes() : shown;
    table.setColumnHidden(c, !show);
    if (show && wasHidden) table.resizeColumnToContents(c);
  }
  // Beside the SNR columns they compare with, not after the wide input and output names.
  int after = header->visualIndex(NodeTableModel::LayerSnrColumn);
  for (int c = NodeTableModel::FirstRemedyColumn; c <= NodeTableModel::LastRemedyColumn; ++c) {
    const int from = header->visualIndex(c);
    if (from != after + 1) header->moveSection(from, from > after ? after + 1 : after);
    after = header->visualIndex(c);
  }
}

QAction* addExactSensitivityAction(QMenu& menu, int id, AnalysisController& controller) {
  const auto result = controller.result();
  QAction* exact = menu.addAction(QStringLiteral("Exact sensitivity of this node"));
  const bool quantizable = result && id >= 0 && (size_t)id < result->plan.nodes.size() && result->plan.nodes[(size_t)id].quantizable;
  exact->setEnabled(quantizable && !controller.isBusy());
  if (quantizable && result->nodes[(size_t)id].sensitivityExact) exact->setText(QStringLiteral("Exact sensitivity of this node (computed)"));
  QObject::connect(exact, &QAction::triggered, &controller, [&controller, id] { controller.exactSensitivity({id}); });
  return exact;
}

void installExactSensitivityMenu(QTableView& table, AnalysisController& controller) {
  table.setContextMenuPolicy(Qt::CustomContextMenu);
  QObject::connect(&table, &QWidget::customContextMenuRequested, &table, [&table, &controller](const QPoint& at) {
    const QModelIndex index = table.indexAt(at);
    if (!index.isValid()) return;
    QMenu menu(&table);
    addExactSensitivityAction(menu, index.data(NodeTableModel::NodeIdRole).toInt(), controller);
    menu.exec(table.viewport()->mapToGlobal(at));
  });
}

}  // namespace qs::ui
