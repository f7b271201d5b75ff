// Packed weights that every pass streams, on transparent huge pages.
#pragma once

#include <cstddef>
#include <memory>

namespace qs {

/// A zeroed, 64-byte aligned buffer for a kernel's packed weights (owned; movable, not copyable), on transparent
/// huge pages where the system allows it (core/util/huge_pages.h): at batch 1 a ResNet streams its weights
/// (resnet50: ~140 MB a pass with the Winograd ones) from memory on every pass, one 4 KiB page walk per page
/// otherwise. From 2 MiB on a buffer is a mapping of its own, 2 MiB aligned, its whole 2 MiB pages advised; a
/// smaller one is carved from a shared chunk of advised huge pages (8 MiB; a chunk is unmapped when the last
/// buffer in it goes), so that the many small weights of a network (resnet50's layer1-3: ~25 MB in buffers
/// under 2 MiB) share huge pages too. Only where the memory lies changes, never the values or the arithmetic.
class WeightBuffer {
 public:
  WeightBuffer() = default;
  /// `bytes` zeroed bytes (none for 0). Throws std::bad_alloc when the allocation fails.
  explicit WeightBuffer(size_t bytes);
  WeightBuffer(WeightBuffer&&) = default;
  WeightBuffer& operator=(WeightBuffer&&) = default;
  WeightBuffer(const WeightBuffer&) = delete;
  WeightBuffer& operator=(const WeightBuffer&) = delete;
  float* data() const { return static_cast<float*>(m_data.get()); }
  size_t bytes() const { return m_bytes; }
  /// The bytes of this buffer that lie on pages advised as huge pages (0 when switched off or refused).
  size_t advisedBytes() const { return m_advised; }
  /// Whether buffers are advised at all: hugePagesEnabled() (core/util/huge_pages.h; QS_HUGE_PAGES=0: never).
  static bool enabled();

 private:
  std::shared_ptr<void> m_data;  // a small buffer shares its chunk's ownership
  size_t m_bytes = 0, m_advised = 0;
};

}  // namespace qs
