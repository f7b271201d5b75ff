// oneDNN's matmul for the FP32 product of rows of A with a constant weight matrix B (issue 13,
// docs/performance.md "oneDNN's matmul on AVX-512 CPUs"). On CPUs where oneDNN runs AVX-512
// (brgemm) kernels it computes these products about twice as fast as our AVX2 GEMM; elsewhere
// our GEMM is level with it and stays. Used by FusedMatMul (made only by the graph rewrites, so
// only in unobserved inference with library kernels on), never by the analysis's kernels.
#pragma once

#include <cstdint>
#include <memory>

#include "core/ir/tensor.h"
#include "core/util/status.h"

namespace qs {

class DnnlMatMul {
 public:
  /// Whether to use it on this CPU: oneDNN built in and running an AVX-512 matmul kernel (asked once
  /// per process); QS_DNNL_MATMUL=0 or 1 in the environment overrides it (tests run both).
  static bool preferred();
  /// Prepares Y = act(alpha * A @ B + bias) for a constant B [K, N] (row-major, ldb; transposed when
  /// transB, i.e. B given as [N, K]), bias [N] (nullptr: none), Gelu (erf form) when `gelu`.
  /// B (times alpha) is copied into oneDNN's layout once, on the first run. nullptr without oneDNN.
  /// columnParts > 1 (the pool's threads): B is held as that many ranges of whole 16-column panels (at
  /// least 64 columns each), so that a product with more columns than rows can split the columns
  /// across the threads (each thread reads its part of B) rather than the rows (each reads all of B).
  static std::unique_ptr<DnnlMatMul> create(const float* B, int64_t ldb, bool transB, int64_t K, int64_t N,
                                            const float* bias, float alpha, bool gelu, int columnParts = 1);
  ~DnnlMatMul();

  /// Y rows [M, N] (leading dimension ldc) from A [M, K] (leading dimension lda, not transposed),
  /// split across at most `threads` threads of the pool: by the column parts when N > M, else by
  /// rows. Primitives are made once per block height and kept. Fails (Y then partly written) when oneDNN refuses.
  Status run(const float* A, int64_t lda, int64_t M, float* Y, int64_t ldc, int threads) const;

 private:
  struct Impl;
  explicit DnnlMatMul(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace qs
