#include "core/kernels/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/exec/parallel.h"

namespace qs {

namespace {

constexpr int64_t MR = PackedMatrix::kRowsPerPanel;  // rows of the micro-kernel
constexpr int64_t NR = 16;                            // columns of the micro-kernel (2 ymm)
constexpr int64_t KC = 256;                           // K slice: a 16-column B panel slice is 16 KB (L1)

// Writes (or, acc, adds) the 6x16 tile of sums to C, clipped to mr x nr.
inline void storeTile(__m256 c00, __m256 c01, __m256 c10, __m256 c11, __m256 c20, __m256 c21, __m256 c30, __m256 c31,
                      __m256 c40, __m256 c41, __m256 c50, __m256 c51, float* C, int64_t ldc, bool acc, int64_t mr,
                      int64_t nr) {
  const __m256 r[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (mr == MR && nr == NR) {
    for (int i = 0; i < 6; ++i) {
      float* c = C + i * ldc;
      __m256 v0 = r[i][0], v1 = r[i][1];
      if (acc) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(c));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(c + 8));
      }
      _mm256_storeu_ps(c, v0);
      _mm256_storeu_ps(c + 8, v1);
    }
    return;
  }
  alignas(32) float tmp[6][16];
  for (int i = 0; i < 6; ++i) {
    _mm256_store_ps(tmp[i], r[i][0]);
    _mm256_store_ps(tmp[i] + 8, r[i][1]);
  }
  for (int64_t i = 0; i < mr; ++i) {
    float* c = C + i * ldc;
    if (acc) {
      for (int64_t j = 0; j < nr; ++j) c[j] += tmp[i][j];
    } else {
      for (int64_t j = 0; j < nr; ++j) c[j] = tmp[i][j];
    }
  }
}


// C[0:mr, 0:nr] (+)= A[0:6, 0:kc] * B[0:kc, 0:16] for packed panels. 12 accumulators, 2 B
// vectors and 1 broadcast: 15 of the 16 ymm registers.
void micro6x16(int64_t kc, const float* A, const float* B, int64_t ldbk, float* C, int64_t ldc, bool acc, int64_t mr,
               int64_t nr) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(), c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(B), b1 = _mm256_loadu_ps(B + 8);
    __m256 a = _mm256_broadcast_ss(A + 0);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(A + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(A + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(A + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(A + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(A + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
    A += MR;
    B += ldbk;
  }
  storeTile(c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, C, ldc, acc, mr, nr);
}

// micro6x16 with A read in place from 6 rows lda apart (rows past mr repeat row 0, their sums
// dropped): the same FMAs in the same order, without packing A.
void micro6x16Direct(int64_t kc, const float* A, int64_t lda, const float* B, int64_t ldbk, float* C, int64_t ldc,
                     bool acc, int64_t mr, int64_t nr) {
  const float* a0 = A;
  const float* a1 = mr > 1 ? A + lda : A;
  const float* a2 = mr > 2 ? A + 2 * lda : A;
  const float* a3 = mr > 3 ? A + 3 * lda : A;
  const float* a4 = mr > 4 ? A + 4 * lda : A;
  const float* a5 = mr > 5 ? A + 5 * lda : A;
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(), c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(B), b1 = _mm256_loadu_ps(B + 8);
    __m256 a = _mm256_broadcast_ss(a0 + k);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(a1 + k);
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(a2 + k);
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(a3 + k);
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(a4 + k);
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(a5 + k);
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
    B += ldbk;
  }
  storeTile(c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, C, ldc, acc, mr, nr);
}

// B[K, nb] (or B^T) -> panels of 16 columns, each K x 16 contiguous, zero-padded past nb.
void packB(const float* B, int64_t ldb, bool transB, int64_t K, int64_t nb, float* dst) {
  for (int64_t j0 = 0; j0 < nb; j0 += NR) {
    const int64_t nr = std::min(NR, nb - j0);
    float* d = dst + (j0 / NR) * K * NR;
    if (!transB) {
      const float* s = B + j0;
      if (nr == NR) {
        for (int64_t k = 0; k < K; ++k, s += ldb, d += NR) {
          _mm256_storeu_ps(d, _mm256_loadu_ps(s));
          _mm256_storeu_ps(d + 8, _mm256_loadu_ps(s + 8));
        }
      } else {
        for (int64_t k = 0; k < K; ++k, s += ldb, d += NR) {
          int64_t j = 0;
          for (; j < nr; ++j) d[j] = s[j];
          for (; j < NR; ++j) d[j] = 0.f;
        }
      }
    } else if (nr == NR) {
      // B is [nb, K]: column j of op(B) is row j of B. 8x8 transposes in registers: 16 rows of B
      // read 8 floats at a time, written as 8 panel rows (the scalar gather was 2% of swin_t).
      int64_t k = 0;
      for (; k + 8 <= K; k += 8) {
        for (int64_t h = 0; h < 2; ++h) {
          const float* s = B + (j0 + 8 * h) * ldb + k;
          __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ldb), r2 = _mm256_loadu_ps(s + 2 * ldb),
                 r3 = _mm256_loadu_ps(s + 3 * ldb), r4 = _mm256_loadu_ps(s + 4 * ldb), r5 = _mm256_loadu_ps(s + 5 * ldb),
                 r6 = _mm256_loadu_ps(s + 6 * ldb), r7 = _mm256_loadu_ps(s + 7 * ldb);
          const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
          const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
          const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
          const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
          const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
          const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
          const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
          const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
          r0 = _mm256_permute2f128_ps(u0, u4, 0x20);
          r1 = _mm256_permute2f128_ps(u1, u5, 0x20);
          r2 = _mm256_permute2f128_ps(u2, u6, 0x20);
          r3 = _mm256_permute2f128_ps(u3, u7, 0x20);
          r4 = _mm256_permute2f128_ps(u0, u4, 0x31);
          r5 = _mm256_permute2f128_ps(u1, u5, 0x31);
          r6 = _mm256_permute2f128_ps(u2, u6, 0x31);
          r7 = _mm256_permute2f128_ps(u3, u7, 0x31);
          float* o = d + k * NR + 8 * h;
          _mm256_storeu_ps(o, r0);
          _mm256_storeu_ps(o + NR, r1);
          _mm256_storeu_ps(o + 2 * NR, r2);
          _mm256_storeu_ps(o + 3 * NR, r3);
          _mm256_storeu_ps(o + 4 * NR, r4);
          _mm256_storeu_ps(o + 5 * NR, r5);
          _mm256_storeu_ps(o + 6 * NR, r6);
          _mm256_storeu_ps(o + 7 * NR, r7);
        }
      }
      for (; k < K; ++k)
        for (int64_t j = 0; j < NR; ++j) d[k * NR + j] = B[(j0 + j) * ldb + k];
    } else {
      // B is [nb, K]: column j of op(B) is row j of B.
      for (int64_t k = 0; k < K; ++k, d += NR) {
        int64_t j = 0;
        for (; j < nr; ++j) d[j] = B[(j0 + j) * ldb + k];
        for (; j < NR; ++j) d[j] = 0.f;
      }
    }
  }
}

// C[m0:m1, 0:nb] (+)= A[m0:m1, :] * panels of B (each K x 16, one after the other).
void blockOverPanels(const PackedMatrix& A, int64_t m0, int64_t m1, const float* bp, int64_t nb, float* C, int64_t ldc,
                     bool accumulate) {
  const int64_t K = A.cols();
  const int64_t panelsN = (nb + NR - 1) / NR;
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = std::min(KC, K - k0);
    const bool acc = accumulate || k0 > 0;
    for (int64_t jp = 0; jp < panelsN; ++jp) {
      const float* b = bp + jp * NR * K + k0 * NR;
      const int64_t nr = std::min(NR, nb - jp * NR);
      for (int64_t m = m0; m < m1; m += MR) {
        float* c = C + (m - m0) * ldc + jp * NR;
        if (A.isView()) {
          micro6x16Direct(kc, A.viewRow(m) + k0, A.viewLd(), b, NR, c, ldc, acc, std::min(MR, m1 - m), nr);
        } else {
          micro6x16(kc, A.panel(m / MR) + k0 * MR, b, NR, c, ldc, acc, std::min(MR, m1 - m), nr);
        }
      }
    }
  }
}

struct ScratchBuf {
  float* p = nullptr;
  size_t cap = 0;
  ~ScratchBuf() { std::free(p); }
};

}  // namespace

float* gemmScratch(int slot, size_t n) {
  thread_local ScratchBuf bufs[4];
  ScratchBuf& b = bufs[slot & 3];
  if (n > b.cap || !b.p) {
    std::free(b.p);
    size_t cap = std::max<size_t>(((n + 15) / 16) * 16, 64);
    b.p = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
    b.cap = cap;
  }
  return b.p;
}

PackedMatrix::PackedMatrix(const float* A, int64_t lda, int64_t M, int64_t K, bool transA, float alpha)
    : m_rows(M), m_cols(K) {
  const int64_t panels = (M + MR - 1) / MR;
  const size_t n = (size_t)std::max<int64_t>(1, panels * MR * K);
  m_data = std::shared_ptr<float[]>(static_cast<float*>(std::aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64)),
                                    [](float* p) { std::free(p); });
  pack(A, lda, transA, alpha);
}

PackedMatrix PackedMatrix::view(const float* A, int64_t lda, int64_t M, int64_t K) {
  PackedMatrix pm;
  pm.m_rows = M;
  pm.m_cols = K;
  pm.m_view = A;
  pm.m_lda = lda;
  return pm;
}

PackedMatrix PackedMatrix::packScratch(const float* A, int64_t lda, int64_t M, int64_t K, bool transA, float alpha) {
  // Row-major A, unscaled: read in place (nothing to pack).
  if (!transA && alpha == 1.f) return view(A, lda, M, K);
  thread_local ScratchBuf buf;
  const int64_t panels = (M + MR - 1) / MR;
  const size_t n = (size_t)std::max<int64_t>(1, panels * MR * K);
  if (n > buf.cap || !buf.p) {
    std::free(buf.p);
    buf.cap = ((n + 15) / 16) * 16;
    buf.p = static_cast<float*>(std::aligned_alloc(64, buf.cap * sizeof(float)));
  }
  PackedMatrix pm;
  pm.m_rows = M;
  pm.m_cols = K;
  pm.m_data = std::shared_ptr<float[]>(buf.p, [](float*) {});
  pm.pack(A, lda, transA, alpha);
  return pm;
}

void PackedMatrix::pack(const float* A, int64_t lda, bool transA, float alpha) {
  const int64_t M = m_rows, K = m_cols;
  const int64_t panels = (M + MR - 1) / MR;
  float* d = m_data.get();
  for (int64_t p = 0; p < panels; ++p, d += MR * K) {
    const int64_t rows = std::min(MR, M - p * MR);
    if (transA) {
      // A is [K, M]: the panel's 6 values of column k are contiguous.
      for (int64_t k = 0; k < K; ++k) {
        const float* s = A + k * lda + p * MR;
        float* o = d + k * MR;
        int64_t r = 0;
        for (; r < rows; ++r) o[r] = alpha * s[r];
        for (; r < MR; ++r) o[r] = 0.f;
      }
      continue;
    }
    // Row by row (sequential reads), each written with a stride of 6.
    for (int64_t r = 0; r < MR; ++r) {
      float* o = d + r;
      if (r >= rows) {
        for (int64_t k = 0; k < K; ++k) o[k * MR] = 0.f;
        continue;
      }
      const float* s = A + (p * MR + r) * lda;
      if (alpha == 1.f) {
        for (int64_t k = 0; k < K; ++k) o[k * MR] = s[k];
      } else {
        for (int64_t k = 0; k < K; ++k) o[k * MR] = alpha * s[k];
      }
    }
  }
}

// C[M, N] of a product over no reduction index: zeros, or left as it is when accumulating.
static void zeroRows(int64_t M, int64_t N, float* C, int64_t ldc, bool accumulate) {
  if (accumulate) return;
  for (int64_t m = 0; m < M; ++m) std::memset(C + m * ldc, 0, sizeof(float) * (size_t)N);
}

void gemmBlock(const PackedMatrix& A, int64_t m0, int64_t m1, const float* B, int64_t ldb, bool transB, int64_t nb,
               float* C, int64_t ldc, bool accumulate) {
  const int64_t K = A.cols();
  if (nb <= 0 || m1 <= m0) return;
  if (K == 0) return zeroRows(m1 - m0, nb, C, ldc, accumulate);
  const int64_t panelsN = (nb + NR - 1) / NR;
  float* bp = gemmScratch(0, (size_t)(panelsN * NR * K));
  packB(B, ldb, transB, K, nb, bp);
  blockOverPanels(A, m0, m1, bp, nb, C, ldc, accumulate);
}

PackedPanels::PackedPanels(const float* B, int64_t ldb, bool transB, int64_t K, int64_t N) : m_rows(K), m_cols(N) {
  const int64_t panels = (N + NR - 1) / NR;
  const size_t n = (size_t)std::max<int64_t>(1, panels * NR * K);
  m_data = std::shared_ptr<float[]>(static_cast<float*>(std::aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64)),
                                    [](float* p) { std::free(p); });
  if (K > 0 && N > 0) packB(B, ldb, transB, K, N, m_data.get());
}

void forEachGemmBlock(int64_t M, int64_t N, int64_t K, int threads,
                      const std::function<void(int64_t m0, int64_t m1, int64_t n0, int64_t nb)>& fn) {
  int64_t mb, nb;
  gemmBlocking(M, N, K, threads, mb, nb);
  const int64_t rowBlocks = (M + mb - 1) / mb, colBlocks = (N + nb - 1) / nb;
  parallelFor(threads, rowBlocks * colBlocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t m0 = (t / colBlocks) * mb, n0 = (t % colBlocks) * nb;
      fn(m0, std::min(M, m0 + mb), n0, std::min(nb, N - n0));
    }
  });
}

void gemmBlockPacked(const PackedMatrix& A, int64_t m0, int64_t m1, const PackedPanels& B, int64_t n0, int64_t nb,
                     float* C, int64_t ldc, bool accumulate) {
  if (nb <= 0 || m1 <= m0) return;
  if (A.cols() == 0) return zeroRows(m1 - m0, nb, C, ldc, accumulate);
  blockOverPanels(A, m0, m1, B.from(n0), nb, C, ldc, accumulate);
}

void sgemmPacked(bool transA, int64_t M, float alpha, const float* A, int64_t lda, const PackedPanels& B, bool accumulate,
                 float* C, int64_t ldc, int threads) {
  const int64_t N = B.cols(), K = B.rows();
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return zeroRows(M, N, C, ldc, accumulate);
  const PackedMatrix a = PackedMatrix::packScratch(A, lda, M, K, transA, alpha);
  forEachBalancedGemmBlock(M, N, K, threads, [&](int64_t m0, int64_t m1, int64_t n0, int64_t nb) {
    gemmBlockPacked(a, m0, m1, B, n0, nb, C + m0 * ldc + n0, ldc, accumulate);
  });
}

void gemmBlockPair(const PackedMatrix& A1, const PackedMatrix& A2, int64_t m0, int64_t m1, const float* B, int64_t ldb,
                   bool transB, int64_t nb, float* C1, float* C2, int64_t ldc) {
  const int64_t K = A1.cols();
  if (K == 0 || K != A2.cols()) {
    gemmBlock(A1, m0, m1, B, ldb, transB, nb, C1, ldc, false);
    gemmBlock(A2, m0, m1, B, ldb, transB, nb, C2, ldc, false);
    return;
  }
  if (nb <= 0 || m1 <= m0) return;
  const int64_t panelsN = (nb + NR - 1) / NR;
  float* bp = gemmScratch(0, (size_t)(panelsN * NR * K));
  packB(B, ldb, transB, K, nb, bp);
  // gemmBlock's loops, each B panel slice used for both A's while it is in L1.
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = std::min(KC, K - k0);
    const bool acc = k0 > 0;
    for (int64_t jp = 0; jp < panelsN; ++jp) {
      const float* b = bp + jp * NR * K + k0 * NR;
      const int64_t nr = std::min(NR, nb - jp * NR);
      for (int64_t m = m0; m < m1; m += MR) {
        micro6x16(kc, A1.panel(m / MR) + k0 * MR, b, NR, C1 + (m - m0) * ldc + jp * NR, ldc, acc, std::min(MR, m1 - m), nr);
        micro6x16(kc, A2.panel(m / MR) + k0 * MR, b, NR, C2 + (m - m0) * ldc + jp * NR, ldc, acc, std::min(MR, m1 - m), nr);
      }
    }
  }
}

void gemmBlockRows(const PackedMatrix& A, int64_t m0, int64_t m1, const float* B, int64_t ldb, int64_t nb, float* C,
                   int64_t ldc, bool accumulate) {
  const int64_t K = A.cols();
  if (nb <= 0 || m1 <= m0) return;
  if (K == 0) {
    gemmBlock(A, m0, m1, B, ldb, false, nb, C, ldc, accumulate);
    return;
  }
  const int64_t panelsN = (nb + NR - 1) / NR;
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = std::min(KC, K - k0);
    const bool acc = accumulate || k0 > 0;
    for (int64_t jp = 0; jp < panelsN; ++jp) {
      const float* b = B + k0 * ldb + jp * NR;
      const int64_t nr = std::min(NR, nb - jp * NR);
      for (int64_t m = m0; m < m1; m += MR) {
        float* c = C + (m - m0) * ldc + jp * NR;
        if (A.isView()) {
          micro6x16Direct(kc, A.viewRow(m) + k0, A.viewLd(), b, ldb, c, ldc, acc, std::min(MR, m1 - m), nr);
        } else {
          micro6x16(kc, A.panel(m / MR) + k0 * MR, b, ldb, c, ldc, acc, std::min(MR, m1 - m), nr);
        }
      }
    }
  }
}

void gemmBlocking(int64_t M, int64_t N, int64_t K, int threads, int64_t& mb, int64_t& nb) {
  const int64_t Mr = ((M + MR - 1) / MR) * MR;
  // Rows: all of them while the A slice of a block stays small, else 96-row blocks.
  mb = Mr <= 144 ? Mr : 96;
  // Columns: at most 512, fewer for long K.
  // Measured on the det convolutions (M=24, K=864): blocks of ~1 MB of B (K * nb floats) beat
  // L2-sized ones, which re-read A and pay per-block overhead more often.
  const int64_t nbCap = std::clamp<int64_t>((262144 / std::max<int64_t>(K, 1)) / NR * NR, 2 * NR, 512);
  nb = ((std::min<int64_t>(N, nbCap) + NR - 1) / NR) * NR;
  if (threads <= 1) return;
  const double flops = 2.0 * (double)M * (double)N * (double)std::max<int64_t>(K, 1);
  // Below ~50 us of one core's work, handing half to another core (waking it, moving the data
  // into its cache) costs about what it saves, and on a loaded machine more.
  if (flops < 4e6) {
    mb = Mr;
    nb = ((N + NR - 1) / NR) * NR;
    return;
  }
  auto blocks = [&] { return ((M + mb - 1) / mb) * ((N + nb - 1) / nb); };
  while (blocks() < 4 * threads && nb > 32) nb = std::max<int64_t>(32, ((nb / 2 + NR - 1) / NR) * NR);
  while (blocks() < 2 * threads && mb > 24) mb = std::max<int64_t>(24, ((mb / 2 + MR - 1) / MR) * MR);
}

void GemmBlocks::block(int64_t q, int64_t& m0, int64_t& m1, int64_t& n0, int64_t& nb) const {
  const int64_t r = q / colBlocks, c = q % colBlocks;
  m0 = MR * (rowTiles * r / rowBlocks);
  m1 = std::min(M, MR * (rowTiles * (r + 1) / rowBlocks));
  n0 = NR * (panels * c / colBlocks);
  nb = std::min(N, NR * (panels * (c + 1) / colBlocks)) - n0;
}

GemmBlocks balancedGemmBlocks(int64_t M, int64_t N, int64_t K, int threads) {
  GemmBlocks g;
  g.M = std::max<int64_t>(M, 0);
  g.N = std::max<int64_t>(N, 0);
  g.rowTiles = std::max<int64_t>(1, (g.M + MR - 1) / MR);
  g.panels = std::max<int64_t>(1, (g.N + NR - 1) / NR);
  if (g.M == 0 || g.N == 0) return g;
  // The blocks one thread would use (cache-sized), and gemmBlocking's split for `threads`.
  int64_t mb, nb;
  gemmBlocking(M, N, K, 1, mb, nb);
  const int64_t r0 = (M + mb - 1) / mb, c0 = (N + nb - 1) / nb;
  gemmBlocking(M, N, K, threads, mb, nb);
  g.rowBlocks = std::min(g.rowTiles, (M + mb - 1) / mb);
  g.colBlocks = std::min(g.panels, (N + nb - 1) / nb);
  if (threads <= 1 || g.count() == 1) return g;
  // The fewest blocks, a multiple of 4 x threads, of at least r0 x c0 (the cache limits), with
  // as few row blocks as possible: every block then reads all of a short A (a Linear layer at
  // batch 1: 128 rows) and its own columns of the weights.
  const int64_t want = 4 * (int64_t)threads;
  for (int64_t total = ((r0 * c0 + want - 1) / want) * want; total <= g.rowTiles * g.panels; total += want) {
    for (int64_t r = r0; r <= std::min(g.rowTiles, total / c0); ++r) {
      if (total % r != 0 || total / r > g.panels) continue;
      g.rowBlocks = r;
      g.colBlocks = total / r;
      return g;
    }
  }
  return g;  // no even split (a product of a few tiles): gemmBlocking's
}

void forEachBalancedGemmBlock(int64_t M, int64_t N, int64_t K, int threads,
                              const std::function<void(int64_t m0, int64_t m1, int64_t n0, int64_t nb)>& fn) {
  const GemmBlocks g = balancedGemmBlocks(M, N, K, threads);
  parallelFor(threads, g.count(), 1, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      int64_t m0, m1, n0, nb;
      g.block(q, m0, m1, n0, nb);
      fn(m0, m1, n0, nb);
    }
  });
}

int64_t balancedGrain(int64_t n, int threads, int64_t minGrain) {
  minGrain = std::max<int64_t>(minGrain, 1);
  if (threads <= 1 || n <= minGrain) return minGrain;
  // parallelFor makes min(ceil(n / grain), 4 x threads) chunks, chunk c = [n c / chunks, n (c + 1) / chunks).
  for (int64_t g = minGrain; g <= n / threads; ++g) {
    const int64_t pieces = n / g;
    if (n % g == 0 && pieces % threads == 0 && pieces <= 4 * (int64_t)threads) return g;
  }
  return minGrain;
}

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads) {
  if (M <= 0 || N <= 0) return;
  if (beta != 0.f && beta != 1.f) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] *= beta;
  }
  const bool accumulate = beta != 0.f;
  if (K <= 0) return zeroRows(M, N, C, ldc, accumulate);
  const PackedMatrix a = PackedMatrix::packScratch(A, lda, M, K, transA, alpha);
  forEachGemmBlock(M, N, K, threads, [&](int64_t m0, int64_t m1, int64_t n0, int64_t nb) {
    gemmBlock(a, m0, m1, transB ? B + n0 * ldb : B + n0, ldb, transB, nb, C + m0 * ldc + n0, ldc, accumulate);
  });
}

}  // namespace qs
