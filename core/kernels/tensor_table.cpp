// Kernel table of the 'tensor' group: one row per (op, opset range). Factories branch on init.opset
// where the attribute/input forms differ (Slice < 10, Split < 13 / >= 18, Squeeze/Unsqueeze < 13,
// Pad < 11 / >= 18, Reshape allowzero >= 14, TopK < 10 / >= 11, Shape start/end >= 15, Dropout < 12).
#include "core/exec/kernel_registry.h"
#include "core/kernels/concat_split.h"
#include "core/kernels/gather_scatter.h"
#include "core/kernels/misc_tensor.h"
#include "core/kernels/pad.h"
#include "core/kernels/shape_ops.h"
#include "core/kernels/slice.h"
#include "core/kernels/transpose.h"

namespace qs {

std::vector<KernelEntry> tensorKernels() {
  return {
      {"Concat", "", 1, 21, createConcat},
      {"Split", "", 2, 21, createSplit},
      {"Slice", "", 1, 21, createSlice},
      {"Reshape", "", 5, 21, createReshape},
      {"Flatten", "", 1, 21, createFlatten},
      {"Transpose", "", 1, 21, createTranspose},
      {"Squeeze", "", 1, 21, createSqueeze},
      {"Unsqueeze", "", 1, 21, createUnsqueeze},
      {"Shape", "", 1, 21, createShape},
      {"Size", "", 1, 21, createSize},
      {"Gather", "", 1, 21, createGather},
      {"GatherElements", "", 11, 21, createGatherElements},
      {"GatherND", "", 11, 21, createGatherND},
      {"ScatterND", "", 11, 21, createScatterND},
      {"ScatterElements", "", 11, 21, createScatterElements},
      {"Scatter", "", 9, 10, createScatterElements},
      {"Pad", "", 2, 21, createPad},
      {"Constant", "", 1, 21, createConstant},
      {"ConstantOfShape", "", 9, 21, createConstantOfShape},
      {"Identity", "", 1, 21, createIdentity},
      {"Dropout", "", 1, 21, createDropout},
      {"Expand", "", 8, 21, createExpand},
      {"Tile", "", 6, 21, createTile},
      {"Range", "", 11, 21, createRange},
      {"TopK", "", 1, 21, createTopK},
      {"CumSum", "", 11, 21, createCumSum},
      {"NonZero", "", 9, 21, createNonZero},
      {"OneHot", "", 9, 21, createOneHot},
      {"DepthToSpace", "", 1, 21, createDepthToSpace},
      {"SpaceToDepth", "", 1, 21, createSpaceToDepth},
  };
}

}  // namespace qs
