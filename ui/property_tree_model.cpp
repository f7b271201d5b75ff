#include "ui/property_tree_model.h"

#include <QFont>

namespace qs::ui {

PropertyTreeModel::PropertyTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

void PropertyTreeModel::setEntries(const std::vector<PropertyEntry>& entries) {
  beginResetModel();
  m_rows.clear();
  m_top.clear();
  for (size_t i = 0; i < entries.size(); ++i) append(entries[i], -1, (int)i);
  endResetModel();
}

void PropertyTreeModel::append(const PropertyEntry& e, int parent, int row) {
  const int id = (int)m_rows.size();
  m_rows.push_back({e.key, e.value, e.heading, parent, row, {}});
  (parent < 0 ? m_top : m_rows[(size_t)parent].children).push_back(id);
  for (size_t i = 0; i < e.children.size(); ++i) append(e.children[i], id, (int)i);
}

QModelIndex PropertyTreeModel::findKey(const QString& key, const QModelIndex& parent) const {
  for (int r = 0; r < rowCount(parent); ++r) {
    QModelIndex i = index(r, KeyColumn, parent);
    if (i.data().toString() == key) return i;
  }
  return {};
}

QModelIndex PropertyTreeModel::index(int row, int column, const QModelIndex& parent) const {
  if (column < 0 || column >= ColumnCount || (parent.isValid() && parent.column() != 0)) return {};
  const std::vector<int>& kids = childrenOf(parent.isValid() ? (int)parent.internalId() : -1);
  if (row < 0 || row >= (int)kids.size()) return {};
  return createIndex(row, column, (quintptr)kids[(size_t)row]);
}

QModelIndex PropertyTreeModel::parent(const QModelIndex& child) const {
  if (!child.isValid()) return {};
  const int p = m_rows[(size_t)child.internalId()].parent;
  if (p < 0) return {};
  return createIndex(m_rows[(size_t)p].row, 0, (quintptr)p);
}

int PropertyTreeModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() && parent.column() != 0) return 0;
  return (int)childrenOf(parent.isValid() ? (int)parent.internalId() : -1).size();
}

int PropertyTreeModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QVariant PropertyTreeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const Row& r = m_rows[(size_t)index.internalId()];
  switch (role) {
    case Qt::DisplayRole:
    case Qt::ToolTipRole: return index.column() == KeyColumn ? r.key : r.value;
    case Qt::FontRole:
      if (r.heading) {
        QFont f;
        f.setBold(true);
        return f;
      }
      return {};
    default: return {};
  }
}

QVariant PropertyTreeModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  return section == KeyColumn ? QStringLiteral("Property") : QStringLiteral("Value");
}

}  // namespace qs::ui
