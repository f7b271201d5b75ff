// Layered (Sugiyama) layout of a model's graph for the graph view, computed off the GUI thread.
// Nodes are ONNX nodes plus small boxes for graph inputs and outputs; edges are tensors. Initializers
// and folded constants are not drawn (the inspector lists them). The result is immutable and carries
// a spatial index so that the view paints only what is visible.
#pragma once

#include <QFont>
#include <QPointF>
#include <QRectF>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/ir/graph.h"
#include "core/util/status.h"
#include "ui/op_category.h"

namespace qs::ui {

struct LayoutItem {
  enum class Kind : uint8_t { Node, GraphInput, GraphOutput };
  Kind kind = Kind::Node;
  int32_t id = -1;     // NodeId for Kind::Node, ValueId for graph inputs and outputs
  int32_t layer = 0;   // 0 at the top
  OpCategory category = OpCategory::Other;
  QRectF rect;         // scene coordinates
};

struct LayoutEdge {
  int32_t from = -1, to = -1;  // item indices
  ValueId value = kNoValue;    // the tensor this edge carries
  std::vector<QPointF> points; // source port, bend points (one per crossed layer), target port
};

/// Uniform grid over the scene: which items and edges touch a rectangle.
class SpatialIndex {
 public:
  void build(const QRectF& bounds, const std::vector<LayoutItem>& items, const std::vector<LayoutEdge>& edges);
  /// Appends the indices of items and edges whose cells meet `r` (sorted, without repeats).
  void query(const QRectF& r, std::vector<int32_t>* items, std::vector<int32_t>* edges) const;

 private:
  std::vector<int32_t> cellRange(const QRectF& r) const;  // x0, y0, x1, y1 clamped
  QRectF m_bounds;
  double m_cell = 1;
  int m_cols = 0, m_rows = 0;
  // CSR layout: entries of cell c are m_itemEntries[m_itemStart[c] .. m_itemStart[c+1]).
  std::vector<int32_t> m_itemStart, m_itemEntries, m_edgeStart, m_edgeEntries;
};

struct GraphLayout {
  std::shared_ptr<const Model> model;  // the model laid out (kept alive with the layout)
  std::vector<LayoutItem> items;
  std::vector<LayoutEdge> edges;
  std::vector<int32_t> itemOfNode;     // NodeId -> item index
  std::vector<int32_t> itemOfValue;    // ValueId -> item index of its graph input/output box, or -1
  QRectF bounds;
  int32_t layerCount = 0;
  int64_t bendPointCount = 0;
  SpatialIndex index;

  /// The topmost item whose box contains `scenePos`, or -1.
  int32_t itemAt(const QPointF& scenePos) const;
};

struct LayoutOptions {
  QFont opFont;    // op type line (drawn bold)
  QFont nameFont;  // node name line
  double nodeHeight = 42;
  double ioHeight = 26;
  double minNodeWidth = 76;
  double maxNodeWidth = 220;  // longer names are elided when painted
  double horizontalGap = 26;
  double layerGap = 34;
  int crossingIterations = 100;  // igraph's barycenter sweeps; fewer for very large graphs
};

/// Progress in percent [0, 100].
using LayoutProgress = std::function<void(int percent)>;

/// Lays out `model`'s graph. Synchronous and thread-safe (igraph calls are serialised inside);
/// `cancel` (may be null) is polled between stages. Fails with StatusCode::Cancelled when cancelled.
Result<std::shared_ptr<const GraphLayout>> computeGraphLayout(std::shared_ptr<const Model> model,
                                                              const LayoutOptions& options,
                                                              const LayoutProgress& progress = {},
                                                              const std::atomic<bool>* cancel = nullptr);

}  // namespace qs::ui
