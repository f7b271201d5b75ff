// Kernel table of the 'nn' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"

namespace qs {

std::vector<KernelEntry> nnKernels() {
  return {};
}

}  // namespace qs
