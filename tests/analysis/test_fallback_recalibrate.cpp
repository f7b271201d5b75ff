// Re-calibration at the fallback's chosen point (core/analysis/fallback_curve.h,
// fallbackCurveRecalibrated): method auto checks its clip choices on the whole graph with the nodes
// that are enabled, so once the fallback has excluded a node, calibrating again can choose other
// ranges for the nodes left quantized. Built model: two outputs whose best clip tables disagree;
// with both nodes quantized the selection is a compromise (the max range) that the worse output
// needs, the fallback excludes that output's node, and re-calibrating lets the other output's
// tensor be clipped: its SNR rises by more than 10 dB. The session then equals one calibrated from
// the start with that exclusion, and every point of the curve is measured at the new scales.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/analysis/fallback_curve.h"
#include "core/analysis/quant_session.h"
#include "tests/support/model_helpers.h"
#include "tests/support/sensitivity_model.h"

using namespace qs;
using namespace qs::test;

namespace {

// x (uniform [0,1)) times a gain whose feature 0 is an outlier feeds two MatMuls. "a" (y1) does not
// read feature 0 (its row of Wa is 0): clipping xa's outlier costs y1 nothing, while the max range
// rounds its other features at a step of 20/127 (~22 dB). "q" reads feature 0 only into column 0 with
// a small weight, which a Mul by 10 then makes half of y2's power: layer-wise (q's own output) a clip
// of xq wins, but y2 needs xq's whole range (max: ~17 dB; clipped: a few dB). With both quantized the
// whole-graph check takes a max-like table (y2 is the worst output), so the fallback to 19 dB excludes
// "q"; re-calibrated without "q", xa gets its clip and y1 rises far above the target.
std::shared_ptr<Model> disagreeingOutputsModel() {
  OnnxBuilder b(13);
  const int64_t n = 32;
  b.input("x", {1, 8, n}).output("y1", {1, 8, n}).output("y2", {1, 8, n});
  std::mt19937 rng(21);
  std::vector<float> ga((size_t)n, 1.0f), gq((size_t)n, 1.0f), g2((size_t)n, 1.0f);
  ga[0] = 20.0f;
  gq[0] = 50.0f;
  g2[0] = 10.0f;
  b.initializer("ga", {n}, ga);
  b.initializer("gq", {n}, gq);
  b.initializer("g2", {n}, g2);
  std::vector<float> wa = randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
  for (int64_t c = 0; c < n; ++c) wa[(size_t)c] = 0.0f;  // row 0: feature 0 not read
  std::vector<float> wq = randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
  for (int64_t c = 0; c < n; ++c) wq[(size_t)c] = 0.0f;
  for (int64_t r = 0; r < n; ++r) wq[(size_t)(r * n)] = 0.0f;
  wq[0] = 0.01f;  // column 0 reads feature 0 alone
  b.initializer("wa", {n, n}, wa);
  b.initializer("wq", {n, n}, wq);
  b.node("Mul", {"x", "ga"}, {"xa"}, "mul_a");
  b.node("Mul", {"x", "gq"}, {"xq"}, "mul_q");
  b.node("MatMul", {"xa", "wa"}, {"y1"}, "a");
  b.node("MatMul", {"xq", "wq"}, {"hq"}, "q");
  b.node("Mul", {"hq", "g2"}, {"y2"}, "gain");
  return builtModel(b, "disagreeing_outputs.onnx");
}

AnalysisOptions autoOptions() {
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Auto;
  return ao;
}

std::unique_ptr<QuantSession> analysed(std::shared_ptr<Model> model, std::shared_ptr<const CalibrationData> data,
                                       const QuantConfig& config = {}) {
  auto s = QuantSession::create(model, config, autoOptions());
  EXPECT_TRUE(s) << s.status().message();
  EXPECT_TRUE((*s)->calibrate(*data));
  auto r = (*s)->analyze(data);
  EXPECT_TRUE(r) << r.status().message();
  return std::move(s).value();
}

}  // namespace

TEST(FallbackRecalibrate, ExcludedNodeFreesTheOtherTensorsClipAndEveryPointIsMeasuredAtTheNewScales) {
  auto model = disagreeingOutputsModel();
  auto data = randomData(*model, 8);
  const ValueId xa = model->graph.findValue("xa");
  const NodeId q = nodeNamed(*model, "q");

  FallbackOptions fo;
  fo.targetSnrDb = 19;
  fo.candidates = 2;
  fo.extraSteps = 0;
  // Without re-calibration: "q" excluded, y1 at the compromise's figure.
  auto plain = analysed(model, data);
  const float amaxBefore = plain->state().activation(xa)->amax;
  const double startBefore = plain->result()->worstOutputSnrDb();
  auto first = fallbackCurve(*plain, fo);
  ASSERT_TRUE(first) << first.status().message();
  ASSERT_TRUE(first->reached);
  ASSERT_EQ(first->chosen, 1);
  EXPECT_EQ(first->steps[0].excluded, q);
  const double y1Before = plain->result()->worstOutputSnrDb();

  fo.recalibrate = true;
  auto session = analysed(model, data);
  auto curve = fallbackCurveRecalibrated(*session, *data, data, fo);
  ASSERT_TRUE(curve) << curve.status().message();
  EXPECT_TRUE(curve->recalibrated);
  EXPECT_TRUE(curve->reached);
  ASSERT_EQ(curve->chosen, 1);
  EXPECT_EQ(curve->steps[0].excluded, q);
  EXPECT_TRUE(curve->reincludedAfterRecalibration.empty());  // re-including "q" takes y2 far below
  EXPECT_NEAR(curve->recalibratedBeforeDb, y1Before, 1e-9);
  const double y1After = session->result()->worstOutputSnrDb();
  EXPECT_NEAR(curve->recalibratedAfterDb, y1After, 1e-9);
  EXPECT_GT(y1After, y1Before + 10) << "before " << y1Before << " after " << y1After;
  EXPECT_LT(session->state().activation(xa)->amax, 0.5f * amaxBefore);

  // The same scales and figures as a session calibrated with "q" excluded from the start.
  QuantConfig config;
  config.nodesToExclude = {"q"};
  auto fresh = analysed(model, data, config);
  EXPECT_FLOAT_EQ(fresh->state().activation(xa)->amax, session->state().activation(xa)->amax);
  EXPECT_NEAR(fresh->result()->worstOutputSnrDb(), y1After, 1e-6);
  EXPECT_NEAR(curve->worstSnrDb(1), y1After, 1e-9);
  // Point 0 re-measured at the new scales: xa clipped, y2's tensor at the new table too.
  ASSERT_TRUE(applyFallbackPoint(*session, *curve, 0));
  EXPECT_NEAR(curve->worstSnrDb(0), session->result()->worstOutputSnrDb(), 1e-9);
  EXPECT_NE(curve->worstSnrDb(0), startBefore);
}
