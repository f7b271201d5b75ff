// ai.quantscope UpsampleConcat (opset 1), made by the graph rewrites (core/exec/graph_rewrites.h) from
// PP-OCR det's neck: a Concat along the channels of rank-4 tensors, some of them the outputs of Resize
// nearest by whole factors (asymmetric coordinates, floor) that only the Concat reads (det's Concat.0 of
// three FPN maps upsampled 8x, 4x and 2x and one at full size, 96 x 160 x 160 at 640 x 640). Each input
// is upsampled while it is copied into its channels of the output, so the Resizes' outputs (3 x 2.4 MB)
// are never written nor read back. Values are copied, never computed: the same bits as the nodes.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

inline constexpr const char* kUpsampleConcatOp = "UpsampleConcat";

/// Inputs X0..Xk-1 (float, rank 4, [N, Ci, H / fhi, W / fwi]); attribute "upsample" [fh0, fw0, fh1, fw1, ...]
/// (whole factors >= 1, two per input). Y [N, sum Ci, H, W] with Y[n, c0(i) + c, h, w] = Xi[n, c, h / fhi,
/// w / fwi]. An input whose upsampled size differs from the others' is an error naming both shapes.
Result<std::unique_ptr<Kernel>> createUpsampleConcat(const KernelInit& init);

}  // namespace qs
