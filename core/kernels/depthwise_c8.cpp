// Depthwise 2-D convolution eight channels at a time (ai.onnx Conv 1..21,
// ai.quantscope FusedConv; the Conv kernel's depthwise path,
// core/kernels/conv.cpp).
#include "core/kernels/depthwise_c8.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace qs {

namespace {

// r[i] = lane i of each of the eight rows: an 8x8 transpose in registers.
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
               u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
               u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
               u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
               u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

float* scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// V adjacent output pixels of one row, eight channels each: V independent
// chains, each summed as bias + taps in (kh, kw) order (depthwisePlaneVector's
// order). `in` is the interleaved padded input at the window origin of the
// first pixel; pixel stride `ps` and row stride `rs` in floats.
template <int V>
inline void pixels(const float* in, const float* wt, __m256 vb, int64_t KH, int64_t KW, int64_t rowStep,
                   int64_t colStep, int64_t ps, float* out) {
  __m256 a[V];
  for (int v = 0; v < V; ++v) a[v] = vb;
  for (int64_t kh = 0; kh < KH; ++kh) {
    const float* rp = in + kh * rowStep;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const __m256 wv = _mm256_load_ps(wt + (kh * KW + kw) * 8);
      const float* p = rp + kw * colStep;
      for (int v = 0; v < V; ++v) a[v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(p + v * ps), a[v]);
    }
  }
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + 8 * v, a[v]);
}

}  // namespace

bool depthwise8Preferred(int64_t C, const WindowGeometry& g) {
  if (g.nd != 2 || C < 8 || g.kSize() > 64) return false;
  // Measured (docs/performance.md, "Small CNNs"): ahead of the plane kernel and
  // of oneDNN for rows of up to 56 outputs (2-3x at 7..28); level or behind the
  // plane kernel at 112. Short planes too (at most 16 input rows, rows of up to 160 outputs: rec's
  // and cls's text-line planes), where the plane kernel's border rows weigh: rec's 3x3 over 128
  // channels at 12x160 0.35 -> 0.18 ms, its 5x5 over 240 at 12x80 0.47 -> 0.26 ms (1 thread); on
  // 24 rows (rec's 16-64 channels at 24x160) the plane kernel stayed ahead by 15-25%.
  return g.out[2] <= 56 || (g.in[1] <= 16 && g.out[2] <= 160);
}

void depthwiseConv8(const float* x, const float* w, const float* bias, int64_t c0, const WindowGeometry& g,
                    const std::vector<FusedActivation>& activations, float* y) {
  const int64_t IH = g.in[1], IW = g.in[2], OH = g.out[1], OW = g.out[2];
  const int64_t KH = g.k[1], KW = g.k[2], sh = g.s[1], sw = g.s[2], dh = g.d[1], dw = g.d[2];
  const int64_t pt = g.padB[1], pl = g.padB[2];
  const int64_t inSize = IH * IW, outSize = OH * OW, K = KH * KW;
  // Columns of the padded input that some output reads; the output rows go in
  // strips whose interleaved input stays within ~32 KB (L1), so large planes do
  // not spill the scratch to L3.
  const int64_t PW = (OW - 1) * sw + (KW - 1) * dw + 1;
  const int64_t R = std::clamp<int64_t>(8192 / std::max<int64_t>(1, sh * PW * 8), 1, OH);
  const int64_t PHmax = (R - 1) * sh + (KH - 1) * dh + 1;
  thread_local std::vector<float> padBuf, outBuf;
  float* P = scratch(padBuf, (size_t)(PHmax * PW * 8));
  float* O = scratch(outBuf, (size_t)(R * OW * 8));

  alignas(32) float wt[64 * 8];
  for (int64_t k = 0; k < K; ++k)
    for (int c = 0; c < 8; ++c) wt[k * 8 + c] = w[(c0 + c) * K + k];
  alignas(32) float bv[8];
  for (int c = 0; c < 8; ++c) bv[c] = bias ? bias[c0 + c] : 0.f;
  const __m256 vb = _mm256_load_ps(bv);

  const float* src[8];
  float* dstPlane[8];
  for (int c = 0; c < 8; ++c) {
    src[c] = x + (c0 + c) * inSize;
    dstPlane[c] = y + (c0 + c) * outSize;
  }
  const int64_t lead = std::min(pl, PW), body = std::max<int64_t>(0, std::min(IW, PW - lead));
  alignas(32) int32_t maskBits[8];
  for (int j = 0; j < 8; ++j) maskBits[j] = j < body % 8 ? -1 : 0;
  const __m256i tailMask = _mm256_load_si256(reinterpret_cast<const __m256i*>(maskBits));
  const int64_t rowStep = dh * PW * 8, colStep = dw * 8, ps = sw * 8;

  for (int64_t oh0 = 0; oh0 < OH; oh0 += R) {
    const int64_t rows = std::min(R, OH - oh0), PH = (rows - 1) * sh + (KH - 1) * dh + 1;
    // Interleave the eight planes' rows of this strip into P[r][c][8], zeros
    // around.
    for (int64_t r = 0; r < PH; ++r) {
      float* prow = P + r * PW * 8;
      const int64_t ir = oh0 * sh + r - pt;
      if (ir < 0 || ir >= IH) {
        std::memset(prow, 0, sizeof(float) * (size_t)(PW * 8));
        continue;
      }
      std::memset(prow, 0, sizeof(float) * (size_t)(lead * 8));
      std::memset(prow + (lead + body) * 8, 0, sizeof(float) * (size_t)((PW - lead - body) * 8));
      float* dst = prow + lead * 8;
      int64_t iw = 0;
      __m256 t[8];
      for (; iw + 8 <= body; iw += 8) {
        for (int c = 0; c < 8; ++c) t[c] = _mm256_loadu_ps(src[c] + ir * IW + iw);
        transpose8(t);
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (iw + j) * 8, t[j]);
      }
      if (iw < body) {  // the last columns: masked loads, only the real columns
                        // stored
        for (int c = 0; c < 8; ++c) t[c] = _mm256_maskload_ps(src[c] + ir * IW + iw, tailMask);
        transpose8(t);
        for (int64_t j = 0; j < body - iw; ++j) _mm256_storeu_ps(dst + (iw + j) * 8, t[j]);
      }
    }
    for (int64_t oh = 0; oh < rows; ++oh) {
      const float* rowIn = P + oh * sh * PW * 8;
      float* rowOut = O + oh * OW * 8;
      int64_t ow = 0;
      for (; ow + 8 <= OW; ow += 8) pixels<8>(rowIn + ow * ps, wt, vb, KH, KW, rowStep, colStep, ps, rowOut + ow * 8);
      // The rest of the row as one group of independent chains (one pixel at a
      // time left the row's tail waiting on FMA latency: 14-wide rows ran at
      // half speed).
      const float* in = rowIn + ow * ps;
      float* out = rowOut + ow * 8;
      switch (OW - ow) {
        case 7:
          pixels<7>(in, wt, vb, KH, KW, rowStep, colStep, ps, out);
          break;
        case 6:
          pixels<6>(in, wt, vb, KH, KW, rowStep, colStep, ps, out);
          break;
        case 5:
          pixels<5>(in, wt, vb, KH, KW, rowStep, colStep, ps, out);
          break;
        case 4:
          pixels<4>(in, wt, vb, KH, KW, rowStep, colStep, ps, out);
          break;
        case 3:
          pixels<3>(in, wt, vb, KH, KW, rowStep, colStep, ps, out);
          break;
        case 2:
          pixels<2>(in, wt, vb, KH, KW, rowStep, colStep, ps, out);
          break;
        case 1:
          pixels<1>(in, wt, vb, KH, KW, rowStep, colStep, ps, out);
          break;
        default:
          break;
      }
    }
    // The activations are elementwise with the same formula for every lane and
    // the tail (applyFusedActivations), so applying them here gives the plane
    // kernel's bits.
    const int64_t n = rows * OW;
    if (!activations.empty()) applyFusedActivations(O, n * 8, 0.f, activations);
    // Back to eight planes.
    const int64_t at = oh0 * OW;
    int64_t p = 0;
    for (; p + 8 <= n; p += 8) {
      __m256 t[8];
      for (int j = 0; j < 8; ++j) t[j] = _mm256_loadu_ps(O + (p + j) * 8);
      transpose8(t);
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(dstPlane[c] + at + p, t[c]);
    }
    for (; p < n; ++p)
      for (int c = 0; c < 8; ++c) dstPlane[c][at + p] = O[p * 8 + c];
  }
}

}  // namespace qs
