// 1x1 Conv on nChw16c, AVX-512 (ai.onnx Conv 1..21 / ai.quantscope FusedConv): see conv1x1_blocked.h.
#include "core/kernels/conv1x1_blocked.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include "core/exec/parallel.h"

namespace qs {

namespace {

constexpr int64_t kB = 16;  // channels per block

struct Args {
  const float* w;         // the tile's first output block at its first input block: [ob][Cb][16][16]
  int64_t wStride;        // floats from one output block's weights to the next (Cb * 256)
  const float* x;         // the tile's first pixel in input block 0
  int64_t xStride;        // floats from one input block to the next (P * 16)
  float* y;               // the tile's first pixel in its first output block
  const float* residual;  // the same place in the residual, or null
  int64_t yStride;        // floats from one output block to the next (P * 16)
  const float* bias;      // the tile's first output block's 16 values
  int64_t k0, k1;         // the input blocks of this pass: the partial sums in y are carried when k0 > 0 / k1 < Cb
  int64_t Cb, lastLanes;  // input blocks, and the real channels of the last one (1-16)
  int post;
  float lo, hi;
};

#define QS_AVX512 __attribute__((target("avx512f")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // _mm512_set1_ps in GCC 12's headers

// Input channel i of a block: OB weight vectors, each pixel's value broadcast against them.
template <int OB, int PX>
QS_AVX512 inline __attribute__((always_inline)) void step(const float* ws, int64_t wStride, const float* xs, int i,
                                                          __m512 (&acc)[OB][PX]) {
  __m512 wv[OB];
#pragma GCC unroll 4
  for (int o = 0; o < OB; ++o) wv[o] = _mm512_load_ps(ws + o * wStride + i * kB);
#pragma GCC unroll 24
  for (int p = 0; p < PX; ++p) {
    const __m512 xv = _mm512_set1_ps(xs[p * kB + i]);
#pragma GCC unroll 4
    for (int o = 0; o < OB; ++o) acc[o][p] = _mm512_fmadd_ps(wv[o], xv, acc[o][p]);
  }
}

// OB output blocks x PX pixels. Each output is one FMA chain over the input channels in ascending
// order, started from zero at input block 0 and carried through y between passes of input blocks
// (a float stored and loaded back is the same float, so the chain is the same as one in registers).
// After the last input block: + bias, + residual, then Relu or Clip.
template <int OB, int PX>
QS_AVX512 void tile(const Args& a) {
  __m512 acc[OB][PX];
  if (a.k0 == 0) {
#pragma GCC unroll 4
    for (int o = 0; o < OB; ++o)
#pragma GCC unroll 24
      for (int p = 0; p < PX; ++p) acc[o][p] = _mm512_setzero_ps();
  } else {
#pragma GCC unroll 4
    for (int o = 0; o < OB; ++o)
#pragma GCC unroll 24
      for (int p = 0; p < PX; ++p) acc[o][p] = _mm512_loadu_ps(a.y + o * a.yStride + p * kB);
  }
  for (int64_t cb = a.k0; cb < a.k1; ++cb) {
    const float* xs = a.x + cb * a.xStride;
    const float* ws = a.w + cb * kB * kB;
    if (cb + 1 < a.Cb || a.lastLanes == kB) {
#pragma GCC unroll 16
      for (int i = 0; i < (int)kB; ++i) step<OB, PX>(ws, a.wStride, xs, i, acc);
    } else {
      for (int i = 0; i < (int)a.lastLanes; ++i) step<OB, PX>(ws, a.wStride, xs, i, acc);
    }
  }
  if (a.k1 < a.Cb) {
#pragma GCC unroll 4
    for (int o = 0; o < OB; ++o)
#pragma GCC unroll 24
      for (int p = 0; p < PX; ++p) _mm512_storeu_ps(a.y + o * a.yStride + p * kB, acc[o][p]);
    return;
  }
  const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(a.lo), hi = _mm512_set1_ps(a.hi);
#pragma GCC unroll 4
  for (int o = 0; o < OB; ++o) {
    const __m512 b = _mm512_load_ps(a.bias + o * kB);
#pragma GCC unroll 24
    for (int p = 0; p < PX; ++p) {
      __m512 v = _mm512_add_ps(acc[o][p], b);
      if (a.residual) v = _mm512_add_ps(v, _mm512_loadu_ps(a.residual + o * a.yStride + p * kB));
      if (a.post == 1) v = _mm512_max_ps(v, zero);
      else if (a.post == 2) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      _mm512_storeu_ps(a.y + o * a.yStride + p * kB, v);
    }
  }
}

// tile<OB, n> for n in [1, PX].
template <int OB, int PX>
QS_AVX512 void tail(int64_t n, const Args& a) {
  if constexpr (PX > 0) {
    if (n == PX) tile<OB, PX>(a);
    else tail<OB, PX - 1>(n, a);
  }
}

// Pixels [0, n) from a's first pixel on, OB output blocks: ceil(n / PX) tiles of as even widths as
// they go (49 pixels at 7x7: 4 tiles of 6 and 5 of 5, not 8 of 6 and one of 1, which loads OB weight
// vectors for every OB multiply-adds).
template <int OB, int PX>
QS_AVX512 void pixels(int64_t n, Args a) {
  const int64_t tiles = (n + PX - 1) / PX, width = n / tiles, wider = n % tiles;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t w = width + (t < wider ? 1 : 0);
    if (w == PX) tile<OB, PX>(a);
    else tail<OB, PX - 1>(w, a);
    a.x += w * kB;
    a.y += w * kB;
    if (a.residual) a.residual += w * kB;
  }
}

#pragma GCC diagnostic pop
#undef QS_AVX512

// Pixels per tile for OB output blocks: OB * PX accumulators of the 32 zmm registers, with room for
// OB weight vectors and a broadcast.
constexpr int64_t pixelsPerTile(int64_t ob) { return ob == 4 ? 6 : ob == 3 ? 8 : ob == 2 ? 12 : 24; }

}  // namespace

bool Conv1x1Blocked::available() {
  static const bool on = __builtin_cpu_supports("avx512f");
  return on;
}

bool Conv1x1Blocked::supported(const std::vector<FusedActivation>& activations, bool residual) {
  using K = FusedActivation::Kind;
  if (activations.empty()) return true;
  return !residual && activations.size() == 1 && (activations[0].kind == K::Relu || activations[0].kind == K::Clip);
}

std::unique_ptr<Conv1x1Blocked> Conv1x1Blocked::create(const Tensor& W, const Tensor* B,
                                                       const std::vector<FusedActivation>& activations, bool residual,
                                                       bool reluAfterResidual) {
  if (!available() || !supported(activations, residual)) return nullptr;
  if (W.dtype() != DType::Float || W.rank() != 4 || W.dim(2) < 1 || W.dim(3) < 1) return nullptr;
  const int64_t M = W.dim(0), Cin = W.dim(1), KH = W.dim(2), KW = W.dim(3), taps = KH * KW;
  if (M < 1 || Cin < 1 || (B && (B->dtype() != DType::Float || B->numel() != M))) return nullptr;
  // The taps of a larger filter are whole groups of input blocks: channel tails only for a 1x1.
  if (taps > 1 && Cin % kB != 0) return nullptr;
  const int64_t C = taps * Cin;  // reduction index t * Cin + c for tap t = kh * KW + kw
  std::unique_ptr<Conv1x1Blocked> k(new Conv1x1Blocked());
  k->m_C = C;
  k->m_M = M;
  k->m_Cb = (C + kB - 1) / kB;
  k->m_Mb = (M + kB - 1) / kB;
  k->m_KH = KH;
  k->m_KW = KW;
  k->m_taps = taps;
  const size_t wFloats = (size_t)(k->m_Mb * k->m_Cb * kB * kB), bFloats = (size_t)(k->m_Mb * kB);
  k->m_store = WeightBuffer(sizeof(float) * (wFloats + bFloats));  // zeroed, 64-byte aligned
  float* base = k->m_store.data();
  float* w = base;
  float* bias = base + wFloats;
  const float* src = W.data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t ci = 0; ci < Cin; ++ci)
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t c = t * Cin + ci;
        w[((m / kB * k->m_Cb + c / kB) * kB + c % kB) * kB + m % kB] = src[(m * Cin + ci) * taps + t];
      }
  if (B) std::memcpy(bias, B->data<float>(), sizeof(float) * (size_t)M);
  k->m_w = w;
  k->m_bias = bias;
  k->m_residual = residual;
  if (residual) {
    k->m_post = reluAfterResidual ? 1 : 0;
  } else if (!activations.empty()) {
    k->m_post = activations[0].kind == FusedActivation::Kind::Relu ? 1 : 2;
    k->m_lo = activations[0].a;
    k->m_hi = activations[0].b;
  }
  return k;
}

void Conv1x1Blocked::run(const float* x, int64_t P, float* y, const float* residual, int64_t mb0, int64_t mb1,
                         int64_t p0, int64_t p1) const {
  runPixels(x, P, nullptr, y, P, 0, residual, mb0, mb1, p0, p1);
}

void Conv1x1Blocked::runInto(const float* x, int64_t P, float* y, int64_t yP, int64_t yFirst, int64_t p0,
                             int64_t p1) const {
  runPixels(x, P, nullptr, y, yP, yFirst, nullptr, 0, m_Mb, p0, p1);
}

void Conv1x1Blocked::runWindow(const float* x, const WindowGeometry& g, float* y, const float* residual,
                               int64_t mb0, int64_t mb1, int64_t p0, int64_t p1) const {
  const bool plain = m_taps == 1 && g.s[1] == 1 && g.s[2] == 1 && g.padB[1] == 0 && g.padB[2] == 0;
  const int64_t P = g.out[1] * g.out[2];
  runPixels(x, P, plain ? nullptr : &g, y, P, 0, residual, mb0, mb1, p0, p1);
}

void Conv1x1Blocked::runPixels(const float* x, int64_t P, const WindowGeometry* g, float* y, int64_t yP,
                               int64_t yFirst, const float* residual, int64_t mb0, int64_t mb1, int64_t p0,
                               int64_t p1) const {
  if (mb0 >= mb1 || p0 >= p1) return;
  Args a{};
  a.wStride = m_Cb * kB * kB;
  a.yStride = yP * kB;
  a.Cb = m_Cb;
  a.lastLanes = m_C - (m_Cb - 1) * kB;
  a.post = m_post;
  a.lo = m_lo;
  a.hi = m_hi;
  // Pixel chunks whose input (all input blocks) stays in L2 (~256 KB), then groups of output blocks,
  // then passes of input blocks whose weights for the group stay in L1 (~32 KB: 8 blocks of 16 input
  // channels for 4 output blocks), then the tiles of the chunk. A residual that is y itself would be
  // overwritten by the partial sums: one pass then. Where the range's weights are at least its input
  // (resnet50's 2048 -> 512 at 7x7: 4 MB against 0.4 MB), one chunk, so that the weights stream once
  // (chunks of 24 pixels had streamed them three times, the last chunk one pixel: 1.16x jit_1x1's time).
  // Chunks of even sizes.
  const int64_t n = p1 - p0;
  int64_t chunk = std::clamp<int64_t>(262144 / (m_Cb * kB * 4) / 24 * 24, 24, 1 << 20);
  if ((mb1 - mb0) * kB >= n) chunk = n;
  const int64_t chunks = (n + chunk - 1) / chunk;
  chunk = (n + chunks - 1) / chunks;
  const bool carry = residual == nullptr || residual != y;
  // A window other than a 1x1 of stride 1: the chunk's im2col gathered into [taps * Cb][chunk][16] (one 64-byte
  // pixel of a block at a time, zero in the pads), so that the tiles read it as a stride-1 1x1 input, in L2.
  static thread_local std::vector<float> gathered;
  if (g && gathered.size() < (size_t)(m_Cb * chunk * kB)) gathered.resize((size_t)(m_Cb * chunk * kB));
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t np = std::min(chunk, p1 - c0);
    const float* xc = x + c0 * kB;
    a.xStride = P * kB;
    if (g) {
      const int64_t H = g->in[1], W = g->in[2], Wo = g->out[2], sh = g->s[1], sw = g->s[2];
      const int64_t cbIn = m_Cb / m_taps;
      float* buf = gathered.data();
      for (int64_t t = 0; t < m_taps; ++t) {
        const int64_t kh = t / m_KW, kw = t % m_KW;
        for (int64_t cb = 0; cb < cbIn; ++cb) {
          const float* src = x + cb * H * W * kB;
          float* dst = buf + (t * cbIn + cb) * np * kB;
          for (int64_t p = c0; p < c0 + np; ++p, dst += kB) {
            const int64_t ih = p / Wo * sh + kh - g->padB[1], iw = p % Wo * sw + kw - g->padB[2];
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) std::memset(dst, 0, sizeof(float) * kB);
            else std::memcpy(dst, src + (ih * W + iw) * kB, sizeof(float) * kB);
          }
        }
      }
      xc = buf;
      a.xStride = np * kB;
    }
    for (int64_t mb = mb0; mb < mb1;) {
      const int64_t ob = std::min<int64_t>(4, mb1 - mb);
      const int64_t pass = carry ? std::max<int64_t>(1, 32 / ob) : m_Cb;
      a.w = m_w + mb * a.wStride;
      a.bias = m_bias + mb * kB;
      a.x = xc;
      a.y = y + mb * a.yStride + (c0 - yFirst) * kB;
      a.residual = residual ? residual + mb * a.yStride + (c0 - yFirst) * kB : nullptr;
      for (a.k0 = 0; a.k0 < m_Cb; a.k0 = a.k1) {
        a.k1 = std::min(m_Cb, a.k0 + pass);
        switch (ob) {
          case 4: pixels<4, pixelsPerTile(4)>(np, a); break;
          case 3: pixels<3, pixelsPerTile(3)>(np, a); break;
          case 2: pixels<2, pixelsPerTile(2)>(np, a); break;
          default: pixels<1, pixelsPerTile(1)>(np, a); break;
        }
      }
      mb += ob;
    }
  }
}

int64_t Conv1x1Blocked::partsPerImage(int64_t N, int hardwareThreads) {
  return N >= hardwareThreads ? 1 : std::min<int64_t>((hardwareThreads + N - 1) / std::max<int64_t>(N, 1), 8);
}

void Conv1x1Blocked::runBatch(const float* x, int64_t N, int64_t P, float* y, const float* residual,
                              int threads) const {
  WindowGeometry g;
  g.nd = 2;
  g.in[2] = g.out[2] = P;
  runBatchWindow(x, N, g, y, residual, threads);
}

void Conv1x1Blocked::runBatchWindow(const float* x, int64_t N, const WindowGeometry& g, float* y,
                                    const float* residual, int threads) const {
  const int64_t P = g.out[1] * g.out[2];
  const int64_t parts = partsPerImage(N, hardwareThreads());
  const int64_t inPer = m_Cb / m_taps * kB * g.in[1] * g.in[2], outPer = m_Mb * kB * P;
  const bool byPixels = P >= kB * m_Mb || m_Mb < parts;
  parallelFor(threads, N * parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t n = task / parts, part = task % parts;
      int64_t mb0 = 0, mb1 = m_Mb, p0 = 0, p1 = P;
      if (byPixels) {
        p0 = part * P / parts;
        p1 = (part + 1) * P / parts;
      } else {
        mb0 = part * m_Mb / parts;
        mb1 = (part + 1) * m_Mb / parts;
      }
      runWindow(x + n * inPer, g, y + n * outPer, residual ? residual + n * outPer : nullptr, mb0, mb1, p0, p1);
    }
  });
}

}  // namespace qs
