// Pad (ONNX opsets 2..21): pads/value attributes < 11; pads/constant_value inputs >= 11; axes input >= 18;
// modes constant, reflect, edge, wrap (wrap from 19).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createPad(const KernelInit& init);

}  // namespace qs
