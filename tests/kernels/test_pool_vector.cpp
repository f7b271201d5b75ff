// The vector path of 2-D float MaxPool (core/kernels/pool.cpp: windows inside
// the row, W stride 1 or 2): the same values as the scalar definition (first
// valid tap, then v > best) on seeded random planes with NaN, -inf and ties,
// for the pools of torchvision CNNs (3x3 stride 2 pad 1 after the stem) and odd
// sizes, pads, ceil mode and W strides around them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "core/exec/kernel.h"
#include "core/kernels/pool.h"

namespace qs {
namespace {

struct PoolCase {
  int64_t H, W, kh, kw, sh, sw, pt, pl, pb, pr;
  bool ceil;
};

Tensor runMaxPool(const PoolCase& c, const Tensor& x) {
  Graph graph;
  Node node;
  node.name = "pool";
  node.opType = "MaxPool";
  auto ints = [](std::vector<int64_t> v) {
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = std::move(v);
    return a;
  };
  node.attributes["kernel_shape"] = ints({c.kh, c.kw});
  node.attributes["strides"] = ints({c.sh, c.sw});
  node.attributes["pads"] = ints({c.pt, c.pl, c.pb, c.pr});
  Attribute ceil;
  ceil.type = Attribute::Type::Int;
  ceil.i = c.ceil ? 1 : 0;
  node.attributes["ceil_mode"] = ceil;
  node.inputs = {graph.valueId("x")};
  node.outputs = {graph.valueId("y")};
  auto k = createMaxPool(KernelInit{node, 12, graph});
  EXPECT_TRUE(k.isOk()) << k.status().message();
  if (!k.isOk()) return Tensor();
  const Tensor* in[1] = {&x};
  Tensor out[1];
  KernelContext ctx;
  ctx.inputs = std::span<const Tensor* const>(in, 1);
  ctx.outputs = out;
  ctx.threads = 2;
  Status st = k.value()->run(ctx);
  EXPECT_TRUE(st.isOk()) << st.message();
  return out[0];
}

TEST(PoolVector, MaxPoolMatchesTheScalarDefinition) {
  const std::vector<PoolCase> cases = {
      {112, 112, 3, 3, 2, 2, 1, 1, 1, 1, false},  // the stem's pool (resnet, densenet, shufflenet)
      {56, 56, 3, 3, 1, 1, 1, 1, 1, 1, false},    // stride 1
      {17, 23, 3, 3, 2, 2, 1, 1, 1, 1, true},     // odd sizes, ceil mode
      {20, 40, 2, 2, 2, 2, 0, 0, 0, 0, false},    // 2x2 s2, no padding
      {9, 37, 3, 2, 1, 2, 0, 1, 1, 0, false},     // asymmetric pads, W stride 2 only
      {8, 24, 5, 5, 2, 1, 2, 2, 2, 2, false},     // 5x5, H stride only
      {6, 8, 3, 3, 3, 3, 1, 1, 1, 1, false},      // W stride 3: scalar only
  };
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::uniform_int_distribution<int> special(0, 40);
  int index = 0;
  for (const PoolCase& c : cases) {
    const int64_t N = 2, C = 3;
    Tensor x(DType::Float, {N, C, c.H, c.W});
    float* xv = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int s = special(rng);
      xv[i] = s == 0   ? std::numeric_limits<float>::quiet_NaN()
              : s == 1 ? -std::numeric_limits<float>::infinity()
              : s == 2 ? 1.f  // ties
                       : u(rng);
    }
    const Tensor y = runMaxPool(c, x);
    ASSERT_EQ(y.rank(), 4) << "case " << index;
    const int64_t OH = y.dim(2), OW = y.dim(3);
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = std::numeric_limits<float>::lowest();
          bool first = true;
          for (int64_t a = 0; a < c.kh; ++a)
            for (int64_t b = 0; b < c.kw; ++b) {
              const int64_t ih = oh * c.sh - c.pt + a, iw = ow * c.sw - c.pl + b;
              if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
              const float v = xv[(p * c.H + ih) * c.W + iw];
              if (first || v > best) best = v, first = false;
            }
          const float got = y.data<float>()[(p * OH + oh) * OW + ow];
          ASSERT_EQ(std::memcmp(&got, &best, sizeof(float)), 0)
              << "case " << index << " plane " << p << " at " << oh << "," << ow << ": " << got << " vs " << best;
        }
    ++index;
  }
}

}  // namespace
}  // namespace qs
