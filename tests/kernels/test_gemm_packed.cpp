// GEMM over B packed once (PackedPanels: the constant weights of MatMul, Gemm and FusedMatMul)
// against a naive reference, and the kernels that use it: the same results, to the bit, as when
// B arrives at run time and is packed per block.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/exec/executor.h"
#include "core/kernels/gemm.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;
using qs::test::builtModel;
using qs::test::randomTensor;
using qs::test::randomValues;

TEST(KernelsGemmPacked, RandomShapesVsNaive) {
  std::mt19937 rng(11);
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 17, 9}, {13, 33, 300}, {128, 200, 64}, {40, 1000, 5}, {6, 16, 513}};
  int caseNo = 0;
  for (const auto& s : sizes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    for (int variant = 0; variant < 8; ++variant) {
      const bool tA = variant & 1, tB = variant & 2, acc = variant & 4;
      const float alpha = caseNo % 2 ? 0.5f : 1.f;
      const int threads = 1 + caseNo % 2;
      ++caseNo;
      const int64_t lda = (tA ? M : K) + 2, ldb = (tB ? K : N) + 3, ldc = N + 1;
      auto A = randomValues((size_t)((tA ? K : M) * lda), rng);
      auto B = randomValues((size_t)((tB ? N : K) * ldb), rng);
      auto C = randomValues((size_t)(M * ldc), rng);
      std::vector<float> want = C;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double sum = 0;
          for (int64_t k = 0; k < K; ++k)
            sum += (double)(tA ? A[k * lda + m] : A[m * lda + k]) * (tB ? B[n * ldb + k] : B[k * ldb + n]);
          want[m * ldc + n] = (float)(alpha * sum + (acc ? (double)C[m * ldc + n] : 0.0));
        }
      const PackedPanels packed(B.data(), ldb, tB, K, N);
      ASSERT_EQ(packed.rows(), K);
      ASSERT_EQ(packed.cols(), N);
      std::vector<float> got = C;
      sgemmPacked(tA, M, alpha, A.data(), lda, packed, acc, got.data(), ldc, threads);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n)
          ASSERT_NEAR(got[m * ldc + n], want[m * ldc + n], 1e-4f * (1.f + std::sqrt((float)K)))
              << "M=" << M << " N=" << N << " K=" << K << " transA=" << tA << " transB=" << tB << " acc=" << acc;
        EXPECT_EQ(got[m * ldc + N], C[m * ldc + N]) << "the padding past N of row " << m << " was written";
      }
      // Bit-identical to the per-call packing of sgemm (same products, same order).
      std::vector<float> ref = C;
      sgemm(tA, tB, M, N, K, alpha, A.data(), lda, B.data(), ldb, acc ? 1.f : 0.f, ref.data(), ldc, threads);
      ASSERT_EQ(got, ref) << "M=" << M << " N=" << N << " K=" << K;
    }
  }
}

TEST(KernelsGemmPacked, BlockFromAColumnOffset) {
  std::mt19937 rng(3);
  const int64_t M = 10, N = 70, K = 20, n0 = 32, nb = 38;
  auto A = randomValues((size_t)(M * K), rng), B = randomValues((size_t)(K * N), rng);
  const PackedPanels packed(B.data(), N, false, K, N);
  const PackedMatrix pa(A.data(), K, M, K);
  std::vector<float> c((size_t)(M * nb), -7.f);
  gemmBlockPacked(pa, 0, M, packed, n0, nb, c.data(), nb, false);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < nb; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += (double)A[m * K + k] * B[k * N + n0 + n];
      ASSERT_NEAR(c[m * nb + n], sum, 1e-4) << m << "," << n;
    }
}

namespace {

// y1 = MatMul(x, w1) over [2, 7, 40] x [40, 50]; y2 = Gemm(x2, w2^T, c; alpha 0.5, beta 0.25) with
// w2 [30, 40]. The weights are initializers, or graph inputs (packed per run) when asInputs.
std::shared_ptr<Model> linearModel(bool asInputs, const std::vector<float>& w1, const std::vector<float>& w2,
                                   const std::vector<float>& c) {
  OnnxBuilder b(13);
  b.input("x", {2, 7, 40});
  b.input("x2", {9, 40});
  if (asInputs) {
    b.input("w1", {40, 50});
    b.input("w2", {30, 40});
  } else {
    b.initializer("w1", {40, 50}, w1);
    b.initializer("w2", {30, 40}, w2);
  }
  b.initializer("c", {30}, c);
  b.node("MatMul", {"x", "w1"}, {"y1"});
  auto& g = b.node("Gemm", {"x2", "w2", "c"}, {"y2"});
  OnnxBuilder::attrInt(g, "transB", 1);
  OnnxBuilder::attrFloat(g, "alpha", 0.5f);
  OnnxBuilder::attrFloat(g, "beta", 0.25f);
  b.output("y1", {2, 7, 50});
  b.output("y2", {9, 30});
  return builtModel(b);
}

}  // namespace

TEST(KernelsGemmPacked, ConstantWeightsMatchWeightsFedAtRunTime) {
  std::mt19937 rng(5);
  const auto w1 = randomValues(40 * 50, rng), w2 = randomValues(30 * 40, rng), c = randomValues(30, rng);
  const Tensor x = randomTensor({2, 7, 40}, rng), x2 = randomTensor({9, 40}, rng);
  Tensor tw1(DType::Float, {40, 50}), tw2(DType::Float, {30, 40});
  std::copy(w1.begin(), w1.end(), tw1.data<float>());
  std::copy(w2.begin(), w2.end(), tw2.data<float>());
  for (bool rewrites : {false, true}) {
    ExecutorOptions opt;
    opt.threads = 2;
    opt.rewrites = rewrites;
    auto constant = Executor::create(linearModel(false, w1, w2, c), opt);
    auto fed = Executor::create(linearModel(true, w1, w2, c), opt);
    ASSERT_TRUE(constant && fed);
    auto rc = (*constant)->run({{"x", x}, {"x2", x2}});
    auto rf = (*fed)->run({{"x", x}, {"x2", x2}, {"w1", tw1}, {"w2", tw2}});
    ASSERT_TRUE(rc) << rc.status().message();
    ASSERT_TRUE(rf) << rf.status().message();
    ASSERT_EQ(rc->size(), 2u);
    for (size_t o = 0; o < 2; ++o) {
      ASSERT_EQ((*rc)[o].shape(), (*rf)[o].shape());
      for (int64_t i = 0; i < (*rc)[o].numel(); ++i)
        ASSERT_EQ((*rc)[o].data<float>()[i], (*rf)[o].data<float>()[i]) << "output " << o << " at " << i;
    }
    // And against the formulas.
    const float* y1 = (*rc)[0].data<float>();
    for (int64_t r = 0; r < 14; ++r)
      for (int64_t n = 0; n < 50; ++n) {
        double s = 0;
        for (int64_t k = 0; k < 40; ++k) s += (double)x.data<float>()[r * 40 + k] * w1[(size_t)(k * 50 + n)];
        ASSERT_NEAR(y1[r * 50 + n], s, 1e-4) << "y1 " << r << "," << n;
      }
    const float* y2 = (*rc)[1].data<float>();
    for (int64_t r = 0; r < 9; ++r)
      for (int64_t n = 0; n < 30; ++n) {
        double s = 0;
        for (int64_t k = 0; k < 40; ++k) s += (double)x2.data<float>()[r * 40 + k] * w2[(size_t)(n * 40 + k)];
        ASSERT_NEAR(y2[r * 30 + n], 0.5 * s + 0.25 * c[(size_t)n], 1e-4) << "y2 " << r << "," << n;
      }
  }
}

// Gemm with up to 8 rows of A and transposed constant B (a classifier's head at batch 1 to 8)
// streams B four rows at a time. For any N (rows of B left over past a multiple of 4, per thread
// chunk) and any K (a tail past a multiple of 8): near the exact product, the same floats on 1 and
// 2 threads, and each row of A gives the same floats alone as beside other rows (an image's logits
// do not depend on the batch).
TEST(KernelsGemmPacked, FewRowsTransposedBNearExactAndIndependentOfThreadsAndRows) {
  std::mt19937 rng(17);
  const int64_t shapes[][2] = {{1000, 2048}, {1003, 2051}, {7, 5}, {65, 16}, {3, 9}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], K = s[1];
    const auto w = randomValues((size_t)(N * K), rng), c = randomValues((size_t)N, rng);
    const Tensor x = randomTensor({8, K}, rng);
    // Runs rows [m0, m0 + M) of x on `threads`.
    auto run = [&](int64_t m0, int64_t M, int threads) -> std::vector<float> {
      OnnxBuilder b(13);
      b.input("x", {M, K});
      b.initializer("w", {N, K}, w);
      b.initializer("c", {N}, c);
      auto& g = b.node("Gemm", {"x", "w", "c"}, {"y"});
      OnnxBuilder::attrInt(g, "transB", 1);
      OnnxBuilder::attrFloat(g, "alpha", 0.75f);
      OnnxBuilder::attrFloat(g, "beta", 0.5f);
      b.output("y", {M, N});
      Tensor xm(DType::Float, {M, K});
      std::copy(x.data<float>() + m0 * K, x.data<float>() + (m0 + M) * K, xm.data<float>());
      ExecutorOptions opt;
      opt.threads = threads;
      auto ex = Executor::create(builtModel(b), opt);
      EXPECT_TRUE(ex) << ex.status().message();
      if (!ex) return {};
      auto r = (*ex)->run({{"x", xm}});
      EXPECT_TRUE(r) << r.status().message();
      if (!r) return {};
      return std::vector<float>((*r)[0].data<float>(), (*r)[0].data<float>() + M * N);
    };
    std::vector<std::vector<float>> alone;  // each row alone, one thread: the reference bits
    for (int64_t m = 0; m < 8; ++m) alone.push_back(run(m, 1, 1));
    for (int64_t M : {1, 2, 5, 8}) {
      for (int threads : {1, 2}) {
        const std::vector<float> y = run(0, M, threads);
        ASSERT_EQ((int64_t)y.size(), M * N);
        const std::string what = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                 " threads " + std::to_string(threads);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            ASSERT_EQ(y[(size_t)(m * N + n)], alone[(size_t)m][(size_t)n]) << what << " at " << m << "," << n;
            double exact = 0;
            for (int64_t k = 0; k < K; ++k) exact += (double)x.data<float>()[m * K + k] * w[(size_t)(n * K + k)];
            ASSERT_NEAR(y[(size_t)(m * N + n)], 0.75 * exact + 0.5 * c[(size_t)n], 1e-4 * (1.0 + std::sqrt((double)K)))
                << what << " at " << m << "," << n;
          }
      }
    }
  }
}
