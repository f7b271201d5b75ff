// What the kernel says of a mapping's transparent huge pages, for the tests of core/util/huge_pages.h's users.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace qs::test {

// The THPeligible line of the mapping of /proc/self/smaps that holds p: 1 where the kernel may back it with huge
// pages (madvised, in a THP "madvise" system), -1 where no mapping or no such line.
inline int thpEligible(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(f, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find('-') != std::string::npos && (head >> std::hex >> lo >> dash >> hi) && dash == '-' &&
        line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::atoi(line.c_str() + 12);
  }
  return -1;
}

// True when the system's transparent huge page mode is madvise: only then does a mapping that was not advised stay
// off huge pages (under "always" every anonymous mapping is eligible, so nothing can be said of those).
inline bool thpModeIsMadvise() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(f, modes);
  return modes.find("[madvise]") != std::string::npos;
}

}  // namespace qs::test
