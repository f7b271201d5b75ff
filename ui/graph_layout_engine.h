// The layout engine's steps, shared by the plain layout (graph_layout.cpp) and the grouped one
// (group_layout.cpp): a skeleton is a graph's items and edges with their layers and igraph's
// crossing-reduced order; placing it gives coordinates for given box sizes.
#pragma once

#include <QRectF>
#include <QSizeF>
#include <atomic>
#include <functional>
#include <vector>

#include "ui/graph_layout.h"

namespace qs::ui {

// Everything about a graph's drawing that does not depend on box sizes: items, edges, layers and
// igraph's crossing-reduced order with the dummy vertices of long edges.
struct LayoutSkeleton {
  const Graph* graph = nullptr;
  std::vector<LayoutItem> items;  // rect: the item's own size at (0, 0)
  std::vector<LayoutEdge> edges;  // without points
  std::vector<int32_t> itemOfNode, itemOfValue;
  int32_t layerCount = 0;
  std::vector<double> gridX;      // per vertex of igraph's extended graph, in grid units
  std::vector<int32_t> vlayer;    // per extended vertex
  std::vector<int32_t> dummyNext; // per extended vertex: the next vertex of a dummy chain
  std::vector<int32_t> chainStart;  // per edge: its first dummy vertex, or its target
  double unit = 120;              // grid unit in scene coordinates
};

/// Sizes the Node, GraphInput, GraphOutput and OuterRef items of `g` from the fonts (rect at 0, 0);
/// other kinds are left as they are.
void sizeItems(const Graph& g, std::vector<LayoutItem>& items, const LayoutOptions& opt);

/// Layers (longest path; `sk.items` in topological order, `sk.edges` set, items sized) and
/// igraph's crossing reduction with dummy vertices on long edges. Fails when cancelled or when
/// igraph fails.
Status arrangeSkeleton(LayoutSkeleton& sk, const LayoutOptions& opt, const std::function<void(int)>& report,
                       const std::atomic<bool>* cancel);

struct Placed {
  std::vector<LayoutItem> items;
  std::vector<LayoutEdge> edges;
  int64_t bends = 0;
};

/// Coordinates for a skeleton, with the box sizes in `sizes` (null: the skeleton's own).
Placed place(const LayoutSkeleton& sk, const LayoutOptions& opt, const std::vector<QSizeF>* sizes);

/// The rectangle holding every item and edge point.
QRectF boundsOf(const std::vector<LayoutItem>& items, const std::vector<LayoutEdge>& edges);

}  // namespace qs::ui
