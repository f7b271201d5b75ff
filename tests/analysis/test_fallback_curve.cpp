// The fewest exclusions (core/analysis/fallback_curve.h): the fallback that re-measures its top
// candidates needs no more exclusions than the one that takes the most sensitive node, and fewer on
// a model built so that the most sensitive nodes are not the ones whose exclusion helps; the curve
// goes past the target, counts up from 0, and the session is left at its first point that reaches
// the target; a point of the curve can be applied later (the GUI's click).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/analysis/fallback_curve.h"
#include "core/analysis/quant_session.h"
#include "tests/support/sensitivity_model.h"

using namespace qs;
using namespace qs::test;

namespace {

// y = x·Wa - x·Wb + x·Wc with Wb == Wa: quantized, "a" and "b" make the same error and cancel, so
// the output error is "c"'s alone. Wa holds one outlier per column, so "a" and "b" alone are by
// far the most sensitive nodes, yet excluding either one leaves the other's error uncancelled, and
// only excluding "c" (the least sensitive) helps.
std::shared_ptr<Model> cancellingBranchesModel() {
  OnnxBuilder b(13);
  const int64_t n = 32;
  b.input("x", {1, 8, n}).output("y", {1, 8, n});
  std::mt19937 rng(5);
  std::vector<float> wa = randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
  for (int64_t c = 0; c < n; ++c) wa[(size_t)(((c * 7) % n) * n + c)] = 40.0f;
  b.initializer("wa", {n, n}, wa);
  b.initializer("wb", {n, n}, wa);
  b.initializer("wc", {n, n}, randomValues((size_t)(n * n), rng, -0.3f, 0.3f));
  b.node("MatMul", {"x", "wa"}, {"ha"}, "a");
  b.node("MatMul", {"x", "wb"}, {"hb"}, "b");
  b.node("MatMul", {"x", "wc"}, {"hc"}, "c");
  b.node("Sub", {"ha", "hb"}, {"d"}, "sub");
  b.node("Add", {"d", "hc"}, {"y"}, "add");
  return builtModel(b, "cancelling_branches.onnx");
}

std::unique_ptr<QuantSession> analysed(std::shared_ptr<Model> model, AnalysisOptions ao = {}) {
  ao.calibration.method = CalibMethod::Max;
  auto s = QuantSession::create(model, QuantConfig{}, ao);
  EXPECT_TRUE(s) << s.status().message();
  auto data = randomData(*model, 4);
  EXPECT_TRUE((*s)->calibrate(*data));
  auto r = (*s)->analyze(data);
  EXPECT_TRUE(r) << r.status().message();
  return std::move(s).value();
}

NodeId nodeNamed(const Model& m, const std::string& name) {
  for (size_t i = 0; i < m.graph.nodes.size(); ++i)
    if (m.graph.nodes[i].name == name) return (NodeId)i;
  return -1;
}

}  // namespace

TEST(FallbackCurve, MeasuringTheCandidatesNeedsFewerExclusionsThanTakingTheMostSensitive) {
  auto model = cancellingBranchesModel();
  ASSERT_TRUE(model);
  auto old = analysed(model);
  auto now = analysed(model);
  const AnalysisResult& r0 = *now->result();
  const NodeId a = nodeNamed(*model, "a"), b = nodeNamed(*model, "b"), c = nodeNamed(*model, "c");
  // The premise: "a" and "b" are the most sensitive, "c" the least of the three.
  ASSERT_LT(r0.nodes[(size_t)a].sensitivitySnrDb, r0.nodes[(size_t)c].sensitivitySnrDb);
  ASSERT_LT(r0.nodes[(size_t)b].sensitivitySnrDb, r0.nodes[(size_t)c].sensitivitySnrDb);
  const double target = r0.worstOutputSnrDb() + 10;

  FallbackOptions fo;
  fo.targetSnrDb = target;
  fo.extraSteps = 0;
  fo.candidates = 1;
  auto oldCurve = fallbackCurve(*old, fo);
  ASSERT_TRUE(oldCurve) << oldCurve.status().message();
  fo.candidates = 8;
  auto newCurve = fallbackCurve(*now, fo);
  ASSERT_TRUE(newCurve) << newCurve.status().message();
  ASSERT_TRUE(oldCurve->reached);
  ASSERT_TRUE(newCurve->reached);
  EXPECT_LE(newCurve->chosen, oldCurve->chosen);
  EXPECT_EQ(newCurve->chosen, 1);
  EXPECT_EQ(newCurve->steps[0].excluded, c);
  EXPECT_GE(oldCurve->chosen, 3) << "the old choice excludes a or b first, which makes the output worse";
  // The old choice is the old autoFallback's, node for node.
  auto third = analysed(model);
  auto steps = third->autoFallback(target);
  ASSERT_TRUE(steps);
  ASSERT_EQ(steps->size(), (size_t)oldCurve->chosen);
  for (size_t i = 0; i < steps->size(); ++i) EXPECT_EQ((*steps)[i].excluded, oldCurve->steps[i].excluded);
  EXPECT_GE(now->result()->worstOutputSnrDb(), target);
}

TEST(FallbackCurve, GoesPastTheTargetAndLeavesTheSessionAtTheFirstPointReachingIt) {
  auto model = badNodeChainModel();
  ASSERT_TRUE(model);
  auto s = analysed(model);
  const double start = s->result()->worstOutputSnrDb();
  FallbackOptions fo;
  fo.targetSnrDb = start + 3;  // "m2" alone gets there
  fo.extraSteps = 3;
  auto curve = fallbackCurve(*s, fo);
  ASSERT_TRUE(curve) << curve.status().message();
  ASSERT_TRUE(curve->reached);
  EXPECT_EQ(curve->quantizable, 4);
  EXPECT_EQ(curve->chosen, 1);
  EXPECT_EQ(model->graph.nodes[(size_t)curve->steps[0].excluded].name, "m2");
  // Past the target: a quarter of the 4 quantizable nodes, i.e. one step more.
  EXPECT_EQ(curve->steps.size(), 2u);
  EXPECT_EQ(curve->worstSnrDb(0), start);
  // Every point before the chosen one misses the target; the chosen one reaches it.
  for (int i = 0; i < curve->chosen; ++i) EXPECT_LT(curve->worstSnrDb(i), fo.targetSnrDb);
  EXPECT_GE(curve->worstSnrDb(curve->chosen), fo.targetSnrDb);
  // The session is at the chosen point: its figures, the chosen exclusion off, the one past it on.
  EXPECT_DOUBLE_EQ(s->result()->worstOutputSnrDb(), curve->worstSnrDb(curve->chosen));
  EXPECT_FALSE(s->plan().nodes[(size_t)curve->steps[0].excluded].quantized);
  EXPECT_TRUE(s->plan().nodes[(size_t)curve->steps[1].excluded].quantized);
  EXPECT_EQ(curve->chosenSteps().size(), 1u);

  // Applying another point gives that point's figures, and back.
  ASSERT_TRUE(applyFallbackPoint(*s, *curve, 2));
  EXPECT_DOUBLE_EQ(s->result()->worstOutputSnrDb(), curve->worstSnrDb(2));
  EXPECT_FALSE(s->plan().nodes[(size_t)curve->steps[1].excluded].quantized);
  ASSERT_TRUE(applyFallbackPoint(*s, *curve, 0));
  EXPECT_DOUBLE_EQ(s->result()->worstOutputSnrDb(), start);
  EXPECT_FALSE(applyFallbackPoint(*s, *curve, 3));
}

TEST(FallbackCurve, ATargetOnlyFloatReachesExcludesEveryNode) {
  auto model = badNodeChainModel();
  ASSERT_TRUE(model);
  auto s = analysed(model);
  FallbackOptions fo;
  fo.targetSnrDb = 1e6;
  auto curve = fallbackCurve(*s, fo);
  ASSERT_TRUE(curve) << curve.status().message();
  EXPECT_EQ(curve->steps.size(), 4u);  // nothing left to measure past it
  EXPECT_EQ(curve->chosen, 4);
  EXPECT_TRUE(std::isinf(curve->worstSnrDb(4)));
  for (const NodeQuantState& n : s->plan().nodes) EXPECT_FALSE(n.quantized);
}

TEST(FallbackCurve, AnAgreementTargetWithoutAClassOutputIsRefused) {
  auto model = badNodeChainModel();
  ASSERT_TRUE(model);
  AnalysisOptions ao;
  ao.outputKinds = {{"y", OutputKind::Dense}};
  auto s = analysed(model, ao);
  FallbackOptions fo;
  fo.targetAgreement = 0.9;
  auto refused = fallbackCurve(*s, fo);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("no graph output has a class axis"), std::string::npos);
}
