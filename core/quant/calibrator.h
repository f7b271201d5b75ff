// Calibrators: streaming statistics of one tensor over the calibration batches and the amax
// (clip range, symmetric) that each calibration method of reference section 3 derives from them.
// Max, entropy (TensorRT EntropyCalibration2 as NVIDIA ModelOpt implements it), percentile and
// mse all read one shared histogram of |x|, so one pass over the data serves every method and
// the GUI can draw every method's clip range on the same histogram.
//
// Conventions (fixed; tests check them against hand-computed values):
// - Histogram of |x|: the first batch whose max is > 0 sets `bins` bins of width w = max / bins
//   over [0, max]; bin k covers [k*w, (k+1)*w), the last bin also holds its upper edge. A later,
//   larger max appends bins of the same width (edges k*w never move, earlier counts keep their
//   bins) up to ceil(max / w) bins. Past kMaxHistogramGrowth * bins bins, adjacent bins merge in
//   powers of two (the width doubles; the new edges are a subset of the old, so no count moves
//   across an edge). Zeros seen before any nonzero value are held and put in bin 0 later.
// - NaN and +-Inf are skipped (counted in nonFiniteCount()), never in max or histogram.
// - Entropy: cut-off i = number of leading bins kept, i = startBin..nbins; amax = i * w, the
//   upper edge of bin i-1 (= ModelOpt's calib_bin_edges[i]), clamped to absMax().
// - Every amax is <= absMax(); an empty or all-zero tensor has amax 0 for every method.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/ir/tensor.h"
#include "core/quant/high_precision.h"
#include "core/quant/quant_types.h"
#include "core/util/status.h"

namespace qs {

/// Histogram growth limit, as a multiple of the initial bin count (see the file comment).
constexpr int kMaxHistogramGrowth = 8;
/// amax of a Softmax output when pinned to [0, 1].
constexpr float kSoftmaxAmax = 1.0f;

struct CalibrationSettings {
  CalibMethod method = CalibMethod::Max;
  double percentile = 99.99;  // percentile method: p in [0, 100] (PPQ 99.99, ORT 99.999)
  int bins = 2048;            // histogram bins set by the first nonzero batch (TensorStats ctor)
  QuantMode mode = QuantMode::Int8;
  int startBin = 128;         // entropy and mse: the smallest cut-off / candidate bin (ModelOpt start_bin)
  /// Entropy only: replace the count of bin 0 by that of bin 1 before the search, as ModelOpt and
  /// pytorch-quantization do, so that a mass of exact zeros (Relu outputs) does not dominate the KL.
  bool entropyReplaceBin0 = true;
  /// Softmax outputs get amax = kSoftmaxAmax in calibratedAmax() instead of a calibrated value.
  bool pinSoftmax = true;
  /// The precision of the nodes left out of quantization (and of the Q/DQ scales and dequantized
  /// values with fp16/bf16): --high-precision-dtype, core/quant/high_precision.h.
  HighPrecision highPrecision = HighPrecision::Fp32;
};

/// Streaming statistics of one tensor over all calibration batches: count, max |x| and the
/// histogram of |x|. Not thread-safe; use one per tensor (or per worker, then merge()).
class TensorStats {
 public:
  /// `bins` (>= 1) bins for the histogram that the first nonzero batch creates.
  explicit TensorStats(int bins = 2048);

  /// Adds one batch of `n` floats (may be 0). Two passes: a vectorised max |x| pass, then a
  /// histogram pass. NaN/Inf are skipped and counted.
  void add(const float* data, int64_t n);
  /// Adds a float tensor's elements; other dtypes are an InvalidArgument error.
  Status add(const Tensor& t);
  /// Adds another tensor's statistics. Exact when both histograms have the same bin width (or
  /// either has none); otherwise each bin of `other` is moved whole to the bin of this one that
  /// holds its centre (approximate within one bin width).
  void merge(const TensorStats& other);
  /// Back to the state of a new TensorStats with the same bin count.
  void reset();

  /// Finite samples seen (zeros included).
  int64_t count() const { return m_count; }
  int64_t nonFiniteCount() const { return m_nonFinite; }
  /// max |x| over all finite samples; 0 when none.
  double absMax() const { return m_absMax; }
  /// Counts of |x| per bin (empty until a nonzero sample is seen). Bin k covers
  /// [k * binWidth(), (k + 1) * binWidth()).
  const std::vector<double>& histogram() const { return m_hist; }
  /// Width of each histogram bin; 0 while the histogram is empty.
  double binWidth() const { return m_width; }
  int initialBins() const { return m_bins; }

  /// The amax that `method` derives (Auto: mse's, the histogram's guess before the layer-wise search
  /// of core/analysis/clip_search.h; settings.percentile, mode, startBin and entropyReplaceBin0
  /// are read; settings.method and settings.bins are not). 0 for an empty or all-zero tensor.
  float amax(CalibMethod method, const CalibrationSettings& settings) const;
  /// Every method's amax, indexed by CalibMethod (Max, Entropy, Percentile, Mse).
  std::array<float, 4> allAmax(const CalibrationSettings& settings) const;

 private:
  void ensureRange(double maxAbs);
  void coarsen(int64_t factor);
  void addToHistogram(const float* data, int64_t n);

  int m_bins;
  int64_t m_count = 0;
  int64_t m_nonFinite = 0;
  int64_t m_pendingZeros = 0;  // zeros seen while no histogram exists yet
  double m_absMax = 0.0;
  double m_width = 0.0;
  double m_rangeMax = 0.0;  // the histogram covers [0, m_rangeMax]; values there clamp into the last bin
  std::vector<double> m_hist;
};

/// settings.method's amax of `stats`, or kSoftmaxAmax when `softmaxOutput` and settings.pinSoftmax.
float calibratedAmax(const TensorStats& stats, const CalibrationSettings& settings, bool softmaxOutput = false);

/// Symmetric scale for an amax: INT8 amax / 127, FP8 E4M3 amax / 448. Always a positive normal
/// float: an amax that is 0, negative, NaN or Inf, or so small that amax / qmax is not a normal
/// float (an all-zero tensor), gets the scale of amax = 1.0 (1/127, 1/448), so that zeros stay
/// exact and the exported model is valid.
float scaleFromAmax(float amax, QuantMode mode);

/// max |w| per index of `axis` (negative counts from the end) for per-channel weight scales:
/// result[c] = max over all elements with index c on `axis`. Float tensors take a fast path;
/// other numeric dtypes are read as double. NaN/Inf are skipped; a channel with no finite value
/// (or no element) gets 0. InvalidArgument for an empty (dtype-less) or rank-0 tensor, an axis
/// out of range, or a non-numeric dtype.
Result<std::vector<float>> perChannelAbsMax(const Tensor& w, int axis);

// ---- The searches on a histogram, exposed for tests and for tools that hold a histogram. ----

/// Entropy (TensorRT EntropyCalibration2, ModelOpt `_compute_amax_entropy`, stride 1) on a
/// histogram of |x|. For every cut-off i = startBin..hist.size(): P = hist[0:i] with the clipped
/// mass sum(hist[i:]) added to P[i-1]; Q = hist[0:i] merged into `quantBins` groups (bin j goes
/// to group floor(j * quantBins / i)), each group's count spread evenly over its nonzero bins,
/// zero bins staying zero; both normalised; KL(P||Q) = sum over P>0 of P log(P/Q), +inf when
/// some P>0 meets Q=0 (scipy's rel_entr, which ModelOpt calls: a cut-off at an empty bin with
/// clipped mass is never chosen). Returns the i with the smallest KL, the last one on ties
/// (differences below 1e-12 count as ties); -1 when no cut-off is finite or
/// hist.size() < startBin. amax = i * binWidth. With replaceBin0, hist[0] is replaced by hist[1]
/// first (ModelOpt). The caller decides what -1 means (TensorStats: amax = absMax).
int64_t entropyCutoff(std::span<const double> hist, int startBin = 128, int quantBins = 128, bool replaceBin0 = true);

/// p-th percentile (p in [0, 100], clamped) of the samples a histogram holds, interpolated
/// linearly inside the bin where the cumulative count reaches p/100 * total. Bin width `width`.
double histogramPercentile(std::span<const double> hist, double width, double p);

/// MSE (ModelOpt `_compute_amax_mse`): candidates amax = centre of bin k, k = startBin..size-1
/// (all bins when size <= startBin); error(amax) = sum_k hist[k] * (c_k - fq(c_k, amax))^2 over
/// bin centres c_k, with fq the INT8 grid (scale amax/127, round half even, clip [-128,127]) or
/// FP8 E4M3 (scale amax/448) exactly as fake_quant.h computes it; clipping error included.
/// Returns the best candidate's amax (the first one on ties); 0 for an empty histogram.
double histogramMseAmax(std::span<const double> hist, double width, QuantMode mode, int startBin = 128);

}  // namespace qs
