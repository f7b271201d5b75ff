// See dnnl_common.h.
#ifdef QS_HAVE_DNNL
#include "core/kernels/dnnl_common.h"

#include <algorithm>
#include <memory>
#include <new>

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

}  // namespace qs
#endif
