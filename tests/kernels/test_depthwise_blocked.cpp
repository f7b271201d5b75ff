// Our nChw16c depthwise kernel (core/kernels/depthwise_blocked.h): bit for bit against oneDNN's jit_dw (DnnlConv's
// blocked depthwise path at batch >= hardware threads) on mobilenet_v2's shapes and odd ones (channel tails, odd sizes,
// strides 1 and 2, 3x3 and 5x5, every post-op), near a naive double-precision conv, any range of rows x blocks the
// bits of the whole image and nothing else written, each image of a batch its bits alone on 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/exec/parallel.h"
#include "core/kernels/blocked_layout.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/depthwise_blocked.h"
#include "tests/support/conv_helpers.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

using K = FusedActivation::Kind;
using test::paddedWindow;
using test::randomTensor;

struct DwShape {
  int64_t C, H, W, k, s;
};

// mobilenet_v2's depthwise convs, and odd ones.
const std::vector<DwShape> kShapes = {
    {32, 112, 112, 3, 1}, {96, 112, 112, 3, 2}, {144, 56, 56, 3, 1}, {144, 56, 56, 3, 2}, {192, 28, 28, 3, 1},
    {192, 28, 28, 3, 2},  {384, 14, 14, 3, 1},  {576, 14, 14, 3, 2}, {960, 7, 7, 3, 1},   {24, 13, 11, 3, 1},
    {40, 9, 10, 5, 2},    {8, 3, 2, 3, 1},      {56, 7, 7, 5, 1},    {16, 1, 1, 3, 1},    {72, 15, 17, 3, 2},
};

const std::vector<std::vector<FusedActivation>> kPosts = {{}, {{K::Relu, 0.f, 0.f}}, {{K::Clip, 0.f, 6.f}}};

std::string nameOf(const DwShape& s, size_t post) {
  return "C " + std::to_string(s.C) + " " + std::to_string(s.H) + "x" + std::to_string(s.W) + " k " +
         std::to_string(s.k) + " s " + std::to_string(s.s) + " post " + std::to_string(post);
}

// y = conv(x) per channel in double, then the post-op; plain [C, OH, OW].
std::vector<double> naive(const DwShape& s, const WindowGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                          const std::vector<FusedActivation>& post) {
  const int64_t OH = g.out[1], OW = g.out[2];
  std::vector<double> y((size_t)(s.C * OH * OW));
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = b.data<float>()[c];
        for (int64_t kh = 0; kh < s.k; ++kh)
          for (int64_t kw = 0; kw < s.k; ++kw) {
            const int64_t ih = oh * s.s - g.padB[1] + kh, iw = ow * s.s - g.padB[2] + kw;
            if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
            acc += (double)x.data<float>()[(c * s.H + ih) * s.W + iw] * w.data<float>()[(c * s.k + kh) * s.k + kw];
          }
        if (!post.empty() && post[0].kind == K::Relu) acc = std::max(acc, 0.0);
        if (!post.empty() && post[0].kind == K::Clip) acc = std::min(std::max(acc, (double)post[0].a), (double)post[0].b);
        y[(size_t)((c * OH + oh) * OW + ow)] = acc;
      }
  return y;
}

class DepthwiseBlockedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DepthwiseBlocked::available()) GTEST_SKIP() << "no AVX-512 on this CPU";
  }
};

// The bits of oneDNN's jit_dw (DnnlConv made for nChw16c, with the kernel switched off), near the naive values;
// pad lanes zero.
TEST_F(DepthwiseBlockedTest, SameBitsAsJitDwAndNearNaive) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(7);
  for (const DwShape& s : kShapes) {
    for (size_t pi = 0; pi < kPosts.size(); ++pi) {
      const std::string what = nameOf(s, pi);
      const WindowGeometry g = paddedWindow(s.H, s.W, s.k, s.s);
      const Tensor w = randomTensor({s.C, 1, s.k, s.k}, rng, -0.5f, 0.5f), b = randomTensor({s.C}, rng);
      const Tensor x = randomTensor({1, s.C, s.H, s.W}, rng, -3.f, 3.f);
      const int64_t Cb = (s.C + 15) / 16, OH = g.out[1], OW = g.out[2], outPer = Cb * 16 * OH * OW;
      std::vector<float> xb((size_t)(Cb * 16 * s.H * s.W));
      toNchw8c(x.data<float>(), 1, s.C, s.H * s.W, xb.data(), 1, 16);
      auto k = DepthwiseBlocked::create(w, &b, kPosts[pi]);
      ASSERT_TRUE(k) << what;
      ASSERT_TRUE(k->takes(g)) << what;
      std::vector<float> ours((size_t)outPer, std::nanf(""));
      k->run(xb.data(), g, ours.data(), 0, Cb, 0, OH);
      // DnnlConv keeps jit_dw from a batch of hardware-threads images on: each image its own task.
      auto conv = DnnlConv::createBlocked(w, &b, s.C, kPosts[pi], false, false, 16);
      ASSERT_TRUE(conv) << what;
      const int64_t N = hardwareThreads();
      ASSERT_EQ(conv->kernelName(N, s.C, g).find("jit_dw"), 0u) << what << ": " << conv->kernelName(N, s.C, g);
      std::vector<float> xs((size_t)N * xb.size()), dnnl((size_t)(N * outPer), std::nanf(""));
      for (int64_t n = 0; n < N; ++n) std::copy(xb.begin(), xb.end(), xs.begin() + n * (int64_t)xb.size());
      ASSERT_TRUE(conv->runBlocked(xs.data(), N, s.C, g, dnnl.data(), nullptr, 1).isOk()) << what;
      for (int64_t n = 0; n < N; ++n)
        EXPECT_EQ(0, std::memcmp(ours.data(), dnnl.data() + n * outPer, sizeof(float) * ours.size()))
            << what << ": against jit_dw, image " << n;
      std::vector<float> plain((size_t)(s.C * OH * OW));
      fromNchw8c(ours.data(), 1, s.C, OH * OW, plain.data(), 1, 16);
      const std::vector<double> want = naive(s, g, x, w, b, kPosts[pi]);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(plain[i], want[i], 1e-5 * (1.0 + std::fabs(want[i]))) << what << " at " << i;
      for (int64_t c = s.C; c < Cb * 16; ++c)
        for (int64_t p = 0; p < OH * OW; ++p) ASSERT_EQ(ours[(size_t)(((c / 16) * OH * OW + p) * 16 + c % 16)], 0.f);
    }
  }
}

// Any range of output rows x channel blocks: the whole image's bits there, nothing written elsewhere.
TEST_F(DepthwiseBlockedTest, AnyRangeGivesTheWholeImagesBits) {
  std::mt19937 rng(11);
  for (const DwShape& s : {DwShape{72, 15, 17, 3, 2}, DwShape{40, 9, 10, 5, 1}, DwShape{144, 14, 14, 3, 1}}) {
    const WindowGeometry g = paddedWindow(s.H, s.W, s.k, s.s);
    const Tensor w = randomTensor({s.C, 1, s.k, s.k}, rng, -0.5f, 0.5f), b = randomTensor({s.C}, rng);
    const Tensor x = randomTensor({1, s.C, s.H, s.W}, rng, -3.f, 3.f);
    const int64_t Cb = (s.C + 15) / 16, OH = g.out[1], OW = g.out[2], outPer = Cb * 16 * OH * OW;
    std::vector<float> xb((size_t)(Cb * 16 * s.H * s.W));
    toNchw8c(x.data<float>(), 1, s.C, s.H * s.W, xb.data(), 1, 16);
    auto k = DepthwiseBlocked::create(w, &b, kPosts[2]);
    ASSERT_TRUE(k);
    std::vector<float> whole((size_t)outPer);
    k->run(xb.data(), g, whole.data(), 0, Cb, 0, OH);
    for (int trial = 0; trial < 20; ++trial) {
      std::uniform_int_distribution<int64_t> rows(0, OH), blocks(0, Cb);
      int64_t oh0 = rows(rng), oh1 = rows(rng), cb0 = blocks(rng), cb1 = blocks(rng);
      if (oh0 > oh1) std::swap(oh0, oh1);
      if (cb0 > cb1) std::swap(cb0, cb1);
      std::vector<float> part((size_t)outPer, std::nanf(""));
      k->run(xb.data(), g, part.data(), cb0, cb1, oh0, oh1);
      for (int64_t cb = 0; cb < Cb; ++cb)
        for (int64_t oh = 0; oh < OH; ++oh) {
          const size_t at = (size_t)((cb * OH + oh) * OW * 16);
          if (cb >= cb0 && cb < cb1 && oh >= oh0 && oh < oh1)
            ASSERT_EQ(0, std::memcmp(part.data() + at, whole.data() + at, sizeof(float) * (size_t)(OW * 16)))
                << nameOf(s, 2) << " block " << cb << " row " << oh;
          else
            for (int64_t i = 0; i < OW * 16; ++i) ASSERT_TRUE(std::isnan(part[at + (size_t)i])) << "written outside";
        }
    }
  }
}

// runBatch: each image of a batch of 3 gets its bits alone, split by rows or by blocks, on 1 and 2 threads.
TEST_F(DepthwiseBlockedTest, BatchAndSplitsGiveEachImagesBits) {
  std::mt19937 rng(13);
  const DwShape s{144, 28, 28, 3, 2};
  const WindowGeometry g = paddedWindow(s.H, s.W, s.k, s.s);
  const Tensor w = randomTensor({s.C, 1, 3, 3}, rng, -0.5f, 0.5f), b = randomTensor({s.C}, rng);
  const int64_t N = 3, Cb = 9, inPer = Cb * 16 * s.H * s.W, outPer = Cb * 16 * g.outSize();
  const Tensor x = randomTensor({N, s.C, s.H, s.W}, rng);
  std::vector<float> xb((size_t)(N * inPer));
  toNchw8c(x.data<float>(), N, s.C, s.H * s.W, xb.data(), 1, 16);
  auto k = DepthwiseBlocked::create(w, &b, kPosts[2]);
  ASSERT_TRUE(k);
  std::vector<float> alone((size_t)(N * outPer));
  for (int64_t n = 0; n < N; ++n) k->run(xb.data() + n * inPer, g, alone.data() + n * outPer, 0, Cb, 0, g.out[1]);
  for (int64_t n : {int64_t(1), N})
    for (bool byRows : {false, true})
      for (int threads : {1, 2}) {
        std::vector<float> y((size_t)(n * outPer), std::nanf(""));
        k->runBatch(xb.data(), n, g, y.data(), byRows, threads);
        EXPECT_EQ(0, std::memcmp(y.data(), alone.data(), sizeof(float) * y.size()))
            << "batch " << n << (byRows ? " by rows" : " by blocks") << " threads " << threads;
      }
}

// DnnlConv runs it below hardware-threads images (jit_dw's bits, so the batch may choose), jit_dw from there on, and
// never in nChw8c; the split follows the 1x1 conv that wrote the input (rows from C input pixels on).
TEST_F(DepthwiseBlockedTest, DnnlConvRunsItAtBatchOne) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  if (std::getenv("QS_DW") != nullptr) GTEST_SKIP() << "QS_DW set";
  std::mt19937 rng(17);
  const DwShape s{144, 20, 20, 3, 1};
  const WindowGeometry g = paddedWindow(s.H, s.W, s.k, s.s);
  const Tensor w = randomTensor({s.C, 1, 3, 3}, rng, -0.5f, 0.5f), b = randomTensor({s.C}, rng);
  auto conv = DnnlConv::createBlocked(w, &b, s.C, kPosts[2], false, false, 16);
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->kernelName(1, s.C, g), DnnlConv::kOwnDepthwiseName);
  EXPECT_EQ(conv->kernelName(hardwareThreads(), s.C, g).find("jit_dw"), 0u);
  auto c8 = DnnlConv::createBlocked(w, &b, s.C, kPosts[2], false, false, 8);
  ASSERT_TRUE(c8);
  EXPECT_NE(c8->kernelName(1, s.C, g), DnnlConv::kOwnDepthwiseName);
  const Tensor x = randomTensor({1, s.C, s.H, s.W}, rng);
  std::vector<float> xb((size_t)(9 * 16 * s.H * s.W)), y((size_t)(9 * 16 * g.outSize())), want(y.size());
  toNchw8c(x.data<float>(), 1, s.C, s.H * s.W, xb.data(), 1, 16);
  auto k = DepthwiseBlocked::create(w, &b, kPosts[2]);
  ASSERT_TRUE(k);
  k->run(xb.data(), g, want.data(), 0, 9, 0, g.out[1]);
  ASSERT_TRUE(conv->runBlocked(xb.data(), 1, s.C, g, y.data(), nullptr, 2).isOk());
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), sizeof(float) * y.size()));
  if (std::getenv("QS_DW_SPLIT") == nullptr) {
    EXPECT_TRUE(DnnlConv::depthwiseByRows(144, paddedWindow(56, 56, 3, 2)));  // mobilenet_v2 features.4
    EXPECT_TRUE(DnnlConv::depthwiseByRows(192, paddedWindow(28, 28, 3, 1)));
    EXPECT_FALSE(DnnlConv::depthwiseByRows(576, paddedWindow(14, 14, 3, 1)));  // its expansion is cut by blocks
    EXPECT_FALSE(DnnlConv::depthwiseByRows(960, paddedWindow(7, 7, 3, 1)));
  }
}

}  // namespace
}  // namespace qs
