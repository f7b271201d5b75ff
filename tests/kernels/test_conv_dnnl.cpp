// The oneDNN backend of the Conv kernel (core/kernels/conv_dnnl.h): seeded random 2-D shapes of
// every class the rule sends to it (dense, 1x1, strided stem, dilated, asymmetric pads, grouped,
// depthwise), each fused activation, batch 1 and 3, 1 and 2 threads, against a naive reference;
// the Conv kernel with the backend on and off (off is the default); thread-count independence;
// several input shapes on one kernel. Skipped in a build without oneDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/exec/kernel.h"
#include "core/exec/parallel.h"
#include "core/kernels/blocked_layout.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

using K = FusedActivation::Kind;
using qs::test::randomTensor;

struct Case {
  int64_t C, M, G, H, W, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  bool bias;
};

// The window geometry of a 2-D case (strides, dilations, pads as the case gives them).
bool caseGeometry(const Case& c, WindowGeometry& g) {
  WindowAttrs attrs;
  attrs.strides = {c.sh, c.sw};
  attrs.dilations = {c.dh, c.dw};
  attrs.pads = {c.pt, c.pl, c.pb, c.pr};
  return bool(resolveWindow(attrs, {c.H, c.W}, {c.kh, c.kw}, false, g));
}

int64_t outDim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  return (in + pb + pe - ((k - 1) * d + 1)) / s + 1;
}

// y = acts(conv(x, w) + b), accumulated in double.
Tensor naive(const Case& c, const Tensor& x, const Tensor& w, const Tensor* b, const std::vector<FusedActivation>& acts) {
  const int64_t N = x.dim(0), Cg = c.C / c.G, Mg = c.M / c.G;
  const int64_t OH = outDim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb), OW = outDim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr);
  Tensor y(DType::Float, {N, c.M, OH, OW});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < c.M; ++m) {
      float* row = y.data<float>() + (n * c.M + m) * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t a = 0; a < c.kh; ++a)
              for (int64_t bb = 0; bb < c.kw; ++bb) {
                const int64_t ih = oh * c.sh - c.pt + a * c.dh, iw = ow * c.sw - c.pl + bb * c.dw;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int64_t chan = (m / Mg) * Cg + ci;
                acc += (double)x.data<float>()[((n * c.C + chan) * c.H + ih) * c.W + iw] *
                       w.data<float>()[((m * Cg + ci) * c.kh + a) * c.kw + bb];
              }
          row[oh * OW + ow] = (float)acc;
        }
      applyFusedActivations(row, OH * OW, b ? b->data<float>()[m] : 0.f, acts);
    }
  return y;
}

// A FusedConv node with constant W (and B), as the graph rewrites make it.
struct ConvNode {
  Graph graph;
  Node node;
  std::unique_ptr<Kernel> kernel;
  Tensor w, b;

  ConvNode(const Case& c, const Tensor& W, const Tensor* B, const std::vector<FusedActivation>& acts, bool library)
      : w(W) {
    node.name = "conv";
    node.opType = kFusedConvOp;
    node.domain = kFusedDomain;
    auto ints = [](std::vector<int64_t> v) {
      Attribute a;
      a.type = Attribute::Type::Ints;
      a.ints = std::move(v);
      return a;
    };
    node.attributes["strides"] = ints({c.sh, c.sw});
    node.attributes["dilations"] = ints({c.dh, c.dw});
    node.attributes["pads"] = ints({c.pt, c.pl, c.pb, c.pr});
    Attribute group;
    group.type = Attribute::Type::Int;
    group.i = c.G;
    node.attributes["group"] = group;
    setFusedActivations(node, acts);
    node.inputs = {graph.valueId("x"), graph.valueId("w")};
    graph.value(node.inputs[1]).constant = W;
    if (B) {
      b = *B;
      node.inputs.push_back(graph.valueId("b"));
      graph.value(node.inputs[2]).constant = *B;
    }
    node.outputs = {graph.valueId("y")};
    auto k = createConv(KernelInit{node, 1, graph, library});
    EXPECT_TRUE(k.isOk()) << k.status().message();
    if (k.isOk()) kernel = std::move(k.value());
  }

  Tensor run(const Tensor& x, int threads) {
    const Tensor* in[3] = {&x, &w, b.numel() ? &b : nullptr};
    Tensor out[1];
    KernelContext ctx;
    ctx.inputs = std::span<const Tensor* const>(in, b.numel() ? 3 : 2);
    ctx.outputs = out;
    ctx.threads = threads;
    Status st = kernel->run(ctx);
    EXPECT_TRUE(st.isOk()) << st.message();
    return out[0];
  }
};

void expectNear(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    ASSERT_NEAR(g, w, 1e-4f * (1.f + std::fabs(w))) << what << " at flat index " << i;
  }
}

std::vector<Case> cases() {
  return {
      {16, 24, 1, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},    // dense 3x3
      {32, 16, 1, 7, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true},     // 1x1
      {3, 16, 1, 23, 21, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, true},    // stem-like 7x7 s2
      {8, 16, 1, 12, 10, 3, 3, 1, 2, 2, 1, 2, 0, 1, 2, false},   // dilated, asymmetric pads, W stride 2
      {32, 48, 4, 10, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},    // grouped, 8 channels a group
      {24, 24, 3, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true},     // grouped, 3 groups (one slice)
      {16, 16, 16, 13, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},  // depthwise
      {24, 24, 24, 15, 15, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, false}, // depthwise 5x5 s2
      {5, 7, 1, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},       // odd channel counts
  };
}

std::vector<std::vector<FusedActivation>> activationSets() {
  return {
      {},
      {{K::Relu, 0, 0}},
      {{K::Clip, 0.f, 6.f}},
      {{K::LeakyRelu, 0.1f, 0}},
      {{K::Mul, 0.5f, 0}},
      {{K::Add, 0.25f, 0}},
      {{K::LeakyRelu, 0.1f, 0}, {K::Mul, 0.5f, 0}, {K::Add, 0.25f, 0}},
      {{K::HardSwish, 1.f / 6.f, 0.5f}},
      {{K::Sigmoid, 0, 0}},
      {{K::Relu, 0, 0}, {K::HardSigmoid, 0.2f, 0.5f}, {K::Clip, 0.1f, 0.9f}},  // a tail applied after
      {{K::HardSwish, 0.2f, 0.5f}},
  };
}

class ConvDnnl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  }
};

TEST_F(ConvDnnl, BackendVsNaiveEveryClassAndActivation) {
  std::mt19937 rng(13);
  int caseIndex = 0;
  for (const Case& c : cases()) {
    const Tensor w = randomTensor({c.M, c.C / c.G, c.kh, c.kw}, rng, -0.5f, 0.5f);
    const Tensor b = randomTensor({c.M}, rng);
    WindowGeometry g;
    ASSERT_TRUE(caseGeometry(c, g));
    int actIndex = 0;
    for (const auto& acts : activationSets()) {
      auto backend = DnnlConv::create(w, c.bias ? &b : nullptr, c.G, acts);
      ASSERT_TRUE(backend);
      for (int64_t N : {1, 3}) {
        const Tensor x = randomTensor({N, c.C, c.H, c.W}, rng);
        const Tensor want = naive(c, x, w, c.bias ? &b : nullptr, acts);
        for (int threads : {1, 2}) {
          Tensor y(DType::Float, want.shape());
          Status st = backend->run(x.data<float>(), N, c.C, g, y.data<float>(), threads);
          ASSERT_TRUE(st.isOk()) << st.message();
          expectNear(y, want, "case " + std::to_string(caseIndex) + " activations " + std::to_string(actIndex) +
                                  " N " + std::to_string(N) + " threads " + std::to_string(threads));
        }
      }
      ++actIndex;
    }
    ++caseIndex;
  }
}

TEST_F(ConvDnnl, KernelWithBackendOnAndOffAgreeAndThreadCountsAreBitIdentical) {
  std::mt19937 rng(7);
  int caseIndex = 0;
  for (const Case& c : cases()) {
    const Tensor w = randomTensor({c.M, c.C / c.G, c.kh, c.kw}, rng, -0.5f, 0.5f);
    const Tensor b = randomTensor({c.M}, rng);
    const std::vector<FusedActivation> acts = {{K::Relu, 0, 0}};
    ConvNode node(c, w, c.bias ? &b : nullptr, acts, /*library=*/true);
    ConvNode plain(c, w, c.bias ? &b : nullptr, acts, /*library=*/false);
    ASSERT_TRUE(node.kernel);
    ASSERT_TRUE(plain.kernel);
    // Several input shapes on one kernel: a primitive per shape, kept.
    for (int64_t N : {1, 2, 1}) {
      for (int64_t grow : {0, 3}) {
        Case cs = c;
        cs.H += grow;
        cs.W += grow;
        const Tensor x = randomTensor({N, c.C, cs.H, cs.W}, rng);
        const std::string what = "case " + std::to_string(caseIndex) + " N " + std::to_string(N) + " +" + std::to_string(grow);
        const Tensor y1 = node.run(x, 1), y2 = node.run(x, 2);
        const Tensor ours = plain.run(x, 2);
        expectNear(y1, naive(cs, x, w, c.bias ? &b : nullptr, acts), what);
        expectNear(y1, ours, what);
        ASSERT_EQ(0, std::memcmp(y1.data<float>(), y2.data<float>(), sizeof(float) * (size_t)y1.numel())) << what;
      }
    }
    ++caseIndex;
  }
}

// With at least twice as many images as hardware threads, one primitive runs a group of images
// (conv_dnnl.h). Each image must come out as the same floats as when it runs alone, on 1 and 2
// threads, in NCHW (every class of cases()) and in the blocked layout with a residual input and
// Relu (the ResNet block), for batches that group by 2, 3 and 4 on this machine's threads.
TEST_F(ConvDnnl, ImageGroupsGiveEachImageTheBitsItGetsAlone) {
  std::mt19937 rng(29);
  const int64_t hw = hardwareThreads();
  const std::vector<int64_t> batches = {2 * hw, 3 * hw, 4 * hw, 4 * hw + 1};
  auto expectSameImages = [](const Tensor& all, const std::vector<Tensor>& one, const std::string& what) {
    const size_t per = (size_t)(all.numel() / (int64_t)one.size());
    for (size_t n = 0; n < one.size(); ++n)
      ASSERT_EQ(0, std::memcmp(all.data<float>() + n * per, one[n].data<float>(), sizeof(float) * per))
          << what << " image " << n;
  };
  int caseIndex = 0;
  for (const Case& c : cases()) {
    const Tensor w = randomTensor({c.M, c.C / c.G, c.kh, c.kw}, rng, -0.5f, 0.5f);
    const Tensor b = randomTensor({c.M}, rng);
    const std::vector<FusedActivation> acts = {{K::Relu, 0, 0}, {K::HardSigmoid, 0.2f, 0.5f}};
    WindowGeometry g;
    ASSERT_TRUE(caseGeometry(c, g));
    auto backend = DnnlConv::create(w, c.bias ? &b : nullptr, c.G, acts);
    ASSERT_TRUE(backend);
    for (int64_t N : batches) {
      const Tensor x = randomTensor({N, c.C, c.H, c.W}, rng);
      const Tensor want = naive(c, x, w, c.bias ? &b : nullptr, acts);
      const int64_t inPer = c.C * c.H * c.W;
      std::vector<Tensor> alone;
      for (int64_t n = 0; n < N; ++n) {
        Tensor y1(DType::Float, {1, c.M, want.dim(2), want.dim(3)});
        ASSERT_TRUE(backend->run(x.data<float>() + n * inPer, 1, c.C, g, y1.data<float>(), 1).isOk());
        alone.push_back(y1);
      }
      for (int threads : {1, 2}) {
        const std::string what = "case " + std::to_string(caseIndex) + " N " + std::to_string(N) + " threads " +
                                 std::to_string(threads);
        Tensor y(DType::Float, want.shape());
        Status st = backend->run(x.data<float>(), N, c.C, g, y.data<float>(), threads);
        ASSERT_TRUE(st.isOk()) << st.message();
        expectNear(y, want, what);
        expectSameImages(y, alone, what);
      }
    }
    ++caseIndex;
  }
  // Blocked, with the residual sum and Relu post-ops: 32 -> 32 3x3 at 9x7.
  const int block = DnnlConv::preferredBlock();
  const int64_t C = 32, H = 9, W = 7, per = C * H * W;
  const Tensor w = randomTensor({C, C, 3, 3}, rng, -0.5f, 0.5f), bias = randomTensor({C}, rng);
  auto blocked = DnnlConv::createBlocked(w, &bias, /*group=*/1, {}, /*residual=*/true,
                                         /*reluAfterResidual=*/true, block);
  ASSERT_TRUE(blocked);
  const Case plain{C, C, 1, H, W, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true};
  WindowGeometry g;
  ASSERT_TRUE(caseGeometry(plain, g));
  for (int64_t N : batches) {
    const Tensor x = randomTensor({N, C, H, W}, rng), r = randomTensor({N, C, H, W}, rng);
    Tensor want = naive(plain, x, w, &bias, {});
    for (int64_t i = 0; i < want.numel(); ++i)
      want.data<float>()[i] = std::max(0.f, want.data<float>()[i] + r.data<float>()[i]);
    Tensor xb(DType::Float, {N * per}), rb(DType::Float, {N * per});
    toNchw8c(x.data<float>(), N, C, H * W, xb.data<float>(), 1, block);
    toNchw8c(r.data<float>(), N, C, H * W, rb.data<float>(), 1, block);
    std::vector<Tensor> alone;
    for (int64_t n = 0; n < N; ++n) {
      Tensor y1(DType::Float, {per});
      ASSERT_TRUE(
          blocked->runBlocked(xb.data<float>() + n * per, 1, C, g, y1.data<float>(), rb.data<float>() + n * per, 1)
              .isOk());
      alone.push_back(y1);
    }
    for (int threads : {1, 2}) {
      const std::string what = "blocked N " + std::to_string(N) + " threads " + std::to_string(threads);
      Tensor yb(DType::Float, {N * per}), y(DType::Float, want.shape());
      ASSERT_TRUE(blocked->runBlocked(xb.data<float>(), N, C, g, yb.data<float>(), rb.data<float>(), threads).isOk());
      expectSameImages(yb, alone, what);
      fromNchw8c(yb.data<float>(), N, C, H * W, y.data<float>(), 1, block);
      expectNear(y, want, what);
    }
  }
}

// A sliced depthwise conv forks below the 4 MFLOP floor (its slices read what the conv before wrote on
// the same core); other small convs and unsliced depthwise ones stay on one thread.
TEST(ConvDnnlSlices, SlicedDepthwiseForksBelowTheFloor) {
  const double dw576at14 = 2.0 * 576 * 14 * 14 * 9;  // mobilenet_v2 features.13, 2.0 MFLOP
  EXPECT_EQ(DnnlConv::forkThreads(dw576at14, true, 2, 2), 2);
  EXPECT_EQ(DnnlConv::forkThreads(dw576at14, true, 1, 2), 1);
  EXPECT_EQ(DnnlConv::forkThreads(dw576at14, false, 2, 2), 1);
  EXPECT_EQ(DnnlConv::forkThreads(5e6, false, 2, 2), 2);
  EXPECT_EQ(DnnlConv::forkThreads(dw576at14, true, 2, 1), 1);
  // And the sliced small depthwise conv gives the same bits on 1 and 2 threads.
  if (!DnnlConv::available()) GTEST_SKIP() << "built without oneDNN";
  std::mt19937 rng(29);
  const int64_t C = 576, H = 14, W = 14, per = C * H * W;
  const Tensor w = randomTensor({C, 1, 3, 3}, rng, -0.5f, 0.5f), bias = randomTensor({C}, rng);
  auto conv = DnnlConv::createBlocked(w, &bias, /*group=*/C, {}, /*residual=*/false, /*reluAfterResidual=*/false,
                                      DnnlConv::preferredBlock());
  ASSERT_TRUE(conv);
  WindowGeometry g;
  ASSERT_TRUE(caseGeometry(Case{C, C, C, H, W, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, g));
  const Tensor x = randomTensor({per}, rng);
  Tensor y1(DType::Float, {per}), y2(DType::Float, {per});
  ASSERT_TRUE(conv->runBlocked(x.data<float>(), 1, C, g, y1.data<float>(), nullptr, 1).isOk());
  ASSERT_TRUE(conv->runBlocked(x.data<float>(), 1, C, g, y2.data<float>(), nullptr, 2).isOk());
  EXPECT_EQ(std::memcmp(y1.data<float>(), y2.data<float>(), sizeof(float) * (size_t)per), 0);
}

// The batch-1 split of blocked convs: slices of whole blocks, uneven where equal ones do not
// exist (mobilenet_v2's 24 and 144 channels, regnet_y_400mf's paired groups in nChw16c), so both
// threads work; the plain layout's equal slices as before.
TEST(ConvDnnlSlices, BlockedSlicesAreWholeBlocksAsEvenAsTheyGo) {
  using B = std::vector<std::pair<int64_t, int64_t>>;
  // 144 -> 24 1x1 in nChw16c: a block and the padded tail (was one slice).
  EXPECT_EQ(DnnlConv::outputSlices(1, 144, 24, 1, 16, 2), (B{{0, 16}, {16, 24}}));
  EXPECT_EQ(DnnlConv::outputSlices(1, 24, 144, 1, 16, 2), (B{{0, 64}, {64, 144}}));
  EXPECT_EQ(DnnlConv::outputSlices(1, 144, 144, 144, 16, 2), (B{{0, 64}, {64, 144}}));  // depthwise
  // regnet's 104 channels in 13 groups of 8, paired: 112 in 7 groups of 16; in nChw8c unpaired.
  EXPECT_EQ(DnnlConv::outputSlices(1, 112, 112, 7, 16, 2), (B{{0, 48}, {48, 112}}));
  EXPECT_EQ(DnnlConv::outputSlices(1, 104, 104, 13, 8, 2), (B{{0, 48}, {48, 104}}));
  EXPECT_EQ(DnnlConv::outputSlices(1, 440, 440, 55, 8, 2), (B{{0, 216}, {216, 440}}));
  // Groups of 12 channels in blocks of 8: two groups make whole blocks.
  EXPECT_EQ(DnnlConv::outputSlices(1, 48, 48, 4, 8, 2), (B{{0, 24}, {24, 48}}));
  // Equal slices where they exist, one block: no split, and none at batch >= hardware threads.
  EXPECT_EQ(DnnlConv::outputSlices(1, 64, 64, 1, 16, 2), (B{{0, 32}, {32, 64}}));
  EXPECT_EQ(DnnlConv::outputSlices(1, 32, 16, 1, 16, 2), (B{{0, 16}}));
  EXPECT_EQ(DnnlConv::outputSlices(8, 144, 24, 1, 16, 2), (B{{0, 24}}));
  EXPECT_EQ(DnnlConv::outputSlices(1, 144, 24, 1, 16, 1), (B{{0, 24}}));
  EXPECT_EQ(DnnlConv::outputSlices(1, 24, 144, 1, 16, 4), (B{{0, 32}, {32, 64}, {64, 96}, {96, 144}}));
  // Plain: equal slices of whole 8-channel blocks only (unchanged).
  EXPECT_EQ(DnnlConv::outputSlices(1, 144, 24, 1, 0, 2), (B{{0, 24}}));
  EXPECT_EQ(DnnlConv::outputSlices(1, 144, 32, 1, 0, 2), (B{{0, 16}, {16, 32}}));
}

// A plain conv that outputSlices leaves as one slice (24 output channels) runs in bands of output rows
// at batch 1, one per hardware thread, at least 8 rows each; none where it is sliced, blocked, grouped,
// small or the batch fills the threads.
TEST(ConvDnnlSlices, PlainOneSliceConvsRunInRowBands) {
  using B = std::vector<std::pair<int64_t, int64_t>>;
  auto geometry = [](int64_t H, int64_t W, int64_t k, int64_t s) {
    WindowAttrs attrs;
    attrs.strides = {s, s};
    attrs.pads = {k / 2, k / 2, k / 2, k / 2};
    WindowGeometry g;
    EXPECT_TRUE(resolveWindow(attrs, {H, W}, {k, k}, false, g).isOk());
    return g;
  };
  const WindowGeometry det160 = geometry(160, 160, 3, 1), det40 = geometry(40, 40, 3, 1);
  EXPECT_EQ(DnnlConv::rowBands(1, 96, 24, 1, det160, 0, 2), (B{{0, 80}, {80, 160}}));
  EXPECT_EQ(DnnlConv::rowBands(1, 96, 24, 1, det40, 0, 2), (B{{0, 20}, {20, 40}}));
  // 40 channels are one slice on 4 and 8 threads too (24 are three slices of 8 there).
  EXPECT_EQ(DnnlConv::rowBands(1, 96, 40, 1, det160, 0, 4), (B{{0, 40}, {40, 80}, {80, 120}, {120, 160}}));
  EXPECT_EQ(DnnlConv::rowBands(3, 96, 40, 1, det160, 0, 8), (B{{0, 80}, {80, 160}}));
  EXPECT_EQ(DnnlConv::rowBands(1, 96, 24, 1, det160, 0, 4), (B{{0, 160}}));
  EXPECT_EQ(DnnlConv::rowBands(2, 96, 24, 1, det160, 0, 2), (B{{0, 160}}));   // the batch fills the threads
  EXPECT_EQ(DnnlConv::rowBands(1, 96, 32, 1, det160, 0, 2), (B{{0, 160}}));   // two slices of 16
  EXPECT_EQ(DnnlConv::rowBands(1, 96, 24, 1, det160, 16, 2), (B{{0, 160}}));  // blocked
  EXPECT_EQ(DnnlConv::rowBands(1, 96, 24, 3, det160, 0, 2), (B{{0, 160}}));   // grouped
  EXPECT_EQ(DnnlConv::rowBands(1, 96, 24, 1, geometry(12, 400, 3, 1), 0, 2), (B{{0, 12}}));  // under 16 rows
  EXPECT_EQ(DnnlConv::rowBands(1, 8, 8, 1, geometry(20, 20, 3, 1), 0, 2), (B{{0, 20}}));     // under 2 M MACs
}

// Each band is its own primitive over its rows (and the halo its windows read), the conv's padding only at
// the top and bottom of the image: the naive values, and each image the bits it gets with no bands (a
// batch of hardware-threads images, one task each), on 1 and 2 threads; strided, dilated, 5x5 and unused
// bottom padding among them.
TEST_F(ConvDnnl, PlainRowBandsGiveTheUnbandedBits) {
  std::mt19937 rng(31);
  const int64_t hw = hardwareThreads();
  const std::vector<Case> bandCases = {
      {96, 24, 1, 40, 37, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},   // det's neck 96 -> 24 3x3
      {32, 24, 1, 67, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true},   // stride 2
      {8, 40, 1, 37, 18, 5, 5, 1, 1, 2, 1, 4, 2, 3, 2, false},   // 5x5, dilated rows, asymmetric pads
      {48, 24, 1, 34, 40, 3, 3, 2, 1, 1, 1, 0, 1, 2, 1, true},   // the bottom pad past the last window
      {256, 24, 1, 36, 40, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, true},  // 1x1 stride 2: the last input row unread
  };
  int caseIndex = 0;
  for (const Case& c : bandCases) {
    WindowGeometry g;
    ASSERT_TRUE(caseGeometry(c, g));
    if (hw > 1) {
      EXPECT_GT(DnnlConv::rowBands(1, c.C, c.M, c.G, g, 0, (int)hw).size(), 1u) << "case " << caseIndex;
    }
    const Tensor w = randomTensor({c.M, c.C, c.kh, c.kw}, rng, -0.5f, 0.5f), b = randomTensor({c.M}, rng);
    const std::vector<FusedActivation> acts = {{K::Relu, 0, 0}, {K::HardSigmoid, 0.2f, 0.5f}};
    auto backend = DnnlConv::create(w, c.bias ? &b : nullptr, 1, acts);
    ASSERT_TRUE(backend);
    const Tensor x = randomTensor({hw, c.C, c.H, c.W}, rng);
    const Tensor want = naive(c, x, w, c.bias ? &b : nullptr, acts);
    Tensor whole(DType::Float, want.shape());
    ASSERT_TRUE(backend->run(x.data<float>(), hw, c.C, g, whole.data<float>(), 1).isOk());
    expectNear(whole, want, "case " + std::to_string(caseIndex) + " unbanded");
    const int64_t inPer = c.C * c.H * c.W, outPer = want.numel() / hw;
    for (int threads : {1, 2})
      for (int64_t n = 0; n < hw; ++n) {
        Tensor y1(DType::Float, {1, c.M, want.dim(2), want.dim(3)});
        ASSERT_TRUE(backend->run(x.data<float>() + n * inPer, 1, c.C, g, y1.data<float>(), threads).isOk());
        ASSERT_EQ(0, std::memcmp(y1.data<float>(), whole.data<float>() + n * outPer, sizeof(float) * (size_t)outPer))
            << "case " << caseIndex << " image " << n << " threads " << threads;
      }
    ++caseIndex;
  }
}

// Sliced at batch 1, a blocked conv gives the naive values, zero pad lanes (a padded tail), the
// same bits on 1 and 2 threads, and each image the bits it gets unsliced (a batch of 2 x hardware
// threads images runs one slice per task), in blocks 8 and 16.
TEST_F(ConvDnnl, BlockedBatchOneSlicesGiveTheUnslicedBits) {
  std::mt19937 rng(41);
  struct Shape {
    int64_t C, M, G, H, W, k, s;
    bool residual;
  };
  const std::vector<Shape> shapes = {
      {48, 24, 1, 11, 9, 1, 1, true},     // mobilenet_v2's projection to 24 with its residual Add
      {24, 144, 1, 10, 7, 1, 1, false},   // its expansion to 144
      {144, 144, 144, 9, 9, 3, 2, false}, // its depthwise 144, stride 2
      {112, 112, 7, 8, 9, 3, 1, false},   // regnet's paired groups of 16
      {40, 40, 40, 7, 7, 3, 1, false},    // depthwise with a padded tail in nChw16c
  };
  const int64_t hw = hardwareThreads(), NB = 2 * hw;
  for (int block : {8, 16}) {
    for (const Shape& sh : shapes) {
      if (!DnnlConv::blockedShapeSupported(sh.C, sh.M, sh.G, block)) continue;
      const std::string what = "C " + std::to_string(sh.C) + " M " + std::to_string(sh.M) + " group " +
                               std::to_string(sh.G) + " block " + std::to_string(block);
      const int64_t p = sh.k / 2;
      const Case c{sh.C, sh.M, sh.G, sh.H, sh.W, sh.k, sh.k, sh.s, sh.s, 1, 1, p, p, p, p, true};
      const Tensor w = randomTensor({sh.M, sh.C / sh.G, sh.k, sh.k}, rng, -0.5f, 0.5f), b = randomTensor({sh.M}, rng);
      const std::vector<FusedActivation> acts;
      auto conv = DnnlConv::createBlocked(w, &b, sh.G, sh.residual ? acts : std::vector<FusedActivation>{{K::Clip, 0.f, 6.f}},
                                          sh.residual, false, block);
      ASSERT_TRUE(conv) << what;
      WindowAttrs attrs;
      attrs.strides = {sh.s, sh.s};
      attrs.dilations = {1, 1};
      attrs.pads = {p, p, p, p};
      WindowGeometry g;
      ASSERT_TRUE(resolveWindow(attrs, {sh.H, sh.W}, {sh.k, sh.k}, false, g));
      const int64_t OH = g.out[1], OW = g.out[2], Cb = (sh.C + block - 1) / block * block,
                    Mb = (sh.M + block - 1) / block * block;
      const int64_t inPer = Cb * sh.H * sh.W, outPer = Mb * OH * OW;
      const Tensor x = randomTensor({NB, sh.C, sh.H, sh.W}, rng), r = randomTensor({NB, sh.M, OH, OW}, rng);
      Tensor xb(DType::Float, {NB * inPer}), rb(DType::Float, {NB * outPer});
      toNchw8c(x.data<float>(), NB, sh.C, sh.H * sh.W, xb.data<float>(), 1, block);
      toNchw8c(r.data<float>(), NB, sh.M, OH * OW, rb.data<float>(), 1, block);
      Tensor all(DType::Float, {NB * outPer});
      ASSERT_TRUE(conv->runBlocked(xb.data<float>(), NB, sh.C, g, all.data<float>(),
                                   sh.residual ? rb.data<float>() : nullptr, 2).isOk()) << what;
      Tensor want = naive(c, x, w, &b, sh.residual ? acts : std::vector<FusedActivation>{{K::Clip, 0.f, 6.f}});
      if (sh.residual)
        for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += r.data<float>()[i];
      Tensor plain(DType::Float, want.shape());
      fromNchw8c(all.data<float>(), NB, sh.M, OH * OW, plain.data<float>(), 1, block);
      expectNear(plain, want, what + " batch " + std::to_string(NB));
      for (int64_t n = 0; n < 2; ++n) {
        Tensor one[2] = {Tensor(DType::Float, {outPer}), Tensor(DType::Float, {outPer})};
        for (int threads : {1, 2}) {
          float* y = one[threads - 1].data<float>();
          std::fill(y, y + outPer, std::nanf(""));
          ASSERT_TRUE(conv->runBlocked(xb.data<float>() + n * inPer, 1, sh.C, g, y,
                                       sh.residual ? rb.data<float>() + n * outPer : nullptr, threads).isOk())
              << what;
          EXPECT_EQ(0, std::memcmp(y, all.data<float>() + n * outPer, sizeof(float) * (size_t)outPer))
              << what << ": image " << n << " alone on " << threads << " threads, against the batch";
          // The pad lanes of a tail: zero weights and bias, so zero (plus the residual's, zero too).
          for (int64_t px = 0; px < OH * OW; ++px)
            for (int64_t m = sh.M; m < Mb; ++m)
              ASSERT_EQ(y[(sh.M / block * OH * OW + px) * block + m % block], 0.f) << what << " pad lane " << m;
        }
      }
    }
  }
}

// A 3x3 stride-2 first layer (1-4 input channels) stays on our im2col + GEMM with the backend on,
// though oneDNN's rule takes it past 2 M multiply-adds: ours measured twice as fast (det's first
// conv, 3 -> 16 channels at 640x640: 1.2 against 2.1 ms). So with the backend on it gives our bits.
TEST_F(ConvDnnl, StrideTwo3x3FirstLayerStaysOurs) {
  std::mt19937 rng(13);
  for (const Case& c : {Case{3, 16, 1, 160, 160, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true},
                        Case{1, 32, 1, 240, 230, 3, 3, 2, 2, 1, 1, 0, 1, 1, 0, false},
                        Case{4, 24, 1, 100, 100, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true}}) {
    const std::string what = "C " + std::to_string(c.C) + " M " + std::to_string(c.M) + " " + std::to_string(c.H) +
                             "x" + std::to_string(c.W);
    const int64_t OH = outDim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb), OW = outDim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr);
    WindowAttrs attrs;
    attrs.strides = {c.sh, c.sw};
    attrs.pads = {c.pt, c.pl, c.pb, c.pr};
    WindowGeometry g;
    ASSERT_TRUE(resolveWindow(attrs, {c.H, c.W}, {c.kh, c.kw}, false, g));
    ASSERT_TRUE(DnnlConv::preferred(c.C, c.M, 1, g)) << what << ": oneDNN's rule would take it";
    const Tensor w = randomTensor({c.M, c.C, c.kh, c.kw}, rng, -0.5f, 0.5f);
    const Tensor b = randomTensor({c.M}, rng);
    const std::vector<FusedActivation> acts = {{K::Relu, 0, 0}};
    ConvNode library(c, w, c.bias ? &b : nullptr, acts, /*library=*/true);
    ConvNode plain(c, w, c.bias ? &b : nullptr, acts, /*library=*/false);
    ASSERT_TRUE(library.kernel);
    ASSERT_TRUE(plain.kernel);
    const Tensor x = randomTensor({1, c.C, c.H, c.W}, rng);
    const Tensor y = library.run(x, 2), ours = plain.run(x, 2);
    ASSERT_EQ(y.shape(), (Shape{1, c.M, OH, OW})) << what;
    expectNear(y, naive(c, x, w, c.bias ? &b : nullptr, acts), what);
    EXPECT_EQ(0, std::memcmp(y.data<float>(), ours.data<float>(), sizeof(float) * (size_t)y.numel())) << what;
  }
}

TEST_F(ConvDnnl, RuleSendsTheMeasuredClassesToOneDnn) {
  auto geometry = [](int64_t H, int64_t k, int64_t s, int64_t p) {
    WindowAttrs attrs;
    attrs.strides = {s, s};
    attrs.pads = {p, p, p, p};
    WindowGeometry g;
    EXPECT_TRUE(resolveWindow(attrs, {H, H}, {k, k}, false, g));
    return g;
  };
  EXPECT_TRUE(DnnlConv::preferred(512, 512, 1, geometry(7, 3, 1, 1)));        // 3x3, small spatial
  EXPECT_TRUE(DnnlConv::preferred(3, 64, 1, geometry(224, 7, 2, 3)));         // the stem
  EXPECT_TRUE(DnnlConv::preferred(104, 104, 13, geometry(28, 3, 1, 1)));      // grouped
  EXPECT_TRUE(DnnlConv::preferred(440, 440, 55, geometry(7, 3, 1, 1)));       // grouped, under the floor too
  // Under 2 M multiply-adds per image ours stays (oneDNN's per-call cost; cls ran 3.6 ms instead
  // of 1.0 with every conv in oneDNN): a depthwise 3x3 at 14x14, a small conv of cls.
  EXPECT_FALSE(DnnlConv::preferred(384, 384, 384, geometry(14, 3, 1, 1)));
  EXPECT_FALSE(DnnlConv::preferred(16, 16, 1, geometry(24, 3, 1, 1)));
  EXPECT_FALSE(DnnlConv::preferred(32, 32, 32, geometry(112, 3, 1, 1)));      // depthwise at 112
  EXPECT_TRUE(DnnlConv::preferred(1024, 256, 1, geometry(14, 1, 1, 0)));      // 1x1 at 14, large
  EXPECT_FALSE(DnnlConv::preferred(96, 576, 1, geometry(14, 1, 1, 0)));       // 1x1 at 14, mobilenet-sized
  EXPECT_FALSE(DnnlConv::preferred(128, 512, 1, geometry(28, 1, 1, 0)));      // 1x1 at 28
  EXPECT_TRUE(DnnlConv::preferred(960, 160, 1, geometry(7, 1, 1, 0)));        // 1x1 at 7
  EXPECT_FALSE(DnnlConv::preferred(64, 256, 1, geometry(56, 1, 1, 0)));       // 1x1 at 56
}

// Blocked nChw16c 3x3 convolutions of stride 1 from 28x28 outputs and 32 output channels up (from 14x14
// with 128 up) run oneDNN's Winograd F(4x4, 3x3) kernel where the CPU has it (AVX-512); smaller, strided
// or dilated ones the direct kernel. Each Winograd case must match the naive conv (bias, Relu, the residual
// sum), give 1 and 2 threads the same bits and each image of a batch the bits it gets alone (slices at
// batch 1, one image per task).
TEST_F(ConvDnnl, Winograd3x3InNChw16cMatchesNaiveAndKeepsEachImagesBits) {
  std::mt19937 rng(41);
  struct WCase {
    Case c;
    bool residual, winograd;
  };
  const std::vector<WCase> wcases = {
      {{32, 32, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false, false},     // 7x7: direct
      {{32, 64, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false, false},   // 14x14, 64 channels: direct
      {{32, 32, 1, 57, 57, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true}, false, false},   // stride 2: direct
      {{32, 32, 1, 32, 32, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, true}, false, false},   // dilated: direct
      {{64, 64, 1, 28, 29, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false, true},    // 32-channel halves at batch 1
      {{32, 32, 1, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false, true},    // 16-channel halves at batch 1
      {{64, 48, 1, 30, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false, true},    // 48 = 3 blocks: one slice
      {{32, 64, 1, 30, 31, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, false}, false, true},   // no pads: 28x29 out
      {{48, 64, 1, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true, true},     // residual sum + Relu
      {{64, 128, 1, 14, 15, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false, true},   // 14x15, 128 channels: Winograd
      {{64, 128, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true, true},    // 14x14 with the residual sum
      {{32, 96, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false, false},   // 14x14, 96 channels: direct
      {{32, 128, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false, false},    // 7x7, 128 channels: direct
  };
  const int block = 16;
  const int64_t hw = hardwareThreads();
  int caseIndex = 0;
  bool avx512 = false;
  const char* env = std::getenv("QS_WINOGRAD");
  const bool winogradOn = !(env && std::string(env) == "0");  // (ctest runs it once with QS_WINOGRAD=0)
  for (const WCase& wc : wcases) {
    const Case& c = wc.c;
    const std::string what0 = "case " + std::to_string(caseIndex++);
    const Tensor w = randomTensor({c.M, c.C, c.kh, c.kw}, rng, -0.5f, 0.5f), b = randomTensor({c.M}, rng);
    const std::vector<FusedActivation> acts = wc.residual ? std::vector<FusedActivation>{}
                                                          : std::vector<FusedActivation>{{K::Relu, 0, 0}};
    auto conv = DnnlConv::createBlocked(w, c.bias ? &b : nullptr, 1, acts, wc.residual, wc.residual, block);
    ASSERT_TRUE(conv) << what0;
    WindowGeometry g;
    ASSERT_TRUE(caseGeometry(c, g));
    const int64_t OH = g.out[1], OW = g.out[2], inPer = c.C * c.H * c.W, outPer = c.M * OH * OW;
    // The direct kernel's name says whether oneDNN runs AVX-512 here (then it has Winograd too).
    const std::string direct = conv->kernelName(1, c.C, g);
    if (!wc.winograd) {
      EXPECT_EQ(std::string::npos, direct.find("wino")) << what0 << ": " << direct;
      avx512 = avx512 || direct.find("avx512") != std::string::npos;
    }
    for (int64_t N : {int64_t{1}, 2 * hw, 4 * hw + 1}) {
      const Tensor x = randomTensor({N, c.C, c.H, c.W}, rng), r = randomTensor({N, c.M, OH, OW}, rng);
      Tensor want = naive(c, x, w, c.bias ? &b : nullptr, acts);
      if (wc.residual)
        for (int64_t i = 0; i < want.numel(); ++i)
          want.data<float>()[i] = std::max(0.f, want.data<float>()[i] + r.data<float>()[i]);
      Tensor xb(DType::Float, {N * inPer}), rb(DType::Float, {N * outPer});
      toNchw8c(x.data<float>(), N, c.C, c.H * c.W, xb.data<float>(), 1, block);
      toNchw8c(r.data<float>(), N, c.M, OH * OW, rb.data<float>(), 1, block);
      const float* res = wc.residual ? rb.data<float>() : nullptr;
      std::vector<Tensor> alone;
      for (int64_t n = 0; n < N && N > 1; ++n) {
        Tensor y1(DType::Float, {outPer});
        ASSERT_TRUE(
            conv->runBlocked(xb.data<float>() + n * inPer, 1, c.C, g, y1.data<float>(), res ? res + n * outPer : nullptr, 1)
                .isOk());
        alone.push_back(y1);
      }
      Tensor first;
      for (int threads : {1, 2}) {
        const std::string what = what0 + " N " + std::to_string(N) + " threads " + std::to_string(threads);
        Tensor yb(DType::Float, {N * outPer}), y(DType::Float, want.shape());
        Status st = conv->runBlocked(xb.data<float>(), N, c.C, g, yb.data<float>(), res, threads);
        ASSERT_TRUE(st.isOk()) << what << ": " << st.message();
        fromNchw8c(yb.data<float>(), N, c.M, OH * OW, y.data<float>(), 1, block);
        expectNear(y, want, what);
        for (size_t n = 0; n < alone.size(); ++n)
          ASSERT_EQ(0, std::memcmp(yb.data<float>() + n * outPer, alone[n].data<float>(), sizeof(float) * (size_t)outPer))
              << what << " image " << n;
        if (threads == 1) first = yb;
        else ASSERT_EQ(0, std::memcmp(first.data<float>(), yb.data<float>(), sizeof(float) * (size_t)yb.numel())) << what;
      }
      if (wc.winograd && avx512 && winogradOn) {
        const std::string name = conv->kernelName(N, c.C, g);
        EXPECT_NE(std::string::npos, name.find("wino_4x3")) << what0 << " N " << N << ": " << name;
      }
    }
  }
}

// A blocked conv with a residual input (a ResNet block's Add + Relu) reads the residual in place, by
// oneDNN's binary-add post-op, on its direct kernels (1x1 and 3x3; the Winograd kernel has no binary
// post-op and keeps the sum post-op on a copy): the naive values, the residual left as it was, and
// each image the bits it gets alone at any batch (image groups, slices at batch 1) and thread count;
// 512 -> 128 at 7x7 is a shape where jit_1x1 splits the input channels into chunks.
TEST_F(ConvDnnl, BlockedResidualIsReadInPlaceAndKeepsEachImagesBits) {
  std::mt19937 rng(43);
  struct RCase {
    Case c;
    bool relu;
  };
  const std::vector<RCase> rcases = {
      {{512, 128, 1, 7, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true}, true},      // resnet50 layer4-like, at 7x7
      {{64, 256, 1, 14, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true}, false},    // an expanding 1x1, no Relu after
      {{32, 48, 1, 9, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false}, true},       // a 3x3 (direct), no bias
      {{64, 64, 1, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true},      // Winograd where the CPU has it
  };
  const int block = DnnlConv::preferredBlock();
  const int64_t hw = hardwareThreads();
  int caseIndex = 0;
  for (const RCase& rc : rcases) {
    const Case& c = rc.c;
    const std::string what0 = "case " + std::to_string(caseIndex++) + " block " + std::to_string(block);
    const Tensor w = randomTensor({c.M, c.C, c.kh, c.kw}, rng, -0.5f, 0.5f), b = randomTensor({c.M}, rng);
    auto conv = DnnlConv::createBlocked(w, c.bias ? &b : nullptr, 1, {}, true, rc.relu, block);
    ASSERT_TRUE(conv) << what0;
    WindowGeometry g;
    ASSERT_TRUE(caseGeometry(c, g));
    const int64_t OH = g.out[1], OW = g.out[2], inPer = c.C * c.H * c.W, outPer = c.M * OH * OW;
    const bool winograd = conv->kernelName(1, c.C, g).find("wino") != std::string::npos;
    EXPECT_EQ(conv->residualReadInPlace(1, c.C, g), !winograd) << what0 << ": " << conv->kernelName(1, c.C, g);
    for (int64_t N : {int64_t{1}, 2 * hw, 4 * hw + 1}) {
      EXPECT_EQ(conv->residualReadInPlace(N, c.C, g), !winograd) << what0 << " N " << N;
      const Tensor x = randomTensor({N, c.C, c.H, c.W}, rng), r = randomTensor({N, c.M, OH, OW}, rng);
      Tensor want = naive(c, x, w, c.bias ? &b : nullptr, {});
      for (int64_t i = 0; i < want.numel(); ++i) {
        const float v = want.data<float>()[i] + r.data<float>()[i];
        want.data<float>()[i] = rc.relu ? std::max(0.f, v) : v;
      }
      Tensor xb(DType::Float, {N * inPer}), rb(DType::Float, {N * outPer});
      toNchw8c(x.data<float>(), N, c.C, c.H * c.W, xb.data<float>(), 1, block);
      toNchw8c(r.data<float>(), N, c.M, OH * OW, rb.data<float>(), 1, block);
      const std::vector<float> rCopy(rb.data<float>(), rb.data<float>() + rb.numel());
      std::vector<Tensor> alone;
      for (int64_t n = 0; n < N; ++n) {
        Tensor y1(DType::Float, {outPer});
        ASSERT_TRUE(conv->runBlocked(xb.data<float>() + n * inPer, 1, c.C, g, y1.data<float>(),
                                     rb.data<float>() + n * outPer, 1)
                        .isOk());
        alone.push_back(y1);
      }
      for (int threads : {1, 2}) {
        const std::string what = what0 + " N " + std::to_string(N) + " threads " + std::to_string(threads);
        Tensor yb(DType::Float, {N * outPer}), y(DType::Float, want.shape());
        Status st = conv->runBlocked(xb.data<float>(), N, c.C, g, yb.data<float>(), rb.data<float>(), threads);
        ASSERT_TRUE(st.isOk()) << what << ": " << st.message();
        ASSERT_EQ(0, std::memcmp(rCopy.data(), rb.data<float>(), sizeof(float) * rCopy.size())) << what;
        fromNchw8c(yb.data<float>(), N, c.M, OH * OW, y.data<float>(), 1, block);
        expectNear(y, want, what);
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(0, std::memcmp(yb.data<float>() + n * outPer, alone[(size_t)n].data<float>(),
                                   sizeof(float) * (size_t)outPer))
              << what << " image " << n;
      }
    }
  }
}

}  // namespace
}  // namespace qs
