// Softmax, LogSoftmax and Hardmax.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

// Softmax, LogSoftmax 1..12: the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])]
// (axis default 1); 13..21: normalised along the single axis `axis` (default -1).
// float, double; float16/bfloat16 computed in float32.
Result<std::unique_ptr<Kernel>> createSoftmax(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createLogSoftmax(const KernelInit& init);
// Hardmax 1..21: 1 at the first maximum along the axis (same axis rules), 0 elsewhere.
Result<std::unique_ptr<Kernel>> createHardmax(const KernelInit& init);

/// Softmax of one contiguous float row of length L (y may not alias x): the maximum, then
/// exp (the Cephes polynomial Eigen and MLAS use) stored and summed in one pass, then the scale;
/// the row's tail in masked vectors, not scalar code (swin's rows are 49 long). Entries below
/// the maximum by more than ~87 (masked scores, -inf) give exactly 0; a NaN gives NaN.
/// Runs softmaxRowFloatAvx512 where the CPU has AVX-512F/DQ (QS_SOFTMAX=avx2 forces the AVX2 row).
void softmaxRowFloat(const float* x, float* y, int64_t L);
/// The AVX2 row (8 lanes).
void softmaxRowFloatAvx2(const float* x, float* y, int64_t L);
/// The same row 16 lanes wide, with the AVX2 row's bits: the same exp lane by lane, and the sum
/// taken in the AVX2 row's order. Only where softmaxAvx512Available().
void softmaxRowFloatAvx512(const float* x, float* y, int64_t L);
/// The row the Softmax kernel runs on a float row over the last axis: softmaxRowFloat, or Eigen's
/// row under QS_SOFTMAX=eigen. For kernels that fuse a Softmax (FusedMatMul) and must give its bits.
void softmaxRowAsKernel(const float* x, float* y, int64_t L);
/// Whether the CPU has AVX-512F and DQ (asked once per process).
bool softmaxAvx512Available();

}  // namespace qs
