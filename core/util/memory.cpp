#include "core/util/memory.h"

#include <cstdio>
#include <cstring>

namespace qs {

static uint64_t readStatusKb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0) {
      std::sscanf(line + n, " %lu", &kb);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

uint64_t peakRssBytes() { return readStatusKb("VmHWM:"); }
uint64_t currentRssBytes() { return readStatusKb("VmRSS:"); }

}  // namespace qs
