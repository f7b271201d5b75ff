// Integer Conv (u8 x s8 -> int32) for the analysis, with an AVX-512 VNNI GEMM and an AVX2 one
// (core/kernels/qconv_gemm_avx2.cpp) chosen at run time, and a portable one; everything but the
// micro-kernel is shared, so all give the same bits.
//
// Layout. vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds the 4 products to an
// int32 lane, so the reduction runs over groups of 4 bytes. X is quantized once per call into
// "words": one uint32 per (4 input channels, spatial position), byte j holding channel 4*c4 + j as
// q + 128 (unsigned). The reduction is ordered (channel / 4, kernel position, channel % 4), so
// that one group of the reduction for one output position is one word of the input. Weights are
// packed once in that order, in panels of 8 rows with the 4 bytes of a group adjacent (one
// broadcast per row). The +128 shift is undone per row with 128 * sum(row).
//
// No im2col. The words are stored padded (the padding written as the encoding of 0) and split by
// stride phase (for stride s, s planes per dim, plane p holding padded positions p, p + s, ...),
// so that for every kernel tap consecutive output columns read consecutive words of one plane.
// Output positions are then numbered on the plane grid, f = oh * Wph + ow, and the word a tap
// reads for position f is at f + offset(tap): a GEMM whose B operand is read in place, 32
// consecutive f per tile. The f with ow >= OW (the padding width over the stride, a few per row)
// are computed and dropped.
#include "core/kernels/qconv.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/exec/parallel.h"
#include "core/kernels/qconv_gemm.h"

namespace qs {

namespace {

using Packed = QConvWeights::Packed;

constexpr int64_t MR = QConvWeights::kRowsPerPanel;  // tile rows
constexpr int64_t NR = qconv_detail::kTileCols;       // tile columns: two zmm of 16 int32
// |sum of K products| <= K * 255 * 128 must stay below 2^31.
constexpr int64_t kMaxDepth = 65536;
// Encoding of a zero input in the word layout (q = 0 is byte 128), for X's integers and for the
// 8-bit residual words alike.
constexpr uint32_t kPadAct = 0x80808080u;

enum class GemmKind { Auto, Vnni, Avx2, Generic };
std::atomic<GemmKind> g_forced{GemmKind::Auto};

bool cpuHasVnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return has;
}

bool cpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// The GEMM in use now: the forced one, else the best the CPU has.
GemmKind gemmKind() {
  const GemmKind f = g_forced.load(std::memory_order_relaxed);
  if (f != GemmKind::Auto) return f;
  return cpuHasVnni() ? GemmKind::Vnni : cpuHasAvx2() ? GemmKind::Avx2 : GemmKind::Generic;
}

// Per-thread scratch, 64-byte aligned, grown only: the word buffers of a det-sized input are
// megabytes, which a fresh allocation would page-fault in on every call. Null when out of memory.
enum Slot { kSlotRow, kSlotAcc, kSlotAccE, kSlotXq, kSlotXe, kSlotOut, kSlots };

struct ScratchBuf {
  void* p = nullptr;
  size_t cap = 0;
  ~ScratchBuf() { std::free(p); }
};

void* scratchBytes(Slot slot, size_t bytes) {
  thread_local ScratchBuf bufs[kSlots];
  ScratchBuf& b = bufs[slot];
  bytes = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  if (bytes > b.cap || !b.p) {
    std::free(b.p);
    b.p = std::aligned_alloc(64, bytes);
    b.cap = b.p ? bytes : 0;
  }
  return b.p;
}

template <class T>
T* scratch(Slot slot, size_t n) {
  return static_cast<T*>(scratchBytes(slot, n * sizeof(T)));
}

// ------------------------------------------------------------------ weights

// rows x K int8 (W's element order, K = C * kSize) -> panels; value(row, k). wide: int16
// (the AVX2 GEMM's format), else bytes.
template <class F>
void packRows(int64_t rows, int64_t C, int64_t kSize, const F& value, bool wide, Packed& p) {
  const int64_t C4 = (C + 3) / 4;
  p.rows = rows;
  p.panels = (rows + MR - 1) / MR;
  p.groups = C4 * kSize;
  const size_t size = (size_t)(p.panels * p.groups * MR * 4);
  if (wide) p.data16.assign(size, 0);
  else p.data.assign(size, 0);
  p.rowSum.assign((size_t)rows, 0);
  for (int64_t m = 0; m < rows; ++m) {
    const int64_t at = (m / MR) * p.groups * MR * 4 + (m % MR) * 4;
    auto put = [&](int64_t i, int8_t v) {
      if (wide) p.data16[(size_t)(at + i)] = v;
      else p.data[(size_t)(at + i)] = v;
    };
    int32_t sum = 0;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kidx = 0; kidx < kSize; ++kidx) {
        const int8_t v = value(m, c * kSize + kidx);
        put(((c / 4) * kSize + kidx) * MR * 4 + (c % 4), v);
        sum += v;
      }
    p.rowSum[(size_t)m] = sum;
  }
}

// ------------------------------------------------------------------ input quantization

// Lanes [0, n) of 8 (n < 8): the mask of a partial vector at the end of a row.
inline __m256i tailMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// 8 int32 lanes of 4 channels -> 8 words, byte j of word i = lane i of channel j, narrowed with
// signed saturation (to [-128, 127]).
inline __m256i interleaveBytes(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  // Per 128-bit half (positions 0-3, then 4-7): c0[0..3] c1[0..3] c2[0..3] c3[0..3] as bytes...
  const __m256i p01 = _mm256_packs_epi32(c0, c1), p23 = _mm256_packs_epi32(c2, c3);
  const __m256i b = _mm256_packs_epi16(p01, p23);
  // ... transposed 4x4 to c0[0] c1[0] c2[0] c3[0] c0[1] ...
  const __m256i t = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,  //
                                     0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm256_shuffle_epi8(b, t);
}

// Words of 4 channel rows (src[j] null past the last channel): byte j = clamp(rne(x / s), -128,
// 127) + 128, the integers of fakeQuantInt8. Returns false on NaN or Inf. Row tails go through
// masked loads and stores (rows of 20 or 40 are common: no scalar code for their tails).
//
// No division where it is not needed: t = x * (1/s) is within 3 ulp(t) of the float quotient,
// so unless t lies within 2^-14 of a half-integer (that bound covers |t| < 128; beyond it both
// clamp to the same end) both round to the same integer. A group of lanes with such a t (rare)
// divides; so does one with a non-finite x (t - rne(t) is NaN), which is where NaN and Inf are
// detected.
//
// WithEx: also the words of X's quantization residual ex = x - s * q, from those very q (the
// FMA rounds the exact x - s * q once), at 8 bits: byte j = clamp(rne(ex * invSe), -127, 127) +
// 128. The caller's se = 1 / invSe makes 127 * se bound |ex| (see qconv), so the clamp only
// catches rounding.
template <bool WithEx>
bool quantizeWords(const float* const src[4], int64_t n, float s, uint32_t* dst, float invSe, uint32_t* exDst) {
  const float inv = 1.f / s;
  // The 3-ulp bound needs 1/s normal; otherwise every group divides.
  const bool viaInverse = std::isnormal(inv) && std::isnormal(s);
  const __m256 vs = _mm256_set1_ps(s), vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.f);
  const __m256 lo = _mm256_set1_ps(-128.f), vinvSe = _mm256_set1_ps(invSe);
  const __m256 eHi = _mm256_set1_ps(127.f), eLo = _mm256_set1_ps(-127.f);
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), near = _mm256_set1_ps(0.5f - 0x1p-14f);
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  bool ok = true;
  // Words of X's integers at [0], of ex at [1] (WithEx).
  struct Words {
    __m256i w[2];
  };
  auto words8 = [&](int64_t i, const __m256i* mask) {
    Words out{};
    __m256 x[4], t[4];
    __m256 ambiguous = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      x[j] = !src[j] ? _mm256_setzero_ps() : mask ? _mm256_maskload_ps(src[j] + i, *mask) : _mm256_loadu_ps(src[j] + i);
      const __m256 p = _mm256_mul_ps(x[j], vinv);
      t[j] = _mm256_round_ps(p, _MM_FROUND_CUR_DIRECTION);
      const __m256 d = _mm256_and_ps(_mm256_sub_ps(p, t[j]), absMask);
      ambiguous = _mm256_or_ps(ambiguous, _mm256_cmp_ps(d, near, _CMP_NLT_UQ));
    }
    if (!viaInverse || _mm256_movemask_ps(ambiguous) != 0) {
      for (int j = 0; j < 4; ++j) {
        const __m256 z = _mm256_sub_ps(x[j], x[j]);  // NaN exactly when x is not finite
        if (_mm256_movemask_ps(_mm256_cmp_ps(z, z, _CMP_UNORD_Q)) != 0) ok = false;
        t[j] = _mm256_round_ps(_mm256_div_ps(x[j], vs), _MM_FROUND_CUR_DIRECTION);
      }
    }
    // Only the upper end needs clamping before the conversion: below -2^31 it gives INT_MIN,
    // which the signed narrowing takes to -128 like any value below -128.
    __m256i q[4];
    for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_min_ps(t[j], hi));
    out.w[0] = _mm256_xor_si256(interleaveBytes(q[0], q[1], q[2], q[3]), flip);
    if constexpr (WithEx) {
      __m256i e[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 qf = _mm256_max_ps(_mm256_min_ps(t[j], hi), lo);
        const __m256 ex = _mm256_fnmadd_ps(vs, qf, x[j]);  // x - s * q, rounded once
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(ex, vinvSe), _MM_FROUND_CUR_DIRECTION);
        e[j] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(r, eHi), eLo));
      }
      out.w[1] = _mm256_xor_si256(interleaveBytes(e[0], e[1], e[2], e[3]), flip);
    }
    return out;
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Words v = words8(i, nullptr);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), v.w[0]);
    if constexpr (WithEx) _mm256_storeu_si256(reinterpret_cast<__m256i*>(exDst + i), v.w[1]);
  }
  if (i < n) {
    const __m256i mask = tailMask(n - i);
    const Words v = words8(i, &mask);
    _mm256_maskstore_epi32(reinterpret_cast<int*>(dst + i), mask, v.w[0]);
    if constexpr (WithEx) _mm256_maskstore_epi32(reinterpret_cast<int*>(exDst + i), mask, v.w[1]);
  }
  return ok;
}

// min and max of x over [0, n) and 0; false when some x is NaN or Inf.
bool minMax(const float* x, int64_t n, float& outMin, float& outMax) {
  __m256 mn = _mm256_setzero_ps(), mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 z = _mm256_sub_ps(v, v);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(z, z, _CMP_UNORD_Q));
    mn = _mm256_min_ps(mn, v);
    mx = _mm256_max_ps(mx, v);
  }
  alignas(32) float lanesMin[8], lanesMax[8];
  _mm256_store_ps(lanesMin, mn);
  _mm256_store_ps(lanesMax, mx);
  float lo = 0.f, hi = 0.f;
  for (int j = 0; j < 8; ++j) {
    lo = std::min(lo, lanesMin[j]);
    hi = std::max(hi, lanesMax[j]);
  }
  bool ok = _mm256_movemask_ps(bad) == 0;
  for (; i < n; ++i) {
    ok = ok && std::isfinite(x[i]);
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  outMin = lo;
  outMax = hi;
  return ok;
}

// ------------------------------------------------------------------ word layout

// Where the words of one image live: per channel group c4, one plane per stride phase
// (s0 * s1 * s2 of them), each the padded input subsampled by the stride, [Dph][Hph][Wph].
struct WordLayout {
  int64_t s[3], padB[3], in[3], padded[3], ph[3];
  int64_t phaseSize = 0, c4Words = 0, imageWords = 0;

  WordLayout(const WindowGeometry& g, int64_t C4) {
    for (int i = 0; i < 3; ++i) {
      s[i] = g.s[i];
      padB[i] = g.padB[i];
      in[i] = g.in[i];
      // Every position a window reads: (out - 1) * s + (k - 1) * d (resolveWindow's geometry
      // keeps it within the padded input; the max makes any geometry safe).
      padded[i] = std::max(g.in[i] + g.padB[i] + g.padE[i], (g.out[i] - 1) * g.s[i] + (g.k[i] - 1) * g.d[i] + 1);
      ph[i] = (padded[i] + s[i] - 1) / s[i];
    }
    phaseSize = ph[0] * ph[1] * ph[2];
    c4Words = s[0] * s[1] * s[2] * phaseSize;
    imageWords = C4 * c4Words;
  }
  bool strided() const { return s[0] * s[1] * s[2] > 1; }
  // Word index, within one channel group, of padded position (p0, p1, p2).
  int64_t at(int64_t p0, int64_t p1, int64_t p2) const {
    const int64_t phase = ((p0 % s[0]) * s[1] + p1 % s[1]) * s[2] + p2 % s[2];
    return phase * phaseSize + ((p0 / s[0]) * ph[1] + p1 / s[1]) * ph[2] + p2 / s[2];
  }
};

// Writes padded rows [r0, r1) (row r: p0 = r / padded[1], p1 = r % padded[1]) of channel group
// c4 of one image (channels 4*c4 .. 4*c4+3 of x [C, in...]) into the group's words dst[0] and,
// when not null, dst[1]: the padding as pad[k], the input through quantize(src rows, count,
// out0, out1). rowBuf: 2 * padded[2] words. With a stride, the phase planes also hold positions
// past the padded input, which the caller fills beforehand.
template <class Q>
void layoutRows(const float* x, int64_t C, int64_t c4, const WordLayout& L, int64_t r0, int64_t r1,
                const uint32_t pad[2], uint32_t* const dst[2], uint32_t* rowBuf, const Q& quantize) {
  const int64_t inSize = L.in[0] * L.in[1] * L.in[2], IW = L.in[2], PW = L.padded[2];
  const int outs = dst[1] ? 2 : 1;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t p0 = r / L.padded[1], p1 = r % L.padded[1];
    const int64_t i0 = p0 - L.padB[0], i1 = p1 - L.padB[1];
    const bool inside = i0 >= 0 && i0 < L.in[0] && i1 >= 0 && i1 < L.in[1];
    // Unit W stride: the padded row is contiguous in its plane, written in place.
    uint32_t* row[2];
    for (int k = 0; k < 2; ++k) row[k] = L.s[2] == 1 && dst[k] ? dst[k] + L.at(p0, p1, 0) : rowBuf + k * PW;
    const int64_t lead = inside ? std::min(L.padB[2], PW) : PW, body = inside ? std::min(IW, PW - lead) : 0;
    for (int k = 0; k < outs; ++k) {
      std::fill(row[k], row[k] + lead, pad[k]);
      std::fill(row[k] + lead + body, row[k] + PW, pad[k]);
    }
    if (body > 0) {
      const float* src[4];
      for (int j = 0; j < 4; ++j)
        src[j] = 4 * c4 + j < C ? x + (4 * c4 + j) * inSize + (i0 * L.in[1] + i1) * IW : nullptr;
      quantize(src, body, row[0] + lead, row[1] + lead);
    }
    if (L.s[2] != 1)
      for (int k = 0; k < outs; ++k)
        for (int64_t pw = 0; pw < std::min(L.s[2], PW); ++pw) {
          uint32_t* d = dst[k] + L.at(p0, p1, pw);
          for (int64_t j = 0, p2 = pw; p2 < PW; ++j, p2 += L.s[2]) d[j] = row[k][p2];
        }
  }
}

using GemmFn = void (*)(const Packed&, const uint32_t*, const int64_t*, int64_t, int32_t*, int64_t);

// ------------------------------------------------------------------ epilogues
// Plain code shared by both paths: the results differ in nothing but speed. Sums are exact
// integers; each output is formed in double and rounded to float once.

void epilogueFull(const int32_t* q, int32_t corr, double scale, double bias, int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] = (float)((double)(q[j] - corr) * scale + bias);
}

void epilogueActOnly(const int32_t* q, int32_t corrQ, const int32_t* r, int32_t corrR, double invRs, double scale,
                     double bias, int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j)
    y[j] = (float)(((double)(q[j] - corrQ) + (double)(r[j] - corrR) * invRs) * scale + bias);
}

// -conv(X, sw * r8 / rs) with X = sx * q + ex: q's sums r (the r8 half of the [Wq; r8] GEMM) and
// ex's 8-bit sums e (null when ex is not represented), both shifted by the same 128 * rowSum.
void epilogueWeightError(const int32_t* r, const int32_t* e, int32_t corr, double sx, double se, double coef,
                         int64_t n, float* y) {
  if (e)
    for (int64_t j = 0; j < n; ++j) y[j] = (float)((sx * (double)(r[j] - corr) + se * (double)(e[j] - corr)) * coef);
  else
    for (int64_t j = 0; j < n; ++j) y[j] = (float)(sx * (double)(r[j] - corr) * coef);
}

// The same in float, for outputs only summed (never stored): 8 lanes where the double forms
// have 4, and the sums' own float products dwarf the difference (a formed value within ~2 ulp
// of the double-formed one). The int32 sums convert exactly below 2^24, i.e. for K < 1032.
void epilogueFullF(const int32_t* q, int32_t corr, float scale, float bias, int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] = std::fma((float)(q[j] - corr), scale, bias);
}

void epilogueActOnlyF(const int32_t* q, int32_t corrQ, const int32_t* r, int32_t corrR, float invRs, float scale,
                      float bias, int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] = std::fma(std::fma((float)(r[j] - corrR), invRs, (float)(q[j] - corrQ)), scale, bias);
}

void epilogueWeightErrorF(const int32_t* r, const int32_t* e, int32_t corr, float sx, float se, float coef, int64_t n,
                          float* y) {
  if (e)
    for (int64_t j = 0; j < n; ++j) y[j] = std::fma(sx, (float)(r[j] - corr), se * (float)(e[j] - corr)) * coef;
  else
    for (int64_t j = 0; j < n; ++j) y[j] = sx * (float)(r[j] - corr) * coef;
}

}  // namespace

// ------------------------------------------------------------------ public API

Result<std::shared_ptr<const QConvWeights>> prepareQConvWeights(const Tensor& W, const std::vector<float>& sw, int qmin,
                                                                int qmax) {
  if (W.dtype() != DType::Float) return invalidArgument("qconv weights must be float32, got " + dtypeName(W.dtype()));
  if (W.rank() < 3 || W.rank() > 5)
    return unsupported("qconv weights must be [M, C, k...] with 1 to 3 spatial dims, got " + shapeToString(W.shape()));
  for (int64_t d : W.shape())
    if (d <= 0) return invalidArgument("qconv weights have an empty dim: " + shapeToString(W.shape()));
  const int64_t M = W.dim(0), C = W.dim(1), kSize = W.numel() / (M * C), K = C * kSize;
  if (K > kMaxDepth)
    return unsupported("qconv: reduction length " + std::to_string(K) + " exceeds " + std::to_string(kMaxDepth) +
                       " (int32 sums could overflow)");
  if ((int64_t)sw.size() != M && sw.size() != 1)
    return invalidArgument("qconv: " + std::to_string(sw.size()) + " weight scales for " + std::to_string(M) +
                           " output channels");
  for (float s : sw)
    if (!(std::isfinite(s) && s > 0.f)) return invalidArgument("qconv: weight scale " + std::to_string(s) + " is not finite and > 0");
  if (qmin < -128 || qmax > 127 || qmin >= qmax)
    return invalidArgument("qconv: weight range [" + std::to_string(qmin) + ", " + std::to_string(qmax) + "] is not within int8");

  auto w = std::make_shared<QConvWeights>();
  w->m_M = M;
  w->m_C = C;
  w->m_K = K;
  w->m_kernel.assign(W.shape().begin() + 2, W.shape().end());
  w->m_sw = sw.size() == 1 ? std::vector<float>((size_t)M, sw[0]) : sw;
  w->m_rs.assign((size_t)M, QConvWeights::kResidualScale);
  w->m_wq.resize((size_t)(M * K));
  w->m_r8.resize((size_t)(M * K));
  const float* src = W.data<float>();
  std::vector<float> r((size_t)K);
  for (int64_t m = 0; m < M; ++m) {
    const float s = w->m_sw[(size_t)m];
    float maxR = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      const float x = src[m * K + k];
      if (!std::isfinite(x))
        return invalidArgument("qconv: weight [" + std::to_string(m) + ", " + std::to_string(k) + "] is not finite");
      // fakeQuantInt8's division, rounding and clamp, so the integers are the same.
      const float t = x / s;
      // A scale so small that the quotient overflows: no residual to keep (and no meaningful
      // quantization either).
      if (!std::isfinite(t))
        return invalidArgument("qconv: weight [" + std::to_string(m) + ", " + std::to_string(k) + "] / scale " +
                               std::to_string(s) + " overflows");
      const float q = std::min(std::max(std::nearbyint(t), (float)qmin), (float)qmax);
      w->m_wq[(size_t)(m * K + k)] = (int8_t)q;
      r[(size_t)k] = t - q;
      maxR = std::max(maxR, std::fabs(r[(size_t)k]));
    }
    // 254 maps |r| <= 0.5 onto [-127, 127]; a clipped weight has a larger residual, which a
    // coarser row scale keeps instead of saturating it.
    const float rs = maxR <= 0.5f ? QConvWeights::kResidualScale : 127.f / maxR;
    w->m_rs[(size_t)m] = rs;
    for (int64_t k = 0; k < K; ++k)
      w->m_r8[(size_t)(m * K + k)] = (int8_t)std::min(std::max(std::nearbyint(r[(size_t)k] * rs), -127.f), 127.f);
  }
  const int8_t* wq = w->m_wq.data();
  const int8_t* r8 = w->m_r8.data();
  // The format of the GEMM in use now (one format per weights: the packs are the largest part).
  const bool wide = gemmKind() == GemmKind::Avx2;
  packRows(M, C, kSize, [&](int64_t m, int64_t k) { return wq[m * K + k]; }, wide, w->m_q);
  packRows(2 * M, C, kSize, [&](int64_t m, int64_t k) { return m < M ? wq[m * K + k] : r8[(m - M) * K + k]; }, wide,
           w->m_qr);
  packRows(M, C, kSize, [&](int64_t m, int64_t k) { return r8[m * K + k]; }, wide, w->m_r);
  return std::shared_ptr<const QConvWeights>(std::move(w));
}

const char* qconvKernelName() {
  switch (gemmKind()) {
    case GemmKind::Vnni: return "avx512vnni";
    case GemmKind::Avx2: return "avx2";
    default: return "generic";
  }
}


bool setQconvKernel(const std::string& name) {
  GemmKind k;
  if (name == "auto") k = GemmKind::Auto;
  else if (name == "generic") k = GemmKind::Generic;
  else if (name == "avx2" && cpuHasAvx2()) k = GemmKind::Avx2;
  else if (name == "avx512vnni" && cpuHasVnni()) k = GemmKind::Vnni;
  else return false;
  g_forced.store(k, std::memory_order_relaxed);
  return true;
}

Status qconv(const Tensor& X, float sx, const QConvWeights& w, const float* bias, const WindowGeometry& g, int threads,
             const QConvOutputs& out) {
  const int nd = (int)w.kernelShape().size();
  if (X.dtype() != DType::Float) return invalidArgument("qconv: X must be float32, got " + dtypeName(X.dtype()));
  if (X.rank() != 2 + nd || g.nd != nd)
    return invalidArgument("qconv: X " + shapeToString(X.shape()) + " and geometry of rank " + std::to_string(g.nd) +
                           " do not match weights with kernel " + shapeToString(w.kernelShape()));
  if (X.dim(1) != w.inChannels())
    return invalidArgument("qconv: X " + shapeToString(X.shape()) + " has " + std::to_string(X.dim(1)) +
                           " channels, weights expect " + std::to_string(w.inChannels()));
  for (int i = 0; i < 3; ++i) {
    const bool used = i >= 3 - nd;
    const int64_t in = used ? X.dim(2 + i - (3 - nd)) : 1, k = used ? w.kernelShape()[(size_t)(i - (3 - nd))] : 1;
    if (g.in[i] != in || g.k[i] != k || g.s[i] < 1 || g.d[i] < 1 || g.padB[i] < 0 || g.padE[i] < 0 || g.out[i] < 0)
      return invalidArgument("qconv: window geometry does not match X " + shapeToString(X.shape()) + " and kernel " +
                             shapeToString(w.kernelShape()));
  }
  if (!(std::isfinite(sx) && sx > 0.f)) return invalidArgument("qconv: input scale " + std::to_string(sx) + " is not finite and > 0");

  const int64_t N = X.dim(0), C = X.dim(1), M = w.outChannels(), C4 = (C + 3) / 4;
  const int64_t inSize = g.inSize(), outSize = g.outSize(), kSize = g.kSize();
  Shape yShape = {N, M};
  for (int64_t v : g.outShape()) yShape.push_back(v);
  Tensor* outs[3] = {out.full, out.actOnly, out.weightError};
  for (Tensor* t : outs)
    if (t) *t = Tensor(DType::Float, yShape);
  const float* ref = out.reference;
  if ((out.fullSums || out.actSums || out.weightSums) && !ref)
    return invalidArgument("qconv: error sums requested without a reference");
  const bool sumFull = ref && out.fullSums, sumAct = ref && out.actSums, sumWeight = ref && out.weightSums;
  const bool wantAct = out.full || out.actOnly || sumFull || sumAct, wantWeight = out.weightError || sumWeight;
  if (N == 0 || outSize == 0 || (!wantAct && !wantWeight)) return Status::ok();

  threads = std::max(1, threads);
  // Below ~4M multiply-adds another core costs about what it saves (as in gemmBlocking).
  if (2.0 * (double)N * (double)M * (double)outSize * (double)w.depth() < 4e6) threads = 1;

  // Phase 1: X into words, once per call (each word then serves every tap that reads it).
  // NR words of slack after the last image: a partial tile reads up to NR - 1 past the last
  // position a window reads.
  const float* x = X.data<float>();
  const WordLayout L(g, C4);
  const int64_t words = N * L.imageWords + NR;
  std::atomic<bool> finite{true};
  // weightError's X as sx * q + ex: q the integers of xq, ex = X - sx * q X's quantization
  // residual, at 8 bits with one scale se for the whole tensor. se = exMax / 127 with exMax a
  // bound on |ex| from X's range, known before the words are made: where nothing clips,
  // |x / sx - q| <= 1/2 + ulp(x / sx) / 2 <= 1/2 + 2^-18 (q rounds the float quotient); beyond
  // the clip, ex is x - 127 sx or x + 128 sx. The slack covers those 2^-18 and the roundings of
  // the bound itself.
  float se = 0.f, invSe = 0.f;
  bool weightNonZero = false;
  if (wantWeight) {
    const int64_t total = X.numel(), pieces = std::max<int64_t>(1, std::min<int64_t>(64, total >> 16));
    std::vector<float> minima((size_t)pieces, 0.f), maxima((size_t)pieces, 0.f);
    parallelFor(threads, pieces, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t i0 = total * p / pieces, i1 = total * (p + 1) / pieces;
        if (!minMax(x + i0, i1 - i0, minima[(size_t)p], maxima[(size_t)p])) finite.store(false, std::memory_order_relaxed);
      }
    });
    if (!finite.load()) return invalidArgument("qconv: X contains NaN or Inf");
    const double xmin = *std::min_element(minima.begin(), minima.end());
    const double xmax = *std::max_element(maxima.begin(), maxima.end());
    // An all-zero X has no weight error at all.
    weightNonZero = xmin != 0.0 || xmax != 0.0;
    const double sxd = sx, bound = std::max({0.5 * sxd, xmax - 127.0 * sxd, -128.0 * sxd - xmin}) * (1.0 + 0x1p-15);
    se = (float)(std::min(bound, (double)std::numeric_limits<float>::max()) / 127.0);
    invSe = 1.f / se;
    // sx so small (below ~2^-119) that se is subnormal and 1 / se overflows: ex left out.
    if (!(se > 0.f && std::isfinite(invSe))) se = invSe = 0.f;
  }
  const bool wantQ = wantAct || weightNonZero, wantEx = weightNonZero && se > 0.f;
  uint32_t* xq = wantQ ? scratch<uint32_t>(kSlotXq, (size_t)words) : nullptr;
  uint32_t* xe = wantEx ? scratch<uint32_t>(kSlotXe, (size_t)words) : nullptr;
  if ((wantQ && !xq) || (wantEx && !xe))
    return runtimeError("qconv: out of memory for " + std::to_string(words) + " words of quantized input");
  // Tasks of (image, channel group, padded rows): a 3-channel input is one group, and still
  // worth splitting.
  if (xq && L.strided()) {
    const int64_t fillChunk = 1 << 16, chunks = (N * L.imageWords + fillChunk - 1) / fillChunk;
    parallelFor(threads, chunks, 1, [&](int64_t b, int64_t e) {
      const int64_t w0 = b * fillChunk, w1 = std::min(N * L.imageWords, e * fillChunk);
      std::fill(xq + w0, xq + w1, kPadAct);
      if (xe) std::fill(xe + w0, xe + w1, kPadAct);
    });
  }
  const int64_t rows = L.padded[0] * L.padded[1];
  const int64_t rowsPerTask = std::clamp<int64_t>((1 << 14) / std::max<int64_t>(1, L.padded[2]), 1, rows);
  const int64_t rowTasks = (rows + rowsPerTask - 1) / rowsPerTask;
  if (xq)
    parallelFor(threads, N * C4 * rowTasks, 1, [&](int64_t b, int64_t e) {
      uint32_t* rowBuf = scratch<uint32_t>(kSlotRow, (size_t)(2 * L.padded[2]));
      for (int64_t t = b; t < e; ++t) {
        const int64_t group = t / rowTasks, n = group / C4, c4 = group % C4;
        const int64_t r0 = (t % rowTasks) * rowsPerTask, r1 = std::min(rows, r0 + rowsPerTask);
        const float* xn = x + n * C * inSize;
        const int64_t at = n * L.imageWords + c4 * L.c4Words;
        const uint32_t pads[2] = {kPadAct, kPadAct};
        uint32_t* const dst[2] = {xq + at, xe ? xe + at : nullptr};
        if (xe)
          layoutRows(xn, C, c4, L, r0, r1, pads, dst, rowBuf, [&](const float* const* src, int64_t cnt, uint32_t* q, uint32_t* ex) {
            if (!quantizeWords<true>(src, cnt, sx, q, invSe, ex)) finite.store(false, std::memory_order_relaxed);
          });
        else
          layoutRows(xn, C, c4, L, r0, r1, pads, dst, rowBuf, [&](const float* const* src, int64_t cnt, uint32_t* q, uint32_t*) {
            if (!quantizeWords<false>(src, cnt, sx, q, 0.f, nullptr)) finite.store(false, std::memory_order_relaxed);
          });
      }
    });
  if (!finite.load()) return invalidArgument("qconv: X contains NaN or Inf");
  for (uint32_t* buf : {xq, xe})
    if (buf) std::fill(buf + N * L.imageWords, buf + words, kPadAct);
  if (wantWeight && !weightNonZero) {
    if (out.weightError) std::fill(out.weightError->data<float>(), out.weightError->data<float>() + out.weightError->numel(), 0.f);
    if (sumWeight) out.weightSums->add(ref, ref, N * M * outSize);  // addError(ref, 0)
  }
  if (!wantQ) return Status::ok();

  // Phase 2. Output positions on the plane grid: slice od of image n holds f = oh * Wph + ow,
  // F of them up to the last real one. Tasks of (image, slice, block of f): the GEMM into int32
  // scratch, then the outputs while the block is in cache.
  // [Wq; r8] whenever actOnly or weightError needs q's sums over r8.
  const Packed& A = out.actOnly || sumAct || weightNonZero ? w.packedQR() : w.packedQ();
  const Packed& R = w.packedR();
  const int64_t groups = C4 * kSize, OD = g.out[0], OH = g.out[1], OW = g.out[2], Wph = L.ph[2];
  const int64_t F = (OH - 1) * Wph + OW, sliceWords = L.ph[1] * Wph;
  std::vector<int64_t> off((size_t)groups);
  for (int64_t c4 = 0, gi = 0; c4 < C4; ++c4)
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, ++gi)
          off[(size_t)gi] = c4 * L.c4Words + L.at(kd * g.d[0], kh * g.d[1], kw * g.d[2]);
  // Columns per block: up to 512, fewer where the int32 sums of a block would outgrow ~256 KB of
  // L2 (many rows), and fewer again to give every thread several blocks.
  const int64_t sumRows = A.panels * MR + (wantEx ? R.panels * MR : 0);
  int64_t nb = std::clamp<int64_t>((65536 / std::max<int64_t>(1, sumRows)) / NR * NR, NR, 512);
  nb = std::min(nb, (F + NR - 1) / NR * NR);
  auto blocksOf = [&](int64_t b) { return N * OD * ((F + b - 1) / b); };
  // With error sums the blocks are also the sums' order: then they are cut as for two threads
  // whatever the thread count, so that the sums do not depend on it.
  const int64_t cutFor = out.reference ? 2 : threads;
  if (cutFor > 1)
    while (blocksOf(nb) < 4 * cutFor && nb > NR) nb = std::max(NR, (nb / 2 + NR - 1) / NR * NR);
  const int64_t colBlocks = (F + nb - 1) / nb;
  // Each pack's format decides between the GEMMs that read it (a forced switch after the
  // weights were prepared leaves the generic loops).
  const GemmKind kind = gemmKind();
  auto gemmFor = [&](const Packed& P) -> GemmFn {
    using namespace qconv_detail;
    if (P.wide()) return kind == GemmKind::Avx2 ? qconvGemmAvx2 : qconvGemmGeneric;
    return kind == GemmKind::Vnni ? qconvGemmVnni : qconvGemmGeneric;
  };
  const GemmFn gemm = gemmFor(A), gemmR = gemmFor(R);

  std::vector<double> scale((size_t)M), biasD((size_t)M), invRs((size_t)M), coefW((size_t)M);
  for (int64_t m = 0; m < M; ++m) {
    const double swm = w.scales()[(size_t)m], rs = w.residualScales()[(size_t)m];
    scale[(size_t)m] = (double)sx * swm;
    biasD[(size_t)m] = bias ? (double)bias[m] : 0.0;
    invRs[(size_t)m] = 1.0 / rs;
    coefW[(size_t)m] = -swm / rs;
  }
  float* yFull = out.full ? out.full->data<float>() : nullptr;
  float* yAct = out.actOnly ? out.actOnly->data<float>() : nullptr;
  float* yW = weightNonZero && out.weightError ? out.weightError->data<float>() : nullptr;
  const bool doFull = yFull || sumFull, doAct = yAct || sumAct, doWeight = weightNonZero && (yW || sumWeight);
  // Per block: the sums of full, actOnly and weightError, merged in block order at the end.
  const int64_t tasks = N * OD * colBlocks;
  std::vector<std::array<ErrorAccumulator, 3>> sums(ref ? (size_t)tasks : 0);
  // One run of outputs: stored where a tensor is wanted, else in a row of scratch; then summed.
  // (The lanes of each sum stay in vectors across a block's runs: a run is one output row of a
  // padded Conv, often 20 to 160 values, too short to reduce its lanes after each.)
  auto emit = [&](float* stored, int64_t at, int64_t len, ErrorAccumulator* acc, ErrorAccumulator::Lanes* lanes,
                  bool isError, const auto& fill) {
    float* dst = stored ? stored + at : scratch<float>(kSlotOut, (size_t)nb);
    fill(dst);
    if (!acc) return;
    if (isError) acc->addError(*lanes, ref + at, dst, len);
    else acc->add(*lanes, ref + at, dst, len);
  };

  parallelFor(threads, tasks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      ErrorAccumulator* blockSums = ref ? sums[(size_t)t].data() : nullptr;
      ErrorAccumulator::Lanes lanes[3];
      const int64_t slice = t / colBlocks, n = slice / OD, od = slice % OD;
      const int64_t f0 = (t % colBlocks) * nb, f1 = std::min(F, f0 + nb);
      const int64_t panelsN = (f1 - f0 + NR - 1) / NR, ldc = panelsN * NR;
      const int64_t bOff = n * L.imageWords + od * sliceWords + f0;
      // Runs of real outputs in [f0, f1): fn(offset in the block, output index within the slice, length).
      auto forRuns = [&](const auto& fn) {
        if (Wph == OW) {  // no dropped positions (1x1, or padding that only widens the output)
          fn(0, f0, f1 - f0);
          return;
        }
        for (int64_t oh = f0 / Wph; oh <= (f1 - 1) / Wph && oh < OH; ++oh) {
          const int64_t a = std::max(f0, oh * Wph), b = std::min(f1, oh * Wph + OW);
          if (b > a) fn(a - f0, oh * OW + (a - oh * Wph), b - a);
        }
      };
      const int64_t ySlice = od * OH * OW;
      int32_t* acc = scratch<int32_t>(kSlotAcc, (size_t)(A.panels * MR * ldc));
      gemm(A, xq + bOff, off.data(), panelsN, acc, ldc);
      if (doFull || doAct) {
        for (int64_t m = 0; m < M; ++m) {
          const int32_t* q = acc + m * ldc;
          const int32_t corrQ = 128 * A.rowSum[(size_t)m];
          const int64_t yo = (n * M + m) * outSize + ySlice;
          forRuns([&](int64_t j, int64_t o, int64_t len) {
            if (doFull)
              emit(yFull, yo + o, len, sumFull ? &blockSums[0] : nullptr, &lanes[0], false, [&](float* y) {
                if (yFull) epilogueFull(q + j, corrQ, scale[(size_t)m], biasD[(size_t)m], len, y);
                else epilogueFullF(q + j, corrQ, (float)scale[(size_t)m], (float)biasD[(size_t)m], len, y);
              });
            if (doAct)
              emit(yAct, yo + o, len, sumAct ? &blockSums[1] : nullptr, &lanes[1], false, [&](float* y) {
                const int32_t* r = acc + (M + m) * ldc + j;
                const int32_t corrR = 128 * A.rowSum[(size_t)(M + m)];
                if (yAct) epilogueActOnly(q + j, corrQ, r, corrR, invRs[(size_t)m], scale[(size_t)m], biasD[(size_t)m], len, y);
                else
                  epilogueActOnlyF(q + j, corrQ, r, corrR, (float)invRs[(size_t)m], (float)scale[(size_t)m],
                                   (float)biasD[(size_t)m], len, y);
              });
          });
        }
      }
      if (doWeight) {
        int32_t* accE = wantEx ? scratch<int32_t>(kSlotAccE, (size_t)(R.panels * MR * ldc)) : nullptr;
        if (accE) gemmR(R, xe + bOff, off.data(), panelsN, accE, ldc);
        for (int64_t m = 0; m < M; ++m) {
          const int64_t yo = (n * M + m) * outSize + ySlice;
          forRuns([&](int64_t j, int64_t o, int64_t len) {
            emit(yW, yo + o, len, sumWeight ? &blockSums[2] : nullptr, &lanes[2], true, [&](float* y) {
              const int32_t* r = acc + (M + m) * ldc + j;
              const int32_t* e = accE ? accE + m * ldc + j : nullptr;
              if (yW) epilogueWeightError(r, e, 128 * R.rowSum[(size_t)m], (double)sx, (double)se, coefW[(size_t)m], len, y);
              else epilogueWeightErrorF(r, e, 128 * R.rowSum[(size_t)m], sx, se, (float)coefW[(size_t)m], len, y);
            });
          });
        }
      }
      if (blockSums)
        for (int k = 0; k < 3; ++k) blockSums[k].flush(lanes[k]);
    }
  });
  for (const auto& b : sums) {
    if (sumFull) out.fullSums->merge(b[0]);
    if (sumAct) out.actSums->merge(b[1]);
    if (sumWeight && weightNonZero) out.weightSums->merge(b[2]);
  }
  return Status::ok();
}

}  // namespace qs
