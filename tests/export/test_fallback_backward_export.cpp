// The fallback's backward pass (core/analysis/fallback_curve.h) in the exported model: on the
// built model where the greedy pass excludes three MatMuls and the backward pass re-includes one
// (tests/support/sensitivity_model.h, sharedBranchBuilder), the quantized.onnx of the chosen point
// run in ONNX Runtime gives each output's predicted SNR within 0.5 dB, and reaches the target.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/analysis/fallback_curve.h"
#include "core/analysis/quant_session.h"
#include "core/export/exporter.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "core/onnx/loader.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/sensitivity_model.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

constexpr int kSamples = 8;

int runOrt(const std::string& model, const std::string& inDir, const std::string& outDir, const std::string& extra = "") {
  const std::string cmd = "ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_batch.mjs " +
                          model + " " + inDir + " " + outDir + " --samples " + std::to_string(kSamples) +
                          " --threads 2 " + extra + " > " + outDir + ".log 2>&1";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST(FallbackBackwardExport, ChosenPointAfterTheBackwardPassMatchesThePredictionInOrt) {
  const std::string dir = test::makeTempDir("fallback-backward");
  const std::string path = dir + "/shared_branch.onnx";
  test::sharedBranchBuilder().save(path);
  auto m = loadModel(path);
  ASSERT_TRUE(m) << m.status().message();
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.f, 1.f);
  Tensor stacked(DType::Float, {kSamples, 16, 64});
  for (int s = 0; s < kSamples; ++s) {
    Tensor one(DType::Float, {1, 16, 64});
    for (int64_t i = 0; i < one.numel(); ++i) one.data<float>()[i] = normal(rng);
    std::copy(one.data<float>(), one.data<float>() + one.numel(), stacked.data<float>() + s * one.numel());
    ASSERT_TRUE(writeNpy(dir + "/in_" + std::to_string(s) + "_0.npy", one));
  }
  ASSERT_TRUE(writeNpy(dir + "/calib.npy", stacked));
  CalibrationDataOptions co;
  co.path = dir + "/calib.npy";
  co.batchSize = 1;
  auto d = CalibrationData::open(**m, co);
  ASSERT_TRUE(d) << d.status().message();
  std::shared_ptr<const CalibrationData> data(std::move(d).value());

  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.threads = 2;
  auto s = QuantSession::create(*m, QuantConfig{}, ao);
  ASSERT_TRUE(s) << s.status().message();
  ASSERT_TRUE((*s)->calibrate(*data));
  ASSERT_TRUE((*s)->analyze(data));
  FallbackOptions fo;
  fo.targetSnrDb = (*s)->result()->worstOutputSnrDb() + 3;
  fo.extraSteps = 0;
  auto curve = fallbackCurve(**s, fo);
  ASSERT_TRUE(curve) << curve.status().message();
  ASSERT_TRUE(curve->reached);
  ASSERT_FALSE(curve->reincluded.empty()) << "the premise: the backward pass re-included a node";
  EXPECT_LT(curve->chosen, curve->forwardChosen);
  auto r = (*s)->result();
  ASSERT_GE(r->worstOutputSnrDb(), fo.targetSnrDb);

  ExportOptions eo;
  auto feeds = data->batch(0);
  ASSERT_TRUE(feeds);
  auto ranks = observeRanks((*s)->executor(), *feeds);
  ASSERT_TRUE(ranks) << ranks.status().message();
  eo.observedRanks = *ranks;
  auto ex = buildQuantizedModel(path, **m, *r, eo);
  ASSERT_TRUE(ex) << ex.status().message();
  const std::string q = dir + "/quantized.onnx";
  test::writeBytes(q, ex->modelBytes);
  ASSERT_EQ(runOrt(path, dir, dir + "/fp32", "--level disabled"), 0) << std::ifstream(dir + "/fp32.log").rdbuf();
  ASSERT_EQ(runOrt(q, dir, dir + "/q", "--level disabled --disable-qdq"), 0) << std::ifstream(dir + "/q.log").rdbuf();
  for (int k = 0; k < 2; ++k) {
    ErrorAccumulator acc;
    for (int i = 0; i < kSamples; ++i) {
      const std::string name = "/out_" + std::to_string(i) + "_" + std::to_string(k) + ".npy";
      auto ref = readNpy(dir + "/fp32" + name);
      auto got = readNpy(dir + "/q" + name);
      ASSERT_TRUE(ref && got) << name;
      acc.add(*ref, *got);
    }
    const double measured = acc.metrics().snrDb, predicted = r->outputs[(size_t)k].metrics.snrDb;
    std::printf("output %d: predicted %.3f dB, ORT %.3f dB (target %.3f, %d of %d excluded after the backward pass)\n",
                k, predicted, measured, fo.targetSnrDb, curve->chosen, curve->forwardChosen);
    EXPECT_NEAR(measured, predicted, 0.5) << "output " << k;
  }
  fs::remove_all(dir);
}
