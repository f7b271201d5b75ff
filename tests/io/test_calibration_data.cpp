// Tests for core/io/calibration_data and core/io/image: batching of .npy/.npz data, image folders
// with their preprocessing, random inputs, and every validation error. Models and files are made
// in code.
#include "core/io/calibration_data.h"

#include <gtest/gtest.h>
#include <stb_image_write.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/io/image.h"
#include "core/io/npy.h"
#include "core/onnx/loader.h"
#include "tests/support/onnx_builder.h"

namespace fs = std::filesystem;
using namespace qs;
using qs::test::OnnxBuilder;

namespace {

class TempDir {
 public:
  TempDir() : m_path(qs::test::makeTempDir("caldata")) {}
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  std::string file(const std::string& name) const { return (fs::path(m_path) / name).string(); }
  std::string subdir(const std::string& name) const {
    fs::create_directories(file(name));
    return file(name);
  }

 private:
  std::string m_path;
};

/// x (dims; -1 = symbolic) -> Relu -> y.
std::shared_ptr<Model> singleInputModel(const std::vector<int64_t>& dims, int elemType = onnx::TensorProto::FLOAT) {
  OnnxBuilder b(13);
  b.input("x", dims, elemType).output("y", dims, elemType);
  b.node("Relu", {"x"}, {"y"}, "relu");
  const std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "single.onnx", "");
  EXPECT_TRUE(m) << m.status().message();
  return m ? m.value() : nullptr;
}

/// a[1,3,8,8] and b[1,4], each through a Relu.
std::shared_ptr<Model> twoInputModel() {
  OnnxBuilder b(13);
  b.input("a", {1, 3, 8, 8}).input("b", {1, 4}).output("ya", {1, 3, 8, 8}).output("yb", {1, 4});
  b.node("Relu", {"a"}, {"ya"}, "relu_a");
  b.node("Relu", {"b"}, {"yb"}, "relu_b");
  const std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "two.onnx", "");
  EXPECT_TRUE(m) << m.status().message();
  return m ? m.value() : nullptr;
}

/// Float tensor with element i = offset + i / 64 (distinct per sample, exact in float).
Tensor ramp(Shape shape, float offset = 0) {
  Tensor t(DType::Float, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = offset + (float)i / 64.0f;
  return t;
}

Result<std::unique_ptr<CalibrationData>> openData(const std::shared_ptr<Model>& m, const CalibrationDataOptions& o) {
  return CalibrationData::open(*m, o);
}

CalibrationDataOptions withPath(const std::string& path) {
  CalibrationDataOptions o;
  o.path = path;
  return o;
}

/// Expects failure with `code` and a message containing every one of `parts`.
template <class R>
void expectError(const R& r, StatusCode code, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.isOk()) << "expected an error containing '" << *parts.begin() << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().message();
  for (const auto& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message() << "\n  lacks: " << p;
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line: " << r.status().message();
}

bool anyWarningContains(const CalibrationData& d, const std::string& part) {
  for (const auto& w : d.warnings())
    if (w.find(part) != std::string::npos) return true;
  return false;
}

/// An image whose pixel (y, x) is (r, g, b) = (10x + 3, 20y + 5, 7 + x + y).
Image patternImage(int w, int h) {
  Image img;
  img.width = w;
  img.height = h;
  img.pixels.resize((size_t)w * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.pixels[((size_t)y * w + x) * 3];
      p[0] = (uint8_t)(10 * x + 3);
      p[1] = (uint8_t)(20 * y + 5);
      p[2] = (uint8_t)(7 + x + y);
    }
  return img;
}

Image flatImage(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  Image img;
  img.width = w;
  img.height = h;
  for (int i = 0; i < w * h; ++i) img.pixels.insert(img.pixels.end(), {r, g, b});
  return img;
}

/// A 24-bit bottom-up BMP written byte by byte, independent of the library under test.
void writeBmpByHand(const std::string& path, const Image& img) {
  const int rowBytes = (img.width * 3 + 3) & ~3;
  const uint32_t dataSize = (uint32_t)(rowBytes * img.height), fileSize = 54 + dataSize;
  std::string f(54, '\0');
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) f[at + (size_t)i] = (char)((v >> (8 * i)) & 0xff);
  };
  f[0] = 'B';
  f[1] = 'M';
  put32(2, fileSize);
  put32(10, 54);
  put32(14, 40);
  put32(18, (uint32_t)img.width);
  put32(22, (uint32_t)img.height);
  f[26] = 1;   // planes
  f[28] = 24;  // bits per pixel
  put32(34, dataSize);
  for (int y = img.height - 1; y >= 0; --y) {
    std::string row((size_t)rowBytes, '\0');
    for (int x = 0; x < img.width; ++x)
      for (int c = 0; c < 3; ++c) row[(size_t)x * 3 + (size_t)c] = (char)img.at(y, x, 2 - c);  // BGR
    f += row;
  }
  qs::test::writeBytes(path, f);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// .npy / .npz batching

TEST(CalDataNpy, StaticBatchOfOneFeedsEachSample) {
  TempDir dir;
  auto model = singleInputModel({1, 3, 8, 8});
  const Tensor data = ramp({5, 3, 8, 8});
  ASSERT_TRUE(writeNpy(dir.file("x.npy"), data).isOk());
  auto d = openData(model, withPath(dir.file("x.npy")));
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_FALSE(d.value()->isRandom());
  EXPECT_TRUE(d.value()->warnings().empty());
  EXPECT_EQ(d.value()->sampleCount(), 5);
  EXPECT_EQ(d.value()->batchSize(), 1);
  EXPECT_EQ(d.value()->batchCount(), 5);
  auto b = d.value()->batch(3);
  ASSERT_TRUE(b) << b.status().message();
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ(b.value()[0].name, "x");
  EXPECT_EQ(b.value()[0].tensor.shape(), (Shape{1, 3, 8, 8}));
  for (int64_t i = 0; i < 192; ++i) ASSERT_EQ(b.value()[0].tensor.data<float>()[i], data.data<float>()[3 * 192 + i]);
  expectError(d.value()->batch(5), StatusCode::InvalidArgument, {"batch 5 out of range (5 batches)"});
  expectError(d.value()->batch(-1), StatusCode::InvalidArgument, {"out of range"});

  // The feeds go straight into the executor.
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex) << ex.status().message();
  auto out = ex.value()->run(b.value());
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out.value()[0].data<float>()[191], data.data<float>()[3 * 192 + 191]);
}

TEST(CalDataNpy, DynamicBatchLastBatchSmaller) {
  TempDir dir;
  auto model = singleInputModel({-1, 3, 8, 8});
  const Tensor data = ramp({5, 3, 8, 8});
  ASSERT_TRUE(writeNpy(dir.file("x.npy"), data).isOk());
  CalibrationDataOptions o = withPath(dir.file("x.npy"));
  o.batchSize = 2;
  auto d = openData(model, o);
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d.value()->sampleCount(), 5);
  EXPECT_EQ(d.value()->batchCount(), 3);
  EXPECT_TRUE(d.value()->warnings().empty());
  auto b1 = d.value()->batch(1);
  ASSERT_TRUE(b1);
  EXPECT_EQ(b1.value()[0].tensor.shape(), (Shape{2, 3, 8, 8}));
  EXPECT_EQ(b1.value()[0].tensor.data<float>()[0], data.data<float>()[2 * 192]);
  auto b2 = d.value()->batch(2);
  ASSERT_TRUE(b2);
  EXPECT_EQ(b2.value()[0].tensor.shape(), (Shape{1, 3, 8, 8}));
  EXPECT_EQ(b2.value()[0].tensor.data<float>()[5], data.data<float>()[4 * 192 + 5]);

  // Default with a dynamic batch dim: one sample per batch.
  o.batchSize = 0;
  auto d1 = openData(model, o);
  ASSERT_TRUE(d1);
  EXPECT_EQ(d1.value()->batchSize(), 1);
  EXPECT_EQ(d1.value()->batchCount(), 5);

  // One batch covering every sample shares the loaded array: no copy.
  o.batchSize = 8;
  auto all = openData(model, o);
  ASSERT_TRUE(all);
  EXPECT_EQ(all.value()->batchCount(), 1);
  auto b = all.value()->batch(0);
  ASSERT_TRUE(b);
  EXPECT_EQ(b.value()[0].tensor.shape(), (Shape{5, 3, 8, 8}));
  auto again = all.value()->batch(0);
  EXPECT_TRUE(b.value()[0].tensor.sharesBufferWith(again.value()[0].tensor));

  o.batchSize = -3;
  expectError(openData(model, o), StatusCode::InvalidArgument, {"batch size must be positive", "-3"});
}

TEST(CalDataNpy, StaticBatchDropsRemainderAndRefusesOtherSizes) {
  TempDir dir;
  auto model = singleInputModel({2, 3, 8, 8});
  ASSERT_TRUE(writeNpy(dir.file("x5.npy"), ramp({5, 3, 8, 8})).isOk());
  auto d = openData(model, withPath(dir.file("x5.npy")));
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d.value()->sampleCount(), 4);
  EXPECT_EQ(d.value()->batchSize(), 2);
  EXPECT_EQ(d.value()->batchCount(), 2);
  ASSERT_EQ(d.value()->warnings().size(), 1u);
  EXPECT_TRUE(anyWarningContains(*d.value(), "5 samples are not a multiple of the fixed batch dim 2 of input 'x'; the last 1 are dropped"))
      << d.value()->warnings()[0];
  EXPECT_EQ(d.value()->batch(1).value()[0].tensor.shape(), (Shape{2, 3, 8, 8}));
  expectError(d.value()->batch(2), StatusCode::InvalidArgument, {"out of range"});

  CalibrationDataOptions o = withPath(dir.file("x5.npy"));
  o.batchSize = 4;
  expectError(openData(model, o), StatusCode::InvalidArgument,
              {dir.file("x5.npy"), "input 'x' has a fixed batch dim of 2", "calibration batch size 4 cannot be fed"});
  o.batchSize = 2;  // agreeing with the model is fine
  EXPECT_TRUE(openData(model, o));

  ASSERT_TRUE(writeNpy(dir.file("x1.npy"), ramp({1, 3, 8, 8})).isOk());
  expectError(openData(model, withPath(dir.file("x1.npy"))), StatusCode::InvalidArgument,
              {"1 samples are fewer than the fixed batch dim 2 of input 'x'"});
}

TEST(CalDataNpy, MaxSamplesLimitsTheCount) {
  TempDir dir;
  auto model = singleInputModel({1, 3, 8, 8});
  ASSERT_TRUE(writeNpy(dir.file("x.npy"), ramp({5, 3, 8, 8})).isOk());
  CalibrationDataOptions o = withPath(dir.file("x.npy"));
  o.maxSamples = 3;
  auto d = openData(model, o);
  ASSERT_TRUE(d);
  EXPECT_EQ(d.value()->sampleCount(), 3);
  EXPECT_EQ(d.value()->batchCount(), 3);
  o.maxSamples = 50;
  EXPECT_EQ(openData(model, o).value()->sampleCount(), 5);
  o.maxSamples = 0;
  expectError(openData(model, o), StatusCode::InvalidArgument, {"calibration size must be positive", "got 0"});
}

TEST(CalDataNpz, MultiInputFeedsInModelOrder) {
  TempDir dir;
  auto model = twoInputModel();
  const Tensor a = ramp({3, 3, 8, 8}), b = ramp({3, 4}, 100.0f);
  // Archive order differs from the model's input order; deflated like np.savez_compressed.
  ASSERT_TRUE(writeNpz(dir.file("d.npz"), {{"b", b}, {"a", a}}, true).isOk());
  auto d = openData(model, withPath(dir.file("d.npz")));
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d.value()->sampleCount(), 3);
  EXPECT_EQ(d.value()->batchCount(), 3);
  auto feeds = d.value()->batch(2);
  ASSERT_TRUE(feeds);
  ASSERT_EQ(feeds->size(), 2u);
  EXPECT_EQ(feeds.value()[0].name, "a");
  EXPECT_EQ(feeds.value()[1].name, "b");
  EXPECT_EQ(feeds.value()[0].tensor.shape(), (Shape{1, 3, 8, 8}));
  EXPECT_EQ(feeds.value()[1].tensor.shape(), (Shape{1, 4}));
  EXPECT_EQ(feeds.value()[0].tensor.data<float>()[7], a.data<float>()[2 * 192 + 7]);
  EXPECT_EQ(feeds.value()[1].tensor.data<float>()[3], b.data<float>()[2 * 4 + 3]);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex.value()->run(feeds.value()));
}

// ---------------------------------------------------------------------------------------------
// Validation: each error names the input, what was expected and what came.

TEST(CalDataValidation, UnknownAndMissingKeys) {
  TempDir dir;
  auto model = twoInputModel();
  ASSERT_TRUE(writeNpz(dir.file("extra.npz"), {{"a", ramp({2, 3, 8, 8})}, {"b", ramp({2, 4})}, {"c", ramp({2})}}, false).isOk());
  expectError(openData(model, withPath(dir.file("extra.npz"))), StatusCode::InvalidArgument,
              {dir.file("extra.npz"), "key 'c' is not an input of the model (inputs: 'a', 'b')"});
  ASSERT_TRUE(writeNpz(dir.file("missing.npz"), {{"a", ramp({2, 3, 8, 8})}}, false).isOk());
  expectError(openData(model, withPath(dir.file("missing.npz"))), StatusCode::InvalidArgument,
              {dir.file("missing.npz"), "no array for model input 'b' (keys present: 'a')"});
  ASSERT_TRUE(writeNpz(dir.file("empty.npz"), {}, false).isOk());
  expectError(openData(model, withPath(dir.file("empty.npz"))), StatusCode::InvalidArgument,
              {"no array for model input 'a' (keys present: none)"});
  ASSERT_TRUE(writeNpz(dir.file("counts.npz"), {{"a", ramp({2, 3, 8, 8})}, {"b", ramp({3, 4})}}, false).isOk());
  expectError(openData(model, withPath(dir.file("counts.npz"))), StatusCode::InvalidArgument,
              {"inputs 'a' and 'b' have different sample counts (2 and 3"});
  // An .npy cannot say which of two inputs it feeds.
  ASSERT_TRUE(writeNpy(dir.file("a.npy"), ramp({2, 3, 8, 8})).isOk());
  expectError(openData(model, withPath(dir.file("a.npy"))), StatusCode::InvalidArgument,
              {"an .npy file feeds a single-input model; this model has 2 inputs ('a', 'b')"});
}

TEST(CalDataValidation, RankShapeAndSymbolicDims) {
  TempDir dir;
  auto model = singleInputModel({1, 3, 8, 8});
  ASSERT_TRUE(writeNpy(dir.file("rank.npy"), ramp({3, 8, 8})).isOk());
  expectError(openData(model, withPath(dir.file("rank.npy"))), StatusCode::InvalidArgument,
              {dir.file("rank.npy"), "input 'x': expected rank 4", "got rank 3 shape [3,8,8]", "model input [1,3,8,8]"});
  ASSERT_TRUE(writeNpy(dir.file("dim.npy"), ramp({2, 3, 8, 7})).isOk());
  expectError(openData(model, withPath(dir.file("dim.npy"))), StatusCode::InvalidArgument,
              {"input 'x': dim 3 expected 8, got 7 (data shape [2,3,8,7], model input [1,3,8,8])"});
  ASSERT_TRUE(writeNpy(dir.file("zero.npy"), ramp({0, 3, 8, 8})).isOk());
  expectError(openData(model, withPath(dir.file("zero.npy"))), StatusCode::InvalidArgument,
              {"input 'x': zero samples (data shape [0,3,8,8])"});
  ASSERT_TRUE(writeNpy(dir.file("scalar.npy"), Tensor::scalar(1.0f)).isOk());
  expectError(openData(model, withPath(dir.file("scalar.npy"))), StatusCode::InvalidArgument,
              {"input 'x'", "got a scalar"});

  // Symbolic dims accept any size.
  auto symbolic = singleInputModel({-1, 3, -1, -1});
  ASSERT_TRUE(writeNpy(dir.file("any.npy"), ramp({2, 3, 5, 6})).isOk());
  auto d = openData(symbolic, withPath(dir.file("any.npy")));
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d.value()->batch(1).value()[0].tensor.shape(), (Shape{1, 3, 5, 6}));
  EXPECT_TRUE(openData(symbolic, withPath(dir.file("dim.npy"))));
}

TEST(CalDataValidation, DtypesConvertedOrRefused) {
  TempDir dir;
  auto model = singleInputModel({1, 4});
  Tensor i64(DType::Int64, {2, 4});
  for (int i = 0; i < 8; ++i) i64.data<int64_t>()[i] = i;
  ASSERT_TRUE(writeNpy(dir.file("i.npy"), i64).isOk());
  expectError(openData(model, withPath(dir.file("i.npy"))), StatusCode::InvalidArgument,
              {"input 'x': expected float data, got int64"});

  Tensor f64(DType::Double, {2, 4});
  for (int i = 0; i < 8; ++i) f64.data<double>()[i] = 0.25 * i;
  ASSERT_TRUE(writeNpy(dir.file("d.npy"), f64).isOk());
  auto d = openData(model, withPath(dir.file("d.npy")));
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_TRUE(anyWarningContains(*d.value(), "input 'x': float64 data converted to float32"));
  auto b = d.value()->batch(1);
  ASSERT_TRUE(b);
  EXPECT_EQ(b.value()[0].tensor.dtype(), DType::Float);
  EXPECT_EQ(b.value()[0].tensor.data<float>()[3], 0.25f * 7);

  f64.data<double>()[6] = 1e300;  // beyond float range
  ASSERT_TRUE(writeNpy(dir.file("big.npy"), f64).isOk());
  expectError(openData(model, withPath(dir.file("big.npy"))), StatusCode::InvalidArgument,
              {"input 'x'", "sample 1 is out of float32 range"});

  // float32 data for an int64 input is refused too.
  auto intModel = singleInputModel({1, 4}, onnx::TensorProto::INT64);
  ASSERT_TRUE(writeNpy(dir.file("f.npy"), ramp({2, 4})).isOk());
  expectError(openData(intModel, withPath(dir.file("f.npy"))), StatusCode::InvalidArgument,
              {"input 'x': expected int64 data, got float"});
  auto ok = openData(intModel, withPath(dir.file("i.npy")));
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ(ok.value()->batch(1).value()[0].tensor.data<int64_t>()[2], 6);
}

TEST(CalDataValidation, NanAndInfNameTheSample) {
  TempDir dir;
  auto model = singleInputModel({1, 3, 8, 8});
  Tensor t = ramp({4, 3, 8, 8});
  t.data<float>()[2 * 192 + 17] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(writeNpy(dir.file("nan.npy"), t).isOk());
  expectError(openData(model, withPath(dir.file("nan.npy"))), StatusCode::InvalidArgument,
              {dir.file("nan.npy"), "input 'x': NaN in sample 2 (element 17 of the sample)"});
  // Samples beyond the calibration size are never fed, so never checked.
  CalibrationDataOptions o = withPath(dir.file("nan.npy"));
  o.maxSamples = 2;
  EXPECT_TRUE(openData(model, o));

  Tensor u = ramp({4, 3, 8, 8});
  u.data<float>()[192 + 3] = -std::numeric_limits<float>::infinity();
  ASSERT_TRUE(writeNpz(dir.file("inf.npz"), {{"x", u}}, true).isOk());
  expectError(openData(model, withPath(dir.file("inf.npz"))), StatusCode::InvalidArgument,
              {"input 'x': Inf in sample 1"});

  Tensor d(DType::Double, {3, 3, 8, 8});
  for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] = 0.5;
  d.data<double>()[2 * 192] = std::numeric_limits<double>::quiet_NaN();
  ASSERT_TRUE(writeNpy(dir.file("dnan.npy"), d).isOk());
  expectError(openData(model, withPath(dir.file("dnan.npy"))), StatusCode::InvalidArgument, {"NaN in sample 2"});
}

TEST(CalDataValidation, PathsThatAreNotData) {
  TempDir dir;
  auto model = singleInputModel({1, 3, 8, 8});
  expectError(openData(model, withPath(dir.file("nope.npz"))), StatusCode::IoError, {dir.file("nope.npz"), "no such file"});
  qs::test::writeBytes(dir.file("data.csv"), "1,2,3\n");
  expectError(openData(model, withPath(dir.file("data.csv"))), StatusCode::InvalidArgument,
              {dir.file("data.csv"), "must be an .npz, an .npy or a folder of images"});
  qs::test::writeBytes(dir.file("bad.npy"), "not numpy");
  expectError(openData(model, withPath(dir.file("bad.npy"))), StatusCode::InvalidArgument, {dir.file("bad.npy")});
}

// ---------------------------------------------------------------------------------------------
// Images

TEST(CalDataImage, ReadWriteAndErrors) {
  TempDir dir;
  const Image img = patternImage(5, 4);
  for (const char* name : {"p.png", "p.bmp"}) {
    ASSERT_TRUE(writeImage(dir.file(name), img).isOk()) << name;
    auto back = readImage(dir.file(name));
    ASSERT_TRUE(back) << back.status().message();
    EXPECT_EQ(back->width, 5);
    EXPECT_EQ(back->height, 4);
    EXPECT_EQ(back->pixels, img.pixels) << name;  // lossless
  }
  writeBmpByHand(dir.file("hand.bmp"), img);
  auto hand = readImage(dir.file("hand.bmp"));
  ASSERT_TRUE(hand) << hand.status().message();
  EXPECT_EQ(hand->pixels, img.pixels);

  // JPEG is lossy: a flat colour comes back within a couple of levels.
  ASSERT_TRUE(writeImage(dir.file("flat.jpg"), flatImage(16, 16, 200, 100, 50)).isOk());
  auto jpg = readImage(dir.file("flat.jpg"));
  ASSERT_TRUE(jpg) << jpg.status().message();
  EXPECT_NEAR(jpg->at(8, 8, 0), 200, 3);
  EXPECT_NEAR(jpg->at(8, 8, 1), 100, 3);
  EXPECT_NEAR(jpg->at(8, 8, 2), 50, 3);

  expectError(readImage(dir.file("missing.png")), StatusCode::IoError, {dir.file("missing.png"), "cannot open"});
  qs::test::writeBytes(dir.file("junk.png"), "this is not an image at all");
  expectError(readImage(dir.file("junk.png")), StatusCode::InvalidArgument, {dir.file("junk.png"), "not a decodable"});
  qs::test::writeBytes(dir.file("empty.bmp"), "");
  expectError(readImage(dir.file("empty.bmp")), StatusCode::InvalidArgument, {dir.file("empty.bmp")});
  expectError(readImage(dir.file("p.png"), 10), StatusCode::ResourceLimit, {dir.file("p.png"), "5x4", "limit of 10"});
  EXPECT_EQ(writeImage(dir.file("x.tif"), img).code(), StatusCode::InvalidArgument);
  Image broken = img;
  broken.pixels.pop_back();
  EXPECT_EQ(writeImage(dir.file("b.png"), broken).code(), StatusCode::InvalidArgument);
}

// Grey, grey+alpha and RGBA files (libpng and libjpeg-turbo conversions): grey is replicated to
// R=G=B, alpha is dropped without compositing.
TEST(CalDataImage, GreyAndAlphaBecomeRgb) {
  TempDir dir;
  const int w = 6, h = 3;
  std::vector<uint8_t> grey(w * h), greyAlpha(w * h * 2), rgba(w * h * 4);
  for (int i = 0; i < w * h; ++i) {
    grey[i] = (uint8_t)(10 * i);
    greyAlpha[2 * i] = (uint8_t)(10 * i);
    greyAlpha[2 * i + 1] = (uint8_t)(i % 2 ? 0 : 255);
    for (int c = 0; c < 3; ++c) rgba[4 * i + c] = (uint8_t)(7 * i + c);
    rgba[4 * i + 3] = (uint8_t)(i * 13);
  }
  ASSERT_TRUE(stbi_write_png(dir.file("g.png").c_str(), w, h, 1, grey.data(), w));
  ASSERT_TRUE(stbi_write_png(dir.file("ga.png").c_str(), w, h, 2, greyAlpha.data(), w * 2));
  ASSERT_TRUE(stbi_write_png(dir.file("a.png").c_str(), w, h, 4, rgba.data(), w * 4));
  for (const char* name : {"g.png", "ga.png", "a.png"}) {
    auto img = readImage(dir.file(name));
    ASSERT_TRUE(img) << img.status().message();
    ASSERT_EQ(img->width, w);
    ASSERT_EQ(img->height, h);
    for (int i = 0; i < w * h; ++i) {
      for (int c = 0; c < 3; ++c) {
        const uint8_t expect = std::string(name) == "a.png" ? rgba[4 * i + c] : grey[i];
        ASSERT_EQ(img->pixels[3 * i + c], expect) << name << " pixel " << i << " channel " << c;
      }
    }
  }
  // A one-channel JPEG comes back as three equal channels.
  std::vector<uint8_t> flat(16 * 16, 120);
  ASSERT_TRUE(stbi_write_jpg(dir.file("g.jpg").c_str(), 16, 16, 1, flat.data(), 95));
  auto jpg = readImage(dir.file("g.jpg"));
  ASSERT_TRUE(jpg) << jpg.status().message();
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(jpg->at(5, 5, c), 120, 2);
  EXPECT_EQ(jpg->at(5, 5, 0), jpg->at(5, 5, 2));
  // The size comes from the header alone.
  int pw = 0, ph = 0;
  ASSERT_TRUE(probeImage(dir.file("g.jpg"), &pw, &ph));
  EXPECT_EQ(pw, 16);
  EXPECT_EQ(ph, 16);
}

TEST(CalDataImage, BilinearMatchesHalfPixelReference) {
  // 2x1 -> 4x1: sources at -0.25 (clamped), 0.25, 0.75, 1.25 (clamped): 0, 63.75, 191.25, 255.
  Image src = flatImage(2, 1, 0, 0, 0);
  src.pixels = {0, 0, 0, 255, 255, 255};
  const Image up = resizeBilinear(src, 4, 1);
  EXPECT_EQ(up.at(0, 0, 0), 0);
  EXPECT_EQ(up.at(0, 1, 0), 64);
  EXPECT_EQ(up.at(0, 2, 0), 191);
  EXPECT_EQ(up.at(0, 3, 0), 255);
  // 4x4 -> 2x2 averages each 2x2 block's centre (sources at 0.5, 2.5).
  const Image p = patternImage(4, 4);
  const Image down = resizeBilinear(p, 2, 2);
  EXPECT_EQ(down.at(1, 0, 0), 8);   // r = 10x+3 at x=0.5
  EXPECT_EQ(down.at(1, 0, 1), 55);  // g = 20y+5 at y=2.5
  EXPECT_EQ(down.at(1, 1, 2), 12);  // b = 7+x+y at 2.5,2.5
  EXPECT_EQ(resizeBilinear(p, 4, 4).pixels, p.pixels);
}

TEST(CalDataImages, NchwScaleMeanStdExact) {
  TempDir dir;
  const std::string folder = dir.subdir("imgs");
  const Image img = patternImage(8, 8);
  writeBmpByHand(folder + "/0.bmp", img);
  ASSERT_TRUE(writeImage(folder + "/1.png", flatImage(8, 8, 255, 0, 128)).isOk());
  auto model = singleInputModel({1, 3, 8, 8});
  CalibrationDataOptions o = withPath(folder);
  o.image.mean = {0.5f, 0.25f, 0.125f};
  o.image.std = {0.5f, 2.0f, 0.25f};
  auto d = openData(model, o);
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d.value()->sampleCount(), 2);
  EXPECT_EQ(d.value()->batchCount(), 2);
  auto b = d.value()->batch(0);
  ASSERT_TRUE(b) << b.status().message();
  const Tensor& t = b.value()[0].tensor;
  ASSERT_EQ(t.shape(), (Shape{1, 3, 8, 8}));
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        const float expect = ((float)img.at(y, x, c) / 255.0f - o.image.mean[(size_t)c]) / o.image.std[(size_t)c];
        ASSERT_NEAR(t.data<float>()[(c * 8 + y) * 8 + x], expect, 1e-6f) << c << "," << y << "," << x;
      }
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex.value()->run(b.value()));

  // Plain scale 1/255, RGB: the flat image's channels.
  auto plain = openData(model, withPath(folder));
  const Tensor p = plain.value()->batch(1).value()[0].tensor;
  EXPECT_FLOAT_EQ(p.data<float>()[0], 1.0f);
  EXPECT_FLOAT_EQ(p.data<float>()[64], 0.0f);
  EXPECT_FLOAT_EQ(p.data<float>()[128 + 63], 128.0f / 255.0f);
}

TEST(CalDataImages, BgrAndNhwc) {
  TempDir dir;
  const std::string folder = dir.subdir("imgs");
  ASSERT_TRUE(writeImage(folder + "/a.png", patternImage(8, 8)).isOk());
  const Image img = patternImage(8, 8);

  // BGR, NCHW, scale 1 and mean in BGR order.
  auto nchw = singleInputModel({1, 3, 8, 8});
  CalibrationDataOptions o = withPath(folder);
  o.image.bgr = true;
  o.image.scale = 1.0f;
  o.image.mean = {100.0f, 10.0f, 1.0f};
  auto d = openData(nchw, o);
  ASSERT_TRUE(d) << d.status().message();
  const Tensor t = d.value()->batch(0).value()[0].tensor;
  // Channel 0 is blue, channel 2 red.
  EXPECT_FLOAT_EQ(t.data<float>()[0 * 64 + 3 * 8 + 5], (float)img.at(3, 5, 2) - 100.0f);
  EXPECT_FLOAT_EQ(t.data<float>()[1 * 64 + 3 * 8 + 5], (float)img.at(3, 5, 1) - 10.0f);
  EXPECT_FLOAT_EQ(t.data<float>()[2 * 64 + 3 * 8 + 5], (float)img.at(3, 5, 0) - 1.0f);

  // NHWC model [N,8,8,3] with nhwc set.
  auto nhwc = singleInputModel({-1, 8, 8, 3});
  o = withPath(folder);
  o.image.nhwc = true;
  auto h = openData(nhwc, o);
  ASSERT_TRUE(h) << h.status().message();
  const Tensor u = h.value()->batch(0).value()[0].tensor;
  ASSERT_EQ(u.shape(), (Shape{1, 8, 8, 3}));
  for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(u.data<float>()[(3 * 8 + 5) * 3 + c], img.at(3, 5, c) / 255.0f);

  // The NHWC model without nhwc set: a hint, not garbage.
  expectError(openData(nhwc, withPath(folder)), StatusCode::InvalidArgument,
              {"input 'x': expected 3 channels at dim 1 for NCHW [N,3,H,W], the model input is [N,8,8,3]", "set nhwc"});
}

TEST(CalDataImages, FolderListingSortedFilteredAndLimited) {
  TempDir dir;
  const std::string folder = dir.subdir("imgs");
  writeBmpByHand(folder + "/b.BMP", flatImage(8, 8, 20, 20, 20));
  ASSERT_TRUE(writeImage(folder + "/a.png", flatImage(8, 8, 10, 10, 10)).isOk());
  ASSERT_TRUE(writeImage(folder + "/c.jpeg", flatImage(8, 8, 30, 30, 30)).isOk());
  ASSERT_TRUE(writeImage(folder + "/d.jpg", flatImage(8, 8, 40, 40, 40)).isOk());
  qs::test::writeBytes(folder + "/notes.txt", "not an image");
  fs::create_directories(folder + "/nested.png");  // a folder, not a file
  ASSERT_TRUE(writeImage(folder + "/nested.png/e.png", flatImage(8, 8, 50, 50, 50)).isOk());

  auto model = singleInputModel({-1, 3, 8, 8});
  CalibrationDataOptions o = withPath(folder);
  o.batchSize = 3;
  o.image.scale = 1.0f;
  auto d = openData(model, o);
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d.value()->sampleCount(), 4);
  EXPECT_EQ(d.value()->batchCount(), 2);
  const Tensor first = d.value()->batch(0).value()[0].tensor;
  ASSERT_EQ(first.shape(), (Shape{3, 3, 8, 8}));
  EXPECT_FLOAT_EQ(first.data<float>()[0], 10.0f);        // a.png
  EXPECT_FLOAT_EQ(first.data<float>()[192], 20.0f);      // b.BMP
  EXPECT_NEAR(first.data<float>()[2 * 192], 30.0f, 3);   // c.jpeg
  const Tensor last = d.value()->batch(1).value()[0].tensor;
  ASSERT_EQ(last.shape(), (Shape{1, 3, 8, 8}));
  EXPECT_NEAR(last.data<float>()[0], 40.0f, 3);           // d.jpg

  o.maxSamples = 2;
  auto two = openData(model, o);
  ASSERT_TRUE(two);
  EXPECT_EQ(two.value()->sampleCount(), 2);
  EXPECT_EQ(two.value()->batchCount(), 1);
  EXPECT_EQ(two.value()->batch(0).value()[0].tensor.shape(), (Shape{2, 3, 8, 8}));

  const std::string empty = dir.subdir("empty");
  qs::test::writeBytes(empty + "/readme.txt", "x");
  expectError(openData(model, withPath(empty)), StatusCode::InvalidArgument,
              {empty, "zero samples: no images (.png, .jpg, .jpeg, .bmp) in the folder"});
}

TEST(CalDataImages, ResizeToModelOrGivenSize) {
  TempDir dir;
  const std::string folder = dir.subdir("imgs");
  ASSERT_TRUE(writeImage(folder + "/big.png", patternImage(16, 12)).isOk());

  // Resized to the model's 8x8, bilinear.
  auto fixed = singleInputModel({1, 3, 8, 8});
  auto d = openData(fixed, withPath(folder));
  ASSERT_TRUE(d) << d.status().message();
  const Tensor t = d.value()->batch(0).value()[0].tensor;
  const Image ref = resizeBilinear(patternImage(16, 12), 8, 8);
  for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(t.data<float>()[c * 64 + 2 * 8 + 6], ref.at(2, 6, c) / 255.0f);

  // Symbolic H, W: a size must be given.
  auto symbolic = singleInputModel({-1, 3, -1, -1});
  expectError(openData(symbolic, withPath(folder)), StatusCode::InvalidArgument,
              {folder, "input 'x': dim 2 (height) of model input [N,3,N,N] is symbolic (N): give the image height"});
  CalibrationDataOptions o = withPath(folder);
  o.image.width = 10;
  o.image.height = 6;
  auto given = openData(symbolic, o);
  ASSERT_TRUE(given) << given.status().message();
  EXPECT_EQ(given.value()->batch(0).value()[0].tensor.shape(), (Shape{1, 3, 6, 10}));

  // A given size that contradicts the model's fixed dims.
  expectError(openData(fixed, o), StatusCode::InvalidArgument,
              {"input 'x': image height 6 given, but dim 2 of model input [1,3,8,8] is fixed at 8"});
  o.image.height = 8;
  o.image.std = {1, 0, 1};
  expectError(openData(fixed, o), StatusCode::InvalidArgument, {"std non-zero, got mean 0 and std 0 for channel 1"});
}

TEST(CalDataImages, BadImagesAndModels) {
  TempDir dir;
  const std::string folder = dir.subdir("imgs");
  ASSERT_TRUE(writeImage(folder + "/a.png", patternImage(8, 8)).isOk());
  qs::test::writeBytes(folder + "/b.jpg", "garbage, not a jpeg");
  auto model = singleInputModel({1, 3, 8, 8});
  // Caught at open, before anything runs.
  expectError(openData(model, withPath(folder)), StatusCode::InvalidArgument, {folder + "/b.jpg", "not a decodable"});

  // A header that reads but pixel data that does not: caught when the batch is made.
  const std::string trunc = dir.subdir("trunc");
  ASSERT_TRUE(writeImage(trunc + "/t.png", patternImage(8, 8)).isOk());
  {
    std::string bytes;
    {
      auto all = readImage(trunc + "/t.png");
      ASSERT_TRUE(all);
    }
    std::ifstream in(trunc + "/t.png", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
    bytes.resize(50);  // signature, IHDR and the start of IDAT's data
    qs::test::writeBytes(trunc + "/t.png", bytes);
  }
  auto d = openData(model, withPath(trunc));
  ASSERT_TRUE(d) << d.status().message();
  expectError(d.value()->batch(0), StatusCode::InvalidArgument, {trunc + "/t.png: corrupt or truncated 8x8 image data"});

  fs::remove(folder + "/b.jpg");
  expectError(openData(twoInputModel(), withPath(folder)), StatusCode::InvalidArgument,
              {"a folder of images feeds a single-input model; this model has 2 inputs ('a', 'b')"});
  expectError(openData(singleInputModel({1, 3, 8, 8}, onnx::TensorProto::INT64), withPath(folder)), StatusCode::InvalidArgument,
              {"input 'x': images feed float inputs, the model input is int64"});
  expectError(openData(singleInputModel({1, 3, 8}), withPath(folder)), StatusCode::InvalidArgument,
              {"input 'x': expected an image input NCHW [N,3,H,W], the model input is [1,3,8]"});
  expectError(openData(singleInputModel({1, 1, 8, 8}), withPath(folder)), StatusCode::InvalidArgument,
              {"expected 3 channels at dim 1", "[1,1,8,8]"});
}

// ---------------------------------------------------------------------------------------------
// Random inputs

TEST(CalDataRandom, SeededUniformWithLoudWarning) {
  auto model = singleInputModel({1, 3, 8, 8});
  CalibrationDataOptions o;
  auto d = openData(model, o);
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_TRUE(d.value()->isRandom());
  ASSERT_FALSE(d.value()->warnings().empty());
  EXPECT_EQ(d.value()->warnings()[0], "no calibration data: random inputs make the scales meaningless");
  EXPECT_EQ(d.value()->sampleCount(), 1);
  auto b = d.value()->batch(0);
  ASSERT_TRUE(b);
  const Tensor& t = b.value()[0].tensor;
  ASSERT_EQ(t.shape(), (Shape{1, 3, 8, 8}));
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.data<float>()[i];
    ASSERT_TRUE(v >= 0.0f && v < 1.0f) << v;
    sum += v;
  }
  EXPECT_NEAR(sum / (double)t.numel(), 0.5, 0.1);
  // Same seed, same numbers; another seed, other numbers.
  auto again = openData(model, o);
  EXPECT_EQ(again.value()->batch(0).value()[0].tensor.data<float>()[42], t.data<float>()[42]);
  o.seed = 7;
  auto other = openData(model, o);
  EXPECT_NE(other.value()->batch(0).value()[0].tensor.data<float>()[42], t.data<float>()[42]);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex.value()->run(b.value()));
}

TEST(CalDataRandom, CountsBatchesAndShapes) {
  auto dynamic = singleInputModel({-1, 3, 8, 8});
  CalibrationDataOptions o;
  o.maxSamples = 5;
  o.batchSize = 2;
  auto d = openData(dynamic, o);
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d.value()->sampleCount(), 5);
  EXPECT_EQ(d.value()->batchCount(), 3);
  EXPECT_EQ(d.value()->batch(2).value()[0].tensor.shape(), (Shape{1, 3, 8, 8}));
  // A sample's values do not depend on how samples are batched.
  o.batchSize = 1;
  auto one = openData(dynamic, o);
  const Tensor pair = d.value()->batch(1).value()[0].tensor;    // samples 2, 3
  const Tensor single = one.value()->batch(3).value()[0].tensor;  // sample 3
  for (int i = 0; i < 192; i += 17) EXPECT_EQ(pair.data<float>()[192 + i], single.data<float>()[i]);

  auto two = twoInputModel();
  CalibrationDataOptions r;
  r.maxSamples = 3;
  auto t = openData(two, r);
  ASSERT_TRUE(t);
  EXPECT_EQ(t.value()->batchCount(), 3);
  auto feeds = t.value()->batch(0);
  ASSERT_TRUE(feeds);
  EXPECT_EQ(feeds.value()[1].name, "b");
  EXPECT_EQ(feeds.value()[1].tensor.shape(), (Shape{1, 4}));

  expectError(openData(singleInputModel({1, 3, -1, -1}), CalibrationDataOptions{}), StatusCode::InvalidArgument,
              {"input 'x': dim 2 of [1,3,N,N] is symbolic", "need a fixed shape"});
  auto ints = openData(singleInputModel({1, 4}, onnx::TensorProto::INT64), CalibrationDataOptions{});
  ASSERT_TRUE(ints) << ints.status().message();
  EXPECT_TRUE(anyWarningContains(*ints.value(), "input 'x' (int64): random mode feeds zeros"));
}
