#include "ui/group_layout.h"

#include <QFontMetricsF>
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>
#include <unordered_map>

#include "ui/graph_layout_engine.h"

namespace qs::ui {

namespace {

constexpr int32_t kTop = -1;

uint64_t pairKey(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

// Which member of a level holds a node: for each node its groups, outermost first.
class Membership {
 public:
  explicit Membership(const NodeGrouping& g) : m_grouping(g) {
    m_chains.resize(g.groupOfNode.size());
    for (size_t n = 0; n < g.groupOfNode.size(); ++n) m_chains[n] = g.ancestorsOf((NodeId)n);
  }
  const std::vector<int32_t>& chain(NodeId n) const { return m_chains[(size_t)n]; }
  /// The member of `level` holding node `n`: {true, group} or {false, n}; {false, -1} when `n` is not in `level`.
  std::pair<bool, int32_t> unitAt(int32_t level, NodeId n) const {
    const std::vector<int32_t>& c = m_chains[(size_t)n];
    size_t d = 0;
    if (level != kTop) {
      d = (size_t)m_grouping.groups[(size_t)level].depth;
      if (c.size() <= d || c[d] != level) return {false, -1};
      ++d;
    }
    return d < c.size() ? std::pair<bool, int32_t>{true, c[d]} : std::pair<bool, int32_t>{false, n};
  }

 private:
  const NodeGrouping& m_grouping;
  std::vector<std::vector<int32_t>> m_chains;
};

void collectMembers(const NodeGrouping& g, int32_t group, std::vector<NodeId>* out) {
  const NodeGroup& grp = g.groups[(size_t)group];
  out->insert(out->end(), grp.nodes.begin(), grp.nodes.end());
  for (int32_t c : grp.children) collectMembers(g, c, out);
}

QSizeF groupBoxSize(const NodeGroup& grp, const LayoutOptions& opt) {
  QFont bold = opt.opFont;
  bold.setBold(true);
  const double w = std::max(QFontMetricsF(bold).horizontalAdvance(QString::fromStdString(grp.label)),
                            QFontMetricsF(opt.nameFont).horizontalAdvance(QStringLiteral("%1 nodes · worst -00.0 dB").arg(grp.nodeCount)));
  return QSizeF(std::clamp(w + 2 * 12 + 18, opt.minNodeWidth, opt.maxNodeWidth * 1.4), opt.nodeHeight + 10);
}

Result<std::shared_ptr<LayoutSkeleton>> buildLevel(const Model& model, const NodeGrouping& grouping,
                                                   const Membership& members, int32_t level, const LayoutOptions& opt,
                                                   const LayoutProgress& report, const std::atomic<bool>* cancel) {
  const Graph& g = model.graph;
  auto sk = std::make_shared<LayoutSkeleton>();
  sk->graph = &g;
  std::vector<LayoutItem>& items = sk->items;
  std::vector<NodeId> nodes;
  if (level == kTop) {
    nodes = g.topoOrder;
  } else {
    collectMembers(grouping, level, &nodes);
    std::vector<int32_t> position(g.nodes.size(), 0);
    for (size_t k = 0; k < g.topoOrder.size(); ++k) position[(size_t)g.topoOrder[k]] = (int32_t)k;
    std::sort(nodes.begin(), nodes.end(), [&](NodeId a, NodeId b) { return position[(size_t)a] < position[(size_t)b]; });
  }
  std::unordered_map<int32_t, int32_t> itemOfNode, itemOfGroup, itemOfValue;
  if (level == kTop)
    for (ValueId v : g.inputs) {
      if (g.value(v).constant) continue;
      itemOfValue[v] = (int32_t)items.size();
      items.push_back({LayoutItem::Kind::GraphInput, v, 0, OpCategory::Other, {}});
    }
  for (NodeId n : nodes) {
    const auto [isGroup, unit] = members.unitAt(level, n);
    if (!isGroup) {
      itemOfNode[n] = (int32_t)items.size();
      items.push_back({LayoutItem::Kind::Node, n, 0, opCategory(g.nodes[(size_t)n].opType), {}});
    } else if (itemOfGroup.try_emplace(unit, (int32_t)items.size()).second) {
      LayoutItem it{LayoutItem::Kind::Group, unit, 0, OpCategory::Other, {}};
      it.rect = QRectF(QPointF(0, 0), groupBoxSize(grouping.groups[(size_t)unit], opt));
      items.push_back(it);
    }
  }
  auto itemOf = [&](NodeId n) -> int32_t {
    const auto [isGroup, unit] = members.unitAt(level, n);
    if (unit < 0) return -1;
    const auto& map = isGroup ? itemOfGroup : itemOfNode;
    auto it = map.find(unit);
    return it == map.end() ? -1 : it->second;
  };
  auto sourceItem = [&](ValueId v) -> int32_t {
    const Value& val = g.value(v);
    if (val.producer >= 0) return itemOf(val.producer);
    auto it = itemOfValue.find(v);
    return it == itemOfValue.end() ? -1 : it->second;
  };
  std::vector<LayoutEdge>& edges = sk->edges;
  for (NodeId n : nodes) {
    const Node& node = g.nodes[(size_t)n];
    const int32_t to = itemOf(n);
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const ValueId v = node.inputs[k];
      if (v == kNoValue) continue;
      const int32_t from = sourceItem(v);
      if (from < 0 || from == to) continue;
      LayoutEdge e{from, to, v, {}};
      e.outerScope = k >= node.explicitInputCount();
      edges.push_back(std::move(e));
    }
  }
  if (level == kTop) {
    std::vector<char> done(g.values.size(), 0);
    for (ValueId v : g.outputs) {
      if (done[(size_t)v]++) continue;
      const int32_t to = (int32_t)items.size();
      items.push_back({LayoutItem::Kind::GraphOutput, v, 0, OpCategory::Other, {}});
      const int32_t from = sourceItem(v);
      if (from >= 0) edges.push_back({from, to, v, {}});
    }
  }
  // One edge per pair of boxes: a group's many tensors to the next group are one line.
  std::stable_sort(edges.begin(), edges.end(),
                   [](const LayoutEdge& a, const LayoutEdge& b) { return std::tie(a.from, a.to) < std::tie(b.from, b.to); });
  edges.erase(std::unique(edges.begin(), edges.end(),
                          [](const LayoutEdge& a, const LayoutEdge& b) { return a.from == b.from && a.to == b.to; }),
              edges.end());
  // The engine layers items in their order, which must be topological. A group's box sits at its first
  // node, which may come before a box it reads from (a joined Identity early in the order): order the
  // boxes again (Kahn's algorithm, earliest first; where grouping made a cycle, the earliest waiting
  // box goes next and its edges from later boxes point up).
  {
    const size_t count = items.size();
    std::vector<int32_t> indegree(count, 0);
    std::vector<std::vector<int32_t>> succ(count);
    for (const LayoutEdge& e : edges) {
      ++indegree[(size_t)e.to];
      succ[(size_t)e.from].push_back(e.to);
    }
    std::vector<int32_t> order, newIndex(count, -1);
    std::set<int32_t> ready;
    for (size_t i = 0; i < count; ++i)
      if (!indegree[i]) ready.insert((int32_t)i);
    size_t next = 0;  // the earliest box not placed, for breaking cycles
    while (order.size() < count) {
      if (ready.empty()) {
        while (newIndex[next] >= 0) ++next;
        ready.insert((int32_t)next);
        indegree[next] = 0;
      }
      const int32_t i = *ready.begin();
      ready.erase(ready.begin());
      if (newIndex[(size_t)i] >= 0) continue;
      newIndex[(size_t)i] = (int32_t)order.size();
      order.push_back(i);
      for (int32_t s2 : succ[(size_t)i])
        if (newIndex[(size_t)s2] < 0 && --indegree[(size_t)s2] == 0) ready.insert(s2);
    }
    std::vector<LayoutItem> sorted;
    sorted.reserve(count);
    for (int32_t i : order) sorted.push_back(items[(size_t)i]);
    items = std::move(sorted);
    for (LayoutEdge& e : edges) e.from = newIndex[(size_t)e.from], e.to = newIndex[(size_t)e.to];
  }
  sizeItems(g, items, opt);
  if (Status st = arrangeSkeleton(*sk, opt, report ? report : LayoutProgress([](int) {}), cancel); !st.isOk()) return st;
  return sk;
}

// A long top level (a chain of many blocks) is folded into side-by-side columns of layers, so that
// fitting it to a window shows boxes rather than a thin line: about as many columns as make the
// whole as wide as a 16:10 window is for its height. Every item and edge point moves with its layer.
void foldColumns(Placed& placed, int32_t layerCount, const LayoutOptions& opt) {
  if (layerCount < 8 || placed.items.empty()) return;
  const QRectF b = boundsOf(placed.items, placed.edges);
  const double gap = 3 * opt.horizontalGap;
  const int columns = (int)std::lround(std::sqrt(1.6 * b.height() / (b.width() + gap)));
  if (columns < 2) return;
  const int32_t rows = (layerCount + columns - 1) / columns;
  std::vector<double> rowTop((size_t)layerCount, std::numeric_limits<double>::infinity());
  for (const LayoutItem& it : placed.items)
    rowTop[(size_t)it.layer] = std::min(rowTop[(size_t)it.layer], it.rect.top());
  for (size_t l = 1; l < rowTop.size(); ++l)  // a layer of dummies only: just below the previous
    if (!std::isfinite(rowTop[l])) rowTop[l] = rowTop[l - 1] + opt.nodeHeight;
  auto shiftOfLayer = [&](int32_t l) {
    const int32_t column = std::clamp(l, 0, layerCount - 1) / rows;
    return QPointF(column * (b.width() + gap), rowTop[0] - rowTop[(size_t)(column * rows)]);
  };
  auto layerAt = [&](double y) {
    return (int32_t)(std::upper_bound(rowTop.begin(), rowTop.end(), y) - rowTop.begin()) - 1;
  };
  for (LayoutItem& it : placed.items) it.rect.translate(shiftOfLayer(it.layer));
  for (LayoutEdge& e : placed.edges) {
    const int32_t first = placed.items[(size_t)e.from].layer, last = placed.items[(size_t)e.to].layer;
    for (size_t k = 0; k < e.points.size(); ++k) {
      const int32_t l = k == 0 ? first : k + 1 == e.points.size() ? last : std::clamp(layerAt(e.points[k].y()), first, last);
      e.points[k] += shiftOfLayer(l);
    }
  }
}

struct LevelBlock {
  std::vector<LayoutItem> items;  // the level's own first, then those of expanded groups
  std::vector<LayoutEdge> edges;  // between the level's own items and, after them, inside groups
  int64_t bends = 0;
  QRectF bounds;
};

class GroupedLayouter {
 public:
  GroupedLayouter(const Model& model, const NodeGrouping& grouping, const std::vector<char>& expanded,
                  const LayoutOptions& opt, GroupSkeletonCache* cache, const std::atomic<bool>* cancel)
      : m_model(model), m_grouping(grouping), m_members(grouping), m_expanded(expanded), m_opt(opt), m_cache(cache),
        m_cancel(cancel) {}

  Result<LevelBlock> layout(int32_t level, const LayoutProgress& report) {
    std::shared_ptr<const LayoutSkeleton>& sk = (*m_cache)[level];
    if (!sk) {
      auto built = buildLevel(m_model, m_grouping, m_members, level, m_opt, report, m_cancel);
      if (!built) return built.status();
      sk = std::move(built.value());
    }
    const double pad = m_opt.framePadding;
    std::map<size_t, LevelBlock> children;
    std::vector<QSizeF> sizes;
    for (const LayoutItem& it : sk->items) sizes.push_back(it.rect.size());
    for (size_t i = 0; i < sk->items.size(); ++i) {
      const LayoutItem& it = sk->items[i];
      if (it.kind != LayoutItem::Kind::Group || !isExpanded(it.id)) continue;
      auto inner = layout(it.id, {});
      if (!inner) return inner.status();
      LevelBlock b = std::move(inner.value());
      sizes[i] = QSizeF(std::max(b.bounds.width() + 2 * pad, it.rect.width()),
                        m_opt.frameHeader + b.bounds.height() + 2 * pad);
      children.emplace(i, std::move(b));
    }
    Placed placed = place(*sk, m_opt, children.empty() ? nullptr : &sizes);
    if (level == kTop) foldColumns(placed, sk->layerCount, m_opt);
    LevelBlock out;
    out.items = std::move(placed.items);
    out.edges = std::move(placed.edges);
    out.bends = placed.bends;
    for (auto& [i, b] : children) {
      out.items[i].expanded = true;
      const QRectF frame = out.items[i].rect;
      const QPointF shift = QPointF(frame.center().x() - b.bounds.width() / 2, frame.top() + m_opt.frameHeader + pad) -
                            b.bounds.topLeft();
      const int32_t base = (int32_t)out.items.size();
      for (LayoutItem it : b.items) {
        it.rect.translate(shift);
        out.items.push_back(it);
      }
      for (LayoutEdge e : b.edges) {
        e.from += base;
        e.to += base;
        for (QPointF& p : e.points) p += shift;
        out.edges.push_back(std::move(e));
      }
      out.bends += b.bends;
    }
    out.bounds = boundsOf(out.items, out.edges);
    return out;
  }

  /// The drawn edges: one per pair of visible boxes a tensor runs between, along the edge of the
  /// level where their groups part, extended into expanded frames.
  std::vector<LayoutEdge> drawnEdges(const GraphLayout& L, const std::vector<LayoutEdge>& levelEdges) const {
    const Graph& g = m_model.graph;
    std::unordered_map<uint64_t, int32_t> levelEdge;
    levelEdge.reserve(levelEdges.size() * 2);
    for (size_t e = 0; e < levelEdges.size(); ++e)
      levelEdge.emplace(pairKey(levelEdges[e].from, levelEdges[e].to), (int32_t)e);
    auto visible = [&](NodeId n) {
      for (int32_t grp : m_members.chain(n))
        if (!L.groupExpanded[(size_t)grp]) return L.itemOfGroup[(size_t)grp];
      return L.itemOfNode[(size_t)n];
    };
    auto unitItem = [&](int32_t level, NodeId n) {
      const auto [isGroup, unit] = m_members.unitAt(level, n);
      return isGroup ? L.itemOfGroup[(size_t)unit] : L.itemOfNode[(size_t)unit];
    };
    std::vector<LayoutEdge> out;
    std::unordered_map<uint64_t, char> drawn;
    auto add = [&](int32_t from, int32_t to, int32_t fromUnit, int32_t toUnit, ValueId v, bool outer) {
      if (from < 0 || to < 0 || from == to || !drawn.emplace(pairKey(from, to), 1).second) return;
      auto it = levelEdge.find(pairKey(fromUnit, toUnit));
      if (it == levelEdge.end()) return;
      LayoutEdge e = levelEdges[(size_t)it->second];
      e.from = from, e.to = to, e.value = v, e.outerScope = outer;
      if (from != fromUnit) e.points.insert(e.points.begin(), QPointF(L.items[(size_t)from].rect.center().x(), L.items[(size_t)from].rect.bottom()));
      if (to != toUnit) e.points.push_back(QPointF(L.items[(size_t)to].rect.center().x(), L.items[(size_t)to].rect.top()));
      out.push_back(std::move(e));
    };
    auto levelOfPair = [&](NodeId a, NodeId b) {
      // The deepest group holding both (expanded, as both are visible apart), or the top level.
      const auto& ca = m_members.chain(a);
      const auto& cb = m_members.chain(b);
      int32_t level = kTop;
      for (size_t d = 0; d < ca.size() && d < cb.size() && ca[d] == cb[d]; ++d) level = ca[d];
      return level;
    };
    for (NodeId n : g.topoOrder) {
      const Node& node = g.nodes[(size_t)n];
      const int32_t to = visible(n);
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const ValueId v = node.inputs[k];
        if (v == kNoValue) continue;
        const Value& val = g.value(v);
        const bool outer = k >= node.explicitInputCount();
        if (val.producer >= 0) {
          const int32_t level = levelOfPair(val.producer, n);
          add(visible(val.producer), to, unitItem(level, val.producer), unitItem(level, n), v, outer);
        } else if ((size_t)v < L.itemOfValue.size() && L.itemOfValue[(size_t)v] >= 0 && !val.constant &&
                   val.isGraphInput) {
          add(L.itemOfValue[(size_t)v], to, L.itemOfValue[(size_t)v], unitItem(kTop, n), v, outer);
        }
      }
    }
    for (ValueId v : g.outputs) {
      const Value& val = g.value(v);
      const int32_t to = L.itemOfValue[(size_t)v];
      if (val.producer >= 0 && to >= 0 && L.items[(size_t)to].kind == LayoutItem::Kind::GraphOutput)
        add(visible(val.producer), to, unitItem(kTop, val.producer), to, v, false);
    }
    return out;
  }

 private:
  bool isExpanded(int32_t group) const { return (size_t)group < m_expanded.size() && m_expanded[(size_t)group]; }

  const Model& m_model;
  const NodeGrouping& m_grouping;
  Membership m_members;
  const std::vector<char>& m_expanded;
  const LayoutOptions& m_opt;
  GroupSkeletonCache* m_cache;
  const std::atomic<bool>* m_cancel;
};

}  // namespace

Result<std::shared_ptr<const GraphLayout>> computeGroupedLayout(std::shared_ptr<const Model> model,
                                                                std::shared_ptr<const NodeGrouping> grouping,
                                                                const std::vector<char>& expandedIn,
                                                                const LayoutOptions& opt, GroupSkeletonCache* cache,
                                                                const LayoutProgress& progress,
                                                                const std::atomic<bool>* cancel) {
  if (!model) return invalidArgument("layout: no model");
  if (!grouping || grouping->groupOfNode.size() != model->graph.nodes.size())
    return invalidArgument("layout: the grouping does not belong to the model");
  // A group shows expanded only when every group above it is expanded too.
  std::vector<char> expanded(grouping->groups.size(), 0);
  for (size_t k = 0; k < grouping->groups.size(); ++k) {  // parents come before their children
    const int32_t parent = grouping->groups[k].parent;
    expanded[k] = k < expandedIn.size() && expandedIn[k] && (parent < 0 || expanded[(size_t)parent]);
  }
  GroupSkeletonCache local;
  GroupedLayouter layouter(*model, *grouping, expanded, opt, cache ? cache : &local, cancel);
  auto block = layouter.layout(kTop, progress);
  if (!block) return block.status();
  LevelBlock& b = block.value();
  auto layout = std::make_shared<GraphLayout>();
  layout->model = model;
  layout->grouping = grouping;
  layout->groupExpanded = expanded;
  layout->items = std::move(b.items);
  layout->mainItemCount = layout->items.size();
  layout->itemOfNode.assign(model->graph.nodes.size(), -1);
  layout->itemOfValue.assign(model->graph.values.size(), -1);
  layout->itemOfGroup.assign(grouping->groups.size(), -1);
  for (size_t i = 0; i < layout->items.size(); ++i) {
    const LayoutItem& it = layout->items[i];
    if (it.kind == LayoutItem::Kind::Node) layout->itemOfNode[(size_t)it.id] = (int32_t)i;
    else if (it.kind == LayoutItem::Kind::Group) layout->itemOfGroup[(size_t)it.id] = (int32_t)i;
    else if (layout->itemOfValue[(size_t)it.id] < 0 || it.kind == LayoutItem::Kind::GraphInput)
      layout->itemOfValue[(size_t)it.id] = (int32_t)i;
  }
  layout->edges = layouter.drawnEdges(*layout, b.edges);
  layout->layerCount = (*(cache ? cache : &local))[kTop]->layerCount;
  layout->bendPointCount = b.bends;
  layout->bounds = boundsOf(layout->items, layout->edges);
  layout->index.build(layout->bounds, layout->items, layout->edges);
  return std::shared_ptr<const GraphLayout>(std::move(layout));
}

std::vector<char> initialExpansion(const NodeGrouping& grouping, int32_t topLevelNodes, int32_t budget) {
  std::vector<char> expanded(grouping.groups.size(), 0);
  int64_t visible = topLevelNodes + (int64_t)grouping.roots.size();
  int64_t totalNodes = topLevelNodes;
  for (int32_t r : grouping.roots) totalNodes += grouping.groups[(size_t)r].nodeCount;
  std::vector<int32_t> candidates = grouping.roots;
  while (true) {
    int32_t best = -1;
    for (int32_t c : candidates) {
      const NodeGroup& grp = grouping.groups[(size_t)c];
      const int64_t after = visible - 1 + (int64_t)grp.nodes.size() + (int64_t)grp.children.size();
      // Only a group of groups holding most of its level (a model's "encoder", "features"): blocks
      // stay closed, so that the model opens as its sequence of blocks.
      const int64_t levelNodes = grp.parent < 0 ? totalNodes : grouping.groups[(size_t)grp.parent].nodeCount;
      if (!expanded[(size_t)c] && !grp.children.empty() && 2 * (int64_t)grp.nodeCount > levelNodes && after <= budget &&
          (best < 0 || grp.nodeCount > grouping.groups[(size_t)best].nodeCount))
        best = c;
    }
    if (best < 0) break;
    const NodeGroup& grp = grouping.groups[(size_t)best];
    expanded[(size_t)best] = 1;
    visible += (int64_t)grp.nodes.size() + (int64_t)grp.children.size() - 1;
    candidates.insert(candidates.end(), grp.children.begin(), grp.children.end());
  }
  return expanded;
}

Result<std::shared_ptr<const GraphLayout>> computeModelLayout(std::shared_ptr<const Model> model,
                                                              const LayoutOptions& options,
                                                              const LayoutProgress& progress,
                                                              const std::atomic<bool>* cancel) {
  if (model && options.groupAbove > 0 && (int64_t)model->graph.nodes.size() > options.groupAbove) {
    auto grouping = std::make_shared<NodeGrouping>(groupNodes(model->graph));
    if (!grouping->empty()) {
      const int32_t topLevel = (int32_t)std::count(grouping->groupOfNode.begin(), grouping->groupOfNode.end(), -1);
      const std::vector<char> expanded = initialExpansion(*grouping, topLevel, options.openVisibleBudget);
      return computeGroupedLayout(model, std::move(grouping), expanded, options, nullptr, progress, cancel);
    }
  }
  return computeGraphLayout(std::move(model), options, progress, cancel);
}

}  // namespace qs::ui
