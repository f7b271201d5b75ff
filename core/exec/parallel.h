// Intra-op parallelism. One mechanism for the whole process (OpenMP), shared with Eigen's
// GEMM, so that kernels, Eigen and any BLAS never oversubscribe the cores.
#pragma once

#include <cstdint>
#include <functional>

namespace qs {

/// Splits [0, n) into at most `threads` contiguous chunks of at least `grain` items and
/// runs fn(begin, end) on each, in parallel when there is more than one chunk.
void parallelFor(int threads, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/// Number of hardware threads (>= 1).
int hardwareThreads();

}  // namespace qs
