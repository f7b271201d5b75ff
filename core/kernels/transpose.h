// Transpose (ONNX opsets 1..21) and the dtype-generic permutation used by DepthToSpace/SpaceToDepth.
#pragma once

#include <memory>
#include <vector>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createTranspose(const KernelInit& init);

namespace tensorops {
/// Permutes the axes of `x` (out.shape[i] = x.shape[perm[i]]); any fixed-size dtype. `perm` must be a
/// valid permutation of [0, rank). Returns a zero-copy view when the permutation does not move data.
/// Uses ctx's threads when ctx is given.
Tensor transposeTensor(const Tensor& x, const std::vector<int64_t>& perm, const KernelContext* ctx);
}  // namespace tensorops

}  // namespace qs
