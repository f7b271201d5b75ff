// A two-column (property, value) tree: what the inspector shows for a node, a tensor or the model.
#pragma once

#include <QAbstractItemModel>
#include <QString>
#include <vector>

namespace qs::ui {

struct PropertyEntry {
  QString key;
  QString value;
  std::vector<PropertyEntry> children;
  bool heading = false;  // a section title, drawn bold
};

class PropertyTreeModel : public QAbstractItemModel {
  Q_OBJECT
 public:
  enum Column { KeyColumn, ValueColumn, ColumnCount };
  explicit PropertyTreeModel(QObject* parent = nullptr);

  void setEntries(const std::vector<PropertyEntry>& entries);
  /// The first row whose key is `key` below `parent` (invalid when absent); for tests and links.
  QModelIndex findKey(const QString& key, const QModelIndex& parent = {}) const;

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  struct Row {
    QString key, value;
    bool heading = false;
    int parent = -1;  // index into m_rows, -1 for top level
    int row = 0;      // position among its siblings
    std::vector<int> children;
  };
  void append(const PropertyEntry& e, int parent, int row);
  const std::vector<int>& childrenOf(int node) const { return node < 0 ? m_top : m_rows[(size_t)node].children; }

  std::vector<Row> m_rows;
  std::vector<int> m_top;
};

}  // namespace qs::ui
