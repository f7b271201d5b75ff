// Pointwise input smoothing (core/analysis/pointwise_smoothing.h), int8, --pointwise-smooth on: on a
// model built in code whose group-1 Convs (a 1x1 and a 3x3) read `a * hardswish(conv(x)) + b`
// (PP-LCNetV3's block, scalar a and b, channels' ranges two decades apart), it inserts a Mul on
// each Conv's input and scales the weights' input channels, keeps the float function, lowers the
// quantized Convs' layer-wise error, raises the predicted SNR, and quantized.onnx carries the Muls
// and the scaled weights: ONNX Runtime computes the predicted SNR within 0.5 dB; quant_cfg.json
// reproduces it through --load-config, and a saved scale on a node that is not a group-1 Conv is
// refused in one line. A bad --pointwise-smooth value is refused in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/analysis/pointwise_smoothing.h"
#include "core/export/pipeline.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"

using namespace qs;
using qs::test::cliOutput;
using qs::test::exportRun;
using qs::test::OnnxBuilder;
using qs::test::readText;
using qs::test::runFile;
namespace fs = std::filesystem;


TEST(PointwiseSmoothing, InsertsMulsKeepsTheFloatFunctionRaisesTheSnrAndReachesOnnxRuntime) {
  std::mt19937 rng(5);
  const std::string dir = test::makeTempDir("pw-smooth");
  const std::string model = test::writePointwiseModel(dir, rng);
  const Tensor x = test::randomTensor({4, 3, 12, 12}, rng, -1.f, 1.f);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
  ASSERT_TRUE(writeNpy(dir + "/in_0_0.npy", x));

  AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
  auto off = runAnalysis(rq);
  ASSERT_TRUE(off) << off.status().message();
  EXPECT_TRUE(off->remedies.pointwiseSmoothed.empty());
  EXPECT_FALSE(AnalysisRequest{}.pointwiseSmooth);  // off by default (docs/quality.md)
  EXPECT_EQ(readText(exportRun(*off, dir + "/off").empty() ? "" : dir + "/off/report.json").find("pointwise_smooth"),
            std::string::npos);  // the reports of runs without it are unchanged
  rq.pointwiseSmooth = true;
  auto on = runAnalysis(rq);
  ASSERT_TRUE(on) << on.status().message();
  ASSERT_EQ(on->remedies.pointwiseSmoothed.size(), 2u);
  const Graph& g = on->model->graph;
  const char* names[] = {"pwconv", "kconv"};
  for (size_t i = 0; i < 2; ++i) {
    const DepthwiseSmoothedInput& s = on->remedies.pointwiseSmoothed[i];
    EXPECT_TRUE(s.pointwise);
    EXPECT_EQ(g.nodes[(size_t)s.consumer].name, names[i]);
    EXPECT_EQ(g.nodes[(size_t)s.mul].opType, "Mul");
    EXPECT_EQ(g.value(g.nodes[(size_t)s.consumer].inputs[0]).producer, s.mul);
    EXPECT_GT(s.rangeRatio, 10.0);
    EXPECT_LT(s.errorAfter, 0.9 * s.errorBefore);
    EXPECT_FALSE(isNodeQuantized(on->result()->plan, s.mul));  // the Mul runs in float
    std::printf("%s: alpha %.2f%s, layer-wise error %.3g -> %.3g\n", names[i], s.alpha,
                s.weightTerm ? " (SmoothQuant's form)" : "", s.errorBefore, s.errorAfter);
  }
  EXPECT_EQ(on->remedies.insertedNodes, (std::vector<std::string>{"pwconv_pwsmooth", "kconv_pwsmooth"}));
  EXPECT_EQ(on->remedies.changedInitializers, (std::vector<std::string>{"w2", "w3"}));
  EXPECT_TRUE(on->remedies.empty());  // not a remedy with a before/after: no remedies section

  // The float function is the original's.
  const Tensor ref = runFile(model, x);
  ErrorAccumulator fl;
  fl.add(ref, test::runModel(on->model, x));
  EXPECT_GE(fl.metrics().snrDb, 100.0);
  std::printf("pointwise smoothing: the changed float model against the original: %.1f dB\n", fl.metrics().snrDb);
  const double before = off->result()->outputs[0].metrics.snrDb, after = on->result()->outputs[0].metrics.snrDb;
  std::printf("pointwise smoothing: %.2f dB -> %.2f dB (predicted)\n", before, after);
  EXPECT_GT(after, before + 1.0);

  // quantized.onnx carries the Muls (float, before the inputs' QuantizeLinear) and the scaled
  // weights: ONNX Runtime at the prediction.
  const std::string q = exportRun(*on, dir + "/out");
  ASSERT_FALSE(q.empty());
  EXPECT_NE(readText(dir + "/out/report.json").find("\"pointwise_smooth\": \"2 inputs\""), std::string::npos);
  EXPECT_TRUE(test::reportFollowsSchema(dir + "/out/report.json"));
  auto written = loadModel(q);
  ASSERT_TRUE(written) << written.status().message();
  const Graph& wg = (*written)->graph;
  for (const char* v : {"a1_pwsmooth", "a2o_pwsmooth"}) {
    const ValueId mulOut = wg.findValue(v);
    ASSERT_NE(mulOut, kNoValue) << v;
    ASSERT_GE(wg.value(mulOut).producer, 0);
    EXPECT_EQ(wg.nodes[(size_t)wg.value(mulOut).producer].opType, "Mul");
    ASSERT_EQ(wg.value(mulOut).consumers.size(), 1u);
    EXPECT_EQ(wg.nodes[(size_t)wg.value(mulOut).consumers[0]].opType, "QuantizeLinear");
  }
  const double ort = test::ortSnrAgainst(ref, q, dir);
  std::printf("ONNX Runtime on quantized.onnx: %.2f dB\n", ort);
  EXPECT_NEAR(ort, after, 0.5);

  // quant_cfg.json keeps the scales: --load-config re-inserts the same Muls and weights, byte for byte.
  const std::string cfg = readText(dir + "/out/quant_cfg.json");
  EXPECT_NE(cfg.find("\"pointwise_smooth\""), std::string::npos);
  AnalysisRequest reload = test::remedyRequest(model, dir + "/x.npy");
  reload.loadConfig = dir + "/out/quant_cfg.json";
  auto again = runAnalysis(reload);
  ASSERT_TRUE(again) << again.status().message();
  ASSERT_EQ(again->remedies.pointwiseSmoothed.size(), 2u);
  EXPECT_EQ(again->remedies.pointwiseSmoothed[0].scale, on->remedies.pointwiseSmoothed[0].scale);
  const std::string q2 = exportRun(*again, dir + "/out2");
  ASSERT_FALSE(q2.empty());
  EXPECT_TRUE(readText(q) == readText(q2));

  // A saved scale on a node that is not a group-1 Conv: one line naming the file, the node and the reason.
  std::string bad = cfg;
  const size_t at = bad.find("\"node\": \"pwconv\"", bad.find("\"pointwise_smooth\""));
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, std::string("\"node\": \"pwconv\"").size(), "\"node\": \"conv1\"");
  std::ofstream(dir + "/bad_cfg.json") << bad;
  reload.loadConfig = dir + "/bad_cfg.json";
  auto refused = runAnalysis(reload);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("bad_cfg.json: pointwise_smooth: node 'conv1' is not a group-1 Conv with 8 "
                                            "input channels"),
            std::string::npos)
      << refused.status().message();
  fs::remove_all(dir);
}

TEST(PointwiseSmoothing, LeavesAConvAloneWhereNoScaleLowersItsError) {
  // Channels of one range (Relu of uniform values in each): the per-tensor step already suits every
  // channel, so nothing is inserted and the model is the input (the same pointer).
  std::mt19937 rng(9);
  const std::string dir = test::makeTempDir("pw-smooth-flat");
  OnnxBuilder b(14);
  b.input("x", {4, 8, 8, 8}).output("y", {4, 5, 8, 8}).output("y1", {4, 5, 8, 8});
  b.initializer("w1", {5, 8, 1, 1}, test::randomValues(40, rng));
  b.initializer("w2", {5, 8, 1, 1}, test::randomValues(40, rng));
  b.node("Conv", {"x", "w1"}, {"y1"}, "conv1");
  b.node("Relu", {"x"}, {"r1"}, "relu");
  b.node("Conv", {"r1", "w2"}, {"y"}, "conv2");
  b.save(dir + "/flat.onnx");
  auto m = loadModel(dir + "/flat.onnx");
  ASSERT_TRUE(m) << m.status().message();
  const Tensor x = test::randomTensor({4, 8, 8, 8}, rng, -1.f, 1.f);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
  CalibrationDataOptions o;
  o.path = dir + "/x.npy";
  auto data = CalibrationData::open(**m, o);
  ASSERT_TRUE(data) << data.status().message();
  std::shared_ptr<const Model> model = std::move(m).value();
  auto r = smoothPointwiseInputs(model, **data, 1);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_TRUE(r->inputs.empty());
  EXPECT_EQ(r->model, model);
  ASSERT_EQ(r->skipped.size(), 2u);  // conv1 reads the graph input; conv2's channels are alike
  EXPECT_NE(r->skipped[0].find("conv1: its input is a graph input"), std::string::npos) << r->skipped[0];
  EXPECT_NE(r->skipped[1].find("conv2: no scale lowers its layer-wise error enough"), std::string::npos) << r->skipped[1];
  fs::remove_all(dir);
}

TEST(PointwiseSmoothing, CliRefusesABadValue) {
  const std::string out = cliOutput("analyze nothing.onnx --pointwise-smooth maybe");
  EXPECT_NE(out.find("--pointwise-smooth 'maybe': expected on or off"), std::string::npos) << out;
}

// PP-OCRv4 det on 4 of its pages at 256x256 with --pointwise-smooth on: the Muls on its group-1 Convs'
// inputs are part of quantized.onnx, and ONNX Runtime computes the prediction within 0.5 dB.
TEST(PointwiseSmoothing, DetExportMatchesOnnxRuntime) {
  const std::string model = std::string(QS_MODELS_DIR) + "/ch_PP-OCRv4_det_infer.onnx";
  const std::string pages = std::string(QS_SOURCE_DIR) + "/.cache/samples/det";
  if (!fs::exists(model) || !fs::exists(pages)) GTEST_SKIP() << model << " or " << pages << " missing: run scripts/setup.sh";
  const std::string dir = test::makeTempDir("pw-smooth-det");
  AnalysisRequest rq = test::detRemedyRequest(model, pages);
  rq.pointwiseSmooth = true;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  ASSERT_FALSE(run->remedies.pointwiseSmoothed.empty());
  const std::string q = exportRun(*run, dir + "/out");
  ASSERT_FALSE(q.empty());
  const double ort = test::ortSnrDb(model, q, dir, test::writeAnalysisInputs(*run, dir));
  const double predicted = run->result()->outputs[0].metrics.snrDb;
  std::printf("det pointwise smoothing: %zu inputs smoothed, predicted %.3f dB, ONNX Runtime %.3f dB\n",
              run->remedies.pointwiseSmoothed.size(), predicted, ort);
  EXPECT_NEAR(ort, predicted, 0.5);
  fs::remove_all(dir);
}
