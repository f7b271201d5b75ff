// --what-if (QuantState::whatIf, core/analysis/quant_state.h): the analysis-only bounds of what a
// remedy family could buy. A built model where the answer is known: a 1x1 Conv whose input has two
// channels two decades apart (x * [1, 0.01]) and weights that make both channels count as much in the
// output (w[:, 1] = 100 x a weight of the size of w[:, 0]). Per tensor, the small channel is rounded
// to a step or two of the large one's scale; per channel each has its own scale, and the Conv's
// activation SNR rises by far more than 20 dB. With the weights in float the weight SNR is infinite
// and the node's layer-wise error is its activation-only error, the same as with quantized weights.
// The fallback runs under it, and an export refuses it in one line (core and CLI).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "core/analysis/quant_session.h"
#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "tests/support/remedy_helpers.h"
#include "tests/support/sensitivity_model.h"
#include "tests/support/session_helpers.h"

using namespace qs;
using namespace qs::test;

namespace {

constexpr float kSmall = 0.01f;  // channel 1's scale against channel 0's: two decades

// x [1, 2, 8, 8] -> Mul "scale" by [1, 0.01] per channel -> h -> Conv "conv" 3x3, group 2 (each output
// reads one channel; channel 1's weights 100x channel 0's, so both outputs are of one size) -> y.
OnnxBuilder twoDecadesBuilder() {
  OnnxBuilder b(13);
  b.input("x", {1, 2, 8, 8}).output("y", {1, 2, 8, 8});
  b.initializer("s", {1, 2, 1, 1}, {1.f, kSmall});
  std::mt19937 rng(5);
  std::vector<float> w = randomValues(18, rng, -1.f, 1.f);
  for (size_t i = 9; i < 18; ++i) w[i] /= kSmall;
  b.initializer("w", {2, 1, 3, 3}, w);
  b.node("Mul", {"x", "s"}, {"h"}, "scale");
  auto& conv = b.node("Conv", {"h", "w"}, {"y"}, "conv");
  OnnxBuilder::attrInt(conv, "group", 2);
  OnnxBuilder::attrInts(conv, "pads", {1, 1, 1, 1});
  return b;
}

struct Analysed {
  std::shared_ptr<Model> model;
  std::shared_ptr<const CalibrationData> data;
  std::unique_ptr<QuantSession> session;
  std::shared_ptr<const AnalysisResult> result;
};

// `model` with `samples` random samples, a session quantizing only "conv" under the what-if,
// calibrated with max (the result left empty).
Analysed calibratedConv(std::shared_ptr<Model> model, int64_t samples, WhatIf whatIf, ChannelAmax rule) {
  Analysed a;
  a.model = std::move(model);
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.threads = 1;
  ao.whatIf = whatIf;
  ao.whatIfChannelAmax = rule;
  QuantConfig config;
  config.nodesToQuantize = {"conv"};
  a.data = randomData(*a.model, samples);
  a.session = calibrated(a.model, *a.data, ao, config).session;
  return a;
}

Analysed analysed(WhatIf whatIf, ChannelAmax rule = ChannelAmax::Capped, float amaxFraction = 1) {
  Analysed a = calibratedConv(builtModel(twoDecadesBuilder(), "two_decades.onnx"), 4, whatIf, rule);
  if (!a.session) return a;
  if (amaxFraction < 1) {
    const float amax = a.session->state().activation(a.model->graph.findValue("h"))->amax;
    EXPECT_TRUE(a.session->setActivationAmax({{"h", amax * amaxFraction}}));
  }
  auto r = a.session->analyze(a.data);
  EXPECT_TRUE(r) << r.status().message();
  if (r) a.result = *r;
  return a;
}

const NodeResult& convResult(const Analysed& a) { return a.result->nodes[(size_t)nodeNamed(*a.model, "conv")]; }

}  // namespace

TEST(WhatIf, NamesRoundTrip) {
  for (WhatIf w : {WhatIf::None, WhatIf::WeightsFloat, WhatIf::ActivationsPerChannel, WhatIf::Both}) {
    WhatIf back = WhatIf::None;
    ASSERT_TRUE(parseWhatIf(whatIfName(w), back));
    EXPECT_EQ(back, w);
  }
  WhatIf w = WhatIf::None;
  EXPECT_FALSE(parseWhatIf("weights", w));
}

TEST(WhatIf, ActivationsPerChannelScalesEachChannelByItsOwnMax) {
  Analysed pt = analysed(WhatIf::None), pc = analysed(WhatIf::ActivationsPerChannel);
  const NodeId conv = nodeNamed(*pc.model, "conv");
  // The channel maxima of h = x * [1, 0.01] over the data, computed here.
  double chMax[2] = {0, 0};
  for (int64_t b = 0; b < pc.data->batchCount(); ++b) {
    auto feeds = pc.data->batch(b);
    ASSERT_TRUE(feeds);
    const Tensor& x = (*feeds)[0].tensor;
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 64; ++i)
        chMax[c] = std::max(chMax[c], (double)std::fabs(x.data<float>()[c * 64 + i] * (c ? kSmall : 1.f)));
  }
  const auto& channels = pc.session->state().actChannels;
  auto it = channels.find({conv, (size_t)0});
  ASSERT_NE(it, channels.end());
  ASSERT_EQ(it->second.scale.size(), 2u);
  EXPECT_EQ(it->second.axis, 1);
  // Max calibration: the tensor's amax is channel 0's max, so each channel's amax is its own max.
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(it->second.scale[(size_t)c], chMax[c] / 127.0, 1e-6 * chMax[c]);
  // The tensor's own (per-tensor) scale is kept for the report.
  EXPECT_FLOAT_EQ(pc.session->state().activation(it->second.value)->scale,
                  pt.session->state().activation(it->second.value)->scale);

  const NodeResult &a = convResult(pt), &b = convResult(pc);
  EXPECT_GT(b.activationSnrDb, a.activationSnrDb + 20) << a.activationSnrDb << " -> " << b.activationSnrDb;
  EXPECT_GT(b.layerwise.snrDb, a.layerwise.snrDb + 15) << a.layerwise.snrDb << " -> " << b.layerwise.snrDb;
  EXPECT_NEAR(b.weightSnrDb, a.weightSnrDb, 1e-6);  // the weights are not touched
  EXPECT_GT(pc.result->worstOutputSnrDb(), pt.result->worstOutputSnrDb() + 15);
}

TEST(WhatIf, TheChannelAmaxRules) {
  // The tensor's range halved: capped clips channel 0 at it and leaves channel 1 (100x below) whole;
  // scaled clips both at half their max.
  Analysed capped = analysed(WhatIf::ActivationsPerChannel, ChannelAmax::Capped, 0.5f);
  Analysed scaled = analysed(WhatIf::ActivationsPerChannel, ChannelAmax::Scaled, 0.5f);
  const NodeId conv = nodeNamed(*capped.model, "conv");
  const auto& c = capped.session->state().actChannels.at({conv, (size_t)0}).scale;
  const auto& s = scaled.session->state().actChannels.at({conv, (size_t)0}).scale;
  const float tensorScale = capped.session->state().activation(capped.model->graph.findValue("h"))->scale;
  EXPECT_FLOAT_EQ(c[0], tensorScale);
  EXPECT_FLOAT_EQ(s[0], tensorScale);
  EXPECT_NEAR(s[1], c[1] / 2, 1e-6 * c[1]);
  EXPECT_GT(convResult(capped).activationSnrDb, convResult(scaled).activationSnrDb);
  ChannelAmax back = ChannelAmax::Capped;
  EXPECT_TRUE(parseChannelAmax(channelAmaxName(ChannelAmax::Scaled), back));
  EXPECT_EQ(back, ChannelAmax::Scaled);
  EXPECT_FALSE(parseChannelAmax("clipped", back));
}

namespace {

// x [1, 2, 256, 256] -> Add "bump" (one element of channel 0 raised by kOutlier) -> h -> Conv "conv" 3x3,
// group 2 -> y. Channel 0 holds one far outlier among 65536 values a sample; channel 1 none.
constexpr float kOutlier = 40.f;
constexpr int64_t kSide = 256;

OnnxBuilder outlierBuilder() {
  OnnxBuilder b(13);
  b.input("x", {1, 2, kSide, kSide}).output("y", {1, 2, kSide, kSide});
  std::vector<float> bump((size_t)(2 * kSide * kSide), 0.f);
  bump[(size_t)(kSide * 100 + 100)] = kOutlier;  // channel 0, row 100, column 100
  b.initializer("bump", {1, 2, kSide, kSide}, bump);
  std::mt19937 rng(9);
  b.initializer("w", {2, 1, 3, 3}, randomValues(18, rng, -1.f, 1.f));
  b.node("Add", {"x", "bump"}, {"h"}, "raise");
  auto& conv = b.node("Conv", {"h", "w"}, {"y"}, "conv");
  OnnxBuilder::attrInt(conv, "group", 2);
  OnnxBuilder::attrInts(conv, "pads", {1, 1, 1, 1});
  return b;
}

Analysed outlierRun(ChannelAmax rule) {
  return calibratedConv(builtModel(outlierBuilder(), "outlier.onnx"), 2, WhatIf::ActivationsPerChannel, rule);
}

// Channel c's squared error over the data at scale `scale`, h = x + bump computed here.
double channelError(const Analysed& a, int c, float scale) {
  double sum = 0;
  for (int64_t b = 0; b < a.data->batchCount(); ++b) {
    auto feeds = a.data->batch(b);
    EXPECT_TRUE(feeds);
    const float* x = (*feeds)[0].tensor.data<float>() + c * kSide * kSide;
    for (int64_t i = 0; i < kSide * kSide; ++i) {
      const float h = x[i] + (c == 0 && i == kSide * 100 + 100 ? kOutlier : 0.f);
      const float q = std::min(std::max(std::nearbyint(h / scale), -128.f), 127.f) * scale;
      sum += ((double)h - q) * ((double)h - q);
    }
  }
  return sum;
}

}  // namespace

TEST(WhatIf, SearchedClipsAnOutlierChannelBelowItsMax) {
  Analysed capped = outlierRun(ChannelAmax::Capped), searched = outlierRun(ChannelAmax::Searched);
  const NodeId conv = nodeNamed(*capped.model, "conv");
  const auto& c = capped.session->state().actChannels.at({conv, (size_t)0}).scale;
  const auto& s = searched.session->state().actChannels.at({conv, (size_t)0}).scale;
  ASSERT_EQ(c.size(), 2u);
  ASSERT_EQ(s.size(), 2u);
  // Max calibration: capped's channel 0 is rounded at its max (the outlier's) / 127; searched clips it.
  const float tensorScale = capped.session->state().activation(capped.model->graph.findValue("h"))->scale;
  EXPECT_FLOAT_EQ(c[0], tensorScale);
  EXPECT_GT(tensorScale, kOutlier / 127.f);
  EXPECT_LT(s[0], c[0] * 0.95f) << s[0] << " against " << c[0];
  // Its squared error, computed here, is below capped's; channel 1's is not above capped's.
  const double e0c = channelError(capped, 0, c[0]), e0s = channelError(capped, 0, s[0]);
  const double e1c = channelError(capped, 1, c[1]), e1s = channelError(capped, 1, s[1]);
  EXPECT_LT(e0s, e0c * 0.95) << e0s << " against " << e0c;
  EXPECT_LE(e1s, e1c * (1 + 1e-9)) << e1s << " against " << e1c;
  // The session's summary is those sums.
  const QuantSession::ChannelClipSearch& sum = searched.session->channelClipSearch();
  EXPECT_EQ(sum.points, 1);
  EXPECT_EQ(sum.channels, 2);
  EXPECT_GE(sum.belowCapped, 1);
  EXPECT_NEAR(sum.errorCapped, e0c + e1c, 1e-6 * (e0c + e1c));
  EXPECT_NEAR(sum.errorSearched, e0s + e1s, 1e-6 * (e0s + e1s));
  EXPECT_EQ(capped.session->channelClipSearch().channels, 0);
  // The candidates: capped's first, then the channel max down to 1/32 of it.
  const std::vector<double> cand = searchedClipCandidates(10.0, 4.0);
  ASSERT_EQ(cand.size(), (size_t)kSearchedClipSteps + 2);
  EXPECT_EQ(cand[0], 4.0);
  EXPECT_EQ(cand[1], 10.0);
  EXPECT_NEAR(cand.back(), 10.0 / 32, 1e-12);
  ChannelAmax back = ChannelAmax::Capped;
  EXPECT_TRUE(parseChannelAmax("searched", back));
  EXPECT_EQ(back, ChannelAmax::Searched);
  EXPECT_STREQ(channelAmaxName(ChannelAmax::Searched), "searched");
}

TEST(WhatIf, WeightsFloatLeavesTheActivationErrorAlone) {
  Analysed pt = analysed(WhatIf::None), wf = analysed(WhatIf::WeightsFloat);
  const NodeResult &a = convResult(pt), &b = convResult(wf);
  ASSERT_TRUE(std::isfinite(a.weightSnrDb));
  EXPECT_TRUE(std::isinf(b.weightSnrDb) && b.weightSnrDb > 0) << b.weightSnrDb;
  // The node's error is its activation-only error, which is the one with quantized weights too
  // (to the integer Conv's summation order, which the default run may take).
  EXPECT_NEAR(b.layerwise.snrDb, b.activationSnrDb, 1e-9);
  EXPECT_NEAR(b.activationSnrDb, a.activationSnrDb, 0.01);
  // One quantized node, read by the output alone: the output's error is the node's.
  EXPECT_NEAR(wf.result->worstOutputSnrDb(), b.layerwise.snrDb, 1e-6);
  // The weight scales stay computed (the report shows them).
  ASSERT_EQ(wf.result->weights.size(), 1u);
  EXPECT_EQ(wf.result->weights[0].scale, pt.result->weights[0].scale);

  Analysed both = analysed(WhatIf::Both), pc = analysed(WhatIf::ActivationsPerChannel);
  EXPECT_TRUE(std::isinf(convResult(both).weightSnrDb));
  EXPECT_NEAR(convResult(both).layerwise.snrDb, convResult(pc).activationSnrDb, 1e-9);
}

namespace {

// The model written to a file, and a request on random data with a target between the per-tensor
// and the per-channel output SNR.
struct RequestOnFile {
  std::string dir, model;
  AnalysisRequest rq;
};

RequestOnFile requestOnFile(const std::string& tag) {
  RequestOnFile f;
  f.dir = (std::filesystem::temp_directory_path() / ("qs_what_if_" + tag + "_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(f.dir);
  f.model = f.dir + "/two_decades.onnx";
  twoDecadesBuilder().save(f.model);
  f.rq.modelPath = f.model;
  f.rq.data.maxSamples = 4;
  f.rq.data.batchSize = 1;
  f.rq.data.seed = 3;
  f.rq.calibration.method = CalibMethod::Max;
  f.rq.methodGiven = true;
  f.rq.threads = 1;
  f.rq.config.nodesToQuantize = {"conv"};
  return f;
}

}  // namespace

TEST(WhatIf, TheFallbackRunsUnderIt) {
  RequestOnFile f = requestOnFile("fallback");
  Analysed pt = analysed(WhatIf::None), pc = analysed(WhatIf::ActivationsPerChannel);
  const double lo = pt.result->worstOutputSnrDb(), hi = pc.result->worstOutputSnrDb();
  ASSERT_GT(hi, lo + 15);
  f.rq.targetSnrDb = (lo + hi) / 2;
  auto plain = runAnalysis(f.rq);
  ASSERT_TRUE(plain) << plain.status().message();
  EXPECT_EQ(plain->fallback.size(), 1u);  // per tensor the Conv must go
  f.rq.whatIf = WhatIf::ActivationsPerChannel;
  auto whatIf = runAnalysis(f.rq);
  ASSERT_TRUE(whatIf) << whatIf.status().message();
  EXPECT_EQ(whatIf->fallback.size(), 0u);  // per channel it reaches the target quantized
  EXPECT_GE(whatIf->result()->worstOutputSnrDb(), f.rq.targetSnrDb);
  EXPECT_EQ(runSettings(*whatIf).at("what_if"), "activations-per-channel");
  EXPECT_EQ(runSettings(*plain).count("what_if"), 0u);
  // And the export of that run is refused, in one line naming the option.
  ExportTarget target;
  target.outputDir = f.dir + "/out";
  auto bundle = buildExportBundle(*whatIf, target);
  ASSERT_FALSE(bundle);
  EXPECT_NE(bundle.status().message().find("--what-if activations-per-channel"), std::string::npos)
      << bundle.status().message();
  EXPECT_EQ(bundle.status().message().find('\n'), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(target.outputDir + "/quantized.onnx"));
  std::filesystem::remove_all(f.dir);
}

TEST(WhatIf, RefusedWhereItCannotApply) {
  RequestOnFile f = requestOnFile("refused");
  f.rq.whatIf = WhatIf::Both;
  f.rq.calibration.highPrecision = HighPrecision::Fp16;
  Status st = validateRequest(f.rq);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("--what-if both"), std::string::npos) << st.message();
  f.rq.calibration.highPrecision = HighPrecision::Fp32;
  f.rq.loadConfig = f.dir + "/quant_cfg.json";
  st = validateRequest(f.rq);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("--load-config"), std::string::npos) << st.message();
  std::filesystem::remove_all(f.dir);
}

TEST(WhatIf, TheCliAnalyzesItAndRefusesToExportIt) {
  RequestOnFile f = requestOnFile("cli");
  const std::string report = f.dir + "/report.json";
  const std::string common = f.model + " --calibration-method max --calibration-size 4 --threads 1 --no-sensitivity";
  const std::string out = cliOutput("analyze " + common + " --what-if both --report " + report);
  EXPECT_NE(out.find("what-if both: these figures are a bound no engine runs"), std::string::npos) << out;
  nlohmann::json j = nlohmann::json::parse(readText(report), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["settings"]["what_if"], "both");
  EXPECT_EQ(j["settings"]["what_if_channel_amax"], "capped");
  EXPECT_EQ(runCommand("/usr/bin/python3 " + std::string(QS_SOURCE_DIR) + "/tests/support/validate_json.py " +
                       std::string(QS_SOURCE_DIR) + "/docs/report.schema.json " + report),
            0);

  const std::string cmd = std::string(QS_BINARY) + " export " + common + " --what-if weights-float --output-dir " +
                          f.dir + "/out > " + f.dir + "/err.txt 2>&1";
  EXPECT_NE(runCommand(cmd), 0);
  const std::string err = readText(f.dir + "/err.txt");
  EXPECT_NE(err.find("export: --what-if weights-float is an analysis-only bound"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(std::filesystem::exists(f.dir + "/out/quantized.onnx"));

  EXPECT_NE(runCommand(std::string(QS_BINARY) + " analyze " + common + " --what-if sideways > /dev/null 2>&1"), 0);

  // --what-if-channel-amax searched: parsed, summarised, and named in report.json; junk refused in one line.
  const std::string searched =
      cliOutput("analyze " + common + " --what-if activations-per-channel --what-if-channel-amax searched --report " +
                report);
  EXPECT_NE(searched.find("what-if channel clips searched (per-channel MSE, 1 points)"), std::string::npos) << searched;
  j = nlohmann::json::parse(readText(report), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << searched;
  EXPECT_EQ(j["settings"]["what_if_channel_amax"], "searched");
  EXPECT_EQ(runCommand("/usr/bin/python3 " + std::string(QS_SOURCE_DIR) + "/tests/support/validate_json.py " +
                       std::string(QS_SOURCE_DIR) + "/docs/report.schema.json " + report),
            0);
  const std::string junk = std::string(QS_BINARY) + " analyze " + common +
                           " --what-if activations-per-channel --what-if-channel-amax best > " + f.dir +
                           "/junk.txt 2>&1";
  EXPECT_NE(runCommand(junk), 0);
  const std::string junkErr = readText(f.dir + "/junk.txt");
  EXPECT_NE(junkErr.find("--what-if-channel-amax 'best': expected capped, scaled or searched"), std::string::npos)
      << junkErr;
  EXPECT_EQ(std::count(junkErr.begin(), junkErr.end(), '\n'), 1) << junkErr;
  std::filesystem::remove_all(f.dir);
}
