// The per-step product of a recurrent cell with R packed in 8-row panels (AVX2) or 16-row panels
// (AVX-512, where the CPU has it) (recurrent_step.h).
//
// Before, the step took dot products of R's rows with h's (up to batch 8) or packed R for the GEMM
// micro-kernel (past 8), both gate-major: the dot products end in a horizontal sum per output, and
// the micro-kernel's 16 columns were the batch, so batch 8 wasted half of each tile. Here the
// batch is the tile's rows and R's gate rows its columns: at lstm_speech's 4*96 gate rows,
// batch 8, K = 96, every FMA does useful work and no reduction across lanes is needed.
#include "core/kernels/recurrent_step.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/exec/parallel.h"

namespace qs {

namespace {

constexpr int64_t P = 8;  // the AVX2 path's panel

// Rows [0, RB) of h (stride K) times NP panels starting at `panels` (each K * 8 floats), written to
// out (row stride ldo) at columns [0, cols): cols < NP * 8 only for the last, padded panel.
template <int RB, int NP>
void tile(const float* h, int64_t K, const float* panels, float* out, int64_t ldo, int64_t cols) {
  __m256 acc[RB][NP];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NP; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 w[NP];
    for (int j = 0; j < NP; ++j) w[j] = _mm256_loadu_ps(panels + j * K * P + k * P);
    for (int r = 0; r < RB; ++r) {
      const __m256 hv = _mm256_broadcast_ss(h + r * K + k);
      for (int j = 0; j < NP; ++j) acc[r][j] = _mm256_fmadd_ps(hv, w[j], acc[r][j]);
    }
  }
  if (cols == NP * P) {
    for (int r = 0; r < RB; ++r)
      for (int j = 0; j < NP; ++j) _mm256_storeu_ps(out + r * ldo + j * P, acc[r][j]);
    return;
  }
  // The padded last panel: masked stores (copying acc out through memory would make the compiler
  // keep the accumulators in memory inside the k loop too).
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int j = 0; j < NP; ++j) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(cols - j * P)), lane);
    for (int r = 0; r < RB; ++r) _mm256_maskstore_ps(out + r * ldo + j * P, mask, acc[r][j]);
  }
}

// Rows [0, RB) of h over panels [p0, p1), NP panels at a time.
template <int RB, int NP>
void rowBlock(const float* h, int64_t K, int64_t M, const float* packed, int64_t p0, int64_t p1, float* out) {
  int64_t p = p0;
  auto colsFrom = [&](int64_t q, int64_t n) { return std::min(M - q * P, n * P); };
  for (; p + NP <= p1; p += NP) tile<RB, NP>(h, K, packed + p * K * P, out + p * P, M, colsFrom(p, NP));
  for (; p < p1; ++p) tile<RB, 1>(h, K, packed + p * K * P, out + p * P, M, colsFrom(p, 1));
}

// The AVX-512 path: 16-row panels, the same tiles with zmm registers. Each output is still one
// FMA chain over k in order (fmadd on the same operands), so it gives the AVX2 path's bits; the
// padded last panel is written with a lane mask.
constexpr int64_t P16 = 16;

template <int RB, int NP>
__attribute__((target("avx512f"))) void tile16(const float* h, int64_t K, const float* panels, float* out, int64_t ldo,
                                               int64_t cols) {
  __m512 acc[RB][NP];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 w[NP];
    for (int j = 0; j < NP; ++j) w[j] = _mm512_loadu_ps(panels + j * K * P16 + k * P16);
    for (int r = 0; r < RB; ++r) {
      const __m512 hv = _mm512_set1_ps(h[r * K + k]);
      for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_fmadd_ps(hv, w[j], acc[r][j]);
    }
  }
  for (int j = 0; j < NP; ++j) {
    const int64_t n = std::min<int64_t>(P16, cols - j * P16);
    const __mmask16 mask = n >= P16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
    for (int r = 0; r < RB; ++r) _mm512_mask_storeu_ps(out + r * ldo + j * P16, mask, acc[r][j]);
  }
}

template <int RB, int NP>
__attribute__((target("avx512f"))) void rowBlock16(const float* h, int64_t K, int64_t M, const float* packed,
                                                   int64_t p0, int64_t p1, float* out) {
  int64_t p = p0;
  auto colsFrom = [&](int64_t q, int64_t n) { return std::min(M - q * P16, n * P16); };
  for (; p + NP <= p1; p += NP) tile16<RB, NP>(h, K, packed + p * K * P16, out + p * P16, M, colsFrom(p, NP));
  for (; p < p1; ++p) tile16<RB, 1>(h, K, packed + p * K * P16, out + p * P16, M, colsFrom(p, 1));
}

// Rows in blocks of 8 over 3 panels (24 accumulators of the 32 registers); fewer rows take more
// panels, so that a tile keeps at least 6 independent FMA chains (two FMA ports, 4-cycle latency).
__attribute__((target("avx512f"))) void panelRange16(const float* h, int64_t batch, int64_t K, int64_t M,
                                                     const float* packed, int64_t p0, int64_t p1, float* out) {
  // 6 panels (6 * K * 16 floats, 36 KiB at K = 96) stay in L1 while every row block passes over them.
  constexpr int64_t kGroup = 6;
  for (int64_t g0 = p0; g0 < p1; g0 += kGroup) {
    const int64_t g1 = std::min(p1, g0 + kGroup);
    int64_t b = 0;
    for (; b + 8 <= batch; b += 8) rowBlock16<8, 3>(h + b * K, K, M, packed, g0, g1, out + b * M);
    const float* hb = h + b * K;
    float* ob = out + b * M;
    switch (batch - b) {
      case 7:
        rowBlock16<7, 3>(hb, K, M, packed, g0, g1, ob);
        break;
      case 6:
        rowBlock16<6, 3>(hb, K, M, packed, g0, g1, ob);
        break;
      case 5:
        rowBlock16<5, 3>(hb, K, M, packed, g0, g1, ob);
        break;
      case 4:
        rowBlock16<4, 6>(hb, K, M, packed, g0, g1, ob);
        break;
      case 3:
        rowBlock16<3, 6>(hb, K, M, packed, g0, g1, ob);
        break;
      case 2:
        rowBlock16<2, 6>(hb, K, M, packed, g0, g1, ob);
        break;
      case 1:
        rowBlock16<1, 6>(hb, K, M, packed, g0, g1, ob);
        break;
      default:
        break;
    }
  }
}

}  // namespace

bool RecurrentStepMatrix::avx512Available() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

RecurrentStepMatrix::Isa RecurrentStepMatrix::bestIsa() {
  static const Isa isa = [] {
    const char* env = std::getenv("QS_STEP_ISA");
    if (env && std::string(env) == "avx2") return Isa::Avx2;
    return avx512Available() ? Isa::Avx512 : Isa::Avx2;
  }();
  return isa;
}

RecurrentStepMatrix::RecurrentStepMatrix(const float* rows, int64_t M, int64_t K, Isa isa)
    : m_isa(isa),
      m_panel(isa == Isa::Avx512 ? P16 : P),
      m_M(M),
      m_K(K),
      m_panels((M + m_panel - 1) / m_panel),
      m_packed((size_t)(m_panels * K * m_panel), 0.f) {
  for (int64_t m = 0; m < M; ++m) {
    float* dst = m_packed.data() + (m / m_panel) * K * m_panel + (m % m_panel);
    for (int64_t k = 0; k < K; ++k) dst[k * m_panel] = rows[m * K + k];
  }
}

void RecurrentStepMatrix::panelRange(int64_t p0, int64_t p1, const float* h, int64_t batch, float* out) const {
  if (m_K == 0) {
    for (int64_t b = 0; b < batch; ++b)
      std::fill(out + b * m_M + p0 * m_panel, out + b * m_M + std::min(m_M, p1 * m_panel), 0.f);
    return;
  }
  if (m_isa == Isa::Avx512) {
    panelRange16(h, batch, m_K, m_M, m_packed.data(), p0, p1, out);
    return;
  }
  // Panels outer, rows inner: a group of panels (8 * K * 8 floats, 24 KiB at K = 96) stays in L1
  // while every row block of the batch passes over it.
  constexpr int64_t kGroup = 8;
  for (int64_t g0 = p0; g0 < p1; g0 += kGroup) {
    const int64_t g1 = std::min(p1, g0 + kGroup);
    int64_t b = 0;
    for (; b + 4 <= batch; b += 4) rowBlock<4, 2>(h + b * m_K, m_K, m_M, m_packed.data(), g0, g1, out + b * m_M);
    switch (batch - b) {
      case 3:
        rowBlock<3, 2>(h + b * m_K, m_K, m_M, m_packed.data(), g0, g1, out + b * m_M);
        break;
      case 2:
        rowBlock<2, 4>(h + b * m_K, m_K, m_M, m_packed.data(), g0, g1, out + b * m_M);
        break;
      case 1:
        rowBlock<1, 8>(h + b * m_K, m_K, m_M, m_packed.data(), g0, g1, out + b * m_M);
        break;
      default:
        break;
    }
  }
}

void RecurrentStepMatrix::multiply(const float* h, int64_t batch, float* out, int threads) const {
  if (batch <= 0 || m_M == 0) return;
  // A step at batch 1 is often a few microseconds, less than a hand-off: split only past 2 MFLOP.
  const double flops = 2.0 * (double)m_M * (double)m_K * (double)batch;
  if (threads <= 1 || flops < 2e6 || m_panels < 2) {
    panelRange(0, m_panels, h, batch, out);
    return;
  }
  const int64_t blocks = std::min<int64_t>(m_panels, 2 * (int64_t)threads);
  const int64_t perBlock = (m_panels + blocks - 1) / blocks;
  parallelFor(threads, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t p0 = blk * perBlock, p1 = std::min(m_panels, p0 + perBlock);
      if (p0 < p1) panelRange(p0, p1, h, batch, out);
    }
  });
}

}  // namespace qs
