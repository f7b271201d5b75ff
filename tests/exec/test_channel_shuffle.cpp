// ShuffleNet's channel shuffle fused by the graph rewrites (core/exec/graph_rewrites.h,
// core/kernels/channel_shuffle.h): the chains as torch exports them (Reshape targets and chunk
// bounds computed from Shape nodes of a symbolic batch) become ChannelShuffle nodes whose outputs
// have the bits of the unfused chain; odd channel counts, inputs and groups that do not line up,
// overlapping and clamped slices; bad shapes fail in one line.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

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

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.byteSize()) == 0;
}

// torchvision's channel_shuffle(x, groups) as exported: the 5-D target [n, groups, c / groups, h, w]
// and the 4-D [n, -1, h, w] from Shape -> Gather -> (Div) -> Unsqueeze -> Concat.
void shuffle(OnnxBuilder& b, const std::string& x, const std::string& out, int64_t groups, const std::string& p) {
  b.node("Shape", {x}, {p + "s"}, p + "shape");
  b.initializerInt64(p + "ax0", {1}, {0});
  b.initializerInt64(p + "g", {1}, {groups});
  b.initializerInt64(p + "gs", {}, {groups});
  b.initializerInt64(p + "m1", {1}, {-1});
  for (int i = 0; i < 4; ++i) {
    const std::string k = std::to_string(i);
    b.initializerInt64(p + "i" + k, {}, {i});
    b.node("Gather", {p + "s", p + "i" + k}, {p + "d" + k}, p + "gather" + k);
  }
  b.node("Div", {p + "d1", p + "gs"}, {p + "cg"}, p + "div");
  for (const char* d : {"d0", "cg", "d2", "d3"}) b.node("Unsqueeze", {p + d, p + "ax0"}, {p + d + "u"}, p + d + "_unsq");
  auto& t1 = b.node("Concat", {p + "d0u", p + "g", p + "cgu", p + "d2u", p + "d3u"}, {p + "t1"}, p + "target1");
  OnnxBuilder::attrInt(t1, "axis", 0);
  b.node("Reshape", {x, p + "t1"}, {p + "r1"}, p + "reshape1");
  auto& tr = b.node("Transpose", {p + "r1"}, {p + "tr"}, p + "transpose");
  OnnxBuilder::attrInts(tr, "perm", {0, 2, 1, 3, 4});
  auto& t2 = b.node("Concat", {p + "d0u", p + "m1", p + "d2u", p + "d3u"}, {p + "t2"}, p + "target2");
  OnnxBuilder::attrInt(t2, "axis", 0);
  b.node("Reshape", {p + "tr", p + "t2"}, {out}, p + "reshape2");
}

// x.chunk(2, dim=1) as exported: Slice [0, (c + 1) / 2) and [(c + 1) / 2, 2 * ((c + 1) / 2)).
void chunk(OnnxBuilder& b, const std::string& x, const std::string& lo, const std::string& hi, const std::string& p) {
  b.node("Shape", {x}, {p + "s"}, p + "shape");
  b.initializerInt64(p + "one", {1}, {1});
  b.initializerInt64(p + "two", {1}, {2});
  b.initializerInt64(p + "zero", {1}, {0});
  b.node("Gather", {p + "s", p + "one"}, {p + "c"}, p + "gather");
  b.node("Add", {p + "c", p + "one"}, {p + "c1"}, p + "add");
  b.node("Div", {p + "c1", p + "two"}, {p + "h"}, p + "div");
  b.node("Mul", {p + "h", p + "one"}, {p + "e0"}, p + "mul");
  b.node("Mul", {p + "h", p + "two"}, {p + "e1"}, p + "mul2");
  b.node("Slice", {x, p + "zero", p + "e0", p + "one"}, {lo}, p + "slice0");
  b.node("Slice", {x, p + "e0", p + "e1", p + "one"}, {hi}, p + "slice1");
}

void conv1x1Relu(OnnxBuilder& b, const std::string& x, const std::string& out, int64_t C, std::mt19937& rng,
                 const std::string& p) {
  b.initializer(p + "w", {C, C, 1, 1}, randomValues((size_t)(C * C), rng));
  b.initializer(p + "b", {C}, randomValues((size_t)C, rng));
  b.node("Conv", {x, p + "w", p + "b"}, {p + "c"}, p + "conv");
  b.node("Relu", {p + "c"}, {out}, p + "relu");
}

// Two ShuffleNetV2 units of stride 1 on x [N, 2h, H, W]: chunk, a branch on the second half, concat,
// shuffle. The second unit's shuffle is a graph output and feeds a conv (not fused into slices).
OnnxBuilder unitsModel(int64_t h) {
  std::mt19937 rng(21);
  OnnxBuilder b(13);
  const int64_t C = 2 * h;
  b.input("x", {-1, C, 5, 7});
  chunk(b, "x", "x1", "x2", "u1/chunk/");
  conv1x1Relu(b, "x2", "b1", h, rng, "u1/branch/");
  auto& c1 = b.node("Concat", {"x1", "b1"}, {"cat1"}, "u1/concat");
  OnnxBuilder::attrInt(c1, "axis", 1);
  shuffle(b, "cat1", "s1", 2, "u1/shuffle/");
  chunk(b, "s1", "y1", "y2", "u2/chunk/");
  conv1x1Relu(b, "y2", "b2", h, rng, "u2/branch/");
  auto& c2 = b.node("Concat", {"y1", "b2"}, {"cat2"}, "u2/concat");
  OnnxBuilder::attrInt(c2, "axis", 1);
  shuffle(b, "cat2", "s2", 2, "u2/shuffle/");
  conv1x1Relu(b, "s2", "head", C, rng, "head/");
  b.output("s2", {-1, C, 5, 7});
  b.output("head", {-1, C, 5, 7});
  return b;
}

// Concat of three inputs (12, 20 and 8 channels) shuffled in 4 groups of 10 (groups straddle the
// inputs), then three Slices of axis 1 with constant bounds: [0, 13), [13, end), [-35, -5) (overlapping).
// With `wholeToo`, the shuffled tensor is a graph output as well (then it is written, slices unfused).
OnnxBuilder bitsModel(bool wholeToo) {
  OnnxBuilder b(13);
  b.input("a", {-1, 12, 3, 5});
  b.input("b", {-1, 20, 3, 5});
  b.input("c", {-1, 8, 3, 5});
  auto& cat = b.node("Concat", {"a", "b", "c"}, {"cat"}, "concat");
  OnnxBuilder::attrInt(cat, "axis", 1);
  shuffle(b, "cat", "s", 4, "shuffle/");
  b.initializerInt64("axis1", {1}, {1});
  const std::vector<std::pair<int64_t, int64_t>> bounds = {{0, 13}, {13, INT64_MAX}, {-35, -5}};
  for (size_t i = 0; i < bounds.size(); ++i) {
    const std::string k = std::to_string(i);
    b.initializerInt64("st" + k, {1}, {bounds[i].first});
    b.initializerInt64("en" + k, {1}, {bounds[i].second});
    b.node("Slice", {"s", "st" + k, "en" + k, "axis1"}, {"out" + k}, "slice" + k);
    b.output("out" + k, {-1, -1, 3, 5});
  }
  if (wholeToo) b.output("s", {-1, 40, 3, 5});
  return b;
}

}  // namespace

TEST(ChannelShuffle, SlicesOfTheShuffleHaveTheBitsOfTheUnfusedChain) {
  for (bool wholeToo : {false, true}) {
    auto m = builtModel(bitsModel(wholeToo));
    ASSERT_TRUE(m);
    auto plain = makeExecutor(m, false, 1);
    ASSERT_TRUE(plain);
    std::mt19937 rng(3);
    for (int threads : {1, 2}) {
      auto fast = makeExecutor(m, true, threads);
      ASSERT_TRUE(fast);
      EXPECT_NE(fast->rewriteSummary().find("1 channel shuffles fused"), std::string::npos) << fast->rewriteSummary();
      for (int64_t n : {1, 3}) {
        std::vector<NamedTensor> feeds = {{"a", randomTensor({n, 12, 3, 5}, rng)},
                                                             {"b", randomTensor({n, 20, 3, 5}, rng)},
                                                             {"c", randomTensor({n, 8, 3, 5}, rng)}};
        auto want = plain->run(feeds);
        ASSERT_TRUE(want) << want.status().message();
        ProfiledRun run = profiledRun(*fast, feeds);
        ASSERT_TRUE(run.ok);
        const std::vector<Tensor>& got = run.outputs;
        ASSERT_EQ(got.size(), want->size());
        EXPECT_EQ(got[0].shape(), (Shape{n, 13, 3, 5}));
        EXPECT_EQ(got[1].shape(), (Shape{n, 27, 3, 5}));
        EXPECT_EQ(got[2].shape(), (Shape{n, 30, 3, 5}));
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(sameBits(got[i], (*want)[i])) << "output " << i << ", batch " << n << ", threads " << threads;
        // The data Concat does not run; the Slices only where the whole tensor is an output.
        for (const auto& np : run.profile.nodes) {
          const std::string& name = m->graph.nodes[(size_t)np.node].name;
          EXPECT_NE(name, "concat");
          if (!wholeToo) EXPECT_NE(name.rfind("slice", 0), 0u) << name;
        }
      }
    }
  }
}

TEST(ChannelShuffle, ShuffleNetUnitsWithShapeChainsAgreeWithTheUnfusedGraph) {
  auto m = builtModel(unitsModel(29));  // 58 channels, halves of 29 (not a multiple of 8)
  ASSERT_TRUE(m);
  auto plain = makeExecutor(m, false, 1);
  ASSERT_TRUE(plain);
  std::mt19937 rng(9);
  for (int threads : {1, 2}) {
    auto fast = makeExecutor(m, true, threads);
    ASSERT_TRUE(fast);
    EXPECT_NE(fast->rewriteSummary().find("2 channel shuffles fused"), std::string::npos) << fast->rewriteSummary();
    for (int64_t n : {1, 2, 1}) {  // a batch seen before again
      Tensor x = randomTensor({n, 58, 5, 7}, rng);
      auto want = plain->run({{"x", x}});
      auto got = fast->run({{"x", x}});
      ASSERT_TRUE(want && got) << (want ? got.status().message() : want.status().message());
      ASSERT_EQ(got->size(), 2u);
      EXPECT_EQ((*got)[0].shape(), (Shape{n, 58, 5, 7}));
      // The 1x1 convs run as FusedConv with the Relu in their epilogue: float rounding only.
      for (size_t i = 0; i < got->size(); ++i) EXPECT_LT(relativeError((*got)[i], (*want)[i]), 1e-6) << "output " << i;
    }
    // With a batch seen before, the shape chains (behind FusedConv, ChannelShuffle and ConcatShape
    // nodes) come from the executor's cache: only the first unit's Slices of x, the convs and the
    // two ChannelShuffles run.
    ProfiledRun run = profiledRun(*fast, {{"x", randomTensor({2, 58, 5, 7}, rng)}});
    ASSERT_TRUE(run.ok);
    EXPECT_EQ(run.profile.nodes.size(), 7u);
    for (const auto& np : run.profile.nodes) {
      const std::string& op = m->graph.nodes[(size_t)np.node].opType;
      EXPECT_TRUE(op == "Slice" || op == "Conv" || op == "Transpose") << op << " ran";
    }
  }
}

TEST(ChannelShuffle, FedTargetsAndBadShapes) {
  // The first Reshape's target is fed: any 5-D split gives the unfused chain's bits; [n, 3, 7, 3, 5]
  // does not hold 20 channels and fails in one line naming the fused node.
  OnnxBuilder b(13);
  b.input("a", {-1, 8, 3, 5});
  b.input("b", {-1, 12, 3, 5});
  b.input("t1", {-1}, onnx::TensorProto::INT64);
  auto& cat = b.node("Concat", {"a", "b"}, {"cat"}, "concat");
  OnnxBuilder::attrInt(cat, "axis", 1);
  b.node("Reshape", {"cat", "t1"}, {"r1"}, "reshape1");
  auto& tr = b.node("Transpose", {"r1"}, {"tr"}, "transpose");
  OnnxBuilder::attrInts(tr, "perm", {0, 2, 1, 3, 4});
  b.initializerInt64("t2", {4}, {0, -1, 3, 5});
  b.node("Reshape", {"tr", "t2"}, {"s"}, "reshape2");
  // A slice of axis 2: the copies are split per row of S (not ShuffleNet's whole planes).
  b.initializerInt64("st", {1}, {1});
  b.initializerInt64("en", {1}, {3});
  b.initializerInt64("ax2", {1}, {2});
  b.node("Slice", {"s", "st", "en", "ax2"}, {"o"}, "slice");
  b.output("o", {-1, 20, 2, 5});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  std::mt19937 rng(1);
  auto feeds = [&](std::vector<int64_t> t1) {
    return std::vector<NamedTensor>{
        {"a", randomTensor({1, 8, 3, 5}, rng)},
        {"b", randomTensor({1, 12, 3, 5}, rng)},
        {"t1", Tensor::fromVector<int64_t>(t1, {(int64_t)t1.size()})}};
  };
  auto fast = makeExecutor(m, true, 2);
  auto plain = makeExecutor(m, false, 1);
  ASSERT_TRUE(fast && plain);
  EXPECT_NE(fast->rewriteSummary().find("1 channel shuffles fused"), std::string::npos) << fast->rewriteSummary();
  // Two groups of 10 channels; and [1, 2, 2, 15, 5], whose runs of 75 floats straddle the inputs' channels.
  for (std::vector<int64_t> t1 : {std::vector<int64_t>{1, 2, 10, 3, 5}, std::vector<int64_t>{1, 2, 2, 15, 5}}) {
    auto good = feeds(t1);
    auto want = plain->run(good);
    auto got = fast->run(good);
    ASSERT_TRUE(want && got) << (want ? got.status().message() : want.status().message());
    EXPECT_EQ((*got)[0].shape(), (Shape{1, 20, 2, 5}));
    EXPECT_TRUE(sameBits((*got)[0], (*want)[0])) << shapeToString(t1);
  }
  auto bad = fast->run(feeds({1, 3, 7, 3, 5}));
  ASSERT_FALSE(bad);
  const std::string msg = bad.status().message();
  EXPECT_NE(msg.find("transpose"), std::string::npos) << msg;  // the fused node's name
  EXPECT_NE(msg.find("[1,3,7,3,5]"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  auto rank4 = fast->run(feeds({1, 2, 10, 15}));
  ASSERT_FALSE(rank4);
  EXPECT_NE(rank4.status().message().find("not 5-D"), std::string::npos) << rank4.status().message();
}
