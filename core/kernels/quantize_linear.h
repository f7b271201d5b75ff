// QuantizeLinear and DequantizeLinear.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

// QuantizeLinear 10..21: y = saturate(round_half_even(x / scale) + zero_point).
//   10: per-tensor; 13+: per-axis along `axis` (default 1) when scale is 1-D with more than one
//   element; 19+: `saturate` (float8 only); 21: `output_dtype` (used when zero_point is absent);
//   block_size != 0 is reported unsupported at load time. Outputs: uint8 (default), int8,
//   uint16, int16, float8e4m3fn (RNE, saturating to +-448 unless saturate=0).
Result<std::unique_ptr<Kernel>> createQuantizeLinear(const KernelInit& init);
// DequantizeLinear 10..21: y = (x - zero_point) * scale, same per-tensor / per-axis rules.
//   Inputs: int8, uint8, int16, uint16, int32, float8e4m3fn; the output has the scale's dtype.
Result<std::unique_ptr<Kernel>> createDequantizeLinear(const KernelInit& init);
// DynamicQuantizeLinear 11..21: uint8 asymmetric quantization of a float tensor over the range
//   [min(0, min(x)), max(0, max(x))]; outputs y, y_scale, y_zero_point.
Result<std::unique_ptr<Kernel>> createDynamicQuantizeLinear(const KernelInit& init);

}  // namespace qs
