// The `auto` calibration method (core/analysis/clip_search.h) on models built in code: never worse
// than the best histogram method where a few large values feed a Gemm (the ResNet failure, where
// entropy clipped the final Gemm's input to 0.12 of a 1.86 max), its winner reported per tensor, the
// sparse-histogram warning, the candidates, and auto as the command line's default.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "core/analysis/clip_search.h"
#include "core/analysis/quant_session.h"
#include "core/export/pipeline.h"
#include "core/export/report.h"
#include "core/io/npy.h"
#include "core/onnx/loader.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/session_helpers.h"

using namespace qs;

namespace {

constexpr int kIn = 64, kOut = 16, kSamples = 16;

using Built = test::BuiltModel;
using AutoRun = test::SessionRun;

// x [N, 64] -> Gemm(W [16, 64], transB) -> y. Most features are small (|x| ~ 0.03); features 0..3
// reach 1.0-1.86 on a few samples and carry large weights, so clipping them ruins y.
Built buildOutlierGemm() {
  std::mt19937 rng(7);
  std::normal_distribution<float> small(0.f, 0.03f);
  std::uniform_real_distribution<float> big(1.0f, 1.86f);
  std::vector<float> w((size_t)kOut * kIn), b(kOut, 0.01f), x((size_t)kSamples * kIn);
  for (int o = 0; o < kOut; ++o)
    for (int i = 0; i < kIn; ++i) w[(size_t)o * kIn + i] = (i < 4 ? 2.0f : 0.2f) * small(rng) / 0.03f;
  for (int s = 0; s < kSamples; ++s)
    for (int i = 0; i < kIn; ++i)
      x[(size_t)s * kIn + i] = (i < 4 && s % 3 == 0) ? big(rng) : std::fabs(small(rng));
  test::OnnxBuilder ob;
  ob.input("x", {-1, kIn}).output("y", {-1, kOut});
  ob.initializer("W", {kOut, kIn}, w);
  ob.initializer("B", {kOut}, b);
  test::OnnxBuilder::attrInt(ob.node("Gemm", {"x", "W", "B"}, {"y"}, "fc"), "transB", 1);
  return test::buildWithData(ob, Tensor::fromVector<float>(x, {kSamples, kIn}), "clip_search");
}

AutoRun analyse(const Built& b, CalibMethod method) {
  AnalysisOptions ao;
  ao.calibration.method = method;
  ao.threads = 2;
  ao.sensitivity = false;
  ao.clipSearch.maxSamples = kSamples;  // the search sees what the analysis measures
  ao.clipSearch.checkSamples = kSamples;
  return test::calibrateAndAnalyse(b, ao);
}

}  // namespace

TEST(ClipSearch, AutoIsNeverWorseThanTheBestMethodOnAnOutlierHeavyGemmInput) {
  Built b = buildOutlierGemm();
  ASSERT_TRUE(b.model && b.data);
  double best = -INFINITY;
  std::map<CalibMethod, double> snr;
  for (CalibMethod m : {CalibMethod::Max, CalibMethod::Entropy, CalibMethod::Percentile, CalibMethod::Mse}) {
    AutoRun r = analyse(b, m);
    ASSERT_TRUE(r.result);
    snr[m] = r.result->worstOutputSnrDb();
    best = std::max(best, snr[m]);
  }
  // The failure this guards against: some histogram method clips the outliers away.
  const double worst = std::min({snr[CalibMethod::Max], snr[CalibMethod::Entropy], snr[CalibMethod::Percentile],
                                 snr[CalibMethod::Mse]});
  EXPECT_GT(best - worst, 3.0) << "the model should separate the methods";
  AutoRun a = analyse(b, CalibMethod::Auto);
  ASSERT_TRUE(a.result);
  EXPECT_GE(a.result->worstOutputSnrDb(), best - 1e-6)
      << "max " << snr[CalibMethod::Max] << " entropy " << snr[CalibMethod::Entropy] << " percentile "
      << snr[CalibMethod::Percentile] << " mse " << snr[CalibMethod::Mse];
}

TEST(ClipSearch, WinnerIsReportedPerTensorAndOnlyForAuto) {
  Built b = buildOutlierGemm();
  ASSERT_TRUE(b.model && b.data);
  AutoRun a = analyse(b, CalibMethod::Auto);
  ASSERT_TRUE(a.result);
  const ValueId x = b.model->graph.findValue("x");
  ASSERT_EQ(a.result->clipChoices.count(x), 1u);
  const ClipChoice& c = a.result->clipChoices.at(x);
  EXPECT_FALSE(c.winner.empty());
  EXPECT_GT(c.candidates, kClipGridSteps);
  EXPECT_FLOAT_EQ(a.result->activations.at(x).amax, c.amax);
  EXPECT_LE(c.amax, c.absMax);
  EXPECT_GE(c.consumerSnrDb, c.bestMethodSnrDb);
  // The layer-wise measure is the graph output's here (one Gemm): the same figure.
  EXPECT_NEAR(c.consumerSnrDb, a.result->worstOutputSnrDb(), 1e-3);
  ReportContext ctx;
  const std::string json = reportJson(*b.model, *a.result, ctx);
  EXPECT_NE(json.find("\"winner\": \"" + c.winner + "\""), std::string::npos) << json.substr(0, 2000);
  EXPECT_NE(json.find("\"calibration_method\": \"auto\""), std::string::npos);

  AutoRun e = analyse(b, CalibMethod::Entropy);
  ASSERT_TRUE(e.result);
  EXPECT_TRUE(e.result->clipChoices.empty());
  EXPECT_EQ(reportJson(*b.model, *e.result, ctx).find("\"winner\""), std::string::npos);
}

TEST(ClipSearch, FewValuesWarningNamesTheTensor) {
  Built b = buildOutlierGemm();  // 16 x 64 = 1024 values, far below 16 per bin of 2048 bins
  ASSERT_TRUE(b.model && b.data);
  AutoRun a = analyse(b, CalibMethod::Auto);
  ASSERT_TRUE(a.session);
  const auto& w = a.session->calibrationWarnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("'x' (1024)"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("fewer than 32768"), std::string::npos) << w[0];
  // max reads no histogram: no warning.
  AutoRun m = analyse(b, CalibMethod::Max);
  ASSERT_TRUE(m.session);
  EXPECT_TRUE(m.session->calibrationWarnings().empty());
}

TEST(ClipSearch, CandidatesHoldEveryMethodAndTheGridWithoutDuplicates) {
  TensorStats st(2048);
  std::vector<float> v(100000);
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.f, 1.f);
  for (float& f : v) f = n(rng);
  v[0] = 40.f;  // one outlier: max far from the percentiles
  st.add(v.data(), (int64_t)v.size());
  EXPECT_FALSE(histogramTooSparse(st));
  CalibrationSettings cs;
  auto c = clipCandidates(st, cs);
  std::set<std::string> names;
  std::set<float> amaxes;
  std::string all;
  for (const auto& x : c) {
    all += x.name + "=" + std::to_string(x.amax) + " ";
    names.insert(x.name);
    amaxes.insert(x.amax);
    EXPECT_GT(x.amax, 0.f);
    EXPECT_LE(x.amax, st.absMax());
  }
  EXPECT_EQ(names.size(), c.size());
  EXPECT_EQ(amaxes.size(), c.size());
  // Every method's amax is a candidate, under the first name that gave it (here percentile 99.999
  // lands on the same bin edge as entropy and is not scored twice).
  for (const char* want : {"mse", "entropy", "percentile_99.9", "percentile_99.99", "max"})
    EXPECT_EQ(names.count(want), 1u) << want << ": " << all;
  for (double p : {99.9, 99.99, 99.999}) {
    cs.percentile = p;
    EXPECT_EQ(amaxes.count(st.amax(CalibMethod::Percentile, cs)), 1u) << p << ": " << all;
  }
  cs.percentile = 99.99;
  EXPECT_EQ(c.front().name, "mse");  // histogram methods first: they win ties
  EXPECT_EQ(names.count("clip_0.03125"), 1u);
  TensorStats empty;
  EXPECT_TRUE(clipCandidates(empty, cs).empty());
}

TEST(ClipSearch, AutoIsTheInt8DefaultAndParses) {
  EXPECT_EQ(defaultCalibrationMethod(QuantMode::Int8), CalibMethod::Auto);
  EXPECT_EQ(defaultCalibrationMethod(QuantMode::Fp8), CalibMethod::Max);
  CalibMethod m = CalibMethod::Max;
  EXPECT_TRUE(parseCalibrationMethod("auto", m));
  EXPECT_EQ(m, CalibMethod::Auto);
  EXPECT_EQ(calibMethodName(CalibMethod::Auto), "auto");
  const Status bad = parseCalibrationMethod("kl", m);
  EXPECT_FALSE(bad);
  EXPECT_NE(bad.message().find("auto, max, entropy, percentile or mse"), std::string::npos);
}
