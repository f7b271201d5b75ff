// Control flow: If, Loop and Scan run their subgraphs through executors of their own
// (core/kernels/control_flow.cpp); the kernel table is controlFlowKernels().
#pragma once

#include <cstdint>

namespace qs {

/// Most iterations a Loop may run. A hostile or broken model (a condition that never turns false,
/// a trip count of 2^62 with no condition) gets a one-line error instead of a hang; real models
/// (beam search, NMS loops, per-frame audio) stay far below it.
constexpr int64_t kMaxLoopIterations = 1 << 20;

}  // namespace qs
