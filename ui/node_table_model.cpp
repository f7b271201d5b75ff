#include "ui/node_table_model.h"

#include <QFont>
#include <QRegularExpression>
#include <cmath>
#include <limits>

#include "core/exec/model_info.h"

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
  m_result.reset();
  m_before.reset();
  m_notes.clear();
  m_unapplied.clear();
  m_firstActivation.clear();
  m_weightOf.clear();
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
  if (index.column() >= FirstAnalysisColumn && index.column() <= LastAnalysisColumn) return analysisData(index, id, role);
  if (index.column() >= FirstRemedyColumn && index.column() <= LastRemedyColumn) return remedyData(index.column(), id, role);
  if (role == SortRole) {
    if (index.column() == IndexColumn) return index.row();
    return data(index, Qt::DisplayRole);
  }
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
    case QuantizedColumn: return QStringLiteral("Quantized");
    case GraphSnrColumn: return QStringLiteral("Graph-wise SNR");
    case LayerSnrColumn: return QStringLiteral("Layer-wise SNR");
    case SensitivityColumn: return QStringLiteral("Sensitivity");
    case CosineColumn: return QStringLiteral("Cosine");
    case WeightSnrColumn: return QStringLiteral("Weight SNR");
    case ActivationSnrColumn: return QStringLiteral("Act. SNR");
    case AmaxColumn: return QStringLiteral("amax");
    case ScaleColumn: return QStringLiteral("Scale");
    default: return remedyHeader(section);
  }
  return {};
}

void NodeTableModel::setResult(std::shared_ptr<const AnalysisResult> result) {
  if (result && (!m_model || result->nodes.size() != m_model->graph.nodes.size())) result.reset();
  const bool hadResult = (bool)m_result;
  m_result = std::move(result);
  const size_t n = m_model ? m_model->graph.nodes.size() : 0;
  m_firstActivation.assign(n, -1);
  m_weightOf.assign(n, -1);
  if (m_result) {
    const auto& acts = m_result->plan.activations;
    for (size_t i = acts.size(); i-- > 0;) m_firstActivation[(size_t)acts[i].node] = (int)i;
    for (size_t i = m_result->weights.size(); i-- > 0;) m_weightOf[(size_t)m_result->weights[i].node] = (int)i;
    std::vector<double> v[3];
    for (const NodeResult& r : m_result->nodes) {
      if (r.hasGraphwise) v[0].push_back(r.graphwise.snrDb);
      if (r.hasLayerwise) v[1].push_back(r.layerwise.snrDb);
      v[2].push_back(r.sensitivitySnrDb);
    }
    for (int k = 0; k < 3; ++k) m_scale[k] = SnrScale::fromValues(v[k]);
  }
  // Rows stay the same: only the analysis cells change (a reset would lose selection and scroll).
  if (rowCount() > 0 && (hadResult || m_result))
    emit dataChanged(index(0, FirstAnalysisColumn), index(rowCount() - 1, LastAnalysisColumn));
}

void NodeTableModel::setUnappliedStates(std::map<NodeId, bool> states) {
  std::map<NodeId, bool> old = std::move(m_unapplied);
  m_unapplied = std::move(states);
  auto touch = [&](NodeId id) {
    const int row = rowOfNode(id);
    if (row >= 0) emit dataChanged(index(row, QuantizedColumn), index(row, QuantizedColumn));
  };
  for (auto& [id, on] : old) touch(id);
  for (auto& [id, on] : m_unapplied) touch(id);
}

double NodeTableModel::number(int column, NodeId id) const {
  if (!m_result) return NAN;
  const NodeResult& r = m_result->nodes[(size_t)id];
  switch (column) {
    case GraphSnrColumn: return r.hasGraphwise ? r.graphwise.snrDb : NAN;
    case LayerSnrColumn: return r.hasLayerwise ? r.layerwise.snrDb : NAN;
    case SensitivityColumn: return r.sensitivitySnrDb;
    case CosineColumn: return r.hasGraphwise ? r.graphwise.cosine : NAN;
    case WeightSnrColumn: return r.weightSnrDb;
    case ActivationSnrColumn: return r.activationSnrDb;
    case AmaxColumn:
    case ScaleColumn: {
      const int a = m_firstActivation[(size_t)id];
      if (a < 0) return NAN;
      auto it = m_result->activations.find(m_result->plan.activations[(size_t)a].value);
      if (it == m_result->activations.end()) return NAN;
      return column == AmaxColumn ? it->second.amax : it->second.scale;
    }
  }
  return NAN;
}

QVariant NodeTableModel::analysisData(const QModelIndex& index, NodeId id, int role) const {
  if (!m_result) return {};
  const int column = index.column();
  const NodeQuantState& state = m_result->plan.nodes[(size_t)id];
  if (column == QuantizedColumn) {
    auto pending = m_unapplied.find(id);
    const bool on = pending != m_unapplied.end() ? pending->second : state.quantized;
    switch (role) {
      case Qt::CheckStateRole:
        return state.quantizable ? QVariant(on ? Qt::Checked : Qt::Unchecked) : QVariant();
      case Qt::DisplayRole:
        if (state.quantizable) return QString();
        return QStringLiteral("—");
      case SortRole: return state.quantizable ? (on ? 2 : 1) : 0;
      case Qt::ToolTipRole:
        if (pending != m_unapplied.end()) return QStringLiteral("Re-analysing…");
        return state.quantized ? QStringLiteral("Quantized") : QString::fromStdString(state.reason);
      case Qt::FontRole:
        if (pending != m_unapplied.end()) {
          QFont f;
          f.setItalic(true);
          return f;
        }
        return {};
      case Qt::TextAlignmentRole: return QVariant::fromValue(Qt::Alignment(Qt::AlignCenter));
    }
    return {};
  }
  const double v = number(column, id);
  switch (role) {
    case Qt::DisplayRole:
      if (std::isnan(v)) return QString();
      if (column == CosineColumn) return QString::number(v, 'f', 5);
      if (column == AmaxColumn) return QString::number(v, 'g', 5);
      if (column == ScaleColumn) return QString::number(v, 'e', 3);
      return formatDb(v);
    case SortRole:
      if (std::isnan(v)) return -std::numeric_limits<double>::max();
      return v;
    case Qt::TextAlignmentRole: return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    case Qt::BackgroundRole: {
      if (std::isnan(v)) return {};
      int k = column == GraphSnrColumn ? 0 : column == LayerSnrColumn ? 1 : column == SensitivityColumn ? 2 : -1;
      if (k < 0) return {};
      QColor c = m_scale[k].color(v);
      c.setAlpha(110);
      return c;
    }
    case Qt::ToolTipRole:
      if (column == AmaxColumn || column == ScaleColumn) {
        QStringList lines;
        for (const ActivationPoint& a : m_result->plan.activations) {
          if (a.node != id) continue;
          auto it = m_result->activations.find(a.value);
          if (it == m_result->activations.end()) continue;
          lines << QStringLiteral("input %1 '%2': amax %3, scale %4")
                       .arg(a.inputIndex)
                       .arg(QString::fromStdString(m_model->graph.value(a.value).name))
                       .arg(it->second.amax, 0, 'g', 6)
                       .arg(it->second.scale, 0, 'e', 4);
        }
        return lines.join(QLatin1Char('\n'));
      }
      if (column == SensitivityColumn && !std::isnan(v) && !m_result->nodes[(size_t)id].sensitivityExact)
        return QStringLiteral("First-order estimate; right click: Exact sensitivity of this node");
      if (!state.quantized && column != GraphSnrColumn && column != CosineColumn && !state.reason.empty())
        return QString::fromStdString(state.reason);
      return {};
  }
  return {};
}

Qt::ItemFlags NodeTableModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (index.isValid() && index.column() == QuantizedColumn && m_result) {
    const NodeId id = nodeAtRow(index.row());
    if (id >= 0 && m_result->plan.nodes[(size_t)id].quantizable) f |= Qt::ItemIsUserCheckable;
  }
  return f;
}

bool NodeTableModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::CheckStateRole || !index.isValid() || index.column() != QuantizedColumn || !m_result) return false;
  const NodeId id = nodeAtRow(index.row());
  if (id < 0 || !m_result->plan.nodes[(size_t)id].quantizable) return false;
  const bool on = value.toInt() == Qt::Checked;
  m_unapplied[id] = on;
  emit dataChanged(index, index);
  emit quantizeRequested(id, on);
  return true;
}

NodeFilterProxyModel::NodeFilterProxyModel(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(NodeTableModel::SortRole);
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
