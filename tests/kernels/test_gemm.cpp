// The packed AVX2 sgemm against a naive reference (every transpose, alpha, beta, edge sizes,
// 1..3 threads), the process pool's parallelFor and parallelForEach, and the fused Conv activations.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <vector>

#include "core/exec/parallel.h"
#include "core/kernels/conv.h"
#include "core/kernels/gemm.h"

using namespace qs;

namespace {

std::vector<float> randomVec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST(KernelsGemm, RandomShapesVsNaive) {
  std::mt19937 rng(42);
  const int64_t sizes[][3] = {{1, 1, 1},   {5, 7, 3},    {6, 16, 8},   {7, 17, 9},    {13, 33, 300},
                              {24, 600, 27}, {96, 40, 257}, {150, 70, 64}, {200, 300, 100}, {3, 1000, 5}};
  int caseNo = 0;
  for (const auto& s : sizes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    for (int trans = 0; trans < 4; ++trans) {
      const bool tA = trans & 1, tB = trans & 2;
      const float alpha = caseNo % 3 == 0 ? 1.f : 0.75f;
      const float beta = caseNo % 4 == 0 ? 0.f : caseNo % 4 == 1 ? 1.f : -0.5f;
      const int threads = 1 + caseNo % 3;
      ++caseNo;
      const int64_t lda = (tA ? M : K) + 3, ldb = (tB ? K : N) + 1, ldc = N + 2;
      auto A = randomVec((size_t)((tA ? K : M) * lda), rng);
      auto B = randomVec((size_t)((tB ? N : K) * ldb), rng);
      auto C = randomVec((size_t)(M * ldc), rng);
      std::vector<float> want = C;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += (double)(tA ? A[k * lda + m] : A[m * lda + k]) * (tB ? B[n * ldb + k] : B[k * ldb + n]);
          want[m * ldc + n] = (float)(alpha * acc + (beta == 0.f ? 0.0 : beta * (double)C[m * ldc + n]));
        }
      sgemm(tA, tB, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, threads);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n)
          ASSERT_NEAR(C[m * ldc + n], want[m * ldc + n], 1e-4f * (1.f + std::sqrt((float)K)))
              << "M=" << M << " N=" << N << " K=" << K << " transA=" << tA << " transB=" << tB << " at " << m << "," << n;
      // The padding between rows of C is never written.
      for (int64_t m = 0; m < M; ++m) EXPECT_EQ(C[m * ldc + N], want[m * ldc + N]);
    }
  }
}

TEST(KernelsGemm, OneAndTwoThreadsGiveIdenticalResults) {
  // Blocks only split the output: every element sums the same products in the same order.
  std::mt19937 rng(7);
  const int64_t M = 96, N = 2000, K = 300;
  auto A = randomVec((size_t)(M * K), rng), B = randomVec((size_t)(K * N), rng);
  std::vector<float> c1((size_t)(M * N)), c2((size_t)(M * N));
  sgemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, c1.data(), N, 1);
  sgemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, c2.data(), N, 2);
  EXPECT_EQ(c1, c2);
}

TEST(KernelsParallel, EveryIndexOnceForAnyThreadCountAndWhenNested) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t n : {1, 2, 7, 100, 10007}) {
      std::vector<std::atomic<int>> hits((size_t)n);
      parallelFor(threads, n, 3, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LE(e, n);
        // A nested call runs serially on the calling thread and still covers its range.
        parallelFor(threads, e - b, 1, [&](int64_t nb, int64_t ne) {
          for (int64_t i = nb; i < ne; ++i) hits[(size_t)(b + i)]++;
        });
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[(size_t)i].load(), 1) << "threads " << threads << " n " << n << " i " << i;
    }
  }
}

TEST(KernelsParallel, ForEachRunsEveryItemOnceWithSerialRegionsInside) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t n : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> hits((size_t)n);
      std::atomic<int> parallelInside{0};
      parallelForEach(threads, n, [&](int64_t i) {
        hits[(size_t)i]++;
        // Several items at once: a region inside runs serially, as one chunk on this thread.
        std::atomic<int> chunks{0};
        parallelFor(threads, 1000, 1, [&](int64_t, int64_t) { chunks++; });
        if (chunks.load() != 1) parallelInside++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[(size_t)i].load(), 1) << "threads " << threads << " n " << n;
      if (threads > 1 && n > 1) {
        EXPECT_EQ(parallelInside.load(), 0) << "threads " << threads << " n " << n;
      }
    }
  }
}

TEST(KernelsParallel, ManySmallRegionsInARow) {
  // The pattern of a run: thousands of short regions; each must complete before the next.
  std::vector<int64_t> data(4096, 0);
  for (int r = 0; r < 3000; ++r) {
    parallelFor(2, (int64_t)data.size(), 64, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[(size_t)i] += 1;
    });
  }
  for (int64_t v : data) ASSERT_EQ(v, 3000);
}

TEST(KernelsFusedActivation, VectorAndScalarPathsMatchTheFormulas) {
  using K = FusedActivation::Kind;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-8.f, 8.f);
  const std::vector<FusedActivation> cases = {{K::Relu, 0, 0},        {K::Clip, -1.5f, 2.f},     {K::HardSigmoid, 0.2f, 0.5f},
                                              {K::HardSwish, 1 / 6.f, 0.5f}, {K::Sigmoid, 0, 0}, {K::LeakyRelu, 0.1f, 0},
                                              {K::Mul, 1.5f, 0},      {K::Add, -0.25f, 0}};
  for (const auto& op : cases) {
    std::vector<float> x(37);  // 4 vectors and a tail of 5
    for (float& v : x) v = u(rng);
    std::vector<float> y = x;
    applyFusedActivations(y.data(), (int64_t)y.size(), 0.5f, {op});
    for (size_t i = 0; i < x.size(); ++i) {
      const float v = x[i] + 0.5f;
      float want = 0;
      switch (op.kind) {
        case K::Relu: want = std::max(v, 0.f); break;
        case K::Clip: want = std::min(std::max(v, op.a), op.b); break;
        case K::HardSigmoid: want = std::min(std::max(op.a * v + op.b, 0.f), 1.f); break;
        case K::HardSwish: want = v * std::min(std::max(op.a * v + op.b, 0.f), 1.f); break;
        case K::Sigmoid: want = 1.f / (1.f + std::exp(-v)); break;
        case K::LeakyRelu: want = v >= 0 ? v : op.a * v; break;
        case K::Mul: want = v * op.a; break;
        case K::Add: want = v + op.a; break;
      }
      EXPECT_NEAR(y[i], want, 1e-6f * (1.f + std::fabs(want))) << fusedActivationName(op.kind) << " at " << i;
    }
  }
}
