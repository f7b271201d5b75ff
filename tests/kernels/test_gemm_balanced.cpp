// The GEMM's even split of a product over threads (balancedGemmBlocks, balancedGrain): every
// element of C in exactly one block, blocks within the one-thread cache limits, as many blocks
// per thread, and the products run over it equal to the one-thread ones, to the bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/kernels/gemm.h"
#include "tests/support/model_helpers.h"

using namespace qs;
using qs::test::randomValues;

namespace {

struct GemmShape {
  int64_t M, N, K;
};

// Transformer shapes at batch 1 and 8 (gpt, bert, swin), edge sizes and tiny products.
const GemmShape kShapes[] = {{128, 1536, 512}, {128, 512, 2048}, {128, 8192, 512}, {128, 1152, 384}, {128, 384, 384},
                         {1024, 1536, 512}, {3136, 384, 96},  {784, 576, 192},  {49, 49, 32},     {7, 17, 9},
                         {1, 1, 1},         {5, 3000, 700},   {600, 20, 300},   {0, 16, 4},       {13, 0, 4}};

}  // namespace

TEST(KernelsGemmBalanced, BlocksCoverCOnceWithinCacheLimits) {
  for (const GemmShape& s : kShapes) {
    for (int threads : {1, 2, 3, 4}) {
      SCOPED_TRACE(std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) + " threads " +
                   std::to_string(threads));
      const GemmBlocks g = balancedGemmBlocks(s.M, s.N, s.K, threads);
      std::vector<int> hits((size_t)(s.M * s.N), 0);
      int64_t mb1, nb1;
      gemmBlocking(s.M, s.N, s.K, 1, mb1, nb1);
      for (int64_t q = 0; q < g.count(); ++q) {
        int64_t m0, m1, n0, nb;
        g.block(q, m0, m1, n0, nb);
        EXPECT_EQ(m0 % 6, 0);
        EXPECT_EQ(n0 % 16, 0);
        if (s.M == 0 || s.N == 0) continue;
        ASSERT_LT(m0, m1);
        ASSERT_GT(nb, 0);
        ASSERT_LE(m1, s.M);
        ASSERT_LE(n0 + nb, s.N);
        // No bigger than a one-thread block (the L2-sized A and B slices gemmBlocking chose).
        EXPECT_LE(m1 - m0, mb1);
        EXPECT_LE(nb, nb1);
        for (int64_t m = m0; m < m1; ++m)
          for (int64_t n = n0; n < n0 + nb; ++n) ++hits[(size_t)(m * s.N + n)];
      }
      EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    }
  }
}

TEST(KernelsGemmBalanced, EqualWorkPerThreadOnTransformerShapes) {
  // Before: 128 x 1536 x 512 on 2 threads was 12 blocks that ctx.parallelFor dealt out as 3
  // chunks of 4, so one thread did 8 of them.
  const struct {
    GemmShape s;
    int64_t blocks;
  } cases[] = {{{128, 1536, 512}, 8},  {{128, 1152, 384}, 8}, {{128, 384, 384}, 8},
               {{128, 8192, 512}, 16}, {{1024, 1536, 512}, 48}, {{3136, 384, 96}, 40}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.s.M) + "x" + std::to_string(c.s.N) + "x" + std::to_string(c.s.K));
    const GemmBlocks g = balancedGemmBlocks(c.s.M, c.s.N, c.s.K, 2);
    EXPECT_EQ(g.count(), c.blocks);
    EXPECT_EQ(g.count() % 8, 0);  // 4 chunks per thread, each the same number of blocks
    int64_t minTiles = INT64_MAX, maxTiles = 0, minPanels = INT64_MAX, maxPanels = 0;
    for (int64_t q = 0; q < g.count(); ++q) {
      int64_t m0, m1, n0, nb;
      g.block(q, m0, m1, n0, nb);
      minTiles = std::min(minTiles, (m1 - m0 + 5) / 6);
      maxTiles = std::max(maxTiles, (m1 - m0 + 5) / 6);
      minPanels = std::min(minPanels, (nb + 15) / 16);
      maxPanels = std::max(maxPanels, (nb + 15) / 16);
    }
    EXPECT_LE(maxTiles - minTiles, 1);
    EXPECT_LE(maxPanels - minPanels, 1);
  }
  // Small products stay in one block, as gemmBlocking keeps them.
  EXPECT_EQ(balancedGemmBlocks(49, 49, 32, 2).count(), 1);
}

TEST(KernelsGemmBalanced, GrainGivesEveryThreadTheSameChunks) {
  EXPECT_EQ(balancedGrain(12, 2, 1), 2);    // 6 chunks of 2 (bert's 12 heads)
  EXPECT_EQ(balancedGrain(8, 2, 1), 1);     // 8 chunks of 1 (gpt's 8 heads)
  EXPECT_EQ(balancedGrain(192, 2, 6), 24);  // 8 chunks of 24 (swin stage 1: 64 windows x 3 heads)
  EXPECT_EQ(balancedGrain(7, 2, 1), 1);     // no even split: the minimum
  EXPECT_EQ(balancedGrain(12, 1, 3), 3);
  EXPECT_EQ(balancedGrain(4, 2, 8), 8);
  // Whenever some grain splits n items into the same chunks for every thread, the one chosen does.
  auto even = [](int64_t n, int threads, int64_t g) {
    return n % g == 0 && (n / g) % threads == 0 && n / g <= 4 * threads;
  };
  for (int64_t n = 1; n <= 64; ++n)
    for (int threads : {2, 3, 4}) {
      bool exists = false;
      for (int64_t g = 1; g <= n; ++g) exists = exists || even(n, threads, g);
      const int64_t g = balancedGrain(n, threads, 1);
      if (exists) EXPECT_TRUE(even(n, threads, g)) << n << " items, " << threads << " threads, grain " << g;
      else EXPECT_EQ(g, 1) << n << " items, " << threads << " threads";
    }
}

TEST(KernelsGemmBalanced, PackedProductOnTwoThreadsMatchesOneThreadAndNaive) {
  std::mt19937 rng(5);
  for (const GemmShape s : {GemmShape{128, 1536, 64}, GemmShape{130, 200, 300}, GemmShape{1024, 96, 40}}) {
    SCOPED_TRACE(std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K));
    const auto A = randomValues((size_t)(s.M * s.K), rng);
    const auto B = randomValues((size_t)(s.K * s.N), rng);
    const PackedPanels P(B.data(), s.N, false, s.K, s.N);
    std::vector<float> c1((size_t)(s.M * s.N), -7.f), c2((size_t)(s.M * s.N), 9.f);
    sgemmPacked(false, s.M, 1.f, A.data(), s.K, P, false, c1.data(), s.N, 1);
    sgemmPacked(false, s.M, 1.f, A.data(), s.K, P, false, c2.data(), s.N, 2);
    EXPECT_EQ(c1, c2);
    double maxErr = 0;
    for (int64_t m = 0; m < s.M; m += 7)
      for (int64_t n = 0; n < s.N; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < s.K; ++k) sum += (double)A[(size_t)(m * s.K + k)] * B[(size_t)(k * s.N + n)];
        maxErr = std::max(maxErr, std::abs(sum - c2[(size_t)(m * s.N + n)]) / (1.0 + std::abs(sum)));
      }
    EXPECT_LT(maxErr, 1e-5);
  }
}
