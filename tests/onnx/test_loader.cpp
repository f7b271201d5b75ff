// The loader and validator against valid and hostile models built in code. Each hostile case
// must fail with the right code and a one-line message naming the file (and node where one is
// involved).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/exec/executor.h"
#include "core/onnx/loader.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;
namespace fs = std::filesystem;

namespace {

// x[2,3] -> Relu -> y ; plus an Add with a weight.
OnnxBuilder reluAdd() {
  OnnxBuilder b(13);
  b.input("x", {2, 3}).output("y", {2, 3});
  b.initializer("w", {3}, {1.f, 2.f, 3.f});
  b.node("Add", {"x", "w"}, {"s"}, "add");
  b.node("Relu", {"s"}, {"y"}, "relu");
  return b;
}

struct TempDir {
  std::string path = qs::test::makeTempDir("loader");
  ~TempDir() { fs::remove_all(path); }
};

void expectOneLine(const Status& st, const std::string& mustContain) {
  EXPECT_FALSE(st.isOk());
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(mustContain), std::string::npos) << st.message();
}

}  // namespace

TEST(CoreLoader, LoadsValidModelWithTopologyAndConsumers) {
  auto b = reluAdd();
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "ok.onnx", "");
  ASSERT_TRUE(m) << m.status().message();
  const Graph& g = (*m)->graph;
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.topoOrder, (std::vector<NodeId>{0, 1}));
  EXPECT_EQ(g.value(g.findValue("s")).producer, 0);
  EXPECT_EQ(g.value(g.findValue("s")).consumers, std::vector<NodeId>{1});
  EXPECT_TRUE(g.value(g.findValue("w")).constant.has_value());
  EXPECT_EQ((*m)->defaultOpset(), 13);
}

TEST(CoreLoader, TopologicalOrderIndependentOfFileOrder) {
  OnnxBuilder b(13);
  b.input("x", {1}).output("y", {1});
  b.node("Relu", {"a"}, {"y"}, "second");
  b.node("Neg", {"x"}, {"a"}, "first");
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "order.onnx", "");
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ((*m)->graph.topoOrder, (std::vector<NodeId>{1, 0}));
}

TEST(CoreLoader, HundredThousandNodeChainLoadsWithoutRecursion) {
  OnnxBuilder b(13);
  b.input("x", {1}).output("v100000", {1});
  for (int i = 0; i < 100000; ++i) {
    b.node("Relu", {i == 0 ? "x" : "v" + std::to_string(i)}, {"v" + std::to_string(i + 1)});
  }
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "chain.onnx", "");
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ((*m)->graph.topoOrder.size(), 100000u);
}

TEST(CoreLoader, ConstantNodeWeightsBecomeConstants) {
  OnnxBuilder b(13);
  b.input("x", {3}).output("y", {3});
  auto& c = b.node("Constant", {}, {"w"}, "const_w");
  auto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) a->mutable_t()->add_float_data(v);
  b.node("Mul", {"x", "w"}, {"y"}, "mul");
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "const.onnx", "");
  ASSERT_TRUE(m) << m.status().message();
  const Value& w = (*m)->graph.value((*m)->graph.findValue("w"));
  ASSERT_TRUE(w.constant.has_value());
  EXPECT_TRUE(w.fromConstantNode);
  EXPECT_EQ(w.constant->data<float>()[2], 3.f);
  EXPECT_EQ((*m)->graph.nodes.size(), 1u);
}

TEST(CoreLoader, InitializerAlsoListedAsInputIsOverridableConstant) {
  auto b = reluAdd();
  OnnxBuilder::setType(b.graph().add_input(), "w", onnx::TensorProto::FLOAT, {3});
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "ir3.onnx", "");
  ASSERT_TRUE(m) << m.status().message();
  const Graph& g = (*m)->graph;
  EXPECT_EQ(g.inputs.size(), 1u);  // only x is a real input
  EXPECT_TRUE(g.value(g.findValue("w")).isOverridable);
}

TEST(CoreLoader, SymbolicDimsAreKept) {
  OnnxBuilder b(13);
  b.input("x", {-1, 3}).output("y", {-1, 3});
  b.node("Relu", {"x"}, {"y"});
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "sym.onnx", "");
  ASSERT_TRUE(m);
  const auto& dims = *(*m)->graph.value((*m)->graph.inputs[0]).shape;
  EXPECT_FALSE(dims[0].isFixed());
  EXPECT_EQ(dims[0].symbol, "N");
  EXPECT_EQ(dims[1].value, 3);
}

// ---- hostile inputs -------------------------------------------------------------------------

TEST(CoreLoaderHostile, EmptyFile) {
  TempDir d;
  std::string p = d.path + "/empty.onnx";
  qs::test::writeBytes(p, "");
  auto m = loadModel(p);
  EXPECT_EQ(m.status().code(), StatusCode::InvalidModel);
  expectOneLine(m.status(), p + ": the file is empty");
}

TEST(CoreLoaderHostile, MissingFileAndDirectory) {
  TempDir d;
  EXPECT_EQ(loadModel(d.path + "/nope.onnx").status().code(), StatusCode::IoError);
  expectOneLine(loadModel(d.path).status(), "is a directory");
}

TEST(CoreLoaderHostile, RandomBytes) {
  std::string junk;
  uint32_t s = 12345;
  for (int i = 0; i < 4096; ++i) {
    s = s * 1664525u + 1013904223u;
    junk.push_back((char)(s >> 24));
  }
  auto m = loadModelFromBytes(junk.data(), junk.size(), "junk.onnx", "");
  EXPECT_EQ(m.status().code(), StatusCode::InvalidModel);
  expectOneLine(m.status(), "junk.onnx:");
}

TEST(CoreLoaderHostile, TruncatedModel) {
  std::string bytes = reluAdd().bytes();
  for (size_t cut : {bytes.size() / 2, bytes.size() - 3}) {
    auto m = loadModelFromBytes(bytes.data(), cut, "cut.onnx", "");
    EXPECT_FALSE(m.isOk()) << cut;
    expectOneLine(m.status(), "cut.onnx:");
  }
}

TEST(CoreLoaderHostile, DanglingInput) {
  auto b = reluAdd();
  b.graph().mutable_node(1)->set_input(0, "ghost");
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "dangling.onnx", "");
  EXPECT_EQ(m.status().code(), StatusCode::InvalidModel);
  expectOneLine(m.status(), "dangling.onnx: node 'relu' (Relu): input 'ghost' is not produced");
}

TEST(CoreLoaderHostile, Cycle) {
  OnnxBuilder b(13);
  b.input("x", {1}).output("y", {1});
  b.node("Add", {"x", "c"}, {"a"}, "a");
  b.node("Relu", {"a"}, {"c"}, "b");
  b.node("Neg", {"a"}, {"y"}, "out");
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "cycle.onnx", "");
  EXPECT_EQ(m.status().code(), StatusCode::InvalidModel);
  expectOneLine(m.status(), "cycle");
  EXPECT_TRUE(m.status().message().find("node 'a'") != std::string::npos ||
              m.status().message().find("node 'b'") != std::string::npos);
}

TEST(CoreLoaderHostile, UndefinedOrUnknownElementTypeOfGraphInputsAndOutputs) {
  struct Case {
    bool input;
    int elemType;
    const char* message;
  } cases[] = {
      {true, 0, "t.onnx: graph input 'x' has element type UNDEFINED (0)"},
      {false, 0, "t.onnx: graph output 'y' has element type UNDEFINED (0)"},
      {true, 99, "t.onnx: graph input 'x' has element type 99, which is not a tensor type"},
  };
  for (const Case& c : cases) {
    auto b = reluAdd();
    auto* vi = c.input ? b.graph().mutable_input(0) : b.graph().mutable_output(0);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(c.elemType);
    std::string bytes = b.bytes();
    auto m = loadModelFromBytes(bytes.data(), bytes.size(), "t.onnx", "");
    ASSERT_FALSE(m) << c.message;
    expectOneLine(m.status(), c.message);
  }
}

TEST(CoreLoaderHostile, DuplicateProducer) {
  auto b = reluAdd();
  b.node("Neg", {"x"}, {"s"}, "again");
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "dup.onnx", "");
  expectOneLine(m.status(), "already produced");
}

TEST(CoreLoaderHostile, WrongInitializerSize) {
  auto b = reluAdd();
  b.graph().mutable_initializer(0)->add_dims(2);  // dims [3,2] but 3 floats of data
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "size.onnx", "");
  EXPECT_EQ(m.status().code(), StatusCode::InvalidModel);
  expectOneLine(m.status(), "size.onnx: initializer: tensor 'w' dims [3,2] need 6 elements (24 bytes) but it holds 12 bytes");
}

TEST(CoreLoaderHostile, DeclaredShapeOfTwoToTheFortyElements) {
  auto b = reluAdd();
  auto* t = b.graph().mutable_initializer(0);
  t->clear_dims();
  t->add_dims(int64_t(1) << 20);
  t->add_dims(int64_t(1) << 20);
  std::string bytes = b.bytes();
  LoadOptions lo;
  lo.maxTensorBytes = uint64_t(1) << 30;
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "huge.onnx", "", lo);
  EXPECT_EQ(m.status().code(), StatusCode::ResourceLimit);
  expectOneLine(m.status(), "beyond the limit");
  // With the default limit (physical memory) too: 4 TiB is refused before any allocation.
  auto m2 = loadModelFromBytes(bytes.data(), bytes.size(), "huge.onnx", "");
  EXPECT_EQ(m2.status().code(), StatusCode::ResourceLimit);
}

TEST(CoreLoaderHostile, DimsOverflowInt64) {
  auto b = reluAdd();
  auto* t = b.graph().mutable_initializer(0);
  t->clear_dims();
  for (int i = 0; i < 3; ++i) t->add_dims(int64_t(1) << 30);
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "overflow.onnx", "");
  expectOneLine(m.status(), "overflow");
}

TEST(CoreLoaderHostile, OpsetOutOfRange) {
  OnnxBuilder b(5);
  b.input("x", {1}).output("y", {1});
  b.node("Relu", {"x"}, {"y"});
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "old.onnx", "");
  EXPECT_EQ(m.status().code(), StatusCode::Unsupported);
  expectOneLine(m.status(), "opset 5 is not supported (7 to 21)");
}

namespace {
OnnxBuilder externalModel(const std::string& location) {
  auto b = reluAdd();
  auto* t = b.graph().mutable_initializer(0);
  t->clear_raw_data();
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = t->add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  return b;
}
}  // namespace

TEST(CoreLoader, ExternalDataInsideTheFolderLoads) {
  TempDir d;
  float w[3] = {4.f, 5.f, 6.f};
  qs::test::writeBytes(d.path + "/weights.bin", std::string(reinterpret_cast<char*>(w), sizeof w));
  externalModel("weights.bin").save(d.path + "/m.onnx");
  auto m = loadModel(d.path + "/m.onnx");
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ((*m)->graph.value((*m)->graph.findValue("w")).constant->data<float>()[1], 5.f);
}

TEST(CoreLoaderHostile, ExternalDataEscapingTheFolder) {
  TempDir outside, d;
  float w[3] = {4.f, 5.f, 6.f};
  std::string secret = outside.path + "/secret.bin";
  qs::test::writeBytes(secret, std::string(reinterpret_cast<char*>(w), sizeof w));
  fs::create_symlink(secret, d.path + "/link.bin");
  struct Case {
    std::string location, message;
  } cases[] = {
      {secret, "is an absolute path"},
      {"../" + fs::path(outside.path).filename().string() + "/secret.bin", "escapes the model's folder"},
      {"link.bin", "outside the model's folder"},
      {"missing.bin", "cannot be opened"},
  };
  for (const auto& c : cases) {
    externalModel(c.location).save(d.path + "/m.onnx");
    auto m = loadModel(d.path + "/m.onnx");
    EXPECT_EQ(m.status().code(), StatusCode::InvalidModel) << c.location;
    expectOneLine(m.status(), c.message);
    expectOneLine(m.status(), "tensor 'w' external data");
  }
}

TEST(CoreLoaderHostile, ExternalDataBeyondEndOfFile) {
  TempDir d;
  qs::test::writeBytes(d.path + "/short.bin", "abcd");
  externalModel("short.bin").save(d.path + "/m.onnx");
  expectOneLine(loadModel(d.path + "/m.onnx").status(), "beyond the end");
}

TEST(CoreLoaderHostile, UnknownOpReportedAtCreationWithNodeNames) {
  OnnxBuilder b(13);
  b.input("x", {1}).output("y", {1});
  b.node("FancyOp", {"x"}, {"t"}, "fancy1");
  b.node("FancyOp", {"t"}, {"y"}, "fancy2");
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "unknown.onnx", "");
  ASSERT_TRUE(m);
  auto ex = Executor::create(*m);
  EXPECT_EQ(ex.status().code(), StatusCode::Unsupported);
  expectOneLine(ex.status(), "unknown.onnx: unsupported op: FancyOp (nodes 'fancy1', 'fancy2')");
}

TEST(CoreLoaderHostile, AttributeOfWrongType) {
  OnnxBuilder b(13);
  b.input("x", {2, 3}).output("y", {2, 3});
  auto& n = b.node("Softmax", {"x"}, {"y"}, "sm");
  OnnxBuilder::attrFloat(n, "axis", 1.f);
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), "attr.onnx", "");
  ASSERT_TRUE(m);
  auto ex = Executor::create(*m);
  EXPECT_EQ(ex.status().code(), StatusCode::InvalidModel);
  expectOneLine(ex.status(), "attr.onnx: node 'sm' (Softmax): attribute 'axis' has type float, expected int");
}
