// A quantized Conv node run as an integer Conv (qconv.h): a group-1 Conv, or a ConvTranspose
// whose windows tile its output (kernel == strides, no padding, dilation 1: det's upsampling),
// which is the 1x1 Conv of X with W as [Cout * kh * kw, Cin] ("columns", one row per output
// channel and tap) followed by the permutation of columns to output pixels, or a 2-D depthwise
// Conv where qconvDepthwise has its VNNI kernel (qconv_depthwise.h). The analysis
// (core/analysis/node_paths.h) decides which nodes take this path; this is the arithmetic.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/ir/graph.h"
#include "core/kernels/conv.h"
#include "core/kernels/qconv.h"
#include "core/kernels/qconv_depthwise.h"

namespace qs {

/// A Conv or tiling ConvTranspose with its weights quantized and packed for qconv, or a
/// depthwise Conv with its weights for qconvDepthwise (then `weights` is null). Immutable.
struct IntConv {
  std::shared_ptr<const QConvWeights> weights;
  std::shared_ptr<const QDepthwiseWeights> depthwise;
  WindowAttrs attrs;
  bool transposed = false;
  int64_t kh = 1, kw = 1;  // transposed: the kernel (== strides)
};

/// `node` (a Conv or ConvTranspose of `g`) with its constant weights W quantized per output
/// channel with `scales` (Conv: W [M, C, k...] and M scales; ConvTranspose: W [Cin, M, kh, kw]
/// and M scales; depthwise Conv: W [C, 1, KH, KW], group C and C scales, only where
/// qconvDepthwiseFast()). Null where the integer Conv does not apply: another group, invalid
/// attributes, a ConvTranspose that does not tile its output, weights qconv refuses (e.g. an
/// all-zero channel, scale 0): the caller then runs the FP32 kernel on fake-quantized inputs.
std::shared_ptr<const IntConv> prepareIntConv(const Node& node, const Graph& g, const Tensor& W,
                                              const std::vector<float>& scales);

/// The node on its untransformed `inputs` (X, W, optional B), X fake-quantized with scale `sx`:
/// what `out` asks for, as qconv computes it (for a ConvTranspose only `full` and the sums of
/// `full`; for a depthwise Conv, qconvDepthwise: `full` and the sums of `full`). A reference must hold the node's output element count `referenceElements`. False
/// where it does not apply (X not float or of another rank, a bias of the wrong size, a refused
/// input such as NaN or Inf in X): the caller then runs the FP32 kernel on fake-quantized inputs,
/// which computes or reports it. `threads` bounds the parallelism; results do not depend on it.
bool runIntConv(const IntConv& ic, float sx, std::span<const Tensor* const> inputs, int threads,
                const QConvOutputs& out, int64_t referenceElements = 0);

}  // namespace qs
