// Error metrics between a float reference y and a candidate y' (reference section 4):
// SNR dB = 10 log10(sum y^2 / sum (y - y')^2), cosine, MSE, max abs error. Accumulated in double
// over any number of tensors (all elements of all analysed samples), so a metric over a data set
// is exactly the sum-based definition, not a mean of per-sample figures.
#pragma once

#include <cstdint>
#include <limits>

#include "core/ir/tensor.h"

namespace qs {

struct ErrorMetrics {
  double snrDb = std::numeric_limits<double>::infinity();  // +inf when identical
  double cosine = 1.0;
  double mse = 0.0;
  double maxAbs = 0.0;
  int64_t count = 0;  // elements compared
};

/// The sums behind every figure. Per element: y^2, d^2 and d (y + y') with d = y - y', the
/// products in float32 over blocks of kLaneBlock elements per vector lane, each block's lanes then
/// added in double (2.5x the throughput of products in double, which was a quarter of an
/// analysis). A block's relative error is at most ~kLaneBlock * 2^-24 (4e-6 dB of SNR), and
/// blocks err independently, so a sum over a tensor is typically within ~1e-7. A block whose
/// float sums overflow or hold NaN is summed again in double, so large values lose nothing.
/// Also kept: sum y and sum d, so that the sums of a y' = a y + b (an elementwise op with a
/// constant) follow from those of y without reading y' (affine()).
/// The cosine comes from the same sums: sum y'^2 = sum y^2 - sum d (y + y') and
/// sum y y' = sum y^2 - (sum d^2 + sum d (y + y')) / 2, which stays accurate for y' within a
/// few ulps of y (two separately rounded sums of y y' and y'^2 would not).
class ErrorAccumulator {
 public:
  /// Adds n element pairs. Both arrays hold float32.
  void add(const float* reference, const float* candidate, int64_t n);
  /// Adds two float tensors of equal element count (any other dtype is converted to double).
  /// Large tensors are summed in fixed blocks of kBlock elements, on up to `threads` threads,
  /// the blocks' sums combined in order: the result does not depend on `threads`.
  void add(const Tensor& reference, const Tensor& candidate, int threads = 1);
  /// add(y, y + e) without forming y + e: `error` holds candidate - reference, the candidate is
  /// rounded to float as a caller adding the two would (same sums, one pass less).
  void addError(const float* reference, const float* error, int64_t n);
  void addError(const Tensor& reference, const Tensor& error, int threads = 1);
  /// Vector lanes kept across calls: many short runs (an epilogue's output rows) summed without
  /// reducing the lanes after each run; flush() adds them into the sums. The result depends on
  /// the runs (their lengths and order) only.
  struct Lanes {
    alignas(64) double s[16] = {}, e[16] = {}, p[16] = {}, y[16] = {}, d[16] = {};
    alignas(64) float m[16] = {};
  };
  void add(Lanes& lanes, const float* reference, const float* candidate, int64_t n);
  void addError(Lanes& lanes, const float* reference, const float* error, int64_t n);
  void flush(Lanes& lanes);
  static constexpr int64_t kBlock = 1 << 16;
  /// Elements per vector lane summed in float before the lane goes into the double sums.
  static constexpr int64_t kLaneBlock = 16;
  /// Merges another accumulator (e.g. from another thread or batch).
  void merge(const ErrorAccumulator& other);
  /// The sums of a y + b against a y' + b, from these of y against y' (exact up to the rounding
  /// of a y + b to float, which a real comparison would add as noise ~1e-7 of y).
  ErrorAccumulator affine(double a, double b) const;
  ErrorMetrics metrics() const;
  /// Adds signal and noise powers (sum y^2, sum d^2 over `count` elements) known without the
  /// elements themselves (core/analysis/split_gram.h): only metrics().snrDb and mse are then
  /// meaningful, since the other sums stay as they were.
  void addPowers(double signal, double noise, int64_t count) {
    m_signal += signal;
    m_noise += noise;
    m_count += count;
  }
  double signalPower() const { return m_signal; }
  double noisePower() const { return m_noise; }

 private:
  template <bool kError>
  void addSums(const float* y, const float* q, int64_t n);
  template <bool kError>
  void addLanes(Lanes& lanes, const float* y, const float* q, int64_t n);
  template <bool kError>
  void addBlocks(const float* y, const float* q, int64_t n, int threads);
  void addDouble(double y, double q);
  double m_signal = 0;  // sum y^2
  double m_noise = 0;   // sum (y - y')^2
  double m_diff = 0;    // sum (y - y') (y + y') = sum y^2 - sum y'^2
  double m_sumY = 0;    // sum y
  double m_sumD = 0;    // sum (y - y')
  double m_maxAbs = 0;
  int64_t m_count = 0;
};

/// SNR in dB from signal and noise powers: +inf for zero noise, -inf for zero signal with noise.
double snrDb(double signalPower, double noisePower);

}  // namespace qs
