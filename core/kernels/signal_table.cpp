// Kernel table of the 'signal' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"

namespace qs {

std::vector<KernelEntry> signalKernels() {
  return {
  };
}

}  // namespace qs
