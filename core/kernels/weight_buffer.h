// Packed weights that every pass streams, on transparent huge pages.
#pragma once

#include <cstddef>
#include <memory>

namespace qs {

/// WeightBuffer's deleter: allocateOnHugePages(mapped) memory (core/util/huge_pages.h), else malloc'd.
struct WeightBufferFree {
  size_t mapped = 0;
  void operator()(void* p) const;
};

/// A zeroed, 64-byte aligned buffer for a kernel's packed weights (owned; movable, not copyable). From 2 MiB on it
/// is 2 MiB aligned and its whole 2 MiB pages are advised as transparent huge pages (madvise(MADV_HUGEPAGE), before
/// the first touch) where the kernel allows it: at batch 1 a ResNet streams its weights (resnet50: ~140 MB a pass
/// with the Winograd ones) from memory on every pass, one 4 KiB page walk per page otherwise (core/util/huge_pages.h).
/// Only where the memory lies changes, never the values or the arithmetic.
class WeightBuffer {
 public:
  WeightBuffer() = default;
  /// `bytes` zeroed bytes (none for 0). Throws std::bad_alloc when the allocation fails.
  explicit WeightBuffer(size_t bytes);
  float* data() const { return static_cast<float*>(m_data.get()); }
  size_t bytes() const { return m_bytes; }
  /// The bytes of this buffer advised as huge pages (whole 2 MiB pages; 0 below 2 MiB or when switched off).
  size_t advisedBytes() const { return m_advised; }
  /// Whether buffers are advised at all: hugePagesEnabled() (core/util/huge_pages.h; QS_HUGE_PAGES=0: never).
  static bool enabled();

 private:
  using Free = WeightBufferFree;
  std::unique_ptr<void, Free> m_data;
  size_t m_bytes = 0, m_advised = 0;
};

}  // namespace qs
