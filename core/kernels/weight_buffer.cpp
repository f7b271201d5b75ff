#include "core/kernels/weight_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/util/huge_pages.h"

namespace qs {

void WeightBufferFree::operator()(void* p) const {
  if (mapped) freeOnHugePages(p, mapped);
  else std::free(p);
}

bool WeightBuffer::enabled() { return hugePagesEnabled(); }

WeightBuffer::WeightBuffer(size_t bytes) : m_bytes(bytes) {
  if (bytes == 0) return;
  if (bytes >= kHugePageBytes && enabled()) {
    // A fresh mapping (zero): a first version on posix_memalign got huge pages for 63 of resnet50's ~100 MB of
    // large weights, glibc serving the rest from memory already touched in 4 KiB pages.
    void* p = allocateOnHugePages(bytes, &m_advised);
    if (!p) throw std::bad_alloc();
    m_data = std::unique_ptr<void, Free>(p, Free{bytes});
    return;
  }
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes) != 0 || !p) throw std::bad_alloc();
  m_data.reset(p);
  std::memset(p, 0, bytes);
}

}  // namespace qs
