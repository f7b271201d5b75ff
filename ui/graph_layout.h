// Layered (Sugiyama) layout of a model's graph for the graph view, computed off the GUI thread.
// Nodes are ONNX nodes plus small boxes for graph inputs and outputs; edges are tensors. Initializers
// and folded constants are not drawn (the inspector lists them). The result is immutable and carries
// a spatial index so that the view paints only what is visible.
//
// Control-flow nodes (If, Loop, Scan: nodes with graph attributes) can be drawn expanded: their box
// grows into a frame holding one labelled frame per subgraph, each laid out by the same engine.
// The crossing reduction (the costly igraph step) is kept per graph in a LayoutSkeleton, so that
// expanding or collapsing only recomputes coordinates; subgraph skeletons are built once, on demand.
#pragma once

#include <QFont>
#include <QPointF>
#include <QRectF>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/util/status.h"
#include "ui/op_category.h"

namespace qs::ui {

struct LayoutItem {
  /// OuterRef: inside a subgraph, a value read from an enclosing scope (drawn as a dashed pill).
  /// Group: a group of nodes (GraphLayout::grouping; id: the group), a box when collapsed, a frame
  /// holding its members when expanded.
  enum class Kind : uint8_t { Node, GraphInput, GraphOutput, OuterRef, Group };
  Kind kind = Kind::Node;
  int32_t id = -1;     // NodeId for Kind::Node, ValueId otherwise; in the graph of `frame`
  int32_t layer = 0;   // 0 at the top
  OpCategory category = OpCategory::Other;
  QRectF rect;         // scene coordinates
  int32_t frame = -1;  // -1: the main graph; else the index in GraphLayout::frames of its subgraph
  int32_t subgraphNodes = 0;  // Kind::Node: nodes inside its subgraphs, at every depth (0: not control flow)
  bool expanded = false;      // its subgraphs are drawn inside its box
};

struct LayoutEdge {
  int32_t from = -1, to = -1;  // item indices
  ValueId value = kNoValue;    // the tensor this edge carries (in the graph of the target's frame)
  std::vector<QPointF> points; // source port, bend points (one per crossed layer), target port
  bool outerScope = false;     // an implicit input of a control-flow node, or a read from an outer scope
};

/// One subgraph drawn inside an expanded control-flow node.
struct SubgraphFrame {
  const Graph* graph = nullptr;
  int32_t owner = -1;      // item index of the expanded control-flow node
  std::string attribute;   // "then_branch", "else_branch", "body"
  std::string scope;       // path as nestedNodes() writes it: "loop/body", "loop/body/if/then_branch"
  QRectF rect;             // scene coordinates, label strip included
  int32_t firstItem = 0, endItem = 0;  // its own items (nested frames' items follow them)
};

struct NodeGrouping;    // node_groups.h
struct LayoutSkeleton;  // a graph's items, edges, layers and crossing-reduced order (graph_layout.cpp)

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
  /// Items [0, mainItemCount) are the main graph's, in the same order whatever is expanded; the items
  /// of subgraphs follow, each after the item that holds it.
  std::vector<LayoutItem> items;
  size_t mainItemCount = 0;
  std::vector<SubgraphFrame> frames;
  std::shared_ptr<const LayoutSkeleton> skeleton;  // the main graph's, reused when expanding
  std::vector<LayoutEdge> edges;
  std::vector<int32_t> itemOfNode;     // NodeId -> item index
  std::vector<int32_t> itemOfValue;    // ValueId -> item index of its graph input/output box, or -1
  QRectF bounds;
  int32_t layerCount = 0;
  int64_t bendPointCount = 0;
  SpatialIndex index;
  /// Grouped layouts (group_layout.h) only, else null/empty: the groups, which are drawn expanded,
  /// and GroupId -> item index (-1: inside a collapsed group). itemOfNode is -1 for nodes inside a
  /// collapsed group; items are then main-graph nodes, groups and input/output boxes in an order
  /// that changes with expansion, and there are no frames.
  std::shared_ptr<const NodeGrouping> grouping;
  std::vector<char> groupExpanded;
  std::vector<int32_t> itemOfGroup;

  /// The topmost item whose box contains `scenePos`, or -1.
  int32_t itemAt(const QPointF& scenePos) const;
  /// The graph an item belongs to (the main graph or one of the frames' subgraphs).
  const Graph& graphOf(int32_t item) const;
  /// The node of a Kind::Node item, or null.
  const Node* nodeOf(int32_t item) const;
  /// "" for the main graph, else the scope path of the item's subgraph.
  std::string scopeOf(int32_t item) const;
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
  double frameHeader = 28;   // an expanded node's title strip
  double frameLabel = 20;    // a subgraph frame's label strip
  double framePadding = 12;
  /// Models with more nodes than this open grouped (group_layout.h: computeModelLayout); 0: never.
  int32_t groupAbove = 0;
  /// When a grouped model opens, groups are expanded, largest first, while at most this many boxes show.
  int32_t openVisibleBudget = 160;
};

/// Progress in percent [0, 100].
using LayoutProgress = std::function<void(int percent)>;

/// Lays out `model`'s graph. Synchronous and thread-safe (igraph calls are serialised inside);
/// `cancel` (may be null) is polled between stages. Fails with StatusCode::Cancelled when cancelled.
Result<std::shared_ptr<const GraphLayout>> computeGraphLayout(std::shared_ptr<const Model> model,
                                                              const LayoutOptions& options,
                                                              const LayoutProgress& progress = {},
                                                              const std::atomic<bool>* cancel = nullptr);

/// Subgraph skeletons by graph, kept by the view between expansions.
using SkeletonCache = std::map<const Graph*, std::shared_ptr<const LayoutSkeleton>>;

/// `base` laid out again with the subgraphs of the nodes in `expanded` (main-graph or nested nodes)
/// drawn inside them. Reuses `base`'s crossing reduction and the subgraph skeletons in `cache`
/// (adding the missing ones), so only coordinates are recomputed. With nothing expanded the result
/// equals `base`. Fails only when igraph fails on a subgraph.
Result<std::shared_ptr<const GraphLayout>> expandGraphLayout(const std::shared_ptr<const GraphLayout>& base,
                                                             const std::set<const Node*>& expanded,
                                                             const LayoutOptions& options, SkeletonCache* cache);

/// Nodes inside `node`'s subgraphs, at every depth (0 for a node without graph attributes).
int32_t subgraphNodeCount(const Node& node);
/// The graph attributes of `node`: (attribute name, graph), "branches[k]" for lists of graphs.
std::vector<std::pair<std::string, const Graph*>> subgraphsOf(const Node& node);

}  // namespace qs::ui
