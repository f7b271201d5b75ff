// Kernel table of the 'reduce' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"

namespace qs {

std::vector<KernelEntry> reduceKernels() {
  return {};
}

}  // namespace qs
