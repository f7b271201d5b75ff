// Which nodes a float16 model keeps in float32 (ModelOpt's AutoCast rule for initializers, reference
// section 7): normalisation and elementwise nodes whose float constants exceed float16's range
// (PP-OCRv4 det's first BatchNormalization has running variances up to 9.8e7, which float16 makes
// infinite and the whole output zero). Such a node reads its constants in float32 and its
// activations cast to float32; its outputs are cast back to float16. Shared by the analysis
// (high_precision_sim.cpp) and the export (high_precision_export.cpp) so both keep the same nodes.
#pragma once

#include <string_view>

#include "core/quant/high_precision.h"

namespace qs {

/// Largest finite float16.
inline constexpr float kFloat16Max = 65504.f;

/// Whether an `opType` node whose float constant inputs reach `constantAbsMax` stays float32 under `p`
/// (fp16 only: bfloat16 has float32's range).
inline bool keptInFloat32(std::string_view opType, float constantAbsMax, HighPrecision p) {
  if (p != HighPrecision::Fp16 || !(constantAbsMax > kFloat16Max)) return false;
  return opType == "BatchNormalization" || opType == "InstanceNormalization" || opType == "LayerNormalization" ||
         opType == "Add" || opType == "Sub" || opType == "Mul" || opType == "Div";
}

/// Whether ONNX Runtime's CPU provider (1.30, x86) has a float16 kernel for `opType` among the ops a
/// float part can hold: data movement, Clip, Max and Min (measured: a Cast to float16, the op, a
/// QuantizeLinear, run with optimizations disabled and the optimized model written out; every other
/// op of a model, arithmetic, pooling, normalization, Pad, Tile, DepthToSpace, got Casts to float32
/// around it). QuantizeLinear, DequantizeLinear and Cast have float16 kernels too; they are the
/// export's own nodes and handled where the analysis models them (high_precision_sim.cpp).
inline bool ortCpuHasFloat16Kernel(std::string_view opType) {
  return opType == "Reshape" || opType == "Transpose" || opType == "Flatten" || opType == "Squeeze" ||
         opType == "Unsqueeze" || opType == "Slice" || opType == "Identity" || opType == "Split" ||
         opType == "Expand" || opType == "Gather" || opType == "GatherElements" || opType == "Concat" ||
         opType == "Clip" || opType == "Max" || opType == "Min";
}

}  // namespace qs
