// Detection and sampling ops of the 'vision' group:
//   NonMaxSuppression 10..21 (float boxes and scores; selection order as ONNX Runtime's CPU kernel),
//   RoiAlign 10..21 (float/double; coordinate_transformation_mode from 16, ORT's max-mode semantics),
//   GridSample 16..21 (float/double; bilinear/nearest/bicubic at 16, linear/nearest/cubic and N-D from 20).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createNonMaxSuppression(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createRoiAlign(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createGridSample(const KernelInit& init);

}  // namespace qs
