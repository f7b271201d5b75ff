// Fake quantization against ONNX's QuantizeLinear/DequantizeLinear: our own kernels run the
// conformance cases of those ops, and here the fake quant must equal running the two kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/exec/executor.h"
#include "core/onnx/loader.h"
#include "core/numeric/fake_quant.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;

TEST(FakeQuant, RoundsHalfToEvenAndSaturates) {
  // From the ONNX QuantizeLinear spec example (scale 2, zero point 0 on int8):
  std::vector<float> x = {0.f, 2.f, 3.f, 1000.f, -254.f, -1000.f, 5.f, 7.f, -3.f, 1.f};
  std::vector<float> y(x.size());
  fakeQuantInt8(x.data(), y.data(), (int64_t)x.size(), 2.f, kActQmin, kActQmax);
  // 3/2 = 1.5 -> 2; 5/2 = 2.5 -> 2; 7/2 = 3.5 -> 4; -3/2 = -1.5 -> -2; 1/2 = 0.5 -> 0
  std::vector<float> want = {0.f, 2.f, 4.f, 254.f, -254.f, -256.f, 4.f, 8.f, -4.f, 0.f};
  EXPECT_EQ(y, want);
  fakeQuantInt8(x.data(), y.data(), (int64_t)x.size(), 2.f, kWeightQmin, kWeightQmax);
  EXPECT_EQ(y[5], -254.f);  // weights saturate at -127
}

TEST(FakeQuant, Fp8E4M3Grid) {
  EXPECT_EQ(roundToFp8E4M3(448.f), 448.f);
  EXPECT_EQ(roundToFp8E4M3(1000.f), 448.f);
  EXPECT_EQ(roundToFp8E4M3(-1000.f), -448.f);
  EXPECT_EQ(roundToFp8E4M3(1.0625f), 1.f);     // halfway between 1 and 1.125: ties to even
  EXPECT_EQ(roundToFp8E4M3(1.1875f), 1.25f);   // halfway between 1.125 and 1.25: ties to even (1.25)
  EXPECT_EQ(roundToFp8E4M3(0.001953125f), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(roundToFp8E4M3(0.0009765625f), 0.f);          // 2^-10 ties to even -> 0
  EXPECT_EQ(roundToFp8E4M3(232.f), 224.f);                // 232 is halfway between 224 and 240 -> 224 (even)
}

TEST(FakeQuant, Fp8E4M3BitsRoundTripEveryByte) {
  // Every finite byte decodes to a grid value that rounds to itself and encodes back to that byte
  // (the bytes of quantized.onnx's FLOAT8E4M3FN weights are exactly the simulated values).
  for (int b = 0; b < 256; ++b) {
    const uint8_t bits = (uint8_t)b;
    const float v = fp8E4M3Value(bits);
    if ((bits & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    EXPECT_EQ(roundToFp8E4M3(v), v) << b;
    EXPECT_EQ(fp8E4M3Bits(v), bits) << b << " value " << v;
  }
  EXPECT_EQ(fp8E4M3Value(0x7E), 448.f);
  EXPECT_EQ(fp8E4M3Value(0x01), 0.001953125f);
  EXPECT_EQ(fp8E4M3Bits(1000.f), 0x7E);   // saturates, no infinity
  EXPECT_EQ(fp8E4M3Bits(-1000.f), 0xFE);
  EXPECT_EQ(fp8E4M3Bits(1.0625f), 0x38);  // ties to even: 1.0
}

namespace {
// Runs QuantizeLinear -> DequantizeLinear through the executor's ONNX kernels.
Tensor runQdq(const Tensor& x, const std::vector<float>& scales, int axis) {
  OnnxBuilder b(13);
  std::vector<int64_t> dims(x.shape().begin(), x.shape().end());
  b.input("x", dims).output("y", dims);
  auto& sc = b.initializer("s", scales.size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{(int64_t)scales.size()}, scales);
  (void)sc;
  auto* zp = b.graph().add_initializer();
  zp->set_name("zp");
  zp->set_data_type(onnx::TensorProto::INT8);
  if (scales.size() > 1) zp->add_dims((int64_t)scales.size());
  zp->set_raw_data(std::string(scales.size(), '\0'));
  auto& q = b.node("QuantizeLinear", {"x", "s", "zp"}, {"q"}, "q");
  auto& d = b.node("DequantizeLinear", {"q", "s", "zp"}, {"y"}, "dq");
  if (scales.size() > 1) {
    OnnxBuilder::attrInt(q, "axis", axis);
    OnnxBuilder::attrInt(d, "axis", axis);
  }
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "qdq.onnx", "");
  EXPECT_TRUE(m) << m.status().message();
  auto ex = Executor::create(*m);
  EXPECT_TRUE(ex) << ex.status().message();
  auto out = (*ex)->run({{"x", x}});
  EXPECT_TRUE(out) << out.status().message();
  return (*out)[0];
}
}  // namespace

TEST(FakeQuant, BitIdenticalToQuantizeDequantizeKernels) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 3.f);
  Tensor x(DType::Float, {2, 4, 5, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g(rng);
  // Exact ties at .5 of the scale, too.
  for (int64_t i = 0; i < 20; ++i) x.data<float>()[i] = 0.05f * (float)(2 * i + 1);
  Tensor ref = runQdq(x, {0.1f}, 0);
  Tensor ours = fakeQuantize(x, {0.1f}, 0, QuantMode::Int8, kActQmin, kActQmax);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(ours.data<float>()[i], ref.data<float>()[i]) << i;

  std::vector<float> scales = {0.01f, 0.05f, 0.1f, 0.3f};
  Tensor refAxis = runQdq(x, scales, 1);
  Tensor oursAxis = fakeQuantize(x, scales, 1, QuantMode::Int8, kActQmin, kActQmax);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(oursAxis.data<float>()[i], refAxis.data<float>()[i]) << i;
}
