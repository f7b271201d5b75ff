// The remedies end to end (core/export/remedy_run.h): bias correction makes the exported model's
// mean output error per channel ~0 on a model built in code (run in our executor from the written
// quantized.onnx), equalization and bias correction reach quantized.onnx, and on PaddleOCR cls
// the export with both remedies runs in ONNX Runtime at the predicted SNR (within 0.5 dB).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>

#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"
#include "tests/support/text_images.h"

using namespace qs;
using qs::test::exportRun;
using qs::test::runFile;
using qs::test::runModel;
namespace fs = std::filesystem;

namespace {

// x [4, 3, 12, 12] -> Conv(8, 3x3, bias) -> Relu -> Conv(6, 3x3, bias) -> y, weights with
// channel ranges spread over two decades (what equalization evens out).
std::string writeConvModel(const std::string& dir, std::mt19937& rng) {
  test::OnnxBuilder b;
  b.input("x", {4, 3, 12, 12}).output("y", {4, 6, 12, 12});
  auto spread = [&](int64_t o, int64_t block) {
    std::vector<float> w = test::randomValues((size_t)(o * block), rng);
    for (int64_t c = 0; c < o; ++c)
      for (int64_t i = 0; i < block; ++i) w[(size_t)(c * block + i)] *= std::pow(10.f, (float)(c % 4) / 1.5f - 1.f);
    return w;
  };
  b.initializer("w1", {8, 3, 3, 3}, spread(8, 27));
  b.initializer("b1", {8}, test::randomValues(8, rng, -0.2f, 0.2f));
  b.initializer("w2", {6, 8, 3, 3}, test::randomValues(6 * 72, rng));
  b.initializer("b2", {6}, test::randomValues(6, rng, -0.2f, 0.2f));
  auto& c1 = b.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv1");
  test::OnnxBuilder::attrInts(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"}, "relu1");
  auto& c2 = b.node("Conv", {"r1", "w2", "b2"}, {"y"}, "conv2");
  test::OnnxBuilder::attrInts(c2, "pads", {1, 1, 1, 1});
  const std::string path = dir + "/conv.onnx";
  b.save(path);
  return path;
}

// Per output channel (axis 1), the mean of got - ref; returns the largest |mean|.
double worstChannelMean(const Tensor& ref, const Tensor& got) {
  const int64_t N = ref.dim(0), C = ref.dim(1), S = ref.numel() / (N * C);
  double worst = 0;
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t k = (n * C + c) * S + i;
        sum += (double)got.data<float>()[k] - (double)ref.data<float>()[k];
      }
    worst = std::max(worst, std::fabs(sum / (double)(N * S)));
  }
  return worst;
}

TEST(Remedies, BiasCorrectionZeroesTheMeanErrorPerChannelOfTheExport) {
  std::mt19937 rng(5);
  const std::string dir = test::makeTempDir("remedies");
  const std::string model = writeConvModel(dir, rng);
  const Tensor x = test::randomTensor({4, 3, 12, 12}, rng, 0.f, 1.f);  // a positive mean: weight errors shift outputs
  ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
  const Tensor ref = runFile(model, x);

  double worst[2] = {0, 0};
  for (int corrected = 0; corrected < 2; ++corrected) {
    AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
    rq.biasCorrection = corrected != 0;
    auto run = runAnalysis(rq);
    ASSERT_TRUE(run) << run.status().message();
    if (corrected) {
      EXPECT_EQ(run->remedies.applied, (std::vector<std::string>{"bias_correction"}));
      EXPECT_EQ(run->remedies.biasShifts.size(), 2u);
      EXPECT_EQ(run->remedies.changedInitializers, (std::vector<std::string>{"b1", "b2"}));
      ASSERT_TRUE(run->remedies.before);
    }
    const std::string q = exportRun(*run, dir + "/out" + std::to_string(corrected));
    worst[corrected] = worstChannelMean(ref, runFile(q, x));
  }
  std::printf("worst per-channel mean error: %.6g without, %.6g with bias correction\n", worst[0], worst[1]);
  EXPECT_GT(worst[0], 1e-3);
  // The second Conv's input moves with the first's correction, so its own is measured on float
  // inputs: close to, not exactly, zero.
  EXPECT_LT(worst[1], 0.25 * worst[0]);
  fs::remove_all(dir);
}

TEST(Remedies, EqualizedWeightsReachTheExportAndKeepTheFloatFunction) {
  std::mt19937 rng(9);
  const std::string dir = test::makeTempDir("remedies");
  const std::string model = writeConvModel(dir, rng);
  const Tensor x = test::randomTensor({4, 3, 12, 12}, rng, 0.f, 1.f);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
  AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
  rq.equalize = true;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  ASSERT_EQ(run->remedies.pairs.size(), 1u);
  EXPECT_EQ(run->remedies.changedInitializers, (std::vector<std::string>{"b1", "w1", "w2"}));
  // The float function of the equalized model is the original's.
  auto ex = Executor::create(run->model);
  ASSERT_TRUE(ex);
  auto yEq = (*ex)->run({NamedTensor{"x", x}});
  ASSERT_TRUE(yEq);
  const Tensor ref = runFile(model, x);
  ErrorAccumulator acc;
  acc.add(ref, (*yEq)[0]);
  EXPECT_GE(acc.metrics().snrDb, 100.0);
  std::printf("cross-layer equalization: the changed float model against the original: %.1f dB\n", acc.metrics().snrDb);
  // Per-channel weight quantization of the first Conv's small channels gains from it.
  ASSERT_TRUE(run->remedies.before);
  EXPECT_GT(run->result()->outputs[0].metrics.snrDb, run->remedies.before->outputs[0].metrics.snrDb);
  // quantized.onnx computes what the analysis predicted (our executor on the written file).
  const std::string q = exportRun(*run, dir + "/out");
  ErrorAccumulator got;
  got.add(ref, runFile(q, x));
  EXPECT_NEAR(got.metrics().snrDb, run->result()->outputs[0].metrics.snrDb, 0.5);
  // report.json's remedies object follows docs/report.schema.json.
  EXPECT_TRUE(test::reportFollowsSchema(dir + "/out/report.json"));
  std::ifstream rj(dir + "/out/report.json");
  std::stringstream text;
  text << rj.rdbuf();
  EXPECT_NE(text.str().find("\"equalized_pairs\": [\n      {\n        \"first\": \"conv1\""), std::string::npos);
  fs::remove_all(dir);
}

TEST(Remedies, RefusedWithScalesFromAFile) {
  AnalysisRequest rq;
  rq.modelPath = "m.onnx";
  rq.equalize = true;
  rq.loadConfig = "quant_cfg.json";
  Status st = validateRequest(rq);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("--equalize"), std::string::npos) << st.message();
}

// PaddleOCR cls (weights in Constant nodes, BatchNormalization unfolded): both remedies, exported
// and run in ONNX Runtime, at the predicted SNR.
TEST(Remedies, ClsExportWithBothRemediesMatchesOnnxRuntime) {
  const std::string model = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing: run scripts/setup.sh";
  const std::string dir = test::makeTempDir("remedies");
  test::writeTextImages(dir + "/images", 4, 192, 48, 7);
  AnalysisRequest rq = test::textLineRemedyRequest(model, dir + "/images", 192);
  rq.equalize = true;
  rq.biasCorrection = true;
  // The analysis with FP32 convolutions of fake-quantized tensors, the arithmetic ORT runs the
  // Q/DQ file with. Integer Convs (exact sums, the default where the CPU has AVX2) move a few
  // values across rounding ties, which cls's squeeze-excitation paths (a handful of values per
  // sample, 4 samples) amplify: 18.36 dB predicted against ORT's 19.64 with them, on the AVX2
  // machine (2026-11-26).
  rq.integerConv = false;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  EXPECT_FALSE(run->remedies.pairs.empty());
  EXPECT_FALSE(run->remedies.biasShifts.empty());
  const std::string q = exportRun(*run, dir + "/out");
  const int samples = test::writeAnalysisInputs(*run, dir);
  // ORT without graph optimisations: the file's arithmetic as written. (At --level basic, ORT 1.30
  // gives 17.8 dB on this export against 19.6 predicted, while each remedy alone matches at basic
  // too: one of ORT's basic rewrites changes the result of this file; docs/quality.md, "Remedies".)
  ASSERT_EQ(test::runOrtBatch(model, dir, dir + "/fp32", samples), 0);
  ASSERT_EQ(test::runOrtBatch(q, dir, dir + "/q", samples), 0);
  ErrorAccumulator acc;
  for (int s = 0; s < samples; ++s) {
    auto ref = readNpy(dir + "/fp32/out_" + std::to_string(s) + "_0.npy");
    auto got = readNpy(dir + "/q/out_" + std::to_string(s) + "_0.npy");
    ASSERT_TRUE(ref && got);
    acc.add(*ref, *got);
  }
  // Our executor on the written file, for comparison with ORT's.
  double oursDb = NAN;
  {
    ErrorAccumulator ours;
    auto fm = loadModel(model);
    auto qm = loadModel(q);
    ASSERT_TRUE(fm && qm);
    auto fe = Executor::create(std::move(fm).value());
    auto qe = Executor::create(std::move(qm).value());
    ASSERT_TRUE(fe && qe);
    for (int64_t s = 0; s < run->analysisData->batchCount(); ++s) {
      auto feeds = run->analysisData->batch(s);
      auto a = (*fe)->run(*feeds);
      auto b = (*qe)->run(*feeds);
      ASSERT_TRUE(feeds && a && b);
      ours.add((*a)[0], (*b)[0]);
    }
    oursDb = ours.metrics().snrDb;
  }
  const double predicted = run->result()->outputs[0].metrics.snrDb;
  ASSERT_TRUE(run->remedies.before);
  std::printf("cls remedies: predicted %.3f dB, ONNX Runtime %.3f dB, our executor on the file %.3f dB, before remedies %.3f dB\n",
              predicted, acc.metrics().snrDb, oursDb, run->remedies.before->outputs[0].metrics.snrDb);
  EXPECT_NEAR(acc.metrics().snrDb, predicted, 0.5);
  EXPECT_NEAR(oursDb, predicted, 0.5);
  fs::remove_all(dir);
}

}  // namespace
