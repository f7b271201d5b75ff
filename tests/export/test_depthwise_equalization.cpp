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

using namespace qs;
using qs::test::exportRun;
using qs::test::runCommand;
using qs::test::runFile;
namespace fs = std::filesystem;

namespace {

// x [4, 3, 12, 12] -> Conv(8, 3x3, bias) -> depthwise Conv(8, 3x3, bias) -> Conv(6, 1x1) -> y.
std::string writeDepthwiseModel(const std::string& dir, std::mt19937& rng) {
  test::OnnxBuilder b;
  b.input("x", {4, 3, 12, 12}).output("y", {4, 6, 12, 12});
  std::vector<float> w1 = test::randomValues(8 * 27, rng);
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t i = 0; i < 27; ++i) w1[(size_t)(c * 27 + i)] *= std::pow(10.f, (float)(c % 4) / 1.5f - 1.f);
  b.initializer("w1", {8, 3, 3, 3}, w1);
  b.initializer("b1", {8}, test::randomValues(8, rng, -0.05f, 0.05f));
  b.initializer("wd", {8, 1, 3, 3}, test::randomValues(8 * 9, rng));
  b.initializer("bd", {8}, test::randomValues(8, rng, -0.1f, 0.1f));
  b.initializer("w3", {6, 8, 1, 1}, test::randomValues(48, rng));
  auto& c1 = b.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv1");
  test::OnnxBuilder::attrInts(c1, "pads", {1, 1, 1, 1});
  auto& dw = b.node("Conv", {"c1", "wd", "bd"}, {"d1"}, "dwconv");
  test::OnnxBuilder::attrInts(dw, "pads", {1, 1, 1, 1});
  test::OnnxBuilder::attrInt(dw, "group", 8);
  b.node("Conv", {"d1", "w3"}, {"y"}, "conv3");
  const std::string path = dir + "/dw.onnx";
  b.save(path);
  return path;
}

std::string readText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST(DepthwiseEqualization, KeepsTheFloatFunctionRaisesTheSnrAndReachesOnnxRuntime) {
  std::mt19937 rng(3);
  const std::string dir = test::makeTempDir("dw-equalize");
  const std::string model = writeDepthwiseModel(dir, rng);
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
  // The small channels no longer lose to the per-tensor step of the depthwise input.
  const double before = off->result()->outputs[0].metrics.snrDb, after = on->result()->outputs[0].metrics.snrDb;
  std::printf("depthwise equalization: %.2f dB -> %.2f dB (predicted)\n", before, after);
  EXPECT_GT(after, before + 1.0);

  // quantized.onnx carries the rescaled weights: ONNX Runtime at the prediction.
  const std::string q = exportRun(*on, dir + "/out");
  ASSERT_FALSE(q.empty());
  EXPECT_NE(readText(dir + "/out/report.json").find("\"depthwise_equalize\": \"1 pair\""), std::string::npos);
  EXPECT_EQ(runCommand("/usr/bin/python3 " + std::string(QS_SOURCE_DIR) + "/tests/support/validate_json.py " +
                       std::string(QS_SOURCE_DIR) + "/docs/report.schema.json " + dir + "/out/report.json"),
            0);
  ASSERT_EQ(runCommand("ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_batch.mjs " + q +
                       " " + dir + " " + dir + "/q --samples 1 --threads 2 --level disabled --disable-qdq"),
            0);
  auto got = readNpy(dir + "/q/out_0_0.npy");
  ASSERT_TRUE(got) << got.status().message();
  ErrorAccumulator ort;
  ort.add(ref, *got);
  std::printf("ONNX Runtime on quantized.onnx: %.2f dB\n", ort.metrics().snrDb);
  EXPECT_NEAR(ort.metrics().snrDb, after, 0.5);
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
