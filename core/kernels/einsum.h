// Einsum (ai.onnx opsets 12..21), float32 and float64.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

/// Einsum: parses the equation once (explicit "->" or implicit output, "..." broadcasting,
/// repeated labels = diagonals). Operands are reduced pairwise left to right; each pair is
/// permuted to a batched matrix product [batch, M, K] x [batch, K, N] on sgemm.
Result<std::unique_ptr<Kernel>> createEinsum(const KernelInit& init);

}  // namespace qs
