// The AVX2 GEMM of the integer Conv (core/kernels/qconv_gemm_avx2.cpp), forced on any AVX2 CPU
// (it is the automatic choice only without AVX-512 VNNI): the same bits as the portable loops on
// seeded random shapes, and exact int32 sums at the extremes (x = -128 and 127 against weights of
// -128, -127 and 127, reductions up to the longest qconv accepts), where vpmaddubsw would saturate.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/kernels/conv.h"
#include "core/kernels/qconv.h"
#include "core/numeric/fake_quant.h"

namespace qs {
namespace {

// Forces one GEMM while in scope; the automatic choice afterwards however the test ends.
struct KernelGuard {
  explicit KernelGuard(const char* name) : ok(setQconvKernel(name)) {}
  ~KernelGuard() { setQconvKernel("auto"); }
  bool ok;
};

bool cpuHasAvx2() {
  KernelGuard g("avx2");
  return g.ok;
}

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.byteSize()) == 0;
}

struct Problem {
  Tensor X, W, B, ref;
  float sx = 0;
  std::vector<float> sw;
  WindowGeometry g;
  int threads = 1;
};

// A random Conv: 1-D or 2-D, 1 or 2 images, kernels 1 to 5, strides 1 to 3, dilations 1 to 2,
// pads 0 to 2; channel counts that are and are not multiples of 4, outputs that are and are not
// multiples of the 8 x 32 tile.
Problem randomProblem(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Problem p;
  const int nd = pick(1, 2);
  const int64_t N = pick(1, 2), C = pick(1, 37), M = pick(1, 29);
  WindowAttrs a;
  Shape xs = {N, C}, ws = {M, C};
  std::vector<int64_t> inSp, kSp;
  for (int i = 0; i < nd; ++i) {
    const int64_t k = pick(1, 5), d = k > 1 ? pick(1, 2) : 1, s = pick(1, 3), pb = pick(0, 2), pe = pick(0, 2);
    const int64_t in = std::max<int64_t>((k - 1) * d + 1 - pb - pe, 1) + pick(0, nd == 1 ? 60 : 20);
    a.strides.push_back(s);
    a.dilations.push_back(d);
    a.pads.insert(a.pads.begin() + i, pb);
    a.pads.push_back(pe);
    inSp.push_back(in);
    kSp.push_back(k);
    xs.push_back(in);
    ws.push_back(k);
  }
  p.X = Tensor(DType::Float, xs);
  p.W = Tensor(DType::Float, ws);
  p.B = Tensor(DType::Float, {M});
  float maxX = 0;
  for (int64_t i = 0; i < p.X.numel(); ++i) {
    const float v = u(rng) * (i % 13 == 5 ? 3.f : 1.f);  // a tail that clips
    p.X.data<float>()[i] = v;
    maxX = std::max(maxX, std::fabs(v));
  }
  for (int64_t i = 0; i < p.W.numel(); ++i) p.W.data<float>()[i] = 0.5f * u(rng);
  for (int64_t i = 0; i < M; ++i) p.B.data<float>()[i] = u(rng);
  p.sx = 0.7f * maxX / 127.f;
  const int64_t K = p.W.numel() / M;
  for (int64_t m = 0; m < M; ++m) {
    float mx = 0;
    for (int64_t k = 0; k < K; ++k) mx = std::max(mx, std::fabs(p.W.data<float>()[m * K + k]));
    p.sw.push_back((m % 3 == 2 ? 0.7f : 1.f) * mx / 127.f);  // every third row clips
  }
  EXPECT_TRUE(resolveWindow(a, inSp, kSp, false, p.g).isOk());
  p.threads = pick(1, 2);
  Shape ys = {N, M};
  for (int64_t v : p.g.outShape()) ys.push_back(v);
  p.ref = Tensor(DType::Float, ys);
  for (int64_t i = 0; i < p.ref.numel(); ++i) p.ref.data<float>()[i] = u(rng);
  return p;
}

struct QRun {
  Tensor full, act, werr;
  ErrorAccumulator sums[3];
};

// Every output, stored and summed against p.ref.
QRun runAll(const Problem& p, const QConvWeights& w) {
  QRun r;
  QConvOutputs out{&r.full, &r.act, &r.werr};
  out.reference = p.ref.data<float>();
  out.fullSums = &r.sums[0];
  out.actSums = &r.sums[1];
  out.weightSums = &r.sums[2];
  const Status st = qconv(p.X, p.sx, w, p.B.data<float>(), p.g, p.threads, out);
  EXPECT_TRUE(st.isOk()) << st.message();
  return r;
}

void expectSame(const QRun& a, const QRun& b, const std::string& what) {
  EXPECT_TRUE(sameBits(a.full, b.full)) << what << ": full";
  EXPECT_TRUE(sameBits(a.act, b.act)) << what << ": actOnly";
  EXPECT_TRUE(sameBits(a.werr, b.werr)) << what << ": weightError";
  for (int k = 0; k < 3; ++k) {
    const ErrorMetrics x = a.sums[k].metrics(), y = b.sums[k].metrics();
    EXPECT_EQ(x.count, y.count) << what << " sums " << k;
    EXPECT_EQ(x.mse, y.mse) << what << " sums " << k;
    EXPECT_EQ(x.maxAbs, y.maxAbs) << what << " sums " << k;
    if (!std::isinf(x.snrDb) || !std::isinf(y.snrDb)) {
      EXPECT_EQ(x.snrDb, y.snrDb) << what << " sums " << k;
    }
  }
}

TEST(QConvAvx2, PacksWeightsAsInt16OnlyForAvx2) {
  if (!cpuHasAvx2()) GTEST_SKIP() << "CPU without AVX2";
  Tensor W(DType::Float, {9, 5, 3, 3});
  for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = 0.01f * (float)(i % 23 - 11);
  for (const char* kernel : {"avx2", "generic"}) {
    KernelGuard g(kernel);
    ASSERT_TRUE(g.ok);
    ASSERT_STREQ(qconvKernelName(), kernel);
    auto w = prepareQConvWeights(W, {0.001f});
    ASSERT_TRUE(w.isOk()) << w.status().message();
    const bool wide = std::string(kernel) == "avx2";
    for (const QConvWeights::Packed* p : {&w.value()->packedQ(), &w.value()->packedQR(), &w.value()->packedR()}) {
      EXPECT_EQ(p->wide(), wide) << kernel;
      EXPECT_EQ(p->data.empty(), wide) << kernel;  // one format, not both
      // 2 panels of 8 rows (9 rows), 2 channel groups x 9 taps, 4 values each.
      EXPECT_EQ(wide ? p->data16.size() : p->data.size(), (size_t)(p->panels * 18 * 8 * 4)) << kernel;
    }
    // The same values either way: panel 0, group 0, row 1 holds W[1, 0..3, 0, 0] / 0.001.
    const QConvWeights::Packed& q = w.value()->packedQ();
    for (int c = 0; c < 4; ++c) {
      const int v = wide ? q.panel16(0)[4 + c] : q.panel(0)[4 + c];
      EXPECT_EQ(v, (int)std::nearbyint(W.data<float>()[45 + c * 9] / 0.001f)) << kernel << " channel " << c;
    }
  }
  EXPECT_FALSE(setQconvKernel("avx3"));
  EXPECT_FALSE(setQconvKernel(""));
}

// Weights packed for AVX2 (int16) and run by it, against weights packed for and run by the
// portable loops (bytes), and the AVX2-packed weights run by the portable loops: the same bits
// in every output and the same error sums.
TEST(QConvAvx2, EqualsGenericBitForBitOnRandomShapes) {
  if (!cpuHasAvx2()) GTEST_SKIP() << "CPU without AVX2";
  int compared = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const Problem p = randomProblem(seed);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": X " + shapeToString(p.X.shape()) + ", W " + shapeToString(p.W.shape()));
    QRun avx2, generic, mixed;
    std::shared_ptr<const QConvWeights> wide;
    {
      KernelGuard g("avx2");
      auto w = prepareQConvWeights(p.W, p.sw);
      ASSERT_TRUE(w.isOk()) << w.status().message();
      wide = w.value();
      ASSERT_TRUE(wide->packedQR().wide());
      avx2 = runAll(p, *wide);
    }
    {
      KernelGuard g("generic");
      auto w = prepareQConvWeights(p.W, p.sw);
      ASSERT_TRUE(w.isOk()) << w.status().message();
      ASSERT_FALSE(w.value()->packedQR().wide());
      generic = runAll(p, *w.value());
      mixed = runAll(p, *wide);
    }
    expectSame(avx2, generic, "avx2 vs generic");
    expectSame(mixed, generic, "avx2-packed weights in the generic loops vs generic");
    compared += (int)avx2.full.numel();
  }
  EXPECT_GT(compared, 10000);
}

// x's integers q = -128 and 127 (unsigned words 0 and 255) against weights of -128 (the full
// int8 range), -127 and 127, over reductions up to 65536 (qconv's limit): pairs of such products
// would saturate vpmaddubsw's int16 sums; the AVX2 GEMM's must be exact. With sx = sw = 1 and no
// bias, full = float(sum of q * w) exactly, so the int32 sums are checked against int64 ones.
void checkExtremes(int64_t C, int64_t k, int64_t P, const std::vector<int>& xPattern, const std::vector<int>& wPattern) {
  SCOPED_TRACE("C " + std::to_string(C) + ", kernel " + std::to_string(k) + ", " + std::to_string(P) + " positions");
  const int64_t M = (int64_t)wPattern.size();
  Tensor X(DType::Float, {1, C, P});
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < P; ++i)
      X.data<float>()[c * P + i] = (float)xPattern[(size_t)((c * 7 + i) % (int64_t)xPattern.size())];
  Tensor W(DType::Float, {M, C, k});
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < C * k; ++j) {
      const int v = wPattern[(size_t)m];
      // Rows of one value, and rows whose sign alternates in runs (the pair sums of both kinds).
      W.data<float>()[m * C * k + j] = (float)(m % 2 == 0 || (j / 3) % 2 == 0 ? v : -v == 128 ? 127 : -v);
    }
  WindowGeometry g;
  ASSERT_TRUE(resolveWindow(WindowAttrs(), {P}, {k}, false, g).isOk());
  const int64_t OW = g.outShape()[0];
  std::vector<int64_t> want((size_t)(M * OW), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t o = 0; o < OW; ++o)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < k; ++t) {
          const float x = X.data<float>()[c * P + o + t];
          const int64_t q = (int64_t)std::min(127.f, std::max(-128.f, x));
          want[(size_t)(m * OW + o)] += q * (int64_t)W.data<float>()[(m * C + c) * k + t];
        }
  Tensor out[2];
  for (int v = 0; v < 2; ++v) {
    KernelGuard guard(v == 0 ? "avx2" : "generic");
    auto w = prepareQConvWeights(W, {1.f}, -128, 127);
    ASSERT_TRUE(w.isOk()) << w.status().message();
    ASSERT_TRUE(qconv(X, 1.f, *w.value(), nullptr, g, 2, {&out[v], nullptr, nullptr}).isOk());
  }
  EXPECT_TRUE(sameBits(out[0], out[1]));
  int64_t largest = 0;
  for (int64_t i = 0; i < M * OW; ++i) {
    largest = std::max(largest, std::abs(want[(size_t)i]));
    ASSERT_EQ(out[0].data<float>()[i], (float)(double)want[(size_t)i]) << "row " << i / OW << ", column " << i % OW;
  }
  std::printf("[ qconv avx2 ] C %lld x k %lld: largest |sum| %lld (2^31 = 2147483648)\n", (long long)C, (long long)k,
              (long long)largest);
}

TEST(QConvAvx2, ExactSumsAtTheExtremes) {
  if (!cpuHasAvx2()) GTEST_SKIP() << "CPU without AVX2";
  // Values beyond the clip too: 300 and -300 quantize to 127 and -128.
  const std::vector<int> xs = {-128, 127, -128, -128, 127, 300, -300, 0, 1, -1};
  const std::vector<int> ws = {-128, 127, -127, 127, -128, 1, 0, -128, 127};
  checkExtremes(16, 3, 70, xs, ws);
  checkExtremes(1001, 5, 40, xs, ws);
  // The longest reduction qconv accepts, all at one extreme: |sum| = 65536 * 128 * 128 = 2^30
  // and 65536 * 127 * 128; and in the words' unsigned form 65536 * 255 * 128 < 2^31.
  checkExtremes(65536, 1, 33, {-128}, {-128, 127, -127});
  checkExtremes(65536, 1, 9, {127}, {-128, 127});
}

}  // namespace
}  // namespace qs
