// oneDNN's convolution as a backend of the Conv kernel (core/kernels/conv.cpp) for the 2-D shapes
// where it measured faster than ours (issue 13; docs/performance.md, "Conv backends (issue 13)").
// Built only where libdnnl-dev is found (QS_HAVE_DNNL); without it every shape runs our kernel.
//
// Threads: oneDNN's own OpenMP team collapses on a loaded machine (measured: ~36 ms for a 0.1 ms
// conv), so each primitive is created and run single-threaded, and the work is cut into tasks
// (groups of images x output-channel slices) run on our pool (core/exec/parallel.h): output
// channels are sliced when there are fewer images than hardware threads, images are grouped (up
// to 4 per primitive, so that each weight loaded serves several images) when there are at least
// twice as many. Slices and groups depend on the shape and the machine's hardware threads only,
// not on the thread count of a run, so results do not depend on the thread count.
//
// Kernel: oneDNN's direct convolution, except 3x3 convs of stride 1 in nChw16c with outputs of at
// least 28x28 and 32+ output channels (14x14 and 128+), which run its Winograd F(4x4, 3x3) kernel
// on AVX-512 CPUs (one image a task, so each image keeps its bits at any batch; QS_WINOGRAD=0 turns
// it off), and the blocked 1x1s without pads (any stride) in nChw16c on AVX-512 CPUs, which run our kernel
// (core/kernels/conv1x1_blocked.h: pixel ranges at batch 1 instead of output-channel slices, one summation
// order for any range; QS_CONV1X1=dnnl keeps jit_1x1; QS_CONV_KXK=s2 or all gives it the strided or all
// larger filters outside the Winograd rule too).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/kernels/conv.h"

namespace qs {

class DnnlConv {
 public:
  /// Whether this build has oneDNN.
  static bool available();
  /// The measured rule: true when oneDNN is the faster backend for a 2-D Conv with C input and M
  /// output channels, `group` groups and geometry g (docs/performance.md, "Conv backends").
  static bool preferred(int64_t C, int64_t M, int64_t group, const WindowGeometry& g);
  /// Prepares for constant weights W [M, C/group, kH, kW] (copied into oneDNN's layout per input
  /// shape, on first use), bias B [M] (nullptr: none) and the fused activations. nullptr when this
  /// build has no oneDNN or W is not a 2-D float filter.
  static std::unique_ptr<DnnlConv> create(const Tensor& W, const Tensor* B, int64_t group,
                                          std::vector<FusedActivation> activations);
  /// The blocked-layout form (core/kernels/blocked_layout.h): x and y are oneDNN's nChw8c or
  /// nChw16c, [N, ceil(C/block), H, W, block] (block 8 or 16; W [M, C/group, kH, kW] with `group` 1
  /// or depthwise (group == C == M), C and M multiples of 8, a tail padded to the block; or groups of
  /// whole blocks of channels in and out; the forms oneDNN's blocked kernels take:
  /// blockedShapeSupported). The pad lanes of x must be finite (they meet zero weights). With
  /// `residual`, run's `residual` (blocked, y's shape) is added to conv(x) + B (oneDNN's binary-add
  /// post-op, reading it in place; its sum post-op on a copy for the Winograd kernel, which has no
  /// binary one), then Relu when `reluAfterResidual`; `activations` must then be empty. With
  /// `plainInput`, x is plain NCHW instead (a stem: fewer than 8 input channels, group 1, M a
  /// multiple of the block: plainInputSupported) and only y is blocked, so a region can start at
  /// the image. nullptr as create, and for another block or form.
  static std::unique_ptr<DnnlConv> createBlocked(const Tensor& W, const Tensor* B, int64_t group,
                                                 std::vector<FusedActivation> activations, bool residual,
                                                 bool reluAfterResidual, int block = 8, bool plainInput = false);
  /// Whether createBlocked takes a conv of C input and M output channels in `group` groups in the
  /// layout of `block` (8 or 16) channels per block.
  static bool blockedShapeSupported(int64_t C, int64_t M, int64_t group, int block = 8);
  /// Whether createBlocked takes it with `plainInput`: group 1, 1 to 7 input channels (oneDNN's
  /// kernel for a plain nchw src and a blocked dst, made for RGB stems), M a multiple of `block`.
  static bool plainInputSupported(int64_t C, int64_t M, int64_t group, int block = 8);
  /// The output-channel slices [first, end) that a batch of N images of a conv of C input and M
  /// output channels in `group` groups is cut into, one task per slice and image (or group of
  /// images): enough for `hardwareThreads` at small N (at most 8). `block` 0: the plain layout,
  /// equal slices of whole groups and 8-channel blocks; 8 or 16: the blocked layout, slices of
  /// whole blocks (in and out, and whole groups) as even as the blocks allow, the last one holding
  /// a padded channel tail. A function of the shape and the machine only, so a result does not
  /// depend on the thread count of a run.
  static std::vector<std::pair<int64_t, int64_t>> outputSlices(int64_t N, int64_t C, int64_t M, int64_t group,
                                                                int block, int hardwareThreads);
  /// Bands of output rows [first, end) a batch of N images of a plain-layout (`block` 0), group-1 conv of C
  /// input and M output channels is cut into, one task per band and image: where outputSlices leaves one
  /// slice and there are fewer images than `hardwareThreads`, so that every core takes rows (each band a
  /// primitive over a strided view of its input rows, the conv's padding only at the image's top and
  /// bottom); {0, OH} otherwise. Like the slices, a function of the shape and the machine only.
  static std::vector<std::pair<int64_t, int64_t>> rowBands(int64_t N, int64_t C, int64_t M, int64_t group,
                                                            const WindowGeometry& g, int block, int hardwareThreads);
  /// The threads a run of `threads` hands a conv's tasks to: 1 below ~4 MFLOP (a chunk handed to another
  /// core must be worth it), except a depthwise conv cut into channel slices (`slices` > 1: batch 1), which
  /// forks at any size: its slices read the channels they write, the blocks the conv before it wrote on the
  /// same thread, while on one thread half of its input came from the other core's cache (mobilenet_v2, batch
  /// 1, 2 threads: its 14x14 and 7x7 depthwise convs took 1.5-2.6x their 1-thread time). The slices, and so
  /// the bits, do not change; only which thread runs them.
  static int forkThreads(double flops, bool depthwise, int64_t slices, int threads);
  /// kernelName() of a conv that runs our nChw16c kernel (core/kernels/conv1x1_blocked.h) in place of
  /// oneDNN's: every blocked 1x1 without pads (any stride) in nChw16c whose post-ops it takes, on AVX-512 CPUs
  /// (QS_CONV1X1=dnnl: none); with QS_CONV_KXK=s2 also the strided group-1 filters larger than 1x1 of a
  /// multiple of 16 input channels, with QS_CONV_KXK=all all of them but those of the Winograd rule.
  static constexpr const char* kOwn1x1Name = "qs_conv1x1:nChw16c:avx512";
  /// kernelName() of a conv that runs our nChw16c depthwise kernel (core/kernels/depthwise_blocked.h, jit_dw's bits)
  /// in place of jit_dw: a blocked depthwise conv in nChw16c without a residual, with none, Relu or Clip after it,
  /// dilation 1, below hardware-threads images, on AVX-512 CPUs (QS_DW=dnnl: none).
  static constexpr const char* kOwnDepthwiseName = "qs_depthwise:nChw16c:avx512";
  /// How our depthwise kernel cuts an image of a conv of C channels and geometry g: by output rows when its
  /// input has at least C pixels (where the 1x1 conv that wrote it, C outputs, is cut by pixels:
  /// Conv1x1Blocked::runBatch), else by channel blocks (where that 1x1 is cut by output blocks), so that each core
  /// reads what it wrote. QS_DW_SPLIT=rows|blocks overrides (measurements).
  static bool depthwiseByRows(int64_t C, const WindowGeometry& g);
  /// The channel block of the blocked layout that oneDNN's own kernels use on this CPU: 16 where
  /// it runs AVX-512 convolutions (their native nChw16c; with nChw8c it falls back to its AVX2
  /// kernels), else 8. QS_BLOCK=8 or 16 in the environment overrides it (tests run both). Measured
  /// once per process; 8 without oneDNN.
  static int preferredBlock();
  ~DnnlConv();

  /// y = activations(conv(x) + B), x [N, C, g.in] and y [N, M, g.out] plain NCHW, y allocated by
  /// the caller; on at most `threads` threads of the pool. Primitives are made once per (N, H, W)
  /// and kept (the newest 8). Fails when oneDNN refuses the shape or the run (y may then be
  /// partly written): the caller then computes y itself.
  Status run(const float* x, int64_t N, int64_t C, const WindowGeometry& g, float* y, int threads) const;
  /// run() for a createBlocked backend: x (plain NCHW when made with plainInput), y (and residual,
  /// which must be given exactly when it was created with one) in its blocked layout; nothing is
  /// reordered.
  Status runBlocked(const float* x, int64_t N, int64_t C, const WindowGeometry& g, float* y, const float* residual,
                    int threads) const;
  /// Whether this backend was made by createBlocked.
  bool blocked() const;
  /// The oneDNN kernel that runs N images of C channels and geometry g (its implementation name,
  /// e.g. "jit:avx512_core", "jit_wino_4x3:avx512_core"), making the plan as run() would; empty
  /// without oneDNN or when oneDNN refuses the shape. For tests and diagnostics.
  std::string kernelName(int64_t N, int64_t C, const WindowGeometry& g) const;
  /// Whether a run of N images of C channels and geometry g reads its residual input in place (a
  /// binary-add post-op) rather than copying it into y first (the sum post-op: Winograd kernels);
  /// false without a residual or oneDNN. Makes the plan as run() would. For tests and diagnostics.
  bool residualReadInPlace(int64_t N, int64_t C, const WindowGeometry& g) const;
  /// Bytes of the packed weights that a run of N images of C channels reads from transparent huge pages
  /// (core/kernels/weight_buffer.h: whole 2 MiB pages of buffers from 2 MiB on); 0 where none or off.
  size_t weightBytesOnHugePages(int64_t N, int64_t C, const WindowGeometry& g) const;

 private:
  struct Impl;
  explicit DnnlConv(std::unique_ptr<Impl> impl);
  Status execute(const float* x, int64_t N, int64_t C, const WindowGeometry& g, float* y, const float* residual,
                 int threads) const;
  bool ownKernelFor(int64_t C, const WindowGeometry& g) const;
  bool ownDepthwiseFor(int64_t N, int64_t C, const WindowGeometry& g) const;
  Status executeOwnDepthwise(const float* x, int64_t N, const WindowGeometry& g, float* y, int threads) const;
  Status executeOwn1x1(const float* x, int64_t N, const WindowGeometry& g, float* y, const float* residual,
                       int threads) const;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace qs
