// The precision of the parts of a model left out of INT8/FP8 (ModelOpt's --high_precision_dtype):
// fp32 (nothing changes), fp16 or bf16. With fp16/bf16 the float part of quantized.onnx is written
// in that type (graph inputs and outputs stay float32 through Cast nodes), and the analysis rounds
// what ONNX Runtime's CPU provider holds in it: graph inputs, weights and other constants, Q/DQ
// scales, QuantizeLinear inputs and dequantized weights; node outputs stay float32 as ORT computes
// them (core/analysis/high_precision_sim.cpp).
#pragma once

#include <string>
#include <string_view>

#include "core/ir/tensor.h"
#include "core/util/status.h"

namespace qs {

enum class HighPrecision { Fp32, Fp16, Bf16 };

/// "fp32", "fp16" or "bf16".
const char* highPrecisionName(HighPrecision p);
/// Parses fp32, fp16 or bf16 (float32, float16, bfloat16 too); InvalidArgument naming the flag
/// and the value otherwise.
Status parseHighPrecision(const std::string& name, HighPrecision& out);

/// `x` rounded to nearest even in `p` and back to float (fp32: x itself). Values beyond fp16's
/// range become infinities, as a Cast to float16 makes them.
float roundToHighPrecision(float x, HighPrecision p);
/// A scale rounded as roundToHighPrecision, but never to zero or infinity (the smallest or
/// largest finite value instead): a Q/DQ scale must stay positive and finite.
float roundScale(float scale, HighPrecision p);
/// Rounds every element of a float32 tensor in place (other dtypes are left as they are). The
/// tensor must own its buffer alone.
void roundInPlace(Tensor& t, HighPrecision p);

/// Inputs the ONNX operator set types as float32 only (Resize's and Upsample's scales), which
/// stay float32 in a float16 model and are not rounded in the analysis.
bool keepsFloat32Input(std::string_view opType, size_t inputIndex);

}  // namespace qs
