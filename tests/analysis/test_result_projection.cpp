// An analysis result over a run's model seen on the model shown (core/analysis/result_projection.h):
// the run inserted a Mul before a Conv (as the input smoothings do) and put it first, so every id
// moved; each shown node takes its namesake's figures and points, a point's value is the shown
// node's input in its slot, the inserted node is dropped and a node the run lacks keeps none.
#include <gtest/gtest.h>

#include "core/analysis/result_projection.h"

using namespace qs;

namespace {

NodeId addNode(Graph& g, const std::string& name, const std::string& op, std::vector<std::string> in,
               std::vector<std::string> out) {
  Node n;
  n.name = name;
  n.opType = op;
  for (const std::string& v : in) n.inputs.push_back(g.valueId(v));
  for (const std::string& v : out) n.outputs.push_back(g.valueId(v));
  g.nodes.push_back(std::move(n));
  return (NodeId)g.nodes.size() - 1;
}

NodeResult figures(double graphwise) {
  NodeResult r;
  r.hasGraphwise = true;
  r.graphwise.snrDb = graphwise;
  return r;
}

}  // namespace

TEST(ResultProjection, MapsNodesAndPointsByNameAcrossInsertedNodes) {
  Graph shown;
  addNode(shown, "head", "Relu", {"x"}, {"h"});
  addNode(shown, "conv", "Conv", {"h", "w"}, {"c"});
  addNode(shown, "gone", "Identity", {"c"}, {"y"});
  Graph run;  // the smoothing's Mul first, the Identity removed: every shown node's id moved or vanished
  const NodeId mul = addNode(run, "conv_pwsmooth", "Mul", {"h", "h_scale"}, {"h_pwsmooth"});
  const NodeId conv = addNode(run, "conv", "Conv", {"h_pwsmooth", "w"}, {"c"});
  const NodeId head = addNode(run, "head", "Relu", {"x"}, {"h"});
  EXPECT_EQ(nodesByName(shown, run), (std::vector<NodeId>{head, conv, -1}));
  EXPECT_FALSE(sameNodeIds(shown, run));
  EXPECT_TRUE(sameNodeIds(shown, shown));

  AnalysisResult r;
  r.nodes = {figures(50), figures(21.5), figures(40)};
  r.plan.nodes.resize(3);
  r.plan.nodes[(size_t)conv].quantizable = r.plan.nodes[(size_t)conv].quantized = true;
  r.plan.nodes[(size_t)mul].reason = "inserted";
  const ValueId smoothed = run.findValue("h_pwsmooth");
  r.plan.activations.push_back({conv, 0, smoothed, -1});
  r.plan.weights.push_back({conv, 1, run.findValue("w"), 0});
  WeightQuant wq;
  wq.node = conv;
  wq.inputIndex = 1;
  wq.value = run.findValue("w");
  wq.amax = {2.f};
  r.weights.push_back(wq);
  ActivationQuant aq;
  aq.value = smoothed;
  aq.amax = 3.f;
  r.activations[smoothed] = aq;
  ActivationQuant mulInput;
  mulInput.value = run.findValue("h");
  mulInput.amax = 7.f;
  r.activations[mulInput.value] = mulInput;  // the Mul's input, the shown Conv's: the Conv's point wins
  OutputResult out;
  out.value = run.findValue("c");
  out.name = "c";
  out.metrics.snrDb = 21.5;
  r.outputs.push_back(out);
  r.samples = 16;

  const AnalysisResult p = projectResult(r, run, shown);
  ASSERT_EQ(p.nodes.size(), shown.nodes.size());
  ASSERT_EQ(p.plan.nodes.size(), shown.nodes.size());
  EXPECT_EQ(p.nodes[0].graphwise.snrDb, 40);
  EXPECT_EQ(p.nodes[1].graphwise.snrDb, 21.5);
  EXPECT_FALSE(p.nodes[2].hasGraphwise);  // removed by the run: no figures
  EXPECT_FALSE(p.plan.nodes[2].quantizable);
  EXPECT_TRUE(p.plan.nodes[1].quantized);
  ASSERT_EQ(p.plan.activations.size(), 1u);
  EXPECT_EQ(p.plan.activations[0].node, 1);
  EXPECT_EQ(p.plan.activations[0].value, shown.findValue("h"));  // the Conv's own input, not the Mul's output
  ASSERT_EQ(p.plan.weights.size(), 1u);
  EXPECT_EQ(p.plan.weights[0].node, 1);
  EXPECT_EQ(p.plan.weights[0].value, shown.findValue("w"));
  ASSERT_EQ(p.weights.size(), 1u);
  EXPECT_EQ(p.weights[0].node, 1);
  ASSERT_EQ(p.activations.count(shown.findValue("h")), 1u);
  EXPECT_EQ(p.activations.at(shown.findValue("h")).amax, 3.f);
  EXPECT_EQ(p.activations.at(shown.findValue("h")).value, shown.findValue("h"));
  EXPECT_EQ(p.activations.size(), 1u);
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].value, shown.findValue("c"));
  EXPECT_EQ(p.worstOutputSnrDb(), 21.5);
  EXPECT_EQ(p.samples, 16);
}
