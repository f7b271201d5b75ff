// Integer depthwise Conv (qconv_depthwise.h), plane by plane.
//
// Layout. vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds the 4 products to an
// int32 lane. Each padded row of an input plane is quantized once into bytes (q + 128, the
// padding as 128, the encoding of 0), and then into "quads": Q[j] = the 4 bytes at s * j, s the W
// stride, so that output column j's taps 4 g .. 4 g + 3 of one kernel row are the bytes of
// Q[j + 4 g / s]. 16 consecutive outputs of one row and one group of taps are then one 64-byte
// load and one vpdpbusd against the group's 4 weights broadcast: 3 instructions per 16 outputs
// for a 3x3 kernel, 10 for a 5x5 one (the FP32 kernel: 18 and 50 FMAs). The +128 of the bytes is
// undone per channel with 128 * sum(Wq). Sums are exact: |sum| <= KH * 16 * 255 * 128 < 2^31.
#include "core/kernels/qconv_depthwise.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>

#include "core/exec/parallel.h"
#include "core/kernels/qconv.h"

namespace qs {

namespace {

constexpr int64_t kMaxKernel = 16;  // KH and KW: 4 words of taps per row at most
constexpr uint8_t kPadByte = 0x80;

bool cpuHasVnniVbmi() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                          __builtin_cpu_supports("avx512vbmi");
  return has;
}

// What one call needs to know about the planes (all planes share it).
struct PlaneShape {
  int64_t IH, IW, OH, OW, KH, sh, dh, s, padT, padL;
  int64_t G;     // words of taps per kernel row
  int64_t OWv;   // OW rounded up to 16: every output vector is whole
  int64_t QW;    // quads per row: OWv + (G - 1) * 4 / s
  int64_t QS;    // quads stored per row: QW rounded up to 16 (whole vectors are written)
  int64_t PH;    // padded rows the outputs read
  int64_t bytes; // bytes of one quantized row: s * (QS - 1) + 4 (and 64 of slack for the vector loads)
};

// ------------------------------------------------------------------ portable loops (the reference)

// Bytes of one input row, x[0, n) -> q + 128 with q = clamp(nearbyint(x / sx), -128, 127) as
// fakeQuantInt8. False on NaN or Inf.
bool quantizeRowScalar(const float* x, int64_t n, float sx, uint8_t* dst) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    ok = ok && std::isfinite(x[i]);
    const float q = std::min(std::max(std::nearbyint(x[i] / sx), -128.f), 127.f);
    dst[i] = (uint8_t)((int)q + 128);
  }
  return ok;
}

void quadsScalar(const uint8_t* b, int64_t s, int64_t n, uint32_t* q) {
  for (int64_t j = 0; j < n; ++j) std::memcpy(q + j, b + s * j, 4);
}

inline float epilogueOne(int32_t acc, int32_t corr, double scale, double bias) {
  return (float)std::fma((double)(acc - corr), scale, bias);
}

// Output row oh of one plane: rows[kh] the quads of padded row oh * sh + kh * dh.
void convRowScalar(const uint32_t* const* rows, const int32_t* words, const PlaneShape& p, int32_t corr, double scale,
                   double bias, float* y) {
  const int64_t step = 4 / p.s;
  for (int64_t j = 0; j < p.OW; ++j) {
    int32_t acc = 0;
    for (int64_t kh = 0; kh < p.KH; ++kh)
      for (int64_t g = 0; g < p.G; ++g) {
        uint32_t xq = rows[kh][j + g * step];
        const int32_t w = words[kh * p.G + g];
        for (int t = 0; t < 4; ++t) acc += (int32_t)((xq >> (8 * t)) & 0xff) * (int32_t)(int8_t)(w >> (8 * t));
      }
    y[j] = epilogueOne(acc, corr, scale, bias);
  }
}

// ------------------------------------------------------------------ AVX-512 VNNI

// Intrinsics only (GCC 12's AVX-512 auto-vectorizer miscompiles plain loops, docs/design.md).
// GCC 12 warns about the _mm512_undefined_*() inside its own intrinsics (a false positive).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#define QS_DW_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))

// quantizeRowScalar, 16 lanes: the same integers. As in qconv's input words, no division where
// it is not needed: t = x * (1 / sx) is within 3 ulp(t) of the float quotient, so unless t lies
// within 2^-14 of a half-integer (a bound that covers |t| < 128; beyond it both clamp to the same
// end) both round to the same integer. A vector with such a t (rare), or with a NaN or Inf (t -
// rne(t) is then NaN), divides.
QS_DW_TARGET bool quantizeRowVnni(const float* x, int64_t n, float sx, uint8_t* dst) {
  const float inv = 1.f / sx;
  const bool viaInverse = std::isnormal(inv) && std::isnormal(sx);  // the 3-ulp bound needs both normal
  const __m512 vs = _mm512_set1_ps(sx), vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-128.f);
  const __m512 hi = _mm512_set1_ps(127.f), near = _mm512_set1_ps(0.5f - 0x1p-14f);
  const __m512i shift = _mm512_set1_epi32(128);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __mmask16 bad = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 p = _mm512_mul_ps(v, vinv);
    __m512 t = _mm512_roundscale_ps(p, kRound);
    const __m512 d = _mm512_abs_ps(_mm512_sub_ps(p, t));
    if (!viaInverse || _mm512_cmp_ps_mask(d, near, _CMP_NLT_UQ) != 0) {
      const __m512 z = _mm512_sub_ps(v, v);  // NaN exactly where v is not finite
      bad |= _mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q);
      t = _mm512_roundscale_ps(_mm512_div_ps(v, vs), kRound);
    }
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(t, lo), hi)), shift);
    _mm_mask_storeu_epi8(dst + i, m, _mm512_cvtepi32_epi8(q));
  }
  return bad == 0;
}

// quadsScalar, 16 quads per vpermb; reads up to 64 bytes from b + s * j.
QS_DW_TARGET void quadsVnni(const uint8_t* b, int64_t s, int64_t n, uint32_t* q) {
  alignas(64) uint8_t idx[64];
  for (int j = 0; j < 16; ++j)
    for (int t = 0; t < 4; ++t) idx[4 * j + t] = (uint8_t)(s * j + t);
  const __m512i vidx = _mm512_load_si512(idx);
  for (int64_t j = 0; j < n; j += 16) {
    const __m512i src = _mm512_loadu_si512(b + s * j);
    _mm512_storeu_si512(q + j, _mm512_permutexvar_epi8(vidx, src));
  }
}

// V vectors of 16 outputs at column j of one row. The output floats: (acc - corr) in double,
// one FMA with scale and bias, then rounded to float (epilogueOne's arithmetic).
template <int V>
QS_DW_TARGET inline void convVectorsVnni(const uint32_t* const* rows, const int32_t* words, const PlaneShape& p,
                                         int64_t j, __m512i corr, __m512d scale, __m512d bias, float* y) {
  const int64_t step = 4 / p.s;
  __m512i acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_si512();
  for (int64_t kh = 0; kh < p.KH; ++kh) {
    const uint32_t* r = rows[kh] + j;
    for (int64_t g = 0; g < p.G; ++g) {
      const __m512i w = _mm512_set1_epi32(words[kh * p.G + g]);
      for (int v = 0; v < V; ++v) acc[v] = _mm512_dpbusd_epi32(acc[v], _mm512_loadu_si512(r + g * step + 16 * v), w);
    }
  }
  for (int v = 0; v < V; ++v) {
    const __m512i a = _mm512_sub_epi32(acc[v], corr);
    const __m256 lo = _mm512_cvtpd_ps(_mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(a)), scale, bias));
    const __m256 hi =
        _mm512_cvtpd_ps(_mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(a, 1)), scale, bias));
    const __m512 out = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
    const int64_t at = j + 16 * v, left = p.OW - at;
    if (left >= 16) _mm512_storeu_ps(y + at, out);
    else if (left > 0) _mm512_mask_storeu_ps(y + at, (__mmask16)((1u << left) - 1), out);
  }
}

QS_DW_TARGET void convRowVnni(const uint32_t* const* rows, const int32_t* words, const PlaneShape& p, int32_t corr,
                              double scale, double bias, float* y) {
  const __m512i vc = _mm512_set1_epi32(corr);
  const __m512d vs = _mm512_set1_pd(scale), vb = _mm512_set1_pd(bias);
  int64_t j = 0;
  for (; j + 64 <= p.OWv; j += 64) convVectorsVnni<4>(rows, words, p, j, vc, vs, vb, y);
  for (; j < p.OWv; j += 16) convVectorsVnni<1>(rows, words, p, j, vc, vs, vb, y);
}

#pragma GCC diagnostic pop

// ------------------------------------------------------------------ one plane

// Per-thread scratch, grown only.
struct PlaneScratch {
  std::vector<uint8_t> row;
  std::vector<uint32_t> quads, pad;
  std::vector<const uint32_t*> rowAt;
};

// Plane x [IH, IW] of channel c into y [OH, OW]. False on NaN or Inf.
bool convPlane(const float* x, const QDepthwiseWeights& w, int64_t c, float sx, double bias, const PlaneShape& p,
               bool fast, PlaneScratch& s, float* y) {
  s.row.resize((size_t)(p.bytes + 64));
  s.quads.resize((size_t)(p.IH * p.QS));
  if (s.pad.size() < (size_t)p.QS) s.pad.assign((size_t)p.QS, 0x80808080u);
  s.rowAt.resize((size_t)p.PH);
  bool ok = true;
  uint8_t* b = s.row.data();
  // Only the rows the outputs read (a stride in H skips some).
  for (int64_t r = 0; r < p.PH; ++r) {
    const int64_t ir = r - p.padT;
    if (ir < 0 || ir >= p.IH) {
      s.rowAt[(size_t)r] = s.pad.data();
      continue;
    }
    uint32_t* q = s.quads.data() + ir * p.QS;
    s.rowAt[(size_t)r] = q;
    const int64_t lead = std::min(p.padL, p.bytes), body = std::max<int64_t>(0, std::min(p.IW, p.bytes - lead));
    std::memset(b, kPadByte, (size_t)lead);
    std::memset(b + lead + body, kPadByte, (size_t)(p.bytes + 64 - lead - body));
    ok = (fast ? quantizeRowVnni(x + ir * p.IW, body, sx, b + lead) : quantizeRowScalar(x + ir * p.IW, body, sx, b + lead)) && ok;
    if (fast) quadsVnni(b, p.s, p.QW, q);
    else quadsScalar(b, p.s, p.QW, q);
  }
  if (!ok) return false;
  const int32_t* words = w.words().data() + c * p.KH * p.G;
  const int32_t corr = w.offsetCorrection()[(size_t)c];
  const double scale = (double)sx * (double)w.scales()[(size_t)c];
  const uint32_t* rows[kMaxKernel];
  for (int64_t oh = 0; oh < p.OH; ++oh) {
    for (int64_t kh = 0; kh < p.KH; ++kh) rows[kh] = s.rowAt[(size_t)(oh * p.sh + kh * p.dh)];
    if (fast) convRowVnni(rows, words, p, corr, scale, bias, y + oh * p.OW);
    else convRowScalar(rows, words, p, corr, scale, bias, y + oh * p.OW);
  }
  return true;
}

}  // namespace

Result<std::shared_ptr<const QDepthwiseWeights>> prepareQDepthwiseWeights(const Tensor& W, const std::vector<float>& sw,
                                                                         int qmin, int qmax) {
  if (W.dtype() != DType::Float) return invalidArgument("qconvDepthwise: weights must be float32, got " + dtypeName(W.dtype()));
  if (W.rank() != 4 || W.dim(1) != 1 || W.numel() == 0)
    return invalidArgument("qconvDepthwise: weights must be [C, 1, KH, KW] and not empty, got " + shapeToString(W.shape()));
  const int64_t C = W.dim(0), KH = W.dim(2), KW = W.dim(3), K = KH * KW;
  if (KH > kMaxKernel || KW > kMaxKernel)
    return unsupported("qconvDepthwise: kernel " + std::to_string(KH) + "x" + std::to_string(KW) + " is larger than " +
                       std::to_string(kMaxKernel) + "x" + std::to_string(kMaxKernel));
  if ((int64_t)sw.size() != C && sw.size() != 1)
    return invalidArgument("qconvDepthwise: " + std::to_string(sw.size()) + " weight scales for " + std::to_string(C) +
                           " channels");
  for (float s : sw)
    if (!(std::isfinite(s) && s > 0.f))
      return invalidArgument("qconvDepthwise: weight scale " + std::to_string(s) + " is not finite and > 0");
  if (qmin < -128 || qmax > 127 || qmin >= qmax)
    return invalidArgument("qconvDepthwise: weight range [" + std::to_string(qmin) + ", " + std::to_string(qmax) +
                           "] is not within int8");
  auto w = std::make_shared<QDepthwiseWeights>();
  w->m_C = C;
  w->m_KH = KH;
  w->m_KW = KW;
  w->m_G = (KW + 3) / 4;
  w->m_sw = sw.size() == 1 ? std::vector<float>((size_t)C, sw[0]) : sw;
  w->m_wq.resize((size_t)(C * K));
  w->m_words.assign((size_t)(C * KH * w->m_G), 0);
  w->m_corr.assign((size_t)C, 0);
  const float* src = W.data<float>();
  for (int64_t c = 0; c < C; ++c) {
    const float s = w->m_sw[(size_t)c];
    int32_t sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      const float x = src[c * K + k];
      // fakeQuantInt8's division, rounding and clamp: the integers of the fake-quantized weights.
      const float t = x / s;
      if (!std::isfinite(t))
        return invalidArgument("qconvDepthwise: weight [" + std::to_string(c) + ", " + std::to_string(k) + "] = " +
                               std::to_string(x) + " over scale " + std::to_string(s) + " is not finite");
      const int8_t q = (int8_t)std::min(std::max(std::nearbyint(t), (float)qmin), (float)qmax);
      w->m_wq[(size_t)(c * K + k)] = q;
      sum += q;
      const int64_t kh = k / KW, kw = k % KW;
      uint32_t& word = reinterpret_cast<uint32_t&>(w->m_words[(size_t)((c * KH + kh) * w->m_G + kw / 4)]);
      word |= (uint32_t)(uint8_t)q << (8 * (kw % 4));
    }
    w->m_corr[(size_t)c] = 128 * sum;
  }
  return std::shared_ptr<const QDepthwiseWeights>(std::move(w));
}

bool qconvDepthwiseSupports(const WindowGeometry& g) {
  return g.nd == 2 && (g.s[2] == 1 || g.s[2] == 2) && g.d[2] == 1 && g.k[1] <= kMaxKernel && g.k[2] <= kMaxKernel;
}

bool qconvDepthwiseFast() { return cpuHasVnniVbmi() && std::string(qconvKernelName()) == "avx512vnni"; }

Status qconvDepthwise(const Tensor& X, float sx, const QDepthwiseWeights& w, const float* bias, const WindowGeometry& g,
                      int threads, Tensor* y, const float* reference, ErrorAccumulator* sums) {
  if (!y) return invalidArgument("qconvDepthwise: no output tensor");
  if (X.dtype() != DType::Float) return invalidArgument("qconvDepthwise: X must be float32, got " + dtypeName(X.dtype()));
  if (X.rank() != 4 || X.dim(1) != w.channels())
    return invalidArgument("qconvDepthwise: X " + shapeToString(X.shape()) + " does not match weights of " +
                           std::to_string(w.channels()) + " channels");
  if (!qconvDepthwiseSupports(g))
    return unsupported("qconvDepthwise: only 2-D windows with W stride 1 or 2 and W dilation 1");
  if (g.in[1] != X.dim(2) || g.in[2] != X.dim(3) || g.k[1] != w.kernelHeight() || g.k[2] != w.kernelWidth() ||
      g.s[1] < 1 || g.d[1] < 1 || g.padB[1] < 0 || g.padB[2] < 0 || g.out[1] < 0 || g.out[2] < 0)
    return invalidArgument("qconvDepthwise: window geometry does not match X " + shapeToString(X.shape()) +
                           " and kernel " + std::to_string(w.kernelHeight()) + "x" + std::to_string(w.kernelWidth()));
  if (!(std::isfinite(sx) && sx > 0.f))
    return invalidArgument("qconvDepthwise: input scale " + std::to_string(sx) + " is not finite and > 0");
  const int64_t N = X.dim(0), C = X.dim(1);
  PlaneShape p;
  p.IH = g.in[1];
  p.IW = g.in[2];
  p.OH = g.out[1];
  p.OW = g.out[2];
  p.KH = g.k[1];
  p.sh = g.s[1];
  p.dh = g.d[1];
  p.s = g.s[2];
  p.padT = g.padB[1];
  p.padL = g.padB[2];
  p.G = w.groups();
  p.OWv = (p.OW + 15) / 16 * 16;
  p.QW = p.OWv + (p.G - 1) * 4 / p.s;
  p.QS = (p.QW + 15) / 16 * 16;
  p.PH = p.OH > 0 ? (p.OH - 1) * p.sh + (p.KH - 1) * p.dh + 1 : 0;
  p.bytes = p.s * (p.QS - 1) + 4;
  *y = Tensor(DType::Float, {N, C, p.OH, p.OW});
  const int64_t inSize = p.IH * p.IW, outSize = p.OH * p.OW;
  if (N * C == 0 || outSize == 0) return Status::ok();
  const bool fast = qconvDepthwiseFast();
  const float* x = X.data<float>();
  float* out = y->data<float>();
  const bool compare = reference && sums;
  std::vector<ErrorAccumulator> planeSums(compare ? (size_t)(N * C) : 0);
  std::atomic<bool> finite{true};
  parallelFor(threads, N * C, 1, [&](int64_t b, int64_t e) {
    thread_local PlaneScratch scratch;
    for (int64_t pl = b; pl < e; ++pl) {
      const int64_t c = pl % C;
      float* yp = out + pl * outSize;
      if (!convPlane(x + pl * inSize, w, c, sx, bias ? (double)bias[c] : 0.0, p, fast, scratch, yp)) {
        finite.store(false, std::memory_order_relaxed);
        return;
      }
      if (compare) planeSums[(size_t)pl].add(reference + pl * outSize, yp, outSize);
    }
  });
  if (!finite.load()) return invalidArgument("qconvDepthwise: X contains NaN or Inf");
  for (const ErrorAccumulator& a : planeSums) sums->merge(a);
  return Status::ok();
}

}  // namespace qs
