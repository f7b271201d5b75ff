#include "ui/node_table_model.h"

#include <QRegularExpression>

#include "core/onnx/model_info.h"

namespace qs::ui {

namespace {

QString valueNames(const Graph& g, const std::vector<ValueId>& ids) {
  QStringList names;
  for (ValueId v : ids) names << (v == kNoValue ? QStringLiteral("∅") : QString::fromStdString(g.value(v).name));
  return names.join(QStringLiteral(", "));
}

}  // namespace

NodeTableModel::NodeTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void NodeTableModel::setModel(std::shared_ptr<const Model> model) {
  beginResetModel();
  m_model = std::move(model);
  m_rowOfNode.clear();
  if (m_model) {
    m_rowOfNode.assign(m_model->graph.nodes.size(), -1);
    const auto& order = m_model->graph.topoOrder;
    for (size_t r = 0; r < order.size(); ++r) m_rowOfNode[(size_t)order[r]] = (int)r;
  }
  endResetModel();
}

int NodeTableModel::rowOfNode(NodeId id) const {
  return id >= 0 && (size_t)id < m_rowOfNode.size() ? m_rowOfNode[(size_t)id] : -1;
}

NodeId NodeTableModel::nodeAtRow(int row) const {
  if (!m_model || row < 0 || row >= rowCount()) return -1;
  return m_model->graph.topoOrder[(size_t)row];
}

int NodeTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !m_model ? 0 : (int)m_model->graph.topoOrder.size();
}

int NodeTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant NodeTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || !m_model || index.row() >= rowCount() || index.column() >= ColumnCount) return {};
  const Graph& g = m_model->graph;
  const NodeId id = nodeAtRow(index.row());
  const Node& node = g.nodes[(size_t)id];
  if (role == NodeIdRole) return id;
  if (role == Qt::TextAlignmentRole && index.column() == IndexColumn)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  if (role == Qt::ToolTipRole && (index.column() == InputsColumn || index.column() == OutputsColumn))
    return data(index, Qt::DisplayRole);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case IndexColumn: return index.row();  // an int, so that the proxy sorts numerically
    case NameColumn: return QString::fromStdString(node.name);
    case OpColumn: return QString::fromStdString(node.opType);
    case DomainColumn: return node.domain.empty() ? QStringLiteral("ai.onnx") : QString::fromStdString(node.domain);
    case InputsColumn: return valueNames(g, node.inputs);
    case OutputsColumn: return valueNames(g, node.outputs);
    case ShapeColumn: {
      for (ValueId v : node.outputs)
        if (v != kNoValue && g.value(v).shape) return QString::fromStdString(dimsToString(g.value(v).shape));
      return QString();
    }
  }
  return {};
}

QVariant NodeTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
  switch (section) {
    case IndexColumn: return QStringLiteral("#");
    case NameColumn: return QStringLiteral("Name");
    case OpColumn: return QStringLiteral("Op");
    case DomainColumn: return QStringLiteral("Domain");
    case InputsColumn: return QStringLiteral("Inputs");
    case OutputsColumn: return QStringLiteral("Outputs");
    case ShapeColumn: return QStringLiteral("Output shape");
  }
  return {};
}

NodeFilterProxyModel::NodeFilterProxyModel(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(Qt::DisplayRole);
}

bool NodeFilterProxyModel::setPattern(const QString& pattern) {
  QRegularExpression re(pattern, QRegularExpression::CaseInsensitiveOption);
  if (!re.isValid()) return false;
  m_regex = re;
  invalidateFilter();
  return true;
}

bool NodeFilterProxyModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
  if (m_regex.pattern().isEmpty()) return true;
  const QAbstractItemModel* src = sourceModel();
  for (int column : {NodeTableModel::NameColumn, NodeTableModel::OpColumn}) {
    const QString text = src->data(src->index(sourceRow, column, sourceParent)).toString();
    if (m_regex.match(text).hasMatch()) return true;
  }
  return false;
}

}  // namespace qs::ui
