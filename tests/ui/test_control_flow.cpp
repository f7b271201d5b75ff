// Offscreen tests of control-flow display (issue #19): If and Loop nodes of a torch.jit.script export
// are marked expandable, expanding draws their subgraphs inside them with only their nodes added,
// collapsing restores the layout as it was, and the inspector lists subgraphs and scope.
#include <QFile>
#include <QSettings>
#include <QSignalSpy>
#include <QTest>

#include "tests/ui/chain_model.h"
#include "tests/ui/window_parts.h"
#include "ui/graph_layout.h"
#include "ui/graph_view.h"
#include "ui/main_window.h"
#include "ui/model_loader.h"
#include "ui/node_properties.h"
#include "ui/property_tree_model.h"

using namespace qs;
using namespace qs::ui;

namespace {

QString zooPath(const char* name) { return QStringLiteral(QS_ZOO_DIR "/") + QLatin1String(name); }

int nodeItemCount(const GraphLayout& L) {
  int n = 0;
  for (const LayoutItem& it : L.items) n += it.kind == LayoutItem::Kind::Node;
  return n;
}

NodeId findOp(const Graph& g, const char* op) {
  for (NodeId n = 0; n < (NodeId)g.nodes.size(); ++n)
    if (g.nodes[(size_t)n].opType == op) return n;
  return -1;
}

// The value of `key` under the top-level entry `section`, or a null string.
QString inspectorValue(const PropertyTreeModel& m, const QString& section, const QString& key) {
  const QModelIndex s = m.findKey(section);
  if (!s.isValid()) return QString();
  const QModelIndex k = m.findKey(key, s);
  return k.isValid() ? k.siblingAtColumn(1).data().toString() : QString();
}

}  // namespace

class ControlFlowTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("QuantscopeTests"));
    QCoreApplication::setApplicationName(QStringLiteral("qs_ui_tests"));
    QSettings().clear();
  }

  void scriptedIfAndLoopExpand() {
    const QString path = zooPath("scripted_control.onnx");
    if (!QFile::exists(path)) QSKIP("scripted_control.onnx missing: run scripts/make_zoo.py");
    MainWindow w;
    w.setErrorDialogsEnabled(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy shown(&w, &MainWindow::modelShown);
    w.openFile(path);
    QVERIFY(shown.wait(120000));
    const LoadedModelPtr cur = w.current();
    QVERIFY(cur);
    const Graph& g = cur->model->graph;
    GraphView* view = test::part<GraphView>(w, "graphView");
    auto* inspector = test::part<PropertyTreeModel>(w, "inspectorModel");
    const std::shared_ptr<const GraphLayout> base = view->graphLayout();
    QCOMPARE(base.get(), cur->layout.get());

    const NodeId ifNode = findOp(g, "If"), loopNode = findOp(g, "Loop");
    QVERIFY(ifNode >= 0 && loopNode >= 0);
    const int ifItem = base->itemOfNode[(size_t)ifNode], loopItem = base->itemOfNode[(size_t)loopNode];
    // Control-flow nodes, and only they, are expandable; all start collapsed.
    for (NodeId n = 0; n < (NodeId)g.nodes.size(); ++n) {
      const int item = base->itemOfNode[(size_t)n];
      QCOMPARE(view->isExpandable(item), !subgraphsOf(g.nodes[(size_t)n]).empty());
      QVERIFY(!view->isExpanded(item));
    }
    QVERIFY(view->isExpandable(ifItem));
    QVERIFY(view->isExpandable(loopItem));
    const Graph* body = g.nodes[(size_t)loopNode].attr("body")->g.get();
    QVERIFY(body && !body->nodes.empty());
    QCOMPARE(base->items[(size_t)loopItem].subgraphNodes, subgraphNodeCount(g.nodes[(size_t)loopNode]));
    QVERIFY(base->items[(size_t)loopItem].subgraphNodes >= (int)body->nodes.size());

    // Implicit inputs (outer-scope reads) are the dashed edges, and only they.
    int implicitDrawn = 0, dashed = 0;
    for (const LayoutEdge& e : base->edges) {
      dashed += e.outerScope;
      const Node* to = base->nodeOf(e.to);
      if (!to) continue;
      for (size_t k = to->explicitInputCount(); k < to->inputs.size(); ++k)
        if (to->inputs[k] == e.value) {
          ++implicitDrawn;
          break;
        }
    }
    QCOMPARE(dashed, implicitDrawn);

    // Expand the Loop with a real double-click on its box.
    const int itemsBefore = (int)base->items.size(), nodesBefore = nodeItemCount(*base);
    view->setZoom(1.0);
    view->centerOn(base->items[(size_t)loopItem].rect.center());
    QSignalSpy relaid(view, &GraphView::graphLayoutChanged);
    QTest::mouseDClick(view, Qt::LeftButton, {}, view->mapFromScene(base->items[(size_t)loopItem].rect.center()).toPoint());
    QCOMPARE(relaid.count(), 1);
    const std::shared_ptr<const GraphLayout> open = view->graphLayout();
    QVERIFY(open.get() != base.get());
    QVERIFY(view->isExpanded(loopItem));  // main-graph items keep their indices
    QVERIFY(!view->isExpanded(ifItem));
    QCOMPARE(open->mainItemCount, base->mainItemCount);
    QCOMPARE(nodeItemCount(*open), nodesBefore + (int)body->nodes.size());
    QVERIFY((int)open->items.size() >= itemsBefore + (int)body->nodes.size());
    QCOMPARE(open->frames.size(), (size_t)1);
    const SubgraphFrame& frame = open->frames.front();
    QCOMPARE(frame.attribute, std::string("body"));
    QCOMPARE(frame.graph, body);
    QCOMPARE(frame.owner, loopItem);
    QCOMPARE(frame.scope, g.nodes[(size_t)loopNode].name + "/body");
    const QRectF loopBox = open->items[(size_t)loopItem].rect;
    QVERIFY(loopBox.contains(frame.rect));
    QVERIFY(loopBox.height() > base->items[(size_t)loopItem].rect.height() * 2);
    for (size_t i = open->mainItemCount; i < open->items.size(); ++i) {
      QCOMPARE(open->items[i].frame, 0);
      QVERIFY2(frame.rect.contains(open->items[i].rect), qPrintable(QString::number(i)));
    }
    // The body's edges are drawn, and nothing else of the main graph overlaps the expanded box.
    int bodyEdges = 0;
    for (const LayoutEdge& e : open->edges) bodyEdges += (size_t)e.from >= open->mainItemCount;
    QVERIFY(bodyEdges >= (int)body->nodes.size() - 1);
    for (size_t i = 0; i < open->mainItemCount; ++i)
      if ((int)i != loopItem) QVERIFY2(!open->items[i].rect.intersects(loopBox), qPrintable(QString::number(i)));
    // The spatial index finds the nested boxes (they are on top of their frame).
    for (size_t i = open->mainItemCount; i < open->items.size(); ++i)
      QCOMPARE(open->itemAt(open->items[i].rect.center()), (int32_t)i);

    // The Loop's properties list its body and say it runs in float.
    w.selectNode(loopNode);
    QCOMPARE(view->selectedItem(), loopItem);
    const QString bodyRow = inspectorValue(*inspector, QStringLiteral("Subgraphs"), QStringLiteral("body"));
    QCOMPARE(bodyRow, QStringLiteral("%1 nodes").arg(body->nodes.size()));
    QVERIFY(inspectorValue(*inspector, QStringLiteral("Subgraphs"), QStringLiteral("Quantization")).contains(QStringLiteral("float")));

    // A click on a node inside the body shows it with its scope, kept in float; it has no table row.
    int nested = -1;
    for (size_t i = open->mainItemCount; i < open->items.size() && nested < 0; ++i)
      if (open->items[i].kind == LayoutItem::Kind::Node) nested = (int)i;
    QVERIFY(nested >= 0);
    view->centerOn(open->items[(size_t)nested].rect.center());
    QTest::mouseClick(view, Qt::LeftButton, {}, view->mapFromScene(open->items[(size_t)nested].rect.center()).toPoint());
    QCOMPARE(view->selectedItem(), nested);
    QCOMPARE(inspectorValue(*inspector, QStringLiteral("Node"), QStringLiteral("Scope")), QString::fromStdString(frame.scope));
    QCOMPARE(inspectorValue(*inspector, QStringLiteral("Node"), QStringLiteral("Quantization")),
             QStringLiteral("inside a subgraph, kept in float"));
    QCOMPARE(inspectorValue(*inspector, QStringLiteral("Node"), QStringLiteral("Op type")),
             QString::fromStdString(body->nodes[(size_t)open->items[(size_t)nested].id].opType));

    // Expanding the If as well adds both branches; collapsing both restores the first layout exactly.
    view->setExpanded(ifItem, true);
    const auto both = view->graphLayout();
    QCOMPARE(nodeItemCount(*both), nodesBefore + (int)body->nodes.size() + (int)([&] {
                                     size_t n = 0;
                                     for (const auto& [name, sub] : subgraphsOf(g.nodes[(size_t)ifNode])) n += sub->nodes.size();
                                     return n;
                                   }()));
    std::set<std::string> attributes;
    for (const SubgraphFrame& f : both->frames) attributes.insert(f.attribute);
    QVERIFY(attributes.count("then_branch") && attributes.count("else_branch") && attributes.count("body"));
    QCOMPARE(view->selectedItem() >= 0 ? both->items[(size_t)view->selectedItem()].frame >= 0 : false, true);
    view->setExpanded(ifItem, false);
    view->setExpanded(loopItem, false);
    const auto closed = view->graphLayout();
    QCOMPARE((int)closed->items.size(), itemsBefore);
    QCOMPARE(nodeItemCount(*closed), nodesBefore);
    QVERIFY(closed->frames.empty());
    for (size_t i = 0; i < closed->items.size(); ++i) QCOMPARE(closed->items[i].rect, base->items[i].rect);
    QCOMPARE(closed->edges.size(), base->edges.size());
    for (size_t e = 0; e < closed->edges.size(); ++e) QVERIFY(closed->edges[e].points == base->edges[e].points);
  }

  void nestedIfPropertiesWithoutWindow() {
    const QString path = zooPath("scripted_control.onnx");
    if (!QFile::exists(path)) QSKIP("scripted_control.onnx missing: run scripts/make_zoo.py");
    ModelLoader loader;
    loader.setLayoutOptions(GraphView().layoutOptions());
    QSignalSpy loaded(&loader, &ModelLoader::loaded);
    QVERIFY(loader.open(path));
    QVERIFY(loaded.wait(120000));
    const LoadedModelPtr r = loaded.first().at(0).value<LoadedModelPtr>();
    const Graph& g = r->model->graph;
    const NodeId ifNode = findOp(g, "If");
    QVERIFY(ifNode >= 0);
    PropertyTreeModel m;
    m.setEntries(nodeProperties(*r->model, ifNode));
    QCOMPARE(inspectorValue(m, QStringLiteral("Subgraphs"), QStringLiteral("then_branch")),
             QStringLiteral("%1 nodes").arg(g.nodes[(size_t)ifNode].attr("then_branch")->g->nodes.size()));
    QVERIFY(!inspectorValue(m, QStringLiteral("Subgraphs"), QStringLiteral("else_branch")).isNull());
    // A plain node has no Subgraphs section.
    const NodeId plain = r->layout->items[(size_t)r->layout->itemOfNode[0]].subgraphNodes ? -1 : 0;
    if (plain >= 0) {
      m.setEntries(nodeProperties(*r->model, plain));
      QVERIFY(!m.findKey(QStringLiteral("Subgraphs")).isValid());
    }
  }

  void modelsWithoutControlFlowAreUnchanged() {
    // A chain has no control flow: nothing is expandable, and "expanding" a plain node is the base.
    auto model = test::chainModel(300);
    QVERIFY(model);
    auto r = computeGraphLayout(model, GraphView().layoutOptions());
    QVERIFY(r);
    const auto base = r.value();
    for (const LayoutItem& it : base->items) QCOMPARE(it.subgraphNodes, 0);
    QVERIFY(base->frames.empty());
    for (const LayoutEdge& e : base->edges) QVERIFY(!e.outerScope);
    auto same = expandGraphLayout(base, {}, GraphView().layoutOptions(), nullptr);
    QVERIFY(same);
    QCOMPARE(same.value().get(), base.get());
    auto plain = expandGraphLayout(base, {&model->graph.nodes[5]}, GraphView().layoutOptions(), nullptr);
    QVERIFY(plain);
    QCOMPARE(plain.value()->items.size(), base->items.size());
    for (size_t i = 0; i < base->items.size(); ++i) QCOMPARE(plain.value()->items[i].rect, base->items[i].rect);
    GraphView view;
    view.setGraphLayout(base);
    view.setExpanded(base->itemOfNode[5], true);
    QCOMPARE(view.graphLayout().get(), base.get());
  }
};

int runControlFlowTests(int argc, char** argv) {
  ControlFlowTest t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_control_flow.moc"
