// If, Loop and Scan (core/kernels/control_flow.cpp): subgraphs reading outer-scope values, nested
// subgraphs, loop-carried values and scan outputs, checked against values computed here and
// against ONNX Runtime; and hostile subgraphs, which must fail with one line, quickly.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "core/exec/executor.h"
#include "core/io/npy.h"
#include "core/kernels/control_flow.h"
#include "core/numeric/metrics.h"
#include "core/onnx/loader.h"
#include "tests/support/ort_runner.h"
#include "tests/support/sanitizer.h"
#include "tests/support/control_flow_models.h"

using namespace qs;
using qs::test::OnnxBuilder;
using qs::test::ifModel;
using qs::test::loopModel;
using qs::test::scanModel;
namespace fs = std::filesystem;

namespace {

constexpr int F = onnx::TensorProto::FLOAT;
constexpr int B = onnx::TensorProto::BOOL;

std::shared_ptr<Model> load(const OnnxBuilder& b) {
  auto m = loadModelFromBytes(b.bytes().data(), b.bytes().size(), "cf.onnx", "");
  EXPECT_TRUE(m) << m.status().message();
  return m ? *m : nullptr;
}

std::vector<std::unique_ptr<Executor>> engines(const std::shared_ptr<Model>& model) {
  std::vector<std::unique_ptr<Executor>> out;
  for (bool rewrites : {false, true}) {
    ExecutorOptions eo;
    eo.threads = 2;
    eo.rewrites = rewrites;
    auto ex = Executor::create(model, eo);
    EXPECT_TRUE(ex) << ex.status().message();
    if (ex) out.push_back(std::move(ex).value());
  }
  return out;
}

using qs::test::runOrt;

void expectClose(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.valueAsDouble(i), want.valueAsDouble(i), 1e-5 * (1 + std::abs(want.valueAsDouble(i)))) << what << "[" << i << "]";
}

TEST(ControlFlow, IfRunsTheChosenBranchWithOuterScopeValues) {
  OnnxBuilder b = ifModel();
  auto model = load(b);
  ASSERT_TRUE(model);
  const Node& ifNode = model->graph.nodes.back();
  ASSERT_EQ(ifNode.opType, "If");
  EXPECT_EQ(ifNode.implicitInputs, 2);  // w and x, read by the branches
  EXPECT_EQ(ifNode.explicitInputCount(), 1u);
  Tensor x = Tensor::fromVector<float>({1, -2, 3, 0.5f, 4, -1}, {2, 3});
  for (auto& ex : engines(model)) {
    for (bool c : {true, false}) {
      auto out = ex->run({{"x", x}, {"c", Tensor::scalar<bool>(c)}});
      ASSERT_TRUE(out) << out.status().message();
      for (int64_t i = 0; i < 6; ++i) {
        float xi = x.data<float>()[i];
        EXPECT_FLOAT_EQ((*out)[0].data<float>()[i], c ? 3 * xi : 2 * xi - 1);
      }
      auto ref = runOrt(b, {x, Tensor::scalar<bool>(c)});
      ASSERT_EQ(ref.size(), 1u);
      expectClose((*out)[0], ref[0], c ? "then" : "else");
    }
  }
}

TEST(ControlFlow, LoopCarriesValuesStacksScanOutputsAndRunsNestedSubgraphs) {
  OnnxBuilder b = loopModel();
  auto model = load(b);
  ASSERT_TRUE(model);
  Tensor x = Tensor::fromVector<float>({1.5f, -2.f, 0.25f}, {3});
  const int64_t M = 5;
  // Expected by hand.
  std::vector<float> acc = {0.5f, 0.f, -1.f};
  std::vector<std::vector<float>> accs;
  for (int64_t i = 0; i < M; ++i) {
    for (int k = 0; k < 3; ++k) acc[(size_t)k] += i % 2 == 0 ? x.data<float>()[k] * (float)i : -x.data<float>()[k];
    accs.push_back(acc);
  }
  for (auto& ex : engines(model)) {
    auto out = ex->run({{"x", x}, {"M", Tensor::scalar<int64_t>(M)}});
    ASSERT_TRUE(out) << out.status().message();
    ASSERT_EQ((*out)[1].shape(), (Shape{M, 3}));
    for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ((*out)[0].data<float>()[k], acc[(size_t)k]);
    for (int64_t i = 0; i < M; ++i)
      for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ((*out)[1].data<float>()[i * 3 + k], accs[(size_t)i][(size_t)k]);
    // Zero iterations: the initial value and an empty scan output.
    auto none = ex->run({{"x", x}, {"M", Tensor::scalar<int64_t>(0)}});
    ASSERT_TRUE(none) << none.status().message();
    EXPECT_FLOAT_EQ((*none)[0].data<float>()[0], 0.5f);
    EXPECT_EQ((*none)[1].shape(), (Shape{0, 3}));
  }
  auto ref = runOrt(b, {x, Tensor::scalar<int64_t>(M)});
  ASSERT_EQ(ref.size(), 2u);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex);
  auto out = (*ex)->run({{"x", x}, {"M", Tensor::scalar<int64_t>(M)}});
  ASSERT_TRUE(out);
  expectClose((*out)[0], ref[0], "acc_final");
  expectClose((*out)[1], ref[1], "accs");
}

TEST(ControlFlow, ScanFollowsAxesAndDirections) {
  OnnxBuilder b = scanModel();
  auto model = load(b);
  ASSERT_TRUE(model);
  Tensor s0 = Tensor::fromVector<float>({1, -1}, {2});
  Tensor X = Tensor::fromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  Tensor Y = Tensor::fromVector<float>({10, 20, 30, 40, 50, 60, 70, 80}, {2, 4});
  std::vector<float> s = {1, -1};
  std::vector<float> steps(8);
  for (int t = 0; t < 4; ++t)
    for (int k = 0; k < 2; ++k) {
      s[(size_t)k] += X.data<float>()[t * 2 + k] + Y.data<float>()[k * 4 + (3 - t)];
      steps[(size_t)(k * 4 + t)] = s[(size_t)k];  // output axis 1: [2, 4]
    }
  for (auto& ex : engines(model)) {
    auto out = ex->run({{"s0", s0}, {"X", X}, {"Y", Y}});
    ASSERT_TRUE(out) << out.status().message();
    ASSERT_EQ((*out)[1].shape(), (Shape{2, 4}));
    for (int k = 0; k < 2; ++k) EXPECT_FLOAT_EQ((*out)[0].data<float>()[k], s[(size_t)k]);
    for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ((*out)[1].data<float>()[i], steps[(size_t)i]);
  }
  auto ref = runOrt(b, {s0, X, Y});
  ASSERT_EQ(ref.size(), 2u);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex);
  auto out = (*ex)->run({{"s0", s0}, {"X", X}, {"Y", Y}});
  ASSERT_TRUE(out);
  expectClose((*out)[0], ref[0], "s_final");
  expectClose((*out)[1], ref[1], "steps");
}

// ----------------------------------------------------------------------------- hostile models

TEST(ControlFlowHostile, ASubgraphReadingAnUndefinedNameIsRefusedAtLoad) {
  OnnxBuilder b = ifModel();
  auto* thenB = b.graph().mutable_node(1)->mutable_attribute(0)->mutable_g();
  thenB->mutable_node(0)->set_input(1, "ghost");
  auto m = loadModelFromBytes(b.bytes().data(), b.bytes().size(), "cf.onnx", "");
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("'ghost'"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("enclosing scope"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("node 'branch' (If)"), std::string::npos) << m.status().message();
  EXPECT_EQ(m.status().message().find('\n'), std::string::npos);
}

// If nodes nested `depth` deep, each then_branch holding the next If, each else_branch the leaf.
std::string nestedIfs(int depth) {
  onnx::GraphProto inner;
  inner.set_name("leaf");
  OnnxBuilder::setType(inner.add_output(), "leaf_out", F, {1});
  auto* id = inner.add_node();
  id->set_op_type("Identity");
  id->add_input("x");
  id->add_output("leaf_out");
  const onnx::GraphProto leaf = inner;  // every else_branch (a copy of the nest there would grow as 2^depth)
  for (int d = 0; d < depth; ++d) {
    onnx::GraphProto outer;
    outer.set_name("level" + std::to_string(d));
    OnnxBuilder::setType(outer.add_output(), "out" + std::to_string(d), F, {1});
    auto* n = outer.add_node();
    n->set_op_type("If");
    n->set_name("if" + std::to_string(d));
    n->add_input("c");
    n->add_output("out" + std::to_string(d));
    OnnxBuilder::attrGraph(*n, "then_branch", inner);
    OnnxBuilder::attrGraph(*n, "else_branch", leaf);
    inner = std::move(outer);
  }
  OnnxBuilder b(13);
  b.input("x", {1}).input("c", {}, B);
  *b.graph().mutable_node() = inner.node();
  *b.graph().mutable_output() = inner.output();
  return b.bytes();
}

TEST(ControlFlowHostile, DeeplyNestedSubgraphsAreRefusedWithOneLine) {
  auto ok = nestedIfs(3);
  auto m3 = loadModelFromBytes(ok.data(), ok.size(), "nest.onnx", "");
  ASSERT_TRUE(m3) << m3.status().message();
  auto ex = Executor::create(*m3);
  ASSERT_TRUE(ex) << ex.status().message();
  auto out = (*ex)->run({{"x", Tensor::fromVector<float>({7}, {1})}, {"c", Tensor::scalar<bool>(true)}});
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_FLOAT_EQ((*out)[0].data<float>()[0], 7.f);

  for (int depth : {kMaxSubgraphDepth + 1, 1000}) {
    auto bytes = nestedIfs(depth);
    auto m = loadModelFromBytes(bytes.data(), bytes.size(), "nest.onnx", "");
    ASSERT_FALSE(m) << depth;
    EXPECT_NE(m.status().message().find("nest"), std::string::npos) << m.status().message();
    EXPECT_EQ(m.status().message().find('\n'), std::string::npos);
  }
}

TEST(ControlFlowHostile, AHugeTripCountWithoutConditionFailsAtOnce) {
  OnnxBuilder b = loopModel();
  b.graph().mutable_node(0)->set_input(1, "");  // no condition
  auto model = load(b);
  ASSERT_TRUE(model);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex) << ex.status().message();
  auto t0 = std::chrono::steady_clock::now();
  auto out = (*ex)->run({{"x", Tensor::fromVector<float>({1, 2, 3}, {3})}, {"M", Tensor::scalar<int64_t>(int64_t(1) << 62)}});
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("trip count 4611686018427387904 is beyond the limit"), std::string::npos)
      << out.status().message();
  EXPECT_NE(out.status().message().find("node 'loop' (Loop)"), std::string::npos) << out.status().message();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(ControlFlowHostile, ALoopWithNeitherTripCountNorConditionIsRefused) {
  OnnxBuilder b = loopModel();
  b.graph().mutable_node(0)->set_input(0, "");
  b.graph().mutable_node(0)->set_input(1, "");
  b.graph().mutable_input()->DeleteSubrange(1, 1);  // M is no longer an input
  auto model = load(b);
  ASSERT_TRUE(model);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex) << ex.status().message();
  auto out = (*ex)->run({{"x", Tensor::fromVector<float>({1, 2, 3}, {3})}});
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("never ends"), std::string::npos) << out.status().message();
}

TEST(ControlFlowHostile, AConditionThatNeverTurnsFalseStopsAtTheIterationLimit) {
  // 2^20 iterations: seconds in the release build, over a minute under ASan, which the first
  // iterations of the other Loop tests already cover.
  if (qs::test::kUnderSanitizer) GTEST_SKIP() << "release build only";
  OnnxBuilder b = loopModel();
  b.graph().mutable_node(0)->set_input(0, "");  // while (true)
  b.graph().mutable_input()->DeleteSubrange(1, 1);
  auto model = load(b);
  ASSERT_TRUE(model);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex) << ex.status().message();
  auto out = (*ex)->run({{"x", Tensor::fromVector<float>({1, 2, 3}, {3})}});
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("ran " + std::to_string(kMaxLoopIterations) + " iterations without ending"),
            std::string::npos)
      << out.status().message();
}

TEST(ControlFlowHostile, ABodyOfTheWrongArityIsRefusedAtCreation) {
  OnnxBuilder b = loopModel();
  auto* body = b.graph().mutable_node(0)->mutable_attribute(0)->mutable_g();
  body->mutable_input()->DeleteSubrange(2, 1);  // drop the loop-carried input
  body->mutable_node(0)->set_input(0, "i");
  auto m = loadModelFromBytes(b.bytes().data(), b.bytes().size(), "cf.onnx", "");
  // 'acc' is now read from outside the body, where nothing defines it.
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("'acc'"), std::string::npos) << m.status().message();

  OnnxBuilder c = loopModel();
  c.graph().mutable_node(0)->mutable_output()->DeleteSubrange(1, 1);  // no scan output on the node
  c.graph().mutable_output()->DeleteSubrange(1, 1);
  auto model = load(c);
  ASSERT_TRUE(model);
  auto ex = Executor::create(model);
  ASSERT_FALSE(ex);
  EXPECT_NE(ex.status().message().find("body has 3 outputs, expected 2"), std::string::npos) << ex.status().message();
}

}  // namespace
