// Normalisations, FP32: BatchNormalization (ai.onnx 1..21; inference, plus training_mode=1
// statistics for opset 14+), InstanceNormalization (1..21), LayerNormalization (17..21),
// LpNormalization (1..21).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createBatchNormalization(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createInstanceNormalization(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createLayerNormalization(const KernelInit& init);
// ai.quantscope SkipLayerNormalization 1 (made by the graph rewrites): Y = LayerNorm(X + Skip) over
// the last axis (inputs X, Skip, Scale, optional B; attribute epsilon); output 1 (optional) X + Skip.
inline constexpr const char* kSkipLayerNormOp = "SkipLayerNormalization";
Result<std::unique_ptr<Kernel>> createSkipLayerNormalization(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createLpNormalization(const KernelInit& init);

}  // namespace qs
