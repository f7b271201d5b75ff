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
  float* d = m_data.get();
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t r = 0; r < MR; ++r) {
        const int64_t m = p * MR + r;
        float v = 0.f;
        if (m < M) v = alpha * (transA ? A[k * lda + m] : A[m * lda + k]);
        *d++ = v;
      }
    }
  }
}

void gemmBlock(const PackedMatrix& A, int64_t m0, int64_t m1, const float* B, int64_t ldb, bool transB, int64_t nb,
               float* C, int64_t ldc, bool accumulate) {
  const int64_t K = A.cols();
  if (nb <= 0 || m1 <= m0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t m = m0; m < m1; ++m) std::memset(C + (m - m0) * ldc, 0, sizeof(float) * (size_t)nb);
    return;
  }
  const int64_t panelsN = (nb + NR - 1) / NR;
  float* bp = gemmScratch(0, (size_t)(panelsN * NR * K));
  packB(B, ldb, transB, K, nb, bp);
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = std::min(KC, K - k0);
    const bool acc = accumulate || k0 > 0;
    for (int64_t jp = 0; jp < panelsN; ++jp) {
      const float* b = bp + jp * NR * K + k0 * NR;
      const int64_t nr = std::min(NR, nb - jp * NR);
      for (int64_t m = m0; m < m1; m += MR) {
        const float* a = A.panel(m / MR) + k0 * MR;
        micro6x16(kc, a, b, NR, C + (m - m0) * ldc + jp * NR, ldc, acc, std::min(MR, m1 - m), nr);
      }
    }
  }
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
        const float* a = A.panel(m / MR) + k0 * MR;
        micro6x16(kc, a, b, ldb, C + (m - m0) * ldc + jp * NR, ldc, acc, std::min(MR, m1 - m), nr);
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

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads) {
  if (M <= 0 || N <= 0) return;
  if (beta != 0.f && beta != 1.f) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] *= beta;
  }
  const bool accumulate = beta != 0.f;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) std::memset(C + m * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  PackedMatrix a(A, lda, M, K, transA, alpha);
  int64_t mb, nb;
  gemmBlocking(M, N, K, threads, mb, nb);
  const int64_t rowBlocks = (M + mb - 1) / mb, colBlocks = (N + nb - 1) / nb;
  parallelFor(threads, rowBlocks * colBlocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t m0 = (t / colBlocks) * mb, n0 = (t % colBlocks) * nb;
      const float* bb = transB ? B + n0 * ldb : B + n0;
      gemmBlock(a, m0, std::min(M, m0 + mb), bb, ldb, transB, std::min(nb, N - n0), C + m0 * ldc + n0, ldc, accumulate);
    }
  });
}

}  // namespace qs
