// Kernel table of the 'recurrent' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"
#include "core/kernels/recurrent.h"

namespace qs {

std::vector<KernelEntry> recurrentKernels() {
  return {
      // Opset 7 dropped output_sequence; 14 added layout (the kernels read it from any opset and
      // refuse a batch-first layout before 14).
      {"LSTM", "", 7, 21, createLstm},
      {"GRU", "", 7, 21, createGru},
      {"RNN", "", 7, 21, createRnn},
  };
}

}  // namespace qs
