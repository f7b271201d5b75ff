// The 1x1-image path of the Conv kernel (core/kernels/conv_gemv.h, SE blocks):
// the same bits as the GEMM path (the same node with W not a constant, so
// nothing is packed at load) for channel counts around the 32-channel pass and
// the 256-long K slice, batch 1 and 3, every fused activation, with and without
// bias; and a naive reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_gemv.h"
#include "tests/support/conv_helpers.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

using K = FusedActivation::Kind;
using qs::test::randomTensor;

// A FusedConv 1x1 node; W (and B) constants of the graph when `constant`, else
// plain inputs.
Tensor runConv1x1(const Tensor& x, const Tensor& w, const Tensor* b, const std::vector<FusedActivation>& acts,
                  bool constant) {
  return test::runFusedConv(x, w, b, acts, constant, 1);
}

TEST(ConvGemv, SameBitsAsTheGemmPathAndNearNaive) {
  std::mt19937 rng(17);
  const std::vector<std::vector<FusedActivation>> actSets = {{},
                                                             {{K::Relu, 0, 0}},
                                                             {{K::Sigmoid, 0, 0}},
                                                             {{K::HardSigmoid, 0.2f, 0.5f}},
                                                             {{K::Clip, 0.f, 6.f}, {K::Mul, 0.5f, 0}}};
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{440, 110}, {110, 440}, {7, 5}, {600, 33},
                                                          {256, 32},  {257, 31},  {16, 1}};
  for (auto [C, M] : sizes)
    for (int64_t N : {1, 3})
      for (size_t a = 0; a < actSets.size(); ++a)
        for (bool withBias : {true, false}) {
          const std::string what = "C " + std::to_string(C) + " M " + std::to_string(M) + " N " + std::to_string(N) +
                                   " activations " + std::to_string(a) + (withBias ? " bias" : "");
          const Tensor x = randomTensor({N, C, 1, 1}, rng);
          const Tensor w = randomTensor({M, C, 1, 1}, rng, -0.5f, 0.5f);
          const Tensor b = randomTensor({M}, rng);
          const Tensor* bp = withBias ? &b : nullptr;
          const Tensor fast = runConv1x1(x, w, bp, actSets[a], true), gemm = runConv1x1(x, w, bp, actSets[a], false);
          ASSERT_EQ(fast.shape(), (Shape{N, M, 1, 1})) << what;
          ASSERT_EQ(gemm.shape(), fast.shape()) << what;
          ASSERT_EQ(std::memcmp(fast.data<float>(), gemm.data<float>(), sizeof(float) * (size_t)fast.numel()), 0)
              << what;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t m = 0; m < M; ++m) {
              double acc = 0;
              for (int64_t c = 0; c < C; ++c) acc += (double)w.data<float>()[m * C + c] * x.data<float>()[n * C + c];
              float want = (float)acc;
              applyFusedActivations(&want, 1, withBias ? b.data<float>()[m] : 0.f, actSets[a]);
              ASSERT_NEAR(fast.data<float>()[n * M + m], want, 1e-4f * (1.f + std::fabs(want))) << what;
            }
        }
}

// Weights with subnormal values, as rec's SE convs have (a quarter of them): packed as zeros (an
// FMA over a subnormal takes a microcode assist), with the GEMM path's bits all the same.
TEST(ConvGemv, SubnormalWeightsPackedAsZerosSameBits) {
  std::mt19937 rng(29);
  for (auto [C, M] : std::vector<std::pair<int64_t, int64_t>>{{480, 120}, {240, 60}, {33, 7}}) {
    Tensor w = randomTensor({M, C, 1, 1}, rng, -0.5f, 0.5f);
    int64_t subnormals = 0;
    for (int64_t i = 0; i < w.numel(); i += 4, ++subnormals)
      w.data<float>()[i] = (i % 8 ? 1.f : -1.f) * std::ldexp((float)(1 + i % 1000), -140);  // below 2^-126
    ASSERT_EQ(std::fpclassify(w.data<float>()[0]), FP_SUBNORMAL);
    const PointwiseGemv gemv(w);
    EXPECT_EQ(gemv.flushedWeights(), subnormals);
    const Tensor x = randomTensor({2, C, 1, 1}, rng), b = randomTensor({M}, rng);
    const std::vector<FusedActivation> relu = {{K::Relu, 0, 0}};
    const Tensor fast = runConv1x1(x, w, &b, relu, true), gemm = runConv1x1(x, w, &b, relu, false);
    ASSERT_EQ(gemm.shape(), fast.shape());
    EXPECT_EQ(std::memcmp(fast.data<float>(), gemm.data<float>(), sizeof(float) * (size_t)fast.numel()), 0)
        << "C " << C << " M " << M;
  }
}

TEST(ConvGemv, OnlyOneByOneFilters) {
  std::mt19937 rng(1);
  EXPECT_TRUE(PointwiseGemv(randomTensor({4, 3, 1, 1}, rng)).valid());
  EXPECT_FALSE(PointwiseGemv(randomTensor({4, 3, 3, 3}, rng)).valid());
  EXPECT_FALSE(PointwiseGemv(randomTensor({4, 3}, rng)).valid());
}

}  // namespace
}  // namespace qs
