// Kernel table of the 'vision' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"
#include "core/kernels/misc_ops.h"
#include "core/kernels/vision.h"

namespace qs {

std::vector<KernelEntry> visionKernels() {
  return {
      {"NonMaxSuppression", "", 10, 21, createNonMaxSuppression},
      {"RoiAlign", "", 10, 21, createRoiAlign},
      {"GridSample", "", 16, 21, createGridSample},
      {"Trilu", "", 14, 21, createTrilu},
      {"EyeLike", "", 9, 21, createEyeLike},
      {"Compress", "", 9, 21, createCompress},
      {"ReverseSequence", "", 10, 21, createReverseSequence},
      {"Unique", "", 11, 21, createUnique},
      {"MaxUnpool", "", 9, 21, createMaxUnpool},
      {"LRN", "", 1, 21, createLrn},
      {"MeanVarianceNormalization", "", 9, 21, createMeanVarianceNormalization},
  };
}

}  // namespace qs
