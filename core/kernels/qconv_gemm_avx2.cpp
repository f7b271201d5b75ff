// The AVX2 GEMM of the integer Conv: u8 x s8 -> int32 without AVX-512 VNNI.
//
// Why 16 bits. vpmaddubsw (u8 x s8, pairs summed to int16) saturates: a pair of 255 * 127 is
// 64770. The exact alternatives are |x| x sign(w, x) on signed activations (one vpsignb more per
// product vector, and weights of -128 would need a way out) or bytes widened to int16 for
// vpmaddwd, whose pair sums go to int32 and are exact for any u8 x s8 operands. Both issue two
// multiplies (maddubs + maddwd, or two maddwd) per 32 products on the two multiply pipes, so
// vpmaddwd costs no more, needs no sign work, and the only widening is of B (vpmovzxbw loads,
// shared by the 4 rows of a micro-tile): the weights are packed as int16 once
// (QConvWeights::Packed::data16) and broadcast 4 at a time with a plain 64-bit load.
//
// Register tiling. A micro-tile is 4 rows x 8 columns: one int16 B vector covers 4 columns x 4
// reduction indices, so 8 columns are two vectors; each row's accumulators hold, per column,
// two int32 partial sums (reduction indices 0-1 and 2-3 of each group), 8 accumulators in all,
// added pairwise (vphaddd) once per block of groups. A 8 x 32 tile of the packed format is 8
// micro-tiles; the groups are taken in blocks so that a block's A (64 bytes a group) and B
// (128 bytes a group) stay in L1 while its 8 micro-tiles read them.
#include "core/kernels/qconv_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace qs::qconv_detail {

namespace {

constexpr int64_t MR = QConvWeights::kRowsPerPanel;
constexpr int64_t NR = kTileCols;
// Groups per block: 128 groups read 8 KB of A and 16 KB of B.
constexpr int64_t kGroupBlock = 128;

// 4 int16 weights of row r (one group) in every 64-bit lane.
inline __m256i broadcastRow(const int16_t* a, int r) {
  int64_t v;
  std::memcpy(&v, a + r * 4, 8);
  return _mm256_set1_epi64x(v);
}

// Sums of pairs of adjacent int32 lanes of lo (columns 0-3) and hi (columns 4-7), in column order.
inline __m256i pairSums(__m256i lo, __m256i hi) {
  // hadd gives columns 0 1 4 5 | 2 3 6 7; the 64-bit permute (0, 2, 1, 3) puts them in order.
  return _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
}

// Rows [r0, r0 + 4) of panel a, columns [0, 8) of b, groups [0, groups): the sums into c
// (leading dimension ldc), stored or added to what c holds. Prefetch: also brings the two lines
// of every group at pf (a later tile's columns) into L1.
template <bool Prefetch>
inline void microTile(const int16_t* a, int r0, const uint32_t* b, const int64_t* off, int64_t groups, int32_t* c,
                      int64_t ldc, bool accumulate, const uint32_t* pf) {
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  a += r0 * 4;
  for (int64_t gi = 0; gi < groups; ++gi, a += MR * 4) {
    const uint32_t* bg = b + off[gi];
    if constexpr (Prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + off[gi]), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pf + off[gi] + NR - 1), _MM_HINT_T0);
    }
    const __m256i b0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bg)));
    const __m256i b1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bg + 4)));
    __m256i w = broadcastRow(a, 0);
    c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(b0, w));
    c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(b1, w));
    w = broadcastRow(a, 1);
    c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(b0, w));
    c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(b1, w));
    w = broadcastRow(a, 2);
    c20 = _mm256_add_epi32(c20, _mm256_madd_epi16(b0, w));
    c21 = _mm256_add_epi32(c21, _mm256_madd_epi16(b1, w));
    w = broadcastRow(a, 3);
    c30 = _mm256_add_epi32(c30, _mm256_madd_epi16(b0, w));
    c31 = _mm256_add_epi32(c31, _mm256_madd_epi16(b1, w));
  }
  const __m256i r[4] = {pairSums(c00, c01), pairSums(c10, c11), pairSums(c20, c21), pairSums(c30, c31)};
  for (int i = 0; i < 4; ++i) {
    __m256i* dst = reinterpret_cast<__m256i*>(c + i * ldc);
    _mm256_storeu_si256(dst, accumulate ? _mm256_add_epi32(_mm256_loadu_si256(dst), r[i]) : r[i]);
  }
}

// One MR x NR tile: panel a, columns b + [0, NR); pf (or null): the columns to prefetch.
void tile(const int16_t* a, const uint32_t* b, const int64_t* off, int64_t groups, int32_t* c, int64_t ldc,
          const uint32_t* pf) {
  for (int64_t g0 = 0; g0 < groups; g0 += kGroupBlock) {
    const int64_t gn = std::min(kGroupBlock, groups - g0);
    const int16_t* ab = a + g0 * MR * 4;
    if (pf) microTile<true>(ab, 0, b, off + g0, gn, c, ldc, g0 > 0, pf);
    else microTile<false>(ab, 0, b, off + g0, gn, c, ldc, g0 > 0, nullptr);
    microTile<false>(ab, 4, b, off + g0, gn, c + 4 * ldc, ldc, g0 > 0, nullptr);
    for (int64_t j = 8; j < NR; j += 8)
      for (int r0 = 0; r0 < MR; r0 += 4)
        microTile<false>(ab, r0, b + j, off + g0, gn, c + r0 * ldc + j, ldc, g0 > 0, nullptr);
  }
}

// As in the VNNI GEMM: the first A panel of a chunk prefetches the B words of the tile this many
// tiles ahead (a tile's words come from ~groups input rows, more streams than the hardware
// prefetchers follow).
constexpr int64_t kPrefetchTiles = 2;

}  // namespace

void qconvGemmAvx2(const QConvWeights::Packed& A, const uint32_t* B, const int64_t* off, int64_t panelsN, int32_t* C,
                   int64_t ldc) {
  // A panels that share L2 while one B tile is reused across them (as the VNNI GEMM).
  const int64_t chunk = std::max<int64_t>(1, (192 << 10) / std::max<int64_t>(1, A.groups * MR * 4 * 2));
  for (int64_t p0 = 0; p0 < A.panels; p0 += chunk) {
    const int64_t p1 = std::min(A.panels, p0 + chunk);
    for (int64_t jp = 0; jp < panelsN; ++jp)
      for (int64_t p = p0; p < p1; ++p)
        tile(A.panel16(p), B + jp * NR, off, A.groups, C + p * MR * ldc + jp * NR, ldc,
             p == p0 && jp + kPrefetchTiles < panelsN ? B + (jp + kPrefetchTiles) * NR : nullptr);
  }
}

}  // namespace qs::qconv_detail
