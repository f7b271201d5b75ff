// The fast output sensitivity (core/analysis/fast_sensitivity.h) against the exact cone sweep:
// it finds a built model's bad node, it ranks cls's nodes as the sweep does, the exact figure on
// demand equals the sweep's, autoFallback refines its top candidates, and the off mode computes none.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/analysis/fast_sensitivity.h"
#include "core/analysis/quant_session.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/sensitivity_model.h"
#include "tests/support/text_images.h"

using namespace qs;
using qs::test::nodeNamed;

namespace {

std::unique_ptr<QuantSession> session(std::shared_ptr<Model> model, const CalibrationData& data, bool sensitivity,
                                      SensitivityMethod method) {
  AnalysisOptions ao;
  ao.threads = 2;
  ao.calibration.method = CalibMethod::Max;
  ao.sensitivity = sensitivity;
  ao.sensitivityMethod = method;
  auto s = QuantSession::create(std::move(model), {}, ao);
  EXPECT_TRUE(s) << s.status().message();
  EXPECT_TRUE(s.value()->calibrate(data));
  return std::move(s).value();
}

// A residual chain of `blocks` blocks x_k = x_{k-1} + Reshape(MatMul(x_{k-1}, w_k), Shape(x_{k-1})), the
// shape taken from the stream as exported transformers do. Block `bad`'s weights hold one outlier per
// column (as badNodeChainModel's m2), so its quantization dominates the output error. The noise of a
// block reaches the output once through each later Add; an estimate that also walks back through
// Shape (or that sums energies over every path) amplifies the early blocks by ~3^depth.
std::shared_ptr<Model> residualShapeChainModel(int blocks, int bad) {
  test::OnnxBuilder b(13);
  const int64_t n = 32;
  b.input("x0", {1, 8, n}).output("x" + std::to_string(blocks), {1, 8, n});
  std::mt19937 rng(5);
  for (int k = 1; k <= blocks; ++k) {
    const std::string id = std::to_string(k), prev = "x" + std::to_string(k - 1);
    std::vector<float> w = test::randomValues((size_t)(n * n), rng, -0.1f, 0.1f);
    if (k == bad)
      for (int64_t c = 0; c < n; ++c) w[(size_t)(((c * 7) % n) * n + c)] = 4.0f;
    b.initializer("w" + id, {n, n}, w);
    b.node("MatMul", {prev, "w" + id}, {"h" + id}, "m" + id);
    b.node("Shape", {prev}, {"s" + id}, "shape" + id);
    b.node("Reshape", {"h" + id, "s" + id}, {"r" + id}, "reshape" + id);
    b.node("Add", {prev, "r" + id}, {"x" + id}, "add" + id);
  }
  return test::builtModel(b, "residual_shape_chain.onnx");
}

NodeId lowestSensitivity(const AnalysisResult& r) {
  NodeId worst = -1;
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const double v = r.nodes[i].sensitivitySnrDb;
    if (!std::isnan(v) && (worst < 0 || v < r.nodes[(size_t)worst].sensitivitySnrDb)) worst = (NodeId)i;
  }
  return worst;
}

}  // namespace

TEST(FastSensitivity, RanksTheBadNodeFirstAndExactOnDemandEqualsTheSweep) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto data = test::randomData(*model, 4);
  ASSERT_TRUE(data);
  const NodeId bad = nodeNamed(model->graph, "m2");
  ASSERT_GE(bad, 0);

  auto fast = session(model, *data, true, SensitivityMethod::Fast);
  auto rf = fast->analyze(data);
  ASSERT_TRUE(rf) << rf.status().message();
  EXPECT_EQ(lowestSensitivity(**rf), bad);
  for (const NodeResult& nr : (*rf)->nodes) EXPECT_FALSE(nr.sensitivityExact);
  EXPECT_GT((*rf)->peakRssBytes, 0u);

  auto exact = session(model, *data, true, SensitivityMethod::Exact);
  auto re = exact->analyze(data);
  ASSERT_TRUE(re) << re.status().message();
  EXPECT_EQ(lowestSensitivity(**re), bad);
  // The estimate is computed in exact mode too, and equals the fast session's.
  for (size_t i = 0; i < (*re)->nodes.size(); ++i) {
    const NodeResult& e = (*re)->nodes[i];
    if (std::isnan(e.sensitivitySnrDb)) continue;
    EXPECT_TRUE(e.sensitivityExact);
    EXPECT_DOUBLE_EQ(e.sensitivityEstimateDb, (*rf)->nodes[i].sensitivitySnrDb) << model->graph.nodes[i].name;
  }
  // A first-order estimate of the dominant node lands near its exact figure.
  EXPECT_NEAR((*rf)->nodes[(size_t)bad].sensitivitySnrDb, (*re)->nodes[(size_t)bad].sensitivitySnrDb, 3.0);

  auto on = fast->exactSensitivity({bad});
  ASSERT_TRUE(on) << on.status().message();
  EXPECT_TRUE((*on)->nodes[(size_t)bad].sensitivityExact);
  EXPECT_NEAR((*on)->nodes[(size_t)bad].sensitivitySnrDb, (*re)->nodes[(size_t)bad].sensitivitySnrDb, 1e-9);
  // Others keep their estimate.
  const NodeId m3 = nodeNamed(model->graph, "m3");
  EXPECT_FALSE((*on)->nodes[(size_t)m3].sensitivityExact);

  // A node that is not quantizable has no sensitivity: refused in one line naming it.
  const NodeId tanh = nodeNamed(model->graph, "t1");
  auto refused = fast->exactSensitivity({tanh});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("'t1'"), std::string::npos) << refused.status().message();
}

// Issue 16: through residual blocks whose shapes come from the stream, the earlier all-paths estimate
// put block 1's estimate 42 dB below its exact figure (14 dB against 56 dB), below the bad block's.
TEST(FastSensitivity, ResidualChainCountsEachNoiseOnce) {
  const int blocks = 16, bad = 9;
  auto model = residualShapeChainModel(blocks, bad);
  ASSERT_TRUE(model);
  auto data = test::randomData(*model, 2);
  ASSERT_TRUE(data);
  auto exact = session(model, *data, true, SensitivityMethod::Exact);
  auto r = exact->analyze(data);
  ASSERT_TRUE(r) << r.status().message();
  const Graph& g = model->graph;
  const NodeId worst = nodeNamed(g, "m" + std::to_string(bad));
  EXPECT_EQ(lowestSensitivity(**r), worst);  // the exact sweep
  NodeId worstEstimate = -1;
  for (int k = 1; k <= blocks; ++k) {
    const NodeResult& nr = (*r)->nodes[(size_t)nodeNamed(g, "m" + std::to_string(k))];
    ASSERT_FALSE(std::isnan(nr.sensitivitySnrDb)) << k;
    // Each block's estimate lands near its exact figure, the first ones as the last.
    EXPECT_NEAR(nr.sensitivityEstimateDb, nr.sensitivitySnrDb, 4.0) << "m" << k;
    if (worstEstimate < 0 || nr.sensitivityEstimateDb < (*r)->nodes[(size_t)worstEstimate].sensitivityEstimateDb)
      worstEstimate = nodeNamed(g, "m" + std::to_string(k));
  }
  EXPECT_EQ(worstEstimate, worst);
}

TEST(FastSensitivity, FallbackComputesItsCandidatesExactly) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto data = test::randomData(*model, 4);
  ASSERT_TRUE(data);
  auto fast = session(model, *data, true, SensitivityMethod::Fast);
  auto rf = fast->analyze(data);
  ASSERT_TRUE(rf) << rf.status().message();
  const double before = (*rf)->worstOutputSnrDb();
  auto steps = fast->autoFallback(before + 6.0);
  ASSERT_TRUE(steps) << steps.status().message();
  ASSERT_FALSE(steps->empty());
  EXPECT_EQ(model->graph.nodes[(size_t)steps->front().excluded].name, "m2");
  EXPECT_TRUE(fast->result()->nodes[(size_t)steps->front().excluded].sensitivityExact);
  EXPECT_GT(steps->front().worstOutputSnrDb(), before + 6.0);
}

TEST(FastSensitivity, OffComputesNone) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto data = test::randomData(*model, 2);
  ASSERT_TRUE(data);
  auto off = session(model, *data, false, SensitivityMethod::Fast);
  auto r = off->analyze(data);
  ASSERT_TRUE(r) << r.status().message();
  for (const NodeResult& nr : (*r)->nodes) {
    EXPECT_TRUE(std::isnan(nr.sensitivitySnrDb));
    EXPECT_TRUE(std::isnan(nr.sensitivityEstimateDb));
  }
}

// On cls (71 quantizable nodes), the estimate ranks the nodes as the exact sweep does.
TEST(FastSensitivity, RanksClsLikeTheExactSweep) {
  const std::string path = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto m = loadModel(path);
  ASSERT_TRUE(m) << m.status().message();
  const std::string dir = test::makeTempDir("fast-sens");
  test::writeTextImages(dir, 4, 192, 48, 100);
  CalibrationDataOptions co;
  co.path = dir;
  co.image.width = 192;
  co.image.height = 48;
  co.image.mean = {0.5f, 0.5f, 0.5f};
  co.image.std = {0.5f, 0.5f, 0.5f};
  auto d = CalibrationData::open(**m, co);
  ASSERT_TRUE(d) << d.status().message();
  std::shared_ptr<const CalibrationData> data(std::move(d).value());
  auto exact = session(*m, *data, true, SensitivityMethod::Exact);
  auto r = exact->analyze(data);
  ASSERT_TRUE(r) << r.status().message();
  std::vector<double> e, f;
  for (const NodeResult& nr : (*r)->nodes) {
    if (std::isnan(nr.sensitivitySnrDb)) continue;
    e.push_back(nr.sensitivitySnrDb);
    f.push_back(nr.sensitivityEstimateDb);
  }
  ASSERT_GT(e.size(), 50u);
  const double rho = spearmanCorrelation(f, e);
  const int top = lowestOverlap(f, e, 10);
  RecordProperty("spearman", std::to_string(rho));
  EXPECT_GT(rho, 0.75);  // 0.86 with the relative propagation (4 images)
  EXPECT_GE(top, 5);
  std::filesystem::remove_all(dir);
}

TEST(FastSensitivity, RankCorrelationAndOverlap) {
  EXPECT_DOUBLE_EQ(spearmanCorrelation({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(spearmanCorrelation({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  EXPECT_TRUE(std::isnan(spearmanCorrelation({1, 1, 1}, {1, 2, 3})));
  EXPECT_EQ(lowestOverlap({1, 2, 3, 4, 5}, {5, 1, 2, 4, 3}, 2), 1);  // {0,1} vs {1,2}
  EXPECT_EQ(lowestOverlap({1, NAN, 3}, {1, 0, 3}, 1), 0);             // {0} vs {1}
}
