// Kernel table of the 'elementwise' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"

namespace qs {

std::vector<KernelEntry> elementwiseKernels() {
  return {};
}

}  // namespace qs
