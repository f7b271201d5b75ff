// Intra-op parallelism: one persistent pool for the whole process, shared by every kernel and
// by the GEMM (which runs single-threaded blocks on it), so that nothing oversubscribes the
// cores. No OpenMP: libgomp's fork/join barrier makes the caller wait for every worker to be
// scheduled, which on a loaded machine costs a scheduler time slice per parallel region.
#pragma once

#include <cstdint>
#include <functional>

namespace qs {

/// Splits [0, n) into contiguous chunks of at least `grain` items and runs fn(begin, end) on
/// each, on at most `threads` threads (the caller included). Chunks are claimed dynamically:
/// the caller works too and takes over every chunk a worker has not claimed yet, so a worker
/// that is not scheduled (busy machine) delays nothing; the call returns once every claimed
/// chunk is done. Runs serially when there is one chunk, when `threads` <= 1, and when called
/// from inside another parallelFor or while another thread holds the pool.
void parallelFor(int threads, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/// While alive, parallelFor on this thread runs serially. For threads that already share out
/// the work among themselves (one batch each): pool workers would only oversubscribe the cores.
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool m_previous;
};

/// Number of hardware threads (>= 1).
int hardwareThreads();

}  // namespace qs
