// SmoothQuant and weight clip search end to end (core/analysis/smoothquant.h, weight_clip.h,
// core/export/remedy_run.h) on models built in code: SmoothQuant keeps the float function of an
// LN -> MatMul model with outlier channels (>= 90 dB), also with the LayerNormalization decomposed into
// ops, and raises its INT8 SNR; the weight clip
// search never raises a node's layer-wise error; the export of each runs in ONNX Runtime at the
// predicted SNR (within 0.5 dB).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"

using namespace qs;
using qs::test::exportRun;
using qs::test::runFile;
using qs::test::runModel;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kB = 4, kT = 16, kC = 32, kN = 24;

// The weights both LayerNormalization models share, drawn in this order: the scale gamma (two outlier channels),
// the bias (named `betaName`), the two projections Wq and Wk [kC, kN].
void addLnWeights(test::OnnxBuilder& b, std::mt19937& rng, const std::string& betaName) {
  std::vector<float> gamma = test::randomValues(kC, rng, 0.5f, 1.5f);
  gamma[3] = 40.f;
  gamma[17] = -25.f;
  b.initializer("gamma", {kC}, gamma);
  b.initializer(betaName, {kC}, test::randomValues(kC, rng, -0.1f, 0.1f));
  b.initializer("wq", {kC, kN}, test::randomValues(kC * kN, rng, -0.3f, 0.3f));
  b.initializer("wk", {kC, kN}, test::randomValues(kC * kN, rng, -0.3f, 0.3f));
}

// x [4, 16, 32] -> LayerNormalization (scale with two outlier channels; bias through an Identity,
// as torch.onnx writes shared initializers) -> MatMul(Wq), MatMul(Wk) -> Add -> y [4, 16, 24].
std::string writeLnModel(const std::string& dir, std::mt19937& rng) {
  test::OnnxBuilder b(17);
  b.input("x", {kB, kT, kC}).output("y", {kB, kT, kN});
  addLnWeights(b, rng, "beta_src");
  b.node("Identity", {"beta_src"}, {"beta"}, "beta_identity");
  auto& ln = b.node("LayerNormalization", {"x", "gamma", "beta"}, {"h"}, "ln");
  test::OnnxBuilder::attrInt(ln, "axis", -1);
  b.node("MatMul", {"h", "wq"}, {"q"}, "q_proj");
  b.node("MatMul", {"h", "wk"}, {"k"}, "k_proj");
  b.node("Add", {"q", "k"}, {"y"}, "add");
  const std::string path = dir + "/ln.onnx";
  b.save(path);
  return path;
}

// The model of writeLnModel with its LayerNormalization decomposed as paddle2onnx writes it (PP-OCRv4
// rec's SVTR neck): ReduceMean, Sub, Pow, ReduceMean, Add(eps), Sqrt, Div, then Mul(gamma) and
// Add(beta) -> MatMul(Wq), MatMul(Wk) -> Add -> y.
std::string writeDecomposedLnModel(const std::string& dir, std::mt19937& rng) {
  test::OnnxBuilder b(17);
  b.input("x", {kB, kT, kC}).output("y", {kB, kT, kN});
  addLnWeights(b, rng, "beta");
  b.initializer("two", {}, {2.f});
  b.initializer("eps", {}, {1e-5f});
  test::OnnxBuilder::attrInts(b.node("ReduceMean", {"x"}, {"mean"}, "mean"), "axes", {-1});
  b.node("Sub", {"x", "mean"}, {"centred"}, "sub");
  b.node("Pow", {"centred", "two"}, {"sq"}, "pow");
  test::OnnxBuilder::attrInts(b.node("ReduceMean", {"sq"}, {"var"}, "var"), "axes", {-1});
  b.node("Add", {"var", "eps"}, {"var_eps"}, "add_eps");
  b.node("Sqrt", {"var_eps"}, {"std"}, "sqrt");
  b.node("Div", {"centred", "std"}, {"normed"}, "div");
  b.node("Mul", {"normed", "gamma"}, {"scaled"}, "ln_scale");
  b.node("Add", {"scaled", "beta"}, {"h"}, "ln_bias");
  b.node("MatMul", {"h", "wq"}, {"q"}, "q_proj");
  b.node("MatMul", {"h", "wk"}, {"k"}, "k_proj");
  b.node("Add", {"q", "k"}, {"y"}, "add");
  const std::string path = dir + "/ln_decomposed.onnx";
  b.save(path);
  return path;
}

// x [4, 3, 12, 12] -> Conv(8, 3x3) -> Relu -> Conv(6, 3x3) -> y; weights with a few large values
// per channel (what a clipped scale gains on).
std::string writeConvModel(const std::string& dir, std::mt19937& rng) {
  test::OnnxBuilder b;
  b.input("x", {4, 3, 12, 12}).output("y", {4, 6, 12, 12});
  auto heavy = [&](int64_t o, int64_t block) {
    std::vector<float> w = test::randomValues((size_t)(o * block), rng, -0.2f, 0.2f);
    for (int64_t c = 0; c < o; ++c) w[(size_t)(c * block + (c * 7) % block)] = (c % 2 ? 1.5f : -1.5f);
    return w;
  };
  b.initializer("w1", {8, 3, 3, 3}, heavy(8, 27));
  b.initializer("b1", {8}, test::randomValues(8, rng, -0.2f, 0.2f));
  b.initializer("w2", {6, 8, 3, 3}, heavy(6, 72));
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

double snr(const Tensor& ref, const Tensor& got) {
  ErrorAccumulator acc;
  acc.add(ref, got);
  return acc.metrics().snrDb;
}

// The SNR of `quantized` against `model` in ONNX Runtime (no graph optimisations) on input x.
double ortSnr(const std::string& dir, const std::string& model, const std::string& quantized, const Tensor& x) {
  EXPECT_TRUE(writeNpy(dir + "/in_0_0.npy", x));
  return test::ortSnrDb(model, quantized, dir, 1);
}

TEST(SmoothQuantRemedy, KeepsTheFloatFunctionRaisesInt8SnrAndMatchesOnnxRuntime) {
  std::mt19937 rng(3);
  const std::string dir = test::makeTempDir("smoothquant");
  const std::string model = writeLnModel(dir, rng);
  const Tensor x = test::randomTensor({kB, kT, kC}, rng, -1.f, 1.f);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
  const Tensor ref = runFile(model, x);
  for (double alpha : {(double)NAN, 0.5}) {
    AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
    rq.smoothQuant = true;
    rq.smoothQuantAlpha = alpha;
    auto run = runAnalysis(rq);
    ASSERT_TRUE(run) << run.status().message();
    ASSERT_EQ(run->remedies.smoothed.size(), 1u);
    const SmoothedGroup& grp = run->remedies.smoothed[0];
    EXPECT_EQ(grp.consumers.size(), 2u);
    EXPECT_EQ(grp.channels, kC);
    EXPECT_LT(grp.errorAfter, grp.errorBefore);
    if (!std::isnan(alpha)) {
      EXPECT_DOUBLE_EQ(grp.alpha, 0.5);
    }
    EXPECT_EQ(run->remedies.changedInitializers, (std::vector<std::string>{"beta", "gamma", "wk", "wq"}));
    // The float function of the smoothed model is the original's.
    const double floatDb = snr(ref, runModel(run->model, x));
    ASSERT_TRUE(run->remedies.before);
    const double before = run->remedies.before->outputs[0].metrics.snrDb;
    const double predicted = run->result()->outputs[0].metrics.snrDb;
    const std::string out = dir + "/out" + std::to_string(std::isnan(alpha) ? 0 : 1);
    const std::string q = exportRun(*run, out);
    const double ours = snr(ref, runFile(q, x));
    const double ort = ortSnr(out, model, q, x);
    std::printf("smoothquant alpha %.1f: float %.1f dB; INT8 before %.2f dB, predicted %.2f, our executor on the file %.2f, ORT %.2f\n",
                grp.alpha, floatDb, before, predicted, ours, ort);
    EXPECT_GE(floatDb, 90.0);
    EXPECT_GT(predicted, before + 3.0);
    EXPECT_NEAR(ours, predicted, 0.5);
    EXPECT_NEAR(ort, predicted, 0.5);
    EXPECT_TRUE(test::reportFollowsSchema(out + "/report.json"));
  }
  fs::remove_all(dir);
}

// rec's LayerNormalizations are decomposed, so SmoothQuant found no group on it before; the tail
// Mul(gamma), Add(beta) now takes the 1/s.
TEST(SmoothQuantRemedy, SmoothsADecomposedLayerNormalizationAndMatchesOnnxRuntime) {
  std::mt19937 rng(3);
  const std::string dir = test::makeTempDir("smoothquant_decomposed");
  const std::string model = writeDecomposedLnModel(dir, rng);
  const Tensor x = test::randomTensor({kB, kT, kC}, rng, -1.f, 1.f);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
  const Tensor ref = runFile(model, x);
  AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
  rq.smoothQuant = true;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  ASSERT_EQ(run->remedies.smoothed.size(), 1u);
  const SmoothedGroup& grp = run->remedies.smoothed[0];
  EXPECT_EQ(run->model->graph.nodes[(size_t)grp.producer].name, "ln_bias");
  EXPECT_EQ(grp.consumers.size(), 2u);
  EXPECT_EQ(grp.channels, kC);
  EXPECT_LT(grp.errorAfter, grp.errorBefore);
  EXPECT_EQ(run->remedies.changedInitializers, (std::vector<std::string>{"beta", "gamma", "wk", "wq"}));
  const double floatDb = snr(ref, runModel(run->model, x));
  ASSERT_TRUE(run->remedies.before);
  const double before = run->remedies.before->outputs[0].metrics.snrDb;
  const double predicted = run->result()->outputs[0].metrics.snrDb;
  const std::string q = exportRun(*run, dir + "/out");
  const double ours = snr(ref, runFile(q, x));
  const double ort = ortSnr(dir + "/out", model, q, x);
  std::printf("smoothquant, decomposed LN, alpha %.1f: float %.1f dB; INT8 before %.2f dB, predicted %.2f, our executor on the file %.2f, ORT %.2f\n",
              grp.alpha, floatDb, before, predicted, ours, ort);
  EXPECT_GE(floatDb, 90.0);
  EXPECT_GT(predicted, before + 3.0);
  EXPECT_NEAR(ours, predicted, 0.5);
  EXPECT_NEAR(ort, predicted, 0.5);
  EXPECT_TRUE(test::reportFollowsSchema(dir + "/out/report.json"));
  fs::remove_all(dir);
}

TEST(SmoothQuantRemedy, RefusesBadAlphaAndScalesFromAFile) {
  AnalysisRequest rq;
  rq.modelPath = "m.onnx";
  rq.smoothQuant = true;
  rq.smoothQuantAlpha = 1.5;
  Status st = validateRequest(rq);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("--smoothquant-alpha"), std::string::npos) << st.message();
  rq.smoothQuantAlpha = NAN;
  rq.loadConfig = "quant_cfg.json";
  st = validateRequest(rq);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("--smoothquant"), std::string::npos) << st.message();
  rq.smoothQuant = false;
  rq.weightClipSearch = true;
  st = validateRequest(rq);
  EXPECT_NE(st.message().find("--weight-clip-search"), std::string::npos) << st.message();
}

TEST(WeightClipRemedy, NeverRaisesLayerwiseErrorAndMatchesOnnxRuntime) {
  for (int which = 0; which < 2; ++which) {
    std::mt19937 rng(11 + which);
    const std::string dir = test::makeTempDir("weightclip");
    const std::string model = which == 0 ? writeConvModel(dir, rng) : writeLnModel(dir, rng);
    const Tensor x = which == 0 ? test::randomTensor({4, 3, 12, 12}, rng, 0.f, 1.f)
                                : test::randomTensor({kB, kT, kC}, rng, -1.f, 1.f);
    ASSERT_TRUE(writeNpy(dir + "/x.npy", x));
    AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
    rq.weightClipSearch = true;
    auto run = runAnalysis(rq);
    ASSERT_TRUE(run) << run.status().message();
    ASSERT_EQ(run->remedies.weightClips.size(), 2u);
    int clipped = 0;
    for (const WeightClipNode& w : run->remedies.weightClips) {
      EXPECT_LE(w.errorAfter, w.errorBefore);
      clipped += w.clipped;
    }
    EXPECT_GT(clipped, 0);
    // The float model is unchanged: the ratios live in the weight scales.
    EXPECT_TRUE(run->remedies.changedInitializers.empty());
    // Per node, the analysis's layer-wise error with the chosen scales is no worse (the same
    // activation scales: max calibration of an unchanged float model).
    ASSERT_TRUE(run->remedies.before);
    const AnalysisResult& after = *run->result();
    const AnalysisResult& before = *run->remedies.before;
    for (const WeightClipNode& w : run->remedies.weightClips) {
      const NodeResult& a = after.nodes[(size_t)w.node];
      const NodeResult& b = before.nodes[(size_t)w.node];
      ASSERT_TRUE(a.hasLayerwise && b.hasLayerwise);
      EXPECT_GE(a.layerwise.snrDb, b.layerwise.snrDb - 1e-9) << run->model->graph.nodes[(size_t)w.node].name;
    }
    const Tensor ref = runFile(model, x);
    const std::string q = exportRun(*run, dir + "/out");
    const double predicted = after.outputs[0].metrics.snrDb;
    const double ort = ortSnr(dir + "/out", model, q, x);
    std::printf("weight clip search (%s): %d channel(s) clipped; INT8 before %.2f dB, predicted %.2f, ORT %.2f\n",
                which == 0 ? "conv" : "ln-matmul", clipped, before.outputs[0].metrics.snrDb, predicted, ort);
    EXPECT_NEAR(snr(ref, runFile(q, x)), predicted, 0.5);
    EXPECT_NEAR(ort, predicted, 0.5);
    EXPECT_TRUE(test::reportFollowsSchema(dir + "/out/report.json"));
    fs::remove_all(dir);
  }
}

}  // namespace
