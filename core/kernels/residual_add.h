// ai.quantscope ResidualAdd (opset 1), made by the graph rewrites (core/exec/graph_rewrites.h) from the
// additions of PP-OCR det's neck: a squeeze-excitation residual Add(X, Mul(X, S)) with S [N, C, 1, 1], and
// an FPN top-down Add(A, Resize(U)) with Resize nearest by whole factors; both in one pass where the first
// feeds the second. Y = X + X * S (when S is given), then + U upsampled (when U is given): each element
// through the same float operations as the Mul, Add and Resize kernels, so the same bits.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

inline constexpr const char* kResidualAddOp = "ResidualAdd";

/// Inputs X (float), optional S, optional U; attribute "upsample" [fh, fw] (whole factors of U's last
/// two dims, required with U). Y = (X + X * S) + U[..., h / fh, w / fw]; numpy broadcasting as the
/// original nodes, in one pass over rank-4 X, S [1 or N, 1 or C, 1, 1] and U [N, C, H / fh, W / fw].
Result<std::unique_ptr<Kernel>> createResidualAdd(const KernelInit& init);

}  // namespace qs
