// Depthwise input smoothing (core/analysis/depthwise_smoothing.h), int8, --depthwise-smooth on: on a
// model built in code whose depthwise Conv reads `a * hardswish(conv(x)) + b` (PP-LCNetV3's
// block, scalar a and b: no producer takes a per-channel scale), it inserts a Mul on the depthwise
// input, keeps the float function, raises the predicted SNR, and quantized.onnx carries the Mul and
// the scaled weights: ONNX Runtime computes the predicted SNR within 0.5 dB; quant_cfg.json
// reproduces it through --load-config. A bad --depthwise-smooth value is refused in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <random>

#include "core/analysis/depthwise_smoothing.h"
#include "core/export/pipeline.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"

using namespace qs;
using qs::test::exportRun;
using qs::test::readText;
using qs::test::runFile;
namespace fs = std::filesystem;


TEST(DepthwiseSmoothing, InsertsAMulKeepsTheFloatFunctionRaisesTheSnrAndReachesOnnxRuntime) {
  std::mt19937 rng(3);
  const std::string dir = test::makeTempDir("dw-smooth");
  const std::string model = test::writeDepthwiseModel(dir, rng, true);
  const Tensor x = test::randomTensor({4, 3, 12, 12}, rng, -1.f, 1.f);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
  ASSERT_TRUE(writeNpy(dir + "/in_0_0.npy", x));

  AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
  rq.depthwiseSmooth = false;
  auto off = runAnalysis(rq);
  ASSERT_TRUE(off) << off.status().message();
  EXPECT_TRUE(off->remedies.depthwiseSmoothed.empty());
  EXPECT_TRUE(off->remedies.depthwisePairs.empty());  // no BatchNormalization/Conv producer to fold into
  EXPECT_FALSE(AnalysisRequest{}.depthwiseSmooth);  // off by default (docs/quality.md)
  rq.depthwiseSmooth = true;
  auto on = runAnalysis(rq);
  ASSERT_TRUE(on) << on.status().message();
  ASSERT_EQ(on->remedies.depthwiseSmoothed.size(), 1u);
  const DepthwiseSmoothedInput& s = on->remedies.depthwiseSmoothed[0];
  const Graph& g = on->model->graph;
  EXPECT_EQ(g.nodes[(size_t)s.consumer].name, "dwconv");
  EXPECT_EQ(g.nodes[(size_t)s.mul].opType, "Mul");
  EXPECT_EQ(g.value(g.nodes[(size_t)s.consumer].inputs[0]).producer, s.mul);
  EXPECT_GT(s.rangeRatio, 10.0);
  EXPECT_GT(s.alpha, 0.0);
  EXPECT_LT(s.errorAfter, 0.9 * s.errorBefore);
  EXPECT_EQ(on->remedies.insertedNodes, (std::vector<std::string>{"dwconv_dwsmooth"}));
  EXPECT_EQ(on->remedies.changedInitializers, (std::vector<std::string>{"wd"}));
  EXPECT_TRUE(on->remedies.empty());  // not a remedy with a before/after: no remedies section
  EXPECT_FALSE(isNodeQuantized(on->result()->plan, s.mul));  // the Mul runs in float

  // The float function is the original's.
  const Tensor ref = runFile(model, x);
  ErrorAccumulator fl;
  fl.add(ref, test::runModel(on->model, x));
  EXPECT_GE(fl.metrics().snrDb, 100.0);
  std::printf("depthwise smoothing: the changed float model against the original: %.1f dB\n", fl.metrics().snrDb);
  // The small channels no longer lose to the per-tensor step of the depthwise input.
  const double before = off->result()->outputs[0].metrics.snrDb, after = on->result()->outputs[0].metrics.snrDb;
  std::printf("depthwise smoothing: %.2f dB -> %.2f dB (predicted), alpha %.2f\n", before, after, s.alpha);
  EXPECT_GT(after, before + 1.0);

  // quantized.onnx carries the Mul (float, before the depthwise input's QuantizeLinear) and the
  // scaled weights: ONNX Runtime at the prediction.
  const std::string q = exportRun(*on, dir + "/out");
  ASSERT_FALSE(q.empty());
  EXPECT_NE(readText(dir + "/out/report.json").find("\"depthwise_smooth\": \"1 input\""), std::string::npos);
  EXPECT_TRUE(test::reportFollowsSchema(dir + "/out/report.json"));
  auto written = loadModel(q);
  ASSERT_TRUE(written) << written.status().message();
  const Graph& wg = (*written)->graph;
  const ValueId mulOut = wg.findValue("a1_dwsmooth");
  ASSERT_NE(mulOut, kNoValue);
  ASSERT_GE(wg.value(mulOut).producer, 0);
  EXPECT_EQ(wg.nodes[(size_t)wg.value(mulOut).producer].opType, "Mul");
  ASSERT_EQ(wg.value(mulOut).consumers.size(), 1u);
  EXPECT_EQ(wg.nodes[(size_t)wg.value(mulOut).consumers[0]].opType, "QuantizeLinear");
  const double ort = test::ortSnrAgainst(ref, q, dir);
  std::printf("ONNX Runtime on quantized.onnx: %.2f dB\n", ort);
  EXPECT_NEAR(ort, after, 0.5);

  // quant_cfg.json keeps the scales: --load-config re-inserts the same Mul and weights, byte for byte.
  EXPECT_NE(readText(dir + "/out/quant_cfg.json").find("\"depthwise_smooth\""), std::string::npos);
  AnalysisRequest reload = test::remedyRequest(model, dir + "/x.npy");
  reload.loadConfig = dir + "/out/quant_cfg.json";
  auto again = runAnalysis(reload);
  ASSERT_TRUE(again) << again.status().message();
  ASSERT_EQ(again->remedies.depthwiseSmoothed.size(), 1u);
  EXPECT_EQ(again->remedies.depthwiseSmoothed[0].scale, s.scale);
  const std::string q2 = exportRun(*again, dir + "/out2");
  ASSERT_FALSE(q2.empty());
  EXPECT_TRUE(readText(q) == readText(q2));
  fs::remove_all(dir);
}

TEST(DepthwiseSmoothing, CliRefusesABadValue) {
  const std::string cmd = std::string(QS_BINARY) + " analyze nothing.onnx --depthwise-smooth maybe 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_NE(pclose(p), 0);
  EXPECT_NE(out.find("--depthwise-smooth 'maybe': expected on or off"), std::string::npos) << out;
}
