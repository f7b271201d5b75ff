// ai.quantscope FusedMatMul (opset 1): a MatMul with the transformer nodes around it absorbed by
// the executor's graph rewrites (core/exec/graph_rewrites.h), FP32, on sgemm:
//   Y = permY( act( alpha * permA(A) @ permB(B) + bias ) ), or with softmax:
//   Y = Softmax_last_axis( alpha * permA(A) @ permB(B) + bias + addend )
// - perm_a / perm_b (ints, optional): a Transpose applied to the operand first. Folded into the
//   GEMM's leading dimensions and transpose flags: the operand's last input dim must end up as
//   one of the last two dims (the rows or the columns of the matrix).
// - alpha (float, default 1): a Div / Mul by a scalar constant after the product.
// - input 2, bias (optional): [N] (or [1, ..., 1, N]) added to every row.
// - activation (string, optional): "Gelu" (x * 0.5 * (1 + erf(x / sqrt 2))).
// - perm_y (ints, optional): a Transpose of the result that keeps the last dim last; the GEMM
//   writes its rows straight into the transposed layout.
// - softmax (int, default 0): a Softmax over the last axis of the result (attention's scores),
//   after input 3, the addend (optional: the attention mask or a position bias), which broadcasts
//   into the product without growing it. Not with activation or perm_y. Applied per product (a
//   head) once its rows are complete, while they are in cache; the Add and Softmax kernels' bits.
// Bias and activation are applied per block of C while it is in cache.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

inline constexpr const char* kFusedMatMulOp = "FusedMatMul";

/// True when a Transpose `perm` of an operand can be folded into the GEMM (see above).
bool matMulOperandPermFoldable(const std::vector<int64_t>& perm);
/// True when a Transpose `perm` of the MatMul's result can be folded (keeps the last dim last).
bool matMulResultPermFoldable(const std::vector<int64_t>& perm);

Result<std::unique_ptr<Kernel>> createFusedMatMul(const KernelInit& init);

}  // namespace qs
