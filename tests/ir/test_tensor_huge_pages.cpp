// Tensors' large buffers on transparent huge pages (core/ir/tensor.cpp's pool, core/util/huge_pages.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/ir/tensor.h"
#include "core/util/huge_pages.h"
#include "tests/support/huge_page_helpers.h"

namespace qs {
namespace {

using test::thpEligible;
using test::thpModeIsMadvise;

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
