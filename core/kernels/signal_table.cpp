// Kernel table of the 'signal' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"
#include "core/kernels/integer_ops.h"
#include "core/kernels/linalg.h"
#include "core/kernels/signal.h"

namespace qs {

std::vector<KernelEntry> signalKernels() {
  return {
      {"DFT", "", 17, 21, createDft},  // axis: an attribute up to 19, an input from 20
      {"STFT", "", 17, 21, createStft},
      {"HannWindow", "", 17, 21, createHannWindow},
      {"HammingWindow", "", 17, 21, createHammingWindow},
      {"BlackmanWindow", "", 17, 21, createBlackmanWindow},
      {"MelWeightMatrix", "", 17, 21, createMelWeightMatrix},
      {"Det", "", 11, 21, createDet},
      {"ConvInteger", "", 10, 21, createConvInteger},
      {"MatMulInteger", "", 10, 21, createMatMulInteger},
      {"QLinearConv", "", 10, 21, createQLinearConv},
      {"QLinearMatMul", "", 10, 21, createQLinearMatMul},
  };
}

}  // namespace qs
