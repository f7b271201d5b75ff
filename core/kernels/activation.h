// Unary elementwise ops and activations of the 'elementwise' group.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

// One factory for every unary op, branching on the op type (opset ranges in the table):
// Relu 6..21 (int types from 14), LeakyRelu 6..21 (alpha), Elu 6..21 (alpha), Selu 6..21
// (alpha, gamma), Sigmoid 6..21, HardSigmoid 6..21 (alpha, beta), HardSwish 14..21, Tanh 6..21,
// Softplus 1..21, Softsign 1..21, Erf 9..21, Gelu 20..21 (approximate "none" | "tanh"), Exp, Log,
// Sqrt, Reciprocal, Neg, Abs, Floor, Ceil 6..21, Round 11..21 (half to even), Sign 9..21, Not 1..21,
// Sin, Cos, Tan, Asin, Acos, Atan 7..21, Sinh, Cosh, Asinh, Acosh, Atanh 9..21, ThresholdedRelu 10..21,
// Celu 12..21, Shrink 9..21, Mish 18..21, IsNaN 9..21, IsInf 10..21 (bool outputs).
// float16/bfloat16 are computed in float32.
Result<std::unique_ptr<Kernel>> createUnary(const KernelInit& init);
// Clip 6..10 (attributes min/max), 11..21 (optional inputs min/max; integer types from 12).
Result<std::unique_ptr<Kernel>> createClip(const KernelInit& init);

}  // namespace qs
