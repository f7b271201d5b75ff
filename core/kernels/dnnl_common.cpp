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

namespace qs {

const dnnl::engine& dnnlCpuEngine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

char* dnnlTaskScratch(size_t n) {
  struct Freer {
    void operator()(char* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  thread_local std::unique_ptr<char[], Freer> buf;
  thread_local size_t capacity = 0;
  if (n > capacity || !buf) {
    buf.reset();
    capacity = std::max<size_t>(n, 4096);
    buf.reset(static_cast<char*>(::operator new[](capacity, std::align_val_t(64))));
  }
  return buf.get();
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
