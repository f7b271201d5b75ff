// Gemm (ai.onnx opsets 1..21) and MatMul (opsets 1..21), FP32, both on sgemm.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

/// Gemm: Y = alpha * op(A) * op(B) + beta * C; transA, transB, alpha, beta; C optional from
/// opset 11, unidirectionally broadcast to [M, N].
Result<std::unique_ptr<Kernel>> createGemm(const KernelInit& init);

/// MatMul: numpy matmul semantics (batched, broadcast batch dims, 1-D operands).
Result<std::unique_ptr<Kernel>> createMatMul(const KernelInit& init);

}  // namespace qs
