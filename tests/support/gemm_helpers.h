// What the tests of the analysis's MatMul products share: normally distributed tensors and the
// MatMul kernel's own product. Header-only, like model_helpers.h.
#pragma once

#include <random>

#include "core/ir/tensor.h"
#include "core/kernels/gemm.h"

namespace qs::test {

/// A float tensor of `shape` with values drawn from N(mean, scale^2).
inline Tensor normalTensor(Shape shape, std::mt19937& rng, float scale, float mean = 0.f) {
  Tensor t(DType::Float, std::move(shape));
  std::normal_distribution<float> d(mean, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

/// What MatMulKernel computes for A [..., M, K] x B [K, N]: one sgemm over all rows.
inline Tensor kernelMatMul(const Tensor& a, const Tensor& b, int threads) {
  const int64_t K = a.shape().back(), N = b.shape()[1], M = a.numel() / K;
  Shape ys(a.shape().begin(), a.shape().end() - 1);
  ys.push_back(N);
  Tensor y(DType::Float, ys);
  sgemm(false, false, M, N, K, 1.f, a.data<float>(), K, b.data<float>(), N, 0.f, y.data<float>(), N, threads);
  return y;
}

}  // namespace qs::test
