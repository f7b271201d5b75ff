// The elementwise chain (core/kernels/elementwise_chain.h) against its ops run one by one by the
// Add, Sub, Mul, Div and Clip kernels: the same output bits, and the same error sums as
// ErrorAccumulator::add over each whole output, across block and piece borders.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/exec/kernel_registry.h"
#include "core/kernels/elementwise_chain.h"

namespace qs {
namespace {

// op(a, b) by the op's kernel at opset 13 (Clip: a, lo, hi).
Tensor runKernel(const std::string& op, const std::vector<const Tensor*>& inputs) {
  static const std::vector<KernelEntry> table = elementwiseKernels();
  static Graph graph;
  Node node;
  node.name = "n";
  node.opType = op;
  for (const KernelEntry& e : table) {
    if (e.opType != op || e.domain != "" || 13 < e.sinceVersion || 13 > e.untilVersion) continue;
    auto k = e.create(KernelInit{node, 13, graph});
    EXPECT_TRUE(k.isOk()) << k.status().message();
    std::vector<Tensor> outs(1);
    KernelContext ctx;
    ctx.inputs = inputs;
    ctx.outputs = outs;
    Status st = k.value()->run(ctx);
    EXPECT_TRUE(st.isOk()) << st.message();
    return outs[0];
  }
  ADD_FAILURE() << "no kernel for " << op;
  return {};
}

Tensor scalar(float v) { return Tensor::fromVector<float>({v}, {}); }

bool sameBits(const Tensor& a, const float* b) {
  return a.dtype() == DType::Float && std::memcmp(a.data<float>(), b, (size_t)a.numel() * sizeof(float)) == 0;
}

void expectSameSums(const ErrorAccumulator& a, const ErrorAccumulator& b, const std::string& what) {
  const ErrorMetrics x = a.metrics(), y = b.metrics();
  EXPECT_EQ(x.count, y.count) << what;
  EXPECT_EQ(a.signalPower(), b.signalPower()) << what;
  EXPECT_EQ(a.noisePower(), b.noisePower()) << what;
  EXPECT_EQ(x.cosine, y.cosine) << what;
  EXPECT_EQ(x.maxAbs, y.maxAbs) << what;
}

TEST(KernelsElementwiseChain, SameBitsAndSumsAsOpByOp) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  // det's chain after a Conv (Mul, Add, Add, Clip, Mul, Div, Mul, Add) with constants on either
  // side, a Sub and a Div by a chain value, and a value read twice.
  using K = ChainOp::Kind;
  std::vector<ChainOp> ops = {
      {K::kMul, 0, -1, 0, 1.7f},    // 1: x * 1.7
      {K::kAdd, 1, -1, 0, 0.3f},    // 2
      {K::kAdd, 2, 0},              // 3: v2 + x
      {K::kClip, 3, -1, 0, 0, -1.f, 2.5f},
      {K::kMul, 4, 1},              // 5: v4 * v1
      {K::kDiv, -1, 5, 2.f, 0},     // 6: 2 / v5
      {K::kSub, -1, 6, 0.5f, 0},    // 7: 0.5 - v6
      {K::kDiv, 7, -1, 0, 6.f},     // 8
  };
  const char* names[] = {"Add", "Sub", "Mul", "Div", "Clip"};
  // Sizes: below one piece, across pieces, across ErrorAccumulator blocks with a partial piece.
  for (int64_t n : {int64_t(37), kChainPiece * 3 + 5, ErrorAccumulator::kBlock * 2 + 1000}) {
    Tensor x(DType::Float, {n});
    for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = u(rng);
    // Op by op through the kernels, and a reference per op (the outputs perturbed).
    std::vector<Tensor> values = {x}, refs;
    for (const ChainOp& op : ops) {
      Tensor a = op.a >= 0 ? values[(size_t)op.a] : scalar(op.ca);
      Tensor b = op.b >= 0 ? values[(size_t)op.b] : scalar(op.cb);
      Tensor lo = scalar(op.lo), hi = scalar(op.hi);
      values.push_back(op.kind == K::kClip ? runKernel("Clip", {&a, &lo, &hi}) : runKernel(names[op.kind], {&a, &b}));
      Tensor r(DType::Float, {n});
      for (int64_t i = 0; i < n; ++i) r.data<float>()[i] = values.back().data<float>()[i] * (1.f + 1e-3f * u(rng));
      refs.push_back(r);
    }
    // The chain: every other output stored, every output but the third compared.
    std::vector<std::vector<float>> stored(ops.size());
    std::vector<ErrorAccumulator> sums(ops.size());
    std::vector<ChainOutput> outs(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      if (i % 2 == 0 || i + 1 == ops.size()) {
        stored[i].resize((size_t)n);
        outs[i].store = stored[i].data();
      }
      if (i != 2) {
        outs[i].reference = refs[i].data<float>();
        outs[i].sums = &sums[i];
      }
    }
    runElementwiseChain(ops, x.data<float>(), n, outs);
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::string what = "op " + std::to_string(i) + " n " + std::to_string(n);
      if (outs[i].store) {
        EXPECT_TRUE(sameBits(values[i + 1], outs[i].store)) << what;
      }
      if (!outs[i].sums) continue;
      ErrorAccumulator whole;
      whole.add(refs[i], values[i + 1]);
      expectSameSums(sums[i], whole, what);
    }
  }
}

TEST(KernelsElementwiseChain, ActivationOperandsGiveTheKernelsBitsOnAnyThreadCount) {
  // Ops over activation operands besides the chain's input (ChainOperand): one of the input's
  // shape, a squeeze-excitation scale [N, C, 1, 1], a per-channel [1, C, 1, 1], a trailing row
  // [W] and a middle block [H, 1], each against the Add/Mul/Sub/Div kernels with numpy
  // broadcasting; x is [2, 24, 64, 50] (three ErrorAccumulator blocks, the last partial).
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  const Shape xs = {2, 24, 64, 50};
  auto random = [&](const Shape& s) {
    Tensor t(DType::Float, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    return t;
  };
  const Tensor x = random(xs);
  const int64_t n = x.numel();
  const std::vector<Tensor> operands = {random(xs), random({2, 24, 1, 1}), random({1, 24, 1, 1}), random({50}),
                                        random({64, 1})};
  const std::vector<ChainOperand> views = {{operands[0].data<float>(), 1, 0},
                                           {operands[1].data<float>(), 64 * 50, 48},
                                           {operands[2].data<float>(), 64 * 50, 24},
                                           {operands[3].data<float>(), 1, 50},
                                           {operands[4].data<float>(), 50, 64}};
  using K = ChainOp::Kind;
  const std::vector<ChainOp> ops = {
      {K::kMul, 0, -3},   // 1: x * se: the squeeze-excitation Mul
      {K::kAdd, 1, -2},   // 2: + a same-shape activation: the residual Add
      {K::kSub, -4, 2},   // 3: per-channel - v2
      {K::kDiv, 3, -5},   // 4: / a row
      {K::kAdd, -6, 4},   // 5: [H, 1] + v4
      {K::kMul, -2, -3},  // 6: two operands, no chain value
  };
  const char* names[] = {"Add", "Sub", "Mul", "Div"};
  std::vector<Tensor> values = {x}, refs;
  for (const ChainOp& op : ops) {
    const Tensor& a = op.a <= -2 ? operands[(size_t)(-2 - op.a)] : values[(size_t)op.a];
    const Tensor& b = op.b <= -2 ? operands[(size_t)(-2 - op.b)] : values[(size_t)op.b];
    values.push_back(runKernel(names[op.kind], {&a, &b}));
    ASSERT_EQ(values.back().numel(), n);
    Tensor r(DType::Float, xs);
    for (int64_t i = 0; i < n; ++i) r.data<float>()[i] = values.back().data<float>()[i] * (1.f + 1e-3f * u(rng));
    refs.push_back(r);
  }
  for (int threads : {1, 2}) {
    std::vector<std::vector<float>> stored(ops.size(), std::vector<float>((size_t)n));
    std::vector<ErrorAccumulator> sums(ops.size());
    std::vector<ChainOutput> outs(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      if (i != 1) outs[i].store = stored[i].data();  // v2 only in scratch
      outs[i].reference = refs[i].data<float>();
      outs[i].sums = &sums[i];
    }
    runElementwiseChain(ops, x.data<float>(), n, outs, views, threads);
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::string what = "op " + std::to_string(i) + ", threads " + std::to_string(threads);
      if (outs[i].store) EXPECT_TRUE(sameBits(values[i + 1], outs[i].store)) << what;
      ErrorAccumulator whole;
      whole.add(refs[i], values[i + 1]);
      expectSameSums(sums[i], whole, what);
    }
  }
}

}  // namespace
}  // namespace qs
