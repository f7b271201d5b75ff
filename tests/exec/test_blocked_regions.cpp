// Blocked regions (core/exec/blocked_rewrite.h, core/kernels/blocked_layout.h): chains of oneDNN
// convolutions kept in nChw8c or nChw16c (DnnlConv::preferredBlock; ctest also runs these tests with
// QS_BLOCK=8 and QS_BLOCK=16, so both layouts are checked on any CPU). A ResNet-like graph (3x3
// convs, residual Add + Relu, a graph output read in the middle of the chain), a DenseNet-like one
// (BatchNormalization + Relu, a growing Concat, a pool at the border), MobileNetV2 inverted
// residuals (depthwise, Relu6, an Add without Relu, GlobalAveragePool), RegNetY blocks with
// squeeze-and-excitation (8 and 16 channels per group) and a DenseNet transition (Pad of zeros,
// AveragePool) give the outputs of the plain executor within float rounding, 1 and 2 threads
// bit-identical, with the fusions the summary reports (a region whose channels are not whole
// 16-channel blocks runs in nChw8c); a chain of 1x1 convs stays out; observed runs still see every
// original node; the reorders round-trip; the blocked pools give the plain kernels' bits in both
// blocks. Skipped without oneDNN where they need it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "core/exec/executor.h"
#include "core/kernels/blocked_layout.h"
#include "core/kernels/conv_dnnl.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::builtModel;
using qs::test::groupedConv;
using qs::test::OnnxBuilder;
using qs::test::profiledRun;
using qs::test::ProfiledRun;
using qs::test::randomValues;
using qs::test::relativeError;
using qs::test::relu6;

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
    ProfiledRun run = profiledRun(*ex, {{"x", x}});
    ASSERT_TRUE(run.ok);
    const std::vector<Tensor>& got = run.outputs;
    ASSERT_EQ(got.size(), want->size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), (*want)[i].shape()) << "output " << i;
      EXPECT_LT(relativeError(got[i], (*want)[i]), 1e-5) << "output " << i;
      EXPECT_LT(relativeError(got[i], (*unblocked)[i]), 1e-5) << "output " << i;
    }
    for (const auto& np : run.profile.nodes) {
      ASSERT_GE(np.node, 0);
      ASSERT_LT(np.node, (NodeId)m->graph.nodes.size());
    }
    if (first.empty()) {
      first = std::move(run.outputs);
    } else {
      for (size_t i = 0; i < first.size(); ++i)
        EXPECT_EQ(std::memcmp(first[i].data<float>(), got[i].data<float>(), first[i].byteSize()), 0)
            << "1 and 2 threads differ, output " << i;
    }
  }
}

}  // namespace

// "N Convs in R nChwBc regions (" with B the block this process uses; `narrow` of the regions
// cannot run in 16 (channels or channels per group not multiples of 16), so with B = 16 the
// summary says how many of them run in nChw8c.
std::string regions(int convs, int count, int narrow = 0) {
  const int block = DnnlConv::preferredBlock();
  return std::to_string(convs) + " Convs in " + std::to_string(count) + " nChw" + std::to_string(block) +
         "c regions (" + (block == 16 && narrow > 0 ? std::to_string(narrow) + " of them nChw8c, " : "");
}

TEST(BlockedRegions, ReordersRoundTrip) {
  std::mt19937 rng(3);
  const int64_t N = 2, HW = 35;
  // 40 channels in blocks of 16: a tail of 8 channels padded to a block.
  for (int64_t C : {48, 40})
    for (int64_t block : {8, 16}) {
      SCOPED_TRACE(std::to_string(C) + " channels, block " + std::to_string(block));
      const int64_t CB = (C + block - 1) / block;
      std::vector<float> x = randomValues((size_t)(N * C * HW), rng), back(x.size());
      std::vector<float> b((size_t)(N * CB * block * HW), std::numeric_limits<float>::quiet_NaN());
      toNchw8c(x.data(), N, C, HW, b.data(), 2, (int)block);
      // Channel c of pixel p of image n sits at [n][c / block][p][c % block]; pad lanes are 0.
      const int64_t c = 37, p = 7;
      EXPECT_EQ(b[(size_t)(((1 * CB + c / block) * HW + p) * block + c % block)], x[(size_t)((1 * C + c) * HW + p)]);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t q = 0; q < HW; ++q)
          for (int64_t lane = C - (CB - 1) * block; lane < block; ++lane)
            ASSERT_EQ(b[(size_t)(((n * CB + CB - 1) * HW + q) * block + lane)], 0.f) << n << " " << q << " " << lane;
      fromNchw8c(b.data(), N, C, HW, back.data(), 2, (int)block);
      EXPECT_EQ(back, x);
    }
}

TEST(BlockedRegions, ResNetBlocksMatchThePlainExecutor) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(1);
  // 4 convs in one region, both residual Adds (and their Relus) fused.
  expectBlockedMatchesPlain(resnetLike(rng), {2, 16, 12, 12}, regions(4, 1) + "2 residual Adds fused");
}

// Read system calls made by this process so far (/proc/self/io, all threads), -1 where the file is not there.
static int64_t readSyscalls() {
  std::FILE* f = std::fopen("/proc/self/io", "r");
  if (!f) return -1;
  char key[64];
  long long value = 0;
  int64_t syscr = -1;
  while (std::fscanf(f, "%63[^:]: %lld\n", key, &value) == 2)
    if (std::string(key) == "syscr") syscr = value;
  std::fclose(f);
  return syscr;
}

// A warm run of a blocked region makes no read system call: the kernels ask for the hardware threads
// (slices, parts per image, images per task) on every run, and glibc's get_nprocs() behind
// std::thread::hardware_concurrency() opens and reads /sys/devices/system/cpu/online each time
// (resnet50 at batch 1: 106 of them per pass, 2-10 us each). hardwareThreads() reads it once.
TEST(BlockedRegions, WarmRunsMakeNoReadSystemCalls) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  if (readSyscalls() < 0) GTEST_SKIP() << "no /proc/self/io";
  std::mt19937 rng(1);
  auto m = builtModel(resnetLike(rng));
  ASSERT_TRUE(m);
  Tensor x = Tensor::fromVector<float>(randomValues(16 * 12 * 12, rng), {1, 16, 12, 12});
  auto ex = makeExecutor(m, true, true, 2);
  ASSERT_TRUE(ex);
  ASSERT_NE(ex->rewriteSummary().find(regions(4, 1)), std::string::npos) << ex->rewriteSummary();
  ASSERT_TRUE(ex->run({{"x", x}}));  // first run: plans, packed weights
  const int runs = 20;
  const int64_t before = readSyscalls();
  for (int r = 0; r < runs; ++r) ASSERT_TRUE(ex->run({{"x", x}}));
  const int64_t after = readSyscalls();
  // 4 convs a run: with a read per conv, >= 80. Reading /proc/self/io itself takes a few.
  EXPECT_LT(after - before, 8) << "read system calls in " << runs << " warm runs";
}

TEST(BlockedRegions, DenseNetLayersMatchThePlainExecutor) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(2);
  expectBlockedMatchesPlain(denseNetLike(rng), {2, 16, 18, 18}, regions(4, 1) + "0 residual Adds fused");
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

namespace {

// Two MobileNetV2 inverted residuals (1x1 expand + Relu6, depthwise 3x3 + Relu6, 1x1 project; the
// first with a residual Add without Relu, the second at stride 2), then GlobalAveragePool, Flatten.
// `c`: the residual's channels (mobilenet_v2's 24: a tail padded to a block in nChw16c).
OnnxBuilder mobileNetLike(std::mt19937& rng, int64_t c = 16) {
  OnnxBuilder b(13);
  b.input("x", {-1, c, 14, 14});
  conv(b, "x", "e1", c, 48, 1, rng);
  relu6(b, "e1", "e1r");
  groupedConv(b, "e1r", "d1", 48, 48, 3, 48, rng);
  relu6(b, "d1", "d1r");
  conv(b, "d1r", "p1", 48, c, 1, rng);
  b.node("Add", {"x", "p1"}, {"a1"});
  conv(b, "a1", "e2", c, 64, 1, rng);
  relu6(b, "e2", "e2r");
  groupedConv(b, "e2r", "d2", 64, 64, 3, 64, rng, 2);
  relu6(b, "d2", "d2r");
  conv(b, "d2r", "p2", 64, 32, 1, rng);
  b.node("GlobalAveragePool", {"p2"}, {"gap"});
  auto& f = b.node("Flatten", {"gap"}, {"y"});
  OnnxBuilder::attrInt(f, "axis", 1);
  b.output("y", {-1, 32});
  return b;
}

// RegNetY blocks: 1x1 + Relu, grouped 3x3 (`perGroup` channels per group: regnet's 8, or 16) + Relu,
// squeeze-and-excitation (GlobalAveragePool, 1x1 + Relu, 1x1 + Sigmoid, Mul), 1x1, residual Add +
// Relu; twice.
// `width` 40: five groups of 8, an odd one left beside the pad lanes when paired in blocks of 16.
OnnxBuilder regNetLike(std::mt19937& rng, int64_t perGroup = 8, int64_t width = 32) {
  OnnxBuilder b(13);
  b.input("x", {-1, width, 10, 10});
  std::string in = "x";
  for (int l = 0; l < 2; ++l) {
    const std::string s = std::to_string(l);
    conv(b, in, "a" + s, width, width, 1, rng);
    b.node("Relu", {"a" + s}, {"ar" + s});
    groupedConv(b, "ar" + s, "g" + s, width, width, 3, width / perGroup, rng);
    b.node("Relu", {"g" + s}, {"gr" + s});
    b.node("GlobalAveragePool", {"gr" + s}, {"sq" + s});
    conv(b, "sq" + s, "f1" + s, width, 8, 1, rng);
    b.node("Relu", {"f1" + s}, {"f1r" + s});
    conv(b, "f1r" + s, "f2" + s, 8, width, 1, rng);
    b.node("Sigmoid", {"f2" + s}, {"sig" + s});
    b.node("Mul", {"sig" + s, "gr" + s}, {"se" + s});
    conv(b, "se" + s, "c" + s, width, width, 1, rng);
    b.node("Add", {in, "c" + s}, {"sum" + s});
    b.node("Relu", {"sum" + s}, {"out" + s});
    in = "out" + s;
  }
  b.node("Identity", {in}, {"y"});
  b.output("y", {-1, width, 10, 10});
  return b;
}

// Two dense blocks of one 3x3 conv each, joined by a DenseNet transition (BN + Relu, 1x1 conv to 8
// channels, a Pad of zeros, 2x2 AveragePool): one region only when the Pad and the pool run
// blocked; nChw8c in either block (8 channels).
OnnxBuilder denseTransition(std::mt19937& rng) {
  OnnxBuilder b(13);
  b.input("x", {-1, 16, 12, 12});
  batchNorm(b, "x", "bn0", 16, rng);
  b.node("Relu", {"bn0"}, {"r0"});
  conv(b, "r0", "c0", 16, 16, 3, rng);
  batchNorm(b, "c0", "bn1", 16, rng);
  b.node("Relu", {"bn1"}, {"r1"});
  conv(b, "r1", "t", 16, 8, 1, rng);
  b.initializerInt64("zero_pads", {8}, {0, 0, 0, 0, 0, 0, 0, 0});
  b.node("Pad", {"t", "zero_pads"}, {"tp"});
  auto& ap = b.node("AveragePool", {"tp"}, {"pool"});
  OnnxBuilder::attrInts(ap, "kernel_shape", {2, 2});
  OnnxBuilder::attrInts(ap, "strides", {2, 2});
  batchNorm(b, "pool", "bn2", 8, rng);
  b.node("Relu", {"bn2"}, {"r2"});
  conv(b, "r2", "y", 8, 16, 3, rng);
  b.output("y", {-1, 16, 6, 6});
  return b;
}

// 24 channels (a padded tail in nChw16c) through every blocked member: BatchNormalization + Relu,
// a 3x3 conv, a depthwise conv + Relu (also a graph output), squeeze-and-excitation (its 1x1
// convs outside the region, so the Mul's scale is plain [N, 24, 1, 1]), MaxPool, a 3x3 conv to
// 40 channels (padded too), AveragePool, a residual Add of two blocked values after Relus, a Pad
// of zeros, then GlobalAveragePool.
OnnxBuilder paddedChannels(std::mt19937& rng) {
  OnnxBuilder b(13);
  b.input("x", {-1, 24, 12, 12});
  batchNorm(b, "x", "bn0", 24, rng);
  b.node("Relu", {"bn0"}, {"r0"});
  conv(b, "r0", "c0", 24, 24, 3, rng);
  groupedConv(b, "c0", "d0", 24, 24, 3, 24, rng);
  b.node("Relu", {"d0"}, {"mid"});
  b.node("GlobalAveragePool", {"mid"}, {"sq"});
  conv(b, "sq", "f1", 24, 8, 1, rng);
  b.node("Relu", {"f1"}, {"f1r"});
  conv(b, "f1r", "f2", 8, 24, 1, rng);
  b.node("Sigmoid", {"f2"}, {"sig"});
  b.node("Mul", {"mid", "sig"}, {"se"});
  auto& mp = b.node("MaxPool", {"se"}, {"p"});
  OnnxBuilder::attrInts(mp, "kernel_shape", {3, 3});
  OnnxBuilder::attrInts(mp, "strides", {2, 2});
  OnnxBuilder::attrInts(mp, "pads", {1, 1, 1, 1});
  conv(b, "p", "c1", 24, 40, 3, rng);
  b.node("Relu", {"c1"}, {"c1r"});
  conv(b, "c1r", "c2", 40, 40, 3, rng);
  b.node("Relu", {"c2"}, {"c2r"});
  b.node("Add", {"c1r", "c2r"}, {"sum"});
  b.initializerInt64("zero_pads", {8}, {0, 0, 0, 0, 0, 0, 0, 0});
  b.node("Pad", {"sum", "zero_pads"}, {"padded"});
  auto& ap = b.node("AveragePool", {"padded"}, {"y"});
  OnnxBuilder::attrInts(ap, "kernel_shape", {2, 2});
  OnnxBuilder::attrInts(ap, "strides", {2, 2});
  b.node("GlobalAveragePool", {"y"}, {"g"});
  b.output("y", {-1, 40, 3, 3});
  b.output("g", {-1, 40, 1, 1});
  b.output("mid", {-1, 24, 12, 12});
  return b;
}

// One blocked, rewritten run: the kernels it ran.
ProfiledRun blockedKernels(const OnnxBuilder& b, const Shape& shape) {
  auto m = builtModel(b);
  EXPECT_TRUE(m);
  if (!m) return {};
  auto ex = makeExecutor(m, true, true, 1);
  std::mt19937 rng(9);
  return profiledRun(*ex, {{"x", Tensor::fromVector<float>(randomValues((size_t)numelOf(shape), rng), shape)}});
}

}  // namespace

TEST(BlockedRegions, MobileNetInvertedResidualsMatchThePlainExecutor) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(21);
  // 6 convs (two depthwise) in one region, the Add without Relu fused into the projection conv.
  expectBlockedMatchesPlain(mobileNetLike(rng), {2, 16, 14, 14}, regions(6, 1) + "1 residual Adds fused");
  std::mt19937 rng2(21);
  const auto k = blockedKernels(mobileNetLike(rng2), {1, 16, 14, 14});
  EXPECT_EQ(k.countStartingWith("BlockedGlobalAveragePool"), 1);
  EXPECT_EQ(k.countStartingWith("ToNchw8c"), 1);
  EXPECT_EQ(k.countStartingWith("FromNchw8c"), 0);  // the GlobalAveragePool hands out plain [N, C, 1, 1]
}

TEST(BlockedRegions, MobileNetWith24ChannelsRunsInTheProcesssBlock) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  // mobilenet_v2's 24-channel residual: nChw16c with the tail padded (no region narrowed to
  // nChw8c), the outputs of the plain executor.
  std::mt19937 rng(24);
  expectBlockedMatchesPlain(mobileNetLike(rng, 24), {2, 24, 14, 14}, regions(6, 1) + "1 residual Adds fused");
}

TEST(BlockedRegions, PaddedChannelTailsThroughEveryMember) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(25);
  expectBlockedMatchesPlain(paddedChannels(rng), {2, 24, 12, 12}, regions(4, 1) + "0 residual Adds fused");
  std::mt19937 rng2(25);
  const auto k = blockedKernels(paddedChannels(rng2), {1, 24, 12, 12});
  EXPECT_EQ(k.countStartingWith("BlockedBatchNorm"), 1);
  EXPECT_EQ(k.countStartingWith("BlockedChannelScale"), 1);
  EXPECT_EQ(k.countStartingWith("BlockedMaxPool"), 1);
  EXPECT_EQ(k.countStartingWith("BlockedAveragePool"), 1);
  EXPECT_EQ(k.countStartingWith("BlockedGlobalAveragePool"), 2);
  EXPECT_EQ(k.countStartingWith("ToNchw8c"), 1);
  EXPECT_EQ(k.countStartingWith("FromNchw8c"), 2);  // y and mid
}

TEST(BlockedRegions, RegNetSqueezeExcitationMatchesThePlainExecutor) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  // 8 and 16 channels per group: the process's block (in nChw16c, 8 per group as block-diagonal
  // groups of 16).
  for (auto [perGroup, width] : {std::pair<int64_t, int64_t>{8, 32}, {16, 32}, {8, 40}}) {
    SCOPED_TRACE(std::to_string(perGroup) + " channels per group, " + std::to_string(width) + " channels");
    std::mt19937 rng(22);
    expectBlockedMatchesPlain(regNetLike(rng, perGroup, width), {2, width, 10, 10},
                              regions(6, 1) + "2 residual Adds fused");
    std::mt19937 rng2(22);
    const auto k = blockedKernels(regNetLike(rng2, perGroup, width), {1, width, 10, 10});
    EXPECT_EQ(k.countStartingWith("BlockedChannelScale"), 2);
    EXPECT_EQ(k.countStartingWith("BlockedGlobalAveragePool"), 2);
    EXPECT_EQ(k.countStartingWith("ToNchw8c"), 1);
    EXPECT_EQ(k.countStartingWith("FromNchw8c"), 1);  // the graph output
  }
}

TEST(BlockedRegions, DenseNetTransitionPoolsRunBlocked) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(23);
  expectBlockedMatchesPlain(denseTransition(rng), {2, 16, 12, 12}, regions(3, 1, 1));
  std::mt19937 rng2(23);
  const auto k = blockedKernels(denseTransition(rng2), {1, 16, 12, 12});
  EXPECT_EQ(k.countStartingWith("BlockedAveragePool"), 1);
  EXPECT_EQ(k.countStartingWith("ToNchw8c"), 1);
  EXPECT_EQ(k.countStartingWith("FromNchw8c"), 1);
}

namespace {

// x -> ToNchw8c -> BlockedMaxPool / BlockedAveragePool -> FromNchw8c -> y, or the plain ONNX op.
struct PoolCase {
  const char* op;  // MaxPool or AveragePool
  std::vector<int64_t> kernel, strides, pads, dilations;
  int64_t ceil = 0, includePad = 0;
};

// `block`: the layout's channels per block (the ToNchw8c attribute; 0 for the plain op).
std::shared_ptr<Model> poolModel(const PoolCase& c, int block, const Shape& shape) {
  const bool blocked = block > 0;
  OnnxBuilder b(19);
  if (blocked) {
    auto* os = b.proto().add_opset_import();
    os->set_domain(kFusedDomain);
    os->set_version(1);
  }
  b.input("x", {shape[0], shape[1], shape[2], shape[3]});
  auto attrs = [&](onnx::NodeProto& n) {
    OnnxBuilder::attrInts(n, "kernel_shape", c.kernel);
    OnnxBuilder::attrInts(n, "strides", c.strides);
    OnnxBuilder::attrInts(n, "pads", c.pads);
    if (!c.dilations.empty()) OnnxBuilder::attrInts(n, "dilations", c.dilations);
    OnnxBuilder::attrInt(n, "ceil_mode", c.ceil);
    if (std::string(c.op) == "AveragePool") OnnxBuilder::attrInt(n, "count_include_pad", c.includePad);
  };
  if (blocked) {
    auto& to = b.node(kToBlockedOp, {"x"}, {"xb"});
    to.set_domain(kFusedDomain);
    OnnxBuilder::attrInt(to, "block", block);
    auto& n = b.node(std::string(c.op) == "MaxPool" ? kBlockedMaxPoolOp : kBlockedAveragePoolOp, {"xb"}, {"yb"});
    n.set_domain(kFusedDomain);
    attrs(n);
    b.node(kFromBlockedOp, {"yb"}, {"y"}).set_domain(kFusedDomain);
  } else {
    attrs(b.node(c.op, {"x"}, {"y"}));
  }
  auto* y = b.graph().add_output();  // shape left to inference
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return builtModel(b);
}

}  // namespace

TEST(BlockedRegions, BlockedPoolsGiveThePlainKernelsBits) {
  // 13 columns: windows clipped at the borders, few whole ones; 45: runs of unclipped windows (the
  // kernel's four-at-once path) with NaNs in them, and a channel of +0 and -0 only, where which of
  // two equal taps wins shows the order of the comparisons.
  for (const Shape& shape : {Shape{2, 32, 11, 13}, Shape{1, 32, 14, 45}}) {
  SCOPED_TRACE("shape " + shapeToString(shape));
  std::mt19937 rng(31);
  std::vector<float> v = randomValues((size_t)numelOf(shape), rng, -3.f, 3.f);
  v[5] = -std::numeric_limits<float>::infinity();
  v[200] = std::numeric_limits<float>::quiet_NaN();
  v[211] = std::numeric_limits<float>::quiet_NaN();
  const int64_t plane = shape[2] * shape[3];
  for (int64_t i = 0; i < plane; ++i) v[(size_t)(plane + i)] = rng() % 2 ? 0.f : -0.f;
  const Tensor x = Tensor::fromVector<float>(v, shape);
  const std::vector<PoolCase> cases = {
      {"MaxPool", {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 0, 0},      {"MaxPool", {3, 3}, {2, 2}, {0, 0, 0, 0}, {}, 1, 0},
      {"MaxPool", {2, 3}, {1, 2}, {0, 1, 1, 0}, {2, 1}, 0, 0},  {"AveragePool", {2, 2}, {2, 2}, {0, 0, 0, 0}, {}, 0, 0},
      {"AveragePool", {3, 3}, {1, 1}, {1, 1, 1, 1}, {}, 0, 0},  {"AveragePool", {3, 3}, {1, 1}, {1, 1, 1, 1}, {}, 0, 1},
      {"AveragePool", {3, 3}, {2, 2}, {1, 0, 1, 0}, {}, 1, 1},
  };
  for (const PoolCase& c : cases)
    for (int block : {8, 16}) {
      SCOPED_TRACE(std::string(c.op) + " kernel " + shapeToString(c.kernel) + " pads " + shapeToString(c.pads) +
                   " ceil " + std::to_string(c.ceil) + " include_pad " + std::to_string(c.includePad) + " block " +
                   std::to_string(block));
      auto plain = poolModel(c, 0, shape), blocked = poolModel(c, block, shape);
      ASSERT_TRUE(plain && blocked);
      ExecutorOptions eo;
      eo.threads = 2;
      auto plainEx = Executor::create(plain, eo);
      auto blockedEx = Executor::create(blocked, eo);
      ASSERT_TRUE(plainEx) << plainEx.status().message();
      ASSERT_TRUE(blockedEx) << blockedEx.status().message();
      auto want = (*plainEx)->run({{"x", x}});
      auto got = (*blockedEx)->run({{"x", x}});
      ASSERT_TRUE(want) << want.status().message();
      ASSERT_TRUE(got) << got.status().message();
      ASSERT_EQ((*got)[0].shape(), (*want)[0].shape());
      EXPECT_EQ(std::memcmp((*got)[0].data<float>(), (*want)[0].data<float>(), (*want)[0].byteSize()), 0);
    }
  }
}

TEST(BlockedRegions, GlobalPoolAndChannelScaleAgreeInBothBlocks) {
  // x -> ToNchw8c -> BlockedGlobalAveragePool = gap (plain [N, C, 1, 1]);
  // x -> ToNchw8c -> BlockedChannelScale(., gap) -> FromNchw8c = y, in blocks of 8 and of 16: the
  // same bits in both (each channel's sum in the same order), and the plain ops' values; with 40
  // channels, a tail padded to a block of 16 (the exits' channels attribute).
  for (int64_t C : {48, 40}) {
  SCOPED_TRACE(std::to_string(C) + " channels");
  const Shape shape{2, C, 7, 9};
  std::mt19937 rng(33);
  const Tensor x = Tensor::fromVector<float>(randomValues((size_t)numelOf(shape), rng, -3.f, 3.f), shape);
  std::vector<std::vector<Tensor>> outs;
  for (int block : {8, 16}) {
    OnnxBuilder b(13);
    auto* os = b.proto().add_opset_import();
    os->set_domain(kFusedDomain);
    os->set_version(1);
    b.input("x", {shape[0], shape[1], shape[2], shape[3]});
    auto& to = b.node(kToBlockedOp, {"x"}, {"xb"});
    to.set_domain(kFusedDomain);
    OnnxBuilder::attrInt(to, "block", block);
    auto& gap = b.node(kBlockedGlobalAveragePoolOp, {"xb"}, {"gap"});
    gap.set_domain(kFusedDomain);
    OnnxBuilder::attrInt(gap, "channels", C);
    b.node(kBlockedChannelScaleOp, {"xb", "gap"}, {"yb"}).set_domain(kFusedDomain);
    auto& from = b.node(kFromBlockedOp, {"yb"}, {"y"});
    from.set_domain(kFusedDomain);
    OnnxBuilder::attrInt(from, "channels", C);
    b.output("gap", {shape[0], shape[1], 1, 1});
    b.output("y", {shape[0], shape[1], shape[2], shape[3]});
    auto m = builtModel(b);
    ASSERT_TRUE(m);
    ExecutorOptions eo;
    eo.threads = 2;
    auto ex = Executor::create(m, eo);
    ASSERT_TRUE(ex) << ex.status().message();
    auto got = (*ex)->run({{"x", x}});
    ASSERT_TRUE(got) << got.status().message();
    outs.push_back(std::move(got).value());
  }
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(outs[0][i].shape(), outs[1][i].shape());
    EXPECT_EQ(std::memcmp(outs[0][i].data<float>(), outs[1][i].data<float>(), outs[0][i].byteSize()), 0) << i;
  }
  const int64_t HW = shape[2] * shape[3];
  const float* xv = x.data<float>();
  for (int64_t nc = 0; nc < shape[0] * shape[1]; ++nc) {
    double sum = 0;
    for (int64_t p = 0; p < HW; ++p) sum += xv[nc * HW + p];
    const float mean = outs[0][0].data<float>()[nc];
    EXPECT_NEAR(mean, sum / (double)HW, 1e-5) << nc;
    for (int64_t p = 0; p < HW; ++p)
      ASSERT_EQ(outs[0][1].data<float>()[nc * HW + p], xv[nc * HW + p] * mean) << nc << " " << p;
  }
  }
}

TEST(BlockedRegions, AnExitsChannelsThatItsBlocksDoNotHoldAreAnError) {
  // 40 channels in blocks of 16 are 3 blocks; an exit told 20 channels (2 blocks) fails in one line.
  OnnxBuilder b(13);
  auto* os = b.proto().add_opset_import();
  os->set_domain(kFusedDomain);
  os->set_version(1);
  b.input("x", {1, 40, 3, 3});
  auto& to = b.node(kToBlockedOp, {"x"}, {"xb"});
  to.set_domain(kFusedDomain);
  OnnxBuilder::attrInt(to, "block", 16);
  auto& from = b.node(kFromBlockedOp, {"xb"}, {"y"}, "exit");
  from.set_domain(kFusedDomain);
  OnnxBuilder::attrInt(from, "channels", 20);
  b.output("y", {1, 20, 3, 3});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  auto ex = Executor::create(m, ExecutorOptions());
  ASSERT_TRUE(ex) << ex.status().message();
  std::mt19937 rng(5);
  auto got = (*ex)->run({{"x", Tensor::fromVector<float>(randomValues(360, rng), {1, 40, 3, 3})}});
  ASSERT_FALSE(got);
  EXPECT_NE(got.status().message().find("does not hold 20 channels in blocks of 16"), std::string::npos)
      << got.status().message();
  EXPECT_EQ(got.status().message().find('\n'), std::string::npos) << got.status().message();
}

TEST(BlockedRegions, BlockedConvTakesDepthwiseAndWholeBlocksPerGroupOnly) {
  EXPECT_TRUE(DnnlConv::blockedShapeSupported(48, 48, 48));    // depthwise
  EXPECT_TRUE(DnnlConv::blockedShapeSupported(440, 440, 55));  // regnet: 8 channels per group
  EXPECT_TRUE(DnnlConv::blockedShapeSupported(64, 128, 1));
  EXPECT_FALSE(DnnlConv::blockedShapeSupported(48, 48, 12));  // 4 channels per group
  EXPECT_FALSE(DnnlConv::blockedShapeSupported(58, 58, 58));  // shufflenet's 58 channels
  EXPECT_FALSE(DnnlConv::blockedShapeSupported(24, 48, 24));  // depthwise with a multiplier of 2
  // nChw16c: channels, and channels per group, in whole 16-channel blocks.
  EXPECT_TRUE(DnnlConv::blockedShapeSupported(48, 48, 48, 16));
  EXPECT_TRUE(DnnlConv::blockedShapeSupported(64, 64, 4, 16));
  EXPECT_FALSE(DnnlConv::blockedShapeSupported(440, 440, 55, 16));  // regnet's 8 channels per group
  EXPECT_FALSE(DnnlConv::blockedShapeSupported(64, 64, 1, 12));     // no such block
  // Group 1 and depthwise take a tail padded to the block (multiples of 8 channels): mobilenet_v2's
  // 24 channels; grouped convs do not (oneDNN 2.6 has only its reference kernel for them).
  EXPECT_TRUE(DnnlConv::blockedShapeSupported(24, 24, 24, 16));
  EXPECT_TRUE(DnnlConv::blockedShapeSupported(24, 144, 1, 16));
  EXPECT_TRUE(DnnlConv::blockedShapeSupported(144, 24, 1, 16));
  EXPECT_FALSE(DnnlConv::blockedShapeSupported(20, 32, 1, 16));    // not a multiple of 8
  EXPECT_FALSE(DnnlConv::blockedShapeSupported(48, 48, 2, 16));    // 24 per group
}

TEST(BlockedRegions, DepthwiseConvsCountOnlyAtAKnownSize) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  // Two depthwise 3x3 convs: a region at a fixed 20x20, none with dynamic H and W (PaddleOCR's
  // inputs, where tiny depthwise chains did not pay for oneDNN's per-call cost).
  for (bool fixed : {true, false}) {
    std::mt19937 rng(41);
    OnnxBuilder b(13);
    b.input("x", {1, 16, fixed ? 20 : -1, fixed ? 20 : -1});
    groupedConv(b, "x", "d1", 16, 16, 3, 16, rng);
    relu6(b, "d1", "r1");
    groupedConv(b, "r1", "y", 16, 16, 3, 16, rng);
    b.output("y", {1, 16, fixed ? 20 : -1, fixed ? 20 : -1});
    auto m = builtModel(b);
    ASSERT_TRUE(m);
    auto ex = makeExecutor(m, true, true, 1);
    ASSERT_TRUE(ex);
    EXPECT_EQ(ex->rewriteSummary().find(regions(2, 1)) != std::string::npos, fixed)
        << ex->rewriteSummary();
  }
}

namespace {

// A ResNet stem and block: x [N, 3, 32, 32] -> 7x7 stride-2 conv (3 -> 16) + Relu -> 3x3 stride-2
// MaxPool -> conv3x3 + Relu -> conv3x3 -> Add(pool) -> Relu = y.
OnnxBuilder stemAndBlock(std::mt19937& rng) {
  OnnxBuilder b(13);
  b.input("x", {-1, 3, 32, 32});
  conv(b, "x", "stem", 3, 16, 7, rng, 2);
  b.node("Relu", {"stem"}, {"stem_r"});
  auto& mp = b.node("MaxPool", {"stem_r"}, {"pool"});
  OnnxBuilder::attrInts(mp, "kernel_shape", {3, 3});
  OnnxBuilder::attrInts(mp, "strides", {2, 2});
  OnnxBuilder::attrInts(mp, "pads", {1, 1, 1, 1});
  conv(b, "pool", "c1", 16, 16, 3, rng);
  b.node("Relu", {"c1"}, {"r1"});
  conv(b, "r1", "c2", 16, 16, 3, rng);
  b.node("Add", {"c2", "pool"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y", {-1, 16, 8, 8});
  return b;
}

// x [N, C, H, W] -> BlockedConv (plain_input 1, `block`) -> FromNchw8c = y.
std::shared_ptr<Model> blockedStemModel(const Shape& shape, int64_t cout, int block, std::mt19937& rng) {
  OnnxBuilder b(13);
  auto* os = b.proto().add_opset_import();
  os->set_domain(kFusedDomain);
  os->set_version(1);
  b.input("x", {-1, -1, -1, -1});  // any size: the kernel checks it
  b.initializer("w", {cout, shape[1], 3, 3}, randomValues((size_t)(cout * shape[1] * 9), rng, -0.3f, 0.3f));
  auto& n = b.node(kBlockedConvOp, {"x", "w"}, {"yb"});
  n.set_domain(kFusedDomain);
  OnnxBuilder::attrInts(n, "kernel_shape", {3, 3});
  OnnxBuilder::attrInts(n, "pads", {1, 1, 1, 1});
  OnnxBuilder::attrInt(n, "block", block);
  OnnxBuilder::attrInt(n, "plain_input", 1);
  b.node(kFromBlockedOp, {"yb"}, {"y"}).set_domain(kFusedDomain);
  auto* y = b.graph().add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return builtModel(b);
}

}  // namespace

TEST(BlockedRegions, StemsStartTheRegionAtTheImage) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  // The 3-channel stem writes the blocked layout from plain NCHW, its MaxPool runs blocked, and the
  // only reorder left is the graph output's (before: a ToNchw8c after the plain MaxPool too).
  std::mt19937 rng(51);
  expectBlockedMatchesPlain(stemAndBlock(rng), {2, 3, 32, 32},
                            regions(3, 1) + "1 residual Adds fused, 1 from the image, 1 reorders");
  std::mt19937 rng2(51);
  const auto k = blockedKernels(stemAndBlock(rng2), {1, 3, 32, 32});
  EXPECT_EQ(k.countStartingWith("BlockedMaxPool"), 1);
  EXPECT_EQ(k.countStartingWith("ToNchw8c"), 0);
  EXPECT_EQ(k.countStartingWith("FromNchw8c"), 1);
  EXPECT_TRUE(DnnlConv::plainInputSupported(3, 64, 1, 16));
  EXPECT_FALSE(DnnlConv::plainInputSupported(8, 64, 1));    // a blocked input: blockedShapeSupported
  EXPECT_FALSE(DnnlConv::plainInputSupported(3, 24, 1, 16));  // output not whole blocks
  EXPECT_FALSE(DnnlConv::plainInputSupported(3, 48, 3));    // grouped
}

TEST(BlockedRegions, AStemAloneFormsNoRegion) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  // A stem and one 3x3 conv: one counted conv, so no region (the stem does not count).
  std::mt19937 rng(52);
  OnnxBuilder b(13);
  b.input("x", {1, 3, 16, 16});
  conv(b, "x", "stem", 3, 16, 3, rng, 2);
  conv(b, "stem", "y", 16, 16, 3, rng);
  b.output("y", {1, 16, 8, 8});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  auto ex = makeExecutor(m, true, true, 1);
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->rewriteSummary().find("regions"), std::string::npos) << ex->rewriteSummary();
}

TEST(BlockedRegions, BlockedStemMatchesThePlainConvAndRejectsBadInput) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  const Shape shape{2, 3, 9, 11};
  std::mt19937 rng(53);
  const Tensor x = Tensor::fromVector<float>(randomValues((size_t)numelOf(shape), rng), shape);
  for (int block : {8, 16}) {
    SCOPED_TRACE("block " + std::to_string(block));
    std::mt19937 wrng(54);
    auto m = blockedStemModel(shape, 32, block, wrng);
    ASSERT_TRUE(m);
    ExecutorOptions eo;
    eo.threads = 2;
    auto ex = Executor::create(m, eo);
    ASSERT_TRUE(ex) << ex.status().message();
    auto got = (*ex)->run({{"x", x}});
    ASSERT_TRUE(got) << got.status().message();
    ASSERT_EQ((*got)[0].shape(), (Shape{2, 32, 9, 11}));
    // The naive convolution (pads 1, stride 1, no bias).
    const Tensor& W = *m->graph.value(m->graph.findValue("w")).constant;
    const float* xv = x.data<float>();
    const float* wv = W.data<float>();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t o = 0; o < 32; ++o)
        for (int64_t i = 0; i < 9; ++i)
          for (int64_t j = 0; j < 11; ++j) {
            double s = 0;
            for (int64_t c = 0; c < 3; ++c)
              for (int64_t ki = 0; ki < 3; ++ki)
                for (int64_t kj = 0; kj < 3; ++kj) {
                  const int64_t ii = i + ki - 1, jj = j + kj - 1;
                  if (ii < 0 || ii >= 9 || jj < 0 || jj >= 11) continue;
                  s += (double)xv[((n * 3 + c) * 9 + ii) * 11 + jj] * wv[((o * 3 + c) * 3 + ki) * 3 + kj];
                }
            ASSERT_NEAR((*got)[0].data<float>()[((n * 32 + o) * 9 + i) * 11 + j], s, 1e-4) << n << " " << o;
          }
    // Another number of channels than W's: an error naming both, no crash.
    auto bad = (*ex)->run({{"x", Tensor(DType::Float, {1, 4, 9, 11})}});
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.status().message().find("X has 4 channels, W expects 3"), std::string::npos)
        << bad.status().message();
  }
  // plain_input with a blocked number of input channels: refused at load, naming the rule.
  std::mt19937 wrng(55);
  auto m = blockedStemModel({1, 8, 9, 11}, 32, 8, wrng);
  ASSERT_TRUE(m);
  ExecutorOptions eo;
  auto ex = Executor::create(m, eo);
  ASSERT_FALSE(ex);
  EXPECT_NE(ex.status().message().find("fewer than 8 input channels"), std::string::npos) << ex.status().message();
}

TEST(BlockedRegions, BatchNormReadsItsConcatInPlace) {
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  // denseNetLike: the last BatchNormalization is the only reader of the second Concat, which it
  // reads in place; the first Concat is also read by the second one, so it stays (12 nodes run:
  // MaxPool, ToNchw8c, 3 BlockedBatchNorms, 4 BlockedConvs, the first Concat, the AveragePool,
  // FromNchw8c; the other two BatchNormalizations are folded into the convs).
  std::mt19937 rng(2);
  const auto k = blockedKernels(denseNetLike(rng), {1, 16, 18, 18});
  EXPECT_EQ(k.countStartingWith("BlockedBatchNorm(BatchNormalization,Concat,Relu)"), 1);
  EXPECT_EQ(k.countStartingWith("BlockedBatchNorm"), 3);
  EXPECT_EQ(k.kernels.size(), 12u);
}

TEST(BlockedRegions, BatchNormOverAConcatGivesTheBitsOfBoth) {
  // a, b -> ToNchw8c -> Concat -> BlockedBatchNorm (relu) and a, b -> ToNchw8c -> BlockedBatchNorm
  // (concat 2, relu): the same bits, in blocks of 8 and 16, at 1 and 2 threads.
  const Shape sa{2, 32, 5, 7}, sb{2, 16, 5, 7};
  std::mt19937 rng(61);
  const Tensor a = Tensor::fromVector<float>(randomValues((size_t)numelOf(sa), rng, -2.f, 2.f), sa);
  const Tensor bt = Tensor::fromVector<float>(randomValues((size_t)numelOf(sb), rng, -2.f, 2.f), sb);
  const std::vector<float> scale = randomValues(48, rng, 0.5f, 1.5f), shift = randomValues(48, rng, -0.5f, 0.5f);
  auto model = [&](int block, bool inPlace, int64_t concatAttr) {
    OnnxBuilder b(13);
    auto* os = b.proto().add_opset_import();
    os->set_domain(kFusedDomain);
    os->set_version(1);
    b.input("a", {sa[0], sa[1], sa[2], sa[3]});
    b.input("b", {sb[0], sb[1], sb[2], sb[3]});
    b.initializer("s", {48}, scale);
    b.initializer("h", {48}, shift);
    for (const char* v : {"a", "b"}) {
      auto& to = b.node(kToBlockedOp, {v}, {std::string(v) + "b"});
      to.set_domain(kFusedDomain);
      OnnxBuilder::attrInt(to, "block", block);
    }
    if (inPlace) {
      auto& bn = b.node(kBlockedBatchNormOp, {"ab", "bb", "s", "h"}, {"yb"});
      bn.set_domain(kFusedDomain);
      OnnxBuilder::attrInt(bn, "relu", 1);
      OnnxBuilder::attrInt(bn, "concat", concatAttr);
    } else {
      auto& cat = b.node("Concat", {"ab", "bb"}, {"cat"});
      OnnxBuilder::attrInt(cat, "axis", 1);
      auto& bn = b.node(kBlockedBatchNormOp, {"cat", "s", "h"}, {"yb"});
      bn.set_domain(kFusedDomain);
      OnnxBuilder::attrInt(bn, "relu", 1);
    }
    b.node(kFromBlockedOp, {"yb"}, {"y"}).set_domain(kFusedDomain);
    b.output("y", {2, 48, 5, 7});
    return builtModel(b);
  };
  for (int block : {8, 16})
    for (int threads : {1, 2}) {
      SCOPED_TRACE("block " + std::to_string(block) + ", " + std::to_string(threads) + " threads");
      std::vector<Tensor> ys;
      for (bool inPlace : {false, true}) {
        auto m = model(block, inPlace, 2);
        ASSERT_TRUE(m);
        ExecutorOptions eo;
        eo.threads = threads;
        auto ex = Executor::create(m, eo);
        ASSERT_TRUE(ex) << ex.status().message();
        auto got = (*ex)->run({{"a", a}, {"b", bt}});
        ASSERT_TRUE(got) << got.status().message();
        ys.push_back((*got)[0]);
      }
      ASSERT_EQ(ys[0].shape(), ys[1].shape());
      EXPECT_EQ(std::memcmp(ys[0].data<float>(), ys[1].data<float>(), ys[0].byteSize()), 0);
      EXPECT_GT(std::count_if(ys[0].data<float>(), ys[0].data<float>() + ys[0].numel(), [](float v) { return v > 0; }),
                0);
    }
  // A concat count that does not match the inputs: refused at load, naming it.
  auto bad = model(8, true, 3);
  ASSERT_TRUE(bad);
  ExecutorOptions eo;
  auto ex = Executor::create(bad, eo);
  ASSERT_FALSE(ex);
  EXPECT_NE(ex.status().message().find("concat is 3 with 4 inputs"), std::string::npos) << ex.status().message();
}
