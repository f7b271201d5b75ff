// Cast (ai.onnx 6..21) and CastLike (15..21), plus the dtype conversion helpers other kernels use
// (float16 promotion, Pow's mixed types, Q/DQ's float8).
#pragma once

#include <cstdint>
#include <memory>

#include "core/exec/kernel.h"

namespace qs {

/// Cast 6..21: attribute `to`; `saturate` (19+) only affects float8 targets.
Result<std::unique_ptr<Kernel>> createCast(const KernelInit& init);
/// CastLike 15..21: converts input 0 to the dtype of input 1.
Result<std::unique_ptr<Kernel>> createCastLike(const KernelInit& init);

/// True for the dtypes castTensor converts from and to: float, double, float16, bfloat16,
/// (u)int8/16/32/64, bool and float8e4m3fn.
bool castSupported(DType t);

/// Converts `in` to `to` as numpy's astype does (float -> int truncates toward zero, NaN and
/// out-of-range values wrap as on x86; any -> bool is `!= 0`; float16/bfloat16 round to nearest
/// even). Float8E4M3FN: round to nearest even, saturating to +-448 when `saturate`, NaN otherwise.
/// Returns `in` itself (shared buffer) when the dtype already matches. Parallelised when ctx given.
Result<Tensor> castTensor(const Tensor& in, DType to, bool saturate = true, const KernelContext* ctx = nullptr);

/// FLOAT8E4M3FN conversions (bias 7, no infinities, NaN = S.1111.111, max 448).
float float8e4m3fnToFloat(uint8_t b);
uint8_t floatToFloat8e4m3fn(float v, bool saturate);

}  // namespace qs
