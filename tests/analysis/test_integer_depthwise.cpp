// The quantized pass runs depthwise Convs as integer Convs (core/kernels/qconv_depthwise.h) where
// the analysis takes integer Convs and the CPU has the VNNI kernel, on a model built in code that
// has nothing else to quantize: the graph-wise and sensitivity figures move by float rounding
// only, and the layer-wise ones (the plane pass, unchanged) not at all.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/analysis/quant_session.h"
#include "core/kernels/qconv.h"
#include "core/kernels/qconv_depthwise.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/session_helpers.h"

using namespace qs;

namespace {

constexpr int64_t kC = 8, kH = 24, kW = 37, kSamples = 4;

// x [N, 8, 24, 37] -> depthwise 3x3 (pad 1) -> a -> depthwise 5x5 stride 2 (pad 2) -> y.
test::BuiltModel buildDepthwisePair() {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> w1((size_t)kC * 9), b1((size_t)kC), w2((size_t)kC * 25), b2((size_t)kC);
  std::vector<float> x((size_t)(kSamples * kC * kH * kW));
  for (float& v : w1) v = 0.4f * n(rng);
  for (float& v : w2) v = 0.2f * n(rng);
  for (float& v : b1) v = 0.1f * n(rng);
  for (float& v : b2) v = 0.1f * n(rng);
  for (float& v : x) v = n(rng);
  test::OnnxBuilder ob;
  ob.input("x", {-1, kC, kH, kW}).output("y", {-1, kC, -1, -1});
  ob.initializer("W1", {kC, 1, 3, 3}, w1);
  ob.initializer("B1", {kC}, b1);
  ob.initializer("W2", {kC, 1, 5, 5}, w2);
  ob.initializer("B2", {kC}, b2);
  auto& c1 = ob.node("Conv", {"x", "W1", "B1"}, {"a"}, "dw3x3");
  test::OnnxBuilder::attrInt(c1, "group", kC);
  test::OnnxBuilder::attrInts(c1, "pads", {1, 1, 1, 1});
  auto& c2 = ob.node("Conv", {"a", "W2", "B2"}, {"y"}, "dw5x5s2");
  test::OnnxBuilder::attrInt(c2, "group", kC);
  test::OnnxBuilder::attrInts(c2, "pads", {2, 2, 2, 2});
  test::OnnxBuilder::attrInts(c2, "strides", {2, 2});
  return test::buildWithData(ob, Tensor::fromVector<float>(x, {kSamples, kC, kH, kW}), "integer_depthwise");
}

}  // namespace

TEST(IntegerDepthwise, QuantizedPassAgreesWithFp32AndLayerwiseIsUnchanged) {
  setQconvKernel("auto");
  if (!qconvDepthwiseFast()) GTEST_SKIP() << "no AVX-512 VNNI and VBMI: depthwise Convs stay FP32";
  test::BuiltModel b = buildDepthwisePair();
  ASSERT_TRUE(b.model && b.data);
  test::SessionRun r[2];
  for (int on = 0; on < 2; ++on) {
    AnalysisOptions ao;
    ao.threads = 2;
    ao.calibration.method = CalibMethod::Percentile;
    ao.integerConv = on == 1;
    r[on] = test::calibrateAndAnalyse(b, ao);
    ASSERT_TRUE(r[on].result);
  }
  const Graph& g = b.model->graph;
  int convs = 0, differ = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].opType != "Conv") continue;
    ++convs;
    const NodeResult &a = r[0].result->nodes[i], &q = r[1].result->nodes[i];
    const std::string& name = g.nodes[i].name;
    ASSERT_TRUE(a.hasGraphwise && q.hasGraphwise && a.hasLayerwise) << name;
    // Exact integer sums against FP32 sums of the same fake-quantized values: float rounding.
    EXPECT_NEAR(a.graphwise.snrDb, q.graphwise.snrDb, 1e-3) << name;
    EXPECT_NEAR(a.sensitivitySnrDb, q.sensitivitySnrDb, 1e-3) << name;
    differ += a.graphwise.snrDb != q.graphwise.snrDb;
    differ += a.sensitivitySnrDb != q.sensitivitySnrDb;
    // The layer-wise runs keep the plane pass: the same bits.
    EXPECT_EQ(a.layerwise.snrDb, q.layerwise.snrDb) << name;
    EXPECT_EQ(a.activationSnrDb, q.activationSnrDb) << name;
    EXPECT_EQ(a.weightSnrDb, q.weightSnrDb) << name;
  }
  EXPECT_EQ(convs, 2);
  // The integer path ran: its figures are not the FP32 path's bits.
  EXPECT_GT(differ, 0);
  EXPECT_NEAR(r[0].result->outputs[0].metrics.snrDb, r[1].result->outputs[0].metrics.snrDb, 1e-3);
}
