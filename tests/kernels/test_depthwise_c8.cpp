// The eight-channel depthwise kernel (core/kernels/depthwise_c8.h): the same
// bits as the plane kernel (depthwiseConvPlane + applyFusedActivations) on
// seeded random shapes (strides, dilations, asymmetric pads, 1x1 to 7x7
// filters, rows shorter and longer than a vector, every fused activation), and
// the Conv kernel's depthwise path against a naive reference with channel
// counts that leave single planes after the blocks of eight, 1 and 2 threads
// bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"
#include "core/kernels/depthwise_c8.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

using K = FusedActivation::Kind;
using qs::test::randomTensor;

struct Shape2 {
  int64_t C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

std::vector<Shape2> shapes() {
  return {
      {8, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   // mobilenet_v2 @14
      {16, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    // @7: every column a masked tail
      {8, 28, 28, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},   // stride 2
      {24, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // strips of rows
      {8, 113, 9, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1},   // tall, narrow, H stride only
      {16, 15, 17, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2},  // 5x5 s2, odd sizes
      {8, 12, 10, 3, 3, 1, 2, 2, 1, 2, 0, 1, 2},   // dilated, asymmetric pads, W stride 2
      {8, 9, 11, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},    // 7x7 (49 taps)
      {8, 6, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},     // 1x1
      {8, 5, 6, 3, 3, 3, 3, 1, 1, 0, 0, 0, 0},     // stride 3, no padding
      {8, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     // one pixel
  };
}

std::vector<std::vector<FusedActivation>> activationSets() {
  return {
      {},
      {{K::Clip, 0.f, 6.f}},
      {{K::Relu, 0, 0}},
      {{K::HardSwish, 1.f / 6.f, 0.5f}},
      {{K::Sigmoid, 0, 0}},
      {{K::LeakyRelu, 0.1f, 0}, {K::Mul, 0.5f, 0}, {K::Add, 0.25f, 0}},
      {{K::HardSigmoid, 0.2f, 0.5f}},
  };
}

WindowGeometry geometry(const Shape2& s) {
  WindowAttrs attrs;
  attrs.strides = {s.sh, s.sw};
  attrs.dilations = {s.dh, s.dw};
  attrs.pads = {s.pt, s.pl, s.pb, s.pr};
  WindowGeometry g;
  EXPECT_TRUE(resolveWindow(attrs, {s.H, s.W}, {s.kh, s.kw}, false, g));
  return g;
}

TEST(DepthwiseC8, SameBitsAsThePlaneKernel) {
  std::mt19937 rng(31);
  int index = 0;
  for (const Shape2& s : shapes()) {
    const WindowGeometry g = geometry(s);
    const Tensor x = randomTensor({s.C, s.H, s.W}, rng);
    const Tensor w = randomTensor({s.C, s.kh, s.kw}, rng, -0.5f, 0.5f);
    const Tensor b = randomTensor({s.C}, rng);
    int actIndex = 0;
    for (const auto& acts : activationSets()) {
      for (const float* bias : {b.data<float>(), static_cast<const float*>(nullptr)}) {
        const std::string what = "shape " + std::to_string(index) + " activations " + std::to_string(actIndex) +
                                 (bias ? " bias" : " no bias");
        std::vector<float> want((size_t)(s.C * g.outSize())), got(want.size(), -7.f);
        for (int64_t c = 0; c < s.C; ++c) {
          float* plane = want.data() + c * g.outSize();
          depthwiseConvPlane(x.data<float>() + c * g.inSize(), w.data<float>() + c * g.kSize(), bias ? bias[c] : 0.f, g,
                             plane);
          applyFusedActivations(plane, g.outSize(), 0.f, acts);
        }
        for (int64_t c0 = 0; c0 + 8 <= s.C; c0 += 8)
          depthwiseConv8(x.data<float>(), w.data<float>(), bias, c0, g, acts, got.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0) << what;
      }
      ++actIndex;
    }
    ++index;
  }
}

// The Conv kernel on a depthwise node: blocks of eight and single planes after
// them, batch 2.
Tensor runDepthwiseConv(const Shape2& s, const Tensor& x, const Tensor& w, const Tensor& b,
                        const std::vector<FusedActivation>& acts, int threads) {
  Graph graph;
  Node node;
  node.name = "dw";
  node.opType = kFusedConvOp;
  node.domain = kFusedDomain;
  auto ints = [](std::vector<int64_t> v) {
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = std::move(v);
    return a;
  };
  node.attributes["strides"] = ints({s.sh, s.sw});
  node.attributes["dilations"] = ints({s.dh, s.dw});
  node.attributes["pads"] = ints({s.pt, s.pl, s.pb, s.pr});
  Attribute group;
  group.type = Attribute::Type::Int;
  group.i = s.C;
  node.attributes["group"] = group;
  setFusedActivations(node, acts);
  node.inputs = {graph.valueId("x"), graph.valueId("w"), graph.valueId("b")};
  graph.value(node.inputs[1]).constant = w;
  graph.value(node.inputs[2]).constant = b;
  node.outputs = {graph.valueId("y")};
  auto k = createConv(KernelInit{node, 1, graph, /*library=*/true});
  EXPECT_TRUE(k.isOk()) << k.status().message();
  if (!k.isOk()) return Tensor();
  const Tensor* in[3] = {&x, &w, &b};
  Tensor out[1];
  KernelContext ctx;
  ctx.inputs = std::span<const Tensor* const>(in, 3);
  ctx.outputs = out;
  ctx.threads = threads;
  Status st = k.value()->run(ctx);
  EXPECT_TRUE(st.isOk()) << st.message();
  return out[0];
}

TEST(DepthwiseC8, ConvKernelVsNaiveWithPlanesLeftOver) {
  std::mt19937 rng(5);
  const std::vector<FusedActivation> acts = {{K::Clip, 0.f, 6.f}};
  for (const Shape2& s :
       {Shape2{20, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, Shape2{13, 28, 27, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
        Shape2{36, 7, 7, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},
        // rec's short text-line planes: 5x5 at 12x80 (and stride (2, 1)), 3x3 at 12x160
        Shape2{12, 12, 80, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2}, Shape2{9, 12, 80, 5, 5, 2, 1, 1, 1, 2, 2, 2, 2},
        Shape2{8, 12, 160, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}}) {
    const WindowGeometry g = geometry(s);
    ASSERT_TRUE(depthwise8Preferred(s.C, g));
    const int64_t N = 2;
    const Tensor x = randomTensor({N, s.C, s.H, s.W}, rng);
    const Tensor w = randomTensor({s.C, 1, s.kh, s.kw}, rng, -0.5f, 0.5f);
    const Tensor b = randomTensor({s.C}, rng);
    const Tensor y1 = runDepthwiseConv(s, x, w, b, acts, 1), y2 = runDepthwiseConv(s, x, w, b, acts, 2);
    ASSERT_EQ(y1.shape(), (Shape{N, s.C, g.out[1], g.out[2]}));
    ASSERT_EQ(y2.shape(), y1.shape());
    EXPECT_EQ(std::memcmp(y1.data<float>(), y2.data<float>(), sizeof(float) * (size_t)y1.numel()), 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < s.C; ++c)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            double acc = b.data<float>()[c];
            for (int64_t a = 0; a < s.kh; ++a)
              for (int64_t e = 0; e < s.kw; ++e) {
                const int64_t ih = oh * s.sh - s.pt + a * s.dh, iw = ow * s.sw - s.pl + e * s.dw;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                acc += (double)x.data<float>()[((n * s.C + c) * s.H + ih) * s.W + iw] *
                       w.data<float>()[(c * s.kh + a) * s.kw + e];
              }
            const double want = std::min(std::max(acc, 0.0), 6.0);
            const float got = y1.data<float>()[((n * s.C + c) * g.out[1] + oh) * g.out[2] + ow];
            ASSERT_NEAR(got, want, 1e-4 * (1 + std::fabs(want))) << "C " << s.C << " n " << n << " c " << c;
          }
  }
}

TEST(DepthwiseC8, RuleLeavesWideRowsAndThinChannelsToThePlaneKernel) {
  WindowAttrs attrs;
  attrs.pads = {1, 1, 1, 1};
  WindowGeometry g;
  ASSERT_TRUE(resolveWindow(attrs, {112, 112}, {3, 3}, false, g));
  EXPECT_FALSE(depthwise8Preferred(32, g));  // rows of 112: the plane kernel
  ASSERT_TRUE(resolveWindow(attrs, {14, 14}, {3, 3}, false, g));
  EXPECT_TRUE(depthwise8Preferred(576, g));
  EXPECT_FALSE(depthwise8Preferred(4, g));  // fewer than eight channels
  // Short planes (rec, cls: at most 16 input rows) with rows of up to 160 outputs: eight channels at a time.
  ASSERT_TRUE(resolveWindow(attrs, {12, 160}, {3, 3}, false, g));
  EXPECT_TRUE(depthwise8Preferred(128, g));
  ASSERT_TRUE(resolveWindow(attrs, {24, 160}, {3, 3}, false, g));
  EXPECT_FALSE(depthwise8Preferred(64, g));  // 24 rows: the plane kernel
  ASSERT_TRUE(resolveWindow(attrs, {12, 320}, {3, 3}, false, g));
  EXPECT_FALSE(depthwise8Preferred(64, g));  // rows of 320: not measured, the plane kernel
  WindowAttrs five;
  five.pads = {2, 2, 2, 2};
  ASSERT_TRUE(resolveWindow(five, {12, 80}, {5, 5}, false, g));
  EXPECT_TRUE(depthwise8Preferred(240, g));
}

}  // namespace
}  // namespace qs
