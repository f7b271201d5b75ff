// The one single-precision GEMM every heavy kernel (Conv, ConvTranspose, Gemm, MatMul, Einsum)
// goes through, so that a faster backend changes one place.
#pragma once

#include <cstdint>

namespace qs {

/// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading dimensions.
/// op(X) is X or X^T per the trans flags (A is [K,M] when transA). When beta == 0, C is
/// overwritten without being read. `threads` bounds the parallelism.
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads);

}  // namespace qs
