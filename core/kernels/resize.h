// Resize (ai.onnx opsets 10..21) and Upsample (opsets 7..9).
//
// Resize-10: inputs (X, scales); modes nearest / linear; asymmetric coordinates, nearest picks
// floor when upsampling and ceil when downsampling (onnxruntime's rule for opset 10).
// Resize-11+: inputs (X, roi, scales, sizes), exactly one of scales / sizes non-empty; modes
// nearest (nearest_mode round_prefer_floor, round_prefer_ceil, floor, ceil), linear and cubic
// (cubic_coeff_a, exclude_outside), all n-dimensional and separable; every
// coordinate_transformation_mode (half_pixel, half_pixel_symmetric, pytorch_half_pixel,
// align_corners, asymmetric, tf_half_pixel_for_nn, tf_crop_and_resize with
// extrapolation_value); opset 18+: antialias (linear / cubic), axes, keep_aspect_ratio_policy.
// Coordinates follow the ONNX reference implementation (onnx.reference op_resize).
// Upsample-7: 'scales' attribute; Upsample-9: 'scales' input; modes nearest / linear
// (asymmetric, like Resize-10).
// Dtypes: nearest works on any fixed-size dtype (float, int8, uint8, ...); linear / cubic on
// float and double natively and on int8 / uint8 / int32 / int64 through float/double
// (truncated and saturated back, like the reference's astype).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createResize(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createUpsample(const KernelInit& init);

}  // namespace qs
