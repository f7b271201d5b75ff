// The 1x1 expansion and its depthwise conv as one BlockedExpandDepthwise (core/exec/expand_depthwise_rewrite.h): in
// MobileNetV2-like blocks the pairs whose expansion only the depthwise conv reads are fused (not one also read
// elsewhere), and the outputs are bit for bit those of the two BlockedConvs apart (QS_EXPAND_DW=0), at batch 1 and
// 3, on 1 and 2 threads. ctest runs it once more with QS_EXPAND_DW_MIN_KB=0, so that the bands run at these small
// sizes too. Skipped without oneDNN, in nChw8c, or without AVX-512.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/exec/executor.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/expand_depthwise_blocked.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::builtModel;
using qs::test::groupedConv;
using qs::test::OnnxBuilder;
using qs::test::profiledRun;
using qs::test::ProfiledRun;
using qs::test::randomValues;
using qs::test::relu6;

namespace {

// x [N, 16, 30, 30]: 1x1 16 -> 48 + Relu6, depthwise 3x3 stride 2 + Relu6, 1x1 -> 24 (a pair); 1x1 24 -> 72 + Relu6,
// depthwise 3x3 + Relu6, 1x1 -> 24, + its input (a pair); 1x1 24 -> 40 (channel tails) whose output a depthwise 3x3
// and an Add both read (no pair), GlobalAveragePool, Flatten.
OnnxBuilder invertedResiduals(std::mt19937& rng) {
  OnnxBuilder b(13);
  b.input("x", {-1, 16, 30, 30});
  groupedConv(b, "x", "e1", 16, 48, 1, 1, rng);
  relu6(b, "e1", "e1r");
  groupedConv(b, "e1r", "d1", 48, 48, 3, 48, rng, 2);
  relu6(b, "d1", "d1r");
  groupedConv(b, "d1r", "p1", 48, 24, 1, 1, rng);
  groupedConv(b, "p1", "e2", 24, 72, 1, 1, rng);
  relu6(b, "e2", "e2r");
  groupedConv(b, "e2r", "d2", 72, 72, 3, 72, rng);
  relu6(b, "d2", "d2r");
  groupedConv(b, "d2r", "p2", 72, 24, 1, 1, rng);
  b.node("Add", {"p1", "p2"}, {"a2"});
  groupedConv(b, "a2", "e3", 24, 40, 1, 1, rng);
  groupedConv(b, "e3", "d3", 40, 40, 3, 40, rng);
  b.node("Add", {"e3", "d3"}, {"a3"});
  b.node("GlobalAveragePool", {"a3"}, {"gap"});
  auto& f = b.node("Flatten", {"gap"}, {"y"});
  OnnxBuilder::attrInt(f, "axis", 1);
  b.output("y", {-1, 40});
  return b;
}

std::unique_ptr<Executor> blockedExecutor(std::shared_ptr<Model> m, int threads) {
  ExecutorOptions eo;
  eo.rewrites = true;
  eo.libraryKernels = true;
  eo.blockedRegions = true;
  eo.threads = threads;
  auto ex = Executor::create(m, eo);
  EXPECT_TRUE(ex) << ex.status().message();
  return ex ? std::move(ex).value() : nullptr;
}

}  // namespace

TEST(ExpandDepthwiseRewrite, PairsRunAsOneNodeWithTheBitsOfTheTwo) {
  if (!DnnlConv::available() || DnnlConv::preferredBlock() != 16 || !Conv1x1Blocked::available())
    GTEST_SKIP() << "needs oneDNN, nChw16c and AVX-512";
  for (const char* off : {"QS_EXPAND_DW", "QS_CONV1X1", "QS_DW"})
    if (std::getenv(off)) GTEST_SKIP() << off << " is set: the pairs are not fused";
  std::mt19937 rng(31);
  auto m = builtModel(invertedResiduals(rng));
  ASSERT_TRUE(m);
  for (int64_t N : {1, 3}) {
    const Shape shape{N, 16, 30, 30};
    Tensor x = Tensor::fromVector<float>(randomValues((size_t)numelOf(shape), rng), shape);
    setenv("QS_EXPAND_DW", "0", 1);
    auto apart = blockedExecutor(m, 2)->run({{"x", x}});
    unsetenv("QS_EXPAND_DW");
    ASSERT_TRUE(apart) << apart.status().message();
    for (int threads : {1, 2}) {
      SCOPED_TRACE("batch " + std::to_string(N) + ", " + std::to_string(threads) + " threads");
      auto ex = blockedExecutor(m, threads);
      ASSERT_TRUE(ex);
      ProfiledRun run = profiledRun(*ex, {{"x", x}});
      ASSERT_TRUE(run.ok);
      EXPECT_EQ(run.countStartingWith(kBlockedExpandDepthwiseOp), 2);
      // p1, p2 (the Add fused), e3 (read twice), d3 (the Add fused: no depthwise form)
      EXPECT_EQ(run.countStartingWith("BlockedConv"), 4);
      const Tensor& got = run.outputs[0];
      ASSERT_EQ(got.shape(), (*apart)[0].shape());
      EXPECT_EQ(std::memcmp(got.data<float>(), (*apart)[0].data<float>(), got.byteSize()), 0);
    }
  }
}
