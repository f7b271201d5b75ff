// A 1x1 Conv (ai.onnx Conv 1..21 / ai.quantscope FusedConv, group 1) over a 1x1
// image, as the squeeze-and-excitation blocks of RegNet, MobileNetV3 and
// PP-LCNet run it after their GlobalAveragePool: a matrix-vector product per
// image. The GEMM path packs the one input column into a 16-column panel (15/16
// of the work wasted) and costs ~25 us per node at regnet's sizes; here the
// weights are packed once, transposed so that eight output channels share a
// vector, and each channel is summed in the GEMM's order (K slices of 256, each
// an FMA chain from zero, the slices added), so the bits are those of the GEMM
// path.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/conv.h"

namespace qs {

class PointwiseGemv {
 public:
  /// Packs W [M, C, 1, ..., 1] (float). Empty (valid() false) for any other W.
  explicit PointwiseGemv(const Tensor& W);
  bool valid() const { return m_M > 0; }
  /// Subnormal values of W packed as zeros (they cost a microcode assist per FMA on Intel cores).
  int64_t flushedWeights() const { return m_flushed; }

  /// y[n, m] = activations(bias[m] + sum_c W[m, c] x[n, c]) for N images of C
  /// values each (x [N, C], y [N, M], both contiguous); bias may be null. The
  /// same bits as the Conv kernel's GEMM path followed by its epilogue.
  void run(const float* x, int64_t N, const float* bias, const std::vector<FusedActivation>& activations,
           float* y) const;

 private:
  int64_t m_M = 0, m_C = 0, m_Mpad = 0, m_flushed = 0;
  std::vector<float> m_wt;  // [C][Mpad]: W transposed, rows padded with zeros to
                            // a multiple of 32
};

}  // namespace qs
