// The layer table's remedy columns (NodeTableModel::FirstRemedyColumn..LastRemedyColumn): per node
// the graph-wise and layer-wise SNR of the analysis without the remedies (the run's
// remedies.before, as report.json's "remedies" has it), and the change the remedies made (the
// current result minus that), and what each remedy did at the node (ui/remedy_notes.h). The baseline keeps the node states of the calibration; later toggles
// change only the current result.
#include <QColor>
#include <cmath>
#include <limits>

#include "ui/node_table_model.h"

namespace qs::ui {

void NodeTableModel::setBaseline(std::shared_ptr<const AnalysisResult> before) {
  if (before && (!m_model || before->nodes.size() != m_model->graph.nodes.size())) before.reset();
  if (before == m_before) return;
  m_before = std::move(before);
  if (rowCount() > 0) emit dataChanged(index(0, FirstRemedyColumn), index(rowCount() - 1, LastRemedyColumn));
}

void NodeTableModel::setRemedyNotes(std::vector<RemedyNote> notes) {
  bool any = false;
  for (const RemedyNote& n : notes) any = any || !n.empty();
  if (!any || !m_model || notes.size() != m_model->graph.nodes.size()) notes.clear();
  m_notes = std::move(notes);
  if (rowCount() > 0) emit dataChanged(index(0, RemedyNoteColumn), index(rowCount() - 1, RemedyNoteColumn));
}

QString NodeTableModel::remedyHeader(int column) {
  switch (column) {
    case GraphSnrBeforeColumn: return QStringLiteral("Graph-wise before");
    case GraphSnrDeltaColumn: return QStringLiteral("Δ graph-wise");
    case LayerSnrBeforeColumn: return QStringLiteral("Layer-wise before");
    case LayerSnrDeltaColumn: return QStringLiteral("Δ layer-wise");
    case RemedyNoteColumn: return QStringLiteral("Remedy");
  }
  return {};
}

QVariant NodeTableModel::remedyData(int column, NodeId id, int role) const {
  if (column == RemedyNoteColumn) {
    if ((size_t)id >= m_notes.size()) return {};
    const RemedyNote& n = m_notes[(size_t)id];
    if (role == Qt::DisplayRole || role == SortRole) return n.text;
    if (role == Qt::ToolTipRole && !n.empty()) return n.detail;
    return {};
  }
  if (!m_before || !m_result) return {};
  const NodeResult& b = m_before->nodes[(size_t)id];
  const NodeResult& a = m_result->nodes[(size_t)id];
  const bool graphwise = column == GraphSnrBeforeColumn || column == GraphSnrDeltaColumn;
  const bool delta = column == GraphSnrDeltaColumn || column == LayerSnrDeltaColumn;
  const bool hasBefore = graphwise ? b.hasGraphwise : b.hasLayerwise;
  const bool hasAfter = graphwise ? a.hasGraphwise : a.hasLayerwise;
  const double before = hasBefore ? (graphwise ? b.graphwise.snrDb : b.layerwise.snrDb) : NAN;
  const double after = hasAfter ? (graphwise ? a.graphwise.snrDb : a.layerwise.snrDb) : NAN;
  // Infinite SNRs (exact nodes) give no finite change: the cell stays empty.
  double v = delta ? after - before : before;
  if (delta && !(std::isfinite(after) && std::isfinite(before))) v = NAN;
  switch (role) {
    case Qt::DisplayRole:
      if (std::isnan(v)) return QString();
      if (delta) return (v > 0 ? QStringLiteral("+") : QString()) + formatDb(v);
      return formatDb(v);
    case SortRole:
      if (std::isnan(v)) return -std::numeric_limits<double>::max();
      return v;
    case Qt::TextAlignmentRole: return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    case Qt::BackgroundRole: {
      if (!delta || std::isnan(v) || std::abs(v) < 0.05) return {};
      // Green where the remedies helped, red where they hurt, stronger up to 6 dB.
      const int alpha = 40 + (int)(120 * std::min(1.0, std::abs(v) / 6.0));
      return v > 0 ? QColor(46, 160, 67, alpha) : QColor(207, 34, 46, alpha);
    }
    case Qt::ToolTipRole:
      return delta ? QStringLiteral("With the remedies minus without them, in dB (positive: the remedies helped)")
                   : QStringLiteral("Before the remedies: the analysis of the model without them, node states as calibrated");
  }
  return {};
}

}  // namespace qs::ui
