// Kernel table of the 'recurrent' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"

namespace qs {

std::vector<KernelEntry> recurrentKernels() {
  return {
  };
}

}  // namespace qs
