// QuantSession::exactSensitivity on each kind of batch (core/analysis/exact_sensitivity.cpp):
// cached (the kept float table), not cached but with its float outputs kept (only the float nodes
// that feed the cones re-run), and neither (a whole float pass): the same figures, equal to an
// exact analyze()'s sweep.
#include <gtest/gtest.h>

#include <cmath>

#include "core/analysis/quant_session.h"
#include "tests/support/sensitivity_model.h"

using namespace qs;

namespace {

std::unique_ptr<QuantSession> session(std::shared_ptr<Model> model, const CalibrationData& data,
                                      SensitivityMethod method, uint64_t budget,
                                      uint64_t outputsFloor = AnalysisOptions().keptOutputsFloorBytes) {
  AnalysisOptions ao;
  ao.keptOutputsFloorBytes = outputsFloor;
  ao.threads = 2;
  ao.calibration.method = CalibMethod::Max;
  ao.sensitivityMethod = method;
  ao.cacheBudgetBytes = budget;
  auto s = QuantSession::create(std::move(model), {}, ao);
  EXPECT_TRUE(s) << s.status().message();
  EXPECT_TRUE(s.value()->calibrate(data));
  return std::move(s).value();
}

}  // namespace

TEST(ExactSensitivity, EveryKindOfBatchGivesTheSweepsFigures) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto data = test::randomData(*model, 4);
  ASSERT_TRUE(data);
  const Graph& g = model->graph;

  auto exact = session(model, *data, SensitivityMethod::Exact, uint64_t(1) << 30);
  auto re = exact->analyze(data);
  ASSERT_TRUE(re) << re.status().message();
  std::vector<NodeId> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!std::isnan((*re)->nodes[i].sensitivitySnrDb)) nodes.push_back((NodeId)i);
  ASSERT_EQ(nodes.size(), 4u);  // m1..m4
  const uint64_t batchBytes = exact->cachedBytes() / (uint64_t)exact->cachedBatches();
  ASSERT_GT(batchBytes, 0u);

  // Budgets: every batch cached; none cached, the float outputs of some kept (an eighth of the
  // budget holds one batch's; no floor); none cached and no outputs kept (no floor either); none
  // cached and every batch's outputs kept within the default floor.
  const uint64_t budgets[] = {uint64_t(1) << 30, batchBytes - 1, 0, 0};
  std::vector<std::vector<double>> figures;
  for (int kind = 0; kind < 4; ++kind) {
    const uint64_t budget = budgets[kind];
    auto fast = kind == 3 ? session(model, *data, SensitivityMethod::Fast, budget)
                          : session(model, *data, SensitivityMethod::Fast, budget, /*outputsFloor=*/0);
    auto rf = fast->analyze(data);
    ASSERT_TRUE(rf) << rf.status().message();
    if (kind == 0) {
      EXPECT_EQ(fast->cachedBatches(), 4);
      EXPECT_EQ(fast->floatOutputBatches(), 0);
    } else if (kind == 1) {
      EXPECT_EQ(fast->cachedBatches(), 0);
      EXPECT_GE(fast->floatOutputBatches(), 1);
      EXPECT_LT(fast->floatOutputBatches(), 4);
    } else if (kind == 2) {
      EXPECT_EQ(fast->cachedBatches(), 0);
      EXPECT_EQ(fast->floatOutputBatches(), 0);
    } else {
      EXPECT_EQ(fast->cachedBatches(), 0);
      EXPECT_EQ(fast->floatOutputBatches(), 4);
    }
    std::vector<double> f;
    // One node at a time (what the GUI asks), then two together: their cones overlap.
    for (NodeId id : nodes) {
      auto on = fast->exactSensitivity({id});
      ASSERT_TRUE(on) << on.status().message();
      EXPECT_TRUE((*on)->nodes[(size_t)id].sensitivityExact);
      f.push_back((*on)->nodes[(size_t)id].sensitivitySnrDb);
    }
    auto two = fast->exactSensitivity({nodes[2], nodes[0]});
    ASSERT_TRUE(two) << two.status().message();
    EXPECT_EQ((*two)->nodes[(size_t)nodes[0]].sensitivitySnrDb, f[0]);
    EXPECT_EQ((*two)->nodes[(size_t)nodes[2]].sensitivitySnrDb, f[2]);
    figures.push_back(f);
  }
  for (size_t k = 0; k < nodes.size(); ++k) {
    const double sweep = (*re)->nodes[(size_t)nodes[k]].sensitivitySnrDb;
    ASSERT_TRUE(std::isfinite(sweep)) << g.nodes[(size_t)nodes[k]].name;
    for (const std::vector<double>& f : figures) {
      EXPECT_NEAR(f[k], sweep, 1e-9) << g.nodes[(size_t)nodes[k]].name;
      EXPECT_EQ(f[k], figures[0][k]) << g.nodes[(size_t)nodes[k]].name;
    }
  }
}

// AnalysisOptions::keepConeInputs: the float values that the cones of the estimate's worst nodes
// read from outside themselves (the chain's previous Tanh, the shared branch's sibling MatMul),
// kept by analyze() for the batches not cached, give the bits of a recompute of the float prefix
// (the option off), equal to the exact sweep's. With a top-K of 1 the other nodes find only part
// of their cone inputs kept and recompute the rest.
TEST(ExactSensitivity, KeptConeInputsGiveTheFiguresOfARecompute) {
  for (const auto& model : {test::badNodeChainModel(), test::sharedBranchModel()}) {
    ASSERT_TRUE(model);
    const int64_t batches = 6;
    auto data = test::randomData(*model, batches);
    ASSERT_TRUE(data);
    auto exact = session(model, *data, SensitivityMethod::Exact, uint64_t(1) << 30);
    auto re = exact->analyze(data);
    ASSERT_TRUE(re) << re.status().message();
    std::vector<NodeId> nodes;
    for (size_t i = 0; i < model->graph.nodes.size(); ++i)
      if (!std::isnan((*re)->nodes[i].sensitivitySnrDb)) nodes.push_back((NodeId)i);
    ASSERT_GE(nodes.size(), 3u);
    for (int topK : {8, 1}) {
      std::vector<double> figures[2];
      for (int on = 0; on < 2; ++on) {
        AnalysisOptions ao;
        ao.threads = 2;
        ao.calibration.method = CalibMethod::Max;
        ao.sensitivityMethod = SensitivityMethod::Fast;
        ao.cacheBudgetBytes = 0;
        ao.keepConeInputs = on != 0;
        ao.fallbackExactTopK = topK;
        auto s = QuantSession::create(model, {}, ao);
        ASSERT_TRUE(s) << s.status().message();
        ASSERT_TRUE(s.value()->calibrate(*data));
        auto rf = (*s)->analyze(data);
        ASSERT_TRUE(rf) << rf.status().message();
        EXPECT_EQ((*s)->cachedBatches(), 0);
        EXPECT_EQ((*s)->floatOutputBatches(), batches);
        if (on) {
          EXPECT_EQ((*s)->coneInputNodes().size(), std::min<size_t>(nodes.size(), (size_t)topK));
          // The first batches rank the nodes and keep none; the later ones keep them.
          if (topK > 1) EXPECT_GE((*s)->coneInputBatches(), 1);
          EXPECT_LT((*s)->coneInputBatches(), batches);
        } else {
          EXPECT_TRUE((*s)->coneInputNodes().empty());
          EXPECT_EQ((*s)->coneInputBatches(), 0);
        }
        for (NodeId id : nodes) {
          auto one = (*s)->exactSensitivity({id});
          ASSERT_TRUE(one) << one.status().message();
          figures[on].push_back((*one)->nodes[(size_t)id].sensitivitySnrDb);
        }
        auto all = (*s)->exactSensitivity(nodes);
        ASSERT_TRUE(all) << all.status().message();
        for (size_t k = 0; k < nodes.size(); ++k)
          EXPECT_EQ((*all)->nodes[(size_t)nodes[k]].sensitivitySnrDb, figures[on][k]);
      }
      for (size_t k = 0; k < nodes.size(); ++k) {
        const std::string& name = model->graph.nodes[(size_t)nodes[k]].name;
        EXPECT_EQ(figures[1][k], figures[0][k]) << name << ", top " << topK;
        EXPECT_NEAR(figures[1][k], (*re)->nodes[(size_t)nodes[k]].sensitivitySnrDb, 1e-9) << name;
      }
    }
  }
}
