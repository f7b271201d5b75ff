#include "core/numeric/metrics.h"

#include <cstdlib>
#include <string>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/exec/parallel.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace qs {

double snrDb(double signal, double noise) {
  if (noise <= 0) return std::numeric_limits<double>::infinity();
  if (signal <= 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

// The sums of one block of lanes: products in float32 over kLaneBlock vectors, then each lane
// added into double lanes (AVX-512 where the CPU has it, chosen at run time: the build targets
// AVX2). The lanes are combined in a fixed order at the end, so a result depends only on the
// data, never on threads or calls. A block whose float sums are not finite (overflow, NaN) is
// summed again in double by the caller. A single scalar chain per sum was once ~40% of a
// toggle's time (each add waited for the previous one); products in double, a quarter of an
// analysis.
namespace {
// Where a call stopped: elements summed, and the first element of a block to sum again in double
// (-1 if none).
struct LaneStop {
  int64_t done = 0, redo = -1;
};

#ifdef __AVX2__
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
// GCC 12 warns about the _mm512_undefined_*() inside its own intrinsics (a false positive).
// The low and high 8 float lanes of v in double.
__attribute__((target("avx512f"))) inline __m512d lo(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
__attribute__((target("avx512f"))) inline __m512d hi(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
// Sums [y, q) into the double lanes of `st` until a block is not finite (returned in redo).
template <bool kError>
__attribute__((target("avx512f"))) LaneStop sumsAvx512(const float* y, const float* q, int64_t n,
                                                       ErrorAccumulator::Lanes& st) {
  constexpr int64_t W = 16;
  __m512d s0 = _mm512_load_pd(st.s), s1 = _mm512_load_pd(st.s + 8), e0 = _mm512_load_pd(st.e), e1 = _mm512_load_pd(st.e + 8);
  __m512d p0 = _mm512_load_pd(st.p), p1 = _mm512_load_pd(st.p + 8), y0 = _mm512_load_pd(st.y), y1 = _mm512_load_pd(st.y + 8);
  __m512d d0 = _mm512_load_pd(st.d), d1 = _mm512_load_pd(st.d + 8);
  __m512 m = _mm512_load_ps(st.m);
  LaneStop r;
  int64_t i = 0;
  // Blocks of kLaneBlock vectors; the last vector of all may be partial: its missing lanes load
  // as 0 (y = q = 0 adds nothing to any sum), so a short run needs no scalar tail.
  while (i < n) {
    const int64_t end = std::min(n, i + ErrorAccumulator::kLaneBlock * W);
    __m512 s = _mm512_setzero_ps(), e = s, p = s, bm = s, ys = s, ds = s;
    for (int64_t k = i; k < end; k += W) {
      const __mmask16 lanes = end - k >= W ? (__mmask16)0xffff : (__mmask16)((1u << (end - k)) - 1);
      const __m512 yv = _mm512_maskz_loadu_ps(lanes, y + k);
      // kError: q holds candidate - reference; the candidate as float, as the caller would form it.
      const __m512 qv = kError ? _mm512_add_ps(yv, _mm512_maskz_loadu_ps(lanes, q + k)) : _mm512_maskz_loadu_ps(lanes, q + k);
      const __m512 d = _mm512_sub_ps(yv, qv);
      s = _mm512_fmadd_ps(yv, yv, s);
      e = _mm512_fmadd_ps(d, d, e);
      p = _mm512_fmadd_ps(d, _mm512_add_ps(yv, qv), p);
      ys = _mm512_add_ps(ys, yv);
      ds = _mm512_add_ps(ds, d);
      bm = _mm512_max_ps(_mm512_abs_ps(d), bm);  // a NaN first operand yields bm
    }
    // x - x is NaN exactly where x is Inf or NaN.
    const __m512 z = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_sub_ps(s, s), _mm512_sub_ps(e, e)), _mm512_sub_ps(p, p)),
                                   _mm512_add_ps(_mm512_sub_ps(ys, ys), _mm512_sub_ps(ds, ds)));
    if (_mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q) != 0) {
      r.redo = i;
      break;
    }
    m = _mm512_max_ps(bm, m);
    s0 = _mm512_add_pd(s0, lo(s));
    s1 = _mm512_add_pd(s1, hi(s));
    e0 = _mm512_add_pd(e0, lo(e));
    e1 = _mm512_add_pd(e1, hi(e));
    p0 = _mm512_add_pd(p0, lo(p));
    p1 = _mm512_add_pd(p1, hi(p));
    y0 = _mm512_add_pd(y0, lo(ys));
    y1 = _mm512_add_pd(y1, hi(ys));
    d0 = _mm512_add_pd(d0, lo(ds));
    d1 = _mm512_add_pd(d1, hi(ds));
    i = end;
  }
  _mm512_store_pd(st.s, s0);
  _mm512_store_pd(st.s + 8, s1);
  _mm512_store_pd(st.e, e0);
  _mm512_store_pd(st.e + 8, e1);
  _mm512_store_pd(st.p, p0);
  _mm512_store_pd(st.p + 8, p1);
  _mm512_store_pd(st.y, y0);
  _mm512_store_pd(st.y + 8, y1);
  _mm512_store_pd(st.d, d0);
  _mm512_store_pd(st.d + 8, d1);
  _mm512_store_ps(st.m, m);
  r.done = i;
  return r;
}
#pragma GCC diagnostic pop

// The same over 8 float lanes (AVX2), into the first 8 double lanes of each sum.
template <bool kError>
LaneStop sumsAvx2(const float* y, const float* q, int64_t n, ErrorAccumulator::Lanes& st) {
  constexpr int64_t W = 8;
  __m256d s0 = _mm256_load_pd(st.s), s1 = _mm256_load_pd(st.s + 4), e0 = _mm256_load_pd(st.e), e1 = _mm256_load_pd(st.e + 4);
  __m256d p0 = _mm256_load_pd(st.p), p1 = _mm256_load_pd(st.p + 4), y0 = _mm256_load_pd(st.y), y1 = _mm256_load_pd(st.y + 4);
  __m256d d0 = _mm256_load_pd(st.d), d1 = _mm256_load_pd(st.d + 4);
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_load_ps(st.m);
  LaneStop r;
  int64_t i = 0;
  while (i < n) {
    const int64_t end = std::min(n, i + ErrorAccumulator::kLaneBlock * W);
    __m256 s = _mm256_setzero_ps(), e = s, p = s, bm = s, ys = s, ds = s;
    for (int64_t k = i; k < end; k += W) {
      __m256 yv, qv;
      if (end - k >= W) {
        yv = _mm256_loadu_ps(y + k);
        qv = _mm256_loadu_ps(q + k);
      } else {  // the partial last vector: missing lanes 0
        const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(end - k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        yv = _mm256_maskload_ps(y + k, lanes);
        qv = _mm256_maskload_ps(q + k, lanes);
      }
      if (kError) qv = _mm256_add_ps(yv, qv);
      const __m256 d = _mm256_sub_ps(yv, qv);
      s = _mm256_fmadd_ps(yv, yv, s);
      e = _mm256_fmadd_ps(d, d, e);
      p = _mm256_fmadd_ps(d, _mm256_add_ps(yv, qv), p);
      ys = _mm256_add_ps(ys, yv);
      ds = _mm256_add_ps(ds, d);
      bm = _mm256_max_ps(_mm256_and_ps(d, absMask), bm);
    }
    const __m256 z = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_sub_ps(s, s), _mm256_sub_ps(e, e)), _mm256_sub_ps(p, p)),
                                   _mm256_add_ps(_mm256_sub_ps(ys, ys), _mm256_sub_ps(ds, ds)));
    if (_mm256_movemask_ps(_mm256_cmp_ps(z, z, _CMP_UNORD_Q)) != 0) {
      r.redo = i;
      break;
    }
    m = _mm256_max_ps(bm, m);
    auto lo = [](__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); };
    auto hi = [](__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); };
    s0 = _mm256_add_pd(s0, lo(s));
    s1 = _mm256_add_pd(s1, hi(s));
    e0 = _mm256_add_pd(e0, lo(e));
    e1 = _mm256_add_pd(e1, hi(e));
    p0 = _mm256_add_pd(p0, lo(p));
    p1 = _mm256_add_pd(p1, hi(p));
    y0 = _mm256_add_pd(y0, lo(ys));
    y1 = _mm256_add_pd(y1, hi(ys));
    d0 = _mm256_add_pd(d0, lo(ds));
    d1 = _mm256_add_pd(d1, hi(ds));
    i = end;
  }
  _mm256_store_pd(st.s, s0);
  _mm256_store_pd(st.s + 4, s1);
  _mm256_store_pd(st.e, e0);
  _mm256_store_pd(st.e + 4, e1);
  _mm256_store_pd(st.p, p0);
  _mm256_store_pd(st.p + 4, p1);
  _mm256_store_pd(st.y, y0);
  _mm256_store_pd(st.y + 4, y1);
  _mm256_store_pd(st.d, d0);
  _mm256_store_pd(st.d + 4, d1);
  _mm256_store_ps(st.m, m);
  r.done = i;
  return r;
}
// QS_SUMS=avx2 keeps the 8-lane AVX2 sums on an AVX-512 CPU: the two orders of summation differ
// in the last bits, and the report fixtures (tests/export/test_report_fixtures.cpp), recorded on
// an AVX2 machine, compare at 1e-9.
const bool kHasAvx512 = __builtin_cpu_supports("avx512f") &&
                        !(std::getenv("QS_SUMS") && std::string(std::getenv("QS_SUMS")) == "avx2");
#endif

// 16 lanes in a fixed order.
double laneTotal(const double* a) {
  double t[8];
  for (int k = 0; k < 8; ++k) t[k] = a[k] + a[k + 8];
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}
}  // namespace

void ErrorAccumulator::add(const float* y, const float* q, int64_t n) { addSums<false>(y, q, n); }
void ErrorAccumulator::addError(const float* y, const float* e, int64_t n) { addSums<true>(y, e, n); }
void ErrorAccumulator::add(Lanes& lanes, const float* y, const float* q, int64_t n) { addLanes<false>(lanes, y, q, n); }
void ErrorAccumulator::addError(Lanes& lanes, const float* y, const float* e, int64_t n) { addLanes<true>(lanes, y, e, n); }

// One element in double: the products exact up to double rounding (the path of short tails and
// of blocks whose float sums are not finite).
void ErrorAccumulator::addDouble(double a, double b) {
  const double d = a - b;
  m_signal += a * a;
  m_noise += d * d;
  m_diff += d * (a + b);
  m_sumY += a;
  m_sumD += d;
  // |d| rounded to float, as the vector lanes keep it; NaN skipped (std::max keeps m).
  m_maxAbs = std::max(m_maxAbs, (double)std::fabs((float)d));
}

template <bool kError>
void ErrorAccumulator::addLanes(Lanes& st, const float* y, const float* q, int64_t n) {
  int64_t i = 0;
#ifdef __AVX2__
  while (i < n) {
    const LaneStop r = kHasAvx512 ? sumsAvx512<kError>(y + i, q + i, n - i, st) : sumsAvx2<kError>(y + i, q + i, n - i, st);
    if (r.redo < 0) {
      i += r.done;
      break;
    }
    // A block the float sums cannot hold: in double, then the vectors go on after it.
    const int64_t b0 = i + r.redo, b1 = std::min(n, b0 + kLaneBlock * (kHasAvx512 ? 16 : 8));
    for (int64_t k = b0; k < b1; ++k) addDouble(y[k], kError ? (double)(float)(y[k] + q[k]) : (double)q[k]);
    i = b1;
  }
#endif
  for (; i < n; ++i) addDouble(y[i], kError ? (double)(float)(y[i] + q[i]) : (double)q[i]);
  m_count += n;
}

void ErrorAccumulator::flush(Lanes& st) {
  m_signal += laneTotal(st.s);
  m_noise += laneTotal(st.e);
  m_diff += laneTotal(st.p);
  m_sumY += laneTotal(st.y);
  m_sumD += laneTotal(st.d);
  for (float v : st.m) m_maxAbs = std::max(m_maxAbs, (double)v);
  st = Lanes();
}

template <bool kError>
void ErrorAccumulator::addSums(const float* y, const float* q, int64_t n) {
  Lanes st;
  addLanes<kError>(st, y, q, n);
  flush(st);
}

void ErrorAccumulator::addError(const Tensor& y, const Tensor& e, int threads) {
  const int64_t n = std::min(y.numel(), e.numel());
  if (y.dtype() != DType::Float || e.dtype() != DType::Float) {
    Tensor q(DType::Float, Shape{n});
    for (int64_t i = 0; i < n; ++i) q.data<float>()[i] = (float)(y.valueAsDouble(i) + e.valueAsDouble(i));
    add(y, q, threads);
    return;
  }
  addBlocks<true>(y.data<float>(), e.data<float>(), n, threads);
}

template <bool kError>
void ErrorAccumulator::addBlocks(const float* a, const float* b, int64_t n, int threads) {
  if (n <= kBlock) {
    addSums<kError>(a, b, n);
    return;
  }
  // Threads take blocks, never parts of a sum: the same blocks and order for any thread count.
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<ErrorAccumulator> part((size_t)blocks);
  parallelFor(threads, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t k = b0; k < b1; ++k) {
      const int64_t off = k * kBlock;
      part[(size_t)k].addSums<kError>(a + off, b + off, std::min(kBlock, n - off));
    }
  });
  for (const ErrorAccumulator& p : part) merge(p);
}

void ErrorAccumulator::add(const Tensor& y, const Tensor& q, int threads) {
  int64_t n = std::min(y.numel(), q.numel());
  if (y.dtype() == DType::Float && q.dtype() == DType::Float) {
    addBlocks<false>(y.data<float>(), q.data<float>(), n, threads);
    return;
  }
  for (int64_t i = 0; i < n; ++i) addDouble(y.valueAsDouble(i), q.valueAsDouble(i));
  m_count += n;
}

void ErrorAccumulator::merge(const ErrorAccumulator& o) {
  m_signal += o.m_signal;
  m_noise += o.m_noise;
  m_diff += o.m_diff;
  m_sumY += o.m_sumY;
  m_sumD += o.m_sumD;
  m_maxAbs = std::max(m_maxAbs, o.m_maxAbs);
  m_count += o.m_count;
}

ErrorAccumulator ErrorAccumulator::affine(double a, double b) const {
  // y' = a y + b, q' = a q + b: d' = a d, y' + q' = a (y + q) + 2 b.
  ErrorAccumulator r;
  const double n = (double)m_count;
  r.m_signal = a * a * m_signal + 2 * a * b * m_sumY + n * b * b;
  r.m_noise = a * a * m_noise;
  r.m_diff = a * a * m_diff + 2 * a * b * m_sumD;
  r.m_sumY = a * m_sumY + n * b;
  r.m_sumD = a * m_sumD;
  r.m_maxAbs = std::fabs(a) * m_maxAbs;
  r.m_count = m_count;
  return r;
}

ErrorMetrics ErrorAccumulator::metrics() const {
  ErrorMetrics m;
  m.count = m_count;
  m.snrDb = snrDb(m_signal, m_noise);
  // sum y'^2 and sum y y' from the accumulated sums (see the class comment).
  const double cand = std::max(0.0, m_signal - m_diff), dot = m_signal - 0.5 * (m_noise + m_diff);
  const double denom = std::sqrt(m_signal) * std::sqrt(cand);
  m.cosine = denom > 0 ? std::clamp(dot / denom, -1.0, 1.0) : (m_signal == 0 && cand == 0 ? 1.0 : 0.0);
  m.mse = m_count ? m_noise / (double)m_count : 0.0;
  m.maxAbs = m_maxAbs;
  return m;
}

}  // namespace qs
