// Softmax and LogSoftmax (opsets 1..12: 2-D coercion at axis; 13..21: single axis).
#include "core/kernels/softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "core/kernels/elementwise.h"

namespace qs {
namespace {

using namespace ew;

template <class T>
using EArr = Eigen::Array<T, Eigen::Dynamic, 1>;

/// Maximum of x[0..n) with independent lane accumulators (vectorises; -inf for n == 0).
template <class T>
T rowMax(const T* x, int64_t n) {
  constexpr int W = 16;
  T acc[W];
  for (int k = 0; k < W; ++k) acc[k] = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + W <= n; i += W)
    for (int k = 0; k < W; ++k) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
  T m = -std::numeric_limits<T>::infinity();
  for (int k = 0; k < W; ++k) m = acc[k] > m ? acc[k] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

/// Softmax of one contiguous row of length L.
template <class T, bool Log>
void softmaxRow(const T* x, T* y, int64_t L) {
  const T m = rowMax(x, L);
  Eigen::Map<const EArr<T>> X(x, L);
  Eigen::Map<EArr<T>> Y(y, L);
  Y = (X - m).exp();
  const T s = Y.sum();
  if constexpr (Log) {
    const T shift = m + std::log(s);
    Y = X - shift;
  } else {
    Y *= T(1) / s;
  }
}

/// Softmax along the middle dim of a [L, inner] block restricted to columns [j0, j1).
template <class T, bool Log>
void softmaxColumns(const T* x, T* y, int64_t L, int64_t inner, int64_t j0, int64_t j1, T* mx, T* sum) {
  const int64_t w = j1 - j0;
  for (int64_t j = 0; j < w; ++j) {
    mx[j] = -std::numeric_limits<T>::infinity();
    sum[j] = 0;
  }
  for (int64_t l = 0; l < L; ++l) {
    const T* xr = x + l * inner + j0;
    for (int64_t j = 0; j < w; ++j) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j];
  }
  for (int64_t l = 0; l < L; ++l) {
    const T* xr = x + l * inner + j0;
    T* yr = y + l * inner + j0;
    for (int64_t j = 0; j < w; ++j) yr[j] = xr[j] - mx[j];
    Eigen::Map<EArr<T>> Y(yr, w);
    Y = Y.exp();
    for (int64_t j = 0; j < w; ++j) sum[j] += yr[j];
  }
  if constexpr (Log) {
    for (int64_t j = 0; j < w; ++j) sum[j] = mx[j] + std::log(sum[j]);
    for (int64_t l = 0; l < L; ++l) {
      const T* xr = x + l * inner + j0;
      T* yr = y + l * inner + j0;
      for (int64_t j = 0; j < w; ++j) yr[j] = xr[j] - sum[j];
    }
  } else {
    for (int64_t j = 0; j < w; ++j) sum[j] = T(1) / sum[j];
    for (int64_t l = 0; l < L; ++l) {
      T* yr = y + l * inner + j0;
      for (int64_t j = 0; j < w; ++j) yr[j] *= sum[j];
    }
  }
}

// exp(x) for 8 floats x <= 0 (x - the row's maximum): Cephes' expf, as Eigen's and MLAS's,
// 2^n * p(r) with n = round(x / ln 2). Below -87.3 (2^-126) the result is 0, NaN stays NaN.
inline __m256 expNonPositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(lo, x);  // a NaN x passes through (max returns its second operand)
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

inline float horizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float horizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// QS_SOFTMAX=eigen: float rows through softmaxRow (Eigen's exp), the kernel before softmaxRowFloat,
// whose exp differs in the last bits; for A/B runs and the report fixtures recorded with the old one
// (tests/export/test_report_fixtures.cpp).
bool eigenSoftmaxRows() {
  static const bool eigen = [] {
    const char* v = std::getenv("QS_SOFTMAX");
    return v != nullptr && std::string_view(v) == "eigen";
  }();
  return eigen;
}

}  // namespace

void softmaxRowAsKernel(const float* x, float* y, int64_t L) {
  if (!eigenSoftmaxRows()) softmaxRowFloat(x, y, L);
  else softmaxRow<float, false>(x, y, L);
}

namespace {

template <class T, bool Log>
void softmaxTyped(const T* x, T* y, int64_t outer, int64_t L, int64_t inner, const KernelContext& ctx) {
  if (outer * L * inner == 0) return;
  const bool eigenRows = eigenSoftmaxRows();
  if (inner == 1) {
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(L, 1));
    auto body = [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        if constexpr (std::is_same_v<T, float> && !Log) {
          if (!eigenRows) softmaxRowFloat(x + o * L, y + o * L, L);
          else softmaxRow<T, Log>(x + o * L, y + o * L, L);
        } else {
          softmaxRow<T, Log>(x + o * L, y + o * L, L);
        }
      }
    };
    if (outer < 2 * grain || ctx.threads <= 1) {
      body(0, outer);
    } else {
      ctx.parallelFor(outer, grain, body);
    }
    return;
  }
  // Column tiles of at most 256 so that the running max / sum stay in L1.
  const int64_t tile = 256;
  const int64_t tilesPerBlock = (inner + tile - 1) / tile;
  const int64_t items = outer * tilesPerBlock;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(L * std::min(inner, tile), 1));
  auto body = [&](int64_t b, int64_t e) {
    std::vector<T> mx((size_t)tile), sum((size_t)tile);
    for (int64_t it = b; it < e; ++it) {
      const int64_t o = it / tilesPerBlock;
      const int64_t j0 = (it % tilesPerBlock) * tile;
      const int64_t j1 = std::min(inner, j0 + tile);
      softmaxColumns<T, Log>(x + o * L * inner, y + o * L * inner, L, inner, j0, j1, mx.data(), sum.data());
    }
  };
  if (items < 2 * grain || ctx.threads <= 1) {
    body(0, items);
  } else {
    ctx.parallelFor(items, grain, body);
  }
}

// The tensor as [outer, L, inner] around `axisAttr`: L is the axis (opset >= 13) or, in the
// legacy form, every dim from the axis on (the input coerced to 2D).
Status axisBlocks(const char* name, const Shape& s, int64_t axisAttr, bool legacy, int64_t& outer, int64_t& L,
                  int64_t& inner) {
  const int64_t rank = (int64_t)s.size();
  int64_t axis = axisAttr;
  if (rank == 0) {
    axis = 0;
  } else if (!normalizeAxis(axis, rank)) {
    return invalidArgument(std::string(name) + ": axis " + std::to_string(axisAttr) + " is out of range for shape " +
                           shapeToString(s));
  }
  outer = L = inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) {
      outer *= s[(size_t)d];
    } else if (legacy || d == axis) {
      L *= s[(size_t)d];
    } else {
      inner *= s[(size_t)d];
    }
  }
  return Status::ok();
}

// The input of Softmax, LogSoftmax or Hardmax as [outer, L, inner], float16 promoted to float,
// and a buffer for the output.
struct AxisInput {
  Tensor x, out;
  int64_t outer = 1, L = 1, inner = 1;
};
Status prepareAxisInput(const char* name, bool legacy, int64_t axisAttr, KernelContext& ctx, AxisInput& in) {
  if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument(std::string(name) + " needs 1 input");
  QS_RETURN_IF_ERROR(axisBlocks(name, ctx.input(0).shape(), axisAttr, legacy, in.outer, in.L, in.inner));
  in.x = promoteHalf(ctx.input(0), &ctx);
  in.out = Tensor(in.x.dtype(), in.x.shape());
  return Status::ok();
}

Status runSoftmax(bool log, bool legacy, int64_t axisAttr, KernelContext& ctx) {
  const char* name = log ? "LogSoftmax" : "Softmax";
  AxisInput in;
  QS_RETURN_IF_ERROR(prepareAxisInput(name, legacy, axisAttr, ctx, in));
  const Tensor& X = ctx.input(0);
  const Tensor& x = in.x;
  Tensor& out = in.out;
  const int64_t outer = in.outer, L = in.L, inner = in.inner;
  bool ok = visitFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (log) {
      softmaxTyped<T, true>(x.data<T>(), out.data<T>(), outer, L, inner, ctx);
    } else {
      softmaxTyped<T, false>(x.data<T>(), out.data<T>(), outer, L, inner, ctx);
    }
  });
  if (!ok) return unsupported(std::string(name) + ": dtype " + dtypeName(X.dtype()) + " is not supported");
  ctx.outputs[0] = demoteHalf(out, X.dtype(), &ctx);
  return Status::ok();
}

template <class T>
void hardmaxTyped(const T* x, T* y, int64_t outer, int64_t L, int64_t inner) {
  std::fill(y, y + outer * L * inner, T(0));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      const T* xc = x + o * L * inner + j;
      int64_t best = 0;
      for (int64_t l = 1; l < L; ++l)
        if (xc[l * inner] > xc[best * inner]) best = l;
      if (L > 0) y[o * L * inner + best * inner + j] = T(1);
    }
}

Status runHardmax(bool legacy, int64_t axisAttr, KernelContext& ctx) {
  AxisInput in;
  QS_RETURN_IF_ERROR(prepareAxisInput("Hardmax", legacy, axisAttr, ctx, in));
  const Tensor& X = ctx.input(0);
  Tensor& out = in.out;
  bool ok = visitFloat(in.x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    hardmaxTyped<T>(in.x.data<T>(), out.data<T>(), in.outer, in.L, in.inner);
  });
  if (!ok) return unsupported("Hardmax: dtype " + dtypeName(X.dtype()) + " is not supported");
  ctx.outputs[0] = demoteHalf(out, X.dtype(), &ctx);
  return Status::ok();
}

Result<std::unique_ptr<Kernel>> create(const KernelInit& init, bool log) {
  const bool legacy = init.opset < 13;
  AttrReader a(init);
  const int64_t axis = a.i("axis", legacy ? 1 : -1);
  if (!a.ok()) return a.status();
  return makeKernel([log, legacy, axis](KernelContext& ctx) { return runSoftmax(log, legacy, axis, ctx); });
}

}  // namespace

void softmaxRowFloatAvx2(const float* x, float* y, int64_t L) {
  if (L <= 0) return;
  static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t full = L & ~int64_t(7), rem = L - full;
  const __m256i mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - rem));
  // Maximum; a NaN entry is skipped, as rowMax skips it (max returns its second operand).
  __m256 vm = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < full; i += 8) vm = _mm256_max_ps(_mm256_loadu_ps(x + i), vm);
  float m = horizontalMax(vm);
  for (int64_t i = full; i < L; ++i) m = x[i] > m ? x[i] : m;
  const __m256 vmax = _mm256_set1_ps(m);
  __m256 vs = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 e = expNonPositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(y + i, e);
    vs = _mm256_add_ps(vs, e);
  }
  if (rem) {
    const __m256 e = _mm256_and_ps(expNonPositive(_mm256_sub_ps(_mm256_maskload_ps(x + full, mask), vmax)),
                                   _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(y + full, mask, e);
    vs = _mm256_add_ps(vs, e);
  }
  const __m256 inv = _mm256_set1_ps(1.f / horizontalSum(vs));
  for (int64_t i = 0; i < full; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
  if (rem) _mm256_maskstore_ps(y + full, mask, _mm256_mul_ps(_mm256_maskload_ps(y + full, mask), inv));
}

namespace {

// GCC 12 warns on the _mm512_undefined_* operands inside its own AVX-512 intrinsics (a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// expNonPositive on 16 lanes: the same operations lane by lane, so the same bits.
__attribute__((target("avx512f,avx512dq"))) inline __m512 expNonPositive512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);  // not (x < lo): a NaN is kept
  x = _mm512_max_ps(lo, x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
}

}  // namespace

// The AVX2 row's sums in the AVX2 row's order: each 16-lane exp is added to the 8-lane sum as its
// low half then its high half, as the AVX2 loop adds two consecutive vectors, so the sum, its
// reciprocal and every output have the AVX2 bits; only the exp and the passes run 16 wide.
__attribute__((target("avx512f,avx512dq"))) void softmaxRowFloatAvx512(const float* x, float* y, int64_t L) {
  if (L <= 0) return;
  const int64_t full16 = L & ~int64_t(15), full = L & ~int64_t(7);
  __m512 vm16 = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < full16; i += 16) vm16 = _mm512_max_ps(_mm512_loadu_ps(x + i), vm16);
  __m256 vm = _mm256_max_ps(_mm512_castps512_ps256(vm16), _mm512_extractf32x8_ps(vm16, 1));
  if (full16 < full) vm = _mm256_max_ps(_mm256_loadu_ps(x + full16), vm);
  float m = horizontalMax(vm);
  for (int64_t i = full; i < L; ++i) m = x[i] > m ? x[i] : m;
  const __m512 vmax = _mm512_set1_ps(m);
  __m256 vs = _mm256_setzero_ps();
  for (int64_t i = 0; i < full16; i += 16) {
    const __m512 e = expNonPositive512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
    _mm512_storeu_ps(y + i, e);
    vs = _mm256_add_ps(vs, _mm512_castps512_ps256(e));
    vs = _mm256_add_ps(vs, _mm512_extractf32x8_ps(e, 1));
  }
  if (full16 < L) {  // the last 1..15: lanes past L masked (zero, not stored)
    const int64_t left = L - full16;
    const __mmask16 mk = (__mmask16)((1u << left) - 1u);
    const __m512 e = _mm512_maskz_mov_ps(
        mk, expNonPositive512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + full16), vmax)));
    _mm512_mask_storeu_ps(y + full16, mk, e);
    vs = _mm256_add_ps(vs, _mm512_castps512_ps256(e));
    if (left > 8) vs = _mm256_add_ps(vs, _mm512_extractf32x8_ps(e, 1));
  }
  const __m512 inv = _mm512_set1_ps(1.f / horizontalSum(vs));
  for (int64_t i = 0; i < full16; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
  if (full16 < L) {
    const __mmask16 mk = (__mmask16)((1u << (L - full16)) - 1u);
    _mm512_mask_storeu_ps(y + full16, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, y + full16), inv));
  }
}

#pragma GCC diagnostic pop

bool softmaxAvx512Available() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return has;
}

void softmaxRowFloat(const float* x, float* y, int64_t L) {
  // QS_SOFTMAX=avx2 keeps the AVX2 row on an AVX-512 CPU (A/B runs); both give the same bits.
  static const bool wide = [] {
    const char* v = std::getenv("QS_SOFTMAX");
    return softmaxAvx512Available() && !(v != nullptr && std::string_view(v) == "avx2");
  }();
  if (wide) softmaxRowFloatAvx512(x, y, L);
  else softmaxRowFloatAvx2(x, y, L);
}

Result<std::unique_ptr<Kernel>> createSoftmax(const KernelInit& init) { return create(init, false); }
Result<std::unique_ptr<Kernel>> createLogSoftmax(const KernelInit& init) { return create(init, true); }

Result<std::unique_ptr<Kernel>> createHardmax(const KernelInit& init) {
  const bool legacy = init.opset < 13;
  AttrReader a(init);
  const int64_t axis = a.i("axis", legacy ? 1 : -1);
  if (!a.ok()) return a.status();
  return makeKernel([legacy, axis](KernelContext& ctx) { return runHardmax(legacy, axis, ctx); });
}

}  // namespace qs
