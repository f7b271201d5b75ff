// Blocked regions (core/exec/blocked_rewrite.h, core/kernels/blocked_layout.h): chains of oneDNN
// convolutions kept in nChw8c or nChw16c (DnnlConv::preferredBlock; ctest also runs these tests with
// QS_BLOCK=8 and QS_BLOCK=16, so both layouts are checked on any CPU). A ResNet-like graph (3x3 convs, residual Add + Relu, a graph output
// read in the middle of the chain) and a DenseNet-like one (BatchNormalization + Relu, a growing
// Concat, a pool at the border) give the outputs of the plain executor within float rounding, 1
// and 2 threads bit-identical, with the fusions the summary reports; a chain of 1x1 convs stays
// out; observed runs still see every original node; the reorders round-trip. Skipped without oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/exec/executor.h"
#include "core/kernels/blocked_layout.h"
#include "core/kernels/conv_dnnl.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::builtModel;
using qs::test::OnnxBuilder;
using qs::test::randomValues;
using qs::test::relativeError;

namespace {

std::unique_ptr<Executor> makeExecutor(std::shared_ptr<Model> m, bool fast, bool blocked, int threads) {
  ExecutorOptions eo;
  eo.rewrites = fast;
  eo.libraryKernels = fast;
  eo.blockedRegions = blocked;
  eo.threads = threads;
  auto ex = Executor::create(m, eo);
  EXPECT_TRUE(ex) << ex.status().message();
  return ex ? std::move(ex).value() : nullptr;
}

void conv(OnnxBuilder& b, const std::string& in, const std::string& out, int64_t cin, int64_t cout, int64_t k,
          std::mt19937& rng, int64_t stride = 1) {
  const float scale = 1.5f / std::sqrt(float(cin * k * k));
  b.initializer(out + "_w", {cout, cin, k, k}, randomValues((size_t)(cout * cin * k * k), rng, -scale, scale));
  b.initializer(out + "_b", {cout}, randomValues((size_t)cout, rng, -0.1f, 0.1f));
  auto& n = b.node("Conv", {in, out + "_w", out + "_b"}, {out}, "conv_" + out);
  OnnxBuilder::attrInts(n, "kernel_shape", {k, k});
  OnnxBuilder::attrInts(n, "pads", {k / 2, k / 2, k / 2, k / 2});
  OnnxBuilder::attrInts(n, "strides", {stride, stride});
}

// x [N, 16, 12, 12] -> conv3x3+Relu -> conv3x3 -> Add(x) -> Relu -> conv1x1 (16->32, stride 2) ->
// conv3x3 -> Add(conv1x1 out) -> Relu = y; the first Relu's output is also the graph output "mid".
OnnxBuilder resnetLike(std::mt19937& rng) {
  OnnxBuilder b(13);
  b.input("x", {-1, 16, 12, 12});
  conv(b, "x", "c1", 16, 16, 3, rng);
  b.node("Relu", {"c1"}, {"mid"});
  conv(b, "mid", "c2", 16, 16, 3, rng);
  b.node("Add", {"c2", "x"}, {"a1"});
  b.node("Relu", {"a1"}, {"r1"});
  conv(b, "r1", "c3", 16, 32, 1, rng, 2);
  conv(b, "c3", "c4", 32, 32, 3, rng);
  b.node("Add", {"c3", "c4"}, {"a2"});
  b.node("Relu", {"a2"}, {"y"});
  b.output("y", {-1, 32, 6, 6});
  b.output("mid", {-1, 16, 12, 12});
  return b;
}

void batchNorm(OnnxBuilder& b, const std::string& in, const std::string& out, int64_t c, std::mt19937& rng) {
  b.initializer(out + "_s", {c}, randomValues((size_t)c, rng, 0.5f, 1.5f));
  b.initializer(out + "_b", {c}, randomValues((size_t)c, rng, -0.2f, 0.2f));
  b.initializer(out + "_m", {c}, randomValues((size_t)c, rng, -0.2f, 0.2f));
  b.initializer(out + "_v", {c}, randomValues((size_t)c, rng, 0.5f, 2.f));
  b.node("BatchNormalization", {in, out + "_s", out + "_b", out + "_m", out + "_v"}, {out});
}

// Two dense layers (BN, Relu, 1x1 conv, BN, Relu, 3x3 conv, Concat) over a MaxPool'ed input, then
// BN + Relu and an AveragePool (outside the region).
OnnxBuilder denseNetLike(std::mt19937& rng) {
  OnnxBuilder b(13);
  b.input("x", {-1, 16, 18, 18});
  auto& mp = b.node("MaxPool", {"x"}, {"p"});
  OnnxBuilder::attrInts(mp, "kernel_shape", {3, 3});
  OnnxBuilder::attrInts(mp, "strides", {2, 2});
  OnnxBuilder::attrInts(mp, "pads", {1, 1, 1, 1});
  std::string in = "p";
  int64_t c = 16;
  for (int l = 0; l < 2; ++l) {
    const std::string s = std::to_string(l);
    batchNorm(b, in, "bn1_" + s, c, rng);
    b.node("Relu", {"bn1_" + s}, {"r1_" + s});
    conv(b, "r1_" + s, "c1_" + s, c, 32, 1, rng);
    batchNorm(b, "c1_" + s, "bn2_" + s, 32, rng);
    b.node("Relu", {"bn2_" + s}, {"r2_" + s});
    conv(b, "r2_" + s, "c2_" + s, 32, 16, 3, rng);
    auto& cat = b.node("Concat", {in, "c2_" + s}, {"cat_" + s});
    OnnxBuilder::attrInt(cat, "axis", 1);
    in = "cat_" + s;
    c += 16;
  }
  batchNorm(b, in, "bn_out", c, rng);
  b.node("Relu", {"bn_out"}, {"r_out"});
  auto& ap = b.node("AveragePool", {"r_out"}, {"y"});
  OnnxBuilder::attrInts(ap, "kernel_shape", {2, 2});
  OnnxBuilder::attrInts(ap, "strides", {2, 2});
  b.output("y", {-1, c, 4, 4});
  return b;
}

void expectBlockedMatchesPlain(const OnnxBuilder& b, const Shape& shape, const std::string& wantInSummary) {
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  std::mt19937 rng(11);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor x = Tensor::fromVector<float>(randomValues((size_t)n, rng), shape);
  auto want = makeExecutor(m, false, false, 1)->run({{"x", x}});
  ASSERT_TRUE(want) << want.status().message();
  auto unblocked = makeExecutor(m, true, false, 2)->run({{"x", x}});
  ASSERT_TRUE(unblocked) << unblocked.status().message();
  std::vector<Tensor> first;
  for (int threads : {1, 2}) {
    auto ex = makeExecutor(m, true, true, threads);
    ASSERT_TRUE(ex);
    EXPECT_NE(ex->rewriteSummary().find(wantInSummary), std::string::npos) << ex->rewriteSummary();
    RunProfile profile;
    RunOptions ro;
    ro.profile = &profile;
    auto got = ex->run({{"x", x}}, ro);
    ASSERT_TRUE(got) << got.status().message();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < got->size(); ++i) {
      ASSERT_EQ((*got)[i].shape(), (*want)[i].shape()) << "output " << i;
      EXPECT_LT(relativeError((*got)[i], (*want)[i]), 1e-5) << "output " << i;
      EXPECT_LT(relativeError((*got)[i], (*unblocked)[i]), 1e-5) << "output " << i;
    }
    for (const auto& np : profile.nodes) {
      ASSERT_GE(np.node, 0);
      ASSERT_LT(np.node, (NodeId)m->graph.nodes.size());
    }
    if (first.empty()) {
      first = std::move(got).value();
    } else {
      for (size_t i = 0; i < first.size(); ++i)
        EXPECT_EQ(std::memcmp(first[i].data<float>(), (*got)[i].data<float>(), first[i].byteSize()), 0)
            << "1 and 2 threads differ, output " << i;
    }
  }
}

}  // namespace

// "N Convs in R nChwBc regions" with B the block this process uses.
std::string regions(int convs, int count) {
  return std::to_string(convs) + " Convs in " + std::to_string(count) + " nChw" +
         std::to_string(DnnlConv::preferredBlock()) + "c regions";
}

TEST(BlockedRegions, ReordersRoundTrip) {
  std::mt19937 rng(3);
  const int64_t N = 2, C = 48, HW = 35;
  std::vector<float> x = randomValues((size_t)(N * C * HW), rng), b(x.size()), back(x.size());
  for (int64_t block : {8, 16}) {
    toNchw8c(x.data(), N, C, HW, b.data(), 2, (int)block);
    // Channel c of pixel p of image n sits at [n][c / block][p][c % block].
    const int64_t CB = C / block, c = 45, p = 7;
    EXPECT_EQ(b[(size_t)(((1 * CB + c / block) * HW + p) * block + c % block)], x[(size_t)((1 * C + c) * HW + p)])
        << block;
    fromNchw8c(b.data(), N, C, HW, back.data(), 2, (int)block);
    EXPECT_EQ(back, x) << block;
  }
}

TEST(BlockedRegions, ResNetBlocksMatchThePlainExecutor) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(1);
  // 4 convs in one region, both residual Adds (and their Relus) fused.
  expectBlockedMatchesPlain(resnetLike(rng), {2, 16, 12, 12}, regions(4, 1) + " (2 residual Adds fused");
}

TEST(BlockedRegions, DenseNetLayersMatchThePlainExecutor) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(2);
  expectBlockedMatchesPlain(denseNetLike(rng), {2, 16, 18, 18}, regions(4, 1) + " (0 residual Adds fused");
}

TEST(BlockedRegions, ChainsOfPointwiseConvsStayOut) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(4);
  OnnxBuilder b(13);
  b.input("x", {1, 16, 8, 8});
  conv(b, "x", "c1", 16, 32, 1, rng);
  b.node("Relu", {"c1"}, {"r1"});
  conv(b, "r1", "c2", 32, 16, 1, rng);
  b.node("Add", {"c2", "x"}, {"y"});
  b.output("y", {1, 16, 8, 8});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  auto ex = makeExecutor(m, true, true, 2);
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->rewriteSummary().find("regions"), std::string::npos) << ex->rewriteSummary();
}

TEST(BlockedRegions, ObservedRunsSeeEveryOriginalNodeInNchw) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(5);
  auto m = builtModel(resnetLike(rng));
  ASSERT_TRUE(m);
  auto ex = makeExecutor(m, true, true, 2);
  ASSERT_TRUE(ex);
  struct Shapes : ExecutionObserver {
    std::vector<Shape> seen;
    void onNodeOutput(NodeId, size_t, ValueId, const Tensor& t) override { seen.push_back(t.shape()); }
  } obs;
  RunOptions ro;
  ro.observer = &obs;
  Tensor x = Tensor::fromVector<float>(randomValues(16 * 144, rng), {1, 16, 12, 12});
  ASSERT_TRUE(ex->run({{"x", x}}, ro));
  ASSERT_EQ(obs.seen.size(), m->graph.nodes.size());
  for (const Shape& s : obs.seen) EXPECT_EQ(s.size(), 4u) << shapeToString(s);
}
