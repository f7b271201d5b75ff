// INT4 weight-only quantization of MatMul/Gemm weights (reference section "INT4
// in ONNX"; ModelOpt's modelopt/onnx/quantization/int4.py): symmetric int4 in
// [-8, 7], blocked along the reduction axis K of a weight W [K, N], one float
// scale per (block, column):
//
//   scale[b, n] = clip[b, n] * max_{k in block b} |W[k, n]| / 7 (ModelOpt's
//   INT4_SCALE = 7) q[k, n]     = clamp(round_half_even(W[k, n] / scale[b, n]),
//   -8, 7)   (0 where the scale is 0) W'[k, n]    = float(q[k, n]) * scale[b,
//   n]                        (what DequantizeLinear computes)
//
// When block does not divide K the last block is shorter (ModelOpt pads it with
// zeros, which gives the same amax; DequantizeLinear's scale has ceil(K /
// block) rows). The math here is plain loops; the searches that pick clip
// ratios and AWQ scales live in core/analysis/int4_analysis.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/util/status.h"

namespace qs {

/// ModelOpt's int4 calibration methods (its names).
enum class Int4Method { RtnDq, AwqLite, AwqClip };

std::string int4MethodName(Int4Method m); // "rtn_dq", "awq_lite", "awq_clip"
/// Parses a method name; InvalidArgument "--calibration-method 'x': expected
/// rtn_dq, awq_lite or awq_clip for --quantize-mode int4".
Status parseInt4Method(const std::string &s, Int4Method &out);
/// InvalidArgument unless `block` is a power of two >= 16: "--block-size 48:
/// expected a power of two >= 16 (16, 32, 64, 128, ...)".
Status checkInt4BlockSize(int64_t block);

/// One weight [K, N] (K = reduction axis) in int4: values row-major [K, N],
/// scales row-major [ceil(K / block), N].
struct Int4Weight {
  int64_t k = 0, n = 0, block = 0;
  std::vector<int8_t> q;    // K * N values in [-8, 7]
  std::vector<float> scale; // blocks() * N
  int64_t blocks() const { return (k + block - 1) / block; }
};

/// Quantizes `w` ([K, N] row-major) with per-(block, column) clip ratios `clip`
/// (blocks * N, or nullptr for 1). Returns the scales and values as defined at
/// the top of this file.
Int4Weight quantizeInt4(const float *w, int64_t k, int64_t n, int64_t block,
                        const float *clip = nullptr);

/// W' = q * scale, [K, N] row-major, into `out` (K * N floats).
void dequantizeInt4(const Int4Weight &w, float *out);

/// ONNX INT4 packing: two values per byte, element 2i in the low nibble, 2i+1
/// in the high nibble (two's complement nibbles); an odd count leaves the last
/// high nibble 0.
std::vector<uint8_t> packInt4(const std::vector<int8_t> &values);
/// The inverse of packInt4 for `count` values.
std::vector<int8_t> unpackInt4(const std::vector<uint8_t> &packed,
                               size_t count);

} // namespace qs
