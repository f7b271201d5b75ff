// Concat (ONNX opsets 1..21) and Split (2..21: `split` attribute < 13, input >= 13, num_outputs >= 18).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createConcat(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createSplit(const KernelInit& init);

}  // namespace qs
