// A depthwise Conv (one filter per channel) with its input X fake-quantized, run plane by plane:
// each plane of X is fake-quantized into scratch (never stored whole), convolved with the Conv
// kernel's own plane function (conv.h: depthwiseConvPlane, so the same bits as the node run on
// fake-quantized inputs) and compared with its reference at once, while it is in cache. The
// analysis (core/analysis/node_paths.h) decides which nodes take this path.
#pragma once

#include <span>

#include "core/ir/tensor.h"
#include "core/kernels/conv.h"
#include "core/numeric/metrics.h"
#include "core/numeric/quant_mode.h"

namespace qs {

/// The quantization of one depthwise Conv: X per tensor with `inputScale` in `mode` (INT8 on
/// kActQmin..kActQmax, or FP8), the weights already fake-quantized.
struct DepthwiseQuant {
  const WindowAttrs* attrs = nullptr;        // the node's, group == channels
  float inputScale = 0;                      // X's scale
  QuantMode mode = QuantMode::Int8;
  const Tensor* quantizedWeights = nullptr;  // W fake-quantized, W's shape
  int threads = 1;                           // planes side by side; results do not depend on it
};

/// The node on its untransformed `inputs` (X, W, optional B). With `y`: the quantized node (both
/// points) into *y, and with `ref`, sums[0] (if set) its sums against ref. Without: the
/// layer-wise runs against `ref`, nothing stored: sums[0..2] = both points, activations only
/// (X quantized, W float), weights only (X float, W quantized), each skipped where null. Sums
/// are per plane, merged in plane order. False where it does not apply (dtypes, shapes the Conv
/// kernel would refuse, a reference of the wrong size): the caller then runs the node.
bool depthwisePlanes(const DepthwiseQuant& dq, std::span<const Tensor* const> inputs, Tensor* y, const Tensor* ref,
                     ErrorAccumulator* const sums[3]);

}  // namespace qs
