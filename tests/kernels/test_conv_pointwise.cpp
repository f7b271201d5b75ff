// The direct 1x1 Conv (core/kernels/conv_pointwise.h): the same bits as the GEMM path it replaces
// (the same node with W not a constant, so nothing is packed at load and the GEMM path runs) for
// pixel counts around the 16- and 8-pixel tiles (masked tails included), output channels around
// the 6-row panel, K around the 256-long slice, batch 1 and 3, every fused activation, with and
// without bias (zeros included); 1 and 2 threads alike; and a naive reference. On AVX-512 CPUs the
// direct kernel is the 16-lane one; ctest conv_pointwise_avx2 runs these with the AVX2 one forced.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_pointwise.h"
#include "tests/support/conv_helpers.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

using K = FusedActivation::Kind;
using qs::test::randomTensor;

Tensor runConv(const Tensor& x, const Tensor& w, const Tensor* b, const std::vector<FusedActivation>& acts,
               bool constant, int threads, const std::vector<std::pair<std::string, std::vector<int64_t>>>& attrs = {}) {
  return test::runFusedConv(x, w, b, acts, constant, threads, attrs);
}

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.numel() > 0 &&
         std::memcmp(a.data<float>(), b.data<float>(), sizeof(float) * (size_t)a.numel()) == 0;
}

TEST(ConvPointwise, SameBitsAsTheGemmPathAndNearNaive) {
  std::mt19937 rng(23);
  const std::vector<std::vector<FusedActivation>> actSets = {{},
                                                             {{K::Relu, 0, 0}},
                                                             {{K::Clip, 0.f, 6.f}},
                                                             {{K::Sigmoid, 0, 0}},
                                                             {{K::HardSwish, 1.f / 6, 0.5f}},
                                                             {{K::LeakyRelu, 0.1f, 0}, {K::Mul, 0.5f, 0}, {K::Add, 1.f, 0}},
                                                             {{K::HardSigmoid, 0.2f, 0.5f}, {K::Clip, 0.1f, 0.9f}}};
  struct Case {
    int64_t C, M, H, W;
  };
  // Pixels: 49 (three strips and one masked pixel), 196, 2, 8, 9, 15, 16, 17, 24 and a long row.
  const std::vector<Case> cases = {{16, 96, 7, 7},  {24, 13, 14, 14}, {5, 7, 1, 2},   {3, 6, 2, 4},  {9, 11, 3, 3},
                                   {7, 1, 3, 5},    {33, 12, 4, 4},   {20, 19, 1, 17}, {40, 30, 4, 6}, {300, 14, 5, 5},
                                   {520, 7, 3, 7},  {257, 9, 2, 9},   {12, 40, 9, 40},
                                   // around the AVX-512 kernel's 32-pixel strips and 12-row tiles
                                   {24, 12, 4, 8},  {64, 13, 1, 33},  {300, 25, 6, 8}, {8, 25, 3, 80}, {10, 11, 1, 31},
                                   {17, 18, 1, 47}};
  for (const Case& c : cases)
    for (int64_t N : {1, 3})
      for (size_t a = 0; a < actSets.size(); ++a)
        for (int bias = 0; bias < 3; ++bias) {  // none, random, random with zeros
          const std::string what = "C " + std::to_string(c.C) + " M " + std::to_string(c.M) + " HxW " +
                                   std::to_string(c.H) + "x" + std::to_string(c.W) + " N " + std::to_string(N) +
                                   " activations " + std::to_string(a) + " bias " + std::to_string(bias);
          const Tensor x = randomTensor({N, c.C, c.H, c.W}, rng);
          const Tensor w = randomTensor({c.M, c.C, 1, 1}, rng, -0.5f, 0.5f);
          Tensor b = randomTensor({c.M}, rng);
          if (bias == 2)
            for (int64_t m = 0; m < c.M; m += 2) b.data<float>()[m] = 0.f;
          const Tensor* bp = bias ? &b : nullptr;
          const Tensor direct = runConv(x, w, bp, actSets[a], true, 1);
          const Tensor gemm = runConv(x, w, bp, actSets[a], false, 1);
          ASSERT_EQ(direct.shape(), (Shape{N, c.M, c.H, c.W})) << what;
          ASSERT_TRUE(sameBits(direct, gemm)) << what;
          if (a != 0 || N != 3) continue;
          const int64_t P = c.H * c.W;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t m = 0; m < c.M; ++m)
              for (int64_t p = 0; p < P; ++p) {
                double acc = bias ? b.data<float>()[m] : 0.0;
                for (int64_t k = 0; k < c.C; ++k)
                  acc += (double)w.data<float>()[m * c.C + k] * x.data<float>()[(n * c.C + k) * P + p];
                const float got = direct.data<float>()[(n * c.M + m) * P + p];
                ASSERT_NEAR(got, acc, 1e-4 * (1.0 + std::fabs(acc)) * std::sqrt((double)c.C)) << what;
              }
        }
}

TEST(ConvPointwise, ThreadCountDoesNotChangeTheBits) {
  std::mt19937 rng(4);
  // Large enough to be split into tasks: pixel blocks (112x112) and row blocks (7x7, 960 outputs).
  for (auto [C, M, H] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{16, 96, 56}, {160, 960, 7}, {96, 576, 14}}) {
    const Tensor x = randomTensor({2, C, H, H}, rng);
    const Tensor w = randomTensor({M, C, 1, 1}, rng, -0.3f, 0.3f);
    const Tensor b = randomTensor({M}, rng);
    const std::vector<FusedActivation> clip = {{K::Clip, 0.f, 6.f}};
    const Tensor one = runConv(x, w, &b, clip, true, 1), two = runConv(x, w, &b, clip, true, 2);
    EXPECT_TRUE(sameBits(one, two)) << C << "->" << M << " @" << H;
    EXPECT_TRUE(sameBits(one, runConv(x, w, &b, clip, false, 2))) << C << "->" << M << " @" << H;
  }
}

TEST(ConvPointwise, StridedAndPaddedOneByOneKeepTheirOwnPaths) {
  // A 1x1 filter with stride 2 or with padding is not a plain matrix product over the pixels: the
  // result must match the non-constant path's (im2col), not the direct kernel's geometry.
  std::mt19937 rng(9);
  const Tensor x = randomTensor({1, 8, 6, 6}, rng);
  const Tensor w = randomTensor({10, 8, 1, 1}, rng);
  for (const auto& attrs : std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>>{
           {{"strides", {2, 2}}}, {{"pads", {1, 1, 1, 1}}}, {{"pads", {0, 0, 1, 0}}}}) {
    const Tensor a = runConv(x, w, nullptr, {}, true, 1, attrs), b = runConv(x, w, nullptr, {}, false, 1, attrs);
    EXPECT_NE(a.shape(), x.shape());
    EXPECT_TRUE(sameBits(a, b)) << shapeToString(a.shape());
  }
}

TEST(ConvPointwise, RulesLeaveCrowdedStridesToTheGemmAndDeepSevenBySevenToOneDnn) {
  EXPECT_FALSE(pointwiseDirectBeatsOneDnn(960, 49));
  EXPECT_FALSE(pointwiseDirectBeatsOneDnn(440, 49));
  EXPECT_TRUE(pointwiseDirectBeatsOneDnn(160, 49));
  EXPECT_TRUE(pointwiseDirectBeatsOneDnn(576, 196));
  // The AVX2 kernel: 160x160: every row of a strip in one L1 set; 80x80: four; 28x28 (784 floats,
  // 49 lines): all 64. The AVX-512 kernel measured ahead of the GEMM path on all of them.
  for (bool avx512 : {false, true}) {
    EXPECT_EQ(pointwiseDirectPreferred(48, 48, 160 * 160, avx512), avx512);
    EXPECT_EQ(pointwiseDirectPreferred(96, 96, 80 * 80, avx512), avx512);
    EXPECT_EQ(pointwiseDirectPreferred(240, 240, 12 * 80, avx512), avx512);  // rec
    EXPECT_EQ(pointwiseDirectPreferred(480, 480, 6 * 80, avx512), avx512);   // rec
    EXPECT_TRUE(pointwiseDirectPreferred(48, 12, 160 * 160, avx512));
    EXPECT_TRUE(pointwiseDirectPreferred(32, 48, 160 * 160, avx512));
    EXPECT_TRUE(pointwiseDirectPreferred(104, 104, 28 * 28, avx512));
    EXPECT_TRUE(pointwiseDirectPreferred(144, 24, 56 * 56, avx512));
    EXPECT_TRUE(pointwiseDirectPreferred(16, 96, 112 * 112, avx512));
  }
}

TEST(ConvPointwise, Avx512KernelRunsWhereTheCpuHasItUnlessAvx2IsForced) {
  const char* forced = std::getenv("QS_POINTWISE");
  const bool avx2 = forced != nullptr && std::string(forced) == "avx2";
  EXPECT_EQ(pointwiseAvx512(), __builtin_cpu_supports("avx512f") && !avx2);
}

}  // namespace
}  // namespace qs
