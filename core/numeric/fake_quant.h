// Fake quantization bit-identical to ONNX QuantizeLinear followed by DequantizeLinear with a
// zero point of 0 (reference section 1): q = saturate(round_half_to_even(x / scale)),
// y = q * scale, computed in float32 as ONNX Runtime does (a division, not a reciprocal
// multiply), so that the exported quantized.onnx reproduces what the workbench predicted.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ir/tensor.h"
#include "core/numeric/quant_mode.h"

namespace qs {

/// INT8 range of activations and weights (TensorRT: activations [-128,127], weights [-127,127]).
constexpr int kActQmin = -128, kActQmax = 127;
constexpr int kWeightQmin = -127, kWeightQmax = 127;
/// Largest finite FLOAT8E4M3FN value.
constexpr float kFp8E4M3Max = 448.f;

/// y[i] = clamp(rne(x[i] / scale), qmin, qmax) * scale. `x` and `y` may alias.
void fakeQuantInt8(const float* x, float* y, int64_t n, float scale, int qmin, int qmax);

/// Rounds v to the nearest FLOAT8E4M3FN value (ties to even), saturating to +-448.
float roundToFp8E4M3(float v);
/// y[i] = roundToFp8E4M3(x[i] / scale) * scale.
void fakeQuantFp8(const float* x, float* y, int64_t n, float scale);
/// The FLOAT8E4M3FN byte (ONNX TensorProto data type 17) of roundToFp8E4M3(v): 1 sign bit,
/// 4 exponent bits (bias 7), 3 mantissa bits; NaN is 0x7F (sign kept).
uint8_t fp8E4M3Bits(float v);
/// The value of a FLOAT8E4M3FN byte (0x7F and 0xFF are NaN).
float fp8E4M3Value(uint8_t bits);

/// Fake-quantizes a float tensor per tensor (scales.size() == 1) or along `axis`
/// (scales.size() == dim(axis)), returning a new tensor. A large per-tensor case is split over
/// up to `threads` threads (elementwise: the result does not depend on it).
Tensor fakeQuantize(const Tensor& x, const std::vector<float>& scales, int axis, QuantMode mode, int qmin, int qmax,
                    int threads = 1);

}  // namespace qs
