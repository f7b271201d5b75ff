// The analysis session end to end on PaddleOCR models with rendered text images: complete
// results, incremental toggles equal to a full recompute, sensitivity equal to a full run with
// only that node quantized, exclusions visible in the outputs, automatic fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <filesystem>

#include "core/analysis/compare_outputs.h"
#include "core/analysis/quant_session.h"
#include "core/export/report.h"
#include "core/kernels/qconv.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  std::shared_ptr<Model> model;
  std::shared_ptr<const CalibrationData> data;
  std::string dir;
};

Fixture open(const std::string& file, int w, int h, int count, std::array<float, 3> mean, std::array<float, 3> std) {
  Fixture f;
  std::string path = std::string(QS_MODELS_DIR) + "/" + file;
  if (!fs::exists(path)) return f;
  auto m = loadModel(path);
  EXPECT_TRUE(m) << m.status().message();
  f.model = *m;
  f.dir = qs::test::makeTempDir("analysis");
  qs::test::writeTextImages(f.dir, count, w, h, 100);
  CalibrationDataOptions co;
  co.path = f.dir;
  co.image.width = w;
  co.image.height = h;
  co.image.mean = mean;
  co.image.std = std;
  auto d = CalibrationData::open(*f.model, co);
  EXPECT_TRUE(d) << d.status().message();
  f.data = std::shared_ptr<const CalibrationData>(std::move(d).value());
  return f;
}

Fixture openCls(int count = 6) { return open("ch_ppocr_mobile_v2.0_cls_infer.onnx", 192, 48, count, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}); }
// det at 160x160, 2 samples, ImageNet normalisation.
Fixture openDet() { return open("ch_PP-OCRv4_det_infer.onnx", 160, 160, 2, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}); }

void expectFiniteOrInf(double v, const std::string& what) {
  EXPECT_FALSE(std::isnan(v)) << what;
}

void expectSameMetrics(const ErrorMetrics& a, const ErrorMetrics& b, const std::string& what) {
  if (std::isinf(a.snrDb) || std::isinf(b.snrDb)) {
    EXPECT_EQ(a.snrDb, b.snrDb) << what;
  } else {
    EXPECT_NEAR(a.snrDb, b.snrDb, 1e-9 * std::max(1.0, std::fabs(a.snrDb))) << what;
  }
  EXPECT_NEAR(a.mse, b.mse, 1e-12 + 1e-9 * std::fabs(a.mse)) << what;
  EXPECT_EQ(a.maxAbs, b.maxAbs) << what;
}

std::unique_ptr<QuantSession> makeSession(const Fixture& f, CalibMethod method, const QuantConfig& cfg = {}) {
  AnalysisOptions ao;
  ao.calibration.method = method;
  ao.threads = 2;
  auto s = QuantSession::create(f.model, cfg, ao);
  EXPECT_TRUE(s) << s.status().message();
  EXPECT_TRUE(s.value()->calibrate(*f.data));
  return std::move(s).value();
}

}  // namespace

/// Every figure of a report is there and is a number or an explicit infinity (NaN only where a
/// figure does not apply: no weight, no activation point), and the JSON holds no NaN.
void expectCompleteReport(const Model& model, const AnalysisResult& res, bool sensitivity, const std::string& tag) {
  const Graph& g = model.graph;
  ASSERT_EQ(res.outputs.size(), g.outputs.size()) << tag;
  for (const OutputResult& o : res.outputs) {
    EXPECT_FALSE(std::isnan(o.metrics.snrDb)) << tag << " output " << o.name;
    EXPECT_FALSE(std::isnan(o.metrics.cosine)) << tag << " output " << o.name;
    EXPECT_TRUE(std::isfinite(o.metrics.mse)) << tag << " output " << o.name;
  }
  ASSERT_EQ(res.nodes.size(), g.nodes.size()) << tag;
  int quantizable = 0;
  for (NodeId id = 0; id < (NodeId)g.nodes.size(); ++id) {
    const NodeResult& nr = res.nodes[(size_t)id];
    const NodeQuantState& st = res.plan.nodes[(size_t)id];
    const std::string what = tag + " " + g.nodes[(size_t)id].name;
    if (!st.quantized) {
      EXPECT_FALSE(st.reason.empty()) << what;
    }
    if (st.quantizable) {
      ++quantizable;
      ASSERT_TRUE(nr.hasLayerwise) << what;
      expectFiniteOrInf(nr.layerwise.snrDb, what);
      EXPECT_TRUE(std::isfinite(nr.layerwise.mse)) << what;
      expectFiniteOrInf(nr.activationSnrDb, what);
      if (sensitivity) expectFiniteOrInf(nr.sensitivitySnrDb, what);
    }
    if (nr.hasGraphwise) {
      expectFiniteOrInf(nr.graphwise.snrDb, what);
      EXPECT_TRUE(std::isfinite(nr.graphwise.mse)) << what;
      EXPECT_TRUE(std::isfinite(nr.graphwise.maxAbs)) << what;
    }
  }
  EXPECT_GT(quantizable, 40) << tag;
  for (const auto& [id, a] : res.activations) {
    EXPECT_GT(a.scale, 0.f) << tag;
    EXPECT_TRUE(std::isfinite(a.amax)) << tag;
  }
  const std::string json = reportJson(model, res, {});
  EXPECT_EQ(json.find("nan"), std::string::npos) << tag;
  EXPECT_EQ(json.find("NaN"), std::string::npos) << tag;
  if (sensitivity) {
    EXPECT_NE(json.find("\"sensitivity_snr_db\""), std::string::npos) << tag;
  }
}

TEST(Analysis, ClsReportIsCompleteAndFinite) {
  auto f = openCls();
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  auto s = makeSession(f, CalibMethod::Max);
  auto r = s->analyze(f.data);
  ASSERT_TRUE(r) << r.status().message();
  const AnalysisResult& res = **r;
  ASSERT_EQ(res.outputs.size(), 1u);
  EXPECT_GT(res.outputs[0].metrics.snrDb, 10.0);
  EXPECT_LT(res.outputs[0].metrics.snrDb, 80.0);
  expectCompleteReport(*f.model, res, true, "cls");
  fs::remove_all(f.dir);
}

TEST(Analysis, IncrementalToggleEqualsFullRecompute) {
  auto f = openCls(4);
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  auto s = makeSession(f, CalibMethod::Max);
  ASSERT_TRUE(s->analyze(f.data));
  // Turn off three quantized nodes spread over the graph, then one back on.
  std::vector<NodeId> q;
  for (NodeId id : f.model->graph.topoOrder)
    if (s->plan().nodes[(size_t)id].quantized) q.push_back(id);
  ASSERT_GT(q.size(), 10u);
  std::vector<std::pair<NodeId, bool>> toggles = {{q[2], false}, {q[q.size() / 2], false}, {q[q.size() - 3], false}};
  auto inc = s->setQuantized(toggles);
  ASSERT_TRUE(inc) << inc.status().message();
  inc = s->setQuantized({{q[q.size() / 2], true}});
  ASSERT_TRUE(inc);

  QuantConfig cfg;
  cfg.nodesToExclude = {f.model->graph.nodes[(size_t)q[2]].name + "$", f.model->graph.nodes[(size_t)q[q.size() - 3]].name + "$"};
  auto full = makeSession(f, CalibMethod::Max, cfg);
  auto ref = full->analyze(f.data);
  ASSERT_TRUE(ref);
  const Graph& g = f.model->graph;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    EXPECT_EQ((*inc)->plan.nodes[i].quantized, (*ref)->plan.nodes[i].quantized) << g.nodes[i].name;
    expectSameMetrics((*inc)->nodes[i].graphwise, (*ref)->nodes[i].graphwise, g.nodes[i].name);
  }
  expectSameMetrics((*inc)->outputs[0].metrics, (*ref)->outputs[0].metrics, "output");
  fs::remove_all(f.dir);
}

TEST(Analysis, IncrementalWithoutCacheEqualsFullRecompute) {
  auto f = openCls(3);
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.cacheBudgetBytes = 0;  // forces the re-run path
  ao.sensitivity = false;
  auto s = QuantSession::create(f.model, {}, ao);
  ASSERT_TRUE(s);
  ASSERT_TRUE((*s)->calibrate(*f.data));
  auto before = (*s)->analyze(f.data);
  ASSERT_TRUE(before);
  NodeId first = -1;
  for (NodeId id : f.model->graph.topoOrder)
    if ((*s)->plan().nodes[(size_t)id].quantized) {
      first = id;
      break;
    }
  auto inc = (*s)->setQuantized({{first, false}});
  ASSERT_TRUE(inc);
  QuantConfig cfg;
  cfg.nodesToExclude = {f.model->graph.nodes[(size_t)first].name + "$"};
  auto full = QuantSession::create(f.model, cfg, ao);
  ASSERT_TRUE(full);
  ASSERT_TRUE((*full)->calibrate(*f.data));
  auto ref = (*full)->analyze(f.data);
  ASSERT_TRUE(ref);
  expectSameMetrics((*inc)->outputs[0].metrics, (*ref)->outputs[0].metrics, "output");
  EXPECT_NE((*inc)->outputs[0].metrics.snrDb, (*before)->outputs[0].metrics.snrDb);
  fs::remove_all(f.dir);
}

TEST(Analysis, PartialCacheAndInterruptedToggleEqualFullRecompute) {
  auto f = openCls(4);
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  const Graph& g = f.model->graph;
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.sensitivity = false;
  ao.layerwise = false;
  ao.threads = 2;
  uint64_t perBatch = 0;
  {
    auto probe = QuantSession::create(f.model, {}, ao);
    ASSERT_TRUE(probe);
    ASSERT_TRUE((*probe)->calibrate(*f.data));
    ASSERT_TRUE((*probe)->analyze(f.data));
    ASSERT_EQ((*probe)->cachedBatches(), 4);
    perBatch = (*probe)->cachedBytes() / 4;
  }
  ao.cacheBudgetBytes = perBatch * 5 / 2;  // two of the four batches cached, two re-run in full
  auto s = QuantSession::create(f.model, {}, ao);
  ASSERT_TRUE(s);
  ASSERT_TRUE((*s)->calibrate(*f.data));
  ASSERT_TRUE((*s)->analyze(f.data));
  EXPECT_EQ((*s)->cachedBatches(), 2);
  std::vector<NodeId> q;
  for (NodeId id : g.topoOrder)
    if ((*s)->plan().nodes[(size_t)id].quantized) q.push_back(id);
  // Interrupted after the first batch: the cached tables are left at mixed states.
  int calls = 0;
  auto stopped = (*s)->setQuantized({{q[1], false}, {q[q.size() / 2], false}},
                                    [&](double, const std::string&) { return ++calls < 3; });
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.status().code(), StatusCode::Cancelled);
  EXPECT_TRUE((*s)->plan().nodes[(size_t)q[1]].quantized);  // the previous states are kept
  auto inc = (*s)->setQuantized({{q[q.size() / 2], false}, {q[q.size() - 3], false}});
  ASSERT_TRUE(inc) << inc.status().message();

  QuantConfig cfg;
  cfg.nodesToExclude = {g.nodes[(size_t)q[q.size() / 2]].name + "$", g.nodes[(size_t)q[q.size() - 3]].name + "$"};
  ao.cacheBudgetBytes = 0;
  auto full = QuantSession::create(f.model, cfg, ao);
  ASSERT_TRUE(full);
  ASSERT_TRUE((*full)->calibrate(*f.data));
  auto ref = (*full)->analyze(f.data);
  ASSERT_TRUE(ref);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    EXPECT_EQ((*inc)->plan.nodes[i].quantized, (*ref)->plan.nodes[i].quantized) << g.nodes[i].name;
    expectSameMetrics((*inc)->nodes[i].graphwise, (*ref)->nodes[i].graphwise, g.nodes[i].name);
  }
  expectSameMetrics((*inc)->outputs[0].metrics, (*ref)->outputs[0].metrics, "output");
  fs::remove_all(f.dir);
}

TEST(Analysis, AccumulatorLanesMatchScalarSums) {
  // The vectorised sums against long double references, every length around the lane width,
  // and NaN differences skipped by the maximum as before.
  std::vector<float> y(1000), q(1000);
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return (float)(state >> 8) / (float)(1 << 24) - 0.5f;
  };
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = 4 * next();
    q[i] = y[i] + 0.01f * next();
  }
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 1000}) {
    ErrorAccumulator acc;
    acc.add(y.data(), q.data(), n);
    long double s = 0, e = 0;
    double m = 0;
    for (int64_t i = 0; i < n; ++i) {
      s += (long double)y[(size_t)i] * y[(size_t)i];
      e += ((long double)y[(size_t)i] - q[(size_t)i]) * ((long double)y[(size_t)i] - q[(size_t)i]);
      m = std::max(m, std::fabs((double)y[(size_t)i] - (double)q[(size_t)i]));
    }
    // Products in float32 over blocks of kLaneBlock per lane (metrics.h): within 1e-6.
    EXPECT_NEAR(acc.signalPower(), (double)s, 1e-6 * (double)s) << n;
    EXPECT_NEAR(acc.noisePower(), (double)e, 1e-6 * (double)e) << n;
    EXPECT_EQ(acc.metrics().maxAbs, (double)(float)m) << n;  // |y - q| rounded to float
    EXPECT_EQ(acc.metrics().count, n);
    // addError(y, e) is add(y, y + e) with y + e rounded to float.
    std::vector<float> err((size_t)n), cand((size_t)n);
    for (int64_t i = 0; i < n; ++i) {
      err[(size_t)i] = q[(size_t)i] - y[(size_t)i];
      cand[(size_t)i] = y[(size_t)i] + err[(size_t)i];
    }
    ErrorAccumulator viaError, viaCand;
    viaError.addError(y.data(), err.data(), n);
    viaCand.add(y.data(), cand.data(), n);
    EXPECT_EQ(viaError.noisePower(), viaCand.noisePower()) << n;
    EXPECT_EQ(viaError.metrics().cosine, viaCand.metrics().cosine) << n;
    EXPECT_EQ(viaError.metrics().maxAbs, viaCand.metrics().maxAbs) << n;
  }
  std::vector<float> a(19, 1.f), b(19, 1.f);
  b[3] = NAN;
  b[12] = 3.f;
  ErrorAccumulator nan;
  nan.add(a.data(), b.data(), 19);
  EXPECT_EQ(nan.metrics().maxAbs, 2.0);
}

TEST(Analysis, SensitivityEqualsFullRunWithOnlyThatNodeQuantized) {
  auto f = openCls(3);
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  auto s = makeSession(f, CalibMethod::Max);
  auto r = s->analyze(f.data);
  ASSERT_TRUE(r);
  const Graph& g = f.model->graph;
  NodeId probe = -1;
  int seen = 0;
  for (NodeId id : g.topoOrder)
    if (s->plan().nodes[(size_t)id].quantizable && ++seen == 7) probe = id;
  ASSERT_GE(probe, 0);
  // Only `probe` quantized, through the public configuration path.
  QuantConfig cfg;
  cfg.nodesToQuantize = {g.nodes[(size_t)probe].name + "$"};
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.layerwise = ao.sensitivity = false;
  auto only = QuantSession::create(f.model, cfg, ao);
  ASSERT_TRUE(only);
  ASSERT_TRUE((*only)->calibrate(*f.data));
  auto ref = (*only)->analyze(f.data);
  ASSERT_TRUE(ref);
  EXPECT_NEAR((*r)->nodes[(size_t)probe].sensitivitySnrDb, (*ref)->outputs[0].metrics.snrDb, 1e-9);
  fs::remove_all(f.dir);
}

TEST(Analysis, ExcludingTheWorstNodesRaisesOutputSnrAndFallbackReachesTarget) {
  auto f = openCls(4);
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  auto s = makeSession(f, CalibMethod::Max);
  auto r = s->analyze(f.data);
  ASSERT_TRUE(r);
  double before = (*r)->outputs[0].metrics.snrDb;
  double target = before + 6.0;
  auto steps = s->autoFallback(target);
  ASSERT_TRUE(steps) << steps.status().message();
  ASSERT_FALSE(steps->empty());
  double after = s->result()->outputs[0].metrics.snrDb;
  EXPECT_GE(after, target);
  EXPECT_FALSE(s->plan().nodes[(size_t)(*steps)[0].excluded].quantized);
  // The first node excluded is the most sensitive one.
  double worst = INFINITY;
  for (size_t i = 0; i < (*r)->nodes.size(); ++i)
    if ((*r)->plan.nodes[i].quantized && !std::isnan((*r)->nodes[i].sensitivitySnrDb))
      worst = std::min(worst, (*r)->nodes[i].sensitivitySnrDb);
  EXPECT_EQ((*r)->nodes[(size_t)(*steps)[0].excluded].sensitivitySnrDb, worst);
  fs::remove_all(f.dir);
}

// PP-OCRv4 det on rendered text images, every calibration method: complete reports, and the most
// sensitive node, excluded, visibly raises the output's SNR.
TEST(Analysis, DetWithRenderedImagesEveryMethod) {
  auto f = openDet();
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  for (CalibMethod m : {CalibMethod::Max, CalibMethod::Entropy, CalibMethod::Percentile, CalibMethod::Mse}) {
    AnalysisOptions ao;
    ao.calibration.method = m;
    ao.sensitivity = (m == CalibMethod::Max);  // the sweep once is enough here
    ao.threads = 2;
    auto s = QuantSession::create(f.model, {}, ao);
    ASSERT_TRUE(s) << s.status().message();
    ASSERT_TRUE((*s)->calibrate(*f.data));
    auto r = (*s)->analyze(f.data);
    ASSERT_TRUE(r) << r.status().message();
    const std::string tag = std::string("det ") + calibMethodName(m);
    expectCompleteReport(*f.model, **r, ao.sensitivity, tag);
    EXPECT_GT((*r)->outputs[0].metrics.cosine, 0.5) << tag;
    if (m != CalibMethod::Max) continue;
    // Exclude the node whose quantization alone costs the output most.
    NodeId worst = -1;
    for (NodeId id = 0; id < (NodeId)(*r)->nodes.size(); ++id) {
      const double v = (*r)->nodes[(size_t)id].sensitivitySnrDb;
      if ((*r)->plan.nodes[(size_t)id].quantized && !std::isnan(v) &&
          (worst < 0 || v < (*r)->nodes[(size_t)worst].sensitivitySnrDb))
        worst = id;
    }
    ASSERT_GE(worst, 0);
    const double before = (*r)->outputs[0].metrics.snrDb;
    auto after = (*s)->setQuantized({{worst, false}});
    ASSERT_TRUE(after) << after.status().message();
    EXPECT_FALSE((*after)->plan.nodes[(size_t)worst].quantized);
    EXPECT_FALSE((*after)->plan.nodes[(size_t)worst].reason.empty());
    std::printf("det: excluding %s raises the output SNR from %.2f to %.2f dB\n",
                f.model->graph.nodes[(size_t)worst].name.c_str(), before, (*after)->outputs[0].metrics.snrDb);
    EXPECT_GT((*after)->outputs[0].metrics.snrDb, before + 0.1)
        << "excluding " << f.model->graph.nodes[(size_t)worst].name << " (sensitivity "
        << (*r)->nodes[(size_t)worst].sensitivitySnrDb << " dB)";
  }
  fs::remove_all(f.dir);
}

// Two sessions on f's data, percentile-calibrated on 2 threads with `ao`'s other settings: r[0]
// with `flag` off, r[1] with it on. `cachedBatches` (if given) gets how many batches each keeps
// for toggles.
static void analyzeOffOn(const Fixture& f, AnalysisOptions ao, bool AnalysisOptions::*flag,
                         std::shared_ptr<const AnalysisResult> (&r)[2], const QuantConfig& cfg = {},
                         int64_t* cachedBatches = nullptr) {
  ao.calibration.method = CalibMethod::Percentile;
  ao.threads = 2;
  for (int on = 0; on < 2; ++on) {
    ao.*flag = on == 1;
    auto s = QuantSession::create(f.model, cfg, ao);
    ASSERT_TRUE(s);
    ASSERT_TRUE((*s)->calibrate(*f.data));
    auto res = (*s)->analyze(f.data);
    ASSERT_TRUE(res) << res.status().message();
    r[on] = *res;
    if (cachedBatches) cachedBatches[on] = (*s)->cachedBatches();
  }
}

// The integer Convs (u8 x s8 -> int32, core/kernels/qconv.h) against FP32 convolutions of the
// fake-quantized tensors: the same figures to well within what a user reads, and not
// bit-identical (so the integer path did run).
static void compareIntegerConv(const Fixture& f, const std::string& tag, const QuantConfig& cfg = {}) {
  // Percentile (analyzeOffOn): some activations clip. (With Max, det's squeeze-excitation tensors
  // after GlobalAveragePool hold a few dozen values per batch here; a last-bit difference in a
  // Conv that moves one value across a rounding boundary shifts their graph-wise SNR by up to a
  // few dB. The integer sums are exact; the FP32 ones round, so on such ties neither is "the" value.)
  AnalysisOptions ao;
  ao.sensitivity = true;
  std::shared_ptr<const AnalysisResult> r[2];
  ASSERT_NO_FATAL_FAILURE(analyzeOffOn(f, ao, &AnalysisOptions::integerConv, r, cfg));
  const Graph& g = f.model->graph;
  int differ = 0, compared = 0;
  std::map<std::string, double> worst;  // largest difference per figure, printed for docs/
  auto near = [&](double a, double b, double tol, const std::string& what, const std::string& figure) {
    if (std::isnan(a) || std::isinf(a) || std::isnan(b) || std::isinf(b)) {
      EXPECT_EQ(std::isnan(a), std::isnan(b)) << what;
      if (!std::isnan(a)) {
        EXPECT_EQ(a, b) << what;
      }
      return;
    }
    ++compared;
    differ += a != b;
    worst[figure] = std::max(worst[figure], std::fabs(a - b));
    EXPECT_NEAR(a, b, tol) << what;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeResult &a = r[0]->nodes[i], &b = r[1]->nodes[i];
    const std::string& name = g.nodes[i].name;
    near(a.graphwise.snrDb, b.graphwise.snrDb, 0.01, name + " graph-wise", "graph-wise");
    near(a.layerwise.snrDb, b.layerwise.snrDb, 0.01, name + " layer-wise", "layer-wise");
    near(a.layerwise.cosine, b.layerwise.cosine, 1e-5, name + " layer-wise cosine", "layer-wise cosine");
    // The split's errors come out of the integer GEMMs with W's rounding residual held to 8 bits
    // (and X to 16 bits for weights only): about 48 dB of the error itself, so the SNR is exact
    // to ~0.02 dB where it matters and looser only where it says "negligible" anyway.
    auto splitTol = [](double db) { return db < 40 ? 0.02 : 0.15; };
    near(a.activationSnrDb, b.activationSnrDb, splitTol(a.activationSnrDb), name + " activation only", "activation only");
    near(a.weightSnrDb, b.weightSnrDb, splitTol(a.weightSnrDb), name + " weight only", "weight only");
    near(a.sensitivitySnrDb, b.sensitivitySnrDb, 0.01, name + " sensitivity", "sensitivity");
  }
  for (size_t o = 0; o < r[0]->outputs.size(); ++o)
    near(r[0]->outputs[o].metrics.snrDb, r[1]->outputs[o].metrics.snrDb, 0.01, r[0]->outputs[o].name, "output");
  for (const auto& [figure, d] : worst) std::printf("%s: integer vs FP32 conv, largest difference, %s: %.2e dB\n", tag.c_str(), figure.c_str(), d);
  EXPECT_GT(compared, 100);
  EXPECT_GT(differ, 0);
  fs::remove_all(f.dir);
}

TEST(Analysis, IntegerConvMatchesFakeQuantizedFloat) {
  if (std::string(qconvKernelName()) == "generic") GTEST_SKIP() << "no AVX2 or AVX-512 VNNI: the analysis uses FP32";
  auto cls = openCls(4);
  if (!cls.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  compareIntegerConv(cls, "cls");
  compareIntegerConv(openDet(), "det");
}

TEST(Analysis, DepthwisePlanePassMatchesThreeNodeRuns) {
  // det's depthwise Convs: their layer-wise figures from the one plane-by-plane pass against
  // three runs of the node through the executor, and the graph-wise ones with the quantized pass
  // taking them over plane by plane against the executor's fake-quantize-then-Conv. The outputs are the same bits; only the order
  // of the sums differs, so the figures agree to summation rounding.
  auto f = openDet();
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  AnalysisOptions ao;
  ao.sensitivity = false;
  std::shared_ptr<const AnalysisResult> r[2];
  ASSERT_NO_FATAL_FAILURE(analyzeOffOn(f, ao, &AnalysisOptions::planeLayerwise, r));
  const Graph& g = f.model->graph;
  int depthwise = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.opType != "Conv" || n.inputs.size() < 2 || !g.value(n.inputs[1]).constant) continue;
    const Tensor& W = *g.value(n.inputs[1]).constant;
    if (W.dim(1) != 1 || !r[1]->nodes[i].hasLayerwise) continue;
    ++depthwise;
    const NodeResult &a = r[0]->nodes[i], &b = r[1]->nodes[i];
    ASSERT_TRUE(a.hasLayerwise) << n.name;
    EXPECT_NEAR(a.layerwise.snrDb, b.layerwise.snrDb, 1e-4) << n.name;
    EXPECT_NEAR(a.layerwise.cosine, b.layerwise.cosine, 1e-9) << n.name;
    EXPECT_NEAR(a.layerwise.mse, b.layerwise.mse, 1e-5 * a.layerwise.mse) << n.name;
    EXPECT_EQ(a.layerwise.maxAbs, b.layerwise.maxAbs) << n.name;  // the same output bits
    EXPECT_EQ(a.layerwise.count, b.layerwise.count) << n.name;
    EXPECT_NEAR(a.activationSnrDb, b.activationSnrDb, 1e-4) << n.name;
    EXPECT_NEAR(a.weightSnrDb, b.weightSnrDb, 1e-4) << n.name;
    EXPECT_TRUE(std::isfinite(b.weightSnrDb) && std::isfinite(b.activationSnrDb)) << n.name;
  }
  EXPECT_GE(depthwise, 10);
  // The quantized pass takes the depthwise Convs over plane by plane too: the same outputs, so
  // every graph-wise figure downstream agrees to summation rounding.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeResult &a = r[0]->nodes[i], &b = r[1]->nodes[i];
    ASSERT_EQ(a.hasGraphwise, b.hasGraphwise) << g.nodes[i].name;
    if (!a.hasGraphwise || std::isinf(a.graphwise.snrDb)) continue;
    EXPECT_NEAR(a.graphwise.snrDb, b.graphwise.snrDb, 1e-4) << g.nodes[i].name;
    EXPECT_NEAR(a.graphwise.maxAbs, b.graphwise.maxAbs, 1e-6 * a.graphwise.maxAbs) << g.nodes[i].name;
  }
  EXPECT_NEAR(r[0]->outputs[0].metrics.snrDb, r[1]->outputs[0].metrics.snrDb, 1e-6);
  fs::remove_all(f.dir);
}

TEST(Analysis, FusedElementwiseChainsEqualOpByOp) {
  // det's chains of elementwise ops (Mul, Add, Add, Clip, Mul, Div, Mul, Add after each Conv) in
  // one pass in the quantized pass against op by op: the same output bits and the same sums, so
  // every figure is equal, not just close.
  auto f = openDet();
  if (!f.model) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  // Batches kept for toggles store every op's output; the others only what is read outside the
  // chain (budget 0): both against op by op.
  for (uint64_t budget : {uint64_t(1) << 30, uint64_t(0)}) {
  SCOPED_TRACE(budget ? "batches kept" : "nothing kept");
  AnalysisOptions ao;
  ao.sensitivity = false;
  ao.cacheBudgetBytes = budget;
  std::shared_ptr<const AnalysisResult> r[2];
  int64_t cached[2] = {0, 0};
  ASSERT_NO_FATAL_FAILURE(analyzeOffOn(f, ao, &AnalysisOptions::fuseElementwise, r, {}, cached));
  for (int64_t c : cached) EXPECT_EQ(c > 0, budget > 0);
  const Graph& g = f.model->graph;
  int compared = 0, clips = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeResult &a = r[0]->nodes[i], &b = r[1]->nodes[i];
    ASSERT_EQ(a.hasGraphwise, b.hasGraphwise) << g.nodes[i].name;
    if (!a.hasGraphwise) continue;
    ++compared;
    clips += g.nodes[i].opType == "Clip";
    EXPECT_EQ(a.graphwise.snrDb, b.graphwise.snrDb) << g.nodes[i].name;
    EXPECT_EQ(a.graphwise.mse, b.graphwise.mse) << g.nodes[i].name;
    EXPECT_EQ(a.graphwise.cosine, b.graphwise.cosine) << g.nodes[i].name;
    EXPECT_EQ(a.graphwise.maxAbs, b.graphwise.maxAbs) << g.nodes[i].name;
  }
  EXPECT_GT(compared, 300);
  EXPECT_GE(clips, 20);
  EXPECT_EQ(r[0]->outputs[0].metrics.snrDb, r[1]->outputs[0].metrics.snrDb);
  }
  fs::remove_all(f.dir);
}

TEST(Analysis, FloatChainStoresTheBitsOfOpByOp) {
  // The float pass's chains (runFloatChain) against the kernels run one by one on the same
  // table: every output the same bits. A constant of more dims than the input (it broadcasts
  // the output to 5-D) is left to the kernels.
  qs::test::OnnxBuilder b;
  b.input("x", {2, 3, 37, 61});
  b.initializer("c1", {1}, {1.37f});
  b.initializer("c2", {}, {-0.3f});
  b.initializer("lo", {}, {0.f});
  b.initializer("hi", {}, {6.f});
  b.initializer("c6", {1, 1, 1, 1, 1}, {6.f});
  b.node("Mul", {"c1", "x"}, {"m"});
  b.node("Add", {"m", "c2"}, {"a"});
  b.node("Clip", {"a", "lo", "hi"}, {"k"});
  b.node("Mul", {"a", "k"}, {"mk"});
  b.node("Div", {"mk", "c2"}, {"d"});
  b.node("Div", {"mk", "c6"}, {"d5"});
  b.output("d", {2, 3, 37, 61});
  b.output("d5", {1, 2, 3, 37, 61});
  auto m = qs::test::builtModel(b);
  ASSERT_TRUE(m);
  const Graph& g = m->graph;
  auto ex = Executor::create(m, ExecutorOptions{});
  ASSERT_TRUE(ex) << ex.status().message();
  std::vector<float> xs(2 * 3 * 37 * 61);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = (float)((int)(i * 7919 % 2001) - 1000) * 0.0123f;
  const std::vector<NamedTensor> feeds = {{"x", Tensor::fromVector<float>(xs, {2, 3, 37, 61})}};
  auto ref = (*ex)->makeValueTable(feeds);
  ASSERT_TRUE(ref);
  ASSERT_TRUE((*ex)->runNodes(g.topoOrder, *ref).isOk());
  auto nodeOf = [&](const char* out) { return g.value(g.findValue(out)).producer; };
  ElementwiseChain ch;
  ch.input = g.findValue("x");
  ch.nodes = {nodeOf("m"), nodeOf("a"), nodeOf("k"), nodeOf("mk"), nodeOf("d")};
  ch.ops.resize(5);
  ch.ops[0] = {ChainOp::kMul, -1, 0, 1.37f, 0};
  ch.ops[1] = {ChainOp::kAdd, 1, -1, 0, -0.3f};
  ch.ops[2] = {ChainOp::kClip, 2, -1, 0, 0, 0.f, 6.f};
  ch.ops[3] = {ChainOp::kMul, 2, 3};
  ch.ops[4] = {ChainOp::kDiv, 4, -1, 0, -0.3f};
  ch.stored.assign(5, 0);
  auto table = (*ex)->makeValueTable(feeds);
  ASSERT_TRUE(table);
  ASSERT_TRUE(runFloatChain(g, ch, *table));
  for (const char* v : {"m", "a", "k", "mk", "d"}) {
    const Tensor &got = (*table)[(size_t)g.findValue(v)], &want = (*ref)[(size_t)g.findValue(v)];
    ASSERT_EQ(got.shape(), want.shape()) << v;
    EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), (size_t)want.numel() * 4), 0) << v;
  }
  ch.nodes.back() = nodeOf("d5");
  auto other = (*ex)->makeValueTable(feeds);
  ASSERT_TRUE(other);
  EXPECT_FALSE(runFloatChain(g, ch, *other));
  EXPECT_TRUE((*other)[(size_t)g.findValue("m")].empty());
}


TEST(Analysis, ComparedBinaryGivesTheKernelsBitsAndSums) {
  // The Add/Sub/Mul/Div nodes that the quantized pass computes and compares piece by piece
  // (runComparedBinary, NodePaths::binary) against the kernel run through the executor and
  // ErrorAccumulator::add over the whole output: the same bits, the same sums, for a squeeze-
  // excitation Mul [N,C,H,W] x [N,C,1,1], a residual Add of two activations, a per-channel
  // constant, a trailing row, both operands broadcast, and a rank-3 operand.
  qs::test::OnnxBuilder b;
  const std::vector<int64_t> xs = {2, 16, 64, 80};  // 163840 values: three ErrorAccumulator blocks
  b.input("x", xs);
  b.input("y", xs);
  b.input("s", {2, 16, 1, 1});
  b.input("h", {1, 1, 64, 80});
  std::vector<float> cv(16), rv(80), tv(16 * 64);
  for (size_t i = 0; i < cv.size(); ++i) cv[i] = 0.25f + 0.1f * (float)i;
  for (size_t i = 0; i < rv.size(); ++i) rv[i] = -1.f + 0.03f * (float)i;
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = 0.5f + (float)(i % 7) * 0.125f;
  b.initializer("c", {1, 16, 1, 1}, cv);
  b.initializer("r", {80}, rv);
  b.initializer("t", {16, 64, 1}, tv);
  b.initializer("k", {}, {1.5f});
  b.node("Mul", {"x", "s"}, {"m"});
  b.node("Add", {"m", "y"}, {"a"});
  b.node("Add", {"c", "a"}, {"ac"});
  b.node("Sub", {"r", "ac"}, {"sb"});
  b.node("Div", {"sb", "s"}, {"d"});
  b.node("Mul", {"s", "h"}, {"sh"});
  b.node("Sub", {"d", "t"}, {"dt"});
  b.node("Mul", {"dt", "k"}, {"dk"});
  b.output("sh", {2, 16, 64, 80});
  b.output("dk", xs);
  auto m = qs::test::builtModel(b);
  ASSERT_TRUE(m);
  const Graph& g = m->graph;
  auto ex = Executor::create(m, ExecutorOptions{});
  ASSERT_TRUE(ex) << ex.status().message();
  uint32_t seed = 7;
  auto random = [&](const std::vector<int64_t>& s) {
    Tensor t(DType::Float, s);
    for (int64_t i = 0; i < t.numel(); ++i) {
      seed = seed * 1664525u + 1013904223u;
      t.data<float>()[i] = (float)((int)(seed >> 9) % 4001 - 2000) * 1e-3f;
    }
    return t;
  };
  const std::vector<NamedTensor> feeds = {
      {"x", random(xs)}, {"y", random(xs)}, {"s", random({2, 16, 1, 1})}, {"h", random({1, 1, 64, 80})}};
  auto table = (*ex)->makeValueTable(feeds);
  ASSERT_TRUE(table);
  ASSERT_TRUE((*ex)->runNodes(g.topoOrder, *table).isOk());
  // dk is x * 1.5: an a x + b op, whose sums the pass derives; the others are taken.
  std::vector<AffineOp> affine(g.nodes.size());
  affine[(size_t)g.value(g.findValue("dk")).producer].input = 0;
  const std::vector<signed char> kind = findBinaryOps(g, affine);
  int taken = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!kind[i]) {
      EXPECT_EQ(g.value(n.outputs[0]).name, "dk");
      continue;
    }
    ++taken;
    const Tensor &a = (*table)[(size_t)n.inputs[0]], &bb = (*table)[(size_t)n.inputs[1]];
    const Tensor& want = (*table)[(size_t)n.outputs[0]];
    Tensor ref(DType::Float, want.shape());
    for (int64_t j = 0; j < ref.numel(); ++j) ref.data<float>()[j] = want.data<float>()[j] * (1.f + 1e-3f * (float)(j % 13 - 6));
    ErrorAccumulator whole;
    whole.add(ref, want);
    for (int threads : {1, 2}) {
      const std::string what = n.opType + " -> " + g.value(n.outputs[0]).name + ", threads " + std::to_string(threads);
      Tensor got;
      ErrorAccumulator sums;
      ASSERT_TRUE(runComparedBinary(kind[i] - 1, a, bb, ref, got, sums, threads)) << what;
      ASSERT_EQ(got.shape(), want.shape()) << what;
      EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), (size_t)want.numel() * 4), 0) << what;
      EXPECT_EQ(sums.signalPower(), whole.signalPower()) << what;
      EXPECT_EQ(sums.noisePower(), whole.noisePower()) << what;
      EXPECT_EQ(sums.metrics().cosine, whole.metrics().cosine) << what;
      EXPECT_EQ(sums.metrics().maxAbs, whole.metrics().maxAbs) << what;
      EXPECT_EQ(sums.metrics().count, whole.metrics().count) << what;
    }
  }
  EXPECT_EQ(taken, 7);
  // Left to the kernel and the observer: a reference of another size, a non-float operand, and
  // operands whose dims do not broadcast as one block ([2, 1, 64, 1] against [2, 16, 64, 80]).
  const Tensor& x = (*table)[(size_t)g.findValue("x")];
  Tensor out;
  ErrorAccumulator sums;
  EXPECT_FALSE(runComparedBinary(ChainOp::kAdd, x, x, random({2, 16, 64}), out, sums, 1));
  EXPECT_FALSE(runComparedBinary(ChainOp::kAdd, x, Tensor::fromVector<int64_t>({1}, {1}), x, out, sums, 1));
  EXPECT_FALSE(runComparedBinary(ChainOp::kMul, x, random({2, 1, 64, 1}), x, out, sums, 1));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(sums.metrics().count, 0);
}
