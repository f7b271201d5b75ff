#include "core/quant/calibrator.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/numeric/fake_quant.h"

namespace qs {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// max |x| with NaN ignored (a NaN never compares greater); +Inf propagates and is filtered by
// the caller. Written with GCC/Clang vector extensions: the auto-vectoriser does not turn a
// NaN-ignoring max reduction into packed code, and this pass reads every calibration activation.
float absMaxPass(const float* x, int64_t n) {
  typedef float V8 __attribute__((vector_size(32)));
  typedef int32_t V8i __attribute__((vector_size(32)));
  const V8i absMask = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff,
                       0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
  V8 m0 = {}, m1 = {}, m2 = {}, m3 = {};
  int64_t i = 0;
  auto load = [&](int64_t at) {
    V8 v;
    std::memcpy(&v, x + at, sizeof v);
    return (V8)((V8i)v & absMask);
  };
  for (; i + 32 <= n; i += 32) {
    V8 a0 = load(i), a1 = load(i + 8), a2 = load(i + 16), a3 = load(i + 24);
    m0 = a0 > m0 ? a0 : m0;
    m1 = a1 > m1 ? a1 : m1;
    m2 = a2 > m2 ? a2 : m2;
    m3 = a3 > m3 ? a3 : m3;
  }
  m0 = m1 > m0 ? m1 : m0;
  m2 = m3 > m2 ? m3 : m2;
  m0 = m2 > m0 ? m2 : m0;
  float m = 0.f;
  for (int k = 0; k < 8; ++k) m = m0[k] > m ? m0[k] : m;
  for (; i < n; ++i) {
    float a = std::fabs(x[i]);
    m = a > m ? a : m;
  }
  return m;
}

// Slow path, only for batches that hold an Inf: max over finite |x|.
float finiteAbsMaxPass(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    float a = std::fabs(x[i]);
    if (a > m && a <= FLT_MAX) m = a;
  }
  return m;
}

int64_t countFinite(const float* x, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += std::fabs(x[i]) <= FLT_MAX ? 1 : 0;
  return c;
}

bool isNumeric(DType t) {
  switch (t) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16:
    case DType::Int8: case DType::UInt8: case DType::Int16: case DType::UInt16:
    case DType::Int32: case DType::UInt32: case DType::Int64: case DType::UInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TensorStats

TensorStats::TensorStats(int bins) : m_bins(std::max(bins, 1)) {}

void TensorStats::reset() { *this = TensorStats(m_bins); }

Status TensorStats::add(const Tensor& t) {
  if (t.dtype() != DType::Float) {
    return invalidArgument("calibration statistics need a float tensor, got " + dtypeName(t.dtype()) + " " +
                           shapeToString(t.shape()));
  }
  add(t.data<float>(), t.numel());
  return Status::ok();
}

void TensorStats::add(const float* data, int64_t n) {
  if (n <= 0) return;
  float m = absMaxPass(data, n);
  if (!(m <= FLT_MAX)) m = finiteAbsMaxPass(data, n);
  if (m == 0.f) {
    // Every finite value is zero: nothing to size a histogram with yet.
    int64_t finite = countFinite(data, n);
    m_count += finite;
    m_nonFinite += n - finite;
    if (m_hist.empty()) m_pendingZeros += finite;
    else m_hist[0] += (double)finite;
    return;
  }
  ensureRange(m);
  m_absMax = std::max(m_absMax, (double)m);
  addToHistogram(data, n);
}

void TensorStats::ensureRange(double maxAbs) {
  if (m_hist.empty()) {
    m_width = maxAbs / m_bins;
    m_rangeMax = maxAbs;
    m_hist.assign((size_t)m_bins, 0.0);
    m_hist[0] += (double)m_pendingZeros;
    m_pendingZeros = 0;
    return;
  }
  if (maxAbs <= m_rangeMax) return;
  auto binsFor = [this](double v) {
    auto need = (int64_t)std::ceil(v / m_width);
    while ((double)need * m_width < v) ++need;
    return std::max<int64_t>(need, (int64_t)m_hist.size());
  };
  int64_t need = binsFor(maxAbs);
  const int64_t limit = (int64_t)m_bins * kMaxHistogramGrowth;
  if (need > limit) {
    int64_t factor = 2;
    while ((need + factor - 1) / factor > limit) factor *= 2;
    coarsen(factor);
    need = binsFor(maxAbs);
  }
  m_hist.resize((size_t)need, 0.0);
  m_rangeMax = std::max(m_rangeMax, (double)need * m_width);
}

void TensorStats::coarsen(int64_t factor) {
  const int64_t n = (int64_t)m_hist.size();
  std::vector<double> merged((size_t)((n + factor - 1) / factor), 0.0);
  for (int64_t k = 0; k < n; ++k) merged[(size_t)(k / factor)] += m_hist[(size_t)k];
  m_hist = std::move(merged);
  m_width *= (double)factor;
  m_rangeMax = std::max(m_rangeMax, (double)m_hist.size() * m_width);
}

void TensorStats::addToHistogram(const float* data, int64_t n) {
  const int64_t nb = (int64_t)m_hist.size();
  const float invW = (float)(1.0 / m_width);
  const float lastBin = (float)(nb - 1);
  const float sentinel = (float)nb;  // non-finite values go here and are dropped
  double* hist = m_hist.data();

  if (n < 16384 || !(1.0 / m_width < 1e30)) {
    // Small batches, and tensors whose max is so tiny (< ~1e-26) that 1/width overflows float:
    // index in double.
    const double invWd = 1.0 / m_width;
    int64_t nonFinite = 0;
    for (int64_t i = 0; i < n; ++i) {
      double a = std::fabs(data[i]);
      if (!(a <= FLT_MAX)) {
        ++nonFinite;
        continue;
      }
      double t = a * invWd;
      hist[(int64_t)(t < lastBin ? t : lastBin)] += 1.0;
    }
    m_nonFinite += nonFinite;
    m_count += n - nonFinite;
    return;
  }

  // Large batch: bin indices computed a block at a time (vectorised), then counted into four
  // interleaved 32-bit sub-histograms so that runs of equal values (Relu zeros) do not serialise
  // on one counter. Chunks keep every sub-count below 2^32.
  const int64_t nonFiniteBefore = m_nonFinite;
  const int64_t stride = nb + 1;
  std::vector<uint32_t> sub((size_t)(4 * stride), 0u);
  constexpr int64_t kBlock = 1024;
  constexpr int64_t kChunk = int64_t(1) << 31;
  int32_t idx[kBlock];
  auto flush = [&] {
    for (int64_t k = 0; k < nb; ++k) {
      hist[k] += (double)((uint64_t)sub[(size_t)k] + sub[(size_t)(stride + k)] + sub[(size_t)(2 * stride + k)] +
                          sub[(size_t)(3 * stride + k)]);
    }
    int64_t bad = (int64_t)sub[(size_t)nb] + sub[(size_t)(stride + nb)] + sub[(size_t)(2 * stride + nb)] +
                  sub[(size_t)(3 * stride + nb)];
    m_nonFinite += bad;
    std::fill(sub.begin(), sub.end(), 0u);
  };
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t c1 = std::min(n, c0 + kChunk);
    for (int64_t b0 = c0; b0 < c1; b0 += kBlock) {
      const int64_t len = std::min(kBlock, c1 - b0);
      const float* x = data + b0;
      for (int64_t k = 0; k < len; ++k) {
        float a = std::fabs(x[k]);
        float t = a * invW;
        t = t < lastBin ? t : lastBin;
        t = a <= FLT_MAX ? t : sentinel;
        idx[k] = (int32_t)t;
      }
      int64_t k = 0;
      for (; k + 4 <= len; k += 4) {
        ++sub[(size_t)idx[k]];
        ++sub[(size_t)(stride + idx[k + 1])];
        ++sub[(size_t)(2 * stride + idx[k + 2])];
        ++sub[(size_t)(3 * stride + idx[k + 3])];
      }
      for (; k < len; ++k) ++sub[(size_t)idx[k]];
    }
    flush();
  }
  m_count += n - (m_nonFinite - nonFiniteBefore);
}

void TensorStats::merge(const TensorStats& other) {
  if (&other == this) {
    TensorStats copy = other;
    merge(copy);
    return;
  }
  m_count += other.m_count;
  m_nonFinite += other.m_nonFinite;
  if (other.m_hist.empty()) {
    if (m_hist.empty()) m_pendingZeros += other.m_pendingZeros;
    else m_hist[0] += (double)other.m_pendingZeros;
    return;
  }
  if (m_hist.empty()) {
    const int64_t zeros = m_pendingZeros;
    const int bins = m_bins;
    const int64_t count = m_count, nonFinite = m_nonFinite;
    *this = other;
    m_bins = bins;
    m_count = count;
    m_nonFinite = nonFinite;
    m_hist[0] += (double)zeros;
    return;
  }
  ensureRange(other.m_absMax);
  m_absMax = std::max(m_absMax, other.m_absMax);
  const int64_t nb = (int64_t)m_hist.size();
  const int64_t on = (int64_t)other.m_hist.size();
  if (other.m_width == m_width) {
    for (int64_t k = 0; k < on; ++k) m_hist[(size_t)std::min(k, nb - 1)] += other.m_hist[(size_t)k];
  } else {
    for (int64_t k = 0; k < on; ++k) {
      const double c = other.m_hist[(size_t)k];
      if (c == 0.0) continue;
      const double centre = std::min((k + 0.5) * other.m_width, other.m_absMax);
      m_hist[(size_t)std::min((int64_t)(centre / m_width), nb - 1)] += c;
    }
  }
  m_hist[0] += (double)other.m_pendingZeros;
}

float TensorStats::amax(CalibMethod method, const CalibrationSettings& s) const {
  if (m_hist.empty() || !(m_absMax > 0.0)) return 0.f;
  double a = m_absMax;
  switch (method) {
    case CalibMethod::Max:
      break;
    case CalibMethod::Entropy: {
      int64_t cut = entropyCutoff(m_hist, s.startBin, 128, s.entropyReplaceBin0);
      if (cut > 0) a = (double)cut * m_width;
      break;
    }
    case CalibMethod::Percentile:
      a = histogramPercentile(m_hist, m_width, s.percentile);
      break;
    case CalibMethod::Mse:
    case CalibMethod::Auto:  // the histogram's best guess; the session's layer-wise search overrides it
      a = histogramMseAmax(m_hist, m_width, s.mode, s.startBin);
      break;
  }
  return (float)std::min(a, m_absMax);
}

std::array<float, 4> TensorStats::allAmax(const CalibrationSettings& s) const {
  return {amax(CalibMethod::Max, s), amax(CalibMethod::Entropy, s), amax(CalibMethod::Percentile, s),
          amax(CalibMethod::Mse, s)};
}

// ---------------------------------------------------------------------------------------------

float calibratedAmax(const TensorStats& stats, const CalibrationSettings& settings, bool softmaxOutput) {
  if (softmaxOutput && settings.pinSoftmax) return kSoftmaxAmax;
  return stats.amax(settings.method, settings);
}

float scaleFromAmax(float amax, QuantMode mode) {
  const float qmax = mode == QuantMode::Fp8 ? kFp8E4M3Max : 127.f;
  float s = amax / qmax;
  if (!(s > 0.f) || !std::isnormal(s)) s = 1.f / qmax;
  return s;
}

Result<std::vector<float>> perChannelAbsMax(const Tensor& w, int axis) {
  if (w.empty() || w.rank() == 0) {
    return invalidArgument("per-channel amax needs a tensor of rank >= 1, got " + dtypeName(w.dtype()) + " " +
                           shapeToString(w.shape()));
  }
  if (!isNumeric(w.dtype())) {
    return invalidArgument("per-channel amax needs a numeric tensor, got " + dtypeName(w.dtype()));
  }
  const int rank = w.rank();
  if (axis < -rank || axis >= rank) {
    return invalidArgument("per-channel axis " + std::to_string(axis) + " out of range for shape " +
                           shapeToString(w.shape()));
  }
  if (axis < 0) axis += rank;
  const int64_t channels = w.dim(axis);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= w.dim(d);
  for (int d = axis + 1; d < rank; ++d) inner *= w.dim(d);
  std::vector<float> out((size_t)channels, 0.f);
  if (w.numel() == 0) return out;
  if (w.dtype() == DType::Float) {
    const float* p = w.data<float>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t c = 0; c < channels; ++c) {
        const float* row = p + (o * channels + c) * inner;
        float m = absMaxPass(row, inner);
        if (!(m <= FLT_MAX)) m = finiteAbsMaxPass(row, inner);
        out[(size_t)c] = std::max(out[(size_t)c], m);
      }
    }
  } else {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t base = (o * channels + c) * inner;
        double m = out[(size_t)c];
        for (int64_t i = 0; i < inner; ++i) {
          double a = std::fabs(w.valueAsDouble(base + i));
          if (a > m && a <= DBL_MAX) m = a;
        }
        out[(size_t)c] = (float)m;
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Searches on a histogram

int64_t entropyCutoff(std::span<const double> hist, int startBin, int quantBins, bool replaceBin0) {
  const int64_t nb = (int64_t)hist.size();
  const int64_t start = std::max<int64_t>(startBin, 1);
  const int64_t nq = std::max(quantBins, 1);
  if (nb == 0 || nb < start) return -1;

  std::vector<double> b(hist.begin(), hist.end());
  if (replaceBin0 && nb > 1) b[0] = b[1];
  // Suffix sums (clipped mass) and prefix sums (kept mass), both exact for integer counts.
  std::vector<double> suffix((size_t)nb + 1, 0.0), prefix((size_t)nb + 1, 0.0), logb((size_t)nb, 0.0);
  for (int64_t j = nb - 1; j >= 0; --j) suffix[(size_t)j] = suffix[(size_t)j + 1] + b[(size_t)j];
  for (int64_t j = 0; j < nb; ++j) {
    prefix[(size_t)j + 1] = prefix[(size_t)j] + b[(size_t)j];
    if (b[(size_t)j] > 0) logb[(size_t)j] = std::log(b[(size_t)j]);
  }
  const double total = suffix[0];
  if (!(total > 0)) return -1;

  // With P_j = p_j / T (p = kept counts plus the clipped mass on the last bin, sum T) and
  // Q_j = q_g / S (q_g = group g's mean over its nonzero bins, sum S = kept mass):
  //   KL = sum_j (p_j / T) * log((p_j / q_g) * (S / T)) = (1/T) sum_j p_j (log p_j - log q_g) + log(S / T).
  // When P equals Q (a flat group, no clipping) every term is exactly zero, so exact ties stay ties.
  int64_t best = -1;
  double bestKl = kInf;
  for (int64_t i = start; i <= nb; ++i) {
    const double kept = prefix[(size_t)i];
    const double clipped = suffix[(size_t)i];
    if (!(kept > 0)) continue;                          // Q undefined (scipy: nan): never chosen
    if (clipped > 0 && b[(size_t)i - 1] == 0) continue;  // P > 0 where Q = 0: KL = +inf
    double acc = 0.0;
    for (int64_t g = 0; g < nq; ++g) {
      const int64_t s = (g * i + nq - 1) / nq;  // first j with floor(j * nq / i) == g
      const int64_t e = ((g + 1) * i + nq - 1) / nq;
      double sum = 0.0;
      int64_t nonzero = 0;
      for (int64_t j = s; j < e; ++j) {
        const double c = b[(size_t)j];
        if (c > 0) {
          sum += c;
          ++nonzero;
        }
      }
      if (nonzero == 0) continue;
      const double logq = std::log(sum / (double)nonzero);
      const int64_t plainEnd = (e == i && clipped > 0) ? e - 1 : e;
      for (int64_t j = s; j < plainEnd; ++j) {
        const double c = b[(size_t)j];
        if (c > 0) acc += c * (logb[(size_t)j] - logq);
      }
      if (plainEnd != e) {
        const double p = b[(size_t)i - 1] + clipped;
        acc += p * (std::log(p) - logq);
      }
    }
    const double kl = acc / total + std::log(kept / total);
    if (kl <= bestKl + 1e-12) {
      best = i;
      bestKl = std::min(bestKl, kl);
    }
  }
  return best;
}

double histogramPercentile(std::span<const double> hist, double width, double p) {
  double total = 0.0;
  for (double c : hist) total += c;
  if (!(total > 0)) return 0.0;
  p = std::clamp(p, 0.0, 100.0);
  const double target = p / 100.0 * total;
  double cum = 0.0;
  for (size_t k = 0; k < hist.size(); ++k) {
    const double c = hist[k];
    if (c > 0 && cum + c >= target) {
      const double frac = std::clamp((target - cum) / c, 0.0, 1.0);
      return ((double)k + frac) * width;
    }
    cum += c;
  }
  return (double)hist.size() * width;
}

double histogramMseAmax(std::span<const double> hist, double width, QuantMode mode, int startBin) {
  const int64_t nb = (int64_t)hist.size();
  if (nb == 0) return 0.0;
  // Only nonzero bins contribute to the error.
  std::vector<float> centres;
  std::vector<double> counts;
  for (int64_t k = 0; k < nb; ++k) {
    if (hist[(size_t)k] > 0) {
      centres.push_back((float)(((double)k + 0.5) * width));
      counts.push_back(hist[(size_t)k]);
    }
  }
  if (centres.empty()) return 0.0;
  std::vector<float> q(centres.size());
  const int64_t start = nb > startBin ? std::max(startBin, 0) : 0;
  double bestErr = kInf, bestAmax = 0.0;
  for (int64_t k = start; k < nb; ++k) {
    const float amax = (float)(((double)k + 0.5) * width);
    const float scale = scaleFromAmax(amax, mode);
    if (mode == QuantMode::Fp8) fakeQuantFp8(centres.data(), q.data(), (int64_t)centres.size(), scale);
    else fakeQuantInt8(centres.data(), q.data(), (int64_t)centres.size(), scale, kActQmin, kActQmax);
    double err = 0.0;
    for (size_t j = 0; j < centres.size(); ++j) {
      const double d = (double)centres[j] - (double)q[j];
      err += counts[j] * d * d;
    }
    if (err < bestErr) {
      bestErr = err;
      bestAmax = amax;
    }
  }
  return bestAmax;
}

}  // namespace qs
