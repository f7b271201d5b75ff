#include "ui/graph_layout.h"

#include "ui/graph_layout_engine.h"

#include <igraph/igraph.h>

#include <QFontMetricsF>
#include <algorithm>
#include <cmath>
#include <mutex>
#include <tuple>

namespace qs::ui {

namespace {

bool cancelled(const std::atomic<bool>* cancel) { return cancel && cancel->load(std::memory_order_relaxed); }

Status cancelledStatus() { return Status(StatusCode::Cancelled, "layout cancelled"); }

// igraph's error and warning handlers are process-wide and its default error handler aborts; the
// library may also be built without thread-local state, so every call into it is serialised.
std::mutex& igraphMutex() {
  static std::mutex m;
  return m;
}

void initIgraphOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    igraph_set_error_handler(igraph_error_handler_ignore);
    igraph_set_warning_handler(igraph_warning_handler_ignore);
  });
}

// RAII owners for the igraph objects used here.
struct IgVecInt {
  igraph_vector_int_t v;
  explicit IgVecInt(igraph_integer_t n = 0) { igraph_vector_int_init(&v, n); }
  ~IgVecInt() { igraph_vector_int_destroy(&v); }
};
struct IgMatrix {
  igraph_matrix_t m;
  IgMatrix() { igraph_matrix_init(&m, 0, 0); }
  ~IgMatrix() { igraph_matrix_destroy(&m); }
};
struct IgGraph {
  igraph_t g;
  bool live = false;
  ~IgGraph() {
    if (live) igraph_destroy(&g);
  }
};

// Minimises sum w_i (x_i - d_i)^2 subject to x_{i+1} - x_i >= s_i (pool adjacent violators on the
// shifted problem). Keeps igraph's order and moves boxes as little as possible to remove overlaps.
void separateInOrder(std::vector<double>& x, const std::vector<double>& sep, const std::vector<double>& w) {
  const size_t n = x.size();
  if (n < 2) return;
  std::vector<double> offset(n, 0.0);
  for (size_t i = 1; i < n; ++i) offset[i] = offset[i - 1] + sep[i - 1];
  struct Block {
    double sumW, sumWY;
    size_t count;
  };
  std::vector<Block> blocks;
  blocks.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    blocks.push_back({w[i], w[i] * (x[i] - offset[i]), 1});
    while (blocks.size() > 1) {
      Block& b = blocks.back();
      Block& a = blocks[blocks.size() - 2];
      if (a.sumWY / a.sumW <= b.sumWY / b.sumW) break;
      a.sumW += b.sumW;
      a.sumWY += b.sumWY;
      a.count += b.count;
      blocks.pop_back();
    }
  }
  size_t i = 0;
  for (const Block& b : blocks) {
    const double y = b.sumWY / b.sumW;
    for (size_t k = 0; k < b.count; ++k, ++i) x[i] = y + offset[i];
  }
}

}  // namespace

void SpatialIndex::build(const QRectF& bounds, const std::vector<LayoutItem>& items,
                         const std::vector<LayoutEdge>& edges) {
  m_bounds = bounds.adjusted(-1, -1, 1, 1);
  // About 64 k cells at most, and never smaller than a few node boxes.
  const double area = std::max(1.0, m_bounds.width() * m_bounds.height());
  m_cell = std::max(256.0, std::sqrt(area / 65536.0));
  m_cols = std::max(1, (int)std::ceil(m_bounds.width() / m_cell));
  m_rows = std::max(1, (int)std::ceil(m_bounds.height() / m_cell));
  const size_t cells = (size_t)m_cols * (size_t)m_rows;

  auto fill = [&](auto forEachEntry, std::vector<int32_t>& start, std::vector<int32_t>& entries) {
    start.assign(cells + 1, 0);
    forEachEntry([&](size_t cell, int32_t) { ++start[cell + 1]; });
    for (size_t c = 0; c < cells; ++c) start[c + 1] += start[c];
    entries.assign((size_t)start[cells], 0);
    std::vector<int32_t> cursor(start.begin(), start.end() - 1);
    forEachEntry([&](size_t cell, int32_t id) { entries[(size_t)cursor[cell]++] = id; });
  };
  auto forCells = [&](const QRectF& r, auto&& fn) {
    std::vector<int32_t> cr = cellRange(r);
    for (int y = cr[1]; y <= cr[3]; ++y)
      for (int x = cr[0]; x <= cr[2]; ++x) fn((size_t)y * (size_t)m_cols + (size_t)x);
  };
  fill(
      [&](auto add) {
        for (int32_t i = 0; i < (int32_t)items.size(); ++i)
          forCells(items[(size_t)i].rect, [&](size_t c) { add(c, i); });
      },
      m_itemStart, m_itemEntries);
  fill(
      [&](auto add) {
        for (int32_t e = 0; e < (int32_t)edges.size(); ++e) {
          const auto& pts = edges[(size_t)e].points;
          // Per segment, so that a long skip connection does not claim its whole bounding box.
          // An edge may meet a cell through two segments: query() removes the repeats.
          for (size_t k = 1; k < pts.size(); ++k) {
            QRectF seg = QRectF(pts[k - 1], pts[k]).normalized();
            forCells(seg, [&](size_t c) { add(c, e); });
          }
        }
      },
      m_edgeStart, m_edgeEntries);
}

std::vector<int32_t> SpatialIndex::cellRange(const QRectF& r) const {
  auto cx = [&](double x) { return std::clamp((int)std::floor((x - m_bounds.left()) / m_cell), 0, m_cols - 1); };
  auto cy = [&](double y) { return std::clamp((int)std::floor((y - m_bounds.top()) / m_cell), 0, m_rows - 1); };
  return {cx(r.left()), cy(r.top()), cx(r.right()), cy(r.bottom())};
}

void SpatialIndex::query(const QRectF& r, std::vector<int32_t>* items, std::vector<int32_t>* edges) const {
  if (m_cols == 0 || !r.intersects(m_bounds)) return;
  std::vector<int32_t> cr = cellRange(r);
  auto collect = [&](const std::vector<int32_t>& start, const std::vector<int32_t>& entries,
                     std::vector<int32_t>* out) {
    if (!out) return;
    const size_t first = out->size();
    for (int y = cr[1]; y <= cr[3]; ++y)
      for (int x = cr[0]; x <= cr[2]; ++x) {
        const size_t c = (size_t)y * (size_t)m_cols + (size_t)x;
        out->insert(out->end(), entries.begin() + start[c], entries.begin() + start[c + 1]);
      }
    std::sort(out->begin() + (ptrdiff_t)first, out->end());
    out->erase(std::unique(out->begin() + (ptrdiff_t)first, out->end()), out->end());
  };
  collect(m_itemStart, m_itemEntries, items);
  collect(m_edgeStart, m_edgeEntries, edges);
}

int32_t GraphLayout::itemAt(const QPointF& p) const {
  std::vector<int32_t> hits;
  index.query(QRectF(p, QSizeF(0.01, 0.01)), &hits, nullptr);
  for (auto it = hits.rbegin(); it != hits.rend(); ++it)
    if (items[(size_t)*it].rect.contains(p)) return *it;
  return -1;
}

const Graph& GraphLayout::graphOf(int32_t item) const {
  const int32_t f = items[(size_t)item].frame;
  return f < 0 ? model->graph : *frames[(size_t)f].graph;
}

const Node* GraphLayout::nodeOf(int32_t item) const {
  if (item < 0 || (size_t)item >= items.size() || items[(size_t)item].kind != LayoutItem::Kind::Node) return nullptr;
  return &graphOf(item).nodes[(size_t)items[(size_t)item].id];
}

std::string GraphLayout::scopeOf(int32_t item) const {
  const int32_t f = items[(size_t)item].frame;
  return f < 0 ? std::string() : frames[(size_t)f].scope;
}

std::vector<std::pair<std::string, const Graph*>> subgraphsOf(const Node& node) {
  std::vector<std::pair<std::string, const Graph*>> out;
  for (const auto& [key, a] : node.attributes) {
    if (a.g) out.emplace_back(key, a.g.get());
    for (size_t k = 0; k < a.graphs.size(); ++k)
      if (a.graphs[k]) out.emplace_back(key + "[" + std::to_string(k) + "]", a.graphs[k].get());
  }
  return out;
}

int32_t subgraphNodeCount(const Node& node) {
  int32_t count = 0;
  for (const auto& [key, sub] : subgraphsOf(node)) {
    count += (int32_t)sub->nodes.size();
    for (const Node& n : sub->nodes) count += subgraphNodeCount(n);  // depth bounded by the loader
  }
  return count;
}

void sizeItems(const Graph& g, std::vector<LayoutItem>& items, const LayoutOptions& opt) {
    QFont bold = opt.opFont;
    bold.setBold(true);
    QFontMetricsF opMetrics(bold), nameMetrics(opt.nameFont);
    const double pad = 2 * 12;
    for (LayoutItem& it : items) {
      double w = 0, h = 0;
      if (it.kind == LayoutItem::Kind::Node) {
        const Node& node = g.nodes[(size_t)it.id];
        w = std::max(opMetrics.horizontalAdvance(QString::fromStdString(node.opType)),
                     nameMetrics.horizontalAdvance(QString::fromStdString(node.name)));
        w = std::clamp(w + pad, opt.minNodeWidth, opt.maxNodeWidth);
        h = opt.nodeHeight;
      } else if (it.kind == LayoutItem::Kind::Group) {
        continue;  // sized by the grouped layout
      } else {
        w = nameMetrics.horizontalAdvance(QString::fromStdString(g.value(it.id).name));
        w = std::clamp(w + pad, 48.0, opt.maxNodeWidth);
        h = opt.ioHeight;
      }
      it.rect = QRectF(0, 0, w, h);
    }
}

Status arrangeSkeleton(LayoutSkeleton& sk, const LayoutOptions& opt, const std::function<void(int)>& report,
                      const std::atomic<bool>* cancel) {
  std::vector<LayoutItem>& items = sk.items;
  const std::vector<LayoutEdge>& edges = sk.edges;
  const size_t itemCount = items.size();
  // --- Layers: longest path from the sources (items are in topological order), then sources are
  // pulled down next to their first consumer so that a late input does not sit at the very top.
  std::vector<std::vector<int32_t>> preds(itemCount), succs(itemCount);
  for (const LayoutEdge& e : edges) {
    preds[(size_t)e.to].push_back(e.from);
    succs[(size_t)e.from].push_back(e.to);
  }
  std::vector<int32_t> layer(itemCount, 0);
  for (size_t i = 0; i < itemCount; ++i)
    for (int32_t p : preds[i]) layer[i] = std::max(layer[i], layer[(size_t)p] + 1);
  for (size_t i = itemCount; i-- > 0;) {
    if (!preds[i].empty() || succs[i].empty()) continue;
    int32_t lowest = INT32_MAX;
    for (int32_t s : succs[i]) lowest = std::min(lowest, layer[(size_t)s]);
    layer[i] = std::max(0, lowest - 1);
  }
  int32_t layerCount = 0;
  for (size_t i = 0; i < itemCount; ++i) {
    items[i].layer = layer[i];
    layerCount = std::max(layerCount, layer[i] + 1);
  }
  sk.layerCount = layerCount;

  report(20);

  // --- Sugiyama: crossing reduction and x placement by igraph, with one dummy vertex per crossed
  // layer on long edges (the bend points).
  IgMatrix res;
  IgGraph extended;
  IgVecInt extendedToOrig;
  igraph_integer_t extendedVertexCount = 0;
  std::vector<std::pair<int32_t, int32_t>> extendedEdges;  // (from, to) in the extended graph
  {
    std::lock_guard<std::mutex> lock(igraphMutex());
    initIgraphOnce();
    IgVecInt edgeList((igraph_integer_t)edges.size() * 2);
    for (size_t e = 0; e < edges.size(); ++e) {
      VECTOR(edgeList.v)[2 * e] = edges[e].from;
      VECTOR(edgeList.v)[2 * e + 1] = edges[e].to;
    }
    IgGraph graph;
    if (igraph_create(&graph.g, &edgeList.v, (igraph_integer_t)itemCount, IGRAPH_DIRECTED) != IGRAPH_SUCCESS)
      return runtimeError("layout: igraph could not build a graph of " + std::to_string(itemCount) + " vertices");
    graph.live = true;
    IgVecInt layers((igraph_integer_t)itemCount);
    for (size_t i = 0; i < itemCount; ++i) VECTOR(layers.v)[i] = layer[i];
    const int iterations = itemCount > 20000 ? std::min(opt.crossingIterations, 10)
                           : itemCount > 5000 ? std::min(opt.crossingIterations, 30)
                                              : opt.crossingIterations;
    if (igraph_layout_sugiyama(&graph.g, &res.m, &extended.g, &extendedToOrig.v, &layers.v, 1.0, 1.0, iterations,
                               nullptr) != IGRAPH_SUCCESS)
      return runtimeError("layout: igraph's Sugiyama layout failed on " + std::to_string(itemCount) + " vertices, " +
                          std::to_string(edges.size()) + " edges");
    extended.live = true;
    extendedVertexCount = igraph_vcount(&extended.g);
    const igraph_integer_t m = igraph_ecount(&extended.g);
    extendedEdges.resize((size_t)m);
    for (igraph_integer_t e = 0; e < m; ++e)
      extendedEdges[(size_t)e] = {(int32_t)IGRAPH_FROM(&extended.g, e), (int32_t)IGRAPH_TO(&extended.g, e)};
  }
  if (cancelled(cancel)) return cancelledStatus();
  report(70);

  const size_t vcount = (size_t)extendedVertexCount;
  sk.gridX.resize(vcount);
  sk.vlayer.resize(vcount);
  for (size_t v = 0; v < vcount; ++v) {
    sk.gridX[v] = MATRIX(res.m, (igraph_integer_t)v, 0);
    sk.vlayer[v] = v < itemCount ? layer[v] : (int32_t)std::lround(MATRIX(res.m, (igraph_integer_t)v, 1));
  }
  std::vector<double> widths;
  for (size_t i = 0; i < itemCount; ++i) widths.push_back(items[i].rect.width());
  if (!widths.empty()) {
    std::nth_element(widths.begin(), widths.begin() + (ptrdiff_t)widths.size() / 2, widths.end());
    sk.unit = widths[widths.size() / 2] + opt.horizontalGap;
  }
  sk.dummyNext.assign(vcount, -1);
  for (const auto& [a, b] : extendedEdges)
    if ((size_t)a >= itemCount) sk.dummyNext[(size_t)a] = b;
  // Map (from item, first hop) back to the original edge; igraph keeps one chain per original edge.
  sk.chainStart.assign(edges.size(), -1);
  for (igraph_integer_t e = 0; e < (igraph_integer_t)extendedEdges.size(); ++e) {
    const auto& [a, b] = extendedEdges[(size_t)e];
    if ((size_t)a < itemCount) {
      const igraph_integer_t orig = VECTOR(extendedToOrig.v)[e];
      if (orig >= 0 && (size_t)orig < edges.size()) sk.chainStart[(size_t)orig] = b;
    }
  }
  return Status::ok();
}

namespace {

using Report = std::function<void(int)>;

// `subgraph`: values read from enclosing scopes get boxes of their own (Kind::OuterRef).
Result<std::shared_ptr<LayoutSkeleton>> buildSkeleton(const Graph& g, bool subgraph, const LayoutOptions& opt,
                                                      const Report& report, const std::atomic<bool>* cancel) {
  auto sk = std::make_shared<LayoutSkeleton>();
  sk->graph = &g;
  // --- Items: graph inputs, nodes in topological order, graph outputs.
  std::vector<LayoutItem>& items = sk->items;
  sk->itemOfNode.assign(g.nodes.size(), -1);
  sk->itemOfValue.assign(g.values.size(), -1);
  for (ValueId v : g.inputs) {
    if (g.value(v).constant) continue;  // an overridable initializer is a weight, not an input box
    sk->itemOfValue[(size_t)v] = (int32_t)items.size();
    items.push_back({LayoutItem::Kind::GraphInput, v, 0, OpCategory::Other, {}});
  }
  if (subgraph)
    for (ValueId v : g.outerRefs) {
      if (g.value(v).constant || sk->itemOfValue[(size_t)v] >= 0) continue;
      sk->itemOfValue[(size_t)v] = (int32_t)items.size();
      items.push_back({LayoutItem::Kind::OuterRef, v, 0, OpCategory::Other, {}});
    }
  for (NodeId n : g.topoOrder) {
    sk->itemOfNode[(size_t)n] = (int32_t)items.size();
    LayoutItem it{LayoutItem::Kind::Node, n, 0, opCategory(g.nodes[(size_t)n].opType), {}};
    it.subgraphNodes = subgraphNodeCount(g.nodes[(size_t)n]);
    items.push_back(it);
  }
  std::vector<int32_t> outputItemOfValue(g.values.size(), -1);
  for (ValueId v : g.outputs) {
    if (outputItemOfValue[(size_t)v] >= 0) continue;
    outputItemOfValue[(size_t)v] = (int32_t)items.size();
    items.push_back({LayoutItem::Kind::GraphOutput, v, 0, OpCategory::Other, {}});
  }
  for (ValueId v : g.outputs)
    if (sk->itemOfValue[(size_t)v] < 0) sk->itemOfValue[(size_t)v] = outputItemOfValue[(size_t)v];

  // --- Edges: one per (tensor, consumer); weights are not drawn.
  std::vector<LayoutEdge>& edges = sk->edges;
  auto sourceItem = [&](ValueId v) -> int32_t {
    const Value& val = g.value(v);
    if (val.producer >= 0) return sk->itemOfNode[(size_t)val.producer];
    if ((val.isGraphInput || val.isOuterRef) && !val.constant) return sk->itemOfValue[(size_t)v];
    return -1;
  };
  for (NodeId n : g.topoOrder) {
    const Node& node = g.nodes[(size_t)n];
    const int32_t to = sk->itemOfNode[(size_t)n];
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const ValueId v = node.inputs[k];
      if (v == kNoValue) continue;
      bool repeated = false;  // Mul(x, x): one edge
      for (size_t j = 0; j < k; ++j) repeated |= node.inputs[j] == v;
      const int32_t from = sourceItem(v);
      if (from < 0 || repeated) continue;
      LayoutEdge e{from, to, v, {}};
      e.outerScope = k >= node.explicitInputCount() || items[(size_t)from].kind == LayoutItem::Kind::OuterRef;
      edges.push_back(std::move(e));
    }
  }
  for (ValueId v : g.outputs) {
    const int32_t from = sourceItem(v);
    const int32_t to = outputItemOfValue[(size_t)v];
    if (from >= 0 && to >= 0 && from != to) edges.push_back({from, to, v, {}});
  }
  // Distinct outputs listed twice would add the same edge twice.
  std::sort(edges.begin(), edges.end(), [](const LayoutEdge& a, const LayoutEdge& b) {
    return std::tie(a.from, a.to, a.value) < std::tie(b.from, b.to, b.value);
  });
  edges.erase(std::unique(edges.begin(), edges.end(),
                          [](const LayoutEdge& a, const LayoutEdge& b) {
                            return a.from == b.from && a.to == b.to && a.value == b.value;
                          }),
              edges.end());
  if (cancelled(cancel)) return cancelledStatus();
  report(10);

  sizeItems(g, items, opt);
  if (Status st = arrangeSkeleton(*sk, opt, report, cancel); !st.isOk()) return st;
  return sk;
}

}  // namespace

// A layer is as tall as its tallest box (an expanded node), so that nothing overlaps the next layer.
Placed place(const LayoutSkeleton& sk, const LayoutOptions& opt, const std::vector<QSizeF>* sizes) {
  Placed out;
  out.items = sk.items;
  out.edges = sk.edges;
  std::vector<LayoutItem>& items = out.items;
  std::vector<LayoutEdge>& edges = out.edges;
  const size_t itemCount = items.size();
  if (sizes)
    for (size_t i = 0; i < itemCount; ++i) items[i].rect = QRectF(QPointF(0, 0), (*sizes)[i]);
  const int32_t layerCount = sk.layerCount;

  // --- Coordinates: scale igraph's unit grid, then remove overlaps within each layer in order.
  const size_t vcount = sk.gridX.size();
  std::vector<double> cx(vcount), width(vcount, 14.0), weight(vcount, 0.25);
  const std::vector<int32_t>& vlayer = sk.vlayer;
  for (size_t v = 0; v < vcount; ++v) {
    cx[v] = sk.gridX[v] * sk.unit;
    if (v < itemCount) {
      width[v] = items[v].rect.width();
      weight[v] = 1.0;
    }
  }
  std::vector<std::vector<int32_t>> byLayer((size_t)layerCount);
  for (size_t v = 0; v < vcount; ++v)
    if (vlayer[v] >= 0 && vlayer[v] < layerCount) byLayer[(size_t)vlayer[v]].push_back((int32_t)v);
  std::vector<double> xs, seps, ws;
  for (auto& row : byLayer) {
    std::stable_sort(row.begin(), row.end(), [&](int32_t a, int32_t b) { return cx[(size_t)a] < cx[(size_t)b]; });
    xs.clear(), seps.clear(), ws.clear();
    for (size_t k = 0; k < row.size(); ++k) {
      const size_t v = (size_t)row[k];
      xs.push_back(cx[v]);
      ws.push_back(weight[v]);
      if (k + 1 < row.size()) {
        const size_t u = (size_t)row[k + 1];
        const bool bothDummies = v >= itemCount && u >= itemCount;
        seps.push_back((width[v] + width[u]) / 2 + (bothDummies ? 4.0 : opt.horizontalGap * 0.6));
      }
    }
    separateInOrder(xs, seps, ws);
    for (size_t k = 0; k < row.size(); ++k) cx[(size_t)row[k]] = xs[k];
  }

  std::vector<double> rowHeight((size_t)layerCount, opt.nodeHeight), rowTop((size_t)layerCount + 1, 0.0);
  for (size_t i = 0; i < itemCount; ++i)
    rowHeight[(size_t)items[i].layer] = std::max(rowHeight[(size_t)items[i].layer], items[i].rect.height());
  for (size_t l = 0; l < (size_t)layerCount; ++l) rowTop[l + 1] = rowTop[l] + rowHeight[l] + opt.layerGap;
  const double rowPitch = opt.nodeHeight + opt.layerGap;
  auto rowCenterY = [&](int32_t l) {
    if (l < 0 || l >= layerCount) return l * rowPitch + opt.nodeHeight / 2;  // never for igraph's layers
    return rowTop[(size_t)l] + rowHeight[(size_t)l] / 2;
  };
  for (size_t i = 0; i < itemCount; ++i) {
    QRectF& r = items[i].rect;
    r.moveCenter(QPointF(cx[i], rowCenterY(items[i].layer)));
  }

  // --- Edge polylines: follow each original edge through its dummy vertices.
  for (size_t e = 0; e < edges.size(); ++e) {
    LayoutEdge& edge = edges[e];
    const QRectF& fr = items[(size_t)edge.from].rect;
    edge.points.push_back(QPointF(fr.center().x(), fr.bottom()));
    int32_t v = sk.chainStart[e];
    while (v >= 0 && (size_t)v >= itemCount) {
      edge.points.push_back(QPointF(cx[(size_t)v], rowCenterY(vlayer[(size_t)v])));
      ++out.bends;
      v = sk.dummyNext[(size_t)v];
    }
    edge.points.push_back(QPointF(items[(size_t)edge.to].rect.center().x(), items[(size_t)edge.to].rect.top()));
  }
  // Spread the arrowheads of several inputs across the top of their target box, ordered by where
  // each edge comes from, so that they do not pile up on one point. An expanded node's top is wide:
  // the spread stays that of the widest plain box.
  std::vector<std::vector<int32_t>> incoming(itemCount);
  for (size_t e = 0; e < edges.size(); ++e) incoming[(size_t)edges[e].to].push_back((int32_t)e);
  for (size_t i = 0; i < itemCount; ++i) {
    auto& in = incoming[i];
    if (in.size() < 2) continue;
    auto approachX = [&](int32_t e) {
      const auto& p = edges[(size_t)e].points;
      return p[p.size() - 2].x();
    };
    std::stable_sort(in.begin(), in.end(), [&](int32_t a, int32_t b) { return approachX(a) < approachX(b); });
    const QRectF& r = items[i].rect;
    const double span = std::min(r.width(), opt.maxNodeWidth) * 0.6;
    for (size_t k = 0; k < in.size(); ++k) {
      const double x = r.center().x() - span / 2 + span * (double)(k + 1) / (double)(in.size() + 1);
      edges[(size_t)in[k]].points.back().setX(x);
    }
  }
  return out;
}

QRectF boundsOf(const std::vector<LayoutItem>& items, const std::vector<LayoutEdge>& edges) {
  QRectF bounds;
  for (const LayoutItem& it : items) bounds = bounds.united(it.rect);
  for (const LayoutEdge& e : edges)
    for (const QPointF& p : e.points) bounds = bounds.united(QRectF(p, QSizeF(1, 1)));
  return bounds;
}

namespace {

// A graph laid out with its expanded nodes' subgraphs inside them. The skeleton's own items come
// first (frame -1); the frames and items of subgraphs follow (frame indices local to the block).
struct Block {
  std::vector<LayoutItem> items;
  std::vector<LayoutEdge> edges;
  std::vector<SubgraphFrame> frames;
  size_t ownItems = 0;
  int64_t bends = 0;
  QRectF bounds;
};

Result<Block> layoutBlock(const LayoutSkeleton& sk, const std::string& scope, const std::set<const Node*>& expanded,
                          const LayoutOptions& opt, SkeletonCache* cache) {
  const Graph& g = *sk.graph;
  struct Child {
    std::string attribute;
    const Graph* graph;
    Block block;
  };
  std::map<size_t, std::vector<Child>> children;  // by item
  std::vector<QSizeF> sizes;
  for (const LayoutItem& it : sk.items) sizes.push_back(it.rect.size());
  const double pad = opt.framePadding;
  QFont bold = opt.opFont;
  bold.setBold(true);
  for (size_t i = 0; i < sk.items.size(); ++i) {
    const LayoutItem& it = sk.items[i];
    if (it.kind != LayoutItem::Kind::Node || it.subgraphNodes == 0) continue;
    const Node& node = g.nodes[(size_t)it.id];
    if (!expanded.count(&node)) continue;
    std::vector<Child>& mine = children[i];
    double w = 0, h = 0;
    for (const auto& [attribute, sub] : subgraphsOf(node)) {
      std::shared_ptr<const LayoutSkeleton>& subSk = (*cache)[sub];
      if (!subSk) {
        auto built = buildSkeleton(*sub, true, opt, [](int) {}, nullptr);
        if (!built) return built.status();
        subSk = std::move(built.value());
      }
      const std::string subScope = (scope.empty() ? "" : scope + "/") + node.name + "/" + attribute;
      auto block = layoutBlock(*subSk, subScope, expanded, opt, cache);
      if (!block) return block.status();
      Block b = std::move(block.value());
      if (b.bounds.isEmpty()) b.bounds = QRectF(0, 0, 80, 24);
      w += b.bounds.width() + 2 * pad + (mine.empty() ? 0 : pad);
      h = std::max(h, opt.frameLabel + b.bounds.height() + 2 * pad);
      mine.push_back({attribute, sub, std::move(b)});
    }
    const double title = QFontMetricsF(bold).horizontalAdvance(QString::fromStdString(node.opType + "  " + node.name)) + 60;
    sizes[i] = QSizeF(std::max(w + 2 * pad, title), opt.frameHeader + h + pad);
  }

  Placed placed = place(sk, opt, children.empty() ? nullptr : &sizes);
  Block out;
  out.items = std::move(placed.items);
  out.edges = std::move(placed.edges);
  out.bends = placed.bends;
  out.ownItems = out.items.size();
  for (auto& [item, list] : children) {
    out.items[item].expanded = true;
    const QRectF container = out.items[item].rect;
    double x = container.left() + pad;
    const double y = container.top() + opt.frameHeader;
    for (Child& c : list) {
      const Block& b = c.block;
      const QRectF frameRect(x, y, b.bounds.width() + 2 * pad, opt.frameLabel + b.bounds.height() + 2 * pad);
      const QPointF shift = QPointF(x + pad, y + opt.frameLabel + pad) - b.bounds.topLeft();
      const int32_t itemBase = (int32_t)out.items.size();
      const int32_t frameIndex = (int32_t)out.frames.size();
      SubgraphFrame f;
      f.graph = c.graph;
      f.owner = (int32_t)item;
      f.attribute = c.attribute;
      f.scope = (scope.empty() ? "" : scope + "/") + g.nodes[(size_t)out.items[item].id].name + "/" + c.attribute;
      f.rect = frameRect;
      f.firstItem = itemBase;
      f.endItem = itemBase + (int32_t)b.ownItems;
      out.frames.push_back(std::move(f));
      const int32_t frameBase = (int32_t)out.frames.size();
      for (LayoutItem it : b.items) {
        it.rect.translate(shift);
        it.frame = it.frame < 0 ? frameIndex : it.frame + frameBase;
        out.items.push_back(it);
      }
      for (LayoutEdge e : b.edges) {
        e.from += itemBase;
        e.to += itemBase;
        for (QPointF& p : e.points) p += shift;
        out.edges.push_back(std::move(e));
      }
      for (SubgraphFrame sf : b.frames) {
        sf.owner += itemBase;
        sf.firstItem += itemBase;
        sf.endItem += itemBase;
        sf.rect.translate(shift);
        out.frames.push_back(std::move(sf));
      }
      out.bends += b.bends;
      x += frameRect.width() + pad;
    }
  }
  out.bounds = boundsOf(out.items, out.edges);
  return out;
}

}  // namespace

Result<std::shared_ptr<const GraphLayout>> computeGraphLayout(std::shared_ptr<const Model> modelPtr,
                                                              const LayoutOptions& opt,
                                                              const LayoutProgress& progress,
                                                              const std::atomic<bool>* cancel) {
  auto report = [&](int p) {
    if (progress) progress(p);
  };
  if (!modelPtr) return invalidArgument("layout: no model");
  auto skeleton = buildSkeleton(modelPtr->graph, false, opt, report, cancel);
  if (!skeleton) return skeleton.status();
  if (cancelled(cancel)) return cancelledStatus();
  const LayoutSkeleton& sk = *skeleton.value();
  Placed placed = place(sk, opt, nullptr);
  if (cancelled(cancel)) return cancelledStatus();
  report(90);

  auto layout = std::make_shared<GraphLayout>();
  layout->model = modelPtr;
  layout->items = std::move(placed.items);
  layout->edges = std::move(placed.edges);
  layout->mainItemCount = layout->items.size();
  layout->itemOfNode = sk.itemOfNode;
  layout->itemOfValue = sk.itemOfValue;
  layout->layerCount = sk.layerCount;
  layout->bendPointCount = placed.bends;
  layout->bounds = boundsOf(layout->items, layout->edges);
  layout->index.build(layout->bounds, layout->items, layout->edges);
  layout->skeleton = std::move(skeleton.value());
  if (cancelled(cancel)) return cancelledStatus();
  report(100);
  return std::shared_ptr<const GraphLayout>(std::move(layout));
}

Result<std::shared_ptr<const GraphLayout>> expandGraphLayout(const std::shared_ptr<const GraphLayout>& base,
                                                             const std::set<const Node*>& expanded,
                                                             const LayoutOptions& opt, SkeletonCache* cache) {
  if (!base || !base->skeleton) return invalidArgument("layout: no base layout to expand");
  if (expanded.empty()) return base;
  SkeletonCache local;
  auto block = layoutBlock(*base->skeleton, "", expanded, opt, cache ? cache : &local);
  if (!block) return block.status();
  Block& b = block.value();
  auto layout = std::make_shared<GraphLayout>();
  layout->model = base->model;
  layout->skeleton = base->skeleton;
  layout->mainItemCount = b.ownItems;
  layout->items = std::move(b.items);
  layout->edges = std::move(b.edges);
  layout->frames = std::move(b.frames);
  layout->itemOfNode = base->itemOfNode;
  layout->itemOfValue = base->itemOfValue;
  layout->layerCount = base->layerCount;
  layout->bendPointCount = b.bends;
  layout->bounds = b.bounds;
  layout->index.build(layout->bounds, layout->items, layout->edges);
  return std::shared_ptr<const GraphLayout>(std::move(layout));
}

}  // namespace qs::ui
