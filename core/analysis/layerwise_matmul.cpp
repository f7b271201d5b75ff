#include "core/analysis/layerwise_matmul.h"

#include <algorithm>

#include "core/kernels/gemm.h"

namespace qs {

bool layerwiseMatMul(const Tensor& x, const Tensor& xq, const Tensor& w, const Tensor& wq, const Tensor& ref,
                     int threads, ErrorAccumulator& full, ErrorAccumulator& weight, ErrorAccumulator& act,
                     const PackedPanels* wqPanels, const DnnlMatMul* wqDnnl) {
  for (const Tensor* t : {&x, &xq, &w, &wq, &ref})
    if (t->dtype() != DType::Float) return false;
  if (x.rank() < 2 || w.rank() != 2 || xq.shape() != x.shape() || wq.shape() != w.shape()) return false;
  const int64_t K = x.shape().back(), N = w.shape()[1];
  if (K <= 0 || N <= 0 || w.shape()[0] != K) return false;
  const int64_t M = x.numel() / K;  // the batch dims and rows as one GEMM, as MatMulKernel runs it
  Shape yShape(x.shape().begin(), x.shape().end() - 1);
  yShape.push_back(N);
  // Two rows or fewer go to the kernel's small-rows GEMM, which sums in another order.
  if (M <= 2 || ref.shape() != yShape) return false;
  if (wqPanels && (wqPanels->rows() != K || wqPanels->cols() != N)) wqPanels = nullptr;
  Tensor yFull(DType::Float, yShape), yWeight(DType::Float, yShape), yAct(DType::Float, yShape);
  float* cf = yFull.data<float>();
  float* cw = yWeight.data<float>();
  float* ca = yAct.data<float>();
  const float* bq = wq.data<float>();
  const float* b = w.data<float>();
  // Wq in oneDNN's layout: both products of Wq there (the route the quantized pass takes), Xq * W
  // with the kernel's blocking. Where oneDNN refuses, the kernel's route below instead.
  if (wqDnnl && wqDnnl->run(xq.data<float>(), K, M, cf, N, threads) &&
      wqDnnl->run(x.data<float>(), K, M, cw, N, threads)) {
    const PackedMatrix pq = PackedMatrix::view(xq.data<float>(), K, M, K);
    forEachGemmBlock(M, N, K, threads, [&](int64_t m0, int64_t m1, int64_t n0, int64_t cols) {
      gemmBlock(pq, m0, m1, b + n0, N, false, cols, ca + m0 * N + n0, N, false);
    });
    full.add(ref, yFull, threads);
    weight.add(ref, yWeight, threads);
    act.add(ref, yAct, threads);
    return true;
  }
  const PackedMatrix pq(xq.data<float>(), K, M, K), px(x.data<float>(), K, M, K);
  // sgemm's blocking for one of these products; each block packs Wq once for both of its products.
  forEachGemmBlock(M, N, K, threads, [&](int64_t m0, int64_t m1, int64_t n0, int64_t cols) {
    const int64_t off = m0 * N + n0;
    if (wqPanels) {
      gemmBlockPacked(pq, m0, m1, *wqPanels, n0, cols, cf + off, N, false);
      gemmBlockPacked(px, m0, m1, *wqPanels, n0, cols, cw + off, N, false);
    } else {
      gemmBlockPair(pq, px, m0, m1, bq + n0, N, false, cols, cf + off, cw + off, N);
    }
    gemmBlock(pq, m0, m1, b + n0, N, false, cols, ca + off, N, false);
  });
  full.add(ref, yFull, threads);
  weight.add(ref, yWeight, threads);
  act.add(ref, yAct, threads);
  return true;
}

}  // namespace qs
