// The weight/activation split of a MatMul from Gram matrices (core/analysis/split_gram.h) against
// the products it replaces (layerwise_matmul.h): the both-points sums bit for bit, the split's
// SNRs to float rounding, on seeded random shapes and on bert_encoder's projections.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

#include "core/analysis/layerwise_matmul.h"
#include "core/analysis/quant_session.h"
#include "core/analysis/split_gram.h"
#include "core/kernels/gemm.h"
#include "core/kernels/matmul_dnnl.h"
#include "core/numeric/fake_quant.h"
#include "core/onnx/loader.h"
#include "tests/support/gemm_helpers.h"

namespace qs {
namespace {

using test::kernelMatMul;

Tensor randomTensor(Shape shape, std::mt19937& rng, float scale, float mean = 0.f) {
  return test::normalTensor(std::move(shape), rng, scale, mean);
}

TEST(SplitGram, SameFiguresAsTheProducts) {
  struct Case {
    Shape x;
    int64_t n;
    float mean;  // of X: a large common component makes X^T X far from diagonal
  };
  const Case cases[] = {{{1, 128, 96}, 288, 0.f},  {{2, 37, 70}, 83, 0.5f}, {{3, 100, 300}, 400, 0.f},
                        {{1, 7, 33}, 17, 2.f},     {{400, 64}, 530, 0.f},   {{1, 1, 5, 24}, 16, 0.f},
                        {{1, 64, 256}, 256, 1.f}};
  std::mt19937 rng(29);
  int checked = 0;
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      const int64_t K = c.x.back();
      Tensor x = randomTensor(c.x, rng, 1.f, c.mean), w = randomTensor({K, c.n}, rng, 0.1f);
      Tensor xq = fakeQuantize(x, {0.03f}, 0, QuantMode::Int8, kActQmin, kActQmax);
      std::vector<float> wScale((size_t)c.n);
      for (size_t j = 0; j < wScale.size(); ++j) wScale[j] = 0.0005f * (float)(1 + j % 5);
      Tensor wq = fakeQuantize(w, wScale, 1, QuantMode::Int8, kWeightQmin, kWeightQmax);
      const Tensor ref = kernelMatMul(x, w, threads);
      const MatMulSplitGram gram(w, wq);
      ErrorAccumulator full, weight, act, eFull, eWeight, eAct;
      ASSERT_TRUE(layerwiseMatMulGram(x, xq, w, wq, ref, threads, gram, full, weight, act));
      ASSERT_TRUE(layerwiseMatMul(x, xq, w, wq, ref, threads, eFull, eWeight, eAct));
      const ErrorMetrics f = full.metrics(), ef = eFull.metrics();
      EXPECT_EQ(f.snrDb, ef.snrDb);
      EXPECT_EQ(f.cosine, ef.cosine);
      EXPECT_EQ(f.mse, ef.mse);
      EXPECT_EQ(f.maxAbs, ef.maxAbs);
      EXPECT_EQ(f.count, ef.count);
      // The split: the same powers but for the products' float rounding.
      const double dw = weight.metrics().snrDb - eWeight.metrics().snrDb;
      const double da = act.metrics().snrDb - eAct.metrics().snrDb;
      EXPECT_LT(std::fabs(dw), 1e-4) << "weights only, K " << K << " N " << c.n;
      EXPECT_LT(std::fabs(da), 1e-4) << "activations only, K " << K << " N " << c.n;
      EXPECT_EQ(weight.metrics().count, eWeight.metrics().count);
      EXPECT_NEAR(weight.metrics().mse, eWeight.metrics().mse, 1e-4 * eWeight.metrics().mse);
      // Both kinds of error are there and differ, so a swapped pair of powers would fail.
      EXPECT_GT(std::fabs(weight.metrics().snrDb - act.metrics().snrDb), 0.5);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 14);
}

TEST(SplitGram, RefusesWhatTheProductsWouldRefuse) {
  std::mt19937 rng(5);
  Tensor x = randomTensor({2, 8}, rng, 1.f), w = randomTensor({8, 16}, rng, 1.f);
  const MatMulSplitGram gram(w, w);
  ErrorAccumulator a, b, c;
  EXPECT_FALSE(layerwiseMatMulGram(x, x, w, w, kernelMatMul(x, w, 1), 1, gram, a, b, c));  // two rows
  Tensor x3 = randomTensor({6, 9}, rng, 1.f), w3 = randomTensor({9, 16}, rng, 1.f);
  EXPECT_FALSE(layerwiseMatMulGram(x3, x3, w3, w3, kernelMatMul(x3, w3, 1), 1, gram, a, b, c));  // another K
  EXPECT_EQ(a.metrics().count, 0);
  EXPECT_EQ(b.metrics().count, 0);
}

TEST(SplitGram, PaysOnlyWhereItSavesMultiplyAdds) {
  // bert's QKV (384 -> 1152), 8 batches of 128 rows: saves 8*128*384*1920 against 384^2*1152.
  EXPECT_TRUE(gramSplitPays(128, 384, 1152, 8));
  EXPECT_TRUE(gramSplitPays(128, 384, 384, 8));
  // A down projection (K = 4N): the Grams cost more than the products.
  EXPECT_FALSE(gramSplitPays(128, 1536, 384, 8));
  EXPECT_FALSE(gramSplitPays(128, 512, 256, 1000));
  // One batch of few rows does not repay the weight's products.
  EXPECT_FALSE(gramSplitPays(16, 1024, 1024, 1));
  EXPECT_FALSE(gramSplitPays(100000, 8192, 16384, 8));  // K past 4096
}

// bert_encoder from the zoo (scripts/make_zoo.py), analysed twice on the same 2 seeded samples:
// `set(ao, i)` adjusts analysis i's options (2 threads, Percentile, no sensitivity before it).
// Leaves `model` null where the zoo model is missing; fails the test on any error.
void analyseBertTwice(unsigned seed, const std::function<void(AnalysisOptions&, int)>& set,
                      std::shared_ptr<const Model>& model, std::shared_ptr<const AnalysisResult> (&r)[2]) {
  const std::string path = std::string(QS_SOURCE_DIR) + "/.cache/zoo/bert_encoder.onnx";
  if (!std::filesystem::exists(path)) return;
  auto loaded = loadModel(path);
  ASSERT_TRUE(loaded) << loaded.status().message();
  CalibrationDataOptions co;
  co.maxSamples = 2;
  co.batchSize = 1;
  co.seed = seed;
  auto data = CalibrationData::open(**loaded, co);
  ASSERT_TRUE(data) << data.status().message();
  std::shared_ptr<const CalibrationData> shared(std::move(data).value());
  for (int i = 0; i < 2; ++i) {
    AnalysisOptions ao;
    ao.threads = 2;
    ao.sensitivity = false;
    ao.calibration.method = CalibMethod::Percentile;
    set(ao, i);
    auto s = QuantSession::create(*loaded, {}, ao);
    ASSERT_TRUE(s) << s.status().message();
    ASSERT_TRUE((*s)->calibrate(*shared));
    auto res = (*s)->analyze(shared);
    ASSERT_TRUE(res) << res.status().message();
    r[i] = *res;
  }
  model = *loaded;
}

TEST(SplitGram, BertEncoderSplitAsTheProducts) {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const AnalysisResult> r[2];
  analyseBertTwice(3, [](AnalysisOptions& ao, int on) {
    ao.gramSplit = on == 1;
  }, model, r);
  if (HasFatalFailure()) return;
  if (!model) GTEST_SKIP() << "no .cache/zoo/bert_encoder.onnx: run scripts/make_zoo.py";
  const Graph& g = model->graph;
  int split = 0, moved = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeResult &a = r[0]->nodes[i], &b = r[1]->nodes[i];
    ASSERT_EQ(a.hasLayerwise, b.hasLayerwise) << g.nodes[i].name;
    if (!a.hasLayerwise) continue;
    // Both points and the graph-wise figures: the same bits.
    EXPECT_EQ(a.layerwise.snrDb, b.layerwise.snrDb) << g.nodes[i].name;
    EXPECT_EQ(a.layerwise.maxAbs, b.layerwise.maxAbs) << g.nodes[i].name;
    EXPECT_EQ(a.graphwise.snrDb, b.graphwise.snrDb) << g.nodes[i].name;
    if (std::isnan(a.weightSnrDb) || std::isnan(a.activationSnrDb)) continue;
    ++split;
    EXPECT_NEAR(a.weightSnrDb, b.weightSnrDb, 1e-3) << g.nodes[i].name;
    EXPECT_NEAR(a.activationSnrDb, b.activationSnrDb, 1e-3) << g.nodes[i].name;
    moved += a.weightSnrDb != b.weightSnrDb || a.activationSnrDb != b.activationSnrDb;
  }
  // 24 projections with a weight; over 2 batches of 128 rows the Gram route pays for the 6 QKV
  // (384 -> 1152) and 6 up (384 -> 1536) projections only (gramSplitPays), and its figures
  // differ from the products' in the last bits.
  EXPECT_GE(split, 24);
  EXPECT_GE(moved, 12);
  EXPECT_EQ(r[0]->outputs[0].metrics.snrDb, r[1]->outputs[0].metrics.snrDb);
}

TEST(SplitGram, PrepackedWeightsGiveTheSameBits) {
  // bert_encoder with the fake-quantized MatMul weights packed once per analysis
  // (AnalysisOptions::prepackWeights) against packed per run: the quantized pass, the layer-wise
  // products, the Gram route's Xq * Wq and the exact sensitivity cones all give the same bits.
  std::shared_ptr<const Model> model;
  std::shared_ptr<const AnalysisResult> r[2];
  analyseBertTwice(5, [](AnalysisOptions& ao, int on) {
    ao.sensitivity = true;
    ao.sensitivityMethod = SensitivityMethod::Exact;
    ao.cacheBudgetBytes = 0;
    ao.calibration.method = CalibMethod::Max;
    ao.prepackWeights = on == 1;
    ao.dnnlMatMul = false;  // the panels' products: the kernel's bits (oneDNN's: OneDnnWq below)
  }, model, r);
  if (HasFatalFailure()) return;
  if (!model) GTEST_SKIP() << "no .cache/zoo/bert_encoder.onnx: run scripts/make_zoo.py";
  const Graph& g = model->graph;
  int matmuls = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeResult &a = r[0]->nodes[i], &b = r[1]->nodes[i];
    const std::string& name = g.nodes[i].name;
    ASSERT_EQ(a.hasLayerwise, b.hasLayerwise) << name;
    ASSERT_EQ(a.hasGraphwise, b.hasGraphwise) << name;
    if (a.hasGraphwise) {
      EXPECT_EQ(a.graphwise.snrDb, b.graphwise.snrDb) << name;
      EXPECT_EQ(a.graphwise.mse, b.graphwise.mse) << name;
      EXPECT_EQ(a.graphwise.maxAbs, b.graphwise.maxAbs) << name;
    }
    if (!a.hasLayerwise) continue;
    matmuls += g.nodes[i].opType == "MatMul";
    EXPECT_EQ(a.layerwise.snrDb, b.layerwise.snrDb) << name;
    EXPECT_EQ(a.layerwise.maxAbs, b.layerwise.maxAbs) << name;
    EXPECT_EQ(std::isnan(a.weightSnrDb), std::isnan(b.weightSnrDb)) << name;
    if (!std::isnan(a.weightSnrDb)) EXPECT_EQ(a.weightSnrDb, b.weightSnrDb) << name;
    if (!std::isnan(a.activationSnrDb)) EXPECT_EQ(a.activationSnrDb, b.activationSnrDb) << name;
    EXPECT_FALSE(std::isnan(a.sensitivitySnrDb)) << name;
    EXPECT_EQ(a.sensitivitySnrDb, b.sensitivitySnrDb) << name;
  }
  EXPECT_GE(matmuls, 24);
  EXPECT_EQ(r[0]->outputs[0].metrics.snrDb, r[1]->outputs[0].metrics.snrDb);
  EXPECT_EQ(r[0]->outputs[0].metrics.maxAbs, r[1]->outputs[0].metrics.maxAbs);
}

TEST(SplitGram, OneDnnWqWithinRoundingOfThePanels) {
  // bert_encoder with the layer-wise products of Wq on oneDNN's matmul (AnalysisOptions::dnnlMatMul,
  // where oneDNN runs AVX-512 kernels or QS_DNNL_MATMUL=1) against the kernel's panels: graph-wise
  // figures and exact sensitivities the same bits (the quantized pass and the cones keep the
  // panels), layer-wise figures and the split within float rounding (1e-3 dB), and the route
  // really taken (the projections' layer-wise figures move in their last bits).
  if (!DnnlMatMul::preferred()) GTEST_SKIP() << "oneDNN's matmul is not preferred on this CPU";
  std::shared_ptr<const Model> model;
  std::shared_ptr<const AnalysisResult> r[2];
  analyseBertTwice(5, [](AnalysisOptions& ao, int on) {
    ao.sensitivity = true;
    ao.sensitivityMethod = SensitivityMethod::Exact;
    ao.cacheBudgetBytes = 0;
    ao.dnnlMatMul = on == 1;
  }, model, r);
  if (HasFatalFailure()) return;
  if (!model) GTEST_SKIP() << "no .cache/zoo/bert_encoder.onnx: run scripts/make_zoo.py";
  const Graph& g = model->graph;
  int matmuls = 0, moved = 0;
  auto near = [](double a, double b, const std::string& what) {
    if (std::isnan(a) || std::isnan(b)) {
      EXPECT_EQ(std::isnan(a), std::isnan(b)) << what;
    } else if (std::isinf(a) || std::isinf(b)) {
      EXPECT_EQ(a, b) << what;
    } else {
      EXPECT_NEAR(a, b, 1e-3) << what;
    }
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeResult &a = r[0]->nodes[i], &b = r[1]->nodes[i];
    const std::string& name = g.nodes[i].name;
    ASSERT_EQ(a.hasLayerwise, b.hasLayerwise) << name;
    ASSERT_EQ(a.hasGraphwise, b.hasGraphwise) << name;
    if (a.hasGraphwise) {
      EXPECT_EQ(a.graphwise.snrDb, b.graphwise.snrDb) << name;
      EXPECT_EQ(a.graphwise.maxAbs, b.graphwise.maxAbs) << name;
    }
    if (!a.hasLayerwise) continue;
    near(a.layerwise.snrDb, b.layerwise.snrDb, name + " layer-wise");
    near(a.weightSnrDb, b.weightSnrDb, name + " weights only");
    near(a.activationSnrDb, b.activationSnrDb, name + " activations only");
    EXPECT_EQ(a.sensitivitySnrDb, b.sensitivitySnrDb) << name;
    if (g.nodes[i].opType != "MatMul" || std::isnan(a.weightSnrDb)) continue;
    ++matmuls;
    moved += a.layerwise.snrDb != b.layerwise.snrDb;
  }
  EXPECT_GE(matmuls, 24);
  EXPECT_GE(moved, 12);  // the products came from oneDNN, not the panels
  EXPECT_EQ(r[0]->outputs[0].metrics.snrDb, r[1]->outputs[0].metrics.snrDb);
}

}  // namespace
}  // namespace qs
