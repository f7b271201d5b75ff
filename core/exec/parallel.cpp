#include "core/exec/parallel.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace qs {

namespace {

using Fn = std::function<void(int64_t, int64_t)>;

// One job at a time. Its claim state is one 64-bit word, generation | chunk count | claimed
// chunks, so a worker that wakes late can never claim a chunk of a job other than the one
// whose parameters it read: the CAS that claims a chunk fails once the generation moved on,
// and a job cannot move on while one of its chunks is unclaimed.
constexpr int kGenBits = 24, kCountBits = 20;
constexpr uint64_t kCountMask = (uint64_t(1) << kCountBits) - 1;
constexpr int64_t kMaxChunks = int64_t(kCountMask);

uint64_t packState(uint32_t gen, uint64_t chunks, uint64_t claimed) {
  return (uint64_t(gen & ((1u << kGenBits) - 1)) << (2 * kCountBits)) | (chunks << kCountBits) | claimed;
}
uint32_t genOf(uint64_t s) { return uint32_t(s >> (2 * kCountBits)); }
uint64_t chunksOf(uint64_t s) { return (s >> kCountBits) & kCountMask; }
uint64_t claimedOf(uint64_t s) { return s & kCountMask; }

thread_local bool t_inParallel = false;

class Pool {
 public:
  // Never destroyed (workers are parked at exit); see pool().
  // `adapt`: the region counts for the back-off (judge()); long items do not.
  bool tryRun(int threads, int64_t n, int64_t chunks, const Fn& fn, bool adapt = true) {
    if (m_busy.exchange(true, std::memory_order_acquire)) return false;
    t_inParallel = true;
    while ((int)m_workers.size() < threads - 1) {
      int index = (int)m_workers.size();
      m_workers.emplace_back([this, index] { workerLoop(index); });
    }
    m_fn.store(&fn, std::memory_order_relaxed);
    m_n.store(n, std::memory_order_relaxed);
    m_participants.store(threads, std::memory_order_relaxed);
    m_done.store(0, std::memory_order_relaxed);
    const uint32_t gen = (genOf(m_state.load(std::memory_order_relaxed)) + 1) & ((1u << kGenBits) - 1);
    m_state.store(packState(gen, (uint64_t)chunks, 0), std::memory_order_seq_cst);
    const auto t0 = Clock::now();
    m_wake.fetch_add(1, std::memory_order_seq_cst);
    if (m_sleepers.load(std::memory_order_seq_cst) > 0) m_wake.notify_all();
    const int64_t mine = claimChunks(gen, fn, n);
    const auto t1 = Clock::now();
    // Every chunk is claimed; wait only for those still running on a worker.
    for (int spin = 0; m_done.load(std::memory_order_acquire) < chunks; ++spin) {
      if (spin < 4096) _mm_pause();
      else if (adapt) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));  // long items: leave the core
    }
    if (adapt) judge(t0, t1, Clock::now(), mine < chunks);
    t_inParallel = false;
    m_busy.store(false, std::memory_order_release);
    return true;
  }

  /// False while parallel regions are backed off (see judge()).
  bool parallelAllowed() const {
    const int64_t until = m_serialUntil.load(std::memory_order_relaxed);
    return until == 0 || Clock::now().time_since_epoch().count() >= until;
  }

 private:
  using Clock = std::chrono::steady_clock;

  // Adapts to the machine: when the workers do not get a core (other processes, or this
  // process's scheduler group share is under one core), parallel regions only add waiting:
  // the caller either does every chunk itself or waits for a worker that was descheduled
  // mid-chunk. After such regions, run serially for a while (10 ms, doubling up to 1 s while it
  // keeps happening), then try again. Called by the caller thread holding the pool.
  void judge(Clock::time_point t0, Clock::time_point t1, Clock::time_point t2, bool workerHelped) {
    const auto own = t1 - t0, wait = t2 - t1;
    const bool waitedTooLong = wait > std::chrono::microseconds(200) && wait * 2 > own;
    m_lateRegions = workerHelped ? 0 : m_lateRegions + 1;
    if (!waitedTooLong && m_lateRegions < 8) {
      if (workerHelped) m_backoff = Clock::duration::zero();
      return;
    }
    m_lateRegions = 0;
    m_backoff = std::clamp<Clock::duration>(m_backoff * 2, std::chrono::milliseconds(10), std::chrono::seconds(1));
    m_serialUntil.store((t2 + m_backoff).time_since_epoch().count(), std::memory_order_relaxed);
  }

  // Claims and runs chunks of job `gen` until none is left; returns how many it ran.
  int64_t claimChunks(uint32_t gen, const Fn& fn, int64_t n) {
    int64_t ran = 0;
    uint64_t s = m_state.load(std::memory_order_acquire);
    for (;;) {
      if (genOf(s) != gen || claimedOf(s) >= chunksOf(s)) return ran;
      if (!m_state.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      const int64_t chunks = (int64_t)chunksOf(s), c = (int64_t)claimedOf(s);
      const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
      if (begin < end) fn(begin, end);
      ++ran;
      m_done.fetch_add(1, std::memory_order_release);
      s = m_state.load(std::memory_order_acquire);
    }
  }

  void workerLoop(int index) {
    t_inParallel = true;
    uint32_t seen = genOf(m_state.load(std::memory_order_acquire));
    for (;;) {
      uint64_t s = m_state.load(std::memory_order_acquire);
      if (genOf(s) == seen) {
        // Stay awake a while: the next parallel op of a run usually comes within microseconds to
        // a millisecond, and waking a sleeping thread costs far more than that on a busy machine
        // (measured here: > 1 ms, so a woken worker arrives after the caller did all the work).
        // Spin with pause, yielding every few tens of microseconds: when this worker shares a
        // core with the caller (busy machine), a pure spin would hold that core while the caller
        // waits to run (measured: +2 ms per op), while yielding on every iteration lets other
        // processes take the core for whole time slices. Sleep after ~2 ms without work.
        auto start = std::chrono::steady_clock::now();
        bool changed = false;
        for (int i = 0; !changed; ++i) {
          _mm_pause();
          if ((i & 255) == 255) {
            const auto elapsed = std::chrono::steady_clock::now() - start;
            if (elapsed > std::chrono::microseconds(2000)) break;
            if (elapsed > std::chrono::microseconds(50)) std::this_thread::yield();
          }
          changed = genOf(m_state.load(std::memory_order_acquire)) != seen;
        }
        if (!changed) {
          const uint32_t w = m_wake.load(std::memory_order_seq_cst);
          m_sleepers.fetch_add(1, std::memory_order_seq_cst);
          if (genOf(m_state.load(std::memory_order_seq_cst)) == seen) m_wake.wait(w, std::memory_order_seq_cst);
          m_sleepers.fetch_sub(1, std::memory_order_seq_cst);
        }
        continue;
      }
      seen = genOf(s);
      if (index >= m_participants.load(std::memory_order_relaxed) - 1) continue;
      const Fn* fn = m_fn.load(std::memory_order_relaxed);
      const int64_t n = m_n.load(std::memory_order_relaxed);
      claimChunks(seen, *fn, n);
    }
  }

  std::vector<std::thread> m_workers;
  std::atomic<bool> m_busy{false};
  std::atomic<uint64_t> m_state{0};
  std::atomic<uint32_t> m_wake{0};
  std::atomic<int> m_sleepers{0};
  std::atomic<const Fn*> m_fn{nullptr};
  std::atomic<int64_t> m_n{0};
  std::atomic<int> m_participants{1};
  std::atomic<int64_t> m_done{0};
  std::atomic<int64_t> m_serialUntil{0};  // steady_clock ticks; 0 = never backed off
  Clock::duration m_backoff{0};           // caller-only state, guarded by m_busy
  int m_lateRegions = 0;
};

Pool& pool() {
  static Pool* p = [] {
    auto* q = new Pool();
    return q;
  }();
  return *p;
}

}  // namespace

void parallelFor(int threads, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t pieces = (n + grain - 1) / grain;
  if (threads <= 1 || pieces <= 1 || t_inParallel) {
    fn(0, n);
    return;
  }
  // A few chunks per thread: a late worker then leaves the caller at most a few chunks' work.
  const int64_t chunks = std::min<int64_t>({pieces, int64_t(threads) * 4, kMaxChunks});
  Pool& p = pool();
  if (!p.parallelAllowed() || !p.tryRun(threads, n, chunks, fn)) fn(0, n);
}

void parallelForEach(int threads, int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  const Fn items = [&fn](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  };
  threads = (int)std::min<int64_t>(threads, n);
  if (threads <= 1 || t_inParallel) {
    items(0, n);
    return;
  }
  // One item per chunk, so that items are claimed one at a time.
  if (!pool().tryRun(threads, n, std::min<int64_t>(n, kMaxChunks), items, false)) items(0, n);
}

SerialScope::SerialScope() : m_previous(t_inParallel) { t_inParallel = true; }
SerialScope::~SerialScope() { t_inParallel = m_previous; }

// Read once: std::thread::hardware_concurrency() is get_nprocs(), which opens and reads
// /sys/devices/system/cpu/online on every call (glibc), and the kernels ask on every run (slices,
// parts per image, images per task): resnet50 at batch 1 made 106 open/read/close triples per
// pass, 2 us each on an idle core under chrt, ~10 us each on a loaded one.
int hardwareThreads() {
  static const int n = (int)std::max(1u, std::thread::hardware_concurrency());
  return n;
}

}  // namespace qs
