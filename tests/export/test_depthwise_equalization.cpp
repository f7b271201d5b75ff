// Depthwise input equalization (core/analysis/depthwise_equalization.h), on by default for int8:
// on a model built in code (Conv -> depthwise Conv -> Conv, the first Conv's channels two
// decades apart) it keeps the float function, raises the predicted SNR, and quantized.onnx carries
// the rescaled weights: ONNX Runtime computes the predicted SNR within 0.5 dB. Off with
// --depthwise-equalize off; a bad value is refused in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/analysis/depthwise_equalization.h"
#include "core/export/pipeline.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"
#include "tests/support/sanitizer.h"
#include "tests/support/text_images.h"

using namespace qs;
using qs::test::exportRun;
using qs::test::readText;
using qs::test::runFile;
namespace fs = std::filesystem;


TEST(DepthwiseEqualization, KeepsTheFloatFunctionRaisesTheSnrAndReachesOnnxRuntime) {
  std::mt19937 rng(3);
  const std::string dir = test::makeTempDir("dw-equalize");
  const std::string model = test::writeDepthwiseModel(dir, rng, false);
  const Tensor x = test::randomTensor({4, 3, 12, 12}, rng, -1.f, 1.f);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
  ASSERT_TRUE(writeNpy(dir + "/in_0_0.npy", x));

  AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
  rq.depthwiseEqualize = false;
  auto off = runAnalysis(rq);
  ASSERT_TRUE(off) << off.status().message();
  EXPECT_TRUE(off->remedies.depthwisePairs.empty());
  rq.depthwiseEqualize = true;  // the default
  EXPECT_TRUE(AnalysisRequest{}.depthwiseEqualize);
  auto on = runAnalysis(rq);
  ASSERT_TRUE(on) << on.status().message();
  ASSERT_EQ(on->remedies.depthwisePairs.size(), 1u);
  EXPECT_EQ(on->model->graph.nodes[(size_t)on->remedies.depthwisePairs[0].producer].name, "conv1");
  EXPECT_EQ(on->model->graph.nodes[(size_t)on->remedies.depthwisePairs[0].consumer].name, "dwconv");
  EXPECT_GT(on->remedies.depthwisePairs[0].rangeRatio, 10.0);
  EXPECT_EQ(on->remedies.changedInitializers, (std::vector<std::string>{"b1", "w1", "wd"}));
  EXPECT_TRUE(on->remedies.empty());  // not a remedy with a before/after: no remedies section

  // The float function is the original's.
  const Tensor ref = runFile(model, x);
  ErrorAccumulator fl;
  fl.add(ref, test::runModel(on->model, x));
  EXPECT_GE(fl.metrics().snrDb, 100.0);
  std::printf("depthwise equalization: the changed float model against the original: %.1f dB\n", fl.metrics().snrDb);
  // The small channels no longer lose to the per-tensor step of the depthwise input.
  const double before = off->result()->outputs[0].metrics.snrDb, after = on->result()->outputs[0].metrics.snrDb;
  std::printf("depthwise equalization: %.2f dB -> %.2f dB (predicted)\n", before, after);
  EXPECT_GT(after, before + 1.0);

  // quantized.onnx carries the rescaled weights: ONNX Runtime at the prediction.
  const std::string q = exportRun(*on, dir + "/out");
  ASSERT_FALSE(q.empty());
  EXPECT_NE(readText(dir + "/out/report.json").find("\"depthwise_equalize\": \"1 pair\""), std::string::npos);
  EXPECT_TRUE(test::reportFollowsSchema(dir + "/out/report.json"));
  const double ort = test::ortSnrAgainst(ref, q, dir);
  std::printf("ONNX Runtime on quantized.onnx: %.2f dB\n", ort);
  EXPECT_NEAR(ort, after, 0.5);

  // quant_cfg.json keeps the pairs' scales: --load-config on the original model rescales the same
  // weights, so the saved weight amax match and quantized.onnx is the same, byte for byte.
  EXPECT_NE(readText(dir + "/out/quant_cfg.json").find("\"depthwise_equalize\""), std::string::npos);
  AnalysisRequest reload = test::remedyRequest(model, dir + "/x.npy");
  reload.loadConfig = dir + "/out/quant_cfg.json";
  auto again = runAnalysis(reload);
  ASSERT_TRUE(again) << again.status().message();
  ASSERT_EQ(again->remedies.depthwisePairs.size(), 1u);
  EXPECT_EQ(again->remedies.depthwisePairs[0].scale, on->remedies.depthwisePairs[0].scale);
  const std::string q2 = exportRun(*again, dir + "/out2");
  ASSERT_FALSE(q2.empty());
  EXPECT_TRUE(readText(q) == readText(q2));
  EXPECT_NEAR(again->result()->outputs[0].metrics.snrDb, after, 1e-9);

  // A saved scale list that does not fit the model: one line naming the file, the node and the reason.
  std::string cfg = readText(dir + "/out/quant_cfg.json");
  const size_t at = cfg.find("\"depthwise_equalize\"");
  ASSERT_NE(at, std::string::npos);
  const size_t node = cfg.find("\"dwconv\"", at);
  ASSERT_NE(node, std::string::npos);
  cfg.replace(node, 8, "\"conv1\"");
  {
    std::ofstream f(dir + "/bad_cfg.json");
    f << cfg;
  }
  AnalysisRequest bad = test::remedyRequest(model, dir + "/x.npy");
  bad.loadConfig = dir + "/bad_cfg.json";
  auto refused = runAnalysis(bad);
  ASSERT_FALSE(refused);
  const std::string msg = refused.status().message();
  EXPECT_NE(msg.find(dir + "/bad_cfg.json: quantscope.depthwise_equalize: node 'conv1' is not a depthwise Conv"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("the config was made for another model"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  fs::remove_all(dir);
}

// Conv -> `act` -> depthwise Conv: a pair through Relu only when asked, never through Sigmoid.
TEST(DepthwiseEqualization, PairsThroughReluOnlyWhenAskedAndNeverThroughSigmoid) {
  for (const char* act : {"Relu", "Sigmoid"}) {
    std::mt19937 rng(4);
    test::OnnxBuilder b;
    b.input("x", {1, 3, 8, 8}).output("y", {1, 4, 8, 8});
    b.initializer("w1", {4, 3, 1, 1}, test::randomValues(12, rng));
    b.initializer("wd", {4, 1, 3, 3}, test::randomValues(36, rng));
    b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
    b.node(act, {"c1"}, {"a1"}, "act");
    auto& dw = b.node("Conv", {"a1", "wd"}, {"y"}, "dwconv");
    test::OnnxBuilder::attrInts(dw, "pads", {1, 1, 1, 1});
    test::OnnxBuilder::attrInt(dw, "group", 4);
    const std::string dir = test::makeTempDir("dw-equalize");
    b.save(dir + "/m.onnx");
    auto m = loadModel(dir + "/m.onnx");
    ASSERT_TRUE(m) << m.status().message();
    EXPECT_TRUE(findDepthwiseEqualizablePairs(**m).empty()) << act;
    EXPECT_EQ(findDepthwiseEqualizablePairs(**m, /*throughRelu=*/true).size(), std::string(act) == "Relu" ? 1u : 0u) << act;
    fs::remove_all(dir);
  }
}

TEST(DepthwiseEqualization, CliRefusesABadValue) {
  const std::string cmd = std::string(QS_BINARY) + " analyze nothing.onnx --depthwise-equalize maybe 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int st = pclose(p);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("--depthwise-equalize 'maybe': expected on or off"), std::string::npos) << out;
}

// PP-OCRv4 rec (its stem: Conv -> BatchNormalization -> depthwise Conv, weights in Constant nodes):
// the equalized export computes the predicted SNR (our executor on the written file) and beats the
// unequalized one; ONNX Runtime's figures are printed (see the note at the end).
TEST(DepthwiseEqualization, RecExportComputesThePredictionAndOrtIsPrinted) {
  const std::string model = std::string(QS_MODELS_DIR) + "/ch_PP-OCRv4_rec_infer.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing: run scripts/setup.sh";
  if (qs::test::kUnderSanitizer) GTEST_SKIP() << "release build only (the small model above covers the code under ASan)";
  const std::string dir = test::makeTempDir("dw-equalize");
  test::writeTextImages(dir + "/images", 4, 320, 48, 7);
  AnalysisRequest rq = test::textLineRemedyRequest(model, dir + "/images", 320);  // max calibration, 2 threads
  // Our executor runs the written file's Convs in FP32, as ONNX Runtime does: the same arithmetic
  // in the analysis (integer Convs round differently, and rec at 12 dB moves by tenths of a dB).
  rq.integerConv = false;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  ASSERT_EQ(run->remedies.depthwisePairs.size(), 1u);
  EXPECT_EQ(run->model->graph.nodes[(size_t)run->remedies.depthwisePairs[0].consumer].name, "p2o.Conv.1");
  const std::string q = exportRun(*run, dir + "/out");
  ASSERT_FALSE(q.empty());
  const int samples = test::writeAnalysisInputs(*run, dir);
  ASSERT_EQ(test::runOrtBatch(model, dir, dir + "/fp32", samples), 0);
  ASSERT_EQ(test::runOrtBatch(q, dir, dir + "/q", samples), 0);
  auto ortSnr = [&](const std::string& out) {
    ErrorAccumulator acc;
    for (int s = 0; s < samples; ++s) {
      auto ref = readNpy(dir + "/fp32/out_" + std::to_string(s) + "_0.npy");
      auto got = readNpy(dir + "/" + out + "/out_" + std::to_string(s) + "_0.npy");
      EXPECT_TRUE(ref && got);
      if (ref && got) acc.add(*ref, *got);
    }
    return acc.metrics().snrDb;
  };
  const double predicted = run->result()->outputs[0].metrics.snrDb, ortOn = ortSnr("q");
  rq.depthwiseEqualize = false;
  auto off = runAnalysis(rq);
  ASSERT_TRUE(off) << off.status().message();
  const std::string qOff = exportRun(*off, dir + "/out-off");
  ASSERT_EQ(test::runOrtBatch(qOff, dir, dir + "/q-off", samples), 0);
  const double without = off->result()->outputs[0].metrics.snrDb, ortOff = ortSnr("q-off");
  std::printf("rec, max, 4 lines: predicted %.3f dB, ONNX Runtime %.3f dB; without depthwise equalization %.3f / %.3f dB\n",
              predicted, ortOn, without, ortOff);
  // Our executor on the written files, for comparison with ORT's.
  auto oursSnr = [&](const std::string& file) {
    auto fm = loadModel(model);
    auto qm = loadModel(file);
    EXPECT_TRUE(fm && qm);
    auto fe = Executor::create(std::move(fm).value());
    auto qe = Executor::create(std::move(qm).value());
    ErrorAccumulator acc;
    for (int s = 0; s < samples; ++s) {
      auto feeds = run->analysisData->batch(s);
      auto a = (*fe)->run(*feeds);
      auto b = (*qe)->run(*feeds);
      if (a && b) acc.add((*a)[0], (*b)[0]);
    }
    return acc.metrics().snrDb;
  };
  const double oursOn = oursSnr(q), oursOff = oursSnr(qOff);
  std::printf("our executor on the files: %.3f dB, without depthwise equalization %.3f dB\n", oursOn, oursOff);
  // The written files compute what the analysis predicted.
  EXPECT_NEAR(oursOn, predicted, 0.05);
  EXPECT_NEAR(oursOff, without, 0.05);
  EXPECT_GT(predicted, without);
  // ONNX Runtime on rec's int8 export differs from our arithmetic by more than 0.5 dB on these 4
  // lines with and without the equalization (2026-11-26: +1.26 dB without, -1.87 dB with it;
  // docs/quality.md, "Depthwise input equalization"): printed, not asserted, until that is explained.
  fs::remove_all(dir);
}
