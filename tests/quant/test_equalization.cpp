// Cross-layer equalization (core/quant/equalization.h) on graphs built in code: the float outputs
// are kept (>= 100 dB against the model before) and the per-channel weight ranges of each pair
// come out equal, for Conv -> Relu -> Conv and for depthwise -> pointwise.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/exec/executor.h"
#include "core/quant/equalization.h"

using namespace qs;

namespace {

Tensor randomTensor(const Shape& shape, std::mt19937& rng, float lo, float hi) {
  Tensor t(DType::Float, shape);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

struct Builder {
  Model m;
  ValueId constant(const std::string& name, Tensor t) {
    ValueId v = m.graph.valueId(name);
    m.graph.value(v).dtype = DType::Float;
    m.graph.value(v).constant = std::move(t);
    return v;
  }
  void node(const std::string& op, const std::string& name, const std::vector<std::string>& ins, const std::string& out,
            int64_t group = 1) {
    Node n;
    n.name = name;
    n.opType = op;
    for (const auto& i : ins) n.inputs.push_back(m.graph.valueId(i));
    n.outputs.push_back(m.graph.valueId(out));
    if (op == "Conv") {
      Attribute a;
      a.type = Attribute::Type::Int;
      a.i = group;
      n.attributes["group"] = a;
      Attribute p;
      p.type = Attribute::Type::Ints;
      p.ints = {1, 1, 1, 1};
      n.attributes["pads"] = p;
    }
    m.graph.nodes.push_back(std::move(n));
  }
  std::shared_ptr<const Model> finish(const std::string& in, const std::string& out) {
    ValueId x = m.graph.valueId(in);
    m.graph.value(x).isGraphInput = true;
    m.graph.value(x).dtype = DType::Float;
    m.graph.inputs.push_back(x);
    ValueId y = m.graph.valueId(out);
    m.graph.value(y).isGraphOutput = true;
    m.graph.outputs.push_back(y);
    m.opsets[""] = 13;
    m.path = "built.onnx";
    EXPECT_TRUE(m.graph.finalize("built.onnx").isOk());
    return std::make_shared<const Model>(m);
  }
};

// A first Conv whose output channels have ranges spread over two decades.
Tensor spreadWeight(const Shape& shape, std::mt19937& rng) {
  Tensor w = randomTensor(shape, rng, -1.f, 1.f);
  const int64_t block = w.numel() / shape[0];
  for (int64_t c = 0; c < shape[0]; ++c)
    for (int64_t i = 0; i < block; ++i) w.data<float>()[c * block + i] *= std::pow(10.f, (float)(c % 5) / 2.f - 1.f);
  return w;
}

double snrDb(const Tensor& ref, const Tensor& test) {
  double s = 0, n = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.data<float>()[i], d = test.data<float>()[i] - r;
    s += r * r;
    n += d * d;
  }
  return n == 0 ? INFINITY : 10 * std::log10(s / n);
}

Tensor runModel(std::shared_ptr<const Model> m, const Tensor& x) {
  auto ex = Executor::create(std::move(m));
  EXPECT_TRUE(ex.isOk());
  auto out = (*ex)->run({NamedTensor{"x", x}});
  EXPECT_TRUE(out.isOk()) << out.status().message();
  return (*out)[0];
}

float channelRange(const Tensor& w, int64_t c, bool outputChannel, int64_t group = 1) {
  float r = 0;
  const int64_t O = w.dim(0), I = w.dim(1), S = w.numel() / (O * I);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      const bool hit = outputChannel ? o == c : (group == 1 ? i == c : o == c);
      if (!hit) continue;
      for (int64_t s = 0; s < S; ++s) r = std::max(r, std::fabs(w.data<float>()[(o * I + i) * S + s]));
    }
  return r;
}

TEST(Equalization, ConvReluConvKeepsOutputsAndEqualizesRanges) {
  std::mt19937 rng(7);
  Builder b;
  b.constant("w1", spreadWeight({8, 3, 3, 3}, rng));
  b.constant("b1", randomTensor({8}, rng, -0.5f, 0.5f));
  b.constant("w2", randomTensor({4, 8, 3, 3}, rng, -1.f, 1.f));
  b.constant("b2", randomTensor({4}, rng, -0.5f, 0.5f));
  b.node("Conv", "conv1", {"x", "w1", "b1"}, "c1");
  b.node("Relu", "relu1", {"c1"}, "r1");
  b.node("Conv", "conv2", {"r1", "w2", "b2"}, "y");
  auto model = b.finish("x", "y");

  auto eq = equalizeCrossLayer(*model);
  ASSERT_TRUE(eq.isOk()) << eq.status().message();
  ASSERT_EQ(eq->pairs.size(), 1u);
  EXPECT_EQ(eq->pairs[0].channels, 8);
  EXPECT_GT(eq->pairs[0].maxLogScale, 0.5);
  EXPECT_EQ(eq->changedInitializers, (std::vector<std::string>{"b1", "w1", "w2"}));

  const Tensor x = randomTensor({2, 3, 10, 10}, rng, -1.f, 1.f);
  EXPECT_GE(snrDb(runModel(model, x), runModel(eq->model, x)), 100.0);
  const Graph& g = eq->model->graph;
  const Tensor& w1 = *g.value(g.findValue("w1")).constant;
  const Tensor& w2 = *g.value(g.findValue("w2")).constant;
  for (int64_t c = 0; c < 8; ++c) EXPECT_NEAR(channelRange(w1, c, true), channelRange(w2, c, false), 1e-4f) << c;
  // The input model is untouched.
  EXPECT_NE(model->graph.value(model->graph.findValue("w1")).constant->data<float>()[0], w1.data<float>()[0]);
}

TEST(Equalization, DepthwisePointwisePairThroughIdentity) {
  std::mt19937 rng(11);
  Builder b;
  b.constant("wd", spreadWeight({6, 1, 3, 3}, rng));
  b.constant("bd", randomTensor({6}, rng, -0.5f, 0.5f));
  b.constant("wp", randomTensor({5, 6, 1, 1}, rng, -1.f, 1.f));
  b.node("Conv", "dw", {"x", "wd", "bd"}, "d", 6);
  b.node("Conv", "pw", {"d", "wp"}, "y");
  // The pointwise Conv takes no pads.
  b.m.graph.nodes[1].attributes.erase("pads");
  auto model = b.finish("x", "y");

  auto eq = equalizeCrossLayer(*model);
  ASSERT_TRUE(eq.isOk());
  ASSERT_EQ(eq->pairs.size(), 1u);
  const Tensor x = randomTensor({1, 6, 8, 8}, rng, -1.f, 1.f);
  EXPECT_GE(snrDb(runModel(model, x), runModel(eq->model, x)), 100.0);
  const Graph& g = eq->model->graph;
  const Tensor& wd = *g.value(g.findValue("wd")).constant;
  const Tensor& wp = *g.value(g.findValue("wp")).constant;
  for (int64_t c = 0; c < 6; ++c) EXPECT_NEAR(channelRange(wd, c, true), channelRange(wp, c, false), 1e-4f) << c;
}

TEST(Equalization, PairsThroughNonHomogeneousOpsAreLeftAlone) {
  std::mt19937 rng(3);
  Builder b;
  b.constant("w1", spreadWeight({4, 3, 3, 3}, rng));
  b.constant("w2", randomTensor({4, 4, 3, 3}, rng, -1.f, 1.f));
  b.constant("lo", Tensor::scalar<float>(0.f));
  b.constant("hi", Tensor::scalar<float>(6.f));
  b.node("Conv", "conv1", {"x", "w1"}, "c1");
  b.node("Clip", "relu6", {"c1", "lo", "hi"}, "r1");  // Clip(0, 6) is not f(x / s) = f(x) / s
  b.node("Conv", "conv2", {"r1", "w2"}, "y");
  auto model = b.finish("x", "y");
  EXPECT_TRUE(findEqualizablePairs(*model).empty());
  auto eq = equalizeCrossLayer(*model);
  ASSERT_TRUE(eq.isOk());
  EXPECT_TRUE(eq->pairs.empty());
  EXPECT_TRUE(eq->changedInitializers.empty());
}

}  // namespace
