// A 1x1 Conv and the depthwise Conv that reads its output, as one op on nChw16c, by bands of rows
// (ai.quantscope BlockedExpandDepthwise, made by core/exec/expand_depthwise_rewrite.h from two BlockedConvs;
// the inverted residual blocks of MobileNetV2: expansion 1x1, depthwise 3x3).
//
// Why: mobilenet_v2's features.2 expands 16 -> 96 channels at 112x112, 4.8 MB per image, which the 1x1 wrote
// and the depthwise conv read back through L3 (2 MB of L2 per core); that 1x1 took 0.33 ms at batch 1 on two
// threads against ONNX Runtime's 0.27 for 39 MFLOP. Here each thread computes the expansion for a band of a
// few rows into a buffer of its own, [Mb][rows][W][16], that stays in L2, and the depthwise conv's output rows
// from it; the rows two bands share (3x3 windows) are kept, not recomputed.
//
// Bits: the expansion is Conv1x1Blocked's (core/kernels/conv1x1_blocked.h) and the depthwise conv
// DepthwiseBlocked's (core/kernels/depthwise_blocked.h, jit_dw's bits): the kernels DnnlConv runs for the two
// convs apart in nChw16c on AVX-512, whose bits do not depend on the range they compute. So the output is
// bit for bit the two BlockedConvs' at any batch, thread count and band (tests/kernels/test_expand_depthwise_blocked.cpp).
// When: from the hardware threads' batch on (one image a task) always: the batch's expansions were 38 MB at
// mobilenet_v2's features.2 at batch 8 (qs_bench_expand_depthwise, batch 8, 2 threads: 0.58x the two apart there,
// 0.77-0.98x at every other expansion, 0.79x in the sum). Below it (each image cut into ranges of rows, one per
// thread) where one image's expansion is at least minBandedBytes(), 1 MB (features.2 to .4: 0.77x, 0.94x, 0.92x on
// two threads); under it the two run apart, each split as DnnlConv splits it (a 14x14 or 7x7 map cut by rows
// recomputes a large share of rows: 1.06-1.25x).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"

namespace qs {

class Conv1x1Blocked;
class DepthwiseBlocked;

inline constexpr const char* kBlockedExpandDepthwiseOp = "BlockedExpandDepthwise";

class ExpandDepthwiseBlocked {
 public:
  /// The 1x1 conv W1 [M, C, 1, 1], B1 [M] (nullptr: none) with post-ops a1, then the depthwise conv Wd [M, 1, kH, kW],
  /// Bd [M] with post-ops ad. nullptr where either kernel does not take its conv (no AVX-512, other post-ops,
  /// other shapes).
  static std::unique_ptr<ExpandDepthwiseBlocked> create(const Tensor& W1, const Tensor* B1,
                                                        const std::vector<FusedActivation>& a1, const Tensor& Wd,
                                                        const Tensor* Bd, const std::vector<FusedActivation>& ad);
  ~ExpandDepthwiseBlocked();

  int64_t inChannels() const;
  int64_t channels() const;  // M: of the expansion and the depthwise conv
  /// Whether it runs the depthwise geometry g (2-D, its filter, dilation 1).
  bool takes(const WindowGeometry& g) const;

  /// N images: x [N, Cb, H, W, 16] (H, W: g.in), y [N, Mb, OH, OW, 16] (g.out), on at most `threads` threads of the
  /// pool. By bands from the hardware threads' batch on (one task per image), and below it (partsPerImage ranges of
  /// output rows per image) when the expansion of one image is at least minBandedBytes(); in bands of `bandRows`
  /// output rows (0: bandRowsFor()). Else the two convs apart. The bits do not depend on any of this. `scratch`: the
  /// caller's, at least scratchFloats(N, g, threads, bandRows) floats (the kernel takes it from the tensor pool for
  /// the run, so that nothing stays held after it), uninitialised; each thread at work bands through its own part.
  void runBatch(const float* x, int64_t N, const WindowGeometry& g, float* y, int threads, float* scratch,
                int64_t bandRows = 0) const;
  /// The floats of scratch runBatch needs for these arguments.
  int64_t scratchFloats(int64_t N, const WindowGeometry& g, int threads, int64_t bandRows = 0) const;
  /// One image, output rows [oh0, oh1), in bands of `bandRows` output rows through `buffer`, at least
  /// bandFloats(g, bandRows) floats, uninitialised.
  void runBands(const float* x, const WindowGeometry& g, float* y, int64_t oh0, int64_t oh1, int64_t bandRows,
                float* buffer) const;
  /// The floats of a band's buffer: the expansion of the input rows of `bandRows` output rows.
  int64_t bandFloats(const WindowGeometry& g, int64_t bandRows) const;

  /// Output rows per band: as many as keep the band's expansion within ~384 KB (at least 1).
  int64_t bandRowsFor(const WindowGeometry& g) const;
  /// The expansion bytes per image from which runBatch goes by bands (QS_EXPAND_DW_MIN_KB overrides; tests).
  static int64_t minBandedBytes();

 private:
  ExpandDepthwiseBlocked() = default;
  bool banded(int64_t N, const WindowGeometry& g) const;  // runBatch by bands, not apart
  std::unique_ptr<Conv1x1Blocked> m_expand;
  std::unique_ptr<DepthwiseBlocked> m_dw;
};

/// The kernel of BlockedExpandDepthwise: inputs X (nChw16c), W1, B1, Wd, Bd (constant; a bias may be omitted);
/// attributes of the depthwise Conv (kernel_shape, strides, pads, dilations, group, activations,
/// activation_params), the 1x1's activations as expand_activations / expand_activation_params, block (16).
Result<std::unique_ptr<Kernel>> createBlockedExpandDepthwise(const KernelInit& init);

}  // namespace qs
