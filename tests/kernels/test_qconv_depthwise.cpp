// Integer depthwise Conv (core/kernels/qconv_depthwise.h): the portable loops and the AVX-512 VNNI
// kernel against a direct convolution of the integers (exact int64 sums, the same epilogue: the
// same bits), the two against each other bit for bit (outputs and error sums), against the FP32
// depthwise Conv of the fake-quantized tensors (float rounding apart), the integer sums at their
// extremes, and bad inputs reported as errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"
#include "core/kernels/int_conv.h"
#include "core/kernels/qconv.h"
#include "core/kernels/qconv_depthwise.h"
#include "core/numeric/fake_quant.h"

namespace qs {
namespace {

// Forces the portable loops (qconv's "generic" GEMM) while alive.
struct PortableGuard {
  explicit PortableGuard(bool portable) { setQconvKernel(portable ? "generic" : "auto"); }
  ~PortableGuard() { setQconvKernel("auto"); }
};

bool vnniHere() {
  setQconvKernel("auto");
  return qconvDepthwiseFast();
}

struct Case {
  std::string name;
  int64_t N = 1, C = 3, H = 9, W = 9, KH = 3, KW = 3;
  int64_t sh = 1, sw = 1, dh = 1;
  std::vector<int64_t> pads = {1, 1, 1, 1};  // top, left, bottom, right
  bool bias = true;
  int threads = 1;
};

struct Problem {
  Tensor X, W, B;
  float sx = 0;
  std::vector<float> sw;
  WindowGeometry g;
};

Problem makeProblem(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Problem p;
  p.X = Tensor(DType::Float, {c.N, c.C, c.H, c.W});
  p.W = Tensor(DType::Float, {c.C, 1, c.KH, c.KW});
  p.B = Tensor(DType::Float, {c.C});
  float maxX = 0;
  for (int64_t i = 0; i < p.X.numel(); ++i) {
    float v = u(rng);
    if (i % 17 == 3) v *= 3.f;  // a tail that the scale clips
    p.X.data<float>()[i] = v;
    maxX = std::max(maxX, std::fabs(v));
  }
  for (int64_t i = 0; i < p.W.numel(); ++i) p.W.data<float>()[i] = u(rng) * 0.5f;
  for (int64_t i = 0; i < c.C; ++i) p.B.data<float>()[i] = u(rng);
  p.sx = 0.8f * maxX / 127.f;
  const int64_t K = c.KH * c.KW;
  for (int64_t m = 0; m < c.C; ++m) {
    float a = 0;
    for (int64_t k = 0; k < K; ++k) a = std::max(a, std::fabs(p.W.data<float>()[m * K + k]));
    p.sw.push_back(a / 127.f);
  }
  WindowAttrs attrs;
  attrs.group = c.C;
  attrs.strides = {c.sh, c.sw};
  attrs.dilations = {c.dh, 1};
  attrs.pads = c.pads;
  EXPECT_TRUE(resolveWindow(attrs, {c.H, c.W}, {c.KH, c.KW}, false, p.g).isOk()) << c.name;
  return p;
}

// The integers and a direct convolution of them: exact sums (int64), then qconvDepthwise's
// epilogue, float(fma(sum, sx * sw, bias)) in double.
Tensor directReference(const Problem& p) {
  const int64_t N = p.X.dim(0), C = p.X.dim(1), H = p.X.dim(2), W = p.X.dim(3), KH = p.W.dim(2), KW = p.W.dim(3);
  const WindowGeometry& g = p.g;
  const int64_t OH = g.out[1], OW = g.out[2];
  Tensor y(DType::Float, {N, C, OH, OW});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t sum = 0;
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t ih = oh * g.s[1] + kh * g.d[1] - g.padB[1], iw = ow * g.s[2] + kw * g.d[2] - g.padB[2];
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const float x = p.X.data<float>()[((n * C + c) * H + ih) * W + iw];
              const float w = p.W.data<float>()[(c * KH + kh) * KW + kw];
              const int64_t qx = (int64_t)std::min(std::max(std::nearbyint(x / p.sx), -128.f), 127.f);
              const int64_t qw = (int64_t)std::min(std::max(std::nearbyint(w / p.sw[(size_t)c]), -127.f), 127.f);
              sum += qx * qw;
            }
          const double scale = (double)p.sx * (double)p.sw[(size_t)c];
          y.data<float>()[((n * C + c) * OH + oh) * OW + ow] =
              (float)std::fma((double)sum, scale, (double)p.B.data<float>()[c]);
        }
  return y;
}

struct DwRun {
  Tensor y;
  ErrorAccumulator sums;
  Status status;
};

DwRun runCase(const Problem& p, const Case& c, const float* reference = nullptr) {
  DwRun r;
  auto w = prepareQDepthwiseWeights(p.W, p.sw);
  EXPECT_TRUE(w) << w.status().message();
  if (!w) return r;
  r.status = qconvDepthwise(p.X, p.sx, **w, c.bias ? p.B.data<float>() : nullptr, p.g, c.threads, &r.y, reference,
                            reference ? &r.sums : nullptr);
  return r;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"3x3 pad 1", 1, 3, 9, 9});
  v.push_back({"3x3 stride 2, odd width", 2, 4, 11, 37, 3, 3, 2, 2});
  v.push_back({"5x5 pad 2, 40 wide (det)", 1, 5, 12, 40, 5, 5, 1, 1, 1, {2, 2, 2, 2}});
  v.push_back({"5x5 stride 2", 1, 3, 13, 21, 5, 5, 2, 2, 1, {2, 2, 2, 2}});
  v.push_back({"1x1", 1, 2, 5, 33, 1, 1, 1, 1, 1, {0, 0, 0, 0}});
  v.push_back({"1x9 (three words of taps)", 1, 2, 4, 50, 1, 9, 1, 1, 1, {0, 4, 0, 4}});
  v.push_back({"7x1, H stride 3, H dilation 2", 1, 2, 30, 17, 7, 1, 3, 1, 2, {5, 0, 6, 0}});
  v.push_back({"3x3 W stride 2 only, asymmetric pads", 1, 3, 10, 64, 3, 3, 1, 2, 1, {0, 2, 1, 0}});
  v.push_back({"no bias, 2 threads, 65 wide", 2, 6, 7, 65, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, 2});
  v.push_back({"width 1", 1, 3, 6, 1, 3, 3, 1, 1, 1, {1, 1, 1, 1}});
  v.push_back({"16x16 kernel", 1, 2, 20, 20, 16, 16, 1, 1, 1, {7, 7, 8, 8}});
  return v;
}

void expectSameBits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(a.data<float>() + i, b.data<float>() + i, 4) != 0) {
      ++differ;
      if (first < 0) first = i;
    }
  EXPECT_EQ(differ, 0) << what << ": first at " << first << ": " << a.data<float>()[std::max<int64_t>(first, 0)]
                       << " vs " << b.data<float>()[std::max<int64_t>(first, 0)];
}

void checkAgainstDirect(bool portable) {
  PortableGuard guard(portable);
  uint32_t seed = 1;
  for (const Case& c : cases()) {
    const Problem p = makeProblem(c, seed++);
    DwRun r = runCase(p, c);
    ASSERT_TRUE(r.status.isOk()) << c.name << ": " << r.status.message();
    Problem noBias = p;
    if (!c.bias) std::fill(noBias.B.data<float>(), noBias.B.data<float>() + noBias.B.numel(), 0.f);
    expectSameBits(r.y, directReference(noBias), c.name + (portable ? " (portable)" : " (vnni)"));
  }
}

}  // namespace

TEST(QConvDepthwise, PortableEqualsDirectIntegerConvolution) { checkAgainstDirect(true); }

TEST(QConvDepthwise, VnniEqualsDirectIntegerConvolution) {
  if (!vnniHere()) GTEST_SKIP() << "no AVX-512 VNNI and VBMI";
  checkAgainstDirect(false);
}

TEST(QConvDepthwise, VnniEqualsPortableBitForBitWithSums) {
  if (!vnniHere()) GTEST_SKIP() << "no AVX-512 VNNI and VBMI";
  uint32_t seed = 100;
  for (const Case& c : cases()) {
    const Problem p = makeProblem(c, seed++);
    // A reference to compare with: the outputs moved a little.
    DwRun first = runCase(p, c);
    ASSERT_TRUE(first.status.isOk()) << c.name;
    Tensor ref(DType::Float, first.y.shape());
    std::mt19937 rng(seed);
    std::normal_distribution<float> noise(0.f, 0.01f);
    for (int64_t i = 0; i < ref.numel(); ++i) ref.data<float>()[i] = first.y.data<float>()[i] + noise(rng);
    DwRun fast = runCase(p, c, ref.data<float>());
    DwRun slow;
    {
      PortableGuard guard(true);
      ASSERT_FALSE(qconvDepthwiseFast());
      slow = runCase(p, c, ref.data<float>());
    }
    ASSERT_TRUE(fast.status.isOk() && slow.status.isOk()) << c.name;
    expectSameBits(fast.y, slow.y, c.name);
    // The sums: per plane, merged in plane order, the same for any thread count.
    const ErrorMetrics a = fast.sums.metrics(), b = slow.sums.metrics();
    EXPECT_EQ(a.snrDb, b.snrDb) << c.name;
    EXPECT_EQ(a.mse, b.mse) << c.name;
    EXPECT_EQ(a.count, ref.numel()) << c.name;
    ErrorAccumulator planes;
    const int64_t plane = ref.dim(2) * ref.dim(3);
    for (int64_t pl = 0; pl < ref.dim(0) * ref.dim(1); ++pl) {
      ErrorAccumulator one;
      one.add(ref.data<float>() + pl * plane, fast.y.data<float>() + pl * plane, plane);
      planes.merge(one);
    }
    EXPECT_EQ(planes.metrics().snrDb, a.snrDb) << c.name;
  }
}

TEST(QConvDepthwise, AgreesWithFp32DepthwiseConvOfFakeQuantizedTensors) {
  // What the analysis computed before: fakeQuantInt8 on X and W, then the Conv kernel's depthwise
  // plane function. The integer sums are exact; the FP32 ones round, so the two agree to a few
  // ulps of the largest term.
  uint32_t seed = 200;
  for (const Case& c : cases()) {
    const Problem p = makeProblem(c, seed++);
    DwRun r = runCase(p, c);
    ASSERT_TRUE(r.status.isOk()) << c.name;
    const int64_t N = c.N, C = c.C, inSize = c.H * c.W, K = c.KH * c.KW, outSize = p.g.outSize();
    std::vector<float> xq((size_t)inSize), wq((size_t)K), out((size_t)outSize);
    double worst = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ch = 0; ch < C; ++ch) {
        fakeQuantInt8(p.X.data<float>() + (n * C + ch) * inSize, xq.data(), inSize, p.sx, kActQmin, kActQmax);
        fakeQuantInt8(p.W.data<float>() + ch * K, wq.data(), K, p.sw[(size_t)ch], kWeightQmin, kWeightQmax);
        depthwiseConvPlane(xq.data(), wq.data(), c.bias ? p.B.data<float>()[ch] : 0.f, p.g, out.data());
        // Bound: a few roundings of sums of K terms of at most 128 sx * 127 sw.
        const double bound = 1e-6 * (double)K * 128.0 * 127.0 * p.sx * p.sw[(size_t)ch] + 1e-6;
        for (int64_t o = 0; o < outSize; ++o) {
          const double d = std::fabs((double)out[(size_t)o] - r.y.data<float>()[(n * C + ch) * outSize + o]);
          worst = std::max(worst, d / bound);
          ASSERT_LE(d, bound) << c.name << " plane " << n * C + ch << " output " << o;
        }
      }
    EXPECT_LE(worst, 1.0) << c.name;
  }
}

TEST(QConvDepthwise, SumsAreExactAtTheExtremes) {
  // Every input at -128 or 127 and every weight at -127 or 127 over a 16x16 kernel (the largest):
  // sums up to 256 * 128 * 127 in magnitude, all exact.
  for (bool portable : {true, false}) {
    if (!portable && !vnniHere()) continue;
    PortableGuard guard(portable);
    Case c{"extremes", 1, 4, 18, 40, 16, 16, 1, 1, 1, {0, 0, 0, 0}};
    Problem p = makeProblem(c, 7);
    p.sx = 1.f;
    for (int64_t i = 0; i < p.X.numel(); ++i) p.X.data<float>()[i] = (i / 3) % 2 ? 500.f : -500.f;
    for (int64_t ch = 0; ch < c.C; ++ch) {
      p.sw[(size_t)ch] = 1.f;
      for (int64_t k = 0; k < c.KH * c.KW; ++k)
        p.W.data<float>()[ch * c.KH * c.KW + k] = ch == 0 ? -127.f : ch == 1 ? 127.f : (k % 2 ? 127.f : -127.f);
    }
    DwRun r = runCase(p, c);
    ASSERT_TRUE(r.status.isOk()) << r.status.message();
    expectSameBits(r.y, directReference(p), portable ? "extremes (portable)" : "extremes (vnni)");
  }
}

TEST(QConvDepthwise, BadInputsAreErrors) {
  Case c;
  Problem p = makeProblem(c, 3);
  auto w = prepareQDepthwiseWeights(p.W, p.sw);
  ASSERT_TRUE(w);
  Tensor y;
  // NaN and Inf in X.
  for (float bad : {NAN, INFINITY}) {
    Problem q = p;
    q.X = Tensor(DType::Float, p.X.shape());
    std::memcpy(q.X.data<float>(), p.X.data<float>(), (size_t)p.X.byteSize());
    q.X.data<float>()[40] = bad;
    const Status st = qconvDepthwise(q.X, q.sx, **w, nullptr, q.g, 1, &y);
    EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
    EXPECT_NE(st.message().find("NaN or Inf"), std::string::npos) << st.message();
  }
  // A W stride of 3: not computed, and said so.
  Case c3 = c;
  c3.sw = 3;
  Problem p3 = makeProblem(c3, 3);
  EXPECT_FALSE(qconvDepthwiseSupports(p3.g));
  const Status st3 = qconvDepthwise(p3.X, p3.sx, **w, nullptr, p3.g, 1, &y);
  EXPECT_EQ(st3.code(), StatusCode::Unsupported);
  // Scales, channels, kernels.
  EXPECT_EQ(qconvDepthwise(p.X, 0.f, **w, nullptr, p.g, 1, &y).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(qconvDepthwise(p.X, NAN, **w, nullptr, p.g, 1, &y).code(), StatusCode::InvalidArgument);
  Tensor x4 = Tensor::zeros(DType::Float, {1, 4, c.H, c.W});
  const Status stC = qconvDepthwise(x4, p.sx, **w, nullptr, p.g, 1, &y);
  EXPECT_EQ(stC.code(), StatusCode::InvalidArgument);
  EXPECT_NE(stC.message().find("3 channels"), std::string::npos) << stC.message();
  EXPECT_EQ(qconvDepthwise(p.X, p.sx, **w, nullptr, p.g, 1, nullptr).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(prepareQDepthwiseWeights(Tensor::zeros(DType::Float, {3, 1, 3, 17}), {1.f}).status().code(), StatusCode::Unsupported);
  EXPECT_EQ(prepareQDepthwiseWeights(Tensor::zeros(DType::Float, {3, 2, 3, 3}), {1.f}).status().code(),
            StatusCode::InvalidArgument);
  EXPECT_EQ(prepareQDepthwiseWeights(p.W, {1.f, 1.f}).status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(prepareQDepthwiseWeights(p.W, {1.f, 0.f, 1.f}).status().code(), StatusCode::InvalidArgument);
  Tensor wNan = Tensor::zeros(DType::Float, p.W.shape());
  wNan.data<float>()[5] = NAN;
  const auto bad = prepareQDepthwiseWeights(wNan, p.sw);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("weight [0, 5]"), std::string::npos) << bad.status().message();
}

TEST(QConvDepthwise, InputIntegersAreFakeQuantIntegersAtTies) {
  // Inputs on and next to the half-integers of x / sx, where multiplying by 1 / sx instead of
  // dividing could round the other way (the vector kernel divides there): the integers must be
  // fakeQuantInt8's, so the outputs the direct convolution's.
  for (bool portable : {true, false}) {
    if (!portable && !vnniHere()) continue;
    PortableGuard guard(portable);
    for (float sx : {0.1f, 0.0371f, 3.3f, 1e-3f}) {
      Case c{"ties", 1, 2, 6, 70, 1, 1, 1, 1, 1, {0, 0, 0, 0}};
      Problem p = makeProblem(c, 9);
      p.sx = sx;
      for (int64_t i = 0; i < p.X.numel(); ++i) {
        const float half = ((float)(i % 300) - 150.f + 0.5f) * sx;
        p.X.data<float>()[i] = i % 3 == 0 ? half : i % 3 == 1 ? std::nextafter(half, 1e9f) : std::nextafter(half, -1e9f);
      }
      for (int64_t ch = 0; ch < c.C; ++ch) {
        p.W.data<float>()[ch] = 1.f;
        p.sw[(size_t)ch] = 1.f / 127.f;
      }
      DwRun r = runCase(p, c);
      ASSERT_TRUE(r.status.isOk()) << r.status.message();
      expectSameBits(r.y, directReference(p), "ties, sx " + std::to_string(sx) + (portable ? " (portable)" : " (vnni)"));
    }
  }
}

}  // namespace qs
