// WeightBuffer (core/kernels/weight_buffer.h): packed weights on transparent huge pages, and the conv kernels
// that keep their weights in it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/conv.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/weight_buffer.h"
#include "tests/support/huge_page_helpers.h"

namespace qs {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

bool switchedOff() {
  const char* v = std::getenv("QS_HUGE_PAGES");
  return v && std::string(v) == "0";
}

using test::thpEligible;

TEST(WeightBuffer, LargeBuffersAreZeroedAlignedAndAdvisedAsHugePages) {
  const size_t bytes = 5 * kMiB + 123 * 4;
  WeightBuffer b(bytes);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  const float* f = b.data();
  for (size_t i = 0; i < bytes / sizeof(float); ++i) ASSERT_EQ(f[i], 0.f) << "float " << i;
  std::memset(b.data(), 0x5a, bytes);  // every byte writable
  if (switchedOff()) {
    EXPECT_FALSE(WeightBuffer::enabled());
    EXPECT_EQ(b.advisedBytes(), 0u);
    return;
  }
  if (!WeightBuffer::enabled()) GTEST_SKIP() << "transparent huge pages off on this system";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (2 * kMiB), 0u);
  EXPECT_EQ(b.advisedBytes(), 4 * kMiB);  // the whole 2 MiB pages of it
  EXPECT_EQ(thpEligible(b.data()), 1);
  // Moved, the memory stays where it is.
  float* at = b.data();
  WeightBuffer moved = std::move(b);
  EXPECT_EQ(moved.data(), at);
  EXPECT_EQ(moved.advisedBytes(), 4 * kMiB);
}

TEST(WeightBuffer, SmallBuffersShareHugePages) {
  WeightBuffer a(100 * 1024 + 4), b(300 * 1024);
  ASSERT_NE(a.data(), nullptr);
  ASSERT_NE(b.data(), nullptr);
  for (const WeightBuffer* w : {&a, &b}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data()) % 64, 0u);
    for (size_t i = 0; i < w->bytes() / sizeof(float); ++i) ASSERT_EQ(w->data()[i], 0.f);
  }
  // Apart: writing one leaves the other as it was.
  std::memset(a.data(), 0x7f, a.bytes());
  for (size_t i = 0; i < b.bytes() / sizeof(float); ++i) ASSERT_EQ(b.data()[i], 0.f);
  WeightBuffer none(0);
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(none.advisedBytes(), 0u);
  if (!WeightBuffer::enabled()) {
    EXPECT_EQ(a.advisedBytes(), 0u);
    return;
  }
  EXPECT_EQ(a.advisedBytes(), a.bytes());
  EXPECT_EQ(b.advisedBytes(), b.bytes());
  EXPECT_EQ(thpEligible(a.data()), 1);
  EXPECT_EQ(thpEligible(b.data()), 1);
  // A buffer outlives the ones carved before it: its chunk stays mapped.
  float* at = b.data();
  { WeightBuffer gone = std::move(a); }
  EXPECT_EQ(b.data(), at);
  EXPECT_EQ(at[0], 0.f);
}

// resnet50's layer4: its 1x1s on our nChw16c kernel (4 MB of packed weights) and the 3x3 512 -> 512 on oneDNN's
// direct kernel (two slices of 4.7 MB at batch 1) keep their packed weights on huge pages; the values they compute
// do not change (the kernels' own tests, and conv_dnnl_huge_pages0 runs them with QS_HUGE_PAGES=0).
TEST(WeightBuffer, ConvKernelsKeepTheirLargeWeightsOnHugePages) {
  if (!WeightBuffer::enabled()) GTEST_SKIP() << "QS_HUGE_PAGES=0 or transparent huge pages off";
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  if (Conv1x1Blocked::available()) {
    Tensor W(DType::Float, {2048, 512, 1, 1});
    for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = u(rng);
    auto k = Conv1x1Blocked::create(W, nullptr, {}, false, false);
    ASSERT_TRUE(k);
    EXPECT_EQ(k->weightBytesOnHugePages(), 4 * kMiB);
  }
  if (!DnnlConv::available()) GTEST_SKIP() << "no oneDNN";
  Tensor W(DType::Float, {512, 512, 3, 3}), B(DType::Float, {512});
  for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < B.numel(); ++i) B.data<float>()[i] = u(rng);
  const int block = DnnlConv::preferredBlock();
  auto conv = DnnlConv::createBlocked(W, &B, 1, {}, false, false, block);
  ASSERT_TRUE(conv);
  WindowAttrs attrs;
  attrs.pads = {1, 1, 1, 1};
  WindowGeometry g;
  ASSERT_TRUE(resolveWindow(attrs, {7, 7}, {3, 3}, false, g).isOk());
  // 9.4 MB of weights in one or two slices: at least 8 MiB of whole huge pages.
  EXPECT_GE(conv->weightBytesOnHugePages(1, 512, g), 8 * kMiB) << conv->kernelName(1, 512, g);
  // And the same values as with the weights on ordinary pages: against a plain direct convolution.
  const int64_t P = 49;
  std::vector<float> x((size_t)(512 * P)), y((size_t)(512 * P));
  for (float& v : x) v = u(rng) * 20.f;
  ASSERT_TRUE(conv->runBlocked(x.data(), 1, 512, g, y.data(), nullptr, 2).isOk());
  double worst = 0;
  for (int64_t m = 0; m < 512; m += 37)
    for (int64_t oy = 0; oy < 7; ++oy)
      for (int64_t ox = 0; ox < 7; ++ox) {
        double want = B.data<float>()[m];
        for (int64_t c = 0; c < 512; ++c)
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t iy = oy + ky - 1, ix = ox + kx - 1;
              if (iy < 0 || iy >= 7 || ix < 0 || ix >= 7) continue;
              // x in the blocked layout [C / block][P][block]
              want += (double)W.data<float>()[((m * 512 + c) * 3 + ky) * 3 + kx] *
                      x[(size_t)((c / block * P + iy * 7 + ix) * block + c % block)];
            }
        const double got = y[(size_t)((m / block * P + oy * 7 + ox) * block + m % block)];
        worst = std::max(worst, std::abs(got - want));
      }
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
}  // namespace qs
