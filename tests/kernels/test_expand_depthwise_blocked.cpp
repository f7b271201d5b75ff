// A 1x1 expansion and its depthwise conv by bands of rows (core/kernels/expand_depthwise_blocked.h): bit for bit the
// two nChw16c kernels run apart (Conv1x1Blocked over the whole image, then DepthwiseBlocked), on mobilenet_v2's
// expansions and odd shapes (channel tails in and out, 5x5, stride 1 and 2, a 1x1 map), for bands of any height,
// any range of output rows (nothing else written), batches on 1 and 2 threads; and the kernel's bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/depthwise_blocked.h"
#include "core/kernels/expand_depthwise_blocked.h"
#include "tests/support/conv_helpers.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

using K = FusedActivation::Kind;
using test::paddedWindow;
using test::randomTensor;
constexpr int64_t kB = 16;

struct PairShape {
  int64_t C, M, H, W, k, s;
};

const std::vector<PairShape> kShapes = {
    {16, 96, 112, 112, 3, 2}, {24, 144, 56, 56, 3, 1}, {24, 144, 56, 56, 3, 2}, {32, 192, 28, 28, 3, 1},
    {24, 40, 13, 11, 3, 1},   {8, 24, 9, 10, 5, 2},    {16, 32, 1, 1, 3, 1},    {40, 56, 7, 7, 3, 2},
};

struct Posts {
  std::vector<FusedActivation> expand, dw;
};
const std::vector<Posts> kPosts = {{{{K::Clip, 0.f, 6.f}}, {{K::Clip, 0.f, 6.f}}},
                                   {{}, {}},
                                   {{{K::Relu, 0.f, 0.f}}, {{K::Relu, 0.f, 0.f}}}};

std::string nameOf(const PairShape& s, size_t post) {
  return std::to_string(s.C) + " -> " + std::to_string(s.M) + " @" + std::to_string(s.H) + "x" + std::to_string(s.W) +
         " k " + std::to_string(s.k) + " s " + std::to_string(s.s) + " post " + std::to_string(post);
}

struct Case {
  PairShape s;
  WindowGeometry g;
  Tensor w1, b1, wd, bd;
  std::unique_ptr<Conv1x1Blocked> expand;
  std::unique_ptr<DepthwiseBlocked> dw;
  std::unique_ptr<ExpandDepthwiseBlocked> pair;
  int64_t Cb = 0, Mb = 0, inPer = 0, outPer = 0;
};

Case makeCase(const PairShape& s, const Posts& post, std::mt19937& rng) {
  Case c;
  c.s = s;
  c.g = paddedWindow(s.H, s.W, s.k, s.s);
  c.w1 = randomTensor({s.M, s.C, 1, 1}, rng, -0.5f, 0.5f);
  c.b1 = randomTensor({s.M}, rng, -0.2f, 0.2f);
  c.wd = randomTensor({s.M, 1, s.k, s.k}, rng, -0.5f, 0.5f);
  c.bd = randomTensor({s.M}, rng, -0.2f, 0.2f);
  c.expand = Conv1x1Blocked::create(c.w1, &c.b1, post.expand, false, false);
  c.dw = DepthwiseBlocked::create(c.wd, &c.bd, post.dw);
  c.pair = ExpandDepthwiseBlocked::create(c.w1, &c.b1, post.expand, c.wd, &c.bd, post.dw);
  c.Cb = (s.C + kB - 1) / kB;
  c.Mb = (s.M + kB - 1) / kB;
  c.inPer = c.Cb * s.H * s.W * kB;
  c.outPer = c.Mb * c.g.outSize() * kB;
  return c;
}

// N images of x in nChw16c, the pad lanes of a channel tail NaN (never read).
std::vector<float> blockedInput(const Case& c, int64_t N, std::mt19937& rng) {
  std::vector<float> x((size_t)(N * c.inPer));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t P = c.s.H * c.s.W;
  for (int64_t i = 0; i < (int64_t)x.size(); ++i) {
    const int64_t lane = i % kB, cb = i / (P * kB) % c.Cb;
    x[(size_t)i] = cb * kB + lane < c.s.C ? u(rng) : std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

// The two kernels apart, one image: the expansion over the whole image, then the depthwise conv.
std::vector<float> apart(const Case& c, const float* x) {
  const int64_t P = c.s.H * c.s.W;
  std::vector<float> mid((size_t)(c.Mb * P * kB)), y((size_t)c.outPer);
  c.expand->run(x, P, mid.data(), nullptr, 0, c.Mb, 0, P);
  c.dw->run(mid.data(), c.g, y.data(), 0, c.Mb, 0, c.g.out[1]);
  return y;
}

bool available() { return Conv1x1Blocked::available() && DepthwiseBlocked::available(); }

}  // namespace

TEST(ExpandDepthwiseBlocked, BandsGiveTheBitsOfTheTwoKernelsApart) {
  if (!available()) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(5);
  for (const PairShape& s : kShapes)
    for (size_t p = 0; p < kPosts.size(); ++p) {
      SCOPED_TRACE(nameOf(s, p));
      Case c = makeCase(s, kPosts[p], rng);
      ASSERT_TRUE(c.expand && c.dw && c.pair);
      const std::vector<float> x = blockedInput(c, 1, rng);
      const std::vector<float> want = apart(c, x.data());
      const int64_t OH = c.g.out[1];
      for (int64_t rows : {(int64_t)1, (int64_t)2, (int64_t)3, (int64_t)5, c.pair->bandRowsFor(c.g), OH}) {
        // The whole image, and two ranges of rows (a cut inside the image: the rows either side share input rows).
        const int64_t cut = OH / 3;
        for (const auto& [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{0, OH}, {0, cut}, {cut, OH}}) {
          std::vector<float> got((size_t)c.outPer, -7.f), buffer((size_t)c.pair->bandFloats(c.g, rows));
          c.pair->runBands(x.data(), c.g, got.data(), r0, r1, rows, buffer.data());
          const int64_t OW = c.g.out[2];
          for (int64_t mb = 0; mb < c.Mb; ++mb)
            for (int64_t oh = 0; oh < OH; ++oh) {
              const size_t at = (size_t)((mb * OH + oh) * OW * kB), n = (size_t)(OW * kB);
              if (oh >= r0 && oh < r1) {
                ASSERT_EQ(std::memcmp(got.data() + at, want.data() + at, n * sizeof(float)), 0)
                    << "band of " << rows << " rows, range [" << r0 << ", " << r1 << "): block " << mb << " row " << oh;
              } else {
                for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[at + i], -7.f) << "written outside the range, row " << oh;
              }
            }
        }
      }
      // Each output near a naive double-precision pair (the reference above is not itself wrong).
      if (s.H * s.W <= 200) {
        const int64_t OW = c.g.out[2];
        for (int64_t m = 0; m < s.M; ++m)
          for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow) {
              double acc = c.bd.data<float>()[m];
              for (int64_t kh = 0; kh < s.k; ++kh)
                for (int64_t kw = 0; kw < s.k; ++kw) {
                  const int64_t ih = oh * s.s - c.g.padB[1] + kh, iw = ow * s.s - c.g.padB[2] + kw;
                  if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                  double e = c.b1.data<float>()[m];
                  for (int64_t ci = 0; ci < s.C; ++ci)
                    e += (double)c.w1.data<float>()[m * s.C + ci] *
                         x[(size_t)(((ci / kB * s.H + ih) * s.W + iw) * kB + ci % kB)];
                  for (const FusedActivation& a : kPosts[p].expand)
                    e = a.kind == K::Relu ? std::max(e, 0.0) : std::min(std::max(e, (double)a.a), (double)a.b);
                  acc += e * c.wd.data<float>()[(m * s.k + kh) * s.k + kw];
                }
              for (const FusedActivation& a : kPosts[p].dw)
                acc = a.kind == K::Relu ? std::max(acc, 0.0) : std::min(std::max(acc, (double)a.a), (double)a.b);
              const float got = want[(size_t)(((m / kB * OH + oh) * OW + ow) * kB + m % kB)];
              ASSERT_NEAR(got, acc, 1e-4 * (1.0 + std::fabs(acc))) << "m " << m << " at " << oh << "," << ow;
            }
      }
    }
}

TEST(ExpandDepthwiseBlocked, EachImageOfABatchGetsItsBitsOnAnyThreads) {
  if (!available()) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(6);
  for (const PairShape& s : kShapes) {
    SCOPED_TRACE(nameOf(s, 0));
    Case c = makeCase(s, kPosts[0], rng);
    ASSERT_TRUE(c.pair);
    for (int64_t N : {1, 3}) {
      const std::vector<float> x = blockedInput(c, N, rng);
      for (int threads : {1, 2})
        for (int64_t rows : {(int64_t)0, (int64_t)2}) {
          std::vector<float> got((size_t)(N * c.outPer)), scratch((size_t)c.pair->scratchFloats(N, c.g, threads, rows));
          c.pair->runBatch(x.data(), N, c.g, got.data(), threads, scratch.data(), rows);
          for (int64_t n = 0; n < N; ++n) {
            const std::vector<float> want = apart(c, x.data() + n * c.inPer);
            ASSERT_EQ(std::memcmp(got.data() + n * c.outPer, want.data(), want.size() * sizeof(float)), 0)
                << "image " << n << " of " << N << ", " << threads << " threads, bands of " << rows;
          }
        }
    }
  }
}

// The scratch is the caller's (no buffer kept per thread): runBatch writes into it, never past scratchFloats(), banded
// (3 images on 2 threads, 1 image of a large expansion) and apart (1 image of a small one).
TEST(ExpandDepthwiseBlocked, WorksInTheCallersScratchAndNothingPastIt) {
  if (!available()) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(8);
  const std::vector<std::pair<PairShape, int64_t>> cases = {{kShapes[0], 3}, {kShapes[0], 1}, {kShapes[4], 1}};
  for (const auto& [s, N] : cases) {
    SCOPED_TRACE(nameOf(s, 0) + ", batch " + std::to_string(N));
    Case c = makeCase(s, kPosts[0], rng);
    ASSERT_TRUE(c.pair);
    const std::vector<float> x = blockedInput(c, N, rng);
    const int64_t n = c.pair->scratchFloats(N, c.g, 2), guard = 4096;
    ASSERT_GT(n, 0);
    std::vector<float> scratch((size_t)(n + guard), -3.f), got((size_t)(N * c.outPer));
    c.pair->runBatch(x.data(), N, c.g, got.data(), 2, scratch.data());
    EXPECT_NE(std::count(scratch.begin(), scratch.begin() + n, -3.f), n);  // used
    EXPECT_EQ(std::count(scratch.begin() + n, scratch.end(), -3.f), guard);  // nothing written past it
    for (int64_t i = 0; i < N; ++i) {
      const std::vector<float> want = apart(c, x.data() + i * c.inPer);
      ASSERT_EQ(std::memcmp(got.data() + i * c.outPer, want.data(), want.size() * sizeof(float)), 0) << "image " << i;
    }
  }
}

TEST(ExpandDepthwiseBlocked, FormsItDoesNotTake) {
  if (!available()) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(7);
  const Tensor w1 = randomTensor({32, 16, 1, 1}, rng), wd = randomTensor({32, 1, 3, 3}, rng);
  EXPECT_TRUE(ExpandDepthwiseBlocked::create(w1, nullptr, {}, wd, nullptr, {}));
  // A 3x3 first conv, channels that do not match, a post-op the kernels do not take.
  EXPECT_FALSE(ExpandDepthwiseBlocked::create(randomTensor({32, 16, 3, 3}, rng), nullptr, {}, wd, nullptr, {}));
  EXPECT_FALSE(ExpandDepthwiseBlocked::create(w1, nullptr, {}, randomTensor({48, 1, 3, 3}, rng), nullptr, {}));
  EXPECT_FALSE(ExpandDepthwiseBlocked::create(w1, nullptr, {{K::Sigmoid, 0.f, 0.f}}, wd, nullptr, {}));
}

}  // namespace qs
