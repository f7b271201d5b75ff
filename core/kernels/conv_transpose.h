// ConvTranspose (ai.onnx opsets 1..21, FP32): GEMM + col2im over 1-D..3-D spatial shapes.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

/// ConvTranspose: X [N, C, in...], W [C, M/group, k...], optional B [M]; attributes group,
/// dilations, strides, pads, auto_pad, output_padding, output_shape, kernel_shape.
Result<std::unique_ptr<Kernel>> createConvTranspose(const KernelInit& init);

}  // namespace qs
