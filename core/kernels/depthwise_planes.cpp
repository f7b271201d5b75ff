#include "core/kernels/depthwise_planes.h"

#include <array>
#include <vector>

#include "core/exec/parallel.h"
#include "core/numeric/fake_quant.h"

namespace qs {

bool depthwisePlanes(const DepthwiseQuant& dq, std::span<const Tensor* const> inputs, Tensor* y, const Tensor* ref,
                     ErrorAccumulator* const sums[3]) {
  if (!dq.attrs || !dq.quantizedWeights || inputs.size() < 2 || !inputs[0] || !inputs[1] || (!y && !ref)) return false;
  const Tensor& X = *inputs[0];
  const Tensor& W = *inputs[1];
  const Tensor& Wq = *dq.quantizedWeights;
  const int64_t nd = W.rank() - 2;
  if (X.dtype() != DType::Float || W.dtype() != DType::Float || X.rank() != W.rank() || Wq.shape() != W.shape() ||
      X.dim(1) != W.dim(0) || (ref && ref->dtype() != DType::Float))
    return false;
  const float* bias = nullptr;
  if (inputs.size() > 2 && inputs[2]) {
    if (inputs[2]->dtype() != DType::Float || inputs[2]->numel() != W.dim(0)) return false;
    bias = inputs[2]->data<float>();
  }
  WindowGeometry geo;
  if (!resolveWindow(*dq.attrs, std::vector<int64_t>(X.shape().begin() + 2, X.shape().end()),
                     std::vector<int64_t>(W.shape().begin() + 2, W.shape().end()), false, geo) ||
      geo.nd != nd)
    return false;
  const int64_t N = X.dim(0), C = X.dim(1), inSize = geo.inSize(), outSize = geo.outSize(), kSize = geo.kSize();
  if ((ref && ref->numel() != N * C * outSize) || N * C == 0 || outSize == 0) return false;
  const float sx = dq.inputScale;
  const QuantMode mode = dq.mode;
  const float* x = X.data<float>();
  const float* w = W.data<float>();
  const float* wq = Wq.data<float>();
  const float* r = ref ? ref->data<float>() : nullptr;
  float* out = nullptr;
  if (y) {
    Shape shape = {N, C};
    for (int64_t v : geo.outShape()) shape.push_back(v);
    *y = Tensor(DType::Float, shape);
    out = y->data<float>();
  }
  // Per plane: X fake-quantized as the analysis's input transform does (the same function per
  // element), then the Conv kernel's depthwise path (the same bits as the node run on
  // fake-quantized inputs), compared at once. Per-plane sums merged in plane order: independent
  // of threads.
  std::vector<std::array<ErrorAccumulator, 3>> acc(ref ? (size_t)(N * C) : 0);
  parallelFor(dq.threads, N * C, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    if (buf.size() < (size_t)(inSize + 2 * outSize)) buf.resize((size_t)(inSize + 2 * outSize));
    float* xq = buf.data();
    float* o1 = xq + inSize;
    float* o2 = o1 + outSize;
    for (int64_t p = b; p < e; ++p) {
      const int64_t c = p % C;
      const float* xp = x + p * inSize;
      const float* rp = r ? r + p * outSize : nullptr;
      const float bv = bias ? bias[c] : 0.f;
      if (mode == QuantMode::Fp8) fakeQuantFp8(xp, xq, inSize, sx);
      else fakeQuantInt8(xp, xq, inSize, sx, kActQmin, kActQmax);
      if (out) {  // the quantized pass: both points
        depthwiseConvPlane(xq, wq + c * kSize, bv, geo, out + p * outSize);
        if (rp && sums[0]) acc[(size_t)p][0].add(rp, out + p * outSize, outSize);
        continue;
      }
      // Layer-wise: both points and activations only from one read of the plane, weights only.
      depthwiseConvPlane2(xq, wq + c * kSize, w + c * kSize, bv, geo, o1, o2);
      if (sums[0]) acc[(size_t)p][0].add(rp, o1, outSize);
      if (sums[1]) acc[(size_t)p][1].add(rp, o2, outSize);
      if (sums[2]) {
        depthwiseConvPlane(xp, wq + c * kSize, bv, geo, o1);
        acc[(size_t)p][2].add(rp, o1, outSize);
      }
    }
  });
  for (const auto& a : acc)
    for (int k = 0; k < 3; ++k)
      if (sums[k]) sums[k]->merge(a[(size_t)k]);
  return true;
}

}  // namespace qs
