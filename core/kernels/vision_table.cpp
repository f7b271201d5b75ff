// Kernel table of the 'vision' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"

namespace qs {

std::vector<KernelEntry> visionKernels() {
  return {
  };
}

}  // namespace qs
