// Depthwise 2-D Conv (ai.onnx Conv 1..21 / ai.quantscope FusedConv; group == C == M, dilation 1) on the
// blocked layout nChw16c, for the blocked regions of DnnlConv (core/kernels/conv_dnnl.h), AVX-512.
//
// Why not oneDNN's jit_dw everywhere: at batch 1 on two threads DnnlConv cuts a depthwise conv into
// slices of channel blocks, while the 1x1 convs around it (core/kernels/conv1x1_blocked.h) are cut into
// ranges of pixels where their input is at least their weights (mobilenet_v2 at 28x28 and above), so
// each core read half of its input from the other core's cache and wrote half of the next conv's input
// there. jit_dw takes no row range of nChw16c. This kernel computes any range of output rows of any
// range of channel blocks in place, each output as jit_dw sums it: the bias (zero without one), then one
// FMA per tap that falls inside the image, rows ascending, then columns ascending, then Relu or Clip. So
// an output's bits do not depend on the range, the batch or the thread count, and are jit_dw's
// (tests/kernels/test_depthwise_blocked.cpp compares them bit for bit).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernels/conv.h"

namespace qs {

class DepthwiseBlocked {
 public:
  /// Whether the kernel can run here: an AVX-512F CPU.
  static bool available();
  /// Whether it takes these post-ops: none, or Relu or Clip as the first and only activation.
  static bool supported(const std::vector<FusedActivation>& activations);
  /// Packs W [C, 1, kH, kW] (float) and bias B [C] (nullptr: none) for nChw16c. nullptr when W is not
  /// such a filter, the post-ops are not supported, or the CPU has no AVX-512.
  static std::unique_ptr<DepthwiseBlocked> create(const Tensor& W, const Tensor* B,
                                                  const std::vector<FusedActivation>& activations);
  /// Whether it runs geometry g: 2-D, this filter's kernel size, dilation 1.
  bool takes(const WindowGeometry& g) const;

  int64_t channels() const { return m_C; }
  int64_t blocks() const { return m_Cb; }

  /// One image: x [Cb, H, W, 16], y [Cb, OH, OW, 16] (g.in / g.out). Writes output rows [oh0, oh1) of
  /// channel blocks [cb0, cb1) of y (pad lanes of a channel tail included: zero weights and bias, so
  /// zero, as long as x's pad lanes are finite) and nothing else. Const and re-entrant; single-threaded.
  void run(const float* x, const WindowGeometry& g, float* y, int64_t cb0, int64_t cb1, int64_t oh0,
           int64_t oh1) const;
  /// run() reading x's rows from a band held apart: xBand [Cb, xRows, W, 16] holds rows [xRow0, xRow0 + xRows)
  /// of x, which must include every row that output rows [oh0, oh1) read (core/kernels/expand_depthwise_blocked.h).
  /// The same bits as run().
  void runBand(const float* xBand, int64_t xRow0, int64_t xRows, const WindowGeometry& g, float* y, int64_t cb0,
               int64_t cb1, int64_t oh0, int64_t oh1) const;

  /// N images on at most `threads` threads of the pool: one task per image from batch >= hardware
  /// threads, else each image in parts (enough for the hardware threads, at most 8): ranges of output
  /// rows when `byRows`, else ranges of channel blocks. The bits do not depend on the split.
  void runBatch(const float* x, int64_t N, const WindowGeometry& g, float* y, bool byRows, int threads) const;

 private:
  DepthwiseBlocked() = default;
  int64_t m_C = 0, m_Cb = 0, m_KH = 0, m_KW = 0;
  std::vector<float> m_store;     // weights and bias, 64-byte aligned within
  const float* m_w = nullptr;     // [Cb][KH * KW][16]
  const float* m_bias = nullptr;  // [Cb * 16], zero where there is none
  int m_post = 0;                 // 0 none, 1 Relu, 2 Clip
  float m_lo = 0, m_hi = 0;
};

}  // namespace qs
