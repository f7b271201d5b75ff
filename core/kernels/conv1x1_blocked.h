// 1x1 Conv (ai.onnx Conv 1..21 / ai.quantscope FusedConv; group 1; stride 1 without pads, and other windows
// below) on the
// blocked layout nChw16c, for the blocked regions of DnnlConv (core/kernels/conv_dnnl.h), AVX-512.
//
// Why not oneDNN's jit_1x1 everywhere: at batch 1 on two threads DnnlConv cuts a conv into halves of
// the output channels, and each half re-reads the whole input (resnet50's reducing 256 -> 64 at 56x56
// ran at 137 instead of 198 GFLOP/s; mobilenet_v2's 32 -> 16 at 112x112, one block of output, was not
// split at all). jit_1x1 takes no row range of nChw16c (not dense), and it blocks its reduction by the
// spatial size, so a row range would not get the bits of the whole image. This kernel computes any
// range of pixels of any range of output-channel blocks in place, and sums every output in one fixed
// order: one FMA chain from zero over the input channels in ascending order (in registers, or carried
// through memory exactly), then + bias, then + the residual, then the activation. So an output's bits do
// not depend on the range, the batch or the thread count (docs/performance.md, "A 1x1 convolution on
// nChw16c that takes row ranges (wt-k1x1)").
//
// Other windows (a 1x1 of stride 2: resnet50's downsamples; 3x3s, strided or not) run as the 1x1 over an
// im2col of the chunk in nChw16c, gathered per chunk of output pixels into a buffer that stays in L2: the
// gather touches each input value KH * KW times, the tiles use it M times (docs/performance.md, "resnet50
// at batch 1: strided convs in our kernel (wt-r50)").
//
// Register blocking after oneDNN's: up to 4 output blocks x 6 pixels (24 zmm accumulators), 3 x 8,
// 2 x 12 or 1 x 24; weights packed at load as [M/16][C/16][16 ic][16 oc] (one zmm per input channel and
// output block), inputs broadcast from memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernels/conv.h"
#include "core/kernels/weight_buffer.h"

namespace qs {

class Conv1x1Blocked {
 public:
  /// Whether the kernel can run here: an AVX-512F CPU.
  static bool available();
  // (QS_CONV1X1=dnnl in the environment: DnnlConv's choice, conv_dnnl.h; not read here.)
  /// Whether it takes these post-ops: none, Relu or Clip (the first and only activation), or the
  /// residual sum, optionally followed by Relu (the forms DnnlConv's blocked regions fuse into 1x1s).
  static bool supported(const std::vector<FusedActivation>& activations, bool residual);
  /// Packs W [M, C, KH, KW] (float; C a multiple of 16 unless KH = KW = 1) and bias B [M] (nullptr: none) for
  /// nChw16c, the taps of a KH x KW filter as KH * KW groups of the input channels; `activations` and
  /// `residual` as supported() takes them. nullptr when W is not such a filter, the post-ops are not
  /// supported, or the CPU has no AVX-512.
  static std::unique_ptr<Conv1x1Blocked> create(const Tensor& W, const Tensor* B,
                                                const std::vector<FusedActivation>& activations, bool residual,
                                                bool reluAfterResidual);

  int64_t inChannels() const { return m_C / m_taps; }
  int64_t outChannels() const { return m_M; }
  /// The filter's rows and columns (1 x 1 for a pointwise conv).
  int64_t kernelRows() const { return m_KH; }
  int64_t kernelCols() const { return m_KW; }
  /// Blocks of 16 channels in and out (tails padded; in: of the input tensor, not of the taps).
  int64_t inBlocks() const { return m_Cb / m_taps; }
  int64_t outBlocks() const { return m_Mb; }
  bool residual() const { return m_residual; }

  /// One image: x [Cb, P, 16] and y, residual [Mb, P, 16] (residual: given exactly when made with one;
  /// it may be y itself). Writes output blocks [mb0, mb1) over pixels [p0, p1) of y (pad lanes of a
  /// channel tail included: zero weights and bias, so the residual's pad lane through the activation)
  /// and nothing else. The pad lanes of x are not read. Const and re-entrant; single-threaded.
  void run(const float* x, int64_t P, float* y, const float* residual, int64_t mb0, int64_t mb1, int64_t p0,
           int64_t p1) const;
  /// run() for any window of the filter it was made with (a KH x KW filter, stride g.s, pads g.padB / g.padE,
  /// no dilation; g as resolveWindow gives it, 2-D): x [Cb, H, W, 16], y and residual [Mb, Ho, Wo, 16], and
  /// [p0, p1) pixels of the output. Unless it is a 1x1 of stride 1, each chunk of output pixels first gathers
  /// its window into a dense buffer of this thread, [KH * KW * Cb][chunk][16] (zero outside the input: the
  /// pads), and the tiles then run over it as a 1x1 over KH * KW * C channels: each output one FMA chain over
  /// the taps in row-major order and, within a tap, the input channels in ascending order, for any range.
  void runWindow(const float* x, const WindowGeometry& g, float* y, const float* residual, int64_t mb0, int64_t mb1,
                 int64_t p0, int64_t p1) const;
  /// run() of a 1x1 of stride 1 (made without a residual) into a band of rows held apart: output pixels [p0, p1)
  /// of every output block, read from x [Cb, P, 16], written to y [Mb, yP, 16] at pixel p - yFirst (so y holds
  /// pixels [yFirst, yFirst + yP) of the output; core/kernels/expand_depthwise_blocked.h). The same bits as run().
  void runInto(const float* x, int64_t P, float* y, int64_t yP, int64_t yFirst, int64_t p0, int64_t p1) const;
  /// N images (x [N, Cb, P, 16], y and residual [N, Mb, P, 16]) on at most `threads` threads of the pool:
  /// partsPerImage(N, hardwareThreads()) tasks per image, each a range of pixels where the image's
  /// input is at least the weights (each core then reads its part of the input and all the weights,
  /// instead of all the input for a part of the output channels), else a range of output blocks.
  /// The bits do not depend on the split.
  void runBatch(const float* x, int64_t N, int64_t P, float* y, const float* residual, int threads) const;
  /// runBatch() for any window (runWindow): x [N, Cb, H, W, 16], y and residual [N, Mb, Ho, Wo, 16]; the same
  /// split over output pixels or blocks, the same bits for any split.
  void runBatchWindow(const float* x, int64_t N, const WindowGeometry& g, float* y, const float* residual,
                      int threads) const;
  /// Tasks per image: 1 from `hardwareThreads` images on, else enough for the threads (at most 8).
  static int64_t partsPerImage(int64_t N, int hardwareThreads);

  /// The multiply-adds of one image of P output pixels.
  double macs(int64_t P) const { return (double)m_M * (double)m_C * (double)P; }
  /// Bytes of the packed weights on transparent huge pages (core/kernels/weight_buffer.h).
  size_t weightBytesOnHugePages() const { return m_store.advisedBytes(); }

 private:
  Conv1x1Blocked() = default;
  // The tiles of output pixels [p0, p1) of output blocks [mb0, mb1), P output pixels; g: the window, gathered
  // per chunk, or null for a 1x1 of stride 1 (x read in place).
  // y (and residual) hold pixels [yFirst, yFirst + yP) of each output block.
  void runPixels(const float* x, int64_t P, const WindowGeometry* g, float* y, int64_t yP, int64_t yFirst,
                 const float* residual, int64_t mb0, int64_t mb1, int64_t p0, int64_t p1) const;
  int64_t m_C = 0, m_M = 0, m_Cb = 0, m_Mb = 0;  // C, Cb: the reduction (KH * KW taps of the input channels)
  int64_t m_KH = 1, m_KW = 1, m_taps = 1;
  WeightBuffer m_store;           // weights and bias (huge pages from 2 MiB: weight_buffer.h)
  const float* m_w = nullptr;     // [Mb][Cb][16][16]
  const float* m_bias = nullptr;  // [Mb * 16], zero where there is none
  bool m_residual = false;
  int m_post = 0;  // 0 none, 1 Relu, 2 Clip (after the residual when there is one)
  float m_lo = 0, m_hi = 0;
};

}  // namespace qs
