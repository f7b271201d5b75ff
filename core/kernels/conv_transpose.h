// ConvTranspose (ai.onnx opsets 1..21, FP32): GEMM + col2im over 1-D..3-D spatial shapes; 2-D 2x2 windows of
// stride 2 (upsampling heads) directly, the same bits. ai.quantscope FusedConvTranspose (opset 1): the same
// with the "activations" / "activation_params" of FusedConv (conv.h) applied to its output, made by the
// graph rewrites (core/exec/graph_rewrites.h); kFusedConvTransposeOp in conv.h.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

/// ConvTranspose: X [N, C, in...], W [C, M/group, k...], optional B [M]; attributes group,
/// dilations, strides, pads, auto_pad, output_padding, output_shape, kernel_shape. A constant W of 2x2
/// windows is repacked once here for the direct kernel.
Result<std::unique_ptr<Kernel>> createConvTranspose(const KernelInit& init);

}  // namespace qs
