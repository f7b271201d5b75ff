// The weight/activation split of a MatMul with a 2-D constant weight from noise powers alone
// (docs/design.md, "Analysis", step 3). The split's figures are SNRs, so each needs only the
// power of its error, never the error itself: with X [M, K], W [K, N], dW = Wq - W, dX = Xq - X,
//   ||X dW||^2  = <X^T X, dW dW^T>   (weights only: X Wq - X W)
//   ||dX W||^2  = <dX^T dX, W W^T>   (activations only: Xq W - X W)
// where the K x K products of the weight are formed once per analysis and the Grams of X and dX
// (symmetric, half a GEMM's work each) once per batch: M K^2 multiply-adds per batch for both
// instead of the 2 M K N of the two products, so the route pays where K is below about 2N
// (transformers' QKV, output and up projections, the LM head), not for a down projection.
// The figures equal the products' to float rounding: the products' own rounding (~1e-7 of y) is
// all that the elementwise route adds, far below any quantization noise.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/ir/tensor.h"
#include "core/kernels/gemm.h"
#include "core/kernels/matmul_dnnl.h"
#include "core/numeric/metrics.h"

namespace qs {

/// dW dW^T and W W^T of one weight W [K, N] and its fake-quantized copy Wq (K x K each, the lower
/// triangles), and the noise powers of the split from them.
class MatMulSplitGram {
 public:
  /// Both products, float sums over N. `w` and `wq` are float [K, N] of the same shape.
  MatMulSplitGram(const Tensor& w, const Tensor& wq);
  int64_t k() const { return m_k; }
  /// ||X (Wq - W)||^2 and ||(Xq - X) W||^2 over the rows of X [..., K] and Xq (same shape): the
  /// Grams of X and Xq - X summed in float over the rows, their inner products with this
  /// weight's products accumulated in double.
  void noisePowers(const float* x, const float* xq, int64_t rows, double& weightNoise, double& actNoise) const;

 private:
  int64_t m_k = 0;
  std::vector<float> m_dwdw, m_wwt;  // column-major K x K, lower triangle
};

/// Whether the Gram route costs fewer multiply-adds than the two products over an analysis of
/// `batches` batches of `rows` rows each: batches * rows * K * (2N - K) saved per batch against
/// K^2 N to form the weight's two products once. K above 4096 never (two K x K floats per node).
bool gramSplitPays(int64_t rows, int64_t K, int64_t N, int64_t batches);

/// The weight products of the analysis's MatMuls, formed on first use (thread-safe: batches run
/// side by side) and dropped with the cache (one analyze()).
class SplitGramCache {
 public:
  explicit SplitGramCache(size_t nodes) : m_once(nodes), m_grams(nodes) {}
  const MatMulSplitGram& get(size_t node, const Tensor& w, const Tensor& wq);

 private:
  std::vector<std::once_flag> m_once;
  std::vector<std::unique_ptr<MatMulSplitGram>> m_grams;
};

/// The layer-wise sums of Y = X * W as layerwiseMatMul (layerwise_matmul.h) gives them, the split
/// from `gram`: `full` from Xq * Wq computed as the MatMul kernel computes it (the same bits),
/// `weight` and `act` from the noise powers, against the signal of `ref` (so their snrDb and mse
/// are the products' to float rounding; their other figures are not kept). False, touching
/// nothing, where layerwiseMatMul would refuse the shapes or `gram` is of another K. `wqPanels`
/// and `wqDnnl`: as layerwiseMatMul's (with `wqDnnl`, Xq * Wq is oneDNN's product).
bool layerwiseMatMulGram(const Tensor& x, const Tensor& xq, const Tensor& w, const Tensor& wq, const Tensor& ref,
                         int threads, const MatMulSplitGram& gram, ErrorAccumulator& full, ErrorAccumulator& weight,
                         ErrorAccumulator& act, const PackedPanels* wqPanels = nullptr,
                         const DnnlMatMul* wqDnnl = nullptr);

}  // namespace qs
