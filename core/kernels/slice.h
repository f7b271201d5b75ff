// Slice (ONNX opsets 1..21: starts/ends/axes attributes < 10; starts/ends/axes/steps inputs >= 10).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createSlice(const KernelInit& init);

}  // namespace qs
