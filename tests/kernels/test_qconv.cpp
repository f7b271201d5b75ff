// Integer Conv (core/kernels/qconv.h) against double-precision direct convolutions of the
// fake-quantized tensors, on the generic GEMM and the SIMD one this CPU chooses (AVX-512 VNNI or
// AVX2), which must agree bit for bit. test_qconv_avx2.cpp forces AVX2 on any AVX2 CPU.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"
#include "core/kernels/qconv.h"
#include "core/numeric/fake_quant.h"

namespace qs {
namespace {

// Restores the automatic GEMM choice however a test ends.
struct GenericGuard {
  explicit GenericGuard(bool generic) { setQconvKernel(generic ? "generic" : "auto"); }
  ~GenericGuard() { setQconvKernel("auto"); }
};

// The automatic choice is a SIMD GEMM (VNNI or AVX2), not the portable loops.
bool cpuHasSimdGemm() {
  setQconvKernel("auto");
  return std::string(qconvKernelName()) != "generic";
}

std::string pathLabel(bool generic) {
  setQconvKernel(generic ? "generic" : "auto");
  const std::string name = qconvKernelName();
  setQconvKernel("auto");
  return " (" + name + ")";
}

struct Case {
  std::string name;
  int nd = 2;
  int64_t N = 1, C = 3, M = 5;
  std::vector<int64_t> in, k, strides, dilations, pads;
  bool bias = true;
  float clipFraction = 0.8f;   // sx = clipFraction * max|X| / 127: X beyond it clips
  float weightClip = 1.f;      // sw[m] = weightClip * max|W[m]| / 127: < 1 clips weights
  bool tail = true;            // every 17th X three times larger (the values clipping cuts)
  std::string autoPad = "NOTSET";
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
  Shape xs = {c.N, c.C}, ws = {c.M, c.C};
  for (int i = 0; i < c.nd; ++i) {
    xs.push_back(c.in[(size_t)i]);
    ws.push_back(c.k[(size_t)i]);
  }
  p.X = Tensor(DType::Float, xs);
  p.W = Tensor(DType::Float, ws);
  p.B = Tensor(DType::Float, {c.M});
  float maxX = 0;
  for (int64_t i = 0; i < p.X.numel(); ++i) {
    // A few large values: the tail that clipping exercises.
    float v = u(rng);
    if (c.tail && i % 17 == 3) v *= 3.f;
    p.X.data<float>()[i] = v;
    maxX = std::max(maxX, std::fabs(v));
  }
  for (int64_t i = 0; i < p.W.numel(); ++i) p.W.data<float>()[i] = u(rng) * 0.5f;
  for (int64_t i = 0; i < c.M; ++i) p.B.data<float>()[i] = u(rng);
  p.sx = c.clipFraction * maxX / 127.f;
  const int64_t K = p.W.numel() / c.M;
  for (int64_t m = 0; m < c.M; ++m) {
    float mx = 0;
    for (int64_t k = 0; k < K; ++k) mx = std::max(mx, std::fabs(p.W.data<float>()[m * K + k]));
    p.sw.push_back(c.weightClip * mx / 127.f);
  }
  WindowAttrs a;
  a.kernelShape = c.k;
  a.strides = c.strides;
  a.dilations = c.dilations;
  a.pads = c.pads;
  a.autoPad = c.autoPad;
  std::vector<int64_t> inSp(xs.begin() + 2, xs.end()), kSp(ws.begin() + 2, ws.end());
  EXPECT_TRUE(resolveWindow(a, inSp, kSp, false, p.g).isOk());
  return p;
}

std::vector<double> toDouble(const float* v, int64_t n) { return std::vector<double>(v, v + n); }

std::vector<double> fqX(const Problem& p) {
  std::vector<float> y((size_t)p.X.numel());
  fakeQuantInt8(p.X.data<float>(), y.data(), p.X.numel(), p.sx, kActQmin, kActQmax);
  return toDouble(y.data(), (int64_t)y.size());
}

std::vector<double> fqW(const Problem& p) {
  const int64_t M = p.W.dim(0), K = p.W.numel() / M;
  std::vector<float> y((size_t)p.W.numel());
  for (int64_t m = 0; m < M; ++m)
    fakeQuantInt8(p.W.data<float>() + m * K, y.data() + m * K, K, p.sw[(size_t)m], kWeightQmin, kWeightQmax);
  return toDouble(y.data(), (int64_t)y.size());
}

// Direct convolution in double over the resolved geometry; absSum gets sum |terms| (+ |bias|).
std::vector<double> refConv(const Problem& p, const std::vector<double>& x, const std::vector<double>& w, bool bias,
                            std::vector<double>* absSum = nullptr) {
  const WindowGeometry& g = p.g;
  const int64_t N = p.X.dim(0), C = p.X.dim(1), M = p.W.dim(0);
  const int64_t inSize = g.inSize(), outSize = g.outSize(), kSize = g.kSize();
  std::vector<double> y((size_t)(N * M * outSize), 0.0);
  if (absSum) absSum->assign(y.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            const double b = bias ? p.B.data<float>()[m] : 0.0;
            double acc = b, abs = std::fabs(b);
            for (int64_t c = 0; c < C; ++c)
              for (int64_t a0 = 0; a0 < g.k[0]; ++a0)
                for (int64_t a1 = 0; a1 < g.k[1]; ++a1)
                  for (int64_t a2 = 0; a2 < g.k[2]; ++a2) {
                    const int64_t i0 = o0 * g.s[0] - g.padB[0] + a0 * g.d[0];
                    const int64_t i1 = o1 * g.s[1] - g.padB[1] + a1 * g.d[1];
                    const int64_t i2 = o2 * g.s[2] - g.padB[2] + a2 * g.d[2];
                    if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
                    const double t = x[(size_t)((n * C + c) * inSize + (i0 * g.in[1] + i1) * g.in[2] + i2)] *
                                     w[(size_t)((m * C + c) * kSize + (a0 * g.k[1] + a1) * g.k[2] + a2)];
                    acc += t;
                    abs += std::fabs(t);
                  }
            const size_t o = (size_t)((n * M + m) * outSize + (o0 * g.out[1] + o1) * g.out[2] + o2);
            y[o] = acc;
            if (absSum) (*absSum)[o] = abs;
          }
  return y;
}

double snrDb(const std::vector<double>& want, const std::vector<double>& got) {
  double s = 0, e = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    s += want[i] * want[i];
    e += (got[i] - want[i]) * (got[i] - want[i]);
  }
  return e == 0 ? 300.0 : 10.0 * std::log10(s / e);
}

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.byteSize()) == 0;
}

struct Outs {
  Tensor full, act, werr;
};

Outs runQconv(const Problem& p, const QConvWeights& w, bool bias, int threads) {
  Outs o;
  QConvOutputs out{&o.full, &o.act, &o.werr};
  Status st = qconv(p.X, p.sx, w, bias ? p.B.data<float>() : nullptr, p.g, threads, out);
  EXPECT_TRUE(st.isOk()) << st.message();
  return o;
}

void checkCase(const Case& c, uint32_t seed, bool generic) {
  SCOPED_TRACE(c.name + pathLabel(generic));
  GenericGuard guard(generic);
  const Problem p = makeProblem(c, seed);
  auto prepared = prepareQConvWeights(p.W, p.sw);
  ASSERT_TRUE(prepared.isOk()) << prepared.status().message();
  const QConvWeights& w = *prepared.value();
  const Outs o = runQconv(p, w, c.bias, c.threads);

  const std::vector<double> x = toDouble(p.X.data<float>(), p.X.numel());
  const std::vector<double> wf = toDouble(p.W.data<float>(), p.W.numel());
  const std::vector<double> xq = fqX(p), wq = fqW(p);
  std::vector<double> absSum;
  const std::vector<double> refFull = refConv(p, xq, wq, c.bias, &absSum);
  const std::vector<double> ref = refConv(p, x, wf, false);
  const std::vector<double> refAct = refConv(p, xq, wf, false);
  const std::vector<double> refWeight = refConv(p, x, wq, false);

  ASSERT_EQ((size_t)o.full.numel(), refFull.size());
  for (size_t i = 0; i < refFull.size(); ++i)
    ASSERT_LE(std::fabs(o.full.data<float>()[i] - refFull[i]), 1e-5 * (std::fabs(refFull[i]) + absSum[i]))
        << "full at " << i << ": " << o.full.data<float>()[i] << " vs " << refFull[i];

  // actOnly's quantization effect, (actOnly - B) - conv(X, W), against conv(fq(X), W) - conv(X, W).
  std::vector<double> wantAct(ref.size()), gotAct(ref.size()), wantW(ref.size()), gotW(ref.size());
  const int64_t M = c.M, outSize = p.g.outSize();
  for (size_t i = 0; i < ref.size(); ++i) {
    const double b = c.bias ? p.B.data<float>()[(i / (size_t)outSize) % (size_t)M] : 0.0;
    wantAct[i] = refAct[i] - ref[i];
    gotAct[i] = (double)o.act.data<float>()[i] - b - ref[i];
    wantW[i] = refWeight[i] - ref[i];
    gotW[i] = o.werr.data<float>()[i];
  }
  const double actSnr = snrDb(wantAct, gotAct), weightSnr = snrDb(wantW, gotW);
  std::printf("[ qconv ] %-75s actOnly %5.1f dB  weightError %5.1f dB\n", c.name.c_str(), actSnr, weightSnr);
  // r8 keeps W's rounding residual to 1/254 of a weight step. For weightError that is the whole
  // story (~48 dB). For actOnly it sets the error against the activation effect: about the ratio
  // of X's step to X's spread times W's spread to W's step, times 254, i.e. ~48 dB for uniform X
  // and W where nothing clips, more where X clips (the effect grows, the error does not). A row
  // whose weights clip spreads r8 over the clipped excess (rs < 254) and is coarser.
  const bool clippedWeights = c.weightClip < 1.f;
  EXPECT_GE(actSnr, clippedWeights ? 28.0 : 45.0) << "actOnly SNR";
  EXPECT_GE(weightSnr, clippedWeights ? 40.0 : 43.0) << "weightError SNR";

  // Each output alone equals the same output computed with the others (full goes through the
  // [Wq] pack alone, through [Wq; r8] with actOnly).
  Tensor full1, act1, werr1;
  ASSERT_TRUE(qconv(p.X, p.sx, w, c.bias ? p.B.data<float>() : nullptr, p.g, c.threads, {&full1, nullptr, nullptr}).isOk());
  ASSERT_TRUE(qconv(p.X, p.sx, w, c.bias ? p.B.data<float>() : nullptr, p.g, c.threads, {nullptr, &act1, nullptr}).isOk());
  ASSERT_TRUE(qconv(p.X, p.sx, w, c.bias ? p.B.data<float>() : nullptr, p.g, c.threads, {nullptr, nullptr, &werr1}).isOk());
  EXPECT_TRUE(sameBits(full1, o.full));
  EXPECT_TRUE(sameBits(act1, o.act));
  EXPECT_TRUE(sameBits(werr1, o.werr));
}

std::vector<Case> cases() {
  std::vector<Case> v;
  auto add = [&](Case c) { v.push_back(std::move(c)); };
  {
    Case c;
    c.name = "1x1 stride 1";
    c.C = 16, c.M = 24, c.in = {9, 11}, c.k = {1, 1};
    add(c);
  }
  {
    Case c;
    c.name = "3x3 pad 1 stride 1";
    c.C = 12, c.M = 11, c.in = {13, 10}, c.k = {3, 3}, c.pads = {1, 1, 1, 1};
    add(c);
  }
  {
    Case c;
    c.name = "3x3 pad 1 stride 2, 2 images, no bias";
    c.N = 2, c.C = 7, c.M = 9, c.in = {15, 12}, c.k = {3, 3}, c.strides = {2, 2}, c.pads = {1, 1, 1, 1}, c.bias = false;
    add(c);
  }
  {
    Case c;
    c.name = "5x5 dilation 2, asymmetric pads";
    c.C = 5, c.M = 17, c.in = {14, 13}, c.k = {5, 5}, c.dilations = {2, 2}, c.pads = {2, 1, 3, 4};
    add(c);
  }
  {
    Case c;
    c.name = "1-D k3 stride 2";
    c.nd = 1, c.N = 3, c.C = 10, c.M = 6, c.in = {37}, c.k = {3}, c.strides = {2}, c.pads = {1, 2};
    add(c);
  }
  {
    Case c;
    c.name = "K not a multiple of 4 (C=3, 3x3), N > 32 not a multiple of 32, 2 threads";
    c.C = 3, c.M = 33, c.in = {21, 19}, c.k = {3, 3}, c.pads = {1, 1, 1, 1}, c.threads = 2;
    add(c);
  }
  {
    Case c;
    c.name = "1x1 pointwise, 2 images, 2 threads, C=5";
    c.N = 2, c.C = 5, c.M = 8, c.in = {7, 9}, c.k = {1, 1}, c.threads = 2;
    add(c);
  }
  {
    Case c;
    c.name = "clipped weights";
    c.C = 6, c.M = 10, c.in = {8, 8}, c.k = {3, 3}, c.pads = {1, 1, 1, 1}, c.weightClip = 0.6f;
    add(c);
  }
  {
    Case c;
    c.name = "large block: C=40 3x3 on 40x36, 2 threads";
    c.C = 40, c.M = 20, c.in = {40, 36}, c.k = {3, 3}, c.pads = {1, 1, 1, 1}, c.threads = 2;
    add(c);
  }
  {
    Case c;
    c.name = "stride 2, 2 images, 2 threads (enough work to split)";
    c.N = 2, c.C = 16, c.M = 16, c.in = {48, 40}, c.k = {3, 3}, c.strides = {2, 2}, c.pads = {1, 1, 1, 1}, c.threads = 2;
    add(c);
  }
  {
    Case c;
    c.name = "3-D 2x3x3 stride (1,2,1)";
    c.nd = 3, c.C = 4, c.M = 7, c.in = {4, 9, 8}, c.k = {2, 3, 3}, c.strides = {1, 2, 1}, c.pads = {0, 1, 1, 1, 1, 0};
    add(c);
  }
  {
    Case c;
    c.name = "uniform X, nothing clips (the hardest case for actOnly)";
    c.C = 16, c.M = 16, c.in = {12, 12}, c.k = {3, 3}, c.pads = {1, 1, 1, 1}, c.tail = false, c.clipFraction = 1.f;
    add(c);
  }
  {
    Case c;
    c.name = "stride 3, dilation 2, SAME_UPPER, 2 images";
    c.N = 2, c.C = 8, c.M = 12, c.in = {17, 23}, c.k = {3, 3}, c.strides = {3, 3}, c.dilations = {2, 2};
    c.autoPad = "SAME_UPPER";
    add(c);
  }
  {
    Case c;
    c.name = "stride (2, 1), 1x3 kernel";
    c.C = 6, c.M = 7, c.in = {11, 14}, c.k = {1, 3}, c.strides = {2, 1}, c.pads = {0, 1, 0, 1};
    add(c);
  }
  {
    Case c;
    c.name = "single output column, kernel wider than input with padding";
    c.C = 9, c.M = 3, c.in = {2, 2}, c.k = {3, 3}, c.pads = {1, 1, 0, 0};
    add(c);
  }
  return v;
}

TEST(QConv, GenericMatchesReference) {
  uint32_t seed = 100;
  for (const Case& c : cases()) checkCase(c, seed++, true);
}

TEST(QConv, SimdMatchesReference) {
  if (!cpuHasSimdGemm()) GTEST_SKIP() << "CPU without AVX2 or AVX-512 VNNI";
  uint32_t seed = 100;
  for (const Case& c : cases()) checkCase(c, seed++, false);
}

// The SIMD (VNNI or AVX2) and generic GEMMs give the same bits, and so do 1 and 2 threads.
void expectSimdEqualsGeneric(const Problem& p, const Case& c) {
  auto w = prepareQConvWeights(p.W, p.sw);
  ASSERT_TRUE(w.isOk());
  Outs v, gen;
  {
    GenericGuard guard(false);
    v = runQconv(p, *w.value(), c.bias, 2);
  }
  {
    GenericGuard guard(true);
    ASSERT_STREQ(qconvKernelName(), "generic");
    gen = runQconv(p, *w.value(), c.bias, 2);
  }
  EXPECT_TRUE(sameBits(v.full, gen.full));
  EXPECT_TRUE(sameBits(v.act, gen.act));
  EXPECT_TRUE(sameBits(v.werr, gen.werr));
  const Outs one = runQconv(p, *w.value(), c.bias, 1);
  EXPECT_TRUE(sameBits(v.full, one.full));
  EXPECT_TRUE(sameBits(v.act, one.act));
  EXPECT_TRUE(sameBits(v.werr, one.werr));
}

TEST(QConv, SimdEqualsGenericBitForBit) {
  if (!cpuHasSimdGemm()) GTEST_SKIP() << "CPU without AVX2 or AVX-512 VNNI";
  uint32_t seed = 500;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    expectSimdEqualsGeneric(makeProblem(c, seed++), c);
  }
}

// X that clips heavily: sx puts the clip at |x| = 1 (127 * sx), and 20% of the values lie
// beyond it, up to 5x. weightError's X is sx * q + ex with ex at 8 bits on one scale: here ex
// spans the clipped excess (up to 4 = 508 sx), its step is ~4 sx and the residual of every
// unclipped value (|ex| <= sx / 2) is lost, which the estimate's SNR has to absorb.
Problem heavyClipProblem(const Case& c, uint32_t seed) {
  Problem p = makeProblem(c, seed);
  std::mt19937 rng(seed + 1000);
  std::uniform_real_distribution<float> u(-1.f, 1.f), beyond(1.f, 5.f);
  std::bernoulli_distribution clipped(0.2);
  for (int64_t i = 0; i < p.X.numel(); ++i)
    p.X.data<float>()[i] = clipped(rng) ? (u(rng) < 0.f ? -beyond(rng) : beyond(rng)) : u(rng);
  p.sx = 1.f / 127.f;
  return p;
}

std::vector<Case> heavyClipCases() {
  std::vector<Case> v;
  {
    Case c;
    c.name = "heavy clip: 3x3 pad 1, C=16 M=16 on 20x18";
    c.C = 16, c.M = 16, c.in = {20, 18}, c.k = {3, 3}, c.pads = {1, 1, 1, 1};
    v.push_back(c);
  }
  {
    Case c;
    c.name = "heavy clip: stride 2, 2 images, C=7 M=9, 2 threads";
    c.N = 2, c.C = 7, c.M = 9, c.in = {15, 12}, c.k = {3, 3}, c.strides = {2, 2}, c.pads = {1, 1, 1, 1}, c.threads = 2;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "heavy clip: 1x1, C=40 M=20, clipped weights";
    c.C = 40, c.M = 20, c.in = {9, 11}, c.k = {1, 1}, c.weightClip = 0.6f;
    v.push_back(c);
  }
  return v;
}

void checkHeavyClip(const Case& c, uint32_t seed, bool generic) {
  SCOPED_TRACE(c.name + pathLabel(generic));
  GenericGuard guard(generic);
  const Problem p = heavyClipProblem(c, seed);
  int64_t beyond = 0;
  for (int64_t i = 0; i < p.X.numel(); ++i) beyond += std::fabs(p.X.data<float>()[i]) > 127.f * p.sx;
  EXPECT_GT(beyond, p.X.numel() / 6) << "too few clipped values";
  auto prepared = prepareQConvWeights(p.W, p.sw);
  ASSERT_TRUE(prepared.isOk()) << prepared.status().message();
  const QConvWeights& w = *prepared.value();
  const Outs o = runQconv(p, w, c.bias, c.threads);

  const std::vector<double> x = toDouble(p.X.data<float>(), p.X.numel());
  const std::vector<double> wf = toDouble(p.W.data<float>(), p.W.numel());
  const std::vector<double> ref = refConv(p, x, wf, false), refWeight = refConv(p, x, fqW(p), false);
  // What r8 alone allows: -conv(X, sw * r8 / rs) with X exact.
  const int64_t M = c.M, K = w.depth();
  std::vector<double> wr8((size_t)(M * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      wr8[(size_t)(m * K + k)] = -(double)w.scales()[(size_t)m] * w.residual()[(size_t)(m * K + k)] /
                                 (double)w.residualScales()[(size_t)m];
  const std::vector<double> r8Only = refConv(p, x, wr8, false);
  std::vector<double> want(ref.size()), got(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    want[i] = refWeight[i] - ref[i];
    got[i] = o.werr.data<float>()[i];
  }
  const double snr = snrDb(want, got), snrR8 = snrDb(want, r8Only);
  std::printf("[ qconv ] %-75s weightError %5.1f dB (r8 with exact X: %5.1f dB)\n", c.name.c_str(), snr, snrR8);
  // Measured 46.0 and 45.8 dB (r8 with exact X: 48.0, 47.8), 43.2 with clipped weights (44.0):
  // ex's 8 bits cost ~2 dB here, ~1 dB where X clips mildly (the cases above), none where it
  // does not.
  const bool clippedWeights = c.weightClip < 1.f;
  EXPECT_GE(snr, clippedWeights ? 41.5 : 44.0) << "weightError SNR " << snr << " dB, r8 with exact X " << snrR8 << " dB";
  EXPECT_GE(snr, snrR8 - 3.0) << "weightError SNR " << snr << " dB, r8 with exact X " << snrR8 << " dB";

  // full and actOnly stay what they are (ex plays no part in them).
  std::vector<double> absSum;
  const std::vector<double> refFull = refConv(p, fqX(p), fqW(p), c.bias, &absSum);
  for (size_t i = 0; i < refFull.size(); ++i)
    ASSERT_LE(std::fabs(o.full.data<float>()[i] - refFull[i]), 1e-5 * (std::fabs(refFull[i]) + absSum[i])) << "full at " << i;
  // weightError alone (no [Wq; r8] GEMM requested for actOnly) gives the same bits.
  Tensor werr1;
  ASSERT_TRUE(qconv(p.X, p.sx, w, c.bias ? p.B.data<float>() : nullptr, p.g, c.threads, {nullptr, nullptr, &werr1}).isOk());
  EXPECT_TRUE(sameBits(werr1, o.werr));
}

TEST(QConv, HeavyClipWeightErrorGeneric) {
  uint32_t seed = 900;
  for (const Case& c : heavyClipCases()) checkHeavyClip(c, seed++, true);
}

TEST(QConv, HeavyClipWeightErrorSimd) {
  if (!cpuHasSimdGemm()) GTEST_SKIP() << "CPU without AVX2 or AVX-512 VNNI";
  uint32_t seed = 900;
  for (const Case& c : heavyClipCases()) checkHeavyClip(c, seed++, false);
}

TEST(QConv, HeavyClipSimdEqualsGenericBitForBit) {
  if (!cpuHasSimdGemm()) GTEST_SKIP() << "CPU without AVX2 or AVX-512 VNNI";
  uint32_t seed = 950;
  for (const Case& c : heavyClipCases()) {
    SCOPED_TRACE(c.name);
    expectSimdEqualsGeneric(heavyClipProblem(c, seed++), c);
  }
}

// The full output is the FP32 Conv kernel run on fakeQuantize()d X and W, up to float rounding.
TEST(QConv, FullEqualsFp32ConvOfFakeQuantized) {
  Case c;
  c.name = "vs fp32";
  c.N = 2, c.C = 24, c.M = 13, c.in = {17, 20}, c.k = {3, 3}, c.strides = {1, 2}, c.pads = {1, 1, 1, 1};
  const Problem p = makeProblem(c, 7);
  const Tensor xq = fakeQuantize(p.X, {p.sx}, 1, QuantMode::Int8, kActQmin, kActQmax);
  const Tensor wq = fakeQuantize(p.W, p.sw, 0, QuantMode::Int8, kWeightQmin, kWeightQmax);

  Graph graph;
  Node node;
  node.name = "conv";
  node.opType = "Conv";
  auto ints = [&](const char* key, const std::vector<int64_t>& v) {
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = v;
    node.attributes[key] = a;
  };
  ints("strides", c.strides);
  ints("pads", c.pads);
  node.inputs = {graph.valueId("x"), graph.valueId("w"), graph.valueId("b")};
  node.outputs = {graph.valueId("y")};
  auto kernel = createConv(KernelInit{node, 17, graph});
  ASSERT_TRUE(kernel.isOk()) << kernel.status().message();
  const Tensor* inputs[3] = {&xq, &wq, &p.B};
  Tensor fp32[1];
  KernelContext ctx;
  ctx.inputs = inputs;
  ctx.outputs = fp32;
  ctx.threads = 2;
  ASSERT_TRUE(kernel.value()->run(ctx).isOk());

  auto w = prepareQConvWeights(p.W, p.sw);
  ASSERT_TRUE(w.isOk());
  Tensor full;
  ASSERT_TRUE(qconv(p.X, p.sx, *w.value(), p.B.data<float>(), p.g, 2, {&full, nullptr, nullptr}).isOk());
  ASSERT_EQ(shapeToString(full.shape()), shapeToString(fp32[0].shape()));
  std::vector<double> absSum;
  refConv(p, fqX(p), fqW(p), true, &absSum);
  for (int64_t i = 0; i < full.numel(); ++i)
    ASSERT_LE(std::fabs(full.data<float>()[i] - fp32[0].data<float>()[i]), 1e-5 * absSum[(size_t)i]) << "at " << i;
}

// X's integers are fakeQuantInt8's, also on and next to the rounding ties, where computing
// x * (1/sx) instead of x / sx would round differently: read back through a 1x1 identity Conv.
TEST(QConv, InputIntegersAreFakeQuantIntegersAtTies) {
  const int64_t C = 4;
  for (float sx : {0.0123f, 0.1f, 3.7e-3f, 1.f / 3.f}) {
    std::vector<float> v;
    for (int k = -131; k <= 131; ++k) {
      const float t = ((float)k + 0.5f) * sx;
      v.insert(v.end(), {t, std::nextafter(t, 0.f), std::nextafter(t, 1e9f), std::nextafter(std::nextafter(t, -1e9f), -1e9f),
                         (float)k * sx, (float)k * sx * 1.0000001f});
    }
    while (v.size() % C) v.push_back(0.f);
    const int64_t P = (int64_t)v.size() / C;
    Tensor X(DType::Float, {1, C, P});
    // Channel c holds the values c, c + C, ...: every value goes through every byte lane.
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < P; ++p) X.data<float>()[c * P + p] = v[(size_t)(p * C + c)];
    Tensor W = Tensor::zeros(DType::Float, {C, C, 1});
    for (int64_t c = 0; c < C; ++c) W.data<float>()[c * C + c] = 1.f;
    auto w = prepareQConvWeights(W, {1.f / 127.f});
    ASSERT_TRUE(w.isOk());
    WindowGeometry g;
    ASSERT_TRUE(resolveWindow(WindowAttrs(), {P}, {1}, false, g).isOk());
    for (bool generic : {true, false}) {
      GenericGuard guard(generic);
      Tensor full;
      ASSERT_TRUE(qconv(X, sx, *w.value(), nullptr, g, 1, {&full, nullptr, nullptr}).isOk());
      std::vector<float> fq((size_t)X.numel());
      fakeQuantInt8(X.data<float>(), fq.data(), X.numel(), sx, kActQmin, kActQmax);
      for (int64_t i = 0; i < X.numel(); ++i) {
        // full = q * 127 * sx * sw, in double then float: q comes back exactly.
        const double q = std::nearbyint((double)full.data<float>()[i] / (127.0 * (double)sx * (double)(1.f / 127.f)));
        ASSERT_EQ(q, std::nearbyint(fq[(size_t)i] / sx)) << "x = " << X.data<float>()[i] << ", sx = " << sx;
      }
    }
  }
}

TEST(QConv, WeightsAreFakeQuantIntegers) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.3f);
  Tensor W(DType::Float, {6, 5, 3, 3});
  for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = nd(rng);
  // Values on exact halves of the scale: round half to even.
  W.data<float>()[0] = 2.5f / 128.f;
  W.data<float>()[1] = -3.5f / 128.f;
  std::vector<float> sw = {1.f / 128.f, 0.003f, 0.004f, 0.002f, 0.005f, 0.0015f};  // some rows clip
  for (auto range : {std::pair<int, int>{kWeightQmin, kWeightQmax}, std::pair<int, int>{-128, 127}}) {
    auto w = prepareQConvWeights(W, sw, range.first, range.second);
    ASSERT_TRUE(w.isOk()) << w.status().message();
    const int64_t K = 45;
    ASSERT_EQ(w.value()->depth(), K);
    bool clipped = false;
    for (int64_t m = 0; m < 6; ++m) {
      std::vector<float> fq((size_t)K);
      fakeQuantInt8(W.data<float>() + m * K, fq.data(), K, sw[(size_t)m], range.first, range.second);
      float maxR = 0;
      for (int64_t k = 0; k < K; ++k) {
        const int q = (int)std::nearbyint(fq[(size_t)k] / sw[(size_t)m]);
        ASSERT_EQ((int)w.value()->quantized()[(size_t)(m * K + k)], q) << "row " << m << " k " << k;
        const float r = W.data<float>()[m * K + k] / sw[(size_t)m] - (float)q;
        maxR = std::max(maxR, std::fabs(r));
      }
      const float rs = w.value()->residualScales()[(size_t)m];
      if (maxR <= 0.5f) {
        EXPECT_EQ(rs, QConvWeights::kResidualScale);
      } else {
        clipped = true;
        EXPECT_LT(rs, QConvWeights::kResidualScale);
      }
      // r8 / rs represents r to half a step.
      for (int64_t k = 0; k < K; ++k) {
        const float r = W.data<float>()[m * K + k] / sw[(size_t)m] - (float)w.value()->quantized()[(size_t)(m * K + k)];
        EXPECT_LE(std::fabs(r - w.value()->residual()[(size_t)(m * K + k)] / rs), 0.5f / rs + 1e-6f);
      }
    }
    EXPECT_TRUE(clipped);
  }
  EXPECT_EQ((int)prepareQConvWeights(W, sw).value()->quantized()[0], 2);   // 2.5 -> 2
  EXPECT_EQ((int)prepareQConvWeights(W, sw).value()->quantized()[1], -4);  // -3.5 -> -4
}

TEST(QConv, InvalidInputsAreErrors) {
  Tensor W = Tensor::zeros(DType::Float, {2, 3, 3, 3});
  EXPECT_FALSE(prepareQConvWeights(W, {0.1f, 0.1f, 0.1f}).isOk());    // sw size
  EXPECT_FALSE(prepareQConvWeights(W, {0.1f, 0.f}).isOk());           // sw <= 0
  EXPECT_FALSE(prepareQConvWeights(W, {0.1f, -1.f}).isOk());
  EXPECT_FALSE(prepareQConvWeights(W, {0.1f, NAN}).isOk());
  EXPECT_FALSE(prepareQConvWeights(W, {0.1f, INFINITY}).isOk());
  EXPECT_FALSE(prepareQConvWeights(W, {0.1f, 0.1f}, 5, 3).isOk());    // range
  EXPECT_FALSE(prepareQConvWeights(W, {0.1f, 0.1f}, -129, 127).isOk());
  EXPECT_FALSE(prepareQConvWeights(Tensor::zeros(DType::Int32, {2, 3, 3, 3}), {0.1f, 0.1f}).isOk());
  EXPECT_FALSE(prepareQConvWeights(Tensor::zeros(DType::Float, {2, 27}), {0.1f, 0.1f}).isOk());
  EXPECT_FALSE(prepareQConvWeights(Tensor::zeros(DType::Float, {2, 0, 3}), {0.1f, 0.1f}).isOk());
  auto big = prepareQConvWeights(Tensor::zeros(DType::Float, {1, 65537, 1}), {0.1f});
  ASSERT_FALSE(big.isOk());
  EXPECT_EQ(big.status().code(), StatusCode::Unsupported);
  EXPECT_TRUE(prepareQConvWeights(Tensor::zeros(DType::Float, {1, 65536, 1}), {0.1f}).isOk());
  Tensor Wnan = Tensor::zeros(DType::Float, {2, 3, 3, 3});
  Wnan.data<float>()[5] = NAN;
  EXPECT_FALSE(prepareQConvWeights(Wnan, {0.1f, 0.1f}).isOk());
  EXPECT_TRUE(prepareQConvWeights(W, {0.1f}).isOk());  // one scale for all rows
  Tensor Wbig = Tensor::zeros(DType::Float, {2, 3, 3, 3});
  Wbig.data<float>()[0] = 1e30f;
  EXPECT_FALSE(prepareQConvWeights(Wbig, {1e-30f, 0.1f}).isOk());  // W / sw overflows

  // qconv: scale, channels, geometry, non-finite X.
  auto w = prepareQConvWeights(W, {0.1f, 0.2f});
  ASSERT_TRUE(w.isOk());
  Tensor X = Tensor::zeros(DType::Float, {1, 3, 5, 5});
  WindowAttrs a;
  WindowGeometry g;
  ASSERT_TRUE(resolveWindow(a, {5, 5}, {3, 3}, false, g).isOk());
  Tensor y, y2, y3;
  EXPECT_TRUE(qconv(X, 0.1f, *w.value(), nullptr, g, 1, {&y, &y2, &y3}).isOk());
  EXPECT_FALSE(qconv(X, 0.f, *w.value(), nullptr, g, 1, {&y, nullptr, nullptr}).isOk());
  EXPECT_FALSE(qconv(X, NAN, *w.value(), nullptr, g, 1, {&y, nullptr, nullptr}).isOk());
  EXPECT_FALSE(qconv(Tensor::zeros(DType::Float, {1, 4, 5, 5}), 0.1f, *w.value(), nullptr, g, 1, {&y, nullptr, nullptr}).isOk());
  EXPECT_FALSE(qconv(Tensor::zeros(DType::Float, {1, 3, 6, 5}), 0.1f, *w.value(), nullptr, g, 1, {&y, nullptr, nullptr}).isOk());
  EXPECT_FALSE(qconv(Tensor::zeros(DType::Float, {1, 3, 25}), 0.1f, *w.value(), nullptr, g, 1, {&y, nullptr, nullptr}).isOk());
  EXPECT_FALSE(qconv(Tensor::zeros(DType::Int32, {1, 3, 5, 5}), 0.1f, *w.value(), nullptr, g, 1, {&y, nullptr, nullptr}).isOk());
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    Tensor Xb = Tensor::zeros(DType::Float, {1, 3, 5, 5});
    Xb.data<float>()[37] = bad;
    EXPECT_FALSE(qconv(Xb, 0.1f, *w.value(), nullptr, g, 1, {&y, nullptr, nullptr}).isOk());
    EXPECT_FALSE(qconv(Xb, 0.1f, *w.value(), nullptr, g, 1, {nullptr, nullptr, &y}).isOk());
  }
}

TEST(QConv, ZeroInputAndEmptyBatch) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Tensor W(DType::Float, {4, 3, 3, 3});
  for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = u(rng);
  auto w = prepareQConvWeights(W, {0.01f, 0.01f, 0.01f, 0.01f});
  ASSERT_TRUE(w.isOk());
  WindowAttrs a;
  a.pads = {1, 1, 1, 1};
  WindowGeometry g;
  ASSERT_TRUE(resolveWindow(a, {6, 7}, {3, 3}, false, g).isOk());
  const float bias[4] = {1.f, -2.f, 0.5f, 0.f};
  Tensor full, act, werr;
  ASSERT_TRUE(qconv(Tensor::zeros(DType::Float, {1, 3, 6, 7}), 0.1f, *w.value(), bias, g, 2, {&full, &act, &werr}).isOk());
  ASSERT_EQ(shapeToString(full.shape()), "[1,4,6,7]");
  for (int64_t i = 0; i < full.numel(); ++i) {
    EXPECT_EQ(full.data<float>()[i], bias[i / 42]);
    EXPECT_EQ(act.data<float>()[i], bias[i / 42]);
    EXPECT_EQ(werr.data<float>()[i], 0.f);
  }
  ASSERT_TRUE(qconv(Tensor::zeros(DType::Float, {0, 3, 6, 7}), 0.1f, *w.value(), bias, g, 2, {&full, &act, &werr}).isOk());
  EXPECT_EQ(shapeToString(full.shape()), "[0,4,6,7]");
}

TEST(QConv, ErrorSumsInTheEpilogueEqualSumsOverTheOutputs) {
  // The sums accumulated block by block against a reference equal ErrorAccumulator over the
  // stored outputs (to summation order, and to the float forming of outputs only summed) and do
  // not depend on the thread count. An all-zero X: weight error 0 against the reference.
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Problem p = makeProblem(c, 41);
    auto w = prepareQConvWeights(p.W, p.sw);
    ASSERT_TRUE(w.isOk());
    const Outs o = runQconv(p, *w.value(), c.bias, 1);
    // A reference near the outputs (as the float Conv is): full plus a small deterministic offset.
    Tensor ref(DType::Float, o.full.shape());
    for (int64_t i = 0; i < ref.numel(); ++i) ref.data<float>()[i] = o.full.data<float>()[i] * 1.01f + 0.001f * (float)(i % 7);
    float maxRef = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) maxRef = std::max(maxRef, std::fabs(ref.data<float>()[i]));
    ErrorAccumulator want[3];
    want[0].add(ref, o.full);
    want[1].add(ref, o.act);
    want[2].addError(ref, o.werr);
    // Sums only on 1 and on 2 threads, then stored and summed.
    ErrorAccumulator got[3][3];
    Tensor stored[3];
    for (int v = 0; v < 3; ++v) {
      QConvOutputs out;
      if (v == 2) out = QConvOutputs{&stored[0], &stored[1], &stored[2]};
      out.reference = ref.data<float>();
      out.fullSums = &got[v][0];
      out.actSums = &got[v][1];
      out.weightSums = &got[v][2];
      ASSERT_TRUE(qconv(p.X, p.sx, *w.value(), c.bias ? p.B.data<float>() : nullptr, p.g, v == 1 ? 2 : 1, out).isOk());
    }
    EXPECT_TRUE(sameBits(stored[0], o.full) && sameBits(stored[1], o.act) && sameBits(stored[2], o.werr));
    for (int k = 0; k < 3; ++k) {
      const ErrorMetrics a = want[k].metrics(), b = got[0][k].metrics(), b2 = got[1][k].metrics(), b3 = got[2][k].metrics();
      EXPECT_EQ(b.count, ref.numel()) << k;
      // Outputs only summed are formed in float (within ~2 ulp of the stored ones).
      EXPECT_NEAR(b.snrDb, a.snrDb, 1e-3) << k;
      EXPECT_NEAR(1 - b.cosine, 1 - a.cosine, 1e-4 * (1 - a.cosine) + 1e-12) << k;
      EXPECT_NEAR(b.maxAbs, a.maxAbs, 4 * FLT_EPSILON * maxRef) << k;
      EXPECT_NEAR(b3.snrDb, a.snrDb, 1e-4) << k;  // stored: the very outputs, summed in another order
      EXPECT_EQ(b3.maxAbs, a.maxAbs) << k;
      EXPECT_EQ(b.snrDb, b2.snrDb) << k;  // threads change nothing
      EXPECT_EQ(b.cosine, b2.cosine) << k;
      EXPECT_EQ(b.mse, b2.mse) << k;
    }
  }
  Tensor W(DType::Float, {2, 3, 1, 1});
  for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = 0.1f * (float)(i + 1);
  auto w = prepareQConvWeights(W, {0.01f, 0.01f});
  ASSERT_TRUE(w.isOk());
  WindowGeometry g;
  ASSERT_TRUE(resolveWindow(WindowAttrs{}, {4, 5}, {1, 1}, false, g).isOk());
  Tensor ref(DType::Float, {1, 2, 4, 5});
  for (int64_t i = 0; i < ref.numel(); ++i) ref.data<float>()[i] = 1.f + (float)i;
  ErrorAccumulator weight;
  QConvOutputs out;
  out.reference = ref.data<float>();
  out.weightSums = &weight;
  ASSERT_TRUE(qconv(Tensor::zeros(DType::Float, {1, 3, 4, 5}), 0.1f, *w.value(), nullptr, g, 1, out).isOk());
  EXPECT_EQ(weight.metrics().count, 40);
  EXPECT_TRUE(std::isinf(weight.metrics().snrDb));
  // Sums without a reference are refused, not ignored.
  ErrorAccumulator lone;
  QConvOutputs bad;
  bad.fullSums = &lone;
  EXPECT_FALSE(qconv(Tensor::zeros(DType::Float, {1, 3, 4, 5}), 0.1f, *w.value(), nullptr, g, 1, bad).isOk());
}

}  // namespace
}  // namespace qs
