#include "core/analysis/metrics.h"

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

// The four sums run in double over fixed lanes (8 per sum with AVX2: two vectors of 4), combined
// in a fixed order at the end, so a result depends only on the data, never on threads or calls.
// A single scalar chain per sum was ~40% of a toggle's time: each add waited for the previous one.
#ifdef __AVX2__
namespace {
// The same sums over 8 double lanes per vector where the CPU has AVX-512 (chosen at run time: the
// build targets AVX2): twice the lanes per instruction, the same double precision. Sums the
// first n rounded down to 16 elements into out[0..3] and their largest |difference| into out[4].
// GCC 12 warns about the _mm512_undefined_*() inside its own intrinsics (a false positive).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
template <bool kError>
__attribute__((target("avx512f"))) int64_t sumsAvx512(const float* y, const float* q, int64_t n, double out[5]) {
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, e0 = s0, e1 = s0, c0 = s0, c1 = s0, d0 = s0, d1 = s0, m0 = s0, m1 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512d ya = _mm512_cvtps_pd(_mm256_loadu_ps(y + i)), yb = _mm512_cvtps_pd(_mm256_loadu_ps(y + i + 8));
    __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
    if (kError) {  // q holds candidate - reference: the candidate as float, as the caller would form it
      q0 = _mm256_add_ps(_mm256_loadu_ps(y + i), q0);
      q1 = _mm256_add_ps(_mm256_loadu_ps(y + i + 8), q1);
    }
    const __m512d qa = _mm512_cvtps_pd(q0), qb = _mm512_cvtps_pd(q1);
    const __m512d da = _mm512_sub_pd(ya, qa), db = _mm512_sub_pd(yb, qb);
    s0 = _mm512_fmadd_pd(ya, ya, s0);
    s1 = _mm512_fmadd_pd(yb, yb, s1);
    e0 = _mm512_fmadd_pd(da, da, e0);
    e1 = _mm512_fmadd_pd(db, db, e1);
    c0 = _mm512_fmadd_pd(qa, qa, c0);
    c1 = _mm512_fmadd_pd(qb, qb, c1);
    d0 = _mm512_fmadd_pd(ya, qa, d0);
    d1 = _mm512_fmadd_pd(yb, qb, d1);
    m0 = _mm512_max_pd(_mm512_abs_pd(da), m0);  // a NaN first operand yields m0
    m1 = _mm512_max_pd(_mm512_abs_pd(db), m1);
  }
  out[0] = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  out[1] = _mm512_reduce_add_pd(_mm512_add_pd(e0, e1));
  out[2] = _mm512_reduce_add_pd(_mm512_add_pd(c0, c1));
  out[3] = _mm512_reduce_add_pd(_mm512_add_pd(d0, d1));
  out[4] = _mm512_reduce_max_pd(_mm512_max_pd(m0, m1));
  return i;
}
#pragma GCC diagnostic pop
const bool kHasAvx512 = __builtin_cpu_supports("avx512f");
}  // namespace
#endif

void ErrorAccumulator::add(const float* y, const float* q, int64_t n) { addSums<false>(y, q, n); }
void ErrorAccumulator::addError(const float* y, const float* e, int64_t n) { addSums<true>(y, e, n); }

template <bool kError>
void ErrorAccumulator::addSums(const float* y, const float* q, int64_t n) {
  double s = 0, e = 0, c = 0, d = 0, m = m_maxAbs;
  int64_t i = 0;
#ifdef __AVX2__
  if (kHasAvx512 && n >= 16) {
    double t[5];
    i = sumsAvx512<kError>(y, q, n, t);
    s = t[0];
    e = t[1];
    c = t[2];
    d = t[3];
    m = std::max(m, t[4]);
  } else if (n >= 8) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, e0 = s0, e1 = s0, c0 = s0, c1 = s0, d0 = s0, d1 = s0, m0 = s0, m1 = s0;
    const __m256d absMask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
    for (; i + 8 <= n; i += 8) {
      const __m256 yf = _mm256_loadu_ps(y + i);
      const __m256 qf = kError ? _mm256_add_ps(yf, _mm256_loadu_ps(q + i)) : _mm256_loadu_ps(q + i);
      const __m256d ya = _mm256_cvtps_pd(_mm256_castps256_ps128(yf)), yb = _mm256_cvtps_pd(_mm256_extractf128_ps(yf, 1));
      const __m256d qa = _mm256_cvtps_pd(_mm256_castps256_ps128(qf)), qb = _mm256_cvtps_pd(_mm256_extractf128_ps(qf, 1));
      const __m256d da = _mm256_sub_pd(ya, qa), db = _mm256_sub_pd(yb, qb);
      s0 = _mm256_fmadd_pd(ya, ya, s0);
      s1 = _mm256_fmadd_pd(yb, yb, s1);
      e0 = _mm256_fmadd_pd(da, da, e0);
      e1 = _mm256_fmadd_pd(db, db, e1);
      c0 = _mm256_fmadd_pd(qa, qa, c0);
      c1 = _mm256_fmadd_pd(qb, qb, c1);
      d0 = _mm256_fmadd_pd(ya, qa, d0);
      d1 = _mm256_fmadd_pd(yb, qb, d1);
      m0 = _mm256_max_pd(_mm256_and_pd(da, absMask), m0);  // a NaN first operand yields m0
      m1 = _mm256_max_pd(_mm256_and_pd(db, absMask), m1);
    }
    auto sum = [](__m256d a, __m256d b) {
      alignas(32) double t[4];
      _mm256_store_pd(t, _mm256_add_pd(a, b));
      return (t[0] + t[1]) + (t[2] + t[3]);
    };
    s = sum(s0, s1);
    e = sum(e0, e1);
    c = sum(c0, c1);
    d = sum(d0, d1);
    alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_max_pd(m0, m1));
    // NaN differences are skipped, as std::max(m, NaN) keeps m in the scalar tail.
    m = std::max(m, std::max(std::max(t[0], t[1]), std::max(t[2], t[3])));
  }
#endif
  for (; i < n; ++i) {
    double a = y[i], b = kError ? (float)(y[i] + q[i]) : q[i], diff = a - b;
    s += a * a;
    e += diff * diff;
    c += b * b;
    d += a * b;
    m = std::max(m, std::fabs(diff));
  }
  m_signal += s;
  m_noise += e;
  m_cand += c;
  m_dot += d;
  m_maxAbs = m;
  m_count += n;
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
  for (int64_t i = 0; i < n; ++i) {
    double a = y.valueAsDouble(i), b = q.valueAsDouble(i), diff = a - b;
    m_signal += a * a;
    m_noise += diff * diff;
    m_cand += b * b;
    m_dot += a * b;
    m_maxAbs = std::max(m_maxAbs, std::fabs(diff));
  }
  m_count += n;
}

void ErrorAccumulator::merge(const ErrorAccumulator& o) {
  m_signal += o.m_signal;
  m_noise += o.m_noise;
  m_cand += o.m_cand;
  m_dot += o.m_dot;
  m_maxAbs = std::max(m_maxAbs, o.m_maxAbs);
  m_count += o.m_count;
}

ErrorMetrics ErrorAccumulator::metrics() const {
  ErrorMetrics m;
  m.count = m_count;
  m.snrDb = snrDb(m_signal, m_noise);
  double denom = std::sqrt(m_signal) * std::sqrt(m_cand);
  m.cosine = denom > 0 ? m_dot / denom : (m_signal == 0 && m_cand == 0 ? 1.0 : 0.0);
  m.mse = m_count ? m_noise / (double)m_count : 0.0;
  m.maxAbs = m_maxAbs;
  return m;
}

}  // namespace qs
