// Kernel table of the 'tensor' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"

namespace qs {

std::vector<KernelEntry> tensorKernels() {
  return {};
}

}  // namespace qs
