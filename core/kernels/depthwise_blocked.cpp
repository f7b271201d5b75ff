// Depthwise Conv on nChw16c, AVX-512 (ai.onnx Conv 1..21 / ai.quantscope FusedConv): see depthwise_blocked.h.
#include "core/kernels/depthwise_blocked.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/exec/parallel.h"

namespace qs {

namespace {

constexpr int64_t kB = 16;  // channels per block

// One output row of one channel block.
struct Row {
  const float* x;     // the block's input [H][W][16]
  const float* w;     // the block's weights [KH * KW][16]
  const float* bias;  // the block's 16 bias values
  float* y;           // the row's output [OW][16]
  int64_t W, KW, sw, pl;
  int64_t ih0, kh0, kh1;  // the input row of tap row 0, and the tap rows inside the image
  int post;
  float lo, hi;
};

#define QS_AVX512 __attribute__((target("avx512f")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // _mm512_set1_ps in GCC 12's headers

QS_AVX512 inline __m512 activate(__m512 v, const Row& r) {
  if (r.post == 1) return _mm512_max_ps(v, _mm512_setzero_ps());
  if (r.post == 2) return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(r.lo)), _mm512_set1_ps(r.hi));
  return v;
}

// T output pixels from ow on, every tap's column inside the image: the bias, then one FMA per tap, tap
// rows ascending, columns ascending (jit_dw's order; the product x * w is rounded once either way).
template <int T>
QS_AVX512 inline void interior(const Row& r, int64_t ow) {
  __m512 acc[T];
  const __m512 b = _mm512_load_ps(r.bias);
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) acc[j] = b;
  const int64_t step = r.sw * kB;
  for (int64_t kh = r.kh0; kh < r.kh1; ++kh) {
    const float* xr = r.x + ((r.ih0 + kh) * r.W + ow * r.sw - r.pl) * kB;
    const float* wr = r.w + kh * r.KW * kB;
    for (int64_t kw = 0; kw < r.KW; ++kw) {
      const __m512 wv = _mm512_load_ps(wr + kw * kB);
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + j * step + kw * kB), wv, acc[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) _mm512_storeu_ps(r.y + (ow + j) * kB, activate(acc[j], r));
}

// One output pixel whose taps may fall outside the image's columns: those are skipped.
QS_AVX512 inline void border(const Row& r, int64_t ow) {
  __m512 acc = _mm512_load_ps(r.bias);
  const int64_t iw0 = ow * r.sw - r.pl;
  const int64_t kw0 = std::max<int64_t>(0, -iw0), kw1 = std::min<int64_t>(r.KW, r.W - iw0);
  for (int64_t kh = r.kh0; kh < r.kh1; ++kh) {
    const float* xr = r.x + ((r.ih0 + kh) * r.W + iw0) * kB;
    const float* wr = r.w + kh * r.KW * kB;
    for (int64_t kw = kw0; kw < kw1; ++kw)
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(xr + kw * kB), _mm512_load_ps(wr + kw * kB), acc);
  }
  _mm512_storeu_ps(r.y + ow * kB, activate(acc, r));
}

QS_AVX512 void row(const Row& r, int64_t OW) {
  // [owA, owB): the outputs whose taps all lie inside the columns.
  const int64_t owA = std::min<int64_t>(OW, (r.pl + r.sw - 1) / r.sw);
  const int64_t last = r.W - r.KW + r.pl;  // ow * sw <= last
  const int64_t owB = std::max<int64_t>(owA, std::min<int64_t>(OW, last < 0 ? 0 : last / r.sw + 1));
  for (int64_t ow = 0; ow < owA; ++ow) border(r, ow);
  int64_t ow = owA;
  for (; ow + 8 <= owB; ow += 8) interior<8>(r, ow);
  if (ow + 4 <= owB) {
    interior<4>(r, ow);
    ow += 4;
  }
  for (; ow < owB; ++ow) interior<1>(r, ow);
  for (ow = owB; ow < OW; ++ow) border(r, ow);
}

#pragma GCC diagnostic pop
#undef QS_AVX512

}  // namespace

bool DepthwiseBlocked::available() {
  static const bool on = __builtin_cpu_supports("avx512f");
  return on;
}

bool DepthwiseBlocked::supported(const std::vector<FusedActivation>& activations) {
  using K = FusedActivation::Kind;
  if (activations.empty()) return true;
  return activations.size() == 1 && (activations[0].kind == K::Relu || activations[0].kind == K::Clip);
}

std::unique_ptr<DepthwiseBlocked> DepthwiseBlocked::create(const Tensor& W, const Tensor* B,
                                                           const std::vector<FusedActivation>& activations) {
  if (!available() || !supported(activations)) return nullptr;
  if (W.dtype() != DType::Float || W.rank() != 4 || W.dim(1) != 1) return nullptr;
  const int64_t C = W.dim(0), KH = W.dim(2), KW = W.dim(3);
  if (C < 1 || KH < 1 || KW < 1 || (B && (B->dtype() != DType::Float || B->numel() != C))) return nullptr;
  std::unique_ptr<DepthwiseBlocked> k(new DepthwiseBlocked());
  k->m_C = C;
  k->m_Cb = (C + kB - 1) / kB;
  k->m_KH = KH;
  k->m_KW = KW;
  const size_t wFloats = (size_t)(k->m_Cb * KH * KW * kB), bFloats = (size_t)(k->m_Cb * kB);
  k->m_store.assign(wFloats + bFloats + 16, 0.f);
  float* base = k->m_store.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float* w = base;
  float* bias = base + wFloats;
  const float* src = W.data<float>();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < KH * KW; ++t) w[(c / kB * KH * KW + t) * kB + c % kB] = src[c * KH * KW + t];
  if (B) std::memcpy(bias, B->data<float>(), sizeof(float) * (size_t)C);
  k->m_w = w;
  k->m_bias = bias;
  if (!activations.empty()) {
    k->m_post = activations[0].kind == FusedActivation::Kind::Relu ? 1 : 2;
    k->m_lo = activations[0].a;
    k->m_hi = activations[0].b;
  }
  return k;
}

bool DepthwiseBlocked::takes(const WindowGeometry& g) const {
  return g.nd == 2 && g.k[1] == m_KH && g.k[2] == m_KW && g.d[1] == 1 && g.d[2] == 1 && g.s[1] >= 1 && g.s[2] >= 1;
}

void DepthwiseBlocked::run(const float* x, const WindowGeometry& g, float* y, int64_t cb0, int64_t cb1, int64_t oh0,
                           int64_t oh1) const {
  runBand(x, 0, g.in[1], g, y, cb0, cb1, oh0, oh1);
}

void DepthwiseBlocked::runBand(const float* x, int64_t xRow0, int64_t xRows, const WindowGeometry& g, float* y,
                               int64_t cb0, int64_t cb1, int64_t oh0, int64_t oh1) const {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  Row r{};
  r.W = W;
  r.KW = m_KW;
  r.sw = g.s[2];
  r.pl = g.padB[2];
  r.post = m_post;
  r.lo = m_lo;
  r.hi = m_hi;
  oh1 = std::min(oh1, OH);
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    r.x = x + cb * xRows * W * kB;
    r.w = m_w + cb * m_KH * m_KW * kB;
    r.bias = m_bias + cb * kB;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const int64_t ih0 = oh * g.s[1] - g.padB[1];  // in the image; the taps outside it are skipped
      r.kh0 = std::max<int64_t>(0, -ih0);
      r.kh1 = std::min<int64_t>(m_KH, H - ih0);
      r.ih0 = ih0 - xRow0;  // in the band
      r.y = y + (cb * OH + oh) * OW * kB;
      row(r, OW);
    }
  }
}

void DepthwiseBlocked::runBatch(const float* x, int64_t N, const WindowGeometry& g, float* y, bool byRows,
                                int threads) const {
  const int hw = hardwareThreads();
  const int64_t parts = N >= hw ? 1 : std::min<int64_t>((hw + N - 1) / std::max<int64_t>(N, 1), 8);
  const int64_t OH = g.out[1], inPer = m_Cb * g.inSize() * kB, outPer = m_Cb * g.outSize() * kB;
  parallelFor(threads, N * parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t n = task / parts, part = task % parts;
      int64_t cb0 = 0, cb1 = m_Cb, oh0 = 0, oh1 = OH;
      if (byRows) {
        oh0 = part * OH / parts;
        oh1 = (part + 1) * OH / parts;
      } else {
        cb0 = part * m_Cb / parts;
        cb1 = (part + 1) * m_Cb / parts;
      }
      run(x + n * inPer, g, y + n * outPer, cb0, cb1, oh0, oh1);
    }
  });
}

}  // namespace qs
