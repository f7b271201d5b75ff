// Gather (1..21), GatherElements (11..21), GatherND (11..21; batch_dims from 12), ScatterND (11..21;
// reduction add/mul from 16, max/min from 18), ScatterElements (11..21; same reductions) and
// Scatter (9..10, the former name of ScatterElements).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createGather(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createGatherElements(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createGatherND(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createScatterND(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createScatterElements(const KernelInit& init);

}  // namespace qs
