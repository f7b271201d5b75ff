// 1x1 Conv over a 1x1 image as a matrix-vector product (the Conv kernel's path
// for SE blocks).
#include "core/kernels/conv_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace qs {

namespace {

constexpr int64_t kSlice = 256;  // the GEMM's K slice (core/kernels/gemm.cpp, KC): same sums
constexpr int64_t kRows = 32;    // output channels per pass: four independent 8-lane chains

}  // namespace

// Subnormal weights (PP-LCNet's SE convs in rec hold 3-13 thousand each) are packed as zeros: the
// FMAs over them took microcode assists, and rec's two 1x1 SE reduce convs ran 0.06 and 0.25 ms
// instead of 0.005 and 0.016. A product w * x with |w| < 2^-126 is below half an ulp of a running
// sum of normal magnitude, so the sums keep their bits (rec, det and cls outputs unchanged).
PointwiseGemv::PointwiseGemv(const Tensor& W) {
  if (W.dtype() != DType::Float || W.rank() < 3) return;
  for (int64_t d = 2; d < W.rank(); ++d)
    if (W.dim(d) != 1) return;
  const int64_t M = W.dim(0), C = W.dim(1);
  if (M <= 0 || C <= 0) return;
  m_M = M;
  m_C = C;
  m_Mpad = (M + kRows - 1) / kRows * kRows;
  m_wt.assign((size_t)(C * m_Mpad), 0.f);
  const float* w = W.data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) {
      const float v = w[m * C + c];
      const bool subnormal = std::fpclassify(v) == FP_SUBNORMAL;
      m_flushed += subnormal ? 1 : 0;
      m_wt[(size_t)(c * m_Mpad + m)] = subnormal ? 0.f : v;
    }
}

void PointwiseGemv::run(const float* x, int64_t N, const float* bias, const std::vector<FusedActivation>& activations,
                        float* y) const {
  alignas(32) float out[kRows];
  for (int64_t n = 0; n < N; ++n) {
    const float* xn = x + n * m_C;
    float* yn = y + n * m_M;
    for (int64_t m0 = 0; m0 < m_Mpad; m0 += kRows) {
      __m256 t0 = _mm256_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
      for (int64_t k0 = 0; k0 < m_C; k0 += kSlice) {
        const int64_t k1 = std::min(m_C, k0 + kSlice);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t k = k0; k < k1; ++k) {
          const float* wk = m_wt.data() + k * m_Mpad + m0;
          const __m256 xv = _mm256_broadcast_ss(xn + k);
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wk), xv, a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wk + 8), xv, a1);
          a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wk + 16), xv, a2);
          a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wk + 24), xv, a3);
        }
        if (k0 == 0) {
          t0 = a0, t1 = a1, t2 = a2, t3 = a3;
        } else {  // the GEMM adds each later slice's sum to C: slice + C
          t0 = _mm256_add_ps(a0, t0), t1 = _mm256_add_ps(a1, t1), t2 = _mm256_add_ps(a2, t2),
          t3 = _mm256_add_ps(a3, t3);
        }
      }
      _mm256_store_ps(out, t0);
      _mm256_store_ps(out + 8, t1);
      _mm256_store_ps(out + 16, t2);
      _mm256_store_ps(out + 24, t3);
      const int64_t count = std::min(kRows, m_M - m0);
      for (int64_t i = 0; i < count; ++i) yn[m0 + i] = out[i];
    }
    // The GEMM path's epilogue per channel: y + bias (skipped for a zero bias),
    // then the activations; both elementwise with one formula for every lane
    // and the tail.
    if (bias)
      for (int64_t m = 0; m < m_M; ++m)
        if (bias[m] != 0.f) yn[m] += bias[m];
    if (!activations.empty()) applyFusedActivations(yn, m_M, 0.f, activations);
  }
}

}  // namespace qs
