// Timing helpers of the benches. CPU time of the whole process (all threads), for benchmarks on a
// machine shared with other work, where wall time measures the neighbours as much as the code;
// and the best wall time of repeated calls, for kernels short enough to dodge the neighbours.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>

namespace qs::bench {

inline double cpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/// Quickest of `repeats` calls of fn, in ms, after one warm-up call (scratch buffers, packed
/// weights, page faults).
template <class Fn>
double bestMs(int repeats, Fn&& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace qs::bench
