#include <gtest/gtest.h>

#include "core/ir/half.h"
#include "core/ir/tensor.h"

using namespace qs;

TEST(CoreTensor, CheckedNumelRefusesOverflowAndNegative) {
  EXPECT_EQ(checkedNumel({2, 3, 4}), 24);
  EXPECT_EQ(checkedNumel({}), 1);
  EXPECT_EQ(checkedNumel({0, 1 << 30}), 0);
  EXPECT_EQ(checkedNumel({int64_t(1) << 40, int64_t(1) << 40}), -1);
  EXPECT_EQ(checkedNumel({-1, 3}), -1);
  EXPECT_EQ(checkedNumel({1 << 20, 1 << 20}, 1 << 30), -1);
}

TEST(CoreTensor, ReshapedSharesBuffer) {
  Tensor t = Tensor::zeros(DType::Float, {2, 3});
  Tensor v = t.reshaped({6});
  EXPECT_TRUE(v.sharesBufferWith(t));
  v.data<float>()[5] = 7.f;
  EXPECT_EQ(t.data<float>()[5], 7.f);
  Tensor c = t.clone();
  EXPECT_FALSE(c.sharesBufferWith(t));
  EXPECT_EQ(c.data<float>()[5], 7.f);
}

TEST(CoreHalf, RoundTripAndRounding) {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 0.33325195f}) {
    EXPECT_EQ(halfToFloat(floatToHalf(f)), f) << f;
  }
  EXPECT_EQ(floatToHalf(65520.f), 0x7c00);               // rounds to +inf
  EXPECT_EQ(floatToHalf(1.f + 1.f / 2048.f), 0x3c00);    // tie rounds to even (1.0)
  EXPECT_EQ(floatToHalf(1.f + 3.f / 2048.f), 0x3c02);    // tie rounds to even (up)
  EXPECT_EQ(floatToHalf(2.98023224e-08f), 0x0000);       // half of the smallest subnormal: ties to even (0)
  EXPECT_EQ(floatToHalf(4.5e-08f), 0x0001);
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.5f)), 1.5f);
}
