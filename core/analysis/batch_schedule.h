// How an analysis runs its batches: whole batches side by side on the executor's pool
// (parallelForEach: each thread takes the next batch, the kernels inside then run serially, no
// fork and join per node for the many small ops of an analysis), or one after another with
// threaded kernels; progress reported on the calling thread only; the first failure stops the
// batches not yet started. Each batch writes its own sums, which the caller merges in batch
// order, so results do not depend on the thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/util/progress.h"
#include "core/util/status.h"

namespace qs {

/// Clamps `fraction` to [0, 1] and calls `progress`; false when `cancel` is set or the callback
/// returns false.
bool keepGoing(const CancelToken& cancel, const ProgressFn& progress, double fraction, const std::string& stage);

class BatchSchedule {
 public:
  /// `batches` in all (the progress fraction counts them), stopped by `cancel` or `progress`.
  BatchSchedule(int64_t batches, const CancelToken& cancel, const ProgressFn& progress);

  /// Progress at `fractionOfBatch` into the batch after those done, for a batch's job to call:
  /// the callback runs on the thread that made the schedule only (a GUI's callback need not be
  /// thread-safe). False once the schedule is stopped: the job then returns Cancelled.
  bool report(double fractionOfBatch, const std::string& stage);

  /// Runs job(b) for b in [begin, end) on up to `threads` threads (one: on this thread, in order,
  /// its kernels threaded as usual), skipping the batches not started when it stops. With
  /// `stageAfterEach`, reports progress after each batch.
  void run(int threads, int64_t begin, int64_t end, const std::function<Status(int64_t)>& job,
           const char* stageAfterEach = nullptr);

  /// Whether a batch failed, the progress callback said stop, or `cancel` is set.
  bool stopped() const { return m_stop.load() || m_cancel.cancelled(); }
  /// What job(b) returned (ok where it did not run).
  const Status& status(int64_t b) const { return m_status[(size_t)b]; }
  /// The first failure of a batch other than a cancellation; else `cancelled` if stopped; else ok.
  Status result(const Status& cancelled) const;

 private:
  const int64_t m_batches;
  const CancelToken& m_cancel;
  const ProgressFn& m_progress;
  const std::thread::id m_caller = std::this_thread::get_id();
  std::vector<Status> m_status;
  std::atomic<bool> m_stop{false};
  std::atomic<int64_t> m_done{0};
};

}  // namespace qs
