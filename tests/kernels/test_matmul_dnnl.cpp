// oneDNN's matmul backend (core/kernels/matmul_dnnl.h) against a naive product in double: B given
// as [K, N] and transposed, with and without bias, alpha and Gelu, row strides wider than the rows
// (lda, ldc), row counts that split unevenly across threads, 1 and 2 threads (the tasks running one
// primitive at once, each with its own scratchpad). Skipped without oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/kernels/matmul_dnnl.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

using qs::test::randomValues;

TEST(DnnlMatMul, MatchesANaiveProduct) {
  std::mt19937 rng(5);
  struct Case {
    int64_t M, K, N;
    bool transB, bias, gelu;
    float alpha;
    int64_t padA, padC;
  };
  const Case cases[] = {{1, 8, 8, false, false, false, 1.f, 0, 0},     {37, 64, 48, false, true, false, 1.f, 3, 0},
                        {256, 96, 160, true, true, true, 1.f, 0, 5}, {129, 128, 64, true, false, false, 0.125f, 1, 2},
                        {300, 384, 384, false, true, true, 0.5f, 0, 0},  {256, 384, 1536, false, true, true, 1.f, 0, 0},
                        {256, 1536, 384, true, true, false, 1.f, 0, 0}};
  for (const Case& c : cases) {
    const int64_t lda = c.K + c.padA, ldc = c.N + c.padC;
    std::vector<float> A = randomValues((size_t)(c.M * lda), rng), B = randomValues((size_t)(c.K * c.N), rng),
                       bias = randomValues((size_t)c.N, rng);
    auto mm = DnnlMatMul::create(B.data(), c.transB ? c.K : c.N, c.transB, c.K, c.N, c.bias ? bias.data() : nullptr,
                                 c.alpha, c.gelu);
    if (!mm) GTEST_SKIP() << "built without oneDNN";
    for (int threads : {1, 2}) {
      std::vector<float> Y((size_t)(c.M * ldc), -7.f);
      ASSERT_TRUE(mm->run(A.data(), lda, c.M, Y.data(), ldc, threads).isOk());
      double err = 0, ref = 0;
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k)
            s += (double)A[(size_t)(m * lda + k)] * (c.transB ? B[(size_t)(n * c.K + k)] : B[(size_t)(k * c.N + n)]);
          s = c.alpha * s + (c.bias ? bias[(size_t)n] : 0.0);
          if (c.gelu) s = 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
          const double d = Y[(size_t)(m * ldc + n)] - s;
          err += d * d;
          ref += s * s;
        }
      EXPECT_LT(std::sqrt(err / ref), 1e-5) << c.M << "x" << c.K << "x" << c.N << " threads " << threads;
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = c.N; n < ldc; ++n) EXPECT_EQ(Y[(size_t)(m * ldc + n)], -7.f) << "padding written";
    }
  }
}

TEST(DnnlMatMul, ColumnPartsGiveTheSameBits) {
  // The weights held as 2 or 3 column ranges (DnnlMatMul::create's columnParts): products with more
  // columns than rows (a Linear layer at batch 1) split the columns across the threads, the others
  // the rows; either way every element is the one the unsplit weights give when Y's rows are wider
  // than the product (ldc > N), to the bit, at 1 and 2 threads, and the columns beyond N are not
  // written. (With a dense Y, ldc = N, oneDNN 2.6 picks another kernel for the unsplit product,
  // whose sums round differently; FusedMatMul therefore always holds at least 2 parts.)
  std::mt19937 rng(11);
  struct Case {
    int64_t M, K, N;
    bool bias, gelu;
  };
  const Case cases[] = {{128, 384, 1152, true, false}, {128, 384, 1536, true, true},  {128, 1536, 384, true, false},
                        {128, 512, 2048, true, true},  {37, 64, 200, false, false},   {1024, 384, 384, true, false},
                        {100, 96, 64, true, false},    {128, 512, 512, true, false},  {128, 2048, 512, true, false},
                        {128, 512, 8192, false, false}};
  for (const Case& c : cases) {
    std::vector<float> A = randomValues((size_t)(c.M * c.K), rng), B = randomValues((size_t)(c.K * c.N), rng),
                       bias = randomValues((size_t)c.N, rng);
    auto whole = DnnlMatMul::create(B.data(), c.N, false, c.K, c.N, c.bias ? bias.data() : nullptr, 1.f, c.gelu, 1);
    if (!whole) GTEST_SKIP() << "built without oneDNN";
    const int64_t wide = c.N + 3;
    std::vector<float> ref((size_t)(c.M * wide), -7.f);
    ASSERT_TRUE(whole->run(A.data(), c.K, c.M, ref.data(), wide, 1).isOk());
    for (int parts : {2, 3}) {
      auto split = DnnlMatMul::create(B.data(), c.N, false, c.K, c.N, c.bias ? bias.data() : nullptr, 1.f, c.gelu, parts);
      for (int64_t ldc : {c.N, wide})
        for (int threads : {1, 2}) {
          std::vector<float> Y((size_t)(c.M * ldc), -7.f);
          ASSERT_TRUE(split->run(A.data(), c.K, c.M, Y.data(), ldc, threads).isOk());
          size_t differ = 0;
          for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < ldc; ++n)
              differ += std::memcmp(&Y[(size_t)(m * ldc + n)], &ref[(size_t)(m * wide + n)], sizeof(float)) != 0;
          EXPECT_EQ(differ, 0u) << c.M << "x" << c.K << "x" << c.N << " ldc " << ldc << " parts " << parts
                                << " threads " << threads;
        }
    }
  }
}

}  // namespace
}  // namespace qs
