#include "core/kernels/gemm.h"

#include <Eigen/Core>

namespace qs {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using ConstMap = Eigen::Map<const RowMat, Eigen::Unaligned, Stride>;
using Map = Eigen::Map<RowMat, Eigen::Unaligned, Stride>;
}  // namespace

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads) {
  if (M <= 0 || N <= 0) return;
  Map c(C, M, N, Stride(ldc));
  if (K <= 0) {
    if (beta == 0.f) c.setZero();
    else c *= beta;
    return;
  }
  Eigen::setNbThreads(threads);
  ConstMap a(A, transA ? K : M, transA ? M : K, Stride(lda));
  ConstMap b(B, transB ? N : K, transB ? K : N, Stride(ldb));
  if (beta == 0.f) {
    if (!transA && !transB) c.noalias() = alpha * (a * b);
    else if (transA && !transB) c.noalias() = alpha * (a.transpose() * b);
    else if (!transA && transB) c.noalias() = alpha * (a * b.transpose());
    else c.noalias() = alpha * (a.transpose() * b.transpose());
  } else {
    if (beta != 1.f) c *= beta;
    if (!transA && !transB) c.noalias() += alpha * (a * b);
    else if (transA && !transB) c.noalias() += alpha * (a.transpose() * b);
    else if (!transA && transB) c.noalias() += alpha * (a * b.transpose());
    else c.noalias() += alpha * (a.transpose() * b.transpose());
  }
}

}  // namespace qs
