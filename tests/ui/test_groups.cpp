// Offscreen tests of grouped graphs (issue 16, item 4): grouping by name scopes and by repeated
// blocks, collapsed and expanded groups keep every dependency drawn as an edge between visible
// boxes, expanding lays out only that group, "go to worst node" opens the worst node's groups and
// selects it, and graphs below the threshold or without groups lay out exactly as before.
#include <QFile>
#include <QSignalSpy>
#include <QTest>
#include <cmath>
#include <set>

#include "core/analysis/results.h"
#include "core/onnx/loader.h"
#include "tests/ui/block_model.h"
#include "tests/ui/chain_model.h"
#include "ui/graph_minimap.h"
#include "ui/graph_view.h"
#include "ui/group_layout.h"
#include "ui/node_groups.h"

using namespace qs;
using namespace qs::ui;

namespace {

// A chain of nodes named `names` (op type: the last name component up to '_').
std::shared_ptr<Model> namedChain(const std::vector<std::string>& names) {
  auto model = std::make_shared<Model>();
  model->opsets[""] = 17;
  Graph& g = model->graph;
  ValueId prev = g.valueId("x");
  g.value(prev).isGraphInput = true;
  g.inputs.push_back(prev);
  for (size_t k = 0; k < names.size(); ++k) {
    Node n;
    n.name = names[k];
    const std::string last = names[k].substr(names[k].rfind('/') + 1);
    n.opType = last.substr(0, last.find('_'));
    n.inputs.push_back(prev);
    prev = g.valueId("t" + std::to_string(k));
    n.outputs.push_back(prev);
    g.nodes.push_back(std::move(n));
  }
  g.value(prev).isGraphOutput = true;
  g.outputs.push_back(prev);
  if (!g.finalize("named").isOk()) return nullptr;
  return model;
}

int32_t groupByPath(const NodeGrouping& g, const std::string& path) {
  for (size_t k = 0; k < g.groups.size(); ++k)
    if (g.groups[k].path == path) return (int32_t)k;
  return -1;
}

// The box a node shows in: its own, or the outermost collapsed group holding it.
int32_t visibleItem(const GraphLayout& L, NodeId n) {
  for (int32_t g : L.grouping->ancestorsOf(n))
    if (!L.groupExpanded[(size_t)g]) return L.itemOfGroup[(size_t)g];
  return L.itemOfNode[(size_t)n];
}

// Every edge joins two items, leaving the bottom of its source and arriving at the top of its
// target; every tensor between two different visible boxes is drawn; expanded frames hold their items.
void checkConnected(const GraphLayout& L) {
  std::set<std::pair<int32_t, int32_t>> drawn;
  for (const LayoutEdge& e : L.edges) {
    QVERIFY(e.from >= 0 && (size_t)e.from < L.items.size() && e.to >= 0 && (size_t)e.to < L.items.size());
    QVERIFY(!L.items[(size_t)e.from].expanded && !L.items[(size_t)e.to].expanded);
    const QRectF& f = L.items[(size_t)e.from].rect;
    const QRectF& t = L.items[(size_t)e.to].rect;
    QVERIFY(e.points.size() >= 2);
    QCOMPARE(e.points.front().y(), f.bottom());
    QVERIFY(e.points.front().x() >= f.left() - 0.01 && e.points.front().x() <= f.right() + 0.01);
    QCOMPARE(e.points.back().y(), t.top());
    QVERIFY(e.points.back().x() >= t.left() - 0.01 && e.points.back().x() <= t.right() + 0.01);
    drawn.insert({e.from, e.to});
  }
  const Graph& g = L.model->graph;
  size_t needed = 0;
  for (NodeId c = 0; c < (NodeId)g.nodes.size(); ++c) {
    const int32_t to = visibleItem(L, c);
    QVERIFY(to >= 0);
    for (ValueId v : g.nodes[(size_t)c].inputs) {
      const Value& val = g.value(v);
      const int32_t from = val.producer >= 0 ? visibleItem(L, val.producer) : L.itemOfValue[(size_t)v];
      if (from < 0 || from == to) continue;
      ++needed;
      QVERIFY2(drawn.count({from, to}), qPrintable(QStringLiteral("no edge for %1").arg(QString::fromStdString(val.name))));
    }
  }
  QVERIFY(needed > 0);
  for (size_t k = 0; k < L.grouping->groups.size(); ++k) {
    if (L.itemOfGroup[k] < 0 || !L.groupExpanded[k]) continue;
    const QRectF frame = L.items[(size_t)L.itemOfGroup[k]].rect;
    for (NodeId n : L.grouping->groups[k].nodes)
      if (L.itemOfNode[(size_t)n] >= 0) QVERIFY(frame.contains(L.items[(size_t)L.itemOfNode[(size_t)n]].rect));
  }
}

std::shared_ptr<AnalysisResult> fakeResult(const Graph& g, NodeId worst) {
  auto r = std::make_shared<AnalysisResult>();
  r->nodes.resize(g.nodes.size());
  r->plan.nodes.resize(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    r->plan.nodes[n].quantizable = r->plan.nodes[n].quantized = n % 3 != 1;
    r->nodes[n].hasGraphwise = true;
    r->nodes[n].graphwise.snrDb = 20 + (double)(n % 17);
  }
  r->nodes[(size_t)worst].graphwise.snrDb = 3.5;
  r->plan.nodes[(size_t)worst].quantized = true;
  r->nodes[(size_t)worst + 1].graphwise.snrDb = 1.0;  // lower, but not quantized: not the worst
  r->plan.nodes[(size_t)worst + 1].quantized = false;
  return r;
}

}  // namespace

class GroupsTest : public QObject {
  Q_OBJECT

 private slots:
  void scopedNamesFormAHierarchy() {
    QCOMPARE(scopeOf("/encoder/layer.3/attention/MatMul"), (std::vector<std::string>{"encoder", "layer.3", "attention"}));
    QVERIFY(scopeOf("p2o.Add.68").empty());
    QVERIFY(scopeOf("MatMul_3").empty());
    auto model = namedChain({"/conv1/Conv", "/relu/Relu",  // single-node scopes: top level
                             "/layer1/layer1.0/conv1/Conv", "/layer1/layer1.0/relu/Relu", "/layer1/layer1.0/conv2/Conv",
                             "/layer1/layer1.1/conv1/Conv", "Identity_9", "/layer1/layer1.1/relu/Relu", "/layer1/layer1.1/Add",
                             "/encoder/layer.0/attention/self/query/MatMul", "/encoder/layer.0/attention/self/query/Add",
                             "/encoder/layer.0/attention/self/key/MatMul", "/encoder/layer.0/attention/self/key/Add",
                             "/fc/Gemm"});
    QVERIFY(model);
    const NodeGrouping g = groupNodes(model->graph);
    QCOMPARE(g.source, NodeGrouping::Source::Scopes);
    const int32_t layer1 = groupByPath(g, "layer1"), b0 = groupByPath(g, "layer1/layer1.0"), b1 = groupByPath(g, "layer1/layer1.1");
    QVERIFY(layer1 >= 0 && b0 >= 0 && b1 >= 0);
    QCOMPARE(g.groups[(size_t)layer1].children, (std::vector<int32_t>{b0, b1}));
    QCOMPARE(g.groups[(size_t)layer1].nodeCount, 7);  // Identity_9, read only in layer1.1, joined it
    QCOMPARE(g.groupOfNode[6], b1);
    QCOMPARE(g.groups[(size_t)b0].nodes, (std::vector<NodeId>{2, 3, 4}));  // conv1/relu/conv2 dissolved into it
    QCOMPARE(g.groups[(size_t)b0].label, std::string("layer1.0"));
    QCOMPARE(g.groups[(size_t)b0].depth, 1);
    // encoder > layer.0 > attention > self hold nothing but one group each: merged into one label.
    const int32_t self = groupByPath(g, "encoder/layer.0/attention/self");
    QVERIFY(self >= 0);
    QCOMPARE(g.groups[(size_t)self].label, std::string("encoder/layer.0/attention/self"));
    QCOMPARE(g.groups[(size_t)self].parent, -1);
    QCOMPARE(g.groups[(size_t)self].children.size(), size_t(2));  // query, key: two nodes each
    QCOMPARE(g.groupOfNode[0], -1);
    QCOMPARE(g.groupOfNode[13], -1);
    QCOMPARE(g.ancestorsOf(9), (std::vector<int32_t>{self, groupByPath(g, "encoder/layer.0/attention/self/query")}));
    for (size_t k = 0; k < g.groups.size(); ++k)  // parents first
      QVERIFY(g.groups[k].parent < (int32_t)k);
  }

  void repeatedBlocksWithoutScopes() {
    auto model = test::blockModel(20, 30, false);
    QVERIFY(model);
    const NodeGrouping g = groupNodes(model->graph);
    QCOMPARE(g.source, NodeGrouping::Source::RepeatedBlocks);
    QCOMPARE(g.blockLength, 30);
    QCOMPARE(g.groups.size(), size_t(20));
    for (size_t b = 0; b < 20; ++b) {
      QCOMPARE(g.groups[b].nodeCount, 30);
      QCOMPARE(g.groups[b].nodes.front(), (NodeId)(b * 30));
    }
    // The scoped variant groups by its scopes instead, one group per block.
    const NodeGrouping scoped = groupNodes(test::blockModel(20, 30, true)->graph);
    QCOMPARE(scoped.source, NodeGrouping::Source::Scopes);
    QCOMPARE(scoped.groups.size(), size_t(20));
    // A chain without a repeating block of two op types or more has no groups.
    auto relus = namedChain(std::vector<std::string>(60, "Relu"));
    QVERIFY(groupNodes(relus->graph).empty());
  }

  void collapseAndExpandKeepEdgesConnected() {
    auto model = test::blockModel(40, 25, false);
    auto grouping = std::make_shared<NodeGrouping>(groupNodes(model->graph));
    GroupSkeletonCache cache;
    auto collapsed = computeGroupedLayout(model, grouping, {}, GraphView().layoutOptions(), &cache);
    QVERIFY2(collapsed, collapsed ? "" : collapsed.status().message().c_str());
    const auto base = collapsed.value();
    QCOMPARE(base->items.size(), size_t(40 + 2));  // 40 groups, the input and the output
    QCOMPARE(cache.size(), size_t(1));             // the top level only
    checkConnected(*base);
    if (QTest::currentTestFailed()) return;

    GraphView view;
    view.resize(900, 700);
    view.setGraphLayout(base);
    QSignalSpy relaid(&view, &GraphView::graphLayoutChanged);
    const int item = base->itemOfGroup[7];
    QVERIFY(view.isGroup(item) && view.isExpandable(item) && !view.isExpanded(item));
    view.setExpanded(item, true);
    QCOMPARE(relaid.count(), 1);
    const auto open = view.graphLayout();
    QCOMPARE(open->items.size(), base->items.size() + 25);
    QVERIFY(open->groupExpanded[7]);
    for (NodeId n : grouping->groups[7].nodes) QVERIFY(open->itemOfNode[(size_t)n] >= 0);
    checkConnected(*open);
    if (QTest::currentTestFailed()) return;
    // Only the expanded group was laid out anew: one more skeleton, the top level's reused.
    GroupSkeletonCache reuse = cache;
    std::vector<char> flags(grouping->groups.size(), 0);
    flags[7] = 1;
    auto again = computeGroupedLayout(model, grouping, flags, GraphView().layoutOptions(), &reuse);
    QVERIFY(again);
    QCOMPARE(reuse.size(), size_t(2));
    QCOMPARE(reuse[-1].get(), cache[-1].get());
    QCOMPARE(again.value()->items.size(), open->items.size());

    view.setExpanded(open->itemOfGroup[7], false);
    const auto closed = view.graphLayout();
    QCOMPARE(closed->items.size(), base->items.size());
    for (size_t i = 0; i < base->items.size(); ++i) QCOMPARE(closed->items[i].rect, base->items[i].rect);
    QCOMPARE(closed->edges.size(), base->edges.size());
  }

  void goToWorstNodeOpensItsGroup() {
    auto model = test::blockModel(30, 20, true);
    LayoutOptions options = GraphView().layoutOptions();
    options.groupAbove = 100;
    options.openVisibleBudget = 40;  // 30 groups fit, the blocks' 20 nodes each do not
    auto r = computeModelLayout(model, options);
    QVERIFY(r);
    QVERIFY(r.value()->grouping);
    const NodeId worst = 17 * 20 + 6;
    QCOMPARE(r.value()->itemOfNode[(size_t)worst], -1);  // inside a collapsed group
    GraphView view;
    view.resize(900, 700);
    view.setGraphLayout(r.value());
    QCOMPARE(view.goToWorstNode(), -1);  // no analysis yet
    view.setAnalysis(fakeResult(model->graph, worst));
    // The collapsed group of the worst node shows its worst SNR.
    const int32_t group = r.value()->grouping->groupOfNode[(size_t)worst];
    QCOMPARE(view.groupSnr(group).first, 3.5);
    QVERIFY(view.groupSnr(group).second > 3.5);
    QSignalSpy selected(&view, &GraphView::itemSelected);
    const int item = view.goToWorstNode();
    QVERIFY(item >= 0);
    const GraphLayout& L = *view.graphLayout();
    QCOMPARE(L.items[(size_t)item].kind, LayoutItem::Kind::Node);
    QCOMPARE(L.items[(size_t)item].id, worst);
    QCOMPARE(view.selectedItem(), item);
    QCOMPARE(selected.count(), 1);
    QVERIFY(L.groupExpanded[(size_t)group]);
    // Centred: the node's box is in the middle of the view.
    const QPointF c = view.mapFromScene(L.items[(size_t)item].rect.center());
    QVERIFY(std::abs(c.x() - 450) < 2 && std::abs(c.y() - 350) < 2);
  }

  void minimapCentresTheView() {
    auto model = test::blockModel(60, 20, false);
    LayoutOptions options = GraphView().layoutOptions();
    options.groupAbove = 100;
    auto r = computeModelLayout(model, options);
    QVERIFY(r);
    GraphView view;
    view.resize(800, 600);
    view.setGraphLayout(r.value());
    view.setZoom(1.0);
    QImage img(view.size(), QImage::Format_ARGB32_Premultiplied);
    view.render(&img);  // places the minimap: the graph does not fit at zoom 1
    GraphMinimap* map = view.minimap();
    QVERIFY(!map->isHidden());
    const QPointF target = r.value()->bounds.center() + QPointF(0, r.value()->bounds.height() / 4);
    // Click the point of the minimap that shows `target` (minimap pixels are `unit` scene units).
    const QPointF origin = map->sceneAt(QPointF(0, 0));
    const double unit = map->sceneAt(QPointF(1, 0)).x() - origin.x();
    const QPointF pos = (target - origin) / unit;
    QTest::mouseClick(map, Qt::LeftButton, {}, pos.toPoint());
    const QPointF centre = view.mapToScene(QPointF(400, 300));
    QVERIFY(std::abs(centre.x() - target.x()) <= unit && std::abs(centre.y() - target.y()) <= unit);
    // The viewport rectangle is where the view looks now.
    QVERIFY(map->viewportRect().contains(pos));
    view.fitToWindow();
    view.render(&img);
    QVERIFY(map->isHidden());
  }

  void plainBelowThresholdOrWithoutGroups() {
    LayoutOptions options = GraphView().layoutOptions();
    options.groupAbove = 400;
    auto compareToPlain = [&](const std::shared_ptr<const Model>& model) {
      auto plain = computeGraphLayout(model, GraphView().layoutOptions());
      auto chosen = computeModelLayout(model, options);
      QVERIFY(plain && chosen);
      const GraphLayout &a = *plain.value(), &b = *chosen.value();
      QVERIFY(!b.grouping);
      QCOMPARE(b.items.size(), a.items.size());
      for (size_t i = 0; i < a.items.size(); ++i) QCOMPARE(b.items[i].rect, a.items[i].rect);
      QCOMPARE(b.edges.size(), a.edges.size());
      for (size_t e = 0; e < a.edges.size(); ++e) QCOMPARE(b.edges[e].points, a.edges[e].points);
    };
    compareToPlain(test::blockModel(10, 30, true));  // 300 nodes: below the threshold
    if (QTest::currentTestFailed()) return;
    compareToPlain(namedChain(std::vector<std::string>(500, "Relu")));  // above, but no groups
    if (QTest::currentTestFailed()) return;
    options.groupAbove = 0;  // grouping off
    compareToPlain(test::blockModel(20, 30, false));
  }

  void zooEncoderGroupsByScopes() {
    const QString path = QStringLiteral(QS_ZOO_DIR "/bert_encoder.onnx");
    if (!QFile::exists(path)) QSKIP("bert_encoder.onnx not in .cache/zoo");
    auto model = loadModel(path.toStdString());
    QVERIFY(model);
    LayoutOptions options = GraphView().layoutOptions();
    options.groupAbove = kDefaultGroupAbove;
    auto r = computeModelLayout(model.value(), options);
    QVERIFY(r);
    const GraphLayout& L = *r.value();
    QVERIFY(L.grouping);
    QCOMPARE(L.grouping->source, NodeGrouping::Source::Scopes);
    QVERIFY(groupByPath(*L.grouping, "layers.0") >= 0);
    QVERIFY(L.items.size() <= (size_t)options.openVisibleBudget + 8);
    checkConnected(L);
  }
};

int runGroupsTests(int argc, char** argv) {
  GroupsTest t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_groups.moc"
