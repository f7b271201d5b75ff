#include "core/exec/parallel.h"

#include <algorithm>
#include <thread>

namespace qs {

void parallelFor(int threads, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(std::max(threads, 1), (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
#pragma omp parallel for num_threads((int)chunks) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin = n * c / chunks;
    int64_t end = n * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  }
}

int hardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace qs
