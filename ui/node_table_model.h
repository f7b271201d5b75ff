// The layer table: one row per ONNX node in topological order, behind a sort/filter proxy. Adapts
// an immutable model and, once calibrated, an immutable AnalysisResult: the quantized checkbox,
// graph-wise / layer-wise SNR, sensitivity, cosine, the weight/activation split, amax and scale.
// Ticking a checkbox does not change the model: it emits quantizeRequested(), and the requested
// state shows (in italics) until a result that applies it arrives.
//
// Nodes inside If/Loop/Scan subgraphs get no rows, by design: a row is keyed by a main-graph NodeId
// (NodeIdRole, rowOfNode, the analysis' per-node vectors, quantizeRequested and its undo), and the
// proxy's sort and the toggles assume every row is such a node. Subgraph nodes are never quantized,
// so they would be rows whose every analysis cell is empty and whose checkbox does nothing. They
// are shown where their context is: expanded in the graph view, with scope and "kept in float" in
// the inspector, and listed in report.json's subgraph_nodes. The control-flow node itself has a row.
#pragma once

#include <QAbstractTableModel>
#include <QRegularExpression>
#include <QSortFilterProxyModel>
#include <map>
#include <memory>

#include "core/analysis/results.h"
#include "core/ir/graph.h"
#include "ui/remedy_notes.h"
#include "ui/snr_scale.h"

namespace qs::ui {

class NodeTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    IndexColumn, NameColumn, OpColumn,
    QuantizedColumn, GraphSnrColumn, LayerSnrColumn, SensitivityColumn, CosineColumn, WeightSnrColumn,
    ActivationSnrColumn, AmaxColumn, ScaleColumn,
    DomainColumn, InputsColumn, OutputsColumn, ShapeColumn,
    // With remedies (ui/remedy_columns.cpp): the SNR of the analysis without them, and after minus before,
    // and what the remedies did at the node (ui/remedy_notes.h).
    GraphSnrBeforeColumn, GraphSnrDeltaColumn, LayerSnrBeforeColumn, LayerSnrDeltaColumn, RemedyNoteColumn, ColumnCount
  };
  static constexpr int FirstAnalysisColumn = QuantizedColumn, LastAnalysisColumn = ScaleColumn;
  static constexpr int FirstRemedyColumn = GraphSnrBeforeColumn, LastRemedyColumn = RemedyNoteColumn;
  /// Qt::UserRole on any cell: the NodeId of the row.
  static constexpr int NodeIdRole = Qt::UserRole + 1;
  /// Numbers as doubles for sorting (missing values sort below every number).
  static constexpr int SortRole = Qt::UserRole + 2;

  explicit NodeTableModel(QObject* parent = nullptr);
  void setModel(std::shared_ptr<const Model> model);
  const std::shared_ptr<const Model>& model() const { return m_model; }
  /// Shows an analysis of the same model (null: none, the analysis columns are empty).
  void setResult(std::shared_ptr<const AnalysisResult> result);
  const std::shared_ptr<const AnalysisResult>& result() const { return m_result; }
  /// The analysis of the same model without the remedies (AnalysisRun::remedies.before), for the
  /// remedy columns; null: none (the columns are empty). Set it after setResult().
  void setBaseline(std::shared_ptr<const AnalysisResult> before);
  const std::shared_ptr<const AnalysisResult>& baseline() const { return m_before; }
  /// Per NodeId, what the remedies did there (the "Remedy" column); empty: none.
  void setRemedyNotes(std::vector<RemedyNote> notes);
  bool hasRemedyNotes() const { return !m_notes.empty(); }
  /// Requested states not yet in the result, shown in the checkbox until it arrives.
  void setUnappliedStates(std::map<NodeId, bool> states);

  /// Row of a node (its position in topological order), or -1.
  int rowOfNode(NodeId id) const;
  NodeId nodeAtRow(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

 signals:
  /// The user ticked or cleared a node's checkbox.
  void quantizeRequested(qs::NodeId node, bool on);

 private:
  QVariant analysisData(const QModelIndex& index, NodeId id, int role) const;
  double number(int column, NodeId id) const;  // NaN when the cell is empty
  QVariant remedyData(int column, NodeId id, int role) const;  // ui/remedy_columns.cpp
  static QString remedyHeader(int column);

  std::shared_ptr<const Model> m_model;
  std::shared_ptr<const AnalysisResult> m_result;
  std::shared_ptr<const AnalysisResult> m_before;  // without remedies
  std::vector<RemedyNote> m_notes;                 // by NodeId, or empty
  std::map<NodeId, bool> m_unapplied;
  std::vector<int> m_rowOfNode;
  std::vector<int> m_firstActivation;  // NodeId -> index into plan.activations, -1 for none
  std::vector<int> m_weightOf;         // NodeId -> index into result.weights, -1 for none
  SnrScale m_scale[3];                 // graph-wise, layer-wise, sensitivity
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
