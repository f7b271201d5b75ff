// What a terminal shows of a run: progress with an ETA, warnings, and Ctrl-C to cancel.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>

#include "app/cli.h"

namespace qs::cli {

namespace {

// Progress with an ETA on stderr, redrawn in place on a terminal; elsewhere one line per stage
// and per tenth of a stage.
class ProgressPrinter {
 public:
  ProgressPrinter() : m_start(std::chrono::steady_clock::now()), m_tty(isatty(2)) {}
  ~ProgressPrinter() {
    if (m_tty && !m_stage.empty()) std::fputc('\n', stderr);
  }
  bool operator()(double f, const std::string& stage) {
    auto now = std::chrono::steady_clock::now();
    if (stage != m_stage) {
      if (m_tty && !m_stage.empty()) std::fputc('\n', stderr);
      m_stage = stage;
      m_stageStart = now;
      m_last = {};
      m_tenth = -1;
    }
    if (m_tty ? (now - m_last < std::chrono::milliseconds(250) && f < 1.0) : (int)(f * 10) == m_tenth) return true;
    m_last = now;
    m_tenth = (int)(f * 10);
    double elapsed = std::chrono::duration<double>(now - m_start).count();
    double stageElapsed = std::chrono::duration<double>(now - m_stageStart).count();
    double eta = f > 0.01 ? stageElapsed * (1.0 - f) / f : NAN;
    char line[256];
    if (std::isnan(eta)) std::snprintf(line, sizeof line, "%-28s %5.1f%%  %6.1fs", stage.c_str(), 100 * f, elapsed);
    else std::snprintf(line, sizeof line, "%-28s %5.1f%%  %6.1fs  ETA %5.1fs", stage.c_str(), 100 * f, elapsed, eta);
    std::fprintf(stderr, m_tty ? "\r%s" : "%s\n", line);
    return true;
  }

 private:
  std::chrono::steady_clock::time_point m_start, m_stageStart, m_last;
  std::string m_stage;
  int m_tenth = -1;
  bool m_tty;
};

// The token Ctrl-C and SIGTERM set: a signal handler can reach only a global.
std::shared_ptr<CancelToken> g_interruptToken;
extern "C" void onInterrupt(int) {
  if (g_interruptToken) g_interruptToken->cancel();
}

}  // namespace

ProgressFn progressPrinter(bool force) {
  if (!force && !isatty(2)) return {};
  auto printer = std::make_shared<ProgressPrinter>();
  return [printer](double f, const std::string& stage) { return (*printer)(f, stage); };
}

RunCallbacks terminalCallbacks(bool forceProgress) {
  RunCallbacks cb;
  cb.progress = progressPrinter(forceProgress);
  cb.warning = [](const std::string& w, bool loud) {
    std::fprintf(stderr, "quantscope: %s: %s\n", loud ? "WARNING" : "warning", w.c_str());
  };
  cb.cancel = std::make_shared<CancelToken>();
  g_interruptToken = cb.cancel;
  std::signal(SIGINT, onInterrupt);
  std::signal(SIGTERM, onInterrupt);
  return cb;
}

}  // namespace qs::cli
