// The executor's graph rewrites (constant folding, BatchNormalization and affine folding into
// Conv, activation fusion): results equal to the original graph within float rounding, observed
// runs see every original node, transformed weights are honoured, 1 and 2 threads agree; the
// same on the PaddleOCR models when they are present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "core/exec/executor.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;
using qs::test::builtModel;
using qs::test::makeExecutor;
using qs::test::profiledRun;
using qs::test::ProfiledRun;
using qs::test::randomTensor;
using qs::test::randomValues;
using qs::test::relativeError;

namespace {

void convNode(OnnxBuilder& b, const std::string& in, const std::string& out, const std::string& w, const std::string& bias,
              int64_t group, int64_t k, std::mt19937& rng, int64_t cin, int64_t cout, bool withBias = true) {
  b.initializer(w, {cout, cin / group, k, k}, randomValues((size_t)(cout * cin / group * k * k), rng));
  std::vector<std::string> ins = {in, w};
  if (withBias) {
    b.initializer(bias, {cout}, randomValues((size_t)cout, rng));
    ins.push_back(bias);
  }
  auto& n = b.node("Conv", ins, {out}, "conv_" + out);
  OnnxBuilder::attrInts(n, "pads", {k / 2, k / 2, k / 2, k / 2});
  OnnxBuilder::attrInt(n, "group", group);
}

// Every pattern the rewrites know, plus chains they must leave alone.
OnnxBuilder patternsModel() {
  std::mt19937 rng(11);
  OnnxBuilder b(13);
  const int64_t C = 8;
  b.input("x", {1, C, 10, 12});
  // conv -> BN -> Mul(scalar) -> Add(per-channel) -> x*clip(x+3,0,6)/6 -> Mul(scalar) -> Add(scalar)
  convNode(b, "x", "c1", "w1", "b1", 1, 3, rng, C, C);
  b.initializer("bn_s", {C}, randomValues(C, rng, 0.5f, 1.5f));
  b.initializer("bn_b", {C}, randomValues(C, rng));
  b.initializer("bn_m", {C}, randomValues(C, rng));
  b.initializer("bn_v", {C}, randomValues(C, rng, 0.5f, 2.f));
  b.node("BatchNormalization", {"c1", "bn_s", "bn_b", "bn_m", "bn_v"}, {"bn1"}, "bn1");
  b.initializer("k_mul", {1}, {1.7f});
  b.node("Mul", {"k_mul", "bn1"}, {"m1"}, "m1");
  b.initializer("k_add", {C, 1, 1}, randomValues(C, rng));
  b.node("Add", {"m1", "k_add"}, {"a1"}, "a1");
  b.initializer("three", {}, {3.f});
  b.initializer("zero", {}, {0.f});
  b.initializer("six", {}, {6.f});
  b.node("Add", {"a1", "three"}, {"hs_a"}, "hs_a");
  b.node("Clip", {"hs_a", "zero", "six"}, {"hs_c"}, "hs_c");
  b.node("Mul", {"a1", "hs_c"}, {"hs_m"}, "hs_m");
  b.node("Div", {"hs_m", "six"}, {"hs"}, "hs_d");
  b.initializer("k_mul2", {1}, {0.8f});
  b.node("Mul", {"hs", "k_mul2"}, {"m2"}, "m2");
  b.initializer("k_add2", {1}, {0.1f});
  b.node("Add", {"m2", "k_add2"}, {"y1"}, "a2");
  // depthwise conv -> HardSigmoid; its input y1 has two consumers (so y1's chain stops there)
  convNode(b, "y1", "c2", "w2", "b2", C, 3, rng, C, C);
  auto& hsig = b.node("HardSigmoid", {"c2"}, {"y2"}, "hsig");
  OnnxBuilder::attrFloat(hsig, "alpha", 0.25f);
  // 1x1 conv without bias -> x * HardSigmoid(x)
  convNode(b, "y1", "c3", "w3", "", 1, 1, rng, C, C, false);
  b.node("HardSigmoid", {"c3"}, {"c3g"}, "c3g");
  b.node("Mul", {"c3", "c3g"}, {"y3"}, "c3m");
  // conv -> LeakyRelu, whose conv output is also a graph output (no fusion may hide it)
  convNode(b, "y1", "c4", "w4", "b4", 1, 3, rng, C, C);
  auto& lr = b.node("LeakyRelu", {"c4"}, {"y4"}, "lrelu");
  OnnxBuilder::attrFloat(lr, "alpha", 0.2f);
  // conv -> Sigmoid -> Sub(scalar) (the Sub after an activation becomes Add(-k))
  convNode(b, "y2", "c5", "w5", "b5", 1, 3, rng, C, C);
  b.node("Sigmoid", {"c5"}, {"s5"}, "sig5");
  b.initializer("k_sub", {}, {0.5f});
  b.node("Sub", {"s5", "k_sub"}, {"y5"}, "sub5");
  // conv -> Relu -> Mul by a per-channel constant after an activation: Mul stays a node
  convNode(b, "y3", "c6", "w6", "b6", 1, 3, rng, C, C);
  b.node("Relu", {"c6"}, {"r6"}, "relu6");
  b.initializer("k_pc", {1, C, 1, 1}, randomValues(C, rng));
  b.node("Mul", {"r6", "k_pc"}, {"y6"}, "mul6");
  // a constant subgraph: k = (kc1 * kc2) + kc1, added to y6
  b.initializer("kc1", {1, C, 1, 1}, randomValues(C, rng));
  b.initializer("kc2", {1, C, 1, 1}, randomValues(C, rng));
  b.node("Mul", {"kc1", "kc2"}, {"kc3"}, "kmul");
  b.node("Add", {"kc3", "kc1"}, {"kc4"}, "kadd");
  b.node("Add", {"y6", "kc4"}, {"y7"}, "final_add");
  for (const char* o : {"y4", "c4", "y5", "y7"}) b.output(o, {1, C, 10, 12});
  return b;
}

struct CountingObserver : ExecutionObserver {
  std::set<NodeId> nodes;
  void onNodeOutput(NodeId node, size_t, ValueId, const Tensor&) override { nodes.insert(node); }
};

// Doubles the weights of every Conv (input 1), like fake quantization replacing them.
struct DoubleWeights : InputTransform {
  const Graph* g = nullptr;
  const Tensor* transform(NodeId node, size_t inputIndex, const Tensor& value, Tensor& storage) override {
    if (inputIndex != 1 || g->nodes[(size_t)node].opType != "Conv") return nullptr;
    storage = value.clone();
    for (int64_t i = 0; i < storage.numel(); ++i) storage.data<float>()[i] *= 2.f;
    return &storage;
  }
};

}  // namespace

TEST(CoreRewrites, SmallGraphSameOutputsWithAndWithoutRewrites) {
  auto m = builtModel(patternsModel());
  ASSERT_TRUE(m);
  std::mt19937 rng(5);
  Tensor x = Tensor::fromVector<float>(randomValues(8 * 10 * 12, rng), {1, 8, 10, 12});
  auto plain = makeExecutor(m, false, 1);
  ASSERT_TRUE(plain);
  auto want = plain->run({{"x", x}});
  ASSERT_TRUE(want) << want.status().message();
  for (int threads : {1, 2}) {
    auto fast = makeExecutor(m, true, threads);
    ASSERT_TRUE(fast);
    EXPECT_TRUE(fast->rewritesActive());
    // Folded: BN, Mul, Add before the HardSwish; fused: the 4 HardSwish nodes, Mul, Add, HardSigmoid,
    // x*HardSigmoid(x), Sigmoid, Sub, Relu; constant: kmul, kadd.
    EXPECT_NE(fast->rewriteSummary().find("2 constant nodes folded"), std::string::npos) << fast->rewriteSummary();
    EXPECT_NE(fast->rewriteSummary().find("3 nodes folded into Conv"), std::string::npos) << fast->rewriteSummary();
    ProfiledRun run = profiledRun(*fast, {{"x", x}});
    ASSERT_TRUE(run.ok);
    ASSERT_EQ(run.outputs.size(), want->size());
    for (size_t i = 0; i < run.outputs.size(); ++i)
      EXPECT_LT(relativeError(run.outputs[i], (*want)[i]), 1e-5) << "output " << i;
    // The rewritten run executes fewer nodes, each reported under an original node id.
    EXPECT_LT(run.profile.nodes.size(), m->graph.nodes.size());
    bool sawFused = false;
    for (const auto& np : run.profile.nodes) {
      ASSERT_GE(np.node, 0);
      ASSERT_LT(np.node, (NodeId)m->graph.nodes.size());
      if (!np.absorbed.empty()) {
        sawFused = true;
        EXPECT_EQ(m->graph.nodes[(size_t)np.node].opType, "Conv");
      }
    }
    EXPECT_TRUE(sawFused);
  }
}

TEST(CoreRewrites, ObservedRunsSeeEveryOriginalNode) {
  auto m = builtModel(patternsModel());
  ASSERT_TRUE(m);
  auto fast = makeExecutor(m, true, 2);
  ASSERT_TRUE(fast);
  std::mt19937 rng(6);
  Tensor x = Tensor::fromVector<float>(randomValues(8 * 10 * 12, rng), {1, 8, 10, 12});
  CountingObserver obs;
  RunOptions ro;
  ro.observer = &obs;
  ASSERT_TRUE(fast->run({{"x", x}}, ro));
  EXPECT_EQ(obs.nodes.size(), m->graph.nodes.size());
}

TEST(CoreRewrites, TransformedWeightsAreUsedNotThePackedConstants) {
  auto m = builtModel(patternsModel());
  ASSERT_TRUE(m);
  std::mt19937 rng(8);
  Tensor x = Tensor::fromVector<float>(randomValues(8 * 10 * 12, rng), {1, 8, 10, 12});
  DoubleWeights t;
  t.g = &m->graph;
  RunOptions ro;
  ro.inputTransform = &t;
  auto want = makeExecutor(m, false, 1)->run({{"x", x}}, ro);
  auto got = makeExecutor(m, true, 2)->run({{"x", x}}, ro);
  auto untransformed = makeExecutor(m, true, 2)->run({{"x", x}});
  ASSERT_TRUE(want && got && untransformed);
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_LT(relativeError((*got)[i], (*want)[i]), 1e-5) << "output " << i;
    EXPECT_GT(relativeError((*untransformed)[i], (*want)[i]), 1e-3) << "output " << i;
  }
}

TEST(CoreRewrites, ShapeSubgraphsAreEvaluatedPerInputShape) {
  // y = Reshape(x, [x.shape[0], -1]) * 2: the shape input comes from Shape -> Gather -> Unsqueeze -> Concat.
  OnnxBuilder b(13);
  b.input("x", {-1, 3, -1});
  b.output("y", {-1, -1});
  b.node("Shape", {"x"}, {"s"}, "shape");
  b.initializerInt64("i0", {}, {0});
  b.initializerInt64("ax", {1}, {0});
  b.initializerInt64("minus1", {1}, {-1});
  b.node("Gather", {"s", "i0"}, {"n"}, "gather");
  b.node("Unsqueeze", {"n", "ax"}, {"n1"}, "unsq");
  auto& concat = b.node("Concat", {"n1", "minus1"}, {"shape2"}, "concat");
  OnnxBuilder::attrInt(concat, "axis", 0);
  b.node("Reshape", {"x", "shape2"}, {"r"}, "reshape");
  b.initializer("two", {}, {2.f});
  b.node("Mul", {"r", "two"}, {"y"}, "mul");
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  auto plain = makeExecutor(m, false, 1);
  auto fast = makeExecutor(m, true, 2);
  ASSERT_TRUE(plain && fast);
  std::mt19937 rng(4);
  for (int round = 0; round < 2; ++round) {
    for (int64_t n : {1, 2, 5}) {
      Tensor x = Tensor::fromVector<float>(randomValues((size_t)(n * 3 * 4), rng), {n, 3, 4});
      auto want = plain->run({{"x", x}});
      auto got = fast->run({{"x", x}});
      ASSERT_TRUE(want && got) << (want ? got.status().message() : want.status().message());
      EXPECT_EQ((*got)[0].shape(), (Shape{n, 12}));
      EXPECT_EQ(relativeError((*got)[0], (*want)[0]), 0.0);
    }
  }
  // Cached: a run with a seen shape executes only the Reshape and the Mul.
  Tensor x = Tensor::fromVector<float>(randomValues(2 * 3 * 4, rng), {2, 3, 4});
  ProfiledRun run = profiledRun(*fast, {{"x", x}});
  ASSERT_TRUE(run.ok);
  EXPECT_EQ(run.profile.nodes.size(), 2u);
}

namespace {

struct PaddleCase {
  const char* file;
  Shape shape;
};

}  // namespace

TEST(CoreRewrites, PaddleOcrModelsRewritesOnOffAndThreadsAgree) {
#ifndef QS_MODELS_DIR
  GTEST_SKIP() << "QS_MODELS_DIR not defined";
#else
  const PaddleCase cases[] = {{"ch_PP-OCRv4_det_infer.onnx", {1, 3, 320, 320}},
                              {"ch_PP-OCRv4_rec_infer.onnx", {2, 3, 48, 320}},
                              {"ch_ppocr_mobile_v2.0_cls_infer.onnx", {2, 3, 48, 192}}};
  int ran = 0;
  for (const auto& c : cases) {
    const std::string path = std::string(QS_MODELS_DIR) + "/" + c.file;
    if (!std::filesystem::exists(path)) continue;
    auto model = loadModel(path);
    ASSERT_TRUE(model) << model.status().message();
    std::mt19937 rng(9);
    Tensor x = Tensor::fromVector<float>(randomValues((size_t)numelOf(c.shape), rng, 0.f, 1.f), c.shape);
    const std::string input = (*model)->graph.value((*model)->graph.inputs[0]).name;
    auto ref = makeExecutor(*model, false, 1)->run({{input, x}});
    ASSERT_TRUE(ref) << ref.status().message();
    for (int threads : {1, 2}) {
      for (bool rewrites : {false, true}) {
        if (!rewrites && threads == 1) continue;
        auto ex = makeExecutor(*model, rewrites, threads);
        ASSERT_TRUE(ex);
        auto got = ex->run({{input, x}});
        ASSERT_TRUE(got) << got.status().message();
        for (size_t i = 0; i < got->size(); ++i) {
          if (!rewrites) {
            // Threads split outputs, never reductions: bit-identical.
            EXPECT_EQ(relativeError((*got)[i], (*ref)[i]), 0.0) << c.file << " threads " << threads;
          } else {
            EXPECT_LT(relativeError((*got)[i], (*ref)[i]), 1e-4) << c.file << " threads " << threads << " rewrites";
          }
        }
      }
    }
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "PaddleOCR models not found under " << QS_MODELS_DIR;
#endif
}

TEST(CoreRewrites, ConvTransposeTakesItsBiasAddBatchNormAndRelu) {
  // det's head: ConvTranspose 2x2 stride 2 -> Add(bias [1, M, 1, 1]) -> BatchNormalization -> Relu ->
  // ConvTranspose -> Add -> Sigmoid. The first becomes one FusedConvTranspose (the Add and the BN folded
  // into its weights and bias, Relu its epilogue); the second takes its Add, and the Sigmoid stays a node.
  // A grouped 3x3 ConvTranspose with pads takes a BatchNormalization per output channel of its groups.
  std::mt19937 rng(21);
  OnnxBuilder b(13);
  const int64_t C = 4, M = 6;
  b.input("x", {1, C, 5, 7});
  b.initializer("wt1", {C, M, 2, 2}, randomValues((size_t)(C * M * 4), rng));
  auto& t1 = b.node("ConvTranspose", {"x", "wt1"}, {"t1"}, "t1");
  OnnxBuilder::attrInts(t1, "strides", {2, 2});
  b.initializer("t1_b", {1, M, 1, 1}, randomValues((size_t)M, rng));
  b.node("Add", {"t1", "t1_b"}, {"t1a"}, "t1_add");
  b.initializer("bn_s", {M}, randomValues((size_t)M, rng, 0.5f, 1.5f));
  b.initializer("bn_b", {M}, randomValues((size_t)M, rng));
  b.initializer("bn_m", {M}, randomValues((size_t)M, rng));
  b.initializer("bn_v", {M}, randomValues((size_t)M, rng, 0.5f, 2.f));
  b.node("BatchNormalization", {"t1a", "bn_s", "bn_b", "bn_m", "bn_v"}, {"t1n"}, "t1_bn");
  b.node("Relu", {"t1n"}, {"t1r"}, "t1_relu");
  b.initializer("wt2", {M, 1, 2, 2}, randomValues((size_t)(M * 4), rng));
  auto& t2 = b.node("ConvTranspose", {"t1r", "wt2"}, {"t2"}, "t2");
  OnnxBuilder::attrInts(t2, "strides", {2, 2});
  b.initializer("t2_b", {1, 1, 1, 1}, {0.3f});
  b.node("Add", {"t2", "t2_b"}, {"t2a"}, "t2_add");
  b.node("Sigmoid", {"t2a"}, {"y"}, "sigmoid");
  b.initializer("wg", {C, M / 2, 3, 3}, randomValues((size_t)(C * M / 2 * 9), rng));
  auto& tg = b.node("ConvTranspose", {"x", "wg"}, {"tg"}, "tg");
  OnnxBuilder::attrInts(tg, "strides", {2, 2});
  OnnxBuilder::attrInts(tg, "pads", {1, 1, 1, 1});
  OnnxBuilder::attrInt(tg, "group", 2);
  b.node("BatchNormalization", {"tg", "bn_s", "bn_b", "bn_m", "bn_v"}, {"yg"}, "tg_bn");
  b.output("y", {1, 1, 20, 28});
  b.output("yg", {1, M, 9, 13});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  Tensor x = Tensor::fromVector<float>(randomValues((size_t)(C * 5 * 7), rng), {1, C, 5, 7});
  auto want = makeExecutor(m, false, 1)->run({{"x", x}});
  ASSERT_TRUE(want) << want.status().message();
  for (int threads : {1, 2}) {
    auto fast = makeExecutor(m, true, threads);
    ASSERT_TRUE(fast);
    // Folded: t1's Add and BN, t2's Add, tg's BN; fused: t1's Relu.
    EXPECT_NE(fast->rewriteSummary().find("4 nodes folded into Conv"), std::string::npos) << fast->rewriteSummary();
    EXPECT_NE(fast->rewriteSummary().find("1 activation nodes fused into 1 FusedConv"), std::string::npos)
        << fast->rewriteSummary();
    ProfiledRun run = profiledRun(*fast, {{"x", x}});
    ASSERT_TRUE(run.ok);
    for (size_t i = 0; i < run.outputs.size(); ++i)
      EXPECT_LT(relativeError(run.outputs[i], (*want)[i]), 1e-5) << "output " << i;
    EXPECT_TRUE(run.kernels.count("FusedConvTranspose(ConvTranspose,Add,BatchNormalization,Relu)")) << run.kernels.size();
    EXPECT_TRUE(run.kernels.count("Sigmoid"));
    EXPECT_EQ(run.profile.nodes.size(), 4u);  // t1, t2, sigmoid, tg
  }
}

TEST(CoreRewrites, NeckAddsBecomeResidualAddsWithTheSameBits) {
  // det's neck: s = HardSigmoid(Conv(GlobalAveragePool(x))); y = x + x * s; z = y + Resize(u) (nearest, x2,
  // asymmetric, floor): one ResidualAdd. Also an FPN Add alone (v + Resize(u)), and forms whose shapes the
  // one-pass loop does not take (a scale of x's own shape; an upsampled operand broadcast over channels),
  // which run the original broadcasts. Every output the same bits as without rewrites.
  std::mt19937 rng(23);
  OnnxBuilder b(13);
  const int64_t C = 8, H = 6, W = 10;
  b.input("x", {1, C, H, W});
  b.input("u", {1, C, H / 2, W / 2});
  b.input("v", {1, C, H, W});
  b.input("w", {1, 1, H, W});
  b.node("GlobalAveragePool", {"x"}, {"g"}, "gap");
  b.initializer("se_w", {C, C, 1, 1}, randomValues((size_t)(C * C), rng));
  b.initializer("se_b", {C}, randomValues((size_t)C, rng));
  b.node("Conv", {"g", "se_w", "se_b"}, {"sc"}, "se_conv");
  b.node("HardSigmoid", {"sc"}, {"s"}, "se_gate");
  b.node("Mul", {"x", "s"}, {"xs"}, "se_mul");
  b.node("Add", {"x", "xs"}, {"y"}, "se_add");
  b.initializer("roi", {0}, {});
  b.initializer("scales", {4}, {1.f, 1.f, 2.f, 2.f});
  auto resize = [&](const std::string& in, const std::string& out) {
    auto& r = b.node("Resize", {in, "roi", "scales"}, {out}, "resize_" + out);
    OnnxBuilder::attrString(r, "mode", "nearest");
    OnnxBuilder::attrString(r, "coordinate_transformation_mode", "asymmetric");
    OnnxBuilder::attrString(r, "nearest_mode", "floor");
  };
  resize("u", "ru");
  b.node("Add", {"y", "ru"}, {"z"}, "fpn_add");
  resize("u", "ru2");
  b.node("Add", {"ru2", "v"}, {"z2"}, "fpn_add2");
  b.node("Mul", {"v", "x"}, {"vx"}, "full_mul");   // scale of x's shape: the general path
  b.node("Add", {"vx", "v"}, {"z3"}, "full_add");
  resize("u", "ru3");
  b.node("Add", {"w", "ru3"}, {"z4"}, "bcast_add");  // w broadcasts over the channels: the general path
  for (const char* o : {"z", "z2", "z3", "z4"}) b.output(o, {1, C, H, W});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  const std::vector<NamedTensor> feeds = {
      {"x", Tensor::fromVector<float>(randomValues((size_t)(C * H * W), rng), {1, C, H, W})},
      {"u", Tensor::fromVector<float>(randomValues((size_t)(C * H * W / 4), rng), {1, C, H / 2, W / 2})},
      {"v", Tensor::fromVector<float>(randomValues((size_t)(C * H * W), rng), {1, C, H, W})},
      {"w", Tensor::fromVector<float>(randomValues((size_t)(H * W), rng), {1, 1, H, W})}};
  auto want = makeExecutor(m, false, 1)->run(feeds);
  ASSERT_TRUE(want) << want.status().message();
  for (int threads : {1, 2}) {
    auto fast = makeExecutor(m, true, threads);
    ASSERT_TRUE(fast);
    EXPECT_NE(fast->rewriteSummary().find("4 residual / upsampled Adds fused"), std::string::npos)
        << fast->rewriteSummary();
    ProfiledRun run = profiledRun(*fast, feeds);
    ASSERT_TRUE(run.ok);
    for (size_t i = 0; i < run.outputs.size(); ++i)
      EXPECT_EQ(relativeError(run.outputs[i], (*want)[i]), 0.0) << "output " << i;
    EXPECT_EQ(run.kernels.count("ResidualAdd(Add,Mul,Add,Resize)"), 1u);
    EXPECT_EQ(run.kernels.count("ResidualAdd(Add,Resize)"), 2u);
    EXPECT_EQ(run.kernels.count("ResidualAdd(Add,Mul)"), 1u);
  }
}

TEST(CoreRewrites, ConcatOfUpsampledMapsBecomesUpsampleConcatWithTheSameBits) {
  // det's Concat.0: maps upsampled 8x, 4x and 2x (Resize nearest, asymmetric, floor) beside one at full size.
  // Here also a factor of 3 (the scalar loop), a width of 10 (tails past the 8-wide stores) and a Resize
  // whose output another node reads too (it stays, and the Concat reads its output). Bit for bit the nodes'.
  std::mt19937 rng(29);
  OnnxBuilder b(13);
  const int64_t H = 24, W = 40;
  b.input("a", {1, 3, H / 8, W / 8});
  b.input("c", {1, 5, H / 4, W / 4});
  b.input("d", {1, 2, H / 2, W / 2});
  b.input("e", {1, 4, H / 3, W / 2});
  b.input("f", {1, 3, H, W});
  b.input("g", {1, 2, H / 2, W / 2});
  b.initializer("roi", {0}, {});
  auto resize = [&](const std::string& in, const std::string& out, float fh, float fw) {
    b.initializer("scales_" + out, {4}, {1.f, 1.f, fh, fw});
    auto& r = b.node("Resize", {in, "roi", "scales_" + out}, {out}, "resize_" + out);
    OnnxBuilder::attrString(r, "mode", "nearest");
    OnnxBuilder::attrString(r, "coordinate_transformation_mode", "asymmetric");
    OnnxBuilder::attrString(r, "nearest_mode", "floor");
  };
  resize("a", "ra", 8.f, 8.f);
  resize("c", "rc", 4.f, 4.f);
  resize("d", "rd", 2.f, 2.f);
  resize("e", "re", 3.f, 2.f);
  resize("g", "rg", 2.f, 2.f);
  b.node("Relu", {"rg"}, {"rg_relu"}, "other_reader");  // rg has two readers: its Resize stays
  auto& cat = b.node("Concat", {"ra", "rc", "f", "rd", "re", "rg"}, {"y"}, "concat");
  OnnxBuilder::attrInt(cat, "axis", 1);
  auto& plain = b.node("Concat", {"f", "f"}, {"y2"}, "plain_concat");  // nothing upsampled: stays a Concat
  OnnxBuilder::attrInt(plain, "axis", 1);
  b.output("y", {1, 19, H, W});
  b.output("y2", {1, 6, H, W});
  b.output("rg_relu", {1, 2, H, W});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  std::vector<NamedTensor> feeds;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{{"a", {1, 3, H / 8, W / 8}},
                                                                               {"c", {1, 5, H / 4, W / 4}},
                                                                               {"d", {1, 2, H / 2, W / 2}},
                                                                               {"e", {1, 4, H / 3, W / 2}},
                                                                               {"f", {1, 3, H, W}},
                                                                               {"g", {1, 2, H / 2, W / 2}}})
    feeds.push_back({name, Tensor::fromVector<float>(randomValues((size_t)numelOf(shape), rng), shape)});
  auto want = makeExecutor(m, false, 1)->run(feeds);
  ASSERT_TRUE(want) << want.status().message();
  for (int threads : {1, 2}) {
    auto fast = makeExecutor(m, true, threads);
    ASSERT_TRUE(fast);
    EXPECT_NE(fast->rewriteSummary().find("1 Concats of upsampled maps fused"), std::string::npos)
        << fast->rewriteSummary();
    ProfiledRun run = profiledRun(*fast, feeds);
    ASSERT_TRUE(run.ok);
    const std::vector<Tensor>& got = run.outputs;
    ASSERT_EQ(got.size(), want->size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), (*want)[i].shape()) << "output " << i;
      EXPECT_EQ(std::memcmp(got[i].data<float>(), (*want)[i].data<float>(), sizeof(float) * (size_t)(*want)[i].numel()), 0)
          << "output " << i;
    }
    EXPECT_EQ(run.kernels.count("UpsampleConcat(Concat,Resize,Resize,Resize,Resize)"), 1u);
    EXPECT_EQ(run.kernels.count("Resize"), 1u);
    EXPECT_EQ(run.kernels.count("Concat"), 1u);
  }
}

TEST(CoreRewrites, UpsampleConcatOfMismatchedMapsFailsNamingThem) {
  // A Concat whose upsampled input does not reach the others' size: one error naming the shapes, no crash.
  OnnxBuilder b(13);
  b.input("a", {1, 2, 3, 5});
  b.input("f", {1, 2, 8, 10});
  b.initializer("roi", {0}, {});
  b.initializer("scales", {4}, {1.f, 1.f, 2.f, 2.f});
  auto& r = b.node("Resize", {"a", "roi", "scales"}, {"ra"}, "resize");
  OnnxBuilder::attrString(r, "mode", "nearest");
  OnnxBuilder::attrString(r, "coordinate_transformation_mode", "asymmetric");
  OnnxBuilder::attrString(r, "nearest_mode", "floor");
  auto& cat = b.node("Concat", {"ra", "f"}, {"y"}, "concat");
  OnnxBuilder::attrInt(cat, "axis", 1);
  b.output("y", {1, 4, 8, 10});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  auto fast = makeExecutor(m, true, 1);
  ASSERT_TRUE(fast);
  auto got = fast->run({{"a", Tensor::fromVector<float>(std::vector<float>(30, 1.f), {1, 2, 3, 5})},
                        {"f", Tensor::fromVector<float>(std::vector<float>(160, 1.f), {1, 2, 8, 10})}});
  ASSERT_FALSE(got);
  EXPECT_NE(got.status().message().find("UpsampleConcat: input 1 [1,2,8,10]"), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("[1,2,3,5] upsampled 2x2"), std::string::npos) << got.status().message();
}
