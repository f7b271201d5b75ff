// Linear-algebra ops.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

// Det 11..21: X [*, M, M] (float, double, float16, bfloat16) -> [*], the determinant of each
//   matrix by LU factorisation with partial pivoting in double.
Result<std::unique_ptr<Kernel>> createDet(const KernelInit& init);

}  // namespace qs
