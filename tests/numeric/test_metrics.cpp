#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/numeric/metrics.h"

using namespace qs;

TEST(CoreMetrics, SnrOfKnownNoisePowerWithinTenthOfDb) {
  // Signal of unit power plus Gaussian noise of power 1e-3: SNR should be 30 dB.
  std::mt19937 rng(7);
  std::normal_distribution<float> sig(0.f, 1.f), noise(0.f, std::sqrt(1e-3f));
  const int n = 1 << 20;
  std::vector<float> y(n), q(n);
  for (int i = 0; i < n; ++i) {
    y[i] = sig(rng);
    q[i] = y[i] + noise(rng);
  }
  ErrorAccumulator acc;
  acc.add(y.data(), q.data(), n / 2);
  acc.add(y.data() + n / 2, q.data() + n / 2, n / 2);  // sums over batches
  EXPECT_NEAR(acc.metrics().snrDb, 30.0, 0.1);
  EXPECT_NEAR(acc.metrics().mse, 1e-3, 2e-5);
  EXPECT_GT(acc.metrics().cosine, 0.999);
}

TEST(CoreMetrics, IdenticalIsInfiniteAndZeroSignalIsMinusInfinite) {
  std::vector<float> y = {1, 2, 3};
  ErrorAccumulator a;
  a.add(y.data(), y.data(), 3);
  EXPECT_TRUE(std::isinf(a.metrics().snrDb) && a.metrics().snrDb > 0);
  EXPECT_EQ(a.metrics().maxAbs, 0.0);
  std::vector<float> z = {0, 0, 0}, w = {0, 1, 0};
  ErrorAccumulator b;
  b.add(z.data(), w.data(), 3);
  EXPECT_TRUE(std::isinf(b.metrics().snrDb) && b.metrics().snrDb < 0);
  EXPECT_EQ(b.metrics().maxAbs, 1.0);
}

TEST(CoreMetrics, CosineStaysAccurateWhenCandidateIsNearlyTheReference) {
  // 1 - cosine at 40 to 100 dB SNR against long double: the float32 block sums (metrics.h) feed
  // the cosine through sum d (y + y'), never through two separately rounded near-equal sums.
  std::mt19937 rng(11);
  std::normal_distribution<float> sig(0.f, 1.f), unit(0.f, 1.f);
  const int n = 100003;  // a tail past the vector blocks too
  for (double db : {40.0, 60.0, 80.0, 100.0}) {
    const float sigma = (float)std::pow(10.0, -db / 20.0);
    std::vector<float> y(n), q(n);
    for (int i = 0; i < n; ++i) {
      y[i] = 3.f * sig(rng) + 1.f;
      q[i] = y[i] + sigma * 3.f * unit(rng);
    }
    long double s = 0, c = 0, d = 0, e = 0;
    for (int i = 0; i < n; ++i) {
      s += (long double)y[i] * y[i];
      c += (long double)q[i] * q[i];
      d += (long double)y[i] * q[i];
      e += ((long double)y[i] - q[i]) * ((long double)y[i] - q[i]);
    }
    const long double cosRef = d / std::sqrt(s * c);
    ErrorAccumulator acc;
    acc.add(y.data(), q.data(), n);
    const ErrorMetrics m = acc.metrics();
    EXPECT_NEAR(m.snrDb, (double)(10 * std::log10(s / e)), 1e-4) << db;
    // What the figure means is 1 - cosine: within 1e-3 of it.
    EXPECT_NEAR(1.0 - m.cosine, (double)(1 - cosRef), 1e-3 * (double)(1 - cosRef) + 1e-15) << db;
  }
}

TEST(CoreMetrics, HugeValuesAndNaNAreSummedInDouble) {
  // Squares of 1e20 overflow float32: that block is summed again in double, so the figures stay
  // finite and exact to double precision.
  std::vector<float> y(1000, 1e20f), q(1000, 1e20f);
  for (int i = 0; i < 1000; ++i) q[i] = y[i] * (1.f + (i % 3 == 0 ? 1e-3f : 0.f));
  ErrorAccumulator acc;
  acc.add(y.data(), q.data(), 1000);
  const ErrorMetrics m = acc.metrics();
  double s = 0, e = 0;
  for (int i = 0; i < 1000; ++i) {
    s += (double)y[i] * y[i];
    e += ((double)y[i] - q[i]) * ((double)y[i] - q[i]);
  }
  EXPECT_NEAR(acc.signalPower(), s, 1e-6 * s);
  EXPECT_NEAR(acc.noisePower(), e, 1e-6 * e);
  EXPECT_TRUE(std::isfinite(m.snrDb));
  EXPECT_NEAR(m.snrDb, 10 * std::log10(s / e), 1e-4);
  // A NaN in the candidate makes the sums NaN (the figure is then shown as not a number), and
  // the maximum skips it.
  q[500] = NAN;
  ErrorAccumulator nan;
  nan.add(y.data(), q.data(), 1000);
  EXPECT_TRUE(std::isnan(nan.metrics().snrDb));
  float maxDiff = 0;
  for (int i = 0; i < 1000; ++i)
    if (i != 500) maxDiff = std::max(maxDiff, std::fabs(y[i] - q[i]));
  EXPECT_GT(maxDiff, 0.f);
  EXPECT_EQ(nan.metrics().maxAbs, (double)maxDiff);
}

TEST(CoreMetrics, AffineSumsEqualTheSumsOfTheMappedTensors) {
  // The sums of a y + b against a q + b from those of y against q, against summing the mapped
  // float tensors: equal up to the float rounding of a y + b.
  std::mt19937 rng(13);
  std::normal_distribution<float> sig(0.f, 1.f), noise(0.f, 0.05f);
  const int n = 50021;
  std::vector<float> y(n), q(n);
  for (int i = 0; i < n; ++i) {
    y[i] = 2.f * sig(rng) + 0.5f;
    q[i] = y[i] + noise(rng);
  }
  ErrorAccumulator base;
  base.add(y.data(), q.data(), n);
  for (auto [a, b] : std::vector<std::pair<double, double>>{{2, 0}, {1, 3}, {-0.5, 1}, {1.0 / 6, 0}, {1, -40}}) {
    std::vector<float> ya(n), qa(n);
    for (int i = 0; i < n; ++i) {
      ya[i] = (float)(a * y[i] + b);
      qa[i] = (float)(a * q[i] + b);
    }
    ErrorAccumulator real;
    real.add(ya.data(), qa.data(), n);
    const ErrorMetrics want = real.metrics(), got = base.affine(a, b).metrics();
    EXPECT_EQ(got.count, want.count);
    EXPECT_NEAR(got.snrDb, want.snrDb, 2e-3) << a << " " << b;  // the real one has the rounding of a y + b in it
    EXPECT_NEAR(1 - got.cosine, 1 - want.cosine, 1e-3 * (1 - want.cosine)) << a << " " << b;
    EXPECT_NEAR(got.mse, want.mse, 1e-3 * want.mse) << a << " " << b;
    EXPECT_NEAR(got.maxAbs, want.maxAbs, 1e-5 * want.maxAbs) << a << " " << b;
    // Chained maps compose: (a, b) then (2, 1) is (2a, 2b + 1).
    const ErrorMetrics twice = base.affine(a, b).affine(2, 1).metrics(), once = base.affine(2 * a, 2 * b + 1).metrics();
    EXPECT_NEAR(twice.snrDb, once.snrDb, 1e-9) << a << " " << b;
    EXPECT_NEAR(twice.mse, once.mse, 1e-12 * once.mse) << a << " " << b;
  }
}
