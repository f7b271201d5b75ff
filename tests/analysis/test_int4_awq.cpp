// awq_lite against rtn_dq on built MatMul models (issue #15): with an outlier
// channel in the activation the AWQ scale lowers the layer's error; without
// one, the guards keep awq_lite from ever being worse than round-to-nearest,
// per layer and at the graph output, on the calibration data.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/analysis/int4_analysis.h"
#include "core/onnx/loader.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;

namespace {

// x [N, 64] -> Mul(gain [64]) -> MatMul(W [64, 32]) -> y. `outlier` > 1 makes
// channel 5 of the MatMul's activation that many times larger than the rest.
std::shared_ptr<Model> gainModel(const std::string &dir, float outlier,
                                 int seed) {
  OnnxBuilder b(13);
  std::mt19937 rng((unsigned)seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> w(64 * 32), gain(64, 1.0f);
  for (float &v : w)
    v = n(rng);
  gain[5] = outlier;
  b.input("x", {-1, 64}).output("y", {-1, 32});
  b.initializer("gain", {64}, gain);
  b.initializer("w", {64, 32}, w);
  b.node("Mul", {"x", "gain"}, {"a"}, "gain");
  b.node("MatMul", {"a", "w"}, {"y"}, "fc");
  const std::string path =
      dir + "/gain" + std::to_string(seed) + "_" + std::to_string((int)outlier) + ".onnx";
  qs::test::writeBytes(path, b.bytes());
  auto m = loadModel(path);
  EXPECT_TRUE(m) << m.status().message();
  return m ? *m : nullptr;
}

Int4Result analyse(const std::shared_ptr<Model> &m, Int4Method method,
                   int64_t block) {
  CalibrationDataOptions co;
  co.maxSamples = 16;
  co.batchSize = 4;
  auto data = CalibrationData::open(*m, co);
  EXPECT_TRUE(data) << data.status().message();
  Int4Options o;
  o.method = method;
  o.blockSize = block;
  o.threads = 1;
  auto r = runInt4Analysis(m, **data, o);
  EXPECT_TRUE(r) << r.status().message();
  return r ? std::move(r).value() : Int4Result{};
}

TEST(Int4Awq, OutlierChannelLowersTheLayerErrorBelowRtn) {
  const std::string dir = qs::test::makeTempDir("int4awq");
  for (int64_t block : {16, 32}) {
    SCOPED_TRACE("block " + std::to_string(block));
    auto m = gainModel(dir, 40.0f, 1);
    ASSERT_TRUE(m);
    const Int4Result rtn = analyse(m, Int4Method::RtnDq, block);
    const Int4Result lite = analyse(m, Int4Method::AwqLite, block);
    ASSERT_EQ(rtn.layers.size(), 1u);
    ASSERT_EQ(lite.layers.size(), 1u);
    // The outlier channel is what AWQ is for: it scales, and it gains.
    EXPECT_FALSE(lite.layers[0].activationScale.empty());
    EXPECT_LT(lite.layers[0].layerwise.mse, rtn.layers[0].layerwise.mse);
    EXPECT_LT(lite.outputs[0].metrics.mse, rtn.outputs[0].metrics.mse);
    EXPECT_GT(lite.outputs[0].metrics.snrDb, rtn.outputs[0].metrics.snrDb);
  }
  std::filesystem::remove_all(dir);
}

TEST(Int4Awq, NeverWorseThanRtnWithoutOutliers) {
  const std::string dir = qs::test::makeTempDir("int4awq");
  for (int seed : {2, 3, 4}) {
    for (int64_t block : {16, 64}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " block " +
                   std::to_string(block));
      auto m = gainModel(dir, 1.0f, seed);
      ASSERT_TRUE(m);
      const Int4Result rtn = analyse(m, Int4Method::RtnDq, block);
      const Int4Result lite = analyse(m, Int4Method::AwqLite, block);
      ASSERT_EQ(lite.layers.size(), 1u);
      EXPECT_LE(lite.layers[0].layerwise.mse, rtn.layers[0].layerwise.mse);
      EXPECT_LE(lite.layers[0].graphwise.mse, rtn.layers[0].graphwise.mse);
      EXPECT_LE(lite.outputs[0].metrics.mse, rtn.outputs[0].metrics.mse);
      // Where AWQ does not help, the layer is exactly round-to-nearest.
      if (lite.layers[0].activationScale.empty()) {
        EXPECT_EQ(lite.layers[0].weight.q, rtn.layers[0].weight.q);
      }
    }
  }
  std::filesystem::remove_all(dir);
}

} // namespace
