// The fewest exclusions (core/analysis/fallback_curve.h): the fallback that re-measures its top
// candidates needs no more exclusions than the one that takes the most sensitive node, and fewer on
// a model built so that the most sensitive nodes are not the ones whose exclusion helps; the curve
// goes past the target, counts up from 0, and the session is left at its first point that reaches
// the target; a point of the curve can be applied later (the GUI's click). The second pass: ranking
// by measured gain gets past nodes measured useless, and the backward pass re-includes the nodes a
// greedy pass excluded that the target does not need. The pair step finds two nodes whose errors
// cancel, each harmful to exclude alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/analysis/fallback_curve.h"
#include "core/analysis/quant_session.h"
#include "tests/support/model_helpers.h"
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

// y1 = sum of six MatMuls p1..p6 with weights x 256 (a large, well-quantized output); y2 = one
// MatMul "q" whose input (x times a constant, feature 0 by 1000, a row of "q"'s weights that is 0)
// has an outlier that rounds the rest of it to zero (a small, badly quantized output). The
// sensitivity pools the outputs, so p1..p6 (their noise is large next to y2's signal) rank above
// "q", yet the worst output is y2, which only excluding "q" improves.
std::shared_ptr<Model> twoScaleOutputsModel() {
  OnnxBuilder b(13);
  const int64_t n = 32;
  b.input("x", {1, 8, n}).output("y1", {1, 8, n}).output("y2", {1, 8, n});
  std::mt19937 rng(9);
  std::string sum;
  for (int i = 1; i <= 6; ++i) {
    std::vector<float> w = randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
    for (float& v : w) v *= 256;
    const std::string id = std::to_string(i);
    b.initializer("wp" + id, {n, n}, w);
    b.node("MatMul", {"x", "wp" + id}, {"hp" + id}, "p" + id);
    if (i == 1) {
      sum = "hp1";
    } else {
      const std::string out = i == 6 ? "y1" : "s" + id;
      b.node("Add", {sum, "hp" + id}, {out}, "add" + id);
      sum = out;
    }
  }
  std::vector<float> gain((size_t)n, 1.0f);
  gain[0] = 1000.0f;
  b.initializer("g", {n}, gain);
  b.node("Mul", {"x", "g"}, {"xg"}, "mul");
  std::vector<float> wq = randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
  for (int64_t c = 0; c < n; ++c) wq[(size_t)c] = 0.0f;  // row 0: the outlier feature is not read
  b.initializer("wq", {n, n}, wq);
  b.node("MatMul", {"xg", "wq"}, {"y2"}, "q");
  return builtModel(b, "two_scale_outputs.onnx");
}

// y = x·Wa - x·Wb + x·Wc with Wb = 0.9 Wa: "a" and "b" make nearly the same error (per-channel
// scales scale with the weights), so quantized they leave a tenth of "a"'s error (one outlier per
// column rounds the rest of it away); excluding either alone leaves the other's whole error, and
// only excluding both removes it. "c" (small, well quantized weights) adds a little noise, so its
// exclusion is the only single one that helps, by far too little. det's stem convs in small.
std::shared_ptr<Model> cancellingPairModel() {
  OnnxBuilder b(13);
  const int64_t n = 32;
  b.input("x", {1, 8, n}).output("y", {1, 8, n});
  std::mt19937 rng(13);
  std::vector<float> wa = randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
  for (int64_t c = 0; c < n; ++c) wa[(size_t)(((c * 5) % n) * n + c)] = 40.0f;
  std::vector<float> wb = wa;
  for (float& v : wb) v *= 0.9f;
  b.initializer("wa", {n, n}, wa);
  b.initializer("wb", {n, n}, wb);
  b.initializer("wc", {n, n}, randomValues((size_t)(n * n), rng, -0.3f, 0.3f));
  b.node("MatMul", {"x", "wa"}, {"ha"}, "a");
  b.node("MatMul", {"x", "wb"}, {"hb"}, "b");
  b.node("MatMul", {"x", "wc"}, {"hc"}, "c");
  b.node("Sub", {"ha", "hb"}, {"d"}, "sub");
  b.node("Add", {"d", "hc"}, {"y"}, "add");
  return builtModel(b, "cancelling_pair.onnx");
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
  fo.backward = false;  // the old fallback had no backward pass
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

// The backward pass: the greedy pass (every candidate measured) excludes x, y and z; x is not
// needed once y and z are out, and the backward pass re-includes it. The curve stays a sequence
// of prefixes, every point measured: the session's figures at each point are the curve's.
TEST(FallbackCurve, BackwardPassReincludesWhatTheGreedyPassExcludedNeedlessly) {
  auto model = sharedBranchModel();
  ASSERT_TRUE(model);
  const NodeId x = nodeNamed(*model, "x"), y = nodeNamed(*model, "y"), z = nodeNamed(*model, "z");
  auto greedy = analysed(model);
  const double target = greedy->result()->worstOutputSnrDb() + 3;
  FallbackOptions fo;
  fo.targetSnrDb = target;
  fo.extraSteps = 0;
  fo.backward = false;
  auto g = fallbackCurve(*greedy, fo);
  ASSERT_TRUE(g) << g.status().message();
  ASSERT_TRUE(g->reached);
  ASSERT_EQ(g->chosen, 3) << "the premise: the greedy pass excludes all three";
  EXPECT_EQ(g->steps[0].excluded, x);
  EXPECT_TRUE(g->reincluded.empty());
  EXPECT_EQ(g->forwardChosen, 3);

  auto s = analysed(model);
  fo.backward = true;
  fo.extraSteps = 3;
  auto c = fallbackCurve(*s, fo);
  ASSERT_TRUE(c) << c.status().message();
  ASSERT_TRUE(c->reached);
  EXPECT_EQ(c->forwardChosen, 3);
  ASSERT_EQ(c->reincluded.size(), 1u);
  EXPECT_EQ(c->reincluded[0], x);
  EXPECT_EQ(c->chosen, 2);
  ASSERT_EQ(c->steps.size(), 3u);  // nothing left past point 3
  // Kept exclusions first (in the greedy order), the re-included one after them.
  EXPECT_TRUE((c->steps[0].excluded == y && c->steps[1].excluded == z) ||
              (c->steps[0].excluded == z && c->steps[1].excluded == y));
  EXPECT_EQ(c->steps[2].excluded, x);
  EXPECT_FALSE(s->plan().nodes[(size_t)y].quantized);
  EXPECT_FALSE(s->plan().nodes[(size_t)z].quantized);
  EXPECT_TRUE(s->plan().nodes[(size_t)x].quantized);
  EXPECT_GE(s->result()->worstOutputSnrDb(), target);
  EXPECT_DOUBLE_EQ(s->result()->worstOutputSnrDb(), c->worstSnrDb(2));
  EXPECT_LT(c->worstSnrDb(1), target);
  // Every point as measured: a fresh session with that point's exclusions gives its figures.
  for (int p = 0; p <= 3; ++p) {
    ASSERT_TRUE(applyFallbackPoint(*s, *c, p));
    auto fresh = analysed(model);
    std::vector<std::pair<NodeId, bool>> off;
    for (int i = 0; i < p; ++i) off.push_back({c->steps[(size_t)i].excluded, false});
    if (!off.empty()) {
      ASSERT_TRUE(fresh->setQuantized(off));
    }
    auto same = [](double u, double v) { return u == v || std::abs(u - v) <= 1e-9; };  // inf == inf
    EXPECT_PRED2(same, fresh->result()->worstOutputSnrDb(), c->worstSnrDb(p)) << "point " << p;
    EXPECT_PRED2(same, s->result()->worstOutputSnrDb(), c->worstSnrDb(p)) << "point " << p;
  }
}

// Ranking by measured gain: with two candidates per step, the sensitivity order measures p1..p6
// (useless for the worst output y2) two by two and excludes one each step until "q" comes up;
// ranked by gain, the p measured useless (gain 0) make room, and "q" is reached sooner.
TEST(FallbackCurve, RankingByMeasuredGainGetsPastNodesMeasuredUseless) {
  auto model = twoScaleOutputsModel();
  ASSERT_TRUE(model);
  const NodeId q = nodeNamed(*model, "q");
  auto bySensitivity = analysed(model);
  const AnalysisResult& r0 = *bySensitivity->result();
  // The premise: every p ranks above q, and the worst output is y2.
  for (int i = 1; i <= 6; ++i)
    ASSERT_LT(r0.nodes[(size_t)nodeNamed(*model, "p" + std::to_string(i))].sensitivitySnrDb,
              r0.nodes[(size_t)q].sensitivitySnrDb);
  ASSERT_LT(r0.outputs[1].metrics.snrDb, r0.outputs[0].metrics.snrDb - 10);
  FallbackOptions fo;
  fo.targetSnrDb = r0.outputs[1].metrics.snrDb + 5;
  fo.candidates = 2;
  fo.extraSteps = 0;
  fo.backward = false;
  fo.rankByGain = false;
  auto old = fallbackCurve(*bySensitivity, fo);
  ASSERT_TRUE(old) << old.status().message();
  ASSERT_TRUE(old->reached);
  EXPECT_EQ(old->chosen, 6);
  EXPECT_EQ(old->steps.back().excluded, q);

  auto byGain = analysed(model);
  fo.rankByGain = true;
  auto now = fallbackCurve(*byGain, fo);
  ASSERT_TRUE(now) << now.status().message();
  ASSERT_TRUE(now->reached);
  EXPECT_EQ(now->chosen, 4);
  EXPECT_EQ(now->steps.back().excluded, q);

  // With the backward pass too, only q stays out.
  auto both = analysed(model);
  fo.backward = true;
  auto best = fallbackCurve(*both, fo);
  ASSERT_TRUE(best) << best.status().message();
  EXPECT_EQ(best->chosen, 1);
  EXPECT_EQ(best->steps[0].excluded, q);
  EXPECT_EQ(best->reincluded.size(), 3u);
}

// The pair step: on the cancelling pair, the greedy pass without it excludes "c" (the only single
// exclusion that helps, a little), then "a" (which makes it worse), then "b"; with it, the first step
// measures the pairs (no single gains 1 dB) and excludes "a" and "b" together: 2 exclusions, not 3.
// Both points of the pair are measured figures (a fresh session with those exclusions agrees).
TEST(FallbackCurve, APairStepFindsTwoNodesWhoseErrorsCancel) {
  auto model = cancellingPairModel();
  ASSERT_TRUE(model);
  const NodeId a = nodeNamed(*model, "a"), b = nodeNamed(*model, "b"), c = nodeNamed(*model, "c");
  auto probe = analysed(model);
  const double all = probe->result()->worstOutputSnrDb();
  auto snrWithout = [&](std::vector<NodeId> ids) {
    std::vector<std::pair<NodeId, bool>> off, on;
    for (NodeId id : ids) off.push_back({id, false}), on.push_back({id, true});
    auto r = probe->setQuantized(off);
    EXPECT_TRUE(r) << r.status().message();
    const double snr = r ? (*r)->worstOutputSnrDb() : NAN;
    EXPECT_TRUE(probe->setQuantized(on));
    return snr;
  };
  const double withoutPair = snrWithout({a, b});
  const double target = withoutPair - 1;
  // The premises: each of "a" and "b" alone makes it worse, "c" alone helps by less than 1 dB and
  // misses the target, which the pair reaches.
  ASSERT_LT(snrWithout({a}), all);
  ASSERT_LT(snrWithout({b}), all);
  const double withoutC = snrWithout({c});
  ASSERT_GT(withoutC, all);
  ASSERT_LT(withoutC, all + 1);
  ASSERT_LT(withoutC, target);
  ASSERT_GT(withoutPair, all + 10);

  FallbackOptions fo;
  fo.targetSnrDb = target;
  fo.extraSteps = 0;
  fo.backward = false;
  fo.pairs = false;
  auto single = analysed(model);
  auto g = fallbackCurve(*single, fo);
  ASSERT_TRUE(g) << g.status().message();
  ASSERT_TRUE(g->reached);
  EXPECT_EQ(g->chosen, 3);
  EXPECT_EQ(g->steps[0].excluded, c);
  EXPECT_EQ(g->pairSteps, 0);

  auto s = analysed(model);
  fo.pairs = true;
  auto p = fallbackCurve(*s, fo);
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_TRUE(p->reached);
  EXPECT_EQ(p->chosen, 2);
  EXPECT_EQ(p->pairsTaken, 1);
  ASSERT_EQ(p->steps.size(), 2u);
  EXPECT_TRUE((p->steps[0].excluded == a && p->steps[1].excluded == b) ||
              (p->steps[0].excluded == b && p->steps[1].excluded == a));
  EXPECT_FALSE(s->plan().nodes[(size_t)a].quantized);
  EXPECT_FALSE(s->plan().nodes[(size_t)b].quantized);
  EXPECT_TRUE(s->plan().nodes[(size_t)c].quantized);
  EXPECT_GE(s->result()->worstOutputSnrDb(), target);
  for (int point = 0; point <= 2; ++point) {
    auto fresh = analysed(model);
    std::vector<std::pair<NodeId, bool>> off;
    for (int i = 0; i < point; ++i) off.push_back({p->steps[(size_t)i].excluded, false});
    if (!off.empty()) {
      ASSERT_TRUE(fresh->setQuantized(off));
    }
    EXPECT_NEAR(fresh->result()->worstOutputSnrDb(), p->worstSnrDb(point), 1e-9) << "point " << point;
  }

  // With the backward pass too, the pair step needs no more than without it.
  fo.backward = true;
  auto both = analysed(model);
  auto pb = fallbackCurve(*both, fo);
  ASSERT_TRUE(pb) << pb.status().message();
  fo.pairs = false;
  auto greedyBack = analysed(model);
  auto gb = fallbackCurve(*greedyBack, fo);
  ASSERT_TRUE(gb) << gb.status().message();
  EXPECT_LE(pb->chosen, gb->chosen);
}
