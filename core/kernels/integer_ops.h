// Integer convolution and matrix product ops of the ONNX default domain: the exact int32
// arithmetic of quantized models as exported (uint8 or int8 operands with zero points), as
// opposed to qconv.h, which evaluates the analysis' fake-quantized float Convs in integers.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

// ConvInteger 10..21: y = conv(x - x_zero_point, w - w_zero_point) in int32; x, w uint8 or int8;
//   x_zero_point a scalar, w_zero_point a scalar or one per output channel; Conv's attributes
//   (group, pads, strides, dilations, auto_pad), 1-D to 3-D.
Result<std::unique_ptr<Kernel>> createConvInteger(const KernelInit& init);
// QLinearConv 10..21: the same integer sums plus an optional int32 bias, requantized as
//   saturate(round_half_even(float(acc) * (x_scale * w_scale[m] / y_scale)) + y_zero_point) into
//   y_zero_point's dtype; w_scale and w_zero_point per tensor or per output channel.
Result<std::unique_ptr<Kernel>> createQLinearConv(const KernelInit& init);
// MatMulInteger 10..21: numpy matmul of (A - a_zero_point) and (B - b_zero_point) in int32;
//   a_zero_point per tensor or per row of A, b_zero_point per tensor or per column of B.
Result<std::unique_ptr<Kernel>> createMatMulInteger(const KernelInit& init);
// QLinearMatMul 10..21: MatMulInteger's sums requantized with a_scale (per tensor or row),
//   b_scale (per tensor or column) and y_scale / y_zero_point (per tensor or row); uint8 / int8.
Result<std::unique_ptr<Kernel>> createQLinearMatMul(const KernelInit& init);

}  // namespace qs
