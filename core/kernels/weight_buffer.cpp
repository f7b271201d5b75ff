#include "core/kernels/weight_buffer.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "core/util/huge_pages.h"

namespace qs {

namespace {

// A mapping on huge pages that small weight buffers are carved from, front to back, never reused: a buffer
// keeps its chunk alive (shared_ptr), and the chunk is unmapped with the last one.
struct Chunk {
  char* base = nullptr;
  size_t bytes = 0, advised = 0;
  ~Chunk() { freeOnHugePages(base, bytes); }
};

constexpr size_t kChunkBytes = 4 * kHugePageBytes;

std::shared_ptr<void> carve(size_t bytes, size_t& advised) {
  static std::mutex mutex;
  static std::shared_ptr<Chunk> current;
  static size_t used = 0;
  const size_t need = (bytes + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(mutex);
  if (!current || used + need > current->bytes) {
    auto chunk = std::make_shared<Chunk>();
    chunk->base = static_cast<char*>(allocateOnHugePages(kChunkBytes, &chunk->advised));
    if (!chunk->base) throw std::bad_alloc();
    chunk->bytes = kChunkBytes;
    current = std::move(chunk);
    used = 0;
  }
  char* p = current->base + used;
  used += need;
  advised = current->advised == current->bytes ? bytes : 0;
  return std::shared_ptr<void>(current, p);  // fresh mapping, never handed out before: zero
}

}  // namespace

bool WeightBuffer::enabled() { return hugePagesEnabled(); }

WeightBuffer::WeightBuffer(size_t bytes) : m_bytes(bytes) {
  if (bytes == 0) return;
  if (enabled()) {
    if (bytes < kHugePageBytes) {
      m_data = carve(bytes, m_advised);
      return;
    }
    // A fresh mapping (zero): a first version on posix_memalign got huge pages for 63 of resnet50's ~100 MB of
    // large weights, glibc serving the rest from memory already touched in 4 KiB pages.
    void* p = allocateOnHugePages(bytes, &m_advised);
    if (!p) throw std::bad_alloc();
    m_data = std::shared_ptr<void>(p, [bytes](void* q) { freeOnHugePages(q, bytes); });
    return;
  }
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes) != 0 || !p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  m_data = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace qs
