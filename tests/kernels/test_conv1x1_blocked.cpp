// Our nChw16c 1x1 kernel (core/kernels/conv1x1_blocked.h): against a naive double-precision 1x1 conv on
// odd shapes (channel tails, odd pixel counts, every post-op), the bits of any range against the whole
// image, of each image of a batch against the image alone on 1 and 2 threads, and DnnlConv's choice of it; the same
// for other windows (strided 1x1s, 3x3s: runWindow).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/exec/parallel.h"
#include "core/kernels/blocked_layout.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/conv_dnnl.h"

namespace qs {
namespace {

using K = FusedActivation::Kind;

struct Post {
  const char* name;
  std::vector<FusedActivation> acts;
  bool residual, reluAfter;
};

const std::vector<Post> kPosts = {
    {"none", {}, false, false},
    {"Relu", {{K::Relu, 0.f, 0.f}}, false, false},
    {"Clip(0,6)", {{K::Clip, 0.f, 6.f}}, false, false},
    {"residual", {}, true, false},
    {"residual+Relu", {}, true, true},
};

std::vector<float> randomVector(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// Blocked [N, ceil(C/16), P, 16] from plain [N, C, P]; the pad lanes NaN (the kernel must not read them).
std::vector<float> blockedWithNanPads(const std::vector<float>& plain, int64_t N, int64_t C, int64_t P) {
  const int64_t Cb = (C + 15) / 16;
  std::vector<float> b((size_t)(N * Cb * 16 * P));
  toNchw8c(plain.data(), N, C, P, b.data(), 1, 16);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = C; c < Cb * 16; ++c)
      for (int64_t p = 0; p < P; ++p) b[(size_t)(((n * Cb + c / 16) * P + p) * 16 + c % 16)] = std::nanf("");
  return b;
}

struct Problem {
  int64_t N = 0, C = 0, M = 0, P = 0;
  std::vector<float> x, w, bias, residual;  // plain
  std::vector<float> xb, rb;                // blocked
};

Problem makeProblem(int64_t N, int64_t C, int64_t M, int64_t P, std::mt19937& rng) {
  Problem pr;
  pr.N = N;
  pr.C = C;
  pr.M = M;
  pr.P = P;
  pr.x = randomVector((size_t)(N * C * P), rng);
  pr.w = randomVector((size_t)(M * C), rng, -0.5f, 0.5f);
  pr.bias = randomVector((size_t)M, rng);
  pr.residual = randomVector((size_t)(N * M * P), rng);
  pr.xb = blockedWithNanPads(pr.x, N, C, P);
  const int64_t Mb = (M + 15) / 16;
  pr.rb.assign((size_t)(N * Mb * 16 * P), 0.f);  // pad lanes zero, as a blocked region keeps them
  toNchw8c(pr.residual.data(), N, M, P, pr.rb.data(), 1, 16);
  return pr;
}

std::unique_ptr<Conv1x1Blocked> makeKernel(const Problem& pr, const Post& post, bool withBias) {
  Tensor W(DType::Float, {pr.M, pr.C, 1, 1}), B(DType::Float, {pr.M});
  std::memcpy(W.data<float>(), pr.w.data(), sizeof(float) * pr.w.size());
  std::memcpy(B.data<float>(), pr.bias.data(), sizeof(float) * pr.bias.size());
  return Conv1x1Blocked::create(W, withBias ? &B : nullptr, post.acts, post.residual, post.reluAfter);
}

TEST(Conv1x1Blocked, MatchesNaiveOnOddShapesWithEveryPostOp) {
  if (!Conv1x1Blocked::available()) GTEST_SKIP() << "no AVX-512F";
  std::mt19937 rng(7);
  struct S {
    int64_t C, M, H, W;
  };
  // Channel tails in and out (24, 40, 8, 200, 520), one output block and 4+1 blocks (the 4-block and
  // 1-block tiles), pixel counts that leave tails of every tile width.
  for (const S s : {S{24, 16, 7, 9}, S{40, 72, 5, 11}, S{16, 8, 13, 13}, S{200, 24, 3, 7}, S{520, 40, 7, 7},
                    S{64, 80, 1, 1}, S{96, 48, 9, 10}}) {
    const int64_t P = s.H * s.W, Mb = (s.M + 15) / 16;
    const Problem pr = makeProblem(1, s.C, s.M, P, rng);
    for (const Post& post : kPosts)
      for (bool withBias : {true, false}) {
        const std::string what = std::to_string(s.C) + "->" + std::to_string(s.M) + " @" + std::to_string(s.H) + "x" +
                                 std::to_string(s.W) + " " + post.name + (withBias ? " bias" : " no bias");
        auto k = makeKernel(pr, post, withBias);
        ASSERT_TRUE(k) << what;
        std::vector<float> yb((size_t)(Mb * 16 * P), std::nanf(""));
        k->run(pr.xb.data(), P, yb.data(), post.residual ? pr.rb.data() : nullptr, 0, Mb, 0, P);
        std::vector<float> y((size_t)(s.M * P));
        fromNchw8c(yb.data(), 1, s.M, P, y.data(), 1, 16);
        double worst = 0;
        for (int64_t m = 0; m < s.M; ++m)
          for (int64_t p = 0; p < P; ++p) {
            double v = withBias ? pr.bias[m] : 0.0;
            for (int64_t c = 0; c < s.C; ++c) v += (double)pr.w[m * s.C + c] * pr.x[c * P + p];
            if (post.residual) v += pr.residual[m * P + p];
            if (post.reluAfter || (!post.acts.empty() && post.acts[0].kind == K::Relu)) v = std::max(v, 0.0);
            if (!post.acts.empty() && post.acts[0].kind == K::Clip) v = std::min(std::max(v, 0.0), 6.0);
            worst = std::max(worst, std::fabs(v - y[m * P + p]) / (1.0 + std::fabs(v)));
          }
        EXPECT_LT(worst, 2e-5) << what;
        // The pad lanes of an output tail: zero weights and bias, the residual's zero pad lanes.
        for (int64_t m = s.M; m < Mb * 16; ++m)
          for (int64_t p = 0; p < P; ++p) ASSERT_EQ(yb[(size_t)(((m / 16) * P + p) * 16 + m % 16)], 0.f) << what;
      }
  }
}

TEST(Conv1x1Blocked, AnyRangeGetsTheBitsOfTheWholeImageAndWritesNothingElse) {
  if (!Conv1x1Blocked::available()) GTEST_SKIP() << "no AVX-512F";
  std::mt19937 rng(11);
  // 600 input channels: several passes of input blocks carried through y; 96 outputs: 4 + 2 blocks.
  for (const auto& [C, M, P] : {std::tuple<int64_t, int64_t, int64_t>{600, 96, 97}, {48, 24, 300}, {256, 64, 61}}) {
    const Problem pr = makeProblem(1, C, M, P, rng);
    const int64_t Mb = (M + 15) / 16;
    for (const Post& post : {kPosts[2], kPosts[4]}) {
      auto k = makeKernel(pr, post, true);
      ASSERT_TRUE(k);
      const float* res = post.residual ? pr.rb.data() : nullptr;
      std::vector<float> whole((size_t)(Mb * 16 * P));
      k->run(pr.xb.data(), P, whole.data(), res, 0, Mb, 0, P);
      std::uniform_int_distribution<int64_t> pick(0, P), pickB(0, Mb);
      for (int trial = 0; trial < 20; ++trial) {
        int64_t p0 = pick(rng), p1 = pick(rng), mb0 = pickB(rng), mb1 = pickB(rng);
        if (p0 > p1) std::swap(p0, p1);
        if (mb0 > mb1) std::swap(mb0, mb1);
        std::vector<float> part(whole.size(), std::nanf(""));
        k->run(pr.xb.data(), P, part.data(), res, mb0, mb1, p0, p1);
        const std::string what = std::to_string(C) + "->" + std::to_string(M) + " " + post.name + " pixels [" +
                                 std::to_string(p0) + ", " + std::to_string(p1) + ") blocks [" + std::to_string(mb0) +
                                 ", " + std::to_string(mb1) + ")";
        for (int64_t mb = 0; mb < Mb; ++mb)
          for (int64_t p = 0; p < P; ++p) {
            const size_t at = (size_t)((mb * P + p) * 16);
            if (mb >= mb0 && mb < mb1 && p >= p0 && p < p1) {
              ASSERT_EQ(0, std::memcmp(&part[at], &whole[at], 16 * sizeof(float))) << what << " pixel " << p;
            } else {
              for (int l = 0; l < 16; ++l) ASSERT_TRUE(std::isnan(part[at + l])) << what << ": wrote outside";
            }
          }
      }
    }
  }
}

TEST(Conv1x1Blocked, EachImageOfABatchGetsItsBitsAloneOnOneAndTwoThreads) {
  if (!Conv1x1Blocked::available()) GTEST_SKIP() << "no AVX-512F";
  std::mt19937 rng(13);
  // By pixels (56x56 input larger than the weights) and by output blocks (7x7, 512 -> 256).
  for (const auto& [C, M, P] : {std::tuple<int64_t, int64_t, int64_t>{256, 64, 56 * 56}, {512, 256, 49}, {32, 16, 111}}) {
    const int64_t N = 3, Mb = (M + 15) / 16, outPer = Mb * 16 * P, inPer = (C + 15) / 16 * 16 * P;
    const Problem pr = makeProblem(N, C, M, P, rng);
    auto k = makeKernel(pr, kPosts[4], true);
    ASSERT_TRUE(k);
    std::vector<float> batch((size_t)(N * outPer));
    k->runBatch(pr.xb.data(), N, P, batch.data(), pr.rb.data(), 2);
    for (int threads : {1, 2})
      for (int64_t n = 0; n < N; ++n) {
        std::vector<float> one((size_t)outPer, std::nanf(""));
        k->runBatch(pr.xb.data() + n * inPer, 1, P, one.data(), pr.rb.data() + n * outPer, threads);
        EXPECT_EQ(0, std::memcmp(one.data(), batch.data() + n * outPer, sizeof(float) * (size_t)outPer))
            << C << "->" << M << " image " << n << " alone on " << threads << " threads, against the batch of 3";
      }
  }
}

// DnnlConv runs our kernel for the 1x1s its rule takes (stride 1, no pads, nChw16c, AVX-512), so
// runBlocked gives the kernel's bits, at batch 1 split as at batch 3, and oneDNN's name elsewhere.
TEST(Conv1x1Blocked, DnnlConvRunsItWhereTheRuleTakesTheConv) {
  if (!Conv1x1Blocked::available() || !DnnlConv::available()) GTEST_SKIP() << "no AVX-512F or no oneDNN";
  if (const char* v = std::getenv("QS_CONV1X1"); v && std::string(v) == "dnnl") GTEST_SKIP() << "QS_CONV1X1=dnnl";
  std::mt19937 rng(17);
  const int64_t C = 256, M = 64, H = 56, P = H * H, N = 3, Mb = M / 16, outPer = Mb * 16 * P, inPer = C * P;
  const Problem pr = makeProblem(N, C, M, P, rng);
  Tensor W(DType::Float, {M, C, 1, 1}), B(DType::Float, {M});
  std::memcpy(W.data<float>(), pr.w.data(), sizeof(float) * pr.w.size());
  std::memcpy(B.data<float>(), pr.bias.data(), sizeof(float) * pr.bias.size());
  auto conv = DnnlConv::createBlocked(W, &B, 1, {}, true, true, 16);
  ASSERT_TRUE(conv);
  WindowAttrs attrs;
  WindowGeometry g;
  ASSERT_TRUE(resolveWindow(attrs, {H, H}, {1, 1}, false, g).isOk());
  EXPECT_EQ(conv->kernelName(1, C, g), DnnlConv::kOwn1x1Name);
  auto k = makeKernel(pr, kPosts[4], true);
  std::vector<float> want((size_t)(N * outPer)), got(want.size());
  k->runBatch(pr.xb.data(), N, P, want.data(), pr.rb.data(), 1);
  ASSERT_TRUE(conv->runBlocked(pr.xb.data(), N, C, g, got.data(), pr.rb.data(), 2).isOk());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()));
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> one((size_t)outPer);
    ASSERT_TRUE(conv->runBlocked(pr.xb.data() + n * inPer, 1, C, g, one.data(), pr.rb.data() + n * outPer, 2).isOk());
    EXPECT_EQ(0, std::memcmp(one.data(), got.data() + n * outPer, sizeof(float) * (size_t)outPer)) << "image " << n;
  }
  // Stride 2 (resnet50's downsample) runs it too, over the gathered pixels: the kernel's bits at batch 3 and
  // for each image alone; a padded 1x1 and block 8 stay with oneDNN.
  WindowAttrs strided;
  strided.strides = {2, 2};
  WindowGeometry g2;
  ASSERT_TRUE(resolveWindow(strided, {H, H}, {1, 1}, false, g2).isOk());
  EXPECT_EQ(conv->kernelName(1, C, g2), DnnlConv::kOwn1x1Name);
  const int64_t outPer2 = Mb * 16 * g2.out[1] * g2.out[2];
  std::vector<float> res2((size_t)(N * outPer2));
  for (size_t i = 0; i < res2.size(); ++i) res2[i] = pr.rb[i];
  std::vector<float> want2(res2.size()), got2(res2.size());
  k->runBatchWindow(pr.xb.data(), N, g2, want2.data(), res2.data(), 1);
  ASSERT_TRUE(conv->runBlocked(pr.xb.data(), N, C, g2, got2.data(), res2.data(), 2).isOk());
  EXPECT_EQ(0, std::memcmp(want2.data(), got2.data(), sizeof(float) * want2.size()));
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> one((size_t)outPer2);
    ASSERT_TRUE(
        conv->runBlocked(pr.xb.data() + n * inPer, 1, C, g2, one.data(), res2.data() + n * outPer2, 2).isOk());
    EXPECT_EQ(0, std::memcmp(one.data(), got2.data() + n * outPer2, sizeof(float) * (size_t)outPer2))
        << "stride 2, image " << n;
  }
  WindowAttrs padded;
  padded.pads = {1, 1, 1, 1};
  WindowGeometry gp;
  ASSERT_TRUE(resolveWindow(padded, {H, H}, {1, 1}, false, gp).isOk());
  EXPECT_NE(conv->kernelName(1, C, gp), DnnlConv::kOwn1x1Name);
  auto conv8 = DnnlConv::createBlocked(W, &B, 1, {}, true, true, 8);
  ASSERT_TRUE(conv8);
  EXPECT_NE(conv8->kernelName(1, C, g), DnnlConv::kOwn1x1Name);
}

// Windows other than a 1x1 of stride 1 (runWindow: the chunk's window gathered, then the 1x1 tiles over it):
// strided 1x1s with channel tails, 3x3s of stride 1 and 2 with pads, against a naive double-precision conv;
// a strided 1x1 gives the bits of the stride-1 kernel on the subsampled input; any range the bits of the whole;
// each image of a batch of 3 on 2 threads the bits it gets alone on 1.
TEST(Conv1x1Blocked, WindowsMatchNaiveAndKeepEachImagesBits) {
  if (!Conv1x1Blocked::available()) GTEST_SKIP() << "no AVX-512F";
  std::mt19937 rng(19);
  struct S {
    int64_t C, M, H, W, k, s, pad;
  };
  for (const S s : {S{40, 24, 9, 11, 1, 2, 0}, S{256, 64, 14, 14, 1, 2, 0}, S{32, 48, 13, 12, 3, 2, 1},
                    S{16, 24, 7, 7, 3, 1, 1}, S{48, 80, 8, 9, 3, 2, 1}, S{32, 16, 10, 10, 3, 1, 0}}) {
    WindowAttrs attrs;
    attrs.strides = {s.s, s.s};
    attrs.pads = {s.pad, s.pad, s.pad, s.pad};
    WindowGeometry g;
    ASSERT_TRUE(resolveWindow(attrs, {s.H, s.W}, {s.k, s.k}, false, g).isOk());
    const int64_t N = 3, Pin = s.H * s.W, Ho = g.out[1], Wo = g.out[2], P = Ho * Wo, Mb = (s.M + 15) / 16;
    const int64_t inPer = (s.C + 15) / 16 * 16 * Pin, outPer = Mb * 16 * P;
    const std::vector<float> x = randomVector((size_t)(N * s.C * Pin), rng);
    const std::vector<float> w = randomVector((size_t)(s.M * s.C * s.k * s.k), rng, -0.3f, 0.3f);
    const std::vector<float> bias = randomVector((size_t)s.M, rng), residual = randomVector((size_t)(N * s.M * P), rng);
    const std::vector<float> xb = blockedWithNanPads(x, N, s.C, Pin);
    std::vector<float> rb((size_t)(N * outPer), 0.f);
    toNchw8c(residual.data(), N, s.M, P, rb.data(), 1, 16);
    Tensor W(DType::Float, {s.M, s.C, s.k, s.k}), B(DType::Float, {s.M});
    std::memcpy(W.data<float>(), w.data(), sizeof(float) * w.size());
    std::memcpy(B.data<float>(), bias.data(), sizeof(float) * bias.size());
    for (const Post& post : {kPosts[1], kPosts[4]}) {
      const std::string what = std::to_string(s.C) + "->" + std::to_string(s.M) + " " + std::to_string(s.k) + "x" +
                               std::to_string(s.k) + " s" + std::to_string(s.s) + " pad " + std::to_string(s.pad) +
                               " @" + std::to_string(s.H) + "x" + std::to_string(s.W) + " " + post.name;
      auto k = Conv1x1Blocked::create(W, &B, post.acts, post.residual, post.reluAfter);
      ASSERT_TRUE(k) << what;
      EXPECT_EQ(k->inChannels(), s.C);
      EXPECT_EQ(k->kernelRows(), s.k);
      const float* res = post.residual ? rb.data() : nullptr;
      std::vector<float> batch((size_t)(N * outPer), std::nanf(""));
      k->runBatchWindow(xb.data(), N, g, batch.data(), res, 2);
      std::vector<float> y((size_t)(N * s.M * P));
      fromNchw8c(batch.data(), N, s.M, P, y.data(), 1, 16);
      double worst = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < s.M; ++m)
          for (int64_t p = 0; p < P; ++p) {
            double v = bias[m];
            for (int64_t c = 0; c < s.C; ++c)
              for (int64_t kh = 0; kh < s.k; ++kh)
                for (int64_t kw = 0; kw < s.k; ++kw) {
                  const int64_t ih = p / Wo * s.s + kh - s.pad, iw = p % Wo * s.s + kw - s.pad;
                  if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                  v += (double)w[((m * s.C + c) * s.k + kh) * s.k + kw] * x[(n * s.C + c) * Pin + ih * s.W + iw];
                }
            if (post.residual) v += residual[(n * s.M + m) * P + p];
            v = std::max(v, 0.0);
            worst = std::max(worst, std::fabs(v - y[(n * s.M + m) * P + p]) / (1.0 + std::fabs(v)));
          }
      EXPECT_LT(worst, 2e-5) << what;
      for (int64_t n = 0; n < N; ++n) {
        std::vector<float> one((size_t)outPer, std::nanf(""));
        k->runBatchWindow(xb.data() + n * inPer, 1, g, one.data(), res ? res + n * outPer : nullptr, 1);
        EXPECT_EQ(0, std::memcmp(one.data(), batch.data() + n * outPer, sizeof(float) * (size_t)outPer))
            << what << ": image " << n << " alone on 1 thread, against the batch of 3 on 2";
      }
      std::uniform_int_distribution<int64_t> pick(0, P), pickB(0, Mb);
      for (int trial = 0; trial < 8; ++trial) {
        int64_t p0 = pick(rng), p1 = pick(rng), mb0 = pickB(rng), mb1 = pickB(rng);
        if (p0 > p1) std::swap(p0, p1);
        if (mb0 > mb1) std::swap(mb0, mb1);
        std::vector<float> part((size_t)outPer, std::nanf(""));
        k->runWindow(xb.data(), g, part.data(), res, mb0, mb1, p0, p1);
        for (int64_t mb = 0; mb < Mb; ++mb)
          for (int64_t p = 0; p < P; ++p) {
            const size_t at = (size_t)((mb * P + p) * 16);
            if (mb >= mb0 && mb < mb1 && p >= p0 && p < p1)
              ASSERT_EQ(0, std::memcmp(&part[at], &batch[at], 16 * sizeof(float))) << what << " range, pixel " << p;
            else
              ASSERT_TRUE(std::isnan(part[at])) << what << ": wrote outside its range";
          }
      }
      if (s.k == 1) {
        // The stride-1 kernel on the subsampled input: the same bits.
        std::vector<float> sub((size_t)((s.C + 15) / 16 * 16 * P));
        for (int64_t cb = 0; cb < (s.C + 15) / 16; ++cb)
          for (int64_t p = 0; p < P; ++p)
            std::memcpy(&sub[(size_t)((cb * P + p) * 16)], &xb[(size_t)((cb * Pin + p / Wo * s.s * s.W + p % Wo * s.s) * 16)],
                        16 * sizeof(float));
        std::vector<float> plain((size_t)outPer);
        k->run(sub.data(), P, plain.data(), res, 0, Mb, 0, P);
        EXPECT_EQ(0, std::memcmp(plain.data(), batch.data(), sizeof(float) * (size_t)outPer)) << what;
      }
    }
  }
  // A larger filter takes whole blocks of input channels only.
  Tensor W(DType::Float, {16, 24, 3, 3});
  EXPECT_FALSE(Conv1x1Blocked::create(W, nullptr, {}, false, false));
}

// DnnlConv gives a 3x3 to our kernel only with QS_CONV_KXK (s2: strided ones; all: all but the Winograd
// rule's), and then runBlocked gives the kernel's bits; ctest runs this file and ConvDnnl once more with
// QS_CONV_KXK=all (conv_dnnl_kxk).
TEST(Conv1x1Blocked, DnnlConvRunsLargerFiltersOnlyOnRequest) {
  if (!Conv1x1Blocked::available() || !DnnlConv::available()) GTEST_SKIP() << "no AVX-512F or no oneDNN";
  if (const char* v = std::getenv("QS_CONV1X1"); v && std::string(v) == "dnnl") GTEST_SKIP() << "QS_CONV1X1=dnnl";
  const char* env = std::getenv("QS_CONV_KXK");
  const std::string kxk = env ? env : "";
  std::mt19937 rng(23);
  const int64_t C = 64, M = 32, H = 14, N = 3;
  Tensor W(DType::Float, {M, C, 3, 3}), B(DType::Float, {M});
  const std::vector<float> w = randomVector((size_t)W.numel(), rng, -0.2f, 0.2f), b = randomVector((size_t)M, rng);
  std::memcpy(W.data<float>(), w.data(), sizeof(float) * w.size());
  std::memcpy(B.data<float>(), b.data(), sizeof(float) * b.size());
  const std::vector<FusedActivation> relu = {{K::Relu, 0.f, 0.f}};
  auto conv = DnnlConv::createBlocked(W, &B, 1, relu, false, false, 16);
  ASSERT_TRUE(conv);
  for (int64_t stride : {1, 2}) {
    WindowAttrs attrs;
    attrs.strides = {stride, stride};
    attrs.pads = {1, 1, 1, 1};
    WindowGeometry g;
    ASSERT_TRUE(resolveWindow(attrs, {H, H}, {3, 3}, false, g).isOk());
    const bool own = kxk == "all" || (kxk == "s2" && stride == 2);
    EXPECT_EQ(conv->kernelName(1, C, g) == DnnlConv::kOwn1x1Name, own) << "stride " << stride << " QS_CONV_KXK=" << kxk;
    if (!own) continue;
    const std::vector<float> x = randomVector((size_t)(N * C * H * H), rng);
    std::vector<float> xb(x.size());
    toNchw8c(x.data(), N, C, H * H, xb.data(), 1, 16);
    const int64_t outPer = M * g.out[1] * g.out[2];
    std::vector<float> want((size_t)(N * outPer)), got(want.size());
    Conv1x1Blocked::create(W, &B, relu, false, false)->runBatchWindow(xb.data(), N, g, want.data(), nullptr, 1);
    ASSERT_TRUE(conv->runBlocked(xb.data(), N, C, g, got.data(), nullptr, 2).isOk());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size())) << "stride " << stride;
  }
}

}  // namespace
}  // namespace qs
