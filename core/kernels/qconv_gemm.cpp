// The portable and AVX-512 VNNI GEMMs of the integer Conv (core/kernels/qconv.h); the AVX2 one
// is in qconv_gemm_avx2.cpp. The layout is described in qconv.cpp.
#include "core/kernels/qconv_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace qs::qconv_detail {

namespace {

using Packed = QConvWeights::Packed;
constexpr int64_t MR = QConvWeights::kRowsPerPanel;
constexpr int64_t NR = kTileCols;

// A panels that share L2 while one B panel is reused across them.
int64_t panelsPerChunk(const Packed& A) { return std::max<int64_t>(1, (192 << 10) / std::max<int64_t>(1, A.groups * MR * 4)); }

template <class T>
void tileGeneric(const T* a, const uint32_t* b, const int64_t* off, int64_t groups, int32_t* c, int64_t ldc) {
  int32_t acc[MR][NR] = {};
  for (int64_t gi = 0; gi < groups; ++gi, a += MR * 4) {
    const uint8_t* bb = reinterpret_cast<const uint8_t*>(b + off[gi]);
    for (int r = 0; r < MR; ++r) {
      const int32_t a0 = a[r * 4], a1 = a[r * 4 + 1], a2 = a[r * 4 + 2], a3 = a[r * 4 + 3];
      for (int j = 0; j < NR; ++j)
        acc[r][j] += a0 * bb[4 * j] + a1 * bb[4 * j + 1] + a2 * bb[4 * j + 2] + a3 * bb[4 * j + 3];
    }
  }
  for (int r = 0; r < MR; ++r) std::memcpy(c + r * ldc, acc[r], sizeof(acc[r]));
}

}  // namespace

void qconvGemmGeneric(const Packed& A, const uint32_t* B, const int64_t* off, int64_t panelsN, int32_t* C, int64_t ldc) {
  const int64_t chunk = panelsPerChunk(A);
  for (int64_t p0 = 0; p0 < A.panels; p0 += chunk)
    for (int64_t jp = 0; jp < panelsN; ++jp)
      for (int64_t p = p0; p < std::min(A.panels, p0 + chunk); ++p) {
        int32_t* c = C + p * MR * ldc + jp * NR;
        if (A.wide()) tileGeneric(A.panel16(p), B + jp * NR, off, A.groups, c, ldc);
        else tileGeneric(A.panel(p), B + jp * NR, off, A.groups, c, ldc);
      }
}

namespace {

// Intrinsics only in the AVX-512 functions: GCC 12's AVX-512 auto-vectorizer miscompiles plain
// loops (docs/design.md), and these are compiled for AVX-512 regardless of the global flags.
#define QS_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

// The 4 bytes at p as one int32 in every lane (memcpy: the storage is int8; the load is one
// vpbroadcastd).
QS_VNNI_TARGET inline __m512i broadcastWord(const int8_t* p, int64_t r) {
  int32_t v;
  std::memcpy(&v, p + r * 4, 4);
  return _mm512_set1_epi32(v);
}

QS_VNNI_TARGET inline void tileVnni(const int8_t* a, const uint32_t* b, const int64_t* off, int64_t groups, int32_t* c,
                                    int64_t ldc, const uint32_t* pf) {
  // 16 accumulators and 2 B vectors; vpdpbusd's throughput, not loads, bounds this loop.
  __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512i c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  for (int64_t gi = 0; gi < groups; ++gi, a += MR * 4) {
    const uint32_t* bg = b + off[gi];
    const __m512i b0 = _mm512_loadu_si512(bg), b1 = _mm512_loadu_si512(bg + 16);
    if (pf) {  // two lines: the 128 bytes the same group will load in tile jp + kPrefetchTiles
      _mm_prefetch(reinterpret_cast<const char*>(pf + off[gi]), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pf + off[gi] + 31), _MM_HINT_T0);
    }
    __m512i w = broadcastWord(a, 0);
    c00 = _mm512_dpbusd_epi32(c00, b0, w);
    c01 = _mm512_dpbusd_epi32(c01, b1, w);
    w = broadcastWord(a, 1);
    c10 = _mm512_dpbusd_epi32(c10, b0, w);
    c11 = _mm512_dpbusd_epi32(c11, b1, w);
    w = broadcastWord(a, 2);
    c20 = _mm512_dpbusd_epi32(c20, b0, w);
    c21 = _mm512_dpbusd_epi32(c21, b1, w);
    w = broadcastWord(a, 3);
    c30 = _mm512_dpbusd_epi32(c30, b0, w);
    c31 = _mm512_dpbusd_epi32(c31, b1, w);
    w = broadcastWord(a, 4);
    c40 = _mm512_dpbusd_epi32(c40, b0, w);
    c41 = _mm512_dpbusd_epi32(c41, b1, w);
    w = broadcastWord(a, 5);
    c50 = _mm512_dpbusd_epi32(c50, b0, w);
    c51 = _mm512_dpbusd_epi32(c51, b1, w);
    w = broadcastWord(a, 6);
    c60 = _mm512_dpbusd_epi32(c60, b0, w);
    c61 = _mm512_dpbusd_epi32(c61, b1, w);
    w = broadcastWord(a, 7);
    c70 = _mm512_dpbusd_epi32(c70, b0, w);
    c71 = _mm512_dpbusd_epi32(c71, b1, w);
  }
  const __m512i r[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                            {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_si512(c + i * ldc, r[i][0]);
    _mm512_storeu_si512(c + i * ldc + 16, r[i][1]);
  }
}

}  // namespace

// The first A panel of a chunk prefetches the B words of the tile this many tiles ahead: the
// words of one tile come from ~groups different rows of the input, more streams than the
// hardware prefetchers follow, and with several word buffers live (all outputs) they are not in
// L2. Measured: 15.4 -> 11.9 ms for all outputs of the 96->24 3x3 160x160 Conv (then with three
// word buffers: X's integers and X at 16 bits as two byte planes).
constexpr int64_t kPrefetchTiles = 2;
QS_VNNI_TARGET void qconvGemmVnni(const Packed& A, const uint32_t* B, const int64_t* off, int64_t panelsN, int32_t* C,
                             int64_t ldc) {
  const int64_t chunk = panelsPerChunk(A);
  for (int64_t p0 = 0; p0 < A.panels; p0 += chunk) {
    const int64_t p1 = std::min(A.panels, p0 + chunk);
    for (int64_t jp = 0; jp < panelsN; ++jp)
      for (int64_t p = p0; p < p1; ++p)
        tileVnni(A.panel(p), B + jp * NR, off, A.groups, C + p * MR * ldc + jp * NR, ldc,
                 p == p0 && jp + kPrefetchTiles < panelsN ? B + (jp + kPrefetchTiles) * NR : nullptr);
  }
}

}  // namespace qs::qconv_detail
