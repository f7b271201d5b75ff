// Tests of the signal, linear-algebra and integer kernels (core/kernels/signal.h, linalg.h,
// integer_ops.h) beyond the ONNX node suite: single-op models built in code, run by the
// executor and by ONNX Runtime (tests/support/ort_run.mjs) on the same seeded inputs, at sizes
// the suite does not cover (non-power-of-two DFTs, audio-sized mel filters, per-channel int8
// weights); and hostile inputs, each refused with a one-line reason.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/io/npy.h"
#include "core/kernels/signal.h"
#include "tests/support/ort_runner.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using test::OnnxBuilder;

constexpr int kF = onnx::TensorProto::FLOAT, kI64 = onnx::TensorProto::INT64, kU8 = onnx::TensorProto::UINT8,
              kI8 = onnx::TensorProto::INT8, kI32 = onnx::TensorProto::INT32;

/// One graph input: its name, ONNX element type and value.
struct Feed {
  std::string name;
  int elemType;
  Tensor value;
};

/// A single-node model over `feeds` with one output of rank `outRank` (dims left symbolic).
OnnxBuilder singleOp(int64_t opset, const std::string& op, const std::vector<Feed>& feeds, int outType, size_t outRank,
                     onnx::NodeProto** node = nullptr) {
  OnnxBuilder b(opset);
  std::vector<std::string> names;
  for (const Feed& f : feeds) {
    if (f.name.empty()) {  // an omitted optional input
      names.push_back("");
      continue;
    }
    b.input(f.name, f.value.shape(), f.elemType);
    names.push_back(f.name);
  }
  b.output("y", std::vector<int64_t>(outRank, -1), outType);
  onnx::NodeProto& n = b.node(op, names, {"y"}, "op");
  if (node) *node = &n;
  return b;
}

std::vector<NamedTensor> namedFeeds(const std::vector<Feed>& feeds) {
  std::vector<NamedTensor> v;
  for (const Feed& f : feeds)
    if (!f.name.empty()) v.push_back({f.name, f.value});
  return v;
}

/// Our output, with rewrites off and on (both must succeed and agree exactly).
Tensor runOurs(const OnnxBuilder& b, const std::vector<Feed>& feeds) {
  auto model = test::builtModel(b);
  if (!model) return {};
  Tensor first;
  for (bool rewrites : {false, true}) {
    ExecutorOptions eo;
    eo.threads = 2;
    eo.rewrites = rewrites;
    auto ex = Executor::create(model, eo);
    EXPECT_TRUE(ex) << ex.status().message();
    if (!ex) return {};
    auto out = (*ex)->run(namedFeeds(feeds));
    EXPECT_TRUE(out) << out.status().message();
    if (!out) return {};
    if (!rewrites) {
      first = (*out)[0];
    } else {
      EXPECT_EQ(first.shape(), (*out)[0].shape());
      EXPECT_EQ(0, std::memcmp(first.raw(), (*out)[0].raw(), first.byteSize())) << "rewrites changed the output";
    }
  }
  return first;
}

/// ONNX Runtime's output for the same model and feeds.
Tensor runOrt(const OnnxBuilder& b, const std::vector<Feed>& feeds) {
  std::vector<Tensor> inputs;
  for (const Feed& f : feeds)
    if (!f.name.empty()) inputs.push_back(f.value);
  std::vector<Tensor> outs = test::runOrt(b, inputs);
  EXPECT_FALSE(outs.empty());
  return outs.empty() ? Tensor() : outs[0];
}

/// Our float output against ONNX Runtime's: same shape, max |diff| <= 1e-3 of the largest |ref|
/// plus 1e-5 (ONNX Runtime sums its plain DFTs in float, we in double).
void expectFloatParity(const OnnxBuilder& b, const std::vector<Feed>& feeds, const Shape& expectShape) {
  Tensor ours = runOurs(b, feeds), ref = runOrt(b, feeds);
  ASSERT_FALSE(ours.empty());
  ASSERT_FALSE(ref.empty());
  ASSERT_EQ(ours.shape(), expectShape);
  ASSERT_EQ(ref.shape(), expectShape);
  ASSERT_EQ(ours.dtype(), DType::Float);
  double maxRef = 0, maxDiff = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    maxRef = std::max(maxRef, (double)std::fabs(ref.data<float>()[i]));
    maxDiff = std::max(maxDiff, (double)std::fabs(ours.data<float>()[i] - ref.data<float>()[i]));
  }
  EXPECT_GT(maxRef, 0.0) << "a reference of zeros proves nothing";
  EXPECT_LE(maxDiff, 1e-3 * maxRef + 1e-5) << "max |diff| " << maxDiff << " of max |ref| " << maxRef;
}

/// Integer outputs must match ONNX Runtime's exactly.
void expectExactParity(const OnnxBuilder& b, const std::vector<Feed>& feeds, const Shape& expectShape, DType dtype) {
  Tensor ours = runOurs(b, feeds), ref = runOrt(b, feeds);
  ASSERT_FALSE(ours.empty());
  ASSERT_FALSE(ref.empty());
  ASSERT_EQ(ours.shape(), expectShape);
  ASSERT_EQ(ref.shape(), expectShape);
  ASSERT_EQ(ours.dtype(), dtype);
  ASSERT_EQ(ref.dtype(), dtype);
  int64_t differ = 0, nonzero = 0, first = -1;
  double maxDiff = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double d = std::fabs(ours.valueAsDouble(i) - ref.valueAsDouble(i));
    if (d != 0 && first < 0) first = i;
    differ += d != 0;
    maxDiff = std::max(maxDiff, d);
    nonzero += ref.valueAsDouble(i) != 0;
  }
  EXPECT_EQ(differ, 0) << "of " << ref.numel() << " outputs; max |diff| " << maxDiff << ", first at " << first
                       << (first >= 0 ? ": ours " + std::to_string(ours.valueAsDouble(first)) + ", ONNX Runtime " +
                                            std::to_string(ref.valueAsDouble(first))
                                      : std::string());
  EXPECT_GT(nonzero, ref.numel() / 4) << "a mostly-zero reference proves little";
}

Tensor scalarI64(int64_t v) { return Tensor::scalar<int64_t>(v); }

template <class T>
Tensor randomInts(const Shape& s, std::mt19937& rng, int lo, int hi) {
  std::uniform_int_distribution<int> u(lo, hi);
  Tensor t(DTypeOf<T>::value, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = (T)u(rng);
  return t;
}

// ---------------------------------------------------------------- ORT parity
struct DftCase {
  const char* name;
  Shape shape;       // input
  int64_t length;    // dft_length, 0 for none
  int64_t inverse, onesided;
  Shape out;
};

class DftParity : public ::testing::TestWithParam<DftCase> {};

TEST_P(DftParity, MatchesOnnxRuntime) {
  const DftCase& c = GetParam();
  std::mt19937 rng(17);
  std::vector<Feed> feeds{{"x", kF, test::randomTensor(c.shape, rng)}};
  if (c.length) feeds.push_back({"n", kI64, scalarI64(c.length)});
  onnx::NodeProto* node = nullptr;
  OnnxBuilder b = singleOp(17, "DFT", feeds, kF, c.out.size(), &node);
  OnnxBuilder::attrInt(*node, "axis", 1);
  OnnxBuilder::attrInt(*node, "inverse", c.inverse);
  OnnxBuilder::attrInt(*node, "onesided", c.onesided);
  expectFloatParity(b, feeds, c.out);
}

INSTANTIATE_TEST_SUITE_P(
    NonPowerOfTwo, DftParity,
    ::testing::Values(DftCase{"real12", {3, 12, 1}, 0, 0, 0, {3, 12, 2}},
                      DftCase{"real12_onesided", {3, 12, 1}, 0, 0, 1, {3, 7, 2}},
                      DftCase{"complex12_inverse", {2, 12, 2}, 0, 1, 0, {2, 12, 2}},
                      DftCase{"real100_onesided", {2, 100, 1}, 0, 0, 1, {2, 51, 2}},
                      DftCase{"complex100_inverse", {2, 100, 2}, 0, 1, 0, {2, 100, 2}},
                      DftCase{"real100_padded_to_150", {2, 100, 1}, 150, 0, 0, {2, 150, 2}},
                      DftCase{"real100_truncated_to_90_onesided", {2, 100, 1}, 90, 0, 1, {2, 46, 2}},
                      DftCase{"complex_batch_axis1_of_3d", {2, 20, 3, 2}, 0, 0, 0, {2, 20, 3, 2}},
                      DftCase{"real256_radix2", {2, 256, 1}, 0, 0, 1, {2, 129, 2}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(DftOpset20, AxisInputMatchesOnnxRuntime) {
  std::mt19937 rng(20);
  // Transform the middle axis (length 30) of [2, 3, 30, 1] through the opset-20 axis input.
  std::vector<Feed> feeds{{"x", kF, test::randomTensor({2, 3, 30, 1}, rng)}, {"n", kI64, scalarI64(30)},
                          {"axis", kI64, scalarI64(-2)}};
  OnnxBuilder b = singleOp(20, "DFT", feeds, kF, 4);
  expectFloatParity(b, feeds, {2, 3, 30, 2});
}

TEST(StftParity, HannWindowFrameStepOnesided) {
  std::mt19937 rng(5);
  // HannWindow(size 24) feeding STFT's window: 100 samples, frames of 24 every 10 -> 8 frames.
  OnnxBuilder b(17);
  b.input("signal", {2, 100, 1}, kF).input("size", {}, kI64).input("step", {}, kI64).output("y", {-1, -1, -1, -1}, kF);
  b.node("HannWindow", {"size"}, {"window"}, "hann");
  onnx::NodeProto& n = b.node("STFT", {"signal", "step", "window"}, {"y"}, "stft");
  OnnxBuilder::attrInt(n, "onesided", 1);
  std::vector<Feed> feeds{{"signal", kF, test::randomTensor({2, 100, 1}, rng)},
                          {"size", kI64, scalarI64(24)},
                          {"step", kI64, scalarI64(10)}};
  expectFloatParity(b, feeds, {2, 8, 13, 2});
}

TEST(MelWeightMatrixParity, AudioSizes) {
  // 40 mel bins over a 512-point DFT at 16 kHz, 20 Hz to 8 kHz: a typical speech front end.
  std::vector<Feed> feeds{{"bins", kI64, scalarI64(40)},        {"dft", kI64, scalarI64(512)},
                          {"rate", kI64, scalarI64(16000)},     {"lo", kF, Tensor::scalar<float>(20.f)},
                          {"hi", kF, Tensor::scalar<float>(8000.f)}};
  OnnxBuilder b = singleOp(17, "MelWeightMatrix", feeds, kF, 2);
  expectFloatParity(b, feeds, {257, 40});
}

TEST(DetParity, BatchesOf3x3And5x5) {
  std::mt19937 rng(3);
  for (int64_t m : {3, 5}) {
    std::vector<Feed> feeds{{"x", kF, test::randomTensor({4, m, m}, rng)}};
    OnnxBuilder b = singleOp(17, "Det", feeds, kF, 1);
    expectFloatParity(b, feeds, {4});
  }
}

TEST(QLinearConvParity, PerChannelInt8Weights) {
  std::mt19937 rng(7);
  const int64_t M = 6;
  std::vector<float> wScale((size_t)M);
  for (int64_t m = 0; m < M; ++m) wScale[(size_t)m] = 0.002f * (float)(m + 1);
  std::vector<Feed> feeds{
      {"x", kU8, randomInts<uint8_t>({2, 4, 9, 9}, rng, 0, 255)},
      {"xs", kF, Tensor::scalar<float>(0.02f)},
      {"xz", kU8, Tensor::scalar<uint8_t>(128)},
      // 7-bit weights: ONNX Runtime's u8 x s8 kernels without VNNI add pairs of products in
      // saturating int16 (vpmaddubsw), so full-range weights would test its overflow, not ours.
      {"w", kI8, randomInts<int8_t>({M, 4, 3, 3}, rng, -63, 63)},
      {"ws", kF, Tensor::fromVector<float>(wScale, {M})},
      {"wz", kI8, Tensor::fromVector<int8_t>(std::vector<int8_t>((size_t)M, 0), {M})},
      {"ys", kF, Tensor::scalar<float>(0.05f)},
      {"yz", kU8, Tensor::scalar<uint8_t>(120)},
      {"bias", kI32, randomInts<int32_t>({M}, rng, -2000, 2000)},
  };
  onnx::NodeProto* node = nullptr;
  OnnxBuilder b = singleOp(13, "QLinearConv", feeds, kU8, 4, &node);
  OnnxBuilder::attrInts(*node, "pads", {1, 1, 1, 1});
  OnnxBuilder::attrInts(*node, "strides", {2, 1});
  expectExactParity(b, feeds, {2, M, 5, 9}, DType::UInt8);
}

TEST(MatMulIntegerParity, ZeroPoints) {
  std::mt19937 rng(11);
  std::vector<Feed> feeds{
      {"a", kU8, randomInts<uint8_t>({2, 5, 7}, rng, 0, 255)},
      {"b", kU8, randomInts<uint8_t>({7, 6}, rng, 0, 255)},
      {"az", kU8, Tensor::scalar<uint8_t>(131)},
      {"bz", kU8, randomInts<uint8_t>({6}, rng, 100, 150)},
  };
  OnnxBuilder b = singleOp(13, "MatMulInteger", feeds, kI32, 3);
  expectExactParity(b, feeds, {2, 5, 6}, DType::Int32);
}

TEST(QLinearMatMulParity, Int8) {
  std::mt19937 rng(13);
  std::vector<Feed> feeds{
      {"a", kI8, randomInts<int8_t>({3, 4, 16}, rng, -128, 127)}, {"as", kF, Tensor::scalar<float>(0.03f)},
      {"az", kI8, Tensor::scalar<int8_t>(-3)},                    {"b", kI8, randomInts<int8_t>({16, 5}, rng, -128, 127)},
      {"bs", kF, Tensor::scalar<float>(0.01f)},                   {"bz", kI8, Tensor::scalar<int8_t>(2)},
      {"ys", kF, Tensor::scalar<float>(0.2f)},                    {"yz", kI8, Tensor::scalar<int8_t>(1)},
  };
  OnnxBuilder b = singleOp(13, "QLinearMatMul", feeds, kI8, 3);
  expectExactParity(b, feeds, {3, 4, 5}, DType::Int8);
}

// ---------------------------------------------------------------- naive references
// Per-channel weight zero points that are not zero (ONNX Runtime wants zero ones for int8
// weights), against the defining sum.
TEST(ConvInteger, PerChannelZeroPointsMatchNaiveSum) {
  std::mt19937 rng(23);
  const int64_t N = 1, C = 4, H = 6, W = 5, M = 4, G = 2, K = 3;
  Tensor x = randomInts<uint8_t>({N, C, H, W}, rng, 0, 255);
  Tensor w = randomInts<int8_t>({M, C / G, K, K}, rng, -128, 127);
  Tensor wz = randomInts<int8_t>({M}, rng, -5, 5);
  const uint8_t xz = 17;
  std::vector<Feed> feeds{{"x", kU8, x}, {"w", kI8, w}, {"xz", kU8, Tensor::scalar<uint8_t>(xz)}, {"wz", kI8, wz}};
  onnx::NodeProto* node = nullptr;
  OnnxBuilder b = singleOp(13, "ConvInteger", feeds, kI32, 4, &node);
  OnnxBuilder::attrInt(*node, "group", G);
  OnnxBuilder::attrInts(*node, "pads", {1, 0, 1, 0});
  Tensor y = runOurs(b, feeds);
  ASSERT_EQ(y.shape(), (Shape{N, M, H, W - 2}));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t oh = 0; oh < H; ++oh)
      for (int64_t ow = 0; ow < W - 2; ++ow) {
        int64_t acc = 0;
        const int64_t grp = m / (M / G);
        for (int64_t c = 0; c < C / G; ++c)
          for (int64_t kh = 0; kh < K; ++kh)
            for (int64_t kw = 0; kw < K; ++kw) {
              const int64_t ih = oh - 1 + kh, iw = ow + kw;
              const int64_t xv = ih < 0 || ih >= H ? xz : x.data<uint8_t>()[((grp * (C / G) + c) * H + ih) * W + iw];
              acc += (xv - xz) * ((int64_t)w.data<int8_t>()[((m * (C / G) + c) * K + kh) * K + kw] - wz.data<int8_t>()[m]);
            }
        ASSERT_EQ(y.data<int32_t>()[(m * H + oh) * (W - 2) + ow], acc) << "m " << m << " at " << oh << "," << ow;
      }
}

// Long non-power-of-two lengths go through Bluestein; its result must be the plain sum's.
TEST(FftPlan, BluesteinMatchesPlainSum) {
  for (int64_t n : {65, 100, 243, 1000}) {
    std::mt19937 rng((unsigned)n);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<std::complex<double>> x((size_t)n), ref((size_t)n), scratch;
    for (auto& v : x) v = {u(rng), u(rng)};
    for (bool inverse : {false, true}) {
      for (int64_t k = 0; k < n; ++k) {
        std::complex<double> s = 0;
        for (int64_t j = 0; j < n; ++j)
          s += x[(size_t)j] * std::polar(1.0, (inverse ? 2 : -2) * std::numbers::pi * (double)((j * k) % n) / (double)n);
        ref[(size_t)k] = s;
      }
      auto y = x;
      FftPlan(n, inverse).run(y.data(), scratch);
      double err = 0;
      for (int64_t k = 0; k < n; ++k) err = std::max(err, std::abs(y[(size_t)k] - ref[(size_t)k]));
      EXPECT_LT(err, 1e-9 * (double)n) << "n " << n << (inverse ? " inverse" : "");
    }
  }
}

// ---------------------------------------------------------------- hostile inputs
/// Loads and runs the model; the run (or the load) must fail with `expected` in its message.
void expectRunError(const OnnxBuilder& b, const std::vector<Feed>& feeds, const std::string& expected) {
  auto model = test::builtModel(b);
  ASSERT_TRUE(model);
  ExecutorOptions eo;
  eo.threads = 1;
  auto ex = Executor::create(model, eo);
  Status st = ex ? (*ex)->run(namedFeeds(feeds)).status() : ex.status();
  ASSERT_FALSE(st.isOk()) << "expected an error containing: " << expected;
  EXPECT_NE(st.message().find(expected), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << "one line: " << st.message();
}

TEST(SignalErrors, DftLastDimOf3) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{{"x", kF, test::randomTensor({2, 8, 3}, rng)}};
  expectRunError(singleOp(17, "DFT", feeds, kF, 3), feeds, "last dim must be 1 (real) or 2 (complex), got shape [2,8,3]");
}

TEST(SignalErrors, DftLengthOf2Pow40) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{{"x", kF, test::randomTensor({1, 8, 1}, rng)}, {"n", kI64, scalarI64(int64_t(1) << 40)}};
  expectRunError(singleOp(17, "DFT", feeds, kF, 3), feeds, "dft_length 1099511627776 exceeds the limit of 1048576");
}

TEST(SignalErrors, DftAxisOnComponents) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{{"x", kF, test::randomTensor({1, 8, 2}, rng)}, {"", kF, {}}, {"axis", kI64, scalarI64(-1)}};
  expectRunError(singleOp(20, "DFT", feeds, kF, 3), feeds, "axis -1 is out of range for input shape [1,8,2]");
}

TEST(SignalErrors, StftFrameLongerThanSignal) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{{"x", kF, test::randomTensor({1, 16, 1}, rng)}, {"step", kI64, scalarI64(4)},
                          {"", kF, {}}, {"len", kI64, scalarI64(32)}};
  expectRunError(singleOp(17, "STFT", feeds, kF, 4), feeds, "frame_length 32 is larger than the signal length 16");
}

TEST(SignalErrors, StftZeroFrameStep) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{{"x", kF, test::randomTensor({1, 16, 1}, rng)}, {"step", kI64, scalarI64(0)}};
  expectRunError(singleOp(17, "STFT", feeds, kF, 4), feeds, "frame_step must be positive, got 0");
}

TEST(SignalErrors, StftWindowOfOtherLength) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{{"x", kF, test::randomTensor({1, 16, 1}, rng)}, {"step", kI64, scalarI64(4)},
                          {"w", kF, test::randomTensor({6}, rng)}, {"len", kI64, scalarI64(8)}};
  expectRunError(singleOp(17, "STFT", feeds, kF, 4), feeds, "window has 6 values but frame_length is 8");
}

TEST(SignalErrors, WindowSizeNegative) {
  std::vector<Feed> feeds{{"size", kI64, scalarI64(-4)}};
  expectRunError(singleOp(17, "HannWindow", feeds, kF, 1), feeds, "window size must not be negative, got -4");
}

TEST(SignalErrors, WindowSize2Pow40) {
  std::vector<Feed> feeds{{"size", kI64, scalarI64(int64_t(1) << 40)}};
  expectRunError(singleOp(17, "BlackmanWindow", feeds, kF, 1), feeds,
                 "window size 1099511627776 exceeds the limit of 1048576");
}

TEST(SignalErrors, WindowOutputDatatypeAtLoad) {
  std::vector<Feed> feeds{{"size", kI64, scalarI64(8)}};
  onnx::NodeProto* node = nullptr;
  OnnxBuilder b = singleOp(17, "HammingWindow", feeds, kF, 1, &node);
  OnnxBuilder::attrInt(*node, "output_datatype", 8);  // string
  expectRunError(b, feeds, "attribute 'output_datatype' 8 is not a supported numeric type");
}

TEST(SignalErrors, MelUpperEdgeBeyondNyquist) {
  std::vector<Feed> feeds{{"bins", kI64, scalarI64(10)},   {"dft", kI64, scalarI64(64)},
                          {"rate", kI64, scalarI64(8000)}, {"lo", kF, Tensor::scalar<float>(0.f)},
                          {"hi", kF, Tensor::scalar<float>(1e9f)}};
  expectRunError(singleOp(17, "MelWeightMatrix", feeds, kF, 2), feeds, "keep it at or below sample_rate / 2");
}

TEST(SignalErrors, DetNonSquare) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{{"x", kF, test::randomTensor({2, 3, 4}, rng)}};
  expectRunError(singleOp(17, "Det", feeds, kF, 1), feeds, "Det needs square matrices [*, M, M], got shape [2,3,4]");
}

TEST(SignalErrors, QLinearConvZeroPointOfWrongShape) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{
      {"x", kU8, randomInts<uint8_t>({1, 2, 5, 5}, rng, 0, 255)},
      {"xs", kF, Tensor::scalar<float>(0.1f)},
      {"xz", kU8, Tensor::scalar<uint8_t>(0)},
      {"w", kI8, randomInts<int8_t>({3, 2, 3, 3}, rng, -10, 10)},
      {"ws", kF, Tensor::scalar<float>(0.1f)},
      {"wz", kI8, Tensor::fromVector<int8_t>({0, 0}, {2})},  // 2 values for 3 output channels
      {"ys", kF, Tensor::scalar<float>(0.1f)},
      {"yz", kU8, Tensor::scalar<uint8_t>(0)},
  };
  expectRunError(singleOp(13, "QLinearConv", feeds, kU8, 4), feeds,
                 "w_zero_point has shape [2], expected a scalar or [3]");
}

TEST(SignalErrors, ConvIntegerHugePadsRefused) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{{"x", kU8, randomInts<uint8_t>({1, 1, 4, 4}, rng, 0, 255)},
                          {"w", kU8, randomInts<uint8_t>({2, 1, 1, 1}, rng, 0, 255)}};
  onnx::NodeProto* node = nullptr;
  OnnxBuilder b = singleOp(13, "ConvInteger", feeds, kI32, 4, &node);
  OnnxBuilder::attrInts(*node, "pads", {100000, 100000, 100000, 100000});
  expectRunError(b, feeds, "ConvInteger: output shape [1,2,200004,200004] has more than 268435456 elements");
}

TEST(SignalErrors, QLinearConvInfiniteMultiplier) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{
      {"x", kU8, randomInts<uint8_t>({1, 1, 3, 3}, rng, 0, 255)}, {"xs", kF, Tensor::scalar<float>(1e30f)},
      {"xz", kU8, Tensor::scalar<uint8_t>(0)},                    {"w", kU8, randomInts<uint8_t>({1, 1, 1, 1}, rng, 0, 255)},
      {"ws", kF, Tensor::scalar<float>(1e30f)},                   {"wz", kU8, Tensor::scalar<uint8_t>(0)},
      {"ys", kF, Tensor::scalar<float>(1e-30f)},                  {"yz", kU8, Tensor::scalar<uint8_t>(0)},
  };
  expectRunError(singleOp(13, "QLinearConv", feeds, kU8, 4), feeds, "requantization multiplier");
}

TEST(SignalErrors, QLinearMatMulZeroScale) {
  std::mt19937 rng(1);
  std::vector<Feed> feeds{
      {"a", kU8, randomInts<uint8_t>({2, 3}, rng, 0, 255)}, {"as", kF, Tensor::scalar<float>(0.1f)},
      {"az", kU8, Tensor::scalar<uint8_t>(0)},               {"b", kU8, randomInts<uint8_t>({3, 2}, rng, 0, 255)},
      {"bs", kF, Tensor::scalar<float>(0.1f)},               {"bz", kU8, Tensor::scalar<uint8_t>(0)},
      {"ys", kF, Tensor::scalar<float>(0.f)},                {"yz", kU8, Tensor::scalar<uint8_t>(0)},
  };
  expectRunError(singleOp(13, "QLinearMatMul", feeds, kU8, 2), feeds, "y_scale must be positive and finite");
}

}  // namespace
}  // namespace qs
