#include "core/util/huge_pages.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <sys/mman.h>

namespace qs {

namespace {
size_t pageRounded(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }
}  // namespace

bool hugePagesEnabled() {
  static const bool on = [] {
    const char* env = std::getenv("QS_HUGE_PAGES");
    if (env && std::string(env) == "0") return false;
    // "always [madvise] never": the bracketed word is the mode; with "never" madvise does nothing.
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(f, modes);
    return !modes.empty() && modes.find("[never]") == std::string::npos;
  }();
  return on;
}

void* allocateOnHugePages(size_t bytes, size_t* advised) {
  if (advised) *advised = 0;
  const size_t length = pageRounded(bytes);
  // Over-map by one huge page and cut the ends off, so that the buffer starts on a 2 MiB boundary.
  void* raw = mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  char* start = static_cast<char*>(raw);
  char* aligned =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(start) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
  if (aligned > start) munmap(start, (size_t)(aligned - start));
  const size_t tail = (size_t)(start + length + kHugePageBytes - (aligned + length));
  if (tail) munmap(aligned + length, tail);
  // Whole huge pages only. A refusal (an old kernel, a container without THP) leaves ordinary pages.
  const size_t advise = bytes / kHugePageBytes * kHugePageBytes;
  if (advise && madvise(aligned, advise, MADV_HUGEPAGE) == 0 && advised) *advised = advise;
  return aligned;
}

void freeOnHugePages(void* p, size_t bytes) {
  if (p) munmap(p, pageRounded(bytes));
}

}  // namespace qs
