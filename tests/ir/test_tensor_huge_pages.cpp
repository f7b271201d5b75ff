// Tensors' large buffers on transparent huge pages (core/ir/tensor.cpp's pool, core/util/huge_pages.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/ir/tensor.h"
#include "core/util/huge_pages.h"

namespace qs {
namespace {

// The THPeligible line of the mapping of /proc/self/smaps that holds p (1: madvised huge pages allowed), -1 if none.
int thpEligible(const void* p) {
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
bool thpModeIsMadvise() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(f, modes);
  return modes.find("[madvise]") != std::string::npos;
}

TEST(CoreTensorHugePages, LargeTensorsLieOnHugePagesSmallOnesDoNot) {
  {
    Tensor big = Tensor::zeros(DType::Float, {3, 1 << 20});  // 12 MiB: a pooled buffer from 2 MiB on
    ASSERT_NE(big.data<float>(), nullptr);
    for (int64_t i = 0; i < big.numel(); i += 4099) ASSERT_EQ(big.data<float>()[i], 0.f);
    big.data<float>()[big.numel() - 1] = 1.f;
    if (!hugePagesEnabled()) {
      if (thpModeIsMadvise()) EXPECT_EQ(thpEligible(big.data<float>()), 0) << "QS_HUGE_PAGES=0: ordinary pages";
    } else {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data<float>()) % kHugePageBytes, 0u);
      EXPECT_EQ(thpEligible(big.data<float>()), 1);
    }
  }
  // Freed into the pool and taken again (the steady state of repeated runs): still there, still eligible.
  Tensor again(DType::Float, {3, 1 << 20});
  if (hugePagesEnabled()) {
    EXPECT_EQ(thpEligible(again.data<float>()), 1);
  }
  Tensor small(DType::Float, {1000});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data<float>()) % 64, 0u);
  if (thpModeIsMadvise()) EXPECT_NE(thpEligible(small.data<float>()), 1);
}

}  // namespace
}  // namespace qs
