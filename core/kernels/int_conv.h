// A quantized Conv node run as an integer Conv (qconv.h): a group-1 Conv, or a ConvTranspose
// whose windows tile its output (kernel == strides, no padding, dilation 1: det's upsampling),
// which is the 1x1 Conv of X with W as [Cout * kh * kw, Cin] ("columns", one row per output
// channel and tap) followed by the permutation of columns to output pixels. The analysis
// (core/analysis/node_paths.h) decides which nodes take this path; this is the arithmetic.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/ir/graph.h"
#include "core/kernels/conv.h"
#include "core/kernels/qconv.h"

namespace qs {

/// A Conv or tiling ConvTranspose with its weights quantized and packed for qconv. Immutable.
struct IntConv {
  std::shared_ptr<const QConvWeights> weights;
  WindowAttrs attrs;
  bool transposed = false;
  int64_t kh = 1, kw = 1;  // transposed: the kernel (== strides)
};

/// `node` (a Conv or ConvTranspose of `g`) with its constant weights W quantized per output
/// channel with `scales` (Conv: W [M, C, k...] and M scales; ConvTranspose: W [Cin, M, kh, kw]
/// and M scales). Null where the integer Conv does not apply: a group other than 1, invalid
/// attributes, a ConvTranspose that does not tile its output, weights qconv refuses (e.g. an
/// all-zero channel, scale 0): the caller then runs the FP32 kernel on fake-quantized inputs.
std::shared_ptr<const IntConv> prepareIntConv(const Node& node, const Graph& g, const Tensor& W,
                                              const std::vector<float>& scales);

/// The node on its untransformed `inputs` (X, W, optional B), X fake-quantized with scale `sx`:
/// what `out` asks for, as qconv computes it (for a ConvTranspose only `full` and the sums of
/// `full`). A reference must hold the node's output element count `referenceElements`. False
/// where it does not apply (X not float or of another rank, a bias of the wrong size, a refused
/// input such as NaN or Inf in X): the caller then runs the FP32 kernel on fake-quantized inputs,
/// which computes or reports it. `threads` bounds the parallelism; results do not depend on it.
bool runIntConv(const IntConv& ic, float sx, std::span<const Tensor* const> inputs, int threads,
                const QConvOutputs& out, int64_t referenceElements = 0);

}  // namespace qs
