// RecurrentStepMatrix (core/kernels/recurrent_step.h), the per-step product of LSTM/GRU/RNN:
// against a double-precision reference on every batch from 1 to 21 (each row-block shape and
// remainder), gate-row counts that are and are not multiples of the 8-row panel, and K down to 1;
// and independence of the thread count (bit for bit); both instruction-set paths (AVX2 and, where
// the CPU has it, AVX-512), which must give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/kernels/recurrent_step.h"

namespace qs {
namespace {

std::vector<float> randomFloats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

using Isa = RecurrentStepMatrix::Isa;

// The paths this CPU can run: AVX2 always (the build's baseline), AVX-512 where present.
std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::Avx2};
  if (RecurrentStepMatrix::avx512Available()) v.push_back(Isa::Avx512);
  return v;
}

std::string isaName(Isa isa) { return isa == Isa::Avx512 ? "avx512" : "avx2"; }

TEST(RecurrentStep, MatchesDoubleReference) {
  struct Dims {
    int64_t M, K;
  };
  for (const Isa isa : isas())
    for (const Dims d : {Dims{384, 96}, Dims{12, 5}, Dims{7, 1}, Dims{200, 33}, Dims{64, 64}}) {
      SCOPED_TRACE(isaName(isa));
      std::mt19937 rng(11 + (uint32_t)d.M);
      const std::vector<float> R = randomFloats((size_t)(d.M * d.K), rng);
      const RecurrentStepMatrix step(R.data(), d.M, d.K, isa);
      ASSERT_EQ(step.isa(), isa);
      for (int64_t batch = 1; batch <= 21; ++batch) {
        SCOPED_TRACE("M " + std::to_string(d.M) + " K " + std::to_string(d.K) + " batch " + std::to_string(batch));
        const std::vector<float> h = randomFloats((size_t)(batch * d.K), rng);
        // Sentinels one row past the output: the padded panel must not write past M.
        std::vector<float> out((size_t)((batch + 1) * d.M), -7.f);
        step.multiply(h.data(), batch, out.data(), 1);
        double worst = 0.0;
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t m = 0; m < d.M; ++m) {
            double ref = 0.0, mag = 0.0;
            for (int64_t k = 0; k < d.K; ++k) {
              ref += (double)h[(size_t)(b * d.K + k)] * (double)R[(size_t)(m * d.K + k)];
              mag += std::fabs((double)h[(size_t)(b * d.K + k)] * (double)R[(size_t)(m * d.K + k)]);
            }
            worst = std::max(worst, std::fabs(out[(size_t)(b * d.M + m)] - ref) / std::max(mag, 1e-30));
          }
        // float FMA chains over K <= 96: a few ulps of the sum of magnitudes.
        EXPECT_LE(worst, 2e-6);
        for (int64_t m = 0; m < d.M; ++m) ASSERT_EQ(out[(size_t)(batch * d.M + m)], -7.f) << "wrote past row " << batch;
      }
    }
}

TEST(RecurrentStep, ThreadCountDoesNotChangeTheResult) {
  std::mt19937 rng(5);
  const int64_t M = 4 * 192, K = 192;  // past the 2 MFLOP split threshold at batch 8
  const std::vector<float> R = randomFloats((size_t)(M * K), rng);
  for (const Isa isa : isas())
    for (int64_t batch : {1, 8, 11}) {
      const RecurrentStepMatrix step(R.data(), M, K, isa);
      const std::vector<float> h = randomFloats((size_t)(batch * K), rng);
      std::vector<float> one((size_t)(batch * M)), many((size_t)(batch * M));
      step.multiply(h.data(), batch, one.data(), 1);
      step.multiply(h.data(), batch, many.data(), 4);
      EXPECT_EQ(std::memcmp(one.data(), many.data(), sizeof(float) * one.size()), 0)
          << isaName(isa) << " batch " << batch;
    }
}

// The AVX-512 path keeps each output's FMA chain over k in order, so it must give the AVX2 path's
// bits (the report fixtures and the analysis's figures do not depend on the CPU's vector width).
TEST(RecurrentStep, Avx512GivesTheAvx2Bits) {
  if (!RecurrentStepMatrix::avx512Available()) GTEST_SKIP() << "no AVX-512F on this CPU";
  std::mt19937 rng(23);
  struct Dims {
    int64_t M, K;
  };
  for (const Dims d : {Dims{384, 96}, Dims{2 * 96, 96}, Dims{17, 3}, Dims{100, 40}}) {
    const std::vector<float> R = randomFloats((size_t)(d.M * d.K), rng);
    const RecurrentStepMatrix a(R.data(), d.M, d.K, Isa::Avx2), b(R.data(), d.M, d.K, Isa::Avx512);
    for (int64_t batch = 1; batch <= 17; ++batch) {
      const std::vector<float> h = randomFloats((size_t)(batch * d.K), rng);
      std::vector<float> ya((size_t)(batch * d.M)), yb((size_t)(batch * d.M));
      a.multiply(h.data(), batch, ya.data(), 1);
      b.multiply(h.data(), batch, yb.data(), 1);
      EXPECT_EQ(std::memcmp(ya.data(), yb.data(), sizeof(float) * ya.size()), 0)
          << "M " << d.M << " K " << d.K << " batch " << batch;
    }
  }
}

}  // namespace
}  // namespace qs
