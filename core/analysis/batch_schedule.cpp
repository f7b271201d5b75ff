#include "core/analysis/batch_schedule.h"

#include <algorithm>

#include "core/exec/parallel.h"

namespace qs {

bool keepGoing(const CancelToken& cancel, const ProgressFn& progress, double fraction, const std::string& stage) {
  if (cancel.cancelled()) return false;
  return !progress || progress(std::min(1.0, std::max(0.0, fraction)), stage);
}

BatchSchedule::BatchSchedule(int64_t batches, const CancelToken& cancel, const ProgressFn& progress)
    : m_batches(batches), m_cancel(cancel), m_progress(progress), m_status((size_t)std::max<int64_t>(batches, 0)) {}

bool BatchSchedule::report(double fractionOfBatch, const std::string& stage) {
  if (stopped()) return false;
  if (std::this_thread::get_id() != m_caller) return true;
  if (!keepGoing(m_cancel, m_progress, ((double)m_done.load() + fractionOfBatch) / (double)m_batches, stage))
    m_stop = true;
  return !m_stop.load();
}

void BatchSchedule::run(int threads, int64_t begin, int64_t end, const std::function<Status(int64_t)>& job,
                        const char* stageAfterEach) {
  auto one = [&](int64_t i) {
    const int64_t b = begin + i;
    if (stopped()) return;
    m_status[(size_t)b] = job(b);
    if (!m_status[(size_t)b]) m_stop = true;
    ++m_done;
    if (stageAfterEach) report(0, stageAfterEach);
  };
  parallelForEach(threads, end - begin, one);
}

Status BatchSchedule::result(const Status& cancelled) const {
  for (const Status& st : m_status)
    if (!st && st.code() != StatusCode::Cancelled) return st;
  return stopped() ? cancelled : Status::ok();
}

}  // namespace qs
