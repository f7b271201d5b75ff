// Calibrators: max, entropy (TensorRT EntropyCalibration2 / ModelOpt), percentile and mse on
// hand-built data with known answers; histogram growth; zero tensors; per-channel amax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/quant/calibrator.h"

using namespace qs;

namespace {

// Deterministic uniform in [0, 1) from mt19937 (whose output is fully specified).
struct Rng {
  std::mt19937 gen;
  explicit Rng(uint32_t seed) : gen(seed) {}
  double uniform() { return (gen() >> 8) * (1.0 / 16777216.0); }
  double normal() {  // Box-Muller
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
  }
};

// numpy.percentile (linear interpolation) of |x|.
double exactPercentile(std::vector<float> x, double p) {
  for (float& v : x) v = std::fabs(v);
  std::sort(x.begin(), x.end());
  double pos = p / 100.0 * (double)(x.size() - 1);
  size_t lo = (size_t)std::floor(pos);
  size_t hi = std::min(lo + 1, x.size() - 1);
  return x[lo] + (pos - (double)lo) * ((double)x[hi] - (double)x[lo]);
}

// Straight port of ModelOpt's _compute_amax_entropy loop (digitize, spread, scipy entropy),
// returning the cut-off index; the reference the fast implementation is checked against.
int64_t naiveEntropyCutoff(std::vector<double> bins, int start, int nq, bool replaceBin0) {
  if (replaceBin0) bins[0] = bins[1];
  const int64_t nb = (int64_t)bins.size();
  std::vector<std::pair<int64_t, double>> divs;
  for (int64_t i = start; i <= nb; ++i) {
    std::vector<int64_t> grp((size_t)i);
    for (int64_t j = 0; j < i; ++j) grp[(size_t)j] = bins[(size_t)j] == 0 ? -1 : (int64_t)std::floor((double)j * nq / (double)i);
    std::vector<double> gsum((size_t)nq, 0.0), gcnt((size_t)nq, 0.0);
    for (int64_t j = 0; j < i; ++j)
      if (grp[(size_t)j] >= 0) gsum[(size_t)grp[(size_t)j]] += bins[(size_t)j], gcnt[(size_t)grp[(size_t)j]] += 1;
    std::vector<double> q((size_t)i, 0.0), p(bins.begin(), bins.begin() + i);
    for (int64_t j = 0; j < i; ++j)
      if (grp[(size_t)j] >= 0) q[(size_t)j] = gsum[(size_t)grp[(size_t)j]] / gcnt[(size_t)grp[(size_t)j]];
    for (int64_t j = i; j < nb; ++j) p[(size_t)i - 1] += bins[(size_t)j];
    double sp = std::accumulate(p.begin(), p.end(), 0.0), sq = std::accumulate(q.begin(), q.end(), 0.0);
    double kl = 0.0;
    if (sq == 0) kl = std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < i && std::isfinite(kl); ++j) {
      double pj = p[(size_t)j] / sp, qj = q[(size_t)j] / sq;
      if (pj > 0) kl = qj > 0 ? kl + pj * std::log(pj / qj) : std::numeric_limits<double>::infinity();
    }
    divs.push_back({i, kl});
  }
  int64_t best = -1;
  double bestKl = std::numeric_limits<double>::infinity();
  for (auto [i, kl] : divs) {
    if (std::isfinite(kl) && kl <= bestKl + 1e-12) best = i, bestKl = std::min(bestKl, kl);
  }
  return best;
}

// Adds `count` copies of `value` to `stats`.
void addRepeated(TensorStats& stats, float value, int count) {
  std::vector<float> v((size_t)count, value);
  stats.add(v.data(), (int64_t)v.size());
}

Tensor floatTensor(const std::vector<float>& v, Shape shape) {
  Tensor t(DType::Float, std::move(shape));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

}  // namespace

// ------------------------------------------------------------------------------------ max

TEST(CalMax, KnownDataOverBatches) {
  TensorStats s;
  std::vector<float> a = {1.f, -3.5f, 2.f}, b = {0.5f, -7.25f}, c = {};
  s.add(a.data(), 3);
  s.add(b.data(), 2);
  s.add(c.data(), 0);
  EXPECT_EQ(s.count(), 5);
  EXPECT_EQ(s.absMax(), 7.25);
  CalibrationSettings cs;
  EXPECT_EQ(s.amax(CalibMethod::Max, cs), 7.25f);
  EXPECT_EQ(calibratedAmax(s, cs), 7.25f);
  // The width is set by the first batch (max 3.5); the second appends bins of that width.
  EXPECT_DOUBLE_EQ(s.binWidth(), 3.5 / 2048);
  EXPECT_EQ(s.histogram().size(), 4243u);  // ceil(7.25 / (3.5 / 2048)) = ceil(4242.29)
}

TEST(CalMax, NonFiniteValuesAreSkippedAndCounted) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {1.f, nan, -inf, -2.f, inf};
  TensorStats s;
  s.add(v.data(), (int64_t)v.size());
  EXPECT_EQ(s.count(), 2);
  EXPECT_EQ(s.nonFiniteCount(), 3);
  EXPECT_EQ(s.absMax(), 2.0);
  EXPECT_DOUBLE_EQ(std::accumulate(s.histogram().begin(), s.histogram().end(), 0.0), 2.0);
  // The same through the large-batch path.
  std::vector<float> big(100000, 0.5f);
  big[10] = nan;
  big[20] = inf;
  big[99999] = -1.f;
  TensorStats l;
  l.add(big.data(), (int64_t)big.size());
  EXPECT_EQ(l.count(), 99998);
  EXPECT_EQ(l.nonFiniteCount(), 2);
  EXPECT_EQ(l.absMax(), 1.0);
  EXPECT_DOUBLE_EQ(std::accumulate(l.histogram().begin(), l.histogram().end(), 0.0), 99998.0);
}

TEST(CalMax, TensorOverloadRejectsNonFloat) {
  TensorStats s;
  EXPECT_TRUE(s.add(floatTensor({1.f, -4.f}, {2})).isOk());
  EXPECT_EQ(s.absMax(), 4.0);
  Status st = s.add(Tensor::zeros(DType::Int64, {3}));
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("int64"), std::string::npos) << st.message();
}

// ----------------------------------------------------------------------------- histogram

TEST(CalHistogram, GrowingMaxKeepsEarlierCountsInTheirBins) {
  TensorStats s;  // 2048 bins
  std::vector<float> b1 = {0.25f, -0.25f, 0.25f, 1.0f, 0.f};
  s.add(b1.data(), (int64_t)b1.size());
  ASSERT_EQ(s.histogram().size(), 2048u);
  EXPECT_EQ(s.binWidth(), 1.0 / 2048);
  EXPECT_EQ(s.histogram()[512], 3.0);   // 0.25 / (1/2048)
  EXPECT_EQ(s.histogram()[2047], 1.0);  // the max sits on the upper edge: last bin
  EXPECT_EQ(s.histogram()[0], 1.0);

  std::vector<float> b2 = {1.5f, -2.0f, 0.25f};
  s.add(b2.data(), (int64_t)b2.size());
  ASSERT_EQ(s.histogram().size(), 4096u);  // same width, edges widened to 2.0
  EXPECT_EQ(s.binWidth(), 1.0 / 2048);
  EXPECT_EQ(s.histogram()[512], 4.0);
  EXPECT_EQ(s.histogram()[2047], 1.0);  // 1.0 stays where the first batch put it
  EXPECT_EQ(s.histogram()[2048], 0.0);
  EXPECT_EQ(s.histogram()[3072], 1.0);  // 1.5
  EXPECT_EQ(s.histogram()[4095], 1.0);  // 2.0 on the new upper edge
  EXPECT_EQ(s.count(), 8);
  EXPECT_EQ(s.absMax(), 2.0);

  // A smaller batch later changes nothing in the layout.
  std::vector<float> b3 = {0.5f};
  s.add(b3.data(), 1);
  EXPECT_EQ(s.histogram().size(), 4096u);
  EXPECT_EQ(s.histogram()[1024], 1.0);
}

TEST(CalHistogram, ZerosBeforeTheFirstNonzeroBatchLandInBinZero) {
  TensorStats s(64);
  addRepeated(s, 0.f, 10);
  EXPECT_TRUE(s.histogram().empty());
  EXPECT_EQ(s.count(), 10);
  EXPECT_EQ(s.absMax(), 0.0);
  addRepeated(s, -3.f, 2);
  ASSERT_EQ(s.histogram().size(), 64u);
  EXPECT_EQ(s.histogram()[0], 10.0);
  EXPECT_EQ(s.histogram()[63], 2.0);
  addRepeated(s, 0.f, 5);
  EXPECT_EQ(s.histogram()[0], 15.0);
}

TEST(CalHistogram, TinyMaxStillBinsCorrectly) {
  std::vector<float> v(20000, 0.f);
  v[1] = 1e-40f;  // a denormal max: 1 / width does not fit a float
  TensorStats s;
  s.add(v.data(), (int64_t)v.size());
  ASSERT_EQ(s.histogram().size(), 2048u);
  EXPECT_EQ(s.histogram()[0], 19999.0);
  EXPECT_EQ(s.histogram()[2047], 1.0);
  EXPECT_GT(s.amax(CalibMethod::Entropy, CalibrationSettings{}), 0.f);
  EXPECT_EQ(scaleFromAmax(s.amax(CalibMethod::Max, CalibrationSettings{}), QuantMode::Int8), 1.f / 127.f);
}

TEST(CalHistogram, LargeBatchPathMatchesSmallBatches) {
  Rng rng(7);
  std::vector<float> v(200003);
  for (float& x : v) x = (float)(rng.normal() * 3.0);
  v[0] = 20.f;  // the max first, so both streams size the histogram the same way
  v[5] = 0.f;
  TensorStats whole, pieces;
  whole.add(v.data(), (int64_t)v.size());  // one vectorised pass
  for (size_t i = 0; i < v.size(); i += 1000) pieces.add(v.data() + i, (int64_t)std::min<size_t>(1000, v.size() - i));
  ASSERT_EQ(whole.histogram().size(), pieces.histogram().size());
  EXPECT_EQ(whole.histogram(), pieces.histogram());
  EXPECT_EQ(whole.count(), (int64_t)v.size());
  EXPECT_EQ(whole.absMax(), 20.0);
}

TEST(CalHistogram, GrowthPastTheCapMergesBinsInPowersOfTwo) {
  TensorStats s;  // 2048 bins, at most 8 * 2048 = 16384
  std::vector<float> b1 = {0.25f, 1.0f};
  s.add(b1.data(), 2);
  std::vector<float> b2 = {100.f};
  s.add(b2.data(), 1);
  // 100 needs 204800 bins of 1/2048; merging 16 at a time gives width 16/2048 and 12800 bins.
  EXPECT_EQ(s.binWidth(), 16.0 / 2048);
  EXPECT_EQ(s.histogram().size(), 12800u);
  EXPECT_EQ(s.histogram()[512 / 16], 1.0);
  EXPECT_EQ(s.histogram()[2047 / 16], 1.0);
  EXPECT_EQ(s.histogram()[12799], 1.0);
  EXPECT_EQ(s.absMax(), 100.0);
}

TEST(CalHistogram, MergeWithTheSameWidthEqualsOneStream) {
  std::vector<float> a = {0.1f, -1.0f, 0.7f}, b = {1.0f, 0.3f, -0.3f}, c = {2.5f, 0.f};
  TensorStats one, left, right;
  for (auto* v : {&a, &b, &c}) one.add(v->data(), (int64_t)v->size());
  left.add(a.data(), 3);
  right.add(b.data(), 3);
  right.add(c.data(), 2);
  left.merge(right);
  EXPECT_EQ(left.histogram(), one.histogram());
  EXPECT_EQ(left.count(), one.count());
  EXPECT_EQ(left.absMax(), one.absMax());
  TensorStats empty;
  empty.merge(one);
  EXPECT_EQ(empty.histogram(), one.histogram());
  EXPECT_EQ(empty.count(), one.count());
}

// ---------------------------------------------------------------------------- percentile

TEST(CalPercentile, KnownSortedSequence) {
  // |x| = 0.000, 0.001, ..., 9.999 with alternating signs.
  std::vector<float> v(10000);
  for (int k = 0; k < 10000; ++k) v[(size_t)k] = (float)(k / 1000.0) * (k % 2 ? -1.f : 1.f);
  TensorStats s;
  s.add(v.data(), (int64_t)v.size());
  CalibrationSettings cs;
  for (double p : {50.0, 90.0, 99.0, 99.9, 99.99}) {
    cs.percentile = p;
    EXPECT_NEAR(s.amax(CalibMethod::Percentile, cs), exactPercentile(v, p), s.binWidth()) << "p=" << p;
  }
  cs.percentile = 99.0;
  EXPECT_NEAR(s.amax(CalibMethod::Percentile, cs), 9.89901, s.binWidth());
  cs.percentile = 100.0;
  EXPECT_EQ(s.amax(CalibMethod::Percentile, cs), s.amax(CalibMethod::Max, cs));
}

TEST(CalPercentile, UniformRandom) {
  Rng rng(11);
  std::vector<float> v(100000);
  for (float& x : v) x = (float)(rng.uniform() * 2.0 - 1.0) * 4.f;
  TensorStats s;
  // Three batches: the histogram grows when a later batch has a larger max.
  s.add(v.data(), 30000);
  s.add(v.data() + 30000, 30000);
  s.add(v.data() + 60000, 40000);
  CalibrationSettings cs;
  for (double p : {10.0, 50.0, 99.0, 99.99}) {
    cs.percentile = p;
    EXPECT_NEAR(s.amax(CalibMethod::Percentile, cs), exactPercentile(v, p), s.binWidth()) << "p=" << p;
  }
  cs.percentile = 50.0;
  EXPECT_NEAR(s.amax(CalibMethod::Percentile, cs), 2.0, 0.03);
}

TEST(CalPercentile, HistogramInterpolatesInsideTheBin) {
  // 4 samples in bin 0, 4 in bin 1 (width 1): the 75th percentile is halfway through bin 1.
  // (Filled element by element: GCC 12.2 with -march=native on AVX-512 hosts stores the literal
  // {4, 4, 0, 0} into a named vector as {4, 4, 4, 4}.)
  std::vector<double> h(4, 0.0);
  h[0] = 4;
  h[1] = 4;
  EXPECT_DOUBLE_EQ(histogramPercentile(h, 1.0, 75.0), 1.5);
  EXPECT_DOUBLE_EQ(histogramPercentile(h, 1.0, 50.0), 1.0);
  EXPECT_DOUBLE_EQ(histogramPercentile(h, 1.0, 100.0), 2.0);
  EXPECT_DOUBLE_EQ(histogramPercentile(h, 0.5, 25.0), 0.25);
}

// ------------------------------------------------------------------------------- entropy

TEST(CalEntropy, HandComputedSmallHistograms) {
  // quantBins 2, start 2, no bin-0 replacement. KL by hand (natural log):
  //  [2,2,1,0,1]: i=2 0.056633, i=3 0.048728, i=4 +inf (clipped mass on an empty bin), i=5 0.036410 -> 5
  //  [6,3,2,1,1]: i=2 0.088513, i=3 0.085429, i=4 0.047682, i=5 0.087737 -> 4
  //  [1,2,3,0,2]: i=2 0.115338, i=3 0.052821, i=4 +inf, i=5 0.065406 -> 3
  //  with bin 0 replaced by bin 1 ([2,2,3,0,2]): i=3 0.032478, i=5 0.015260 -> 5
  EXPECT_EQ(entropyCutoff(std::vector<double>{2, 2, 1, 0, 1}, 2, 2, false), 5);
  EXPECT_EQ(entropyCutoff(std::vector<double>{6, 3, 2, 1, 1}, 2, 2, false), 4);
  EXPECT_EQ(entropyCutoff(std::vector<double>{1, 2, 3, 0, 2}, 2, 2, false), 3);
  EXPECT_EQ(entropyCutoff(std::vector<double>{1, 2, 3, 0, 2}, 2, 2, true), 5);
  // Every cut-off of [1,1,0,0,0] has KL exactly 0: the last one wins the tie.
  EXPECT_EQ(entropyCutoff(std::vector<double>{1, 1, 0, 0, 0}, 2, 2, false), 5);
  // Too few bins for the start, or nothing in the histogram.
  EXPECT_EQ(entropyCutoff(std::vector<double>{1, 1}, 3, 2, false), -1);
  EXPECT_EQ(entropyCutoff(std::vector<double>{0, 0, 0}, 2, 2, false), -1);
}

TEST(CalEntropy, MatchesModelOptReferenceOnRandomHistograms) {
  Rng rng(3);
  for (int trial = 0; trial < 12; ++trial) {
    const int nb = 200 + trial * 37;
    std::vector<double> h((size_t)nb);
    const double decay = 20.0 + 15.0 * trial;
    for (int k = 0; k < nb; ++k) {
      double mean = 1000.0 * std::exp(-k / decay);
      h[(size_t)k] = std::floor(mean * (0.7 + 0.6 * rng.uniform()));
      if (rng.uniform() < 0.1) h[(size_t)k] = 0;  // holes: spread skips them, empty cut bins are +inf
    }
    h[(size_t)nb - 1] = 1 + trial % 3;  // the max's bin is never empty
    for (bool replace : {true, false}) {
      EXPECT_EQ(entropyCutoff(h, 128, 128, replace), naiveEntropyCutoff(h, 128, 128, replace))
          << "trial " << trial << " replaceBin0 " << replace;
    }
  }
}

TEST(CalEntropy, BulkWithOneFarOutlierCutsRightAfterTheBulk) {
  // Width 1 (max 2048): a decreasing bulk in bins 0..199 (counts 1000 - 4j, values at the bin
  // centres) and one sample at 2048. Cut-offs 201..2047 clip the outlier onto an empty bin (+inf);
  // cut-off 2048 keeps it but merges the bulk 16 bins per group; cut-off 200 keeps the bulk
  // nearly intact with the outlier folded into bin 199: the minimum. amax = 200 * width.
  TensorStats s;
  std::vector<float> v;
  for (int j = 0; j < 200; ++j) v.insert(v.end(), (size_t)(1000 - 4 * j), (float)(j + 0.5) * (j % 2 ? -1.f : 1.f));
  v.push_back(2048.f);
  std::rotate(v.begin(), v.end() - 1, v.end());  // max first: width 1 from the start
  s.add(v.data(), (int64_t)v.size());
  ASSERT_EQ(s.binWidth(), 1.0);
  EXPECT_EQ(s.histogram()[199], 204.0);
  CalibrationSettings cs;
  EXPECT_EQ(entropyCutoff(s.histogram()), 200);
  EXPECT_EQ(naiveEntropyCutoff(s.histogram(), 128, 128, true), 200);
  EXPECT_EQ(s.amax(CalibMethod::Entropy, cs), 200.f);
  EXPECT_EQ(s.amax(CalibMethod::Max, cs), 2048.f);
}

TEST(CalEntropy, UniformIsNotClipped) {
  // Exactly flat: 50 samples at every bin centre of width 1/1024 plus the max 2.0.
  {
    TensorStats s;
    std::vector<float> v = {2.f};
    for (int j = 0; j < 2048; ++j) v.insert(v.end(), 50, (float)((j + 0.5) / 1024.0));
    s.add(v.data(), (int64_t)v.size());
    ASSERT_EQ(s.binWidth(), 1.0 / 1024);
    EXPECT_EQ(s.amax(CalibMethod::Entropy, CalibrationSettings{}), 2.f);
  }
  // Random uniform in [-3, 3).
  {
    Rng rng(5);
    std::vector<float> v(1 << 21);
    for (float& x : v) x = (float)(rng.uniform() * 6.0 - 3.0);
    TensorStats s;
    s.add(v.data(), (int64_t)v.size());
    EXPECT_EQ(s.amax(CalibMethod::Entropy, CalibrationSettings{}), (float)s.absMax());
  }
}

TEST(CalEntropy, AmaxIsTheUpperEdgeOfTheLastKeptBin) {
  // Width 0.5: bulk in bins 0..149 and an outlier; the cut-off index times the width.
  TensorStats s;
  std::vector<float> v = {1024.f};
  for (int j = 0; j < 150; ++j) v.insert(v.end(), (size_t)(600 - 3 * j), (float)((j + 0.5) * 0.5));
  s.add(v.data(), (int64_t)v.size());
  ASSERT_EQ(s.binWidth(), 0.5);
  const int64_t cut = entropyCutoff(s.histogram());
  EXPECT_EQ(cut, 150);
  EXPECT_EQ(s.amax(CalibMethod::Entropy, CalibrationSettings{}), (float)(cut * 0.5));
}

// ----------------------------------------------------------------------------------- mse

TEST(CalMse, GaussianWithOutliersClipsWellBelowMax) {
  Rng rng(13);
  // N(0, 1), 10^6 samples, two outliers at 20 and -18 sigma. INT8 rounding noise costs about
  // N * (amax/127)^2 / 12 = 5.2 amax^2 while clipping the outliers costs (20-amax)^2 + (18-amax)^2:
  // the optimum is near amax = 5.3, far below the max and beyond the Gaussian's 4-5 sigma.
  std::vector<float> v(1000000);
  for (float& x : v) x = (float)rng.normal();
  v[100] = 20.f;
  v[200] = -18.f;
  TensorStats s;
  s.add(v.data(), (int64_t)v.size());
  CalibrationSettings cs;
  const float a = s.amax(CalibMethod::Mse, cs);
  EXPECT_GT(a, 2.0f);          // above 2 sigma
  EXPECT_LT(a, 20.f / 3.f);    // well below max
  EXPECT_NEAR(a, 5.3f, 0.8f);
  EXPECT_EQ(s.amax(CalibMethod::Max, cs), 20.f);
}

TEST(CalMse, UniformKeepsNearlyTheWholeRange) {
  Rng rng(17);
  std::vector<float> v(400000);
  for (float& x : v) x = (float)(rng.uniform() * 2.0 - 1.0);
  TensorStats s;
  s.add(v.data(), (int64_t)v.size());
  const float a = s.amax(CalibMethod::Mse, CalibrationSettings{});
  EXPECT_GT(a, 0.98f * (float)s.absMax());
  EXPECT_LE(a, (float)s.absMax());
}

TEST(CalMse, PicksTheCandidateWithTheLeastError) {
  // Width 1, 256 bins: 1000 samples at centre 10.5 and one at 255.5. Candidates are centres
  // 128.5 .. 255.5: clipping the outlier to amax costs (255.5 - amax)^2, while the bulk's
  // rounding error is nearly the same for all; the best is the largest amax whose grid hits 10.5
  // closely enough, which the brute force below finds.
  std::vector<double> h(256, 0.0);
  h[10] = 1000;
  h[255] = 1;
  const double got = histogramMseAmax(h, 1.0, QuantMode::Int8, 128);
  double bestErr = 1e300, best = 0;
  for (int k = 128; k < 256; ++k) {
    float amax = (float)(k + 0.5), scale = scaleFromAmax(amax, QuantMode::Int8);
    double err = 0;
    for (int j : {10, 255}) {
      float c = (float)(j + 0.5);
      float q = std::clamp(std::nearbyint(c / scale), -128.f, 127.f) * scale;
      err += h[(size_t)j] * ((double)c - q) * ((double)c - q);
    }
    if (err < bestErr) bestErr = err, best = amax;
  }
  EXPECT_EQ(got, best);
}

TEST(CalMse, Fp8GridKeepsMoreRangeThanInt8) {
  Rng rng(19);
  std::vector<float> v(200000);
  for (float& x : v) x = (float)rng.normal();
  v[0] = 30.f;
  TensorStats s;
  s.add(v.data(), (int64_t)v.size());
  CalibrationSettings i8, f8;
  f8.mode = QuantMode::Fp8;
  const float a8 = s.amax(CalibMethod::Mse, i8), af = s.amax(CalibMethod::Mse, f8);
  EXPECT_GT(af, 0.f);
  EXPECT_LE(af, 30.f);
  // FP8's relative precision does not degrade with range the way INT8's uniform grid does.
  EXPECT_GE(af, a8);
}

// ------------------------------------------------------------------- zero tensors, scales

TEST(CalScale, AllZeroTensorGetsAPositiveScale) {
  TensorStats s;
  addRepeated(s, 0.f, 1000);
  addRepeated(s, -0.f, 100000);  // the large-batch path too
  EXPECT_EQ(s.count(), 101000);
  EXPECT_EQ(s.absMax(), 0.0);
  CalibrationSettings cs;
  for (float a : s.allAmax(cs)) EXPECT_EQ(a, 0.f);
  EXPECT_EQ(scaleFromAmax(0.f, QuantMode::Int8), 1.f / 127.f);
  EXPECT_EQ(scaleFromAmax(0.f, QuantMode::Fp8), 1.f / 448.f);
  // Empty stats behave the same.
  TensorStats empty;
  EXPECT_EQ(empty.amax(CalibMethod::Entropy, cs), 0.f);
}

TEST(CalScale, ScaleFromAmax) {
  EXPECT_EQ(scaleFromAmax(127.f, QuantMode::Int8), 1.f);
  EXPECT_EQ(scaleFromAmax(448.f, QuantMode::Fp8), 1.f);
  EXPECT_EQ(scaleFromAmax(2.54f, QuantMode::Int8), 2.54f / 127.f);
  // Degenerate amax values: a positive normal scale, that of amax = 1.
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {-1.f, inf, std::numeric_limits<float>::quiet_NaN(), 1e-40f, 1e-37f}) {
    float sc = scaleFromAmax(bad, QuantMode::Int8);
    EXPECT_EQ(sc, 1.f / 127.f) << bad;
    EXPECT_TRUE(std::isnormal(sc));
  }
}

TEST(CalScale, SoftmaxOutputsArePinnedToOne) {
  TensorStats s;
  std::vector<float> v = {0.01f, 0.2f, 0.7f};
  s.add(v.data(), 3);
  CalibrationSettings cs;
  cs.method = CalibMethod::Max;
  EXPECT_EQ(calibratedAmax(s, cs, /*softmaxOutput=*/true), kSoftmaxAmax);
  EXPECT_EQ(calibratedAmax(s, cs, false), 0.7f);
  cs.pinSoftmax = false;
  EXPECT_EQ(calibratedAmax(s, cs, true), 0.7f);
}

TEST(CalScale, AllAmaxIsIndexedByMethod) {
  Rng rng(23);
  std::vector<float> v(50000);
  for (float& x : v) x = (float)rng.normal();
  TensorStats s;
  s.add(v.data(), (int64_t)v.size());
  CalibrationSettings cs;
  auto all = s.allAmax(cs);
  for (CalibMethod m : {CalibMethod::Max, CalibMethod::Entropy, CalibMethod::Percentile, CalibMethod::Mse}) {
    EXPECT_EQ(all[(size_t)m], s.amax(m, cs));
    EXPECT_GT(all[(size_t)m], 0.f);
    EXPECT_LE(all[(size_t)m], all[(size_t)CalibMethod::Max]);
  }
}

// --------------------------------------------------------------------------- per-channel

TEST(CalPerChannel, AbsMaxOnAxis0And1) {
  // [2, 3, 2]
  Tensor w = floatTensor({1, -2, 3, 0, -5, 4,   //
                          -6, 0.5f, 0, 7, 0.25f, -1},
                         {2, 3, 2});
  auto a0 = perChannelAbsMax(w, 0);
  ASSERT_TRUE(a0) << a0.status().message();
  EXPECT_EQ(*a0, (std::vector<float>{5, 7}));
  auto a1 = perChannelAbsMax(w, 1);
  ASSERT_TRUE(a1);
  EXPECT_EQ(*a1, (std::vector<float>{6, 7, 5}));
  auto a2 = perChannelAbsMax(w, -1);
  ASSERT_TRUE(a2);
  EXPECT_EQ(*a2, (std::vector<float>{6, 7}));
  // A double tensor takes the generic path with the same answer.
  Tensor d(DType::Double, {2, 3, 2});
  for (int64_t i = 0; i < 12; ++i) d.data<double>()[i] = w.data<float>()[i];
  auto ad = perChannelAbsMax(d, 1);
  ASSERT_TRUE(ad);
  EXPECT_EQ(*ad, *a1);
  // A zero channel has amax 0, and a positive scale.
  auto z = perChannelAbsMax(Tensor::zeros(DType::Float, {3, 4}), 0);
  ASSERT_TRUE(z);
  EXPECT_EQ(*z, (std::vector<float>{0, 0, 0}));
  EXPECT_GT(scaleFromAmax((*z)[0], QuantMode::Int8), 0.f);
}

TEST(CalPerChannel, BadArguments) {
  Tensor w = Tensor::zeros(DType::Float, {4, 2});
  EXPECT_EQ(perChannelAbsMax(w, 2).status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(perChannelAbsMax(w, -3).status().code(), StatusCode::InvalidArgument);
  EXPECT_NE(perChannelAbsMax(w, 2).status().message().find("[4,2]"), std::string::npos)
      << perChannelAbsMax(w, 2).status().message();
  EXPECT_EQ(perChannelAbsMax(Tensor::scalar(1.f), 0).status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(perChannelAbsMax(Tensor(), 0).status().code(), StatusCode::InvalidArgument);
}

TEST(CalHistogram, MergeWithADifferentWidthMovesWholeBins) {
  TensorStats a, b;
  std::vector<float> va = {1.0f, 0.5f}, vb = {3.0f, 0.75f, 0.f};
  a.add(va.data(), 2);  // width 1/2048
  b.add(vb.data(), 3);  // width 3/2048
  a.merge(b);
  EXPECT_EQ(a.count(), 5);
  EXPECT_EQ(a.absMax(), 3.0);
  EXPECT_EQ(a.binWidth(), 1.0 / 2048);
  EXPECT_DOUBLE_EQ(std::accumulate(a.histogram().begin(), a.histogram().end(), 0.0), 5.0);
  // Each bin of b lands whole in the bin of a that holds its centre, (k + 0.5) * 3/2048:
  EXPECT_EQ(a.histogram()[1], 1.0);     // b's bin 0 (the zero): centre 1.5/2048
  EXPECT_EQ(a.histogram()[1024], 1.0);  // a's own 0.5
  EXPECT_EQ(a.histogram()[1537], 1.0);  // b's bin 512 (0.75): centre 1537.5/2048
  EXPECT_EQ(a.histogram()[6142], 1.0);  // b's bin 2047 (3.0): centre 6142.5/2048
  EXPECT_EQ(a.histogram().size(), 6144u);
}
