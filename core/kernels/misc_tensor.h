// Tile (6..21), Range (11..21), TopK (1..21: k attribute < 10, K input >= 10, largest/sorted >= 11),
// CumSum (11..21), NonZero (9..21), OneHot (9..21), DepthToSpace (1..21; mode DCR/CRD from 11),
// SpaceToDepth (1..21).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createTile(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createRange(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createTopK(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createCumSum(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createNonZero(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createOneHot(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createDepthToSpace(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createSpaceToDepth(const KernelInit& init);

}  // namespace qs
