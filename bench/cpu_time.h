// CPU time of the whole process (all threads), for benchmarks on a machine shared with other work,
// where wall time measures the neighbours as much as the code.
#pragma once

#include <ctime>

namespace qs::bench {

inline double cpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

}  // namespace qs::bench
