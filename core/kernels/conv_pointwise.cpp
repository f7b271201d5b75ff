// Direct 1x1 Conv over NCHW (the Conv kernel's path for pointwise convolutions): see conv_pointwise.h.
#include "core/kernels/conv_pointwise.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string_view>

#include "core/exec/parallel.h"

namespace qs {

namespace {

constexpr int64_t kRows = PackedMatrix::kRowsPerPanel;  // 6 output channels per tile
constexpr int64_t kSlice = 256;                          // the GEMM's K slice (gemm.cpp, KC): same sums
constexpr int64_t kStrip = 16;                           // pixels per tile (2 vectors)

using K = FusedActivation::Kind;

// The fused activations on one vector: the formulas and operand orders of applyFusedActivations
// (conv.cpp), so the bits match it. Sigmoid is not here (applyFusedActivations runs it scalar).
inline __m256 activate(__m256 v, const std::vector<FusedActivation>& ops) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.f);
  for (const FusedActivation& op : ops) {
    const __m256 va = _mm256_set1_ps(op.a), vb = _mm256_set1_ps(op.b);
    switch (op.kind) {
      case K::Relu: v = _mm256_max_ps(v, zero); break;
      case K::Clip: v = _mm256_min_ps(_mm256_max_ps(v, va), vb); break;
      case K::HardSigmoid: v = _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(va, v, vb), zero), one); break;
      case K::HardSwish:
        v = _mm256_mul_ps(v, _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(va, v, vb), zero), one));
        break;
      case K::LeakyRelu: v = _mm256_blendv_ps(_mm256_mul_ps(v, va), v, _mm256_cmp_ps(v, zero, _CMP_GE_OQ)); break;
      case K::Mul: v = _mm256_mul_ps(v, va); break;
      case K::Add: v = _mm256_add_ps(v, va); break;
      case K::Sigmoid: break;  // never passed here
    }
  }
  return v;
}

// How a tile ends: the bias, then the activations in registers (inRegister), or, with a Sigmoid
// among them, the bias in registers and applyFusedActivations over the stored rows.
struct Epilogue {
  enum class Mode { None, Relu, Clip, Vector, Stored };
  const float* bias = nullptr;  // indexed by output channel; null: none
  const std::vector<FusedActivation>* ops = nullptr;
  Mode mode = Mode::None;  // Relu / Clip: the one activation; Vector: activate(); Stored: after the store
  float lo = 0, hi = 0;    // Clip's bounds
};

// One output vector through the epilogue: the bias unless zero, then the activations.
inline __m256 finish(__m256 o, float bias, const Epilogue& ep) {
  if (bias != 0.f) o = _mm256_add_ps(o, _mm256_set1_ps(bias));
  switch (ep.mode) {
    case Epilogue::Mode::Relu: return _mm256_max_ps(o, _mm256_setzero_ps());
    case Epilogue::Mode::Clip: return _mm256_min_ps(_mm256_max_ps(o, _mm256_set1_ps(ep.lo)), _mm256_set1_ps(ep.hi));
    case Epilogue::Mode::Vector: return activate(o, *ep.ops);
    default: return o;
  }
}

// One tile: rows [m, m + mr) of the output (mr <= 6 * PANELS) over nr <= 8 * NV pixels starting at
// x / y, W's panels at `panel` and, for PANELS == 2, the next one after it (one vector of pixels
// over 12 rows: the last few pixels of a row keep 12 FMA chains in flight instead of 6).
// MASKED: the last vector holds fewer than 8 pixels (masked loads and stores; nothing outside the
// rows is read or written). The K loop runs in slices of 256 as the GEMM's does: the first slice's
// sums are kept in registers (K <= 256, every 1x1 here but the widest) or in `total`, each later
// slice's chain starts from zero and is added to them (slice + total, the GEMM's operand order).
template <int NV, bool MASKED, int PANELS = 1>
void tile(const float* panel, int64_t C, const float* x, int64_t P, float* y, int64_t m, int64_t mr, int64_t nr,
          const Epilogue& ep) {
  __m256i mask = _mm256_setzero_si256();
  if constexpr (MASKED) {
    const int64_t lanes = nr - 8 * (NV - 1);
    mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  auto loadB = [&](const float* p, int v) {
    if constexpr (MASKED) {
      if (v == NV - 1) return _mm256_maskload_ps(p, mask);
    }
    return _mm256_loadu_ps(p);
  };
  constexpr int kTileRows = (int)kRows * PANELS;
  const int64_t panelStride = kRows * C;  // PackedMatrix: panel p at p * 6 * K
  __m256 acc[kTileRows][NV] = {};
  alignas(32) float total[kTileRows][8 * NV];
  for (int64_t k0 = 0; k0 < C; k0 += kSlice) {
    const int64_t kc = std::min(kSlice, C - k0);
#pragma GCC unroll 12
    for (int r = 0; r < kTileRows; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
    const float* a = panel + k0 * kRows;
    const float* b = x + k0 * P;
    for (int64_t k = 0; k < kc; ++k, a += kRows, b += P) {
      __m256 bv[NV];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) bv[v] = loadB(b + 8 * v, v);
#pragma GCC unroll 12
      for (int r = 0; r < kTileRows; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + (r / kRows) * panelStride + r % kRows);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
    if (C > kSlice) {
#pragma GCC unroll 12
      for (int r = 0; r < kTileRows; ++r)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) {
          if (k0 > 0) acc[r][v] = _mm256_add_ps(acc[r][v], _mm256_load_ps(total[r] + 8 * v));
          _mm256_store_ps(total[r] + 8 * v, acc[r][v]);
        }
    }
  }
  // Constant bounds, fully unrolled: an accumulator indexed at run time would live on the stack.
#pragma GCC unroll 12
  for (int r = 0; r < kTileRows; ++r) {
    if (r >= mr) break;
    float* out = y + (m + r) * P;
    // The GEMM path adds a zero bias not at all (keeps a -0 sum's sign): the same here.
    const float bias = ep.bias ? ep.bias[m + r] : 0.f;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __m256 o = finish(acc[r][v], bias, ep);
      if (MASKED && v == NV - 1) _mm256_maskstore_ps(out + 8 * v, mask, o);
      else _mm256_storeu_ps(out + 8 * v, o);
    }
    if (ep.mode == Epilogue::Mode::Stored) applyFusedActivations(out, nr, 0.f, *ep.ops);
  }
}

// Rows [m0, m1) (m0 a multiple of 6) over pixels [p0, p1) of one image, in groups of strips whose
// input (C rows of up to 32 x 16 pixels) stays within ~24 KB of L1: every 6-row panel of the block's
// W (L2) runs over the group's strips, so the panel is reused from L1 too, and each output row is
// written a run of up to 2 KB at a time (a strip at a time over all rows left the stores of
// wide, shallow convs such as 16 -> 96 at 112x112 scattered over ~100 rows).
void block(const PackedMatrix& w, const float* x, int64_t P, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
           const Epilogue& ep) {
  const int64_t C = w.cols();
  const int64_t group = std::clamp<int64_t>(384 / std::max<int64_t>(C, 1), 1, 32) * kStrip;
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group);
    for (int64_t m = m0; m < m1; m += kRows) {
      const float* panel = w.panel(m / kRows);
      const int64_t mr = std::min(kRows, m1 - m);
      int64_t p = g0;
      for (; p + kStrip <= g1; p += kStrip) tile<2, false>(panel, C, x + p, P, y + p, m, mr, kStrip, ep);
      const int64_t rest = g1 - p;
      if (rest > 8) tile<2, true>(panel, C, x + p, P, y + p, m, mr, rest, ep);
    }
    // The group's last 1-8 pixels: one vector over two panels (12 rows) at a time.
    const int64_t rest = (g1 - g0) % kStrip, p = g1 - rest;
    if (rest == 0 || rest > 8) continue;
    for (int64_t m = m0; m < m1; m += 2 * kRows) {
      const float* panel = w.panel(m / kRows);
      const int64_t mr = std::min(2 * kRows, m1 - m);
      if (mr > kRows) {
        if (rest == 8) tile<1, false, 2>(panel, C, x + p, P, y + p, m, mr, rest, ep);
        else tile<1, true, 2>(panel, C, x + p, P, y + p, m, mr, rest, ep);
      } else {
        if (rest == 8) tile<1, false>(panel, C, x + p, P, y + p, m, mr, rest, ep);
        else tile<1, true>(panel, C, x + p, P, y + p, m, mr, rest, ep);
      }
    }
  }
}

// The same kernel 16 lanes wide, for AVX-512 CPUs (oneDNN and ONNX Runtime's MLAS run their 1x1
// convolutions there at ~1.3-1.8x our AVX2 rate on rec's shapes). Every output is the same sum in
// the same order as tile() computes it: each K slice one FMA chain from zero over k, the slices
// added (slice + total), the bias unless zero, then the activations with the same operations lane
// by lane. So the bits are those of the AVX2 kernel and of the GEMM path.
#define QS_AVX512 __attribute__((target("avx512f")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // _mm512_set1_ps / maskz loads in GCC 12's headers

QS_AVX512 inline __m512 activate512(__m512 v, const std::vector<FusedActivation>& ops) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.f);
  for (const FusedActivation& op : ops) {
    const __m512 va = _mm512_set1_ps(op.a), vb = _mm512_set1_ps(op.b);
    switch (op.kind) {
      case K::Relu: v = _mm512_max_ps(v, zero); break;
      case K::Clip: v = _mm512_min_ps(_mm512_max_ps(v, va), vb); break;
      case K::HardSigmoid: v = _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(va, v, vb), zero), one); break;
      case K::HardSwish:
        v = _mm512_mul_ps(v, _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(va, v, vb), zero), one));
        break;
      // blendv's choice: v where v >= 0 (ordered), v * a elsewhere (NaN included).
      case K::LeakyRelu: v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GE_OQ), _mm512_mul_ps(v, va), v); break;
      case K::Mul: v = _mm512_mul_ps(v, va); break;
      case K::Add: v = _mm512_add_ps(v, va); break;
      case K::Sigmoid: break;  // never passed here
    }
  }
  return v;
}

QS_AVX512 inline __m512 finish512(__m512 o, float bias, const Epilogue& ep) {
  if (bias != 0.f) o = _mm512_add_ps(o, _mm512_set1_ps(bias));
  switch (ep.mode) {
    case Epilogue::Mode::Relu: return _mm512_max_ps(o, _mm512_setzero_ps());
    case Epilogue::Mode::Clip: return _mm512_min_ps(_mm512_max_ps(o, _mm512_set1_ps(ep.lo)), _mm512_set1_ps(ep.hi));
    case Epilogue::Mode::Vector: return activate512(o, *ep.ops);
    default: return o;
  }
}

// tile() with 16-pixel vectors: rows [m, m + mr) (mr <= 6 * PANELS) over nr <= 16 * NV pixels; the
// last vector masked when MASKED (masked loads do not touch the lanes past the row).
template <int NV, bool MASKED, int PANELS>
QS_AVX512 void tile512(const float* panel, int64_t C, const float* x, int64_t P, float* y, int64_t m, int64_t mr,
                       int64_t nr, const Epilogue& ep) {
  __mmask16 mask = 0xFFFF;
  if constexpr (MASKED) mask = (__mmask16)((1u << (nr - 16 * (NV - 1))) - 1u);
  constexpr int kTileRows = (int)kRows * PANELS;
  const int64_t panelStride = kRows * C;
  __m512 acc[kTileRows][NV];
  alignas(64) float total[kTileRows][16 * NV];
  for (int64_t k0 = 0; k0 < C; k0 += kSlice) {
    const int64_t kc = std::min(kSlice, C - k0);
#pragma GCC unroll 12
    for (int r = 0; r < kTileRows; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    const float* a = panel + k0 * kRows;
    const float* b = x + k0 * P;
    for (int64_t k = 0; k < kc; ++k, a += kRows, b += P) {
      __m512 bv[NV];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v)
        bv[v] = (MASKED && v == NV - 1) ? _mm512_maskz_loadu_ps(mask, b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 12
      for (int r = 0; r < kTileRows; ++r) {
        const __m512 av = _mm512_set1_ps(a[(r / kRows) * panelStride + r % kRows]);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
    if (C > kSlice) {
#pragma GCC unroll 12
      for (int r = 0; r < kTileRows; ++r)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) {
          if (k0 > 0) acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_load_ps(total[r] + 16 * v));
          _mm512_store_ps(total[r] + 16 * v, acc[r][v]);
        }
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kTileRows; ++r) {
    if (r >= mr) break;
    float* out = y + (m + r) * P;
    const float bias = ep.bias ? ep.bias[m + r] : 0.f;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __m512 o = finish512(acc[r][v], bias, ep);
      if (MASKED && v == NV - 1) _mm512_mask_storeu_ps(out + 16 * v, mask, o);
      else _mm512_storeu_ps(out + 16 * v, o);
    }
    if (ep.mode == Epilogue::Mode::Stored) applyFusedActivations(out, nr, 0.f, *ep.ops);
  }
}

// Pixels [p, p + nr) (nr <= 32) over rows [m, m + mr), two panels (12 rows) at a time where
// there are two.
template <int NV, bool MASKED>
QS_AVX512 void strip512(const float* panel, int64_t C, const float* x, int64_t P, float* y, int64_t m, int64_t mr,
                        int64_t nr, const Epilogue& ep) {
  if (mr > kRows) tile512<NV, MASKED, 2>(panel, C, x, P, y, m, mr, nr, ep);
  else tile512<NV, MASKED, 1>(panel, C, x, P, y, m, mr, nr, ep);
}

// block() for AVX-512: strips of 32 pixels (12 rows x 2 vectors: 24 accumulators of the 32
// registers), grouped so that the group's input (C rows) stays within ~24 KB of L1 where C allows.
QS_AVX512 void block512(const PackedMatrix& w, const float* x, int64_t P, float* y, int64_t m0, int64_t m1,
                        int64_t p0, int64_t p1, const Epilogue& ep) {
  const int64_t C = w.cols();
  const int64_t group = std::clamp<int64_t>(192 / std::max<int64_t>(C, 1), 1, 16) * 32;
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group);
    for (int64_t m = m0; m < m1; m += 2 * kRows) {
      const float* panel = w.panel(m / kRows);
      const int64_t mr = std::min(2 * kRows, m1 - m);
      int64_t p = g0;
      for (; p + 32 <= g1; p += 32) strip512<2, false>(panel, C, x + p, P, y + p, m, mr, 32, ep);
      const int64_t rest = g1 - p;
      if (rest == 16) strip512<1, false>(panel, C, x + p, P, y + p, m, mr, rest, ep);
      else if (rest > 16) strip512<2, true>(panel, C, x + p, P, y + p, m, mr, rest, ep);
      else if (rest > 0) strip512<1, true>(panel, C, x + p, P, y + p, m, mr, rest, ep);
    }
  }
}

#pragma GCC diagnostic pop
#undef QS_AVX512

}  // namespace

bool pointwiseAvx512() {
  // QS_POINTWISE=avx2 keeps the AVX2 kernel on an AVX-512 CPU (A/B runs, tests); both give the same bits.
  static const bool wide = [] {
    const char* v = std::getenv("QS_POINTWISE");
    return __builtin_cpu_supports("avx512f") && !(v != nullptr && std::string_view(v) == "avx2");
  }();
  return wide;
}

bool pointwiseDirectPreferred(int64_t C, int64_t M, int64_t pixels, bool avx512) {
  // The AVX-512 kernel took 0.46-0.79x the GEMM path's time on every 1x1 shape of det and rec,
  // the crowded ones below included (48 -> 48 at 160x160 0.79x, 96 -> 96 at 80x80 0.73x, 240 -> 240
  // at 12x80 0.68x, 480 -> 480 at 6x80 0.59x; qs_bench_pointwise, 2 threads, docs/performance.md).
  if (avx512) return true;
  // The kernel reads C rows of a strip P floats apart. Where P * 4 bytes is a multiple of 64, the
  // rows' lines fall into only 64 / gcd(P / 16, 64) of L1's 64 sets (8 ways): at 160x160 all into
  // one, at 80x80 into 4, at 40x40 into 16. Past ~10 rows a set, the strip no longer stays in L1
  // while the panels run over it, and where many panels do (M >= 48) the GEMM path, which packs
  // the strip contiguously, measured ahead (det's 48 -> 48 at 160x160, 96 -> 96 at 80x80,
  // 192 -> 192 at 40x40: mostly 1.05-1.34x); with few output channels, packing costs more than the misses
  // (48 -> 12 at 160x160: 0.78x).
  if (pixels % 16 == 0) {
    const int64_t sets = 64 / std::gcd<int64_t>(pixels / 16, 64);
    if (C >= 48 && M >= 48 && C > 10 * sets) return false;
  }
  return true;
}

bool pointwiseDirectBeatsOneDnn(int64_t C, int64_t pixels) {
  // oneDNN's 1x1 kernel (blocked layout, reorders included) measured up to 20% ahead below 14x14
  // outputs from ~256 input channels on (mobilenet_v2's 960 -> 160, 320 -> 1280, shufflenet's
  // 464 -> 1024, regnet's 440 -> 440; level at 576 -> 160), level or behind with fewer (160 -> 960,
  // 232 -> 232). The direct kernel everywhere else: level with or ahead of oneDNN
  // (qs_bench_pointwise, docs/performance.md).
  return pixels >= 14 * 14 || C < 256;
}

void pointwiseConvDirect(const PackedMatrix& w, const float* x, int64_t N, int64_t P, const float* bias,
                         const std::vector<FusedActivation>& activations, float* y, int threads) {
  const int64_t M = w.rows(), C = w.cols();
  if (N <= 0 || M <= 0 || P <= 0) return;
  Epilogue ep;
  ep.bias = bias;
  ep.ops = &activations;
  if (activations.size() == 1 && activations[0].kind == K::Relu) {
    ep.mode = Epilogue::Mode::Relu;
  } else if (activations.size() == 1 && activations[0].kind == K::Clip) {
    ep.mode = Epilogue::Mode::Clip;
    ep.lo = activations[0].a;
    ep.hi = activations[0].b;
  } else if (!activations.empty()) {
    ep.mode = Epilogue::Mode::Vector;
    for (const FusedActivation& f : activations)
      if (f.kind == K::Sigmoid) ep.mode = Epilogue::Mode::Stored;
  }
  // Blocks of output rows whose W (6 x C floats per panel) stays within ~256 KB of L2 while it
  // runs over the block's strips; then tasks of at least ~1 M multiply-adds (tens of microseconds
  // on one core), at most 16 per image, as pixel blocks of whole strips. A function of the shape.
  const int64_t strips = (P + kStrip - 1) / kStrip, panels = (M + kRows - 1) / kRows;
  const int64_t panelFloats = kRows * std::max<int64_t>(C, 1);
  const int64_t blockPanels = std::clamp<int64_t>(65536 / panelFloats, 1, panels);
  const int64_t rowBlocks = (panels + blockPanels - 1) / blockPanels;
  const double macs = (double)M * (double)C * (double)P;
  const int64_t want = std::clamp<int64_t>((int64_t)(macs / (1 << 20)), 1, 16);
  int64_t pixelBlocks = std::clamp<int64_t>((want + rowBlocks - 1) / rowBlocks, 1, strips);
  const int64_t blockStrips = (strips + pixelBlocks - 1) / pixelBlocks;
  pixelBlocks = (strips + blockStrips - 1) / blockStrips;
  const int64_t perImage = pixelBlocks * rowBlocks;
  const bool wide = pointwiseAvx512();
  parallelFor(threads, N * perImage, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / perImage, r = t % perImage;
      const int64_t pb = r / rowBlocks, rb = r % rowBlocks;
      const int64_t p0 = pb * blockStrips * kStrip, p1 = std::min(P, p0 + blockStrips * kStrip);
      const int64_t m0 = rb * blockPanels * kRows, m1 = std::min(M, m0 + blockPanels * kRows);
      if (wide) block512(w, x + n * C * P, P, y + n * M * P, m0, m1, p0, p1, ep);
      else block(w, x + n * C * P, P, y + n * M * P, m0, m1, p0, p1, ep);
    }
  });
}

}  // namespace qs
