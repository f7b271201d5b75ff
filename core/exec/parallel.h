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

/// Runs fn(i) for each i in [0, n) on at most `threads` threads of the same pool (the caller
/// included), each thread claiming the next item when done with its last: for a few long items
/// (an analysis's batches, milliseconds to seconds each), where a late worker costs nothing
/// because the caller takes every item not claimed yet. With more than one thread at work, the
/// parallelFor calls inside the items run serially (the items already share out the cores);
/// with one, as usual. Unlike parallelFor, it does not follow the pool's back-off from short
/// regions on a busy machine, nor feed it: long items say nothing about how soon a worker gets a
/// core. Serial under the same conditions as parallelFor otherwise.
void parallelForEach(int threads, int64_t n, const std::function<void(int64_t)>& fn);

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

/// Number of hardware threads (>= 1), read once per process (no system call after the first).
int hardwareThreads();

}  // namespace qs
