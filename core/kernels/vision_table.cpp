// Kernel table of the 'vision' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"
#include "core/kernels/vision.h"

namespace qs {

std::vector<KernelEntry> visionKernels() {
  return {
      {"NonMaxSuppression", "", 10, 21, createNonMaxSuppression},
      {"RoiAlign", "", 10, 21, createRoiAlign},
      {"GridSample", "", 16, 21, createGridSample},
  };
}

}  // namespace qs
