#include "core/analysis/split_gram.h"

#include <Eigen/Core>

#include "core/kernels/gemm.h"

namespace qs {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The lower triangle of U U^T into g (column-major K x K), U a K x n expression: Eigen's
// symmetric rank update, half the multiply-adds of the full product.
template <typename U>
void lowerGram(const U& u, int64_t K, std::vector<float>& g) {
  g.assign((size_t)(K * K), 0.f);
  Eigen::Map<Eigen::MatrixXf> m(g.data(), K, K);
  m.selfadjointView<Eigen::Lower>().rankUpdate(u);
}

// <A, B> of two symmetric K x K matrices given by their lower triangles (column-major), in double.
double lowerInner(const std::vector<float>& a, const std::vector<float>& b, int64_t K) {
  double total = 0;
  for (int64_t j = 0; j < K; ++j) {
    const float* ca = a.data() + j * K;
    const float* cb = b.data() + j * K;
    double off = 0;
    for (int64_t i = j + 1; i < K; ++i) off += (double)ca[i] * (double)cb[i];
    total += (double)ca[j] * (double)cb[j] + 2.0 * off;
  }
  return total;
}

}  // namespace

MatMulSplitGram::MatMulSplitGram(const Tensor& w, const Tensor& wq) : m_k(w.shape()[0]) {
  const int64_t N = w.shape()[1];
  Eigen::Map<const RowMajor> W(w.data<float>(), m_k, N), Wq(wq.data<float>(), m_k, N);
  const RowMajor dW = Wq - W;
  lowerGram(dW, m_k, m_dwdw);
  lowerGram(W, m_k, m_wwt);
}

void MatMulSplitGram::noisePowers(const float* x, const float* xq, int64_t rows, double& weightNoise,
                                  double& actNoise) const {
  Eigen::Map<const RowMajor> X(x, rows, m_k), Xq(xq, rows, m_k);
  std::vector<float> g;
  lowerGram(X.transpose(), m_k, g);
  weightNoise = lowerInner(g, m_dwdw, m_k);
  const RowMajor dX = Xq - X;
  lowerGram(dX.transpose(), m_k, g);
  actNoise = lowerInner(g, m_wwt, m_k);
}

bool gramSplitPays(int64_t rows, int64_t K, int64_t N, int64_t batches) {
  if (K <= 0 || N <= 0 || K > 4096 || 2 * N <= K) return false;
  // Multiply-adds: the two products cost 2 rows K N per batch, the two Grams rows K^2 (half each),
  // the weight's two products K^2 N once.
  const double saved = (double)batches * (double)rows * (double)K * (double)(2 * N - K);
  return saved > (double)K * (double)K * (double)N;
}

const MatMulSplitGram& SplitGramCache::get(size_t node, const Tensor& w, const Tensor& wq) {
  std::call_once(m_once[node], [&] { m_grams[node] = std::make_unique<MatMulSplitGram>(w, wq); });
  return *m_grams[node];
}

bool layerwiseMatMulGram(const Tensor& x, const Tensor& xq, const Tensor& w, const Tensor& wq, const Tensor& ref,
                         int threads, const MatMulSplitGram& gram, ErrorAccumulator& full, ErrorAccumulator& weight,
                         ErrorAccumulator& act, const PackedPanels* wqPanels, const DnnlMatMul* wqDnnl) {
  for (const Tensor* t : {&x, &xq, &w, &wq, &ref})
    if (t->dtype() != DType::Float) return false;
  if (x.rank() < 2 || w.rank() != 2 || xq.shape() != x.shape() || wq.shape() != w.shape()) return false;
  const int64_t K = x.shape().back(), N = w.shape()[1];
  if (K <= 0 || N <= 0 || w.shape()[0] != K || gram.k() != K) return false;
  const int64_t M = x.numel() / K;
  Shape yShape(x.shape().begin(), x.shape().end() - 1);
  yShape.push_back(N);
  // As layerwiseMatMul: two rows or fewer go to the kernel's small-rows GEMM.
  if (M <= 2 || ref.shape() != yShape) return false;
  if (wqPanels && (wqPanels->rows() != K || wqPanels->cols() != N)) wqPanels = nullptr;
  // Both points: Xq * Wq with the MatMul kernel's blocking and micro-kernel calls, Xq read in
  // place as the kernel reads it (a view: the same products in the same order as packed).
  const PackedMatrix pq = PackedMatrix::view(xq.data<float>(), K, M, K);
  Tensor yFull(DType::Float, yShape);
  float* cf = yFull.data<float>();
  const float* bq = wq.data<float>();
  if (!wqDnnl || !wqDnnl->run(xq.data<float>(), K, M, cf, N, threads))
    forEachGemmBlock(M, N, K, threads, [&](int64_t m0, int64_t m1, int64_t n0, int64_t cols) {
      if (wqPanels)
        gemmBlockPacked(pq, m0, m1, *wqPanels, n0, cols, cf + m0 * N + n0, N, false);
      else
        gemmBlock(pq, m0, m1, bq + n0, N, false, cols, cf + m0 * N + n0, N, false);
    });
  ErrorAccumulator batch;
  batch.add(ref, yFull, threads);
  full.merge(batch);
  double weightNoise = 0, actNoise = 0;
  gram.noisePowers(x.data<float>(), xq.data<float>(), M, weightNoise, actNoise);
  // The signal is ref's, summed as a comparison sums it; a Gram's float rounding can leave a
  // tiny negative power where the noise is ~0.
  weight.addPowers(batch.signalPower(), std::max(0.0, weightNoise), ref.numel());
  act.addPowers(batch.signalPower(), std::max(0.0, actNoise), ref.numel());
  return true;
}

}  // namespace qs
