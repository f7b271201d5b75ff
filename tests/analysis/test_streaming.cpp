// Bounded memory (core/analysis/streaming.h): a budget too small for any float table makes the
// analysis stream (no whole table kept, cones from a shared float prefix, toggles and exact
// sensitivity recomputed), and every per-node and per-output figure equals the unbounded run's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/analysis/quant_session.h"
#include "core/analysis/streaming.h"
#include "core/onnx/loader.h"
#include "tests/support/sensitivity_model.h"
#include "tests/support/text_images.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kTinyBudget = 4096;  // below any float table: forces streaming

std::unique_ptr<QuantSession> session(std::shared_ptr<Model> model, const CalibrationData& data, SensitivityMethod method,
                                      uint64_t budget) {
  AnalysisOptions ao;
  ao.threads = 2;
  ao.calibration.method = CalibMethod::Max;
  ao.sensitivityMethod = method;
  ao.memoryBudgetBytes = budget;
  auto s = QuantSession::create(std::move(model), {}, ao);
  EXPECT_TRUE(s) << s.status().message();
  if (!s) return nullptr;
  EXPECT_TRUE(s.value()->calibrate(data));
  return std::move(s).value();
}

// Equal to float rounding: the streamed run recomputes the same float values with the same kernels.
void expectSame(const ErrorMetrics& a, const ErrorMetrics& b, const std::string& what) {
  EXPECT_EQ(a.count, b.count) << what;
  if (std::isinf(a.snrDb) || std::isinf(b.snrDb)) {
    EXPECT_EQ(a.snrDb, b.snrDb) << what;
    return;
  }
  EXPECT_NEAR(a.snrDb, b.snrDb, 1e-6 * std::max(1.0, std::fabs(a.snrDb))) << what;
  EXPECT_NEAR(a.mse, b.mse, 1e-7 * std::max(1e-30, std::fabs(a.mse))) << what;
  EXPECT_NEAR(a.cosine, b.cosine, 1e-9) << what;
  EXPECT_EQ(a.maxAbs, b.maxAbs) << what;
}

void expectSameDb(double a, double b, const std::string& what) {
  if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b)) {
    EXPECT_EQ(std::isnan(a), std::isnan(b)) << what;
    if (!std::isnan(a)) EXPECT_EQ(a, b) << what;
    return;
  }
  EXPECT_NEAR(a, b, 1e-6 * std::max(1.0, std::fabs(a))) << what;
}

// Every figure of every node and output; returns how many sensitivity figures were compared.
int expectSameResults(const Graph& g, const AnalysisResult& a, const AnalysisResult& b) {
  int sensitivities = 0;
  EXPECT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size() && i < b.nodes.size(); ++i) {
    const NodeResult &x = a.nodes[i], &y = b.nodes[i];
    const std::string name = g.nodes[i].name;
    EXPECT_EQ(x.hasGraphwise, y.hasGraphwise) << name;
    EXPECT_EQ(x.hasLayerwise, y.hasLayerwise) << name;
    EXPECT_EQ(x.sensitivityExact, y.sensitivityExact) << name;
    if (x.hasGraphwise) expectSame(x.graphwise, y.graphwise, name + " graph-wise");
    if (x.hasLayerwise) expectSame(x.layerwise, y.layerwise, name + " layer-wise");
    expectSameDb(x.weightSnrDb, y.weightSnrDb, name + " weight-only");
    expectSameDb(x.activationSnrDb, y.activationSnrDb, name + " activation-only");
    expectSameDb(x.sensitivitySnrDb, y.sensitivitySnrDb, name + " sensitivity");
    expectSameDb(x.sensitivityEstimateDb, y.sensitivityEstimateDb, name + " estimate");
    sensitivities += !std::isnan(x.sensitivitySnrDb);
  }
  EXPECT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t o = 0; o < a.outputs.size() && o < b.outputs.size(); ++o)
    expectSame(a.outputs[o].metrics, b.outputs[o].metrics, "output " + a.outputs[o].name);
  return sensitivities;
}

std::vector<NodeId> quantizedNodes(const QuantSession& s) {
  std::vector<NodeId> out;
  for (size_t i = 0; i < s.plan().nodes.size(); ++i)
    if (s.plan().nodes[i].quantized) out.push_back((NodeId)i);
  return out;
}

// The whole protocol on one model: exact analysis, two toggles, then the fast method's exact
// figures on demand, each with and without a budget that forces streaming.
void compareStreamed(std::shared_ptr<Model> model, std::shared_ptr<const CalibrationData> data) {
  const Graph& g = model->graph;
  auto full = session(model, *data, SensitivityMethod::Exact, UINT64_MAX);
  auto tiny = session(model, *data, SensitivityMethod::Exact, kTinyBudget);
  ASSERT_TRUE(full && tiny);
  auto rf = full->analyze(data);
  auto rt = tiny->analyze(data);
  ASSERT_TRUE(rf) << rf.status().message();
  ASSERT_TRUE(rt) << rt.status().message();
  EXPECT_FALSE(full->streaming());
  EXPECT_FALSE((*rf)->streamed);
  EXPECT_TRUE(tiny->streaming());
  EXPECT_TRUE((*rt)->streamed);
  EXPECT_EQ((*rt)->memoryBudgetBytes, kTinyBudget);
  EXPECT_GT(full->cachedBatches(), 0);
  EXPECT_EQ(tiny->cachedBatches(), 0);  // nothing kept for toggles either
  EXPECT_GT(expectSameResults(g, **rf, **rt), 1);

  // Toggles beyond the cache: the streamed session recomputes both passes in one walk.
  const std::vector<NodeId> q = quantizedNodes(*full);
  ASSERT_GE(q.size(), 3u);
  const std::vector<std::pair<NodeId, bool>> toggles = {{q[0], false}, {q[q.size() / 2], false}};
  auto tf = full->setQuantized(toggles);
  auto tt = tiny->setQuantized(toggles);
  ASSERT_TRUE(tf) << tf.status().message();
  ASSERT_TRUE(tt) << tt.status().message();
  expectSameResults(g, **tf, **tt);

  // The fast method, then exact figures on demand for three nodes.
  auto ff = session(model, *data, SensitivityMethod::Fast, UINT64_MAX);
  auto ft = session(model, *data, SensitivityMethod::Fast, kTinyBudget);
  ASSERT_TRUE(ff && ft);
  ASSERT_TRUE(ff->analyze(data));
  ASSERT_TRUE(ft->analyze(data));
  EXPECT_TRUE(ft->streaming());
  const std::vector<NodeId> some = {q.back(), q[0], q[q.size() / 2]};  // not in topological order
  auto ef = ff->exactSensitivity(some);
  auto et = ft->exactSensitivity(some);
  ASSERT_TRUE(ef) << ef.status().message();
  ASSERT_TRUE(et) << et.status().message();
  for (NodeId id : some) {
    EXPECT_TRUE((*et)->nodes[(size_t)id].sensitivityExact);
    // And the exact sweep's figure (the unbounded exact session, before its toggles).
    expectSameDb((*et)->nodes[(size_t)id].sensitivitySnrDb, (*rf)->nodes[(size_t)id].sensitivitySnrDb,
                 g.nodes[(size_t)id].name + " on demand");
  }
  expectSameResults(g, **ef, **et);
}

// x -> m1 -> Tanh -> "mid" (a graph output read further on) -> m2 -> Relu -> m3 -> y, and a side
// branch x -> m4 -> "side" (an output outside every other cone), so that the streamed cones meet
// outputs produced before them and outputs they never reach.
std::shared_ptr<Model> twoOutputModel() {
  test::OnnxBuilder b(13);
  const int64_t n = 24;
  b.input("x", {1, 8, n}).output("y", {1, 8, n}).output("mid", {1, 8, n}).output("side", {1, 8, n});
  std::mt19937 rng(7);
  for (int k = 1; k <= 4; ++k) b.initializer("w" + std::to_string(k), {n, n}, test::randomValues((size_t)(n * n), rng, -0.3f, 0.3f));
  b.node("MatMul", {"x", "w1"}, {"h1"}, "m1");
  b.node("Tanh", {"h1"}, {"mid"}, "t1");
  b.node("MatMul", {"mid", "w2"}, {"h2"}, "m2");
  b.node("Relu", {"h2"}, {"r2"}, "relu2");
  b.node("MatMul", {"r2", "w3"}, {"h3"}, "m3");
  b.node("Add", {"h3", "mid"}, {"y"}, "add");
  b.node("MatMul", {"x", "w4"}, {"side"}, "m4");
  return test::builtModel(b, "two_outputs.onnx");
}

}  // namespace

TEST(Streaming, PlanMemory) {
  const uint64_t G = uint64_t(1) << 30, M = uint64_t(1) << 20;
  // Unbounded: the cache budget as given, batches side by side as far as the cones' tables fit it.
  MemoryPlan p = planMemory(UINT64_MAX, G, 300 * M, 8, 16, true);
  EXPECT_FALSE(p.streaming);
  EXPECT_EQ(p.cacheBudget, G);
  EXPECT_EQ(p.batchThreads, 3);
  // Fast sensitivity holds no table in analyze(): threads stay; streaming once one table exceeds the budget.
  p = planMemory(200 * M, G, 300 * M, 8, 16, false);
  EXPECT_TRUE(p.streaming);
  EXPECT_EQ(p.cacheBudget, 100 * M);
  EXPECT_EQ(p.batchThreads, 16);
  p = planMemory(400 * M, G, 300 * M, 8, 16, false);
  EXPECT_FALSE(p.streaming);
  // The cones: fewer batches side by side first (1 GiB: a 512 MiB cache budget, one table at a
  // time), streaming with every thread once a single table exceeds the budget.
  p = planMemory(G, G, 300 * M, 8, 16, true);
  EXPECT_FALSE(p.streaming);
  EXPECT_EQ(p.batchThreads, 1);
  p = planMemory(4 * G, G, 300 * M, 8, 16, true);
  EXPECT_FALSE(p.streaming);
  EXPECT_EQ(p.batchThreads, 3);
  p = planMemory(800 * M, G, 300 * M, 8, 16, true);
  EXPECT_EQ(p.cacheBudget, 400 * M);
  EXPECT_FALSE(p.streaming);
  EXPECT_EQ(p.batchThreads, 1);
  p = planMemory(200 * M, G, 300 * M, 8, 16, true);
  EXPECT_TRUE(p.streaming);
  EXPECT_EQ(p.batchThreads, 16);
  // The command line keeps nothing for toggles (cache budget 0): its cones still run side by side.
  p = planMemory(8 * G, 0, 300 * M, 8, 16, true);
  EXPECT_EQ(p.cacheBudget, 0u);
  EXPECT_EQ(p.batchThreads, 3);
  EXPECT_FALSE(p.streaming);
  // Unknown table size: nothing streams.
  EXPECT_FALSE(planMemory(1, G, 0, 8, 16, true).streaming);
}

TEST(Streaming, MeasuredTableIsTheFloatActivations) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto data = test::randomData(*model, 1);
  AnalysisOptions ao;
  auto s = QuantSession::create(model, {}, ao);
  ASSERT_TRUE(s);
  auto feeds = data->batch(0);
  ASSERT_TRUE(feeds);
  CancelToken cancel;
  const std::vector<OutputKind> kinds(model->graph.outputs.size(), OutputKind::Auto);
  const NodePaths paths = plainPaths(model->graph.nodes.size());
  const PassContext c{*model, (*s)->executor(), (*s)->state(), paths, cancel, kinds};
  auto bytes = measureFloatTableBytes(c, *feeds);
  ASSERT_TRUE(bytes) << bytes.status().message();
  // The input and 4 MatMul + 3 Tanh outputs of [1, 8, 32] floats.
  EXPECT_EQ(*bytes, 8u * 8 * 32 * 4);
}

TEST(Streaming, BuiltModelWithOutputsBeforeAndBesideTheCones) {
  auto model = twoOutputModel();
  ASSERT_TRUE(model);
  compareStreamed(model, test::randomData(*model, 3));
}

TEST(Streaming, ClsFiguresEqualTheUnboundedRun) {
  const std::string path = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!fs::exists(path)) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  auto m = loadModel(path);
  ASSERT_TRUE(m) << m.status().message();
  const std::string dir = test::makeTempDir("streaming");
  test::writeTextImages(dir, 2, 192, 48, 100);
  CalibrationDataOptions co;
  co.path = dir;
  co.image.width = 192;
  co.image.height = 48;
  co.image.mean = co.image.std = {0.5f, 0.5f, 0.5f};
  auto d = CalibrationData::open(**m, co);
  ASSERT_TRUE(d) << d.status().message();
  compareStreamed(*m, std::shared_ptr<const CalibrationData>(std::move(d).value()));
  fs::remove_all(dir);
}

// Issue 16's bound on the workbench's toggle cache: what is left of factor x (weights + every
// batch's float activations) after the resident bytes and one batch's tables, within the cache
// budget, never below the floor.
TEST(Streaming, BoundedCacheBudget) {
  const uint64_t M = uint64_t(1) << 20, G = uint64_t(1) << 30;
  // gpt32-like: 118 MB of weights, 427 MB of float activations: a bound of 817.5 MB.
  EXPECT_EQ(boundedCacheBudget(G, 1.5, 118 * M, 427 * M, 300 * M, 107 * M, 64 * M), uint64_t(410.5 * M));
  // The cache budget caps it; no factor is no bound.
  EXPECT_EQ(boundedCacheBudget(100 * M, 1.5, 118 * M, 427 * M, 300 * M, 107 * M, 64 * M), 100 * M);
  EXPECT_EQ(boundedCacheBudget(G, 0, 118 * M, 427 * M, 8 * G, 107 * M, 64 * M), G);
  // Nothing left of the bound: the floor, itself within the cache budget.
  EXPECT_EQ(boundedCacheBudget(G, 1.5, 1 * M, 60 * M, 200 * M, 4 * M, 64 * M), 64 * M);
  EXPECT_EQ(boundedCacheBudget(16 * M, 1.5, 1 * M, 60 * M, 200 * M, 4 * M, 64 * M), 16 * M);
  EXPECT_EQ(boundedCacheBudget(G, 1.5, 1 * M, 60 * M, 200 * M, 4 * M, 0), 0u);
  // A command-line run keeps nothing (cache budget 0), bound or not.
  EXPECT_EQ(boundedCacheBudget(0, 1.5, 118 * M, 427 * M, 0, 0, 64 * M), 0u);
}

// A cache smaller than the data (1 of 4 batches kept): toggles recompute the other batches, either
// with a float table (a small cacheBudgetBytes) or in one float-and-quantized walk (the bound
// active, as in the workbench), and every figure equals that of the session that keeps all four.
TEST(Streaming, TogglesBeyondASmallCacheEqualTheFullCache) {
  auto model = twoOutputModel();
  ASSERT_TRUE(model);
  const Graph& g = model->graph;
  auto data = test::randomData(*model, 4);
  ASSERT_EQ(data->batchCount(), 4);
  auto make = [&](uint64_t cacheBudget, double bound, uint64_t floor) {
    AnalysisOptions ao;
    ao.threads = 2;
    ao.calibration.method = CalibMethod::Max;
    ao.sensitivityMethod = SensitivityMethod::Fast;
    ao.cacheBudgetBytes = cacheBudget;
    ao.cacheRssBound = bound;
    ao.cacheFloorBytes = floor;
    auto s = QuantSession::create(model, {}, ao);
    EXPECT_TRUE(s) << s.status().message();
    EXPECT_TRUE(s.value()->calibrate(*data));
    return std::move(s).value();
  };
  auto full = make(uint64_t(1) << 30, 0, 0);
  const uint64_t batch = full->batchTableBytes();
  ASSERT_GT(batch, 0u);
  // One batch and a half: the first batch only. The bound: 1e-12 x the model leaves nothing, so
  // the floor (the same batch and a half) is the cache.
  auto small = make(batch + batch / 2, 0, 0);
  auto bounded = make(uint64_t(1) << 30, 1e-12, batch + batch / 2);
  for (QuantSession* s : {full.get(), small.get(), bounded.get()}) {
    auto r = s->analyze(data);
    ASSERT_TRUE(r) << r.status().message();
    EXPECT_FALSE(s->streaming());
    EXPECT_EQ(s->analysedBatches(), 4);
  }
  EXPECT_EQ(full->cachedBatches(), 4);
  EXPECT_EQ(small->cachedBatches(), 1);
  EXPECT_EQ(bounded->cachedBatches(), 1);
  EXPECT_EQ(bounded->cacheLimitBytes(), batch + batch / 2);
  expectSameResults(g, *full->result(), *small->result());
  expectSameResults(g, *full->result(), *bounded->result());

  const std::vector<NodeId> q = quantizedNodes(*full);
  ASSERT_GE(q.size(), 3u);
  for (const auto& toggles : std::vector<std::vector<std::pair<NodeId, bool>>>{
           {{q[0], false}}, {{q[q.size() / 2], false}, {q.back(), false}}, {{q[0], true}}}) {
    auto tf = full->setQuantized(toggles);
    auto ts = small->setQuantized(toggles);
    auto tb = bounded->setQuantized(toggles);
    ASSERT_TRUE(tf && ts && tb);
    expectSameResults(g, **tf, **ts);
    expectSameResults(g, **tf, **tb);
  }
}
