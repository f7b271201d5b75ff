// Pooling (ai.onnx opsets 1..21): MaxPool (float32/float64/int8/uint8, optional Indices),
// AveragePool (float32/float64), GlobalAveragePool, GlobalMaxPool (float32/float64).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

/// MaxPool: kernel_shape, strides, pads, auto_pad, dilations (8+), ceil_mode (10+),
/// storage_order (8+); optional int64 Indices output.
Result<std::unique_ptr<Kernel>> createMaxPool(const KernelInit& init);
/// AveragePool: kernel_shape, strides, pads, auto_pad, count_include_pad (7+), ceil_mode (10+),
/// dilations (19+).
Result<std::unique_ptr<Kernel>> createAveragePool(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createGlobalAveragePool(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createGlobalMaxPool(const KernelInit& init);

}  // namespace qs
