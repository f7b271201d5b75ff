// Regression tests for what fuzzing (tests/fuzz, docs/reliability.md) found in the readers, and
// for the size limits of issue 6: every input here once crashed, tripped a sanitizer or allocated
// what its data did not back. Each builds the offending input in code and asserts the one-line
// error. Runs in the normal unit tests and, under ASan+UBSan, as qs_fuzz_regressions in the
// -DQS_FUZZ=ON build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/exec/kernel_registry.h"
#include "core/io/image.h"
#include "core/onnx/loader.h"
#include "core/export/quant_files.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;
namespace fs = std::filesystem;

namespace {

void expectOneLine(const Status& st, StatusCode code, const std::string& mustContain) {
  EXPECT_EQ(st.code(), code) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(mustContain), std::string::npos) << st.message();
}

// The executor's verdict on `model`: the creation error, or else the run's.
Status createAndRun(const std::shared_ptr<Model>& model, const std::vector<NamedTensor>& feeds) {
  static const KernelRegistry registry = KernelRegistry::builtin();
  ExecutorOptions eo;
  eo.registry = &registry;
  auto ex = Executor::create(model, eo);
  if (!ex) return ex.status();
  return (*ex)->run(feeds).status();
}

// x[1] -> Add(x, w) -> y with w an initializer the caller shapes.
OnnxBuilder addWeight() {
  OnnxBuilder b(13);
  b.input("x", {1}).output("y", {1});
  b.initializer("w", {1}, {1.f});
  b.node("Add", {"x", "w"}, {"y"}, "add");
  return b;
}

// 2^44 floats: 64 TiB, below the 128 TiB limit the tests set, beyond any allocator.
constexpr int64_t kHugeElems = int64_t(1) << 44;
constexpr uint64_t kHugeLimit = uint64_t(1) << 47;

struct TempDir {
  std::string path = qs::test::makeTempDir("fuzzreg");
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

// ---- limits (issue 6): a declared size is checked before anything is allocated ------------------

// A tensor within the size limit whose typed field (float_data) holds fewer elements than its dims
// declare was allocated before the count was compared: 64 TiB from a 60-byte file.
TEST(FuzzRegressions, TypedDataShorterThanDimsRefusedBeforeAllocation) {
  auto b = addWeight();
  auto* w = b.graph().mutable_initializer(0);
  w->clear_raw_data();
  w->clear_dims();
  w->add_dims(kHugeElems);
  w->add_float_data(1.f);
  std::string bytes = b.bytes();
  LoadOptions lo;
  lo.maxTensorBytes = kHugeLimit;
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "typed.onnx", "", lo);
  expectOneLine(m.status(), StatusCode::InvalidModel,
                "typed.onnx: initializer: tensor 'w' dims [17592186044416] need 17592186044416 elements");
  expectOneLine(m.status(), StatusCode::InvalidModel, "but it holds 1 elements");
}

// The same for external data: the file's size is checked before the tensor is allocated.
TEST(FuzzRegressions, ExternalDataShorterThanDimsRefusedBeforeAllocation) {
  TempDir d;
  qs::test::writeBytes(d.path + "/w.bin", "abcd");
  auto b = addWeight();
  auto* w = b.graph().mutable_initializer(0);
  w->clear_raw_data();
  w->clear_dims();
  w->add_dims(kHugeElems);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = w->add_external_data();
  kv->set_key("location");
  kv->set_value("w.bin");
  b.save(d.path + "/m.onnx");
  LoadOptions lo;
  lo.maxTensorBytes = kHugeLimit;
  auto m = loadModel(d.path + "/m.onnx", lo);
  expectOneLine(m.status(), StatusCode::InvalidModel, "tensor 'w' external data range [0, +70368744177664) is beyond the end");
}

// Tensors in attributes (a Constant node's value) and serialized TensorProtos go through the same
// limit as initializers.
TEST(FuzzRegressions, AttributeTensorBeyondTheLimitIsRefused) {
  OnnxBuilder b(13);
  b.input("x", {1}).output("y", {1});
  auto& c = b.node("Constant", {}, {"k"}, "big_constant");
  auto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(int64_t(1) << 30);
  b.node("Add", {"x", "k"}, {"y"}, "add");
  std::string bytes = b.bytes();
  LoadOptions lo;
  lo.maxTensorBytes = uint64_t(64) << 20;
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "attr.onnx", "", lo);
  expectOneLine(m.status(), StatusCode::ResourceLimit,
                "attr.onnx: node 'big_constant' (Constant): attribute 'value': tensor '' declares [1073741824] (4.0 GiB), "
                "beyond the limit of 64.0 MiB");

  onnx::TensorProto tp;
  tp.set_name("t");
  tp.set_data_type(onnx::TensorProto::FLOAT);
  tp.add_dims(int64_t(1) << 30);
  std::string tb = tp.SerializeAsString();
  auto t = parseTensorProto(tb.data(), tb.size(), "input_0.pb", lo);
  expectOneLine(t.status(), StatusCode::ResourceLimit, "input_0.pb: tensor: tensor 't' declares [1073741824] (4.0 GiB)");
}

// Protobuf parsing is bounded: the loader sets a recursion limit of 64 messages, so a model that
// nests subgraphs (If/Loop bodies) thousands deep is refused instead of overflowing the stack
// in protobuf or ONNX's shape inference. 15 levels (47 messages deep) are still accepted.
TEST(FuzzRegressions, DeeplyNestedSubgraphsAreRefusedByTheParser) {
  auto nested = [](int depth) {
    OnnxBuilder b(13);
    b.input("c", {1}, onnx::TensorProto::BOOL).output("y", {1});
    auto& top = b.node("If", {"c"}, {"y"}, "if0");
    onnx::NodeProto* node = &top;
    for (int i = 0; i < depth; ++i) {
      auto* a = node->add_attribute();
      a->set_name("then_branch");
      a->set_type(onnx::AttributeProto::GRAPH);
      auto* g = a->mutable_g();
      // Appended rather than `"y" + std::to_string(i)`: GCC 12 warns falsely on that (-Wrestrict, GCC PR 105651).
      const std::string index = std::to_string(i);
      g->set_name(std::string("body").append(index));
      node = g->add_node();
      node->set_op_type("If");
      node->add_input("c");
      node->add_output(std::string("y").append(index));
    }
    return b.bytes();
  };
  LoadOptions lo;
  lo.inferShapes = false;
  std::string deep = nested(5000);
  auto m = loadModelFromBytes(deep.data(), deep.size(), "deep.onnx", "", lo);
  expectOneLine(m.status(), StatusCode::InvalidModel, "deep.onnx: not a valid ONNX model (protobuf parsing failed");
  std::string ok = nested(15);
  auto m2 = loadModelFromBytes(ok.data(), ok.size(), "nested.onnx", "", lo);
  EXPECT_TRUE(m2) << m2.status().message();
}

// fuzz_model (CI of 3a5dbdc): ONNX 1.12's Conv shape inference took the kernel from W's dims when
// kernel_shape was absent and indexed X's dims, strides and dilations by it, so a W of higher rank
// than X read past them (ASan SEGV in onnx::convPoolShapeInference). The loader's schema registry
// (core/onnx/shape_inference_guard.cpp) refuses such a node in inference; the model still loads,
// the shapes stay unknown, and creating or running the executor refuses the node with one line
// (ConvInteger has no kernel; the others fail on the shapes when they run).
TEST(FuzzRegressions, ConvWeightOfHigherRankThanItsInputIsRefusedNotInferred) {
  struct Case {
    const char* op;
    std::vector<std::string> inputs;
  };
  const Case cases[] = {
      {"Conv", {"x", "w"}},
      {"ConvTranspose", {"x", "w"}},
      {"ConvInteger", {"xi", "wi"}},
      {"QLinearConv", {"xi", "s", "z", "wi", "s", "z", "s", "z"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    OnnxBuilder b(13);
    b.input("x", {1, 1, 4, 4}).output("y", {});
    // The op writes c, which nothing declares: only inference could give it a shape.
    // Rank 12 rather than 5: the over-read then reaches far beyond X's four dims.
    const std::vector<int64_t> wDims(12, 1);
    b.initializer("w", wDims, {1.f});
    b.initializerInt64("one", {}, {1});
    auto& xi = b.node("Cast", {"x"}, {"xi"}, "cast_x");
    auto* to = xi.add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(onnx::TensorProto::UINT8);
    auto& wi = b.node("Cast", {"w"}, {"wi"}, "cast_w");
    auto* to2 = wi.add_attribute();
    to2->CopyFrom(*to);
    b.initializer("s", {}, {1.f});
    auto& z = b.node("Cast", {"one"}, {"z"}, "cast_z");
    z.add_attribute()->CopyFrom(*to);
    b.node(c.op, c.inputs, {"c"}, "conv");
    b.node("Identity", {"c"}, {"y"}, "out");
    std::string bytes = b.bytes();
    auto m = loadModelFromBytes(bytes.data(), bytes.size(), "conv.onnx", "", LoadOptions{});
    ASSERT_TRUE(m) << m.status().message();
    // The guard refuses the node inside inference; without it the child process would crash.
    EXPECT_EQ((*m)->shapeInference, "done");
    const Graph& g = (*m)->graph;
    EXPECT_FALSE(g.value(g.findValue("c")).shape.has_value()) << "no shape can be inferred for c";
    ASSERT_TRUE(g.value(g.findValue("xi")).shape.has_value()) << "the other nodes keep their inferred shapes";
    EXPECT_EQ(g.value(g.findValue("xi")).shape->size(), 4u);
    Tensor x(DType::Float, {1, 1, 4, 4});
    std::fill_n(x.data<float>(), 16, 0.5f);
    Status st = createAndRun(*m, {NamedTensor{"x", x}});
    ASSERT_FALSE(st.isOk());
    expectOneLine(st, st.code(), "'conv'");
  }
}

// Beyond the Conv family, libonnx 1.12's inference crashes on more hostile nodes (a random search
// of single-node models found GatherND with a negative batch_dims and STFT; ONNX's tracker lists
// Gemm and others). So inference runs in a child process: the crash is the child's, the model
// loads without inferred shapes and says why, and running the node is refused with one line.
TEST(FuzzRegressions, ShapeInferenceCrashStaysInItsChildProcess) {
  OnnxBuilder b(13);
  b.input("data", {1, 1, 2, 2, 4}).input("idx", {2, 2, 2}, onnx::TensorProto::INT64).output("y", {});
  auto& n = b.node("GatherND", {"data", "idx"}, {"g"}, "gather");
  auto* bd = n.add_attribute();
  bd->set_name("batch_dims");
  bd->set_type(onnx::AttributeProto::INT);
  bd->set_i(-4);
  b.node("Identity", {"g"}, {"y"}, "out");
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "gathernd.onnx", "", LoadOptions{});
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ((*m)->shapeInference.rfind("crashed (", 0), 0u) << (*m)->shapeInference;
  const Graph& g = (*m)->graph;
  EXPECT_FALSE(g.value(g.findValue("g")).shape.has_value());
  Tensor data(DType::Float, {1, 1, 2, 2, 4});
  std::fill_n(data.data<float>(), 16, 1.f);
  Tensor idx(DType::Int64, {2, 2, 2});
  std::fill_n(idx.data<int64_t>(), 8, int64_t(0));
  Status st = createAndRun(*m, {NamedTensor{"data", data}, NamedTensor{"idx", idx}});
  ASSERT_FALSE(st.isOk());
  expectOneLine(st, st.code(), "'gather'");

  // The same loader on a sound model: inference ran and its shapes arrived from the child.
  OnnxBuilder ok(13);
  ok.input("x", {2, 3}).output("y", {2, 3});
  ok.node("Relu", {"x"}, {"r"}, "relu");
  ok.node("Identity", {"r"}, {"y"}, "out");
  std::string okBytes = ok.bytes();
  auto m2 = loadModelFromBytes(okBytes.data(), okBytes.size(), "relu.onnx", "", LoadOptions{});
  ASSERT_TRUE(m2) << m2.status().message();
  EXPECT_EQ((*m2)->shapeInference, "done");
  const Graph& g2 = (*m2)->graph;
  ASSERT_TRUE(g2.value(g2.findValue("r")).shape.has_value());
  EXPECT_EQ(g2.value(g2.findValue("r")).shape->at(1).value, 3);
}

// ---- crashes found by fuzzing ---------------------------------------------------------------------

// fuzz_image: stb_image 2.27 (Debian's libstb) wrote past its 257-entry Huffman size table when a
// JPEG DHT table's 16 counts summed beyond 256 (UBSan: index 257 out of bounds for 'stbi_uc[257]' in
// stbi__build_huffman), and its IDCT overflowed int on hostile coefficients (UBSan: signed integer
// overflow in stbi__jpeg_decode_block). JPEG now goes through libjpeg-turbo, which refuses such
// tables; a DHT after the first scan (progressive JPEGs) is refused too.
TEST(FuzzRegressions, JpegHuffmanTableWithTooManyCodesIsRefused) {
  auto dht = [](int countEach) {
    std::string s = "\xFF\xC4";
    std::string table(1, '\0');  // class 0, id 0
    for (int i = 0; i < 16; ++i) table += (char)countEach;
    int sum = 16 * countEach;
    table += std::string((size_t)std::min(sum, 300), '\x01');
    size_t len = 2 + table.size();
    s += (char)(len >> 8);
    s += (char)(len & 0xff);
    return s + table;
  };
  const std::string soi = "\xFF\xD8";
  const std::string sos = std::string("\xFF\xDA\x00\x08\x01\x01\x00\x00\x3F\x00", 10) + "\x12\x34\xFF\x00\x56";
  for (const std::string& jpeg : {soi + dht(255), soi + sos + dht(17), soi + "junk" + dht(255)}) {
    auto img = decodeImage(jpeg.data(), jpeg.size(), "hostile.jpg");
    expectOneLine(img.status(), StatusCode::InvalidArgument, "hostile.jpg: not a decodable JPEG image (libjpeg: ");
  }
  TempDir d;
  qs::test::writeBytes(d.path + "/h.jpg", soi + dht(255));
  expectOneLine(probeImage(d.path + "/h.jpg", nullptr, nullptr), StatusCode::InvalidArgument,
                "h.jpg: not a decodable JPEG image (libjpeg: Bogus Huffman table definition)");
}

// A JPEG whose entropy-coded data is cut short is an error naming the size, not an image half
// filled with grey (libjpeg's "premature end of data" warning is fatal here).
TEST(FuzzRegressions, TruncatedJpegIsAnError) {
  TempDir d;
  Image img;
  img.width = 64;
  img.height = 64;
  img.pixels.resize(64 * 64 * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = (uint8_t)(i * 37 % 251);
  ASSERT_TRUE(writeImage(d.path + "/ok.jpg", img));
  std::ifstream in(d.path + "/ok.jpg", std::ios::binary);
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto back = decodeImage(good.data(), good.size(), "ok.jpg");
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->width, 64);
  std::string cut = good.substr(0, good.size() / 2);
  expectOneLine(decodeImage(cut.data(), cut.size(), "cut.jpg").status(), StatusCode::InvalidArgument,
                "cut.jpg: corrupt or truncated 64x64 image data (libjpeg: ");
}

// Formats stb_image would also try (GIF, PSD, PIC, PNM, HDR, TGA) are refused by signature: the
// tool promises PNG, JPEG and BMP, and only those decoders are fuzzed.
TEST(FuzzRegressions, ImageFormatsBeyondPngJpegBmpAreRefused) {
  const std::string gif = std::string("GIF89a\x01\x00\x01\x00\x00\x00\x00", 13);
  const std::string pnm = "P6\n1 1\n255\n\x01\x02\x03";
  for (const std::string& bytes : {gif, pnm}) {
    auto img = decodeImage(bytes.data(), bytes.size(), "other.img");
    expectOneLine(img.status(), StatusCode::InvalidArgument, "other.img: not a decodable PNG, JPEG or BMP image");
  }
}

// fuzz_image: a PNG whose IDAT chunk declares 2 GiB made stb_image grow its buffer to 2 GiB before
// finding the data missing (libFuzzer: out-of-memory (malloc(2147483648)) in stbi__parse_png_file).
// libpng streams IDAT through zlib and stops at the end of the file.
TEST(FuzzRegressions, PngChunkBeyondTheEndOfTheFileIsRefused) {
  TempDir d;
  Image img;
  img.width = 2;
  img.height = 2;
  img.pixels.assign(12, 7);
  ASSERT_TRUE(writeImage(d.path + "/ok.png", img));
  std::ifstream in(d.path + "/ok.png", std::ios::binary);
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(decodeImage(good.data(), good.size(), "ok.png"));
  // Signature and IHDR (8 + 25 bytes) kept, then an IDAT chunk declaring 0x7fffffff bytes.
  std::string bad = good.substr(0, 33) + std::string("\x7f\xff\xff\xff", 4) + "IDAT" + "abc";
  auto r = decodeImage(bad.data(), bad.size(), "hostile.png");
  expectOneLine(r.status(), StatusCode::InvalidArgument,
                "hostile.png: corrupt or truncated 2x2 image data (libpng: ");
  // A PNG cut inside its last chunk is refused the same way.
  std::string cut = good.substr(0, good.size() - 20);
  expectOneLine(decodeImage(cut.data(), cut.size(), "cut.png").status(), StatusCode::InvalidArgument, "cut.png: corrupt");
}

// fuzz_quant_files: an integer field given as a large float ("bins": 1e30) reached nlohmann's
// static_cast<int> (UBSan: 1e+30 is outside the range of representable values of type 'int').
// Integer fields now take integer JSON numbers within range only.
TEST(FuzzRegressions, QuantConfigIntegerFieldsOutOfRangeAreRefused) {
  struct Case {
    std::string json, key;
  } cases[] = {
      {R"({"act_quant_info": {}, "quantscope": {"calibration": {"bins": 1e30}}})", "quantscope.bins"},
      {R"({"act_quant_info": {}, "quantscope": {"calibration": {"start_bin": 4294967296}}})", "quantscope.start_bin"},
      {R"({"act_quant_info": {}, "quantscope": {"calibration": {"samples": 1.5}}})", "quantscope.samples"},
      {R"({"act_quant_info": {}, "quantscope": {"weights": [{"node": "n", "tensor": "w", "input": -1, "axis": 0,
          "amax": [1]}]}})", "quantscope.weights.input"},
      {R"({"act_quant_info": {}, "quantscope": {"weights": [{"node": "n", "tensor": "w", "input": 1,
          "axis": -1e10, "amax": [1]}]}})", "quantscope.weights.axis"},
  };
  for (const auto& c : cases) {
    auto r = parseQuantConfig(c.json, "cfg.json");
    expectOneLine(r.status(), StatusCode::InvalidArgument, "cfg.json: " + c.key + " is missing or has the wrong type");
  }
  auto ok = parseQuantConfig(R"({"act_quant_info": {"x": 2}, "quantscope": {"calibration": {"bins": 512,
      "start_bin": 64, "samples": 8}, "weights": [{"node": "n", "tensor": "w", "input": 1, "axis": -1, "amax": [1]}]}})",
                             "cfg.json");
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ(ok->calibration.bins, 512);
  EXPECT_EQ(ok->calibration.startBin, 64);
  EXPECT_EQ(ok->samples, 8);
  EXPECT_EQ(ok->weights.at(0).axis, -1);
}
