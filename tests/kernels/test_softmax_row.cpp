// softmaxRowFloat (the row Softmax over the last axis, AVX2 or AVX-512) against a double-precision
// reference: every length from 1 to 70 (the masked tail of each), attention's 49 and 128, a long
// row, masked entries (-inf, -1e9), large and tiny logits, and NaN propagation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/kernels/softmax.h"

using namespace qs;

namespace {

std::vector<double> reference(const std::vector<float>& x) {
  double m = -INFINITY;
  for (float v : x) m = std::max(m, (double)v);
  std::vector<double> y(x.size());
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += (y[i] = std::exp((double)x[i] - m));
  for (double& v : y) v /= s;
  return y;
}

void expectClose(const std::vector<float>& x, const char* what) {
  // Guard lanes past the row: the masked tail must not write them.
  std::vector<float> y(x.size() + 8, 123.f);
  softmaxRowFloat(x.data(), y.data(), (int64_t)x.size());
  const auto want = reference(x);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(y[i], want[i], 2e-6 * want[i] + 1e-30) << what << " L=" << x.size() << " i=" << i;
  for (size_t i = x.size(); i < y.size(); ++i) ASSERT_EQ(y[i], 123.f) << what << " wrote past the row";
}

}  // namespace

TEST(KernelsSoftmaxRow, MatchesDoubleReferenceOverLengthsAndRanges) {
  std::mt19937 rng(3);
  for (int64_t L = 1; L <= 70; ++L) {
    for (float scale : {1.f, 10.f, 40.f}) {
      std::uniform_real_distribution<float> u(-scale, scale);
      std::vector<float> x((size_t)L);
      for (float& v : x) v = u(rng) + 1000.f * (scale == 40.f);  // large logits: only differences matter
      expectClose(x, "random");
    }
  }
  std::normal_distribution<float> g(0.f, 3.f);
  for (int64_t L : {128, 1000, 4099}) {
    std::vector<float> x((size_t)L);
    for (float& v : x) v = g(rng);
    expectClose(x, "long");
  }
}

TEST(KernelsSoftmaxRow, MaskedEntriesAreExactlyZero) {
  // A causal mask row: -inf (Where) or -1e9 (Add) past the diagonal, and logits 100 below the max.
  for (float masked : {-std::numeric_limits<float>::infinity(), -1e9f}) {
    std::vector<float> x(49);
    for (size_t i = 0; i < x.size(); ++i) x[i] = i < 20 ? 0.1f * (float)i : masked;
    x[3] = -100.f;
    std::vector<float> y(x.size());
    softmaxRowFloat(x.data(), y.data(), (int64_t)x.size());
    for (size_t i = 20; i < x.size(); ++i) EXPECT_EQ(y[i], 0.f) << i;
    EXPECT_EQ(y[3], 0.f);
    double sum = 0;
    for (float v : y) sum += v;
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(KernelsSoftmaxRow, NaNPropagates) {
  std::vector<float> x(13, 0.5f);
  x[9] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y(x.size());
  softmaxRowFloat(x.data(), y.data(), (int64_t)x.size());
  EXPECT_TRUE(std::isnan(y[9]));
}

TEST(KernelsSoftmaxRow, Avx512RowGivesTheAvx2Bits) {
  if (!softmaxAvx512Available()) GTEST_SKIP() << "no AVX-512F/DQ on this CPU";
  // Every tail length of both widths (1..70), attention's 128, rec's 6625 classes; masked and
  // NaN entries; large logits. Guard lanes past the row must stay untouched.
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 30.f);
  std::vector<int64_t> lengths;
  for (int64_t L = 1; L <= 70; ++L) lengths.push_back(L);
  for (int64_t L : {128, 1000, 4099, 6625}) lengths.push_back(L);
  for (int64_t L : lengths) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<float> x((size_t)L);
      for (float& v : x) v = g(rng) + (variant == 1 ? 1000.f : 0.f);
      if (variant == 2) {
        x[(size_t)(L / 2)] = -std::numeric_limits<float>::infinity();
        x[(size_t)(L - 1)] = L % 3 == 0 ? std::numeric_limits<float>::quiet_NaN() : -1e9f;
      }
      std::vector<float> a(x.size() + 16, 7.f), b(x.size() + 16, 7.f);
      softmaxRowFloatAvx2(x.data(), a.data(), L);
      softmaxRowFloatAvx512(x.data(), b.data(), L);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "L=" << L << " variant " << variant;
    }
  }
}
