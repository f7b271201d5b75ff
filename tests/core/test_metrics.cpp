#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/analysis/metrics.h"

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
