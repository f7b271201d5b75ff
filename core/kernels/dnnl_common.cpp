// See dnnl_common.h.
#ifdef QS_HAVE_DNNL
#include "core/kernels/dnnl_common.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <new>

#include "core/exec/parallel.h"
#include "core/util/huge_pages.h"

namespace qs {

const dnnl::engine& dnnlCpuEngine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

char* dnnlTaskScratch(size_t n) {
  // On huge pages, in whole 2 MiB pages, where the system allows it (core/util/huge_pages.h): a Winograd task's
  // transformed tiles (several MB at 56x56) are this buffer, written and read on every pass; with the weights and
  // tensors on huge pages and this on 4 KiB ones, resnet50 b1 stayed behind the whole process on huge pages.
  struct Buffer {
    char* p = nullptr;
    size_t capacity = 0;
    bool huge = false;
    void release() {
      if (huge) freeOnHugePages(p, capacity);
      else if (p) ::operator delete[](p, std::align_val_t(64));
      p = nullptr;
    }
    ~Buffer() { release(); }
  };
  thread_local Buffer buf;
  if (n > buf.capacity || !buf.p) {
    buf.release();
    buf.huge = hugePagesEnabled();
    if (buf.huge) {
      buf.capacity = (std::max<size_t>(n, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
      buf.p = static_cast<char*>(allocateOnHugePages(buf.capacity));
      if (!buf.p) throw std::bad_alloc();
    } else {
      buf.capacity = std::max<size_t>(n, 4096);
      buf.p = static_cast<char*>(::operator new[](buf.capacity, std::align_val_t(64)));
    }
  }
  return buf.p;
}

Status dnnlParallelFor(int threads, int64_t tasks, const std::string& what,
                       const std::function<void(dnnl::stream&, int64_t, int64_t)>& body) {
  bool failed = false;
  std::string error;
  std::mutex errorMutex;
  parallelFor(threads, tasks, 1, [&](int64_t b, int64_t e) {
    try {
      omp_set_num_threads(1);
      dnnl::stream stream(dnnlCpuEngine());
      body(stream, b, e);
    } catch (const std::exception& ex) {
      std::lock_guard<std::mutex> lock(errorMutex);
      failed = true;
      error = ex.what();
    }
  });
  if (failed) return runtimeError(what + " failed: " + error);
  return Status::ok();
}

}  // namespace qs
#endif
