// The `auto` calibrator's refinement on the outputs (core/analysis/clip_refine.h), on models built
// in code: where the layer-wise choice is not the output-optimal one (a Relu after the consumer
// discards the very error the layer-wise measure counts), the refinement finds a better clip; it
// never lowers the worst output SNR of its check samples; its run is reported per tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/analysis/agreement.h"
#include "core/analysis/batch_sweep.h"
#include "core/analysis/clip_refine.h"
#include "core/analysis/node_paths.h"
#include "core/analysis/quant_session.h"
#include "core/export/report.h"
#include "core/io/npy.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/session_helpers.h"

using namespace qs;

namespace {

constexpr int kIn = 32, kOut = 16, kSamples = 16;

using Built = test::BuiltModel;
using RefineRun = test::SessionRun;

Built finish(test::OnnxBuilder& ob, const std::vector<float>& x, const std::string& name) {
  return test::buildWithData(ob, Tensor::fromVector<float>(x, {kSamples, kIn}), name);
}

// x [N, 32] -> Gemm(W1) -> z -> Relu -> r -> Gemm(W2) -> y. Features 2..31 are small (0.15 std).
// Feature 0 is 0 on half the samples and 8..16 on the others, where its weight (-4 in every row of
// W1) drives z far below zero: the Relu discards z there whatever x0's clip is (down to ~2), but
// the layer-wise measure (Gemm1's output) counts clipping x0 as a large error, so it keeps x's max
// and the small features get a coarse scale. Feature 1 reaches 3 on a quarter of the samples and
// feeds r's channel 0, which W2 weights heavily: clipping it (or r's outliers) ruins y, so the
// methods that clip hard (entropy) lose on the whole graph too. The output's optimum for x is near
// 3, which no single method and no layer-wise choice gives.
Built buildReluMasked() {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> big(8.f, 16.f);
  std::vector<float> w1((size_t)kIn * kIn), w2((size_t)kOut * kIn), x((size_t)kSamples * kIn);
  for (int o = 0; o < kIn; ++o)
    for (int i = 0; i < kIn; ++i)
      w1[(size_t)o * kIn + i] = i == 0 ? -4.f : (i == 1 ? (o == 0 ? 2.f : 0.f) : 0.5f * n(rng));
  for (int o = 0; o < kOut; ++o)
    for (int i = 0; i < kIn; ++i) w2[(size_t)o * kIn + i] = i == 0 ? 2.f : 0.3f * n(rng);
  for (int s = 0; s < kSamples; ++s)
    for (int i = 0; i < kIn; ++i)
      x[(size_t)s * kIn + i] = i == 0 ? (s % 2 ? big(rng) : 0.f) : i == 1 ? (s % 4 == 0 ? 3.f : 0.f) : 0.15f * n(rng);
  test::OnnxBuilder ob;
  ob.input("x", {-1, kIn}).output("y", {-1, kOut});
  ob.initializer("W1", {kIn, kIn}, w1);
  ob.initializer("W2", {kOut, kIn}, w2);
  test::OnnxBuilder::attrInt(ob.node("Gemm", {"x", "W1"}, {"z"}, "fc1"), "transB", 1);
  ob.node("Relu", {"z"}, {"r"}, "relu");
  test::OnnxBuilder::attrInt(ob.node("Gemm", {"r", "W2"}, {"y"}, "fc2"), "transB", 1);
  return finish(ob, x, "clip_refine_relu");
}

RefineRun analyse(const Built& b, int passes, CalibMethod method = CalibMethod::Auto) {
  AnalysisOptions ao;
  ao.calibration.method = method;
  ao.threads = 2;
  ao.sensitivity = false;
  ao.clipSearch.maxSamples = kSamples;
  ao.clipSearch.checkSamples = kSamples / 2;  // refine on the first 8, the other 8 held out
  ao.clipSearch.refine.heldOutSamples = kSamples / 2;
  ao.clipSearch.refine.passes = passes;
  return test::calibrateAndAnalyse(b, ao);
}

}  // namespace

TEST(ClipRefine, FindsABetterClipThanTheLayerwiseChoiceWhereAReluMasksTheClipping) {
  Built b = buildReluMasked();
  ASSERT_TRUE(b.model && b.data);
  RefineRun off = analyse(b, 0);
  RefineRun on = analyse(b, 4);
  ASSERT_TRUE(off.result && on.result);
  const ValueId x = b.model->graph.findValue("x");
  ASSERT_EQ(on.result->clipChoices.count(x), 1u);
  const ClipChoice& c = on.result->clipChoices.at(x);
  const ClipChoice& c0 = off.result->clipChoices.at(x);
  EXPECT_FALSE(c0.refineRan);
  ASSERT_TRUE(c.refineRan);
  // The layer-wise choice keeps (nearly) all of x0's range; the refinement clips much lower.
  EXPECT_FALSE(c.refinedFrom.empty());
  EXPECT_FLOAT_EQ(c.refinedFromAmax, c0.amax);
  EXPECT_LT(c.amax, 0.75f * c0.amax) << c.winner << " from " << c.refinedFrom;
  EXPECT_GT(c.refineCheckAfterDb, c.refineCheckBeforeDb + 2.0);
  EXPECT_EQ(c.refineCheckSamples, kSamples / 2);
  EXPECT_EQ(c.refineHeldOutSamples, kSamples / 2);
  // Not an artefact of the check samples: the held-out half gains too, and so does the analysis
  // of all 16 samples.
  EXPECT_GT(c.refineHeldOutAfterDb, c.refineHeldOutBeforeDb + 2.0);
  EXPECT_GT(on.result->worstOutputSnrDb(), off.result->worstOutputSnrDb() + 2.0)
      << "off " << off.result->worstOutputSnrDb() << " on " << on.result->worstOutputSnrDb();
  EXPECT_FLOAT_EQ(on.result->activations.at(x).amax, c.amax);
  EXPECT_GT(c.refineConeRuns, 0);
  // report.json carries the run and what it replaced.
  ReportContext ctx;
  const std::string json = reportJson(*b.model, *on.result, ctx);
  EXPECT_NE(json.find("\"refine\""), std::string::npos);
  EXPECT_NE(json.find("\"from\": \"" + c.refinedFrom + "\""), std::string::npos) << json.substr(0, 3000);
  EXPECT_EQ(reportJson(*b.model, *off.result, ctx).find("\"refine\""), std::string::npos);
}

TEST(ClipRefine, NeverLowersTheCheckSnr) {
  // On the masked Gemm and on plain random Gemm -> Relu chains with different seeds, whatever the
  // refinement does, the worst output SNR on its check samples does not go down.
  Built masked = buildReluMasked();
  ASSERT_TRUE(masked.model && masked.data);
  std::vector<Built> models{masked};
  for (unsigned seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<float> w1((size_t)kIn * kIn), w2((size_t)kOut * kIn), x((size_t)kSamples * kIn);
    for (float& v : w1) v = 0.3f * n(rng);
    for (float& v : w2) v = 0.3f * n(rng);
    for (float& v : x) v = n(rng) * (n(rng) > 2.f ? 6.f : 1.f);  // some outliers
    test::OnnxBuilder ob;
    ob.input("x", {-1, kIn}).output("y", {-1, kOut});
    ob.initializer("W1", {kIn, kIn}, w1);
    ob.initializer("W2", {kOut, kIn}, w2);
    test::OnnxBuilder::attrInt(ob.node("Gemm", {"x", "W1"}, {"h"}, "fc1"), "transB", 1);
    ob.node("Relu", {"h"}, {"r"}, "relu");
    test::OnnxBuilder::attrInt(ob.node("Gemm", {"r", "W2"}, {"y"}, "fc2"), "transB", 1);
    models.push_back(finish(ob, x, "clip_refine_chain" + std::to_string(seed)));
    ASSERT_TRUE(models.back().model && models.back().data);
  }
  for (const Built& b : models) {
    RefineRun r = analyse(b, 2);
    ASSERT_TRUE(r.result);
    ASSERT_FALSE(r.result->clipChoices.empty());
    for (const auto& [id, c] : r.result->clipChoices) {
      ASSERT_TRUE(c.refineRan);
      EXPECT_GE(c.refineCheckAfterDb, c.refineCheckBeforeDb) << b.model->graph.value(id).name;
      EXPECT_LE(c.refinePasses, 2);
      // A tensor the refinement kept reports nothing replaced.
      if (c.refinedFrom.empty()) {
        EXPECT_EQ(c.refinedFromAmax, 0.f);
      }
    }
  }
}

TEST(ClipRefine, CandidatesAreAGridAroundTheCurrentAmaxAndTheDistinctExtras) {
  const std::vector<ClipCandidate> extra{{"mse", 1.01f}, {"max", 4.f}, {"entropy", 0.3f}, {"percentile", 4.05f}};
  auto c = refineCandidates(1.f, 4.f, extra);
  std::vector<float> amax;
  for (const auto& x : c) amax.push_back(x.amax);
  // current * 2^(k/4), k = -1, 1, -2, 2, then max and entropy (mse is within 3% of current,
  // percentile within 3% of max).
  ASSERT_EQ(c.size(), 6u);
  EXPECT_NEAR(amax[0], std::pow(2.f, -0.25f), 1e-5);
  EXPECT_NEAR(amax[1], std::pow(2.f, 0.25f), 1e-5);
  EXPECT_NEAR(amax[2], std::pow(2.f, -0.5f), 1e-5);
  EXPECT_NEAR(amax[3], std::pow(2.f, 0.5f), 1e-5);
  EXPECT_EQ(c[4].name, "max");
  EXPECT_EQ(c[5].name, "entropy");
  // Never above the tensor's max.
  for (const auto& x : refineCandidates(3.9f, 4.f, {})) EXPECT_LE(x.amax, 4.f);
}

TEST(ClipRefine, CandidatesPutTheQuarterStepPairAndTheLayerwiseWinnerFirst) {
  // extra[0] is the layer-wise winner: it comes right after the 2^(+-1/4) pair, before the
  // half steps and the histogram methods, so that a budget of 3 candidates tries exactly these.
  const std::vector<ClipCandidate> extra{{"clip_0.25", 0.5f}, {"mse", 3.f}, {"max", 4.f}};
  auto c = refineCandidates(1.f, 4.f, extra);
  ASSERT_EQ(c.size(), 7u);
  EXPECT_NEAR(c[0].amax, std::pow(2.f, -0.25f), 1e-5);
  EXPECT_NEAR(c[1].amax, std::pow(2.f, 0.25f), 1e-5);
  EXPECT_EQ(c[2].name, "clip_0.25");
  EXPECT_NEAR(c[3].amax, std::pow(2.f, -0.5f), 1e-5);
  EXPECT_NEAR(c[4].amax, std::pow(2.f, 0.5f), 1e-5);
  EXPECT_EQ(c[5].name, "mse");
  EXPECT_EQ(c[6].name, "max");
  // An empty slot (no layer-wise winner: amax 0) is skipped.
  auto d = refineCandidates(1.f, 4.f, {{"", 0.f}, {"max", 4.f}});
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[4].name, "max");
}

namespace {

// The refinement with the budget `refine` (its held-out samples: the last half).
RefineRun analyseWithBudget(const Built& b, RefineOptions refine, int sessionRealisations = 1) {
  AnalysisOptions ao;
  ao.realisations = sessionRealisations;
  ao.calibration.method = CalibMethod::Auto;
  ao.threads = 2;
  ao.sensitivity = false;
  ao.clipSearch.maxSamples = kSamples;
  ao.clipSearch.checkSamples = kSamples / 2;
  ao.clipSearch.refine = refine;
  ao.clipSearch.refine.heldOutSamples = kSamples / 2;
  return test::calibrateAndAnalyse(b, ao);
}

}  // namespace

TEST(ClipRefine, ABudgetOfOneTensorRefinesOnlyTheNoisiest) {
  // The masked model has two activation points, x (fc1's input, coarse: its outliers keep the
  // layer-wise amax high, the noisiest) and r (fc2's input). With the whole budget both are tried;
  // with a budget of one tensor only x is, and it still gets the refinement's gain.
  Built b = buildReluMasked();
  ASSERT_TRUE(b.model && b.data);
  RefineRun all = analyseWithBudget(b, {.passes = 1});
  RefineRun one = analyseWithBudget(b, {.passes = 1, .maxTargets = 1});
  ASSERT_TRUE(all.result && one.result);
  const ValueId x = b.model->graph.findValue("x"), r = b.model->graph.findValue("r");
  ASSERT_EQ(one.result->clipChoices.count(x), 1u);
  ASSERT_EQ(one.result->clipChoices.count(r), 1u);
  const ClipChoice& ax = all.result->clipChoices.at(x);
  const ClipChoice& ox = one.result->clipChoices.at(x);
  EXPECT_EQ(ax.refineTargetsTried, 2);
  EXPECT_EQ(ox.refineTargetsTried, 1);
  EXPECT_LT(ox.refineConeRuns, ax.refineConeRuns);
  EXPECT_FALSE(ox.refinedFrom.empty());  // x, the noisiest, refined
  EXPECT_TRUE(one.result->clipChoices.at(r).refinedFrom.empty());  // r not tried, so not moved
  EXPECT_GT(ox.refineCheckAfterDb, ox.refineCheckBeforeDb + 2.0);
}

TEST(ClipRefine, TheWorkCapStopsTheConeRunsAndIsReported) {
  Built b = buildReluMasked();
  ASSERT_TRUE(b.model && b.data);
  const ValueId x = b.model->graph.findValue("x");
  // No cap: every candidate runs, none capped.
  RefineRun free = analyseWithBudget(b, {.passes = 1});
  ASSERT_TRUE(free.result);
  const ClipChoice& f = free.result->clipChoices.at(x);
  EXPECT_EQ(f.refineCappedRuns, 0);
  EXPECT_EQ(f.refineWorkCap, 0.0);
  ASSERT_GT(f.refineWork, 0.0);
  // x's cone is the whole graph (1 run each), r's only fc2: caps below the free run's work stop it
  // within the cap, and a cap below any cone runs nothing and changes nothing.
  for (double cap : {0.5 * f.refineWork, 2.0, 1e-4}) {
    RefineRun c = analyseWithBudget(b, {.passes = 1, .workCap = cap});
    ASSERT_TRUE(c.result);
    const ClipChoice& cx = c.result->clipChoices.at(x);
    EXPECT_LE(cx.refineWork, cap + 1e-9) << cap;
    EXPECT_DOUBLE_EQ(cx.refineWorkCap, cap);
    EXPECT_GT(cx.refineCappedRuns, 0) << cap;
    EXPECT_LT(cx.refineConeRuns, f.refineConeRuns) << cap;
    EXPECT_GE(cx.refineCheckAfterDb, cx.refineCheckBeforeDb) << cap;
    if (cap < 1e-3) {
      EXPECT_EQ(cx.refineConeRuns, 0);
      EXPECT_EQ(cx.refineCheckAfterDb, cx.refineCheckBeforeDb);
      for (const auto& [id, ch] : c.result->clipChoices) EXPECT_TRUE(ch.refinedFrom.empty());
    }
  }
  ReportContext ctx;
  RefineRun c = analyseWithBudget(b, {.passes = 1, .workCap = 2.0});
  ASSERT_TRUE(c.result);
  const std::string json = reportJson(*b.model, *c.result, ctx);
  EXPECT_NE(json.find("\"work_cap\": 2"), std::string::npos) << json.substr(0, 3000);
  EXPECT_NE(json.find("\"capped_runs\""), std::string::npos);
}

TEST(ClipRefine, FewerCandidatesAndThePassGainStopCutTheRuns) {
  Built b = buildReluMasked();
  ASSERT_TRUE(b.model && b.data);
  const ValueId x = b.model->graph.findValue("x");
  RefineRun all = analyseWithBudget(b, {.passes = 4});
  RefineRun two = analyseWithBudget(b, {.passes = 4, .maxCandidates = 2});
  // A pass must gain 1000 dB to be followed by another: one pass only.
  RefineRun stop = analyseWithBudget(b, {.passes = 4, .minPassGainDb = 1000.0});
  ASSERT_TRUE(all.result && two.result && stop.result);
  const ClipChoice& a = all.result->clipChoices.at(x);
  const ClipChoice& t = two.result->clipChoices.at(x);
  const ClipChoice& s = stop.result->clipChoices.at(x);
  // At most 2 candidates per tensor and pass (2 tensors).
  EXPECT_LE(t.refineConeRuns, 2 * 2 * t.refinePasses);
  EXPECT_LT(t.refineConeRuns, a.refineConeRuns);
  EXPECT_GE(t.refineCheckAfterDb, t.refineCheckBeforeDb);
  EXPECT_GT(a.refinePasses, 1);  // without the stop, the masked model takes a second pass
  EXPECT_EQ(s.refinePasses, 1);
  EXPECT_GE(s.refineCheckAfterDb, s.refineCheckBeforeDb);
}

// ---- The refinement on the mean of realisations (RefineOptions::realisations, docs/quality.md
// "Refinement on the mean of realisations").

namespace {

// realisations' tie model (tests/analysis/test_realisations.cpp): x [8 samples, 4, 128] holds
// (k + 1/2) / 64 and 127/64 once a sample, so that max calibration gives x the scale 1/64 exactly
// and every other value sits on a rounding tie; one MatMul to two columns (64 output values a
// sample). Realisation 0 rounds the ties half to even, a dithered one all toward zero or all away.
Built buildTies() {
  test::OnnxBuilder b(13);
  const int64_t n = 128, rows = 4, cols = 2, samples = 8;
  b.input("x", {-1, rows, n}).output("y", {-1, rows, cols});
  std::mt19937 rng(17);
  b.initializer("w", {n, cols}, test::randomValues((size_t)(n * cols), rng, -0.25f, 0.25f));
  b.node("MatMul", {"x", "w"}, {"y"}, "mm");
  std::uniform_int_distribution<int> k(0, 126);
  Tensor x(DType::Float, {samples, rows, n});
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t i = 0; i < rows * n; ++i)
      x.data<float>()[s * rows * n + i] = i == s ? 127.f / 64 : ((float)k(rng) + 0.5f) / 64;
  return test::buildWithData(b, x, "clip_refine_ties", 1);
}

// refineClipsOnOutputs on a copy of `s`'s state with one target (`value`, `candidates`), every node
// quantized, the first 8 samples checked.
Result<ClipRefineResult> refineOne(const QuantSession& s, const CalibrationData& data, ValueId value,
                                   const std::vector<ClipCandidate>& candidates, int realisations,
                                   uint64_t memoryBudgetBytes = 0) {
  QuantState state = s.state();
  const Graph& g = s.model().graph;
  const NodePaths paths = plainPaths(g.nodes.size());
  const std::vector<OutputKind> kinds(g.outputs.size(), OutputKind::Auto);
  const PassContext c{s.model(), s.executor(), state, paths, s.cancelToken(), kinds};
  RefineOptions o;
  o.passes = 1;
  o.checkSamples = 8;
  o.heldOutSamples = 0;
  o.realisations = realisations;
  o.memoryBudgetBytes = memoryBudgetBytes;
  return refineClipsOnOutputs(c, s.plan(), state.act, {RefineTarget{value, candidates}},
                              std::vector<char>(g.nodes.size(), 1), data, o, HighPrecision::Fp32);
}

// `b` calibrated with max (x's scale exactly 1/64 on the ties model) and analysed, without sensitivity.
RefineRun analysedWithMax(const Built& b) {
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.threads = 2;
  ao.sensitivity = false;
  return test::calibrateAndAnalyse(b, ao);
}

}  // namespace

TEST(ClipRefine, OnTheMeanOfRealisationsAGainOfRealisationZeroAloneIsNotKept) {
  // Two candidates move x's scale by +-3e-7 (2-3 float steps of 1/64): on realisation 0 they turn
  // the half-to-even ties all down or all up, a change of the realisation-0 figure that is pure
  // noise (which way ties go); on a dithered realisation (scales x (1 + 1e-6 n)) the dither
  // outweighs them and the candidate rounds as the current scale does. Scored on realisation 0
  // (R = 1) the better of the two is kept; on the mean of 8 it is not: its mean gain is realisation
  // 0's over 8, within 2 standard errors.
  Built b = buildTies();
  ASSERT_TRUE(b.model && b.data);
  RefineRun run = analysedWithMax(b);
  ASSERT_TRUE(run.result);
  const ValueId x = b.model->graph.findValue("x");
  ASSERT_EQ(run.session->state().act.count(x), 1u);
  const float amax = run.session->state().act.at(x).amax;
  ASSERT_FLOAT_EQ(run.session->state().act.at(x).scale, 1.f / 64);
  const std::vector<ClipCandidate> noise{{"up", amax * (1.f + 3e-7f)}, {"down", amax * (1.f - 3e-7f)}};
  auto one = refineOne(*run.session, *b.data, x, noise, 1);
  auto eight = refineOne(*run.session, *b.data, x, noise, 8);
  ASSERT_TRUE(one) << one.status().message();
  ASSERT_TRUE(eight) << eight.status().message();
  std::printf("ties, R = 1: %.3f -> %.3f dB (%zu kept); R = 8: %.3f -> %.3f dB, mean %.3f -> %.3f (%zu kept, %d within the margin)\n",
              one->checkBeforeDb, one->checkAfterDb, one->changed.size(), eight->checkBeforeDb, eight->checkAfterDb,
              eight->checkMeanBeforeDb, eight->checkMeanAfterDb, eight->changed.size(), eight->rejectedByMargin);
  EXPECT_EQ(one->realisations, 1);
  EXPECT_EQ(eight->realisations, 8);
  EXPECT_EQ(one->coneRuns, 2);
  EXPECT_EQ(eight->coneRuns, 2);
  // Realisation 0 alone sees a gain (more than a noise-free change would give: ~1 dB) and keeps it.
  ASSERT_EQ(one->changed.size(), 1u);
  EXPECT_GT(one->checkAfterDb, one->checkBeforeDb + 0.3);
  // The mean of 8 does not; the figures are left as they were.
  EXPECT_TRUE(eight->changed.empty());
  EXPECT_GE(eight->rejectedByMargin, 1);
  EXPECT_EQ(eight->checkAfterDb, eight->checkBeforeDb);
  EXPECT_EQ(eight->checkMeanAfterDb, eight->checkMeanBeforeDb);
  EXPECT_EQ(eight->checkBeforeDb, one->checkBeforeDb) << "realisation 0 is the same in both";
}

TEST(ClipRefine, OnTheMeanOfRealisationsARealGainIsKept) {
  // The masked model's gain (the clip of x far below its max, +2 dB and more on held-out samples
  // too) is no noise: scored on the mean of 4 realisations it is kept as on realisation 0, and the
  // mean of the 8 measuring realisations rises on the held-out half as well.
  Built b = buildReluMasked();
  ASSERT_TRUE(b.model && b.data);
  RefineRun off = analyseWithBudget(b, {.passes = 0});
  RefineRun four = analyseWithBudget(b, {.passes = 1, .realisations = 4});
  ASSERT_TRUE(off.result && four.result);
  const ValueId x = b.model->graph.findValue("x");
  const ClipChoice& c = four.result->clipChoices.at(x);
  ASSERT_TRUE(c.refineRan);
  EXPECT_EQ(c.refineRealisations, 4);
  EXPECT_FALSE(c.refinedFrom.empty());
  EXPECT_LT(c.amax, 0.75f * off.result->clipChoices.at(x).amax);
  EXPECT_EQ(c.refineMeasureRealisations, 8);
  EXPECT_GT(c.refineCheckMeanAfterDb, c.refineCheckMeanBeforeDb + 2.0);
  EXPECT_GT(c.refineHeldOutMeanAfterDb, c.refineHeldOutMeanBeforeDb + 2.0);
  // report.json carries the realisations and the mean figures.
  ReportContext ctx;
  const std::string json = reportJson(*b.model, *four.result, ctx);
  EXPECT_NE(json.find("\"realisations\": 4"), std::string::npos) << json.substr(0, 3000);
  EXPECT_NE(json.find("\"held_out_mean_snr_db_after\""), std::string::npos);
}

TEST(ClipRefine, TheSessionsRealisationsAreUsedOnlyWhenAskedFor) {
  // The refinement holds the check samples' tables once per realisation (rec at R = 8: 20.7 GB), so
  // a session with realisations (--realisations 4, or auto's 8) still refines on realisation 0
  // unless RefineOptions::realisations is 0 (--calibration-refine-realisations 0).
  Built b = buildReluMasked();
  ASSERT_TRUE(b.model && b.data);
  RefineRun plain = analyseWithBudget(b, {.passes = 1}, 4);
  RefineRun session = analyseWithBudget(b, {.passes = 1, .realisations = 0}, 4);
  ASSERT_TRUE(plain.result && session.result);
  const ValueId x = b.model->graph.findValue("x");
  ASSERT_TRUE(plain.result->clipChoices.at(x).refineRan);
  EXPECT_EQ(plain.result->clipChoices.at(x).refineRealisations, 1);
  EXPECT_EQ(session.result->clipChoices.at(x).refineRealisations, 4);
}

TEST(ClipRefine, MoreRealisationsThanTheMemoryBudgetHoldsAreRefusedInOneLine) {
  // The check samples' tables are held once per realisation (rec at R = 8: 20.7 GB, killed): with
  // R > 1 the refinement estimates them from the first table and refuses above the budget, before
  // holding them; R = 1 is what the refinement always held and is not refused.
  Built b = buildTies();
  ASSERT_TRUE(b.model && b.data);
  RefineRun run = analysedWithMax(b);
  ASSERT_TRUE(run.result);
  const ValueId x = b.model->graph.findValue("x");
  const float amax = run.session->state().act.at(x).amax;
  const std::vector<ClipCandidate> cands{{"half", amax * 0.5f}};
  auto refused = refineOne(*run.session, *b.data, x, cands, 8, 1024);
  ASSERT_FALSE(refused);
  const std::string m = refused.status().message();
  EXPECT_NE(m.find("--calibration-refine-realisations 8"), std::string::npos) << m;
  EXPECT_NE(m.find("memory budget"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(run.session->state().act.at(x).amax, amax);
  // A budget that holds the 8 tables, and R = 1 under the small budget, run.
  EXPECT_TRUE(refineOne(*run.session, *b.data, x, cands, 8, uint64_t(1) << 30));
  EXPECT_TRUE(refineOne(*run.session, *b.data, x, cands, 1, 1024));
}
