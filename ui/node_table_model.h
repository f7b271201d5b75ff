// The node table: one row per ONNX node in topological order, behind a sort/filter proxy.
// Adapts an immutable model; the analysis columns (SNR, quantized, ...) join it when that core exists.
#pragma once

#include <QAbstractTableModel>
#include <QRegularExpression>
#include <QSortFilterProxyModel>
#include <memory>

#include "core/ir/graph.h"

namespace qs::ui {

class NodeTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { IndexColumn, NameColumn, OpColumn, DomainColumn, InputsColumn, OutputsColumn, ShapeColumn, ColumnCount };
  /// Qt::UserRole on any cell: the NodeId of the row.
  static constexpr int NodeIdRole = Qt::UserRole + 1;

  explicit NodeTableModel(QObject* parent = nullptr);
  void setModel(std::shared_ptr<const Model> model);
  const std::shared_ptr<const Model>& model() const { return m_model; }

  /// Row of a node (its position in topological order), or -1.
  int rowOfNode(NodeId id) const;
  NodeId nodeAtRow(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const Model> m_model;
  std::vector<int> m_rowOfNode;
};

/// Filters rows by a case-insensitive regular expression on the node name or op type.
class NodeFilterProxyModel : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit NodeFilterProxyModel(QObject* parent = nullptr);
  /// Returns false (and keeps the old filter) when `pattern` is not a valid expression.
  bool setPattern(const QString& pattern);

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

 private:
  QRegularExpression m_regex;
};

}  // namespace qs::ui
