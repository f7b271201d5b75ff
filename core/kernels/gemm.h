// The single-precision GEMM every heavy kernel (Conv, ConvTranspose, Gemm, MatMul, Einsum) goes
// through: an AVX2/FMA 6x16 micro-kernel over A packed in 6-row panels and B packed in 16-column
// panels, blocked for L1/L2, threaded by splitting C into blocks on the process pool (each block
// single-threaded, so nothing oversubscribes). Chosen over Eigen and OpenBLAS by measurement on
// the Conv shapes of the PaddleOCR models (docs/performance.md): it matches OpenBLAS on large
// squares, beats both on the small-M / huge-N shapes of convolutions, lets Conv pack its weights
// once at load, and lets Conv apply bias and activation while a block of C is still in cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace qs {

/// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading dimensions.
/// op(X) is X or X^T per the trans flags (A is [K,M] when transA). When beta == 0, C is
/// overwritten without being read. `threads` bounds the parallelism.
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads);

/// A [M,K] (or alpha * A^T when transA) packed into 6-row panels for gemmBlock; rows past M are
/// zero. Pack weights once at kernel creation, activations per call.
class PackedMatrix {
 public:
  static constexpr int64_t kRowsPerPanel = 6;
  PackedMatrix() = default;
  PackedMatrix(const float* A, int64_t lda, int64_t M, int64_t K, bool transA = false, float alpha = 1.f);
  /// The same, packed into this thread's reusable buffer instead of a new allocation: for the
  /// activations a MatMul packs on every run (a fresh multi-megabyte buffer per call costs its
  /// page faults every time). Valid until the next packScratch on this thread; other threads may
  /// read it meanwhile (the GEMM's blocks while the caller waits). A row-major A with alpha 1 is
  /// not copied at all: the result is a view() of it.
  static PackedMatrix packScratch(const float* A, int64_t lda, int64_t M, int64_t K, bool transA = false,
                                  float alpha = 1.f);
  /// A row-major A [M, K] (leading dimension lda) read in place, not packed: the micro-kernel
  /// broadcasts from its 6 rows directly, as ONNX Runtime's MLAS does. The same products in the
  /// same order as packed; A must outlive the view.
  static PackedMatrix view(const float* A, int64_t lda, int64_t M, int64_t K);
  int64_t rows() const { return m_rows; }
  int64_t cols() const { return m_cols; }
  bool empty() const { return !m_data && !m_view; }
  /// Not packed (view()): rows are at viewRow(m), one after the other with stride viewLd().
  bool isView() const { return m_view != nullptr; }
  const float* viewRow(int64_t m) const { return m_view + m * m_lda; }
  int64_t viewLd() const { return m_lda; }
  /// Panel p: K groups of 6 floats (rows 6p..6p+5, column k at [k*6 + r]). Packed matrices only.
  const float* panel(int64_t p) const { return m_data.get() + p * kRowsPerPanel * m_cols; }

 private:
  void pack(const float* A, int64_t lda, bool transA, float alpha);
  int64_t m_rows = 0, m_cols = 0;
  std::shared_ptr<float[]> m_data;
  const float* m_view = nullptr;
  int64_t m_lda = 0;
};

/// One block of C, single-threaded: C[m0:m1, 0:nb] (+)= A[m0:m1, :] * op(B)[K, 0:nb] where B is
/// row-major [K, >= nb] with leading dimension ldb (or [nb, K] when transB). m0 is a multiple of
/// 6. accumulate adds to C instead of overwriting it. Packs B into per-thread scratch.
void gemmBlock(const PackedMatrix& A, int64_t m0, int64_t m1, const float* B, int64_t ldb, bool transB, int64_t nb,
               float* C, int64_t ldc, bool accumulate);

/// gemmBlock for two A matrices of the same shape against the same B, packed once: C1 = A1 * op(B)
/// and C2 = A2 * op(B) over rows [m0, m1), each element computed exactly as gemmBlock computes it
/// (the same micro-kernel calls). For the analysis's layer-wise runs, X*Wq and Xq*Wq.
void gemmBlockPair(const PackedMatrix& A1, const PackedMatrix& A2, int64_t m0, int64_t m1, const float* B, int64_t ldb,
                   bool transB, int64_t nb, float* C1, float* C2, int64_t ldc);

/// gemmBlock for a B that needs no packing: row-major [K, nb] with leading dimension ldb, whose
/// columns up to nb rounded up to 16 are readable (values past nb are ignored). For im2col blocks
/// built for it; ldb a multiple of 16 that is not a multiple of 256 keeps L1 sets apart.
void gemmBlockRows(const PackedMatrix& A, int64_t m0, int64_t m1, const float* B, int64_t ldb, int64_t nb, float* C,
                   int64_t ldc, bool accumulate);

/// op(B) [K, N] packed once into 16-column panels (K x 16 floats each, zero past N), the layout
/// gemmBlock packs into per call: the constant weights of MatMul / Gemm / FusedMatMul, packed at
/// load so that a run only packs its activations (docs/performance.md, "Transformers").
class PackedPanels {
 public:
  static constexpr int64_t kColsPerPanel = 16;
  PackedPanels() = default;
  /// B row-major [K, N] with leading dimension ldb, or [N, K] when transB.
  PackedPanels(const float* B, int64_t ldb, bool transB, int64_t K, int64_t N);
  int64_t rows() const { return m_rows; }
  int64_t cols() const { return m_cols; }
  bool empty() const { return !m_data; }
  /// Panels from column n0 (a multiple of 16) on, each K x 16, one after the other.
  const float* from(int64_t n0) const { return m_data.get() + (n0 / kColsPerPanel) * kColsPerPanel * m_rows; }

 private:
  int64_t m_rows = 0, m_cols = 0;
  std::shared_ptr<float[]> m_data;
};

/// gemmBlock over prepacked B: C[m0:m1, 0:nb] (+)= A[m0:m1, :] * op(B)[:, n0:n0+nb], n0 a
/// multiple of 16 and A.cols() == B.rows().
void gemmBlockPacked(const PackedMatrix& A, int64_t m0, int64_t m1, const PackedPanels& B, int64_t n0, int64_t nb,
                     float* C, int64_t ldc, bool accumulate);

/// sgemm (beta 0 or 1) with B prepacked: C[M, N] (+)= alpha * op(A) * B, op(A) [M, B.rows()].
void sgemmPacked(bool transA, int64_t M, float alpha, const float* A, int64_t lda, const PackedPanels& B, bool accumulate,
                 float* C, int64_t ldc, int threads);

/// How gemm-like work of M x N (x K) is cut into blocks for `threads`: rows per block (multiple
/// of 6) and columns per block (multiple of 16). One block when the work is small.
void gemmBlocking(int64_t M, int64_t N, int64_t K, int threads, int64_t& mb, int64_t& nb);

/// The blocks of gemmBlocking spread over `threads` on the pool: fn(m0, m1, n0, nb) for rows
/// [m0, m1) and columns [n0, n0 + nb) of each block, as sgemm runs them.
void forEachGemmBlock(int64_t M, int64_t N, int64_t K, int threads,
                      const std::function<void(int64_t m0, int64_t m1, int64_t n0, int64_t nb)>& fn);

/// A product's blocks dealt out evenly over `threads`: rowBlocks x colBlocks blocks whose rows
/// (6-row tiles) and columns (16-column panels) differ by at most one tile or panel, their count
/// a multiple of 4 x threads, parallelFor's chunk count, so that every chunk holds the same
/// number of blocks and each thread gets the same work (docs/performance.md, "Transformers at
/// batch 1"). gemmBlocking's cache limits on a block's rows and columns still hold. With one
/// thread, or below gemmBlocking's threshold for a second thread, gemmBlocking's blocks.
struct GemmBlocks {
  int64_t M = 0, N = 0, rowTiles = 0, panels = 0, rowBlocks = 1, colBlocks = 1;
  int64_t count() const { return rowBlocks * colBlocks; }
  /// Block q in [0, count()): rows [m0, m1), m0 a multiple of 6; columns [n0, n0 + nb), n0 a
  /// multiple of 16. Empty (m1 == m0 or nb == 0) only when M or N is 0.
  void block(int64_t q, int64_t& m0, int64_t& m1, int64_t& n0, int64_t& nb) const;
};
GemmBlocks balancedGemmBlocks(int64_t M, int64_t N, int64_t K, int threads);

/// The blocks of balancedGemmBlocks on the pool (qs::parallelFor, one block per item):
/// fn(m0, m1, n0, nb), as sgemmPacked runs them.
void forEachBalancedGemmBlock(int64_t M, int64_t N, int64_t K, int threads,
                              const std::function<void(int64_t m0, int64_t m1, int64_t n0, int64_t nb)>& fn);

/// A grain (items per chunk) of at least minGrain for parallelFor over n equal items on
/// `threads` that gives every thread the same number of chunks of the same size when one
/// exists (12 attention heads on 2 threads: 6 chunks of 2, not parallelFor's 8 uneven chunks);
/// otherwise minGrain.
int64_t balancedGrain(int64_t n, int threads, int64_t minGrain);

/// Per-thread scratch of at least n floats, 64-byte aligned, reused across calls (grows only).
/// `slot` selects one of a few independent buffers (0: gemm's packed B; 1..3: callers).
float* gemmScratch(int slot, size_t n);

}  // namespace qs
