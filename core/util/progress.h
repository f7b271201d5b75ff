// Progress reporting and cancellation, owned by the caller of a long operation: the CLI (a
// terminal line, Ctrl-C) and the GUI (a progress bar, a Cancel button) pass theirs to the same
// core entry points.
#pragma once

#include <atomic>
#include <functional>
#include <string>

namespace qs {

/// Progress: fraction in [0,1] and a short stage label. Return false to cancel.
using ProgressFn = std::function<bool(double fraction, const std::string& stage)>;

/// A flag the caller sets from any thread (a signal handler, a button) to stop a running call,
/// which then returns StatusCode::Cancelled with the previous results kept.
class CancelToken {
 public:
  void cancel() { m_flag.store(true, std::memory_order_relaxed); }
  void reset() { m_flag.store(false, std::memory_order_relaxed); }
  bool cancelled() const { return m_flag.load(std::memory_order_relaxed); }
  std::atomic<bool>& flag() { return m_flag; }

 private:
  std::atomic<bool> m_flag{false};
};

}  // namespace qs
