// Kernel table of the 'reduce' group: one row per (op, opset range).
// Reductions accept both the attribute and the input form of 'axes' and branch at run time;
// Upsample and Resize branch on init.opset in their factories.
#include "core/exec/kernel_registry.h"
#include "core/kernels/reduce.h"
#include "core/kernels/resize.h"

namespace qs {

std::vector<KernelEntry> reduceKernels() {
  return {
      {"ReduceMean", "", 1, 21, createReduceMean},
      {"ReduceSum", "", 1, 21, createReduceSum},
      {"ReduceMax", "", 1, 21, createReduceMax},
      {"ReduceMin", "", 1, 21, createReduceMin},
      {"ReduceProd", "", 1, 21, createReduceProd},
      {"ReduceL1", "", 1, 21, createReduceL1},
      {"ReduceL2", "", 1, 21, createReduceL2},
      {"ReduceSumSquare", "", 1, 21, createReduceSumSquare},
      {"ReduceLogSumExp", "", 1, 21, createReduceLogSumExp},
      {"ReduceLogSum", "", 1, 21, createReduceLogSum},
      {"ArgMax", "", 1, 21, createArgMax},
      {"ArgMin", "", 1, 21, createArgMin},
      {"Upsample", "", 7, 9, createUpsample},
      {"Resize", "", 10, 21, createResize},
  };
}

}  // namespace qs
