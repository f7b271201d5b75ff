// The layer-wise MatMul in one go (core/analysis/layerwise_matmul.h) against three runs of the
// MatMul kernel's GEMM: the same sums bit for bit, on shapes that exercise every edge of the
// blocking (rows not a multiple of 6, columns not a multiple of 16, K past one 256 slice, several
// row and column blocks, one and two threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/analysis/layerwise_matmul.h"
#include "core/analysis/node_paths.h"
#include "core/kernels/gemm.h"
#include "core/numeric/fake_quant.h"
#include "tests/support/gemm_helpers.h"

namespace qs {
namespace {

using test::kernelMatMul;

Tensor randomTensor(Shape shape, std::mt19937& rng, float scale, float mean = 0.f) {
  return test::normalTensor(std::move(shape), rng, scale, mean);
}

// A MatMul's operands for the layer-wise tests: X ~ N(0, 1) of `xShape`, W ~ N(0, 0.1) of K x n,
// X fake-quantized per tensor (scale 0.02), W per column (0.001).
struct QuantizedOperands {
  Tensor x, w, xq, wq;
};
QuantizedOperands quantizedOperands(const Shape& xShape, int64_t n, std::mt19937& rng) {
  QuantizedOperands o;
  o.x = randomTensor(xShape, rng, 1.f);
  o.w = randomTensor({xShape.back(), n}, rng, 0.1f);
  o.xq = fakeQuantize(o.x, {0.02f}, 0, QuantMode::Int8, kActQmin, kActQmax);
  o.wq = fakeQuantize(o.w, std::vector<float>((size_t)n, 0.001f), 1, QuantMode::Int8, kWeightQmin, kWeightQmax);
  return o;
}

void expectSame(const ErrorAccumulator& a, const ErrorAccumulator& b, const char* what) {
  const ErrorMetrics x = a.metrics(), y = b.metrics();
  EXPECT_EQ(x.count, y.count) << what;
  EXPECT_EQ(x.snrDb, y.snrDb) << what;
  EXPECT_EQ(x.cosine, y.cosine) << what;
  EXPECT_EQ(x.mse, y.mse) << what;
  EXPECT_EQ(x.maxAbs, y.maxAbs) << what;
}

TEST(LayerwiseMatMul, SameSumsAsThreeRunsOfTheKernel) {
  struct Case {
    Shape x;
    int64_t n;
  };
  const Case cases[] = {{{1, 128, 96}, 80},  {{2, 37, 70}, 83},  {{3, 100, 300}, 40},
                        {{1, 7, 33}, 17},    {{400, 64}, 530},   {{1, 1, 5, 24}, 16}};
  std::mt19937 rng(11);
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      const auto [x, w, xq, wq] = quantizedOperands(c.x, c.n, rng);
      const Tensor ref = kernelMatMul(x, w, threads);
      ErrorAccumulator full, weight, act;
      ASSERT_TRUE(layerwiseMatMul(x, xq, w, wq, ref, threads, full, weight, act));
      ErrorAccumulator eFull, eWeight, eAct;
      eFull.add(ref, kernelMatMul(xq, wq, threads), threads);
      eWeight.add(ref, kernelMatMul(x, wq, threads), threads);
      eAct.add(ref, kernelMatMul(xq, w, threads), threads);
      expectSame(full, eFull, "both points");
      expectSame(weight, eWeight, "weights only");
      expectSame(act, eAct, "activations only");
      // Each kind of error is really there.
      EXPECT_GT(full.metrics().mse, 0.0);
      EXPECT_GT(weight.metrics().mse, 0.0);
      EXPECT_GT(act.metrics().mse, 0.0);
    }
  }
}

TEST(LayerwiseMatMul, PrepackedWqGivesTheSameSums) {
  // Wq packed once per analysis (NodePaths::packedWq) against Wq packed per block: the same bits
  // for the layer-wise sums and for the quantized pass's product (runPackedMatMul against the
  // MatMul kernel's sgemm), on the blocking's edges.
  struct Case {
    Shape x;
    int64_t n;
  };
  const Case cases[] = {
      {{1, 128, 96}, 80}, {{2, 37, 70}, 83}, {{3, 100, 300}, 40}, {{400, 64}, 530}, {{1, 1, 5, 24}, 16}};
  std::mt19937 rng(17);
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      const int64_t K = c.x.back();
      const auto [x, w, xq, wq] = quantizedOperands(c.x, c.n, rng);
      PackedMatMulWeight pw;
      pw.source = wq;
      pw.panels = PackedPanels(wq.data<float>(), c.n, false, K, c.n);
      EXPECT_TRUE(pw.packs(wq));
      EXPECT_FALSE(pw.packs(w));
      const Tensor ref = kernelMatMul(x, w, threads);
      ErrorAccumulator full, weight, act, pFull, pWeight, pAct;
      ASSERT_TRUE(layerwiseMatMul(x, xq, w, wq, ref, threads, full, weight, act));
      ASSERT_TRUE(layerwiseMatMul(x, xq, w, wq, ref, threads, pFull, pWeight, pAct, &pw.panels));
      expectSame(pFull, full, "both points");
      expectSame(pWeight, weight, "weights only");
      expectSame(pAct, act, "activations only");
      Tensor y;
      ASSERT_TRUE(runPackedMatMul(pw, xq, threads, y));
      const Tensor expected = kernelMatMul(xq, wq, threads);
      ASSERT_EQ(y.shape(), expected.shape());
      EXPECT_EQ(std::memcmp(y.data<float>(), expected.data<float>(), sizeof(float) * (size_t)y.numel()), 0);
    }
  }
}

TEST(LayerwiseMatMul, PackedMatMulRefusesWhatTheKernelRunsAnotherWay) {
  std::mt19937 rng(5);
  Tensor w = randomTensor({8, 4}, rng, 1.f);
  PackedMatMulWeight pw;
  pw.source = w;
  pw.panels = PackedPanels(w.data<float>(), 4, false, 8, 4);
  Tensor y;
  EXPECT_FALSE(runPackedMatMul(pw, randomTensor({2, 8}, rng, 1.f), 1, y));  // small-rows GEMM
  EXPECT_FALSE(runPackedMatMul(pw, randomTensor({8}, rng, 1.f), 1, y));     // a vector
  EXPECT_FALSE(runPackedMatMul(pw, randomTensor({6, 9}, rng, 1.f), 1, y));  // another K
  EXPECT_TRUE(y.empty());
  EXPECT_TRUE(runPackedMatMul(pw, randomTensor({2, 3, 8}, rng, 1.f), 1, y));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
}

TEST(LayerwiseMatMul, OneDnnWqWithinRoundingOfTheKernel) {
  // Wq in oneDNN's layout (PackedMatMulWeight::dnnl): its product within float rounding of a
  // double-precision product, and the layer-wise sums with it within rounding of the kernel's
  // (Xq * W, still the kernel's, to the bit), on shapes past the blocking's edges.
  if (!DnnlMatMul::preferred()) GTEST_SKIP() << "oneDNN's matmul is not preferred on this CPU";
  struct Case {
    Shape x;
    int64_t n;
  };
  const Case cases[] = {
      {{1, 128, 96}, 80}, {{2, 37, 70}, 83}, {{3, 100, 300}, 64}, {{400, 64}, 530}, {{1, 5, 384}, 1152}};
  std::mt19937 rng(23);
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      const int64_t K = c.x.back(), N = c.n;
      const auto [x, w, xq, wq] = quantizedOperands(c.x, N, rng);
      ASSERT_TRUE(PackedMatMulWeight::dnnlPays(K, N));
      PackedMatMulWeight pw;
      pw.source = wq;
      pw.dnnl = DnnlMatMul::create(wq.data<float>(), N, false, K, N, nullptr, 1.f, false);
      ASSERT_TRUE(pw.dnnl);
      const int64_t M = xq.numel() / K;
      Tensor y(DType::Float, {M, N});
      ASSERT_TRUE(pw.dnnl->run(xq.data<float>(), K, M, y.data<float>(), N, threads));
      const float *a = xq.data<float>(), *b = wq.data<float>(), *got = y.data<float>();
      double worst = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double sum = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            sum += (double)a[m * K + k] * b[k * N + n];
            mag += std::fabs((double)a[m * K + k] * b[k * N + n]);
          }
          worst = std::max(worst, std::fabs(got[m * N + n] - sum) / std::max(mag, 1e-30));
        }
      EXPECT_LT(worst, 1e-5) << "K " << K << " N " << N;
      const Tensor ref = kernelMatMul(x, w, threads);
      ErrorAccumulator full, weight, act, dFull, dWeight, dAct;
      ASSERT_TRUE(layerwiseMatMul(x, xq, w, wq, ref, threads, full, weight, act));
      ASSERT_TRUE(layerwiseMatMul(x, xq, w, wq, ref, threads, dFull, dWeight, dAct, nullptr, pw.dnnl.get()));
      EXPECT_NEAR(dFull.metrics().snrDb, full.metrics().snrDb, 1e-4);
      EXPECT_NEAR(dWeight.metrics().snrDb, weight.metrics().snrDb, 1e-4);
      EXPECT_EQ(dFull.metrics().count, full.metrics().count);
      expectSame(dAct, act, "activations only (the kernel's product either way)");
    }
  }
}

TEST(LayerwiseMatMul, RefusesWhatTheKernelRunsAnotherWay) {
  std::mt19937 rng(3);
  ErrorAccumulator a, b, c;
  // Two rows: the kernel's small-rows GEMM.
  Tensor x = randomTensor({2, 8}, rng, 1.f), w = randomTensor({8, 4}, rng, 1.f);
  EXPECT_FALSE(layerwiseMatMul(x, x, w, w, kernelMatMul(x, w, 1), 1, a, b, c));
  // A batched (3-D) B, and a reference of the wrong shape.
  Tensor x3 = randomTensor({4, 8}, rng, 1.f), w3 = randomTensor({1, 8, 4}, rng, 1.f);
  EXPECT_FALSE(layerwiseMatMul(x3, x3, w3, w3, randomTensor({4, 4}, rng, 1.f), 1, a, b, c));
  EXPECT_FALSE(layerwiseMatMul(x3, x3, w, w, randomTensor({4, 5}, rng, 1.f), 1, a, b, c));
  EXPECT_EQ(a.metrics().count, 0);
}

}  // namespace
}  // namespace qs
