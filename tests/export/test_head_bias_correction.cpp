// The head bias correction (AnalysisRequest::headBiasCorrection, --head-bias-correction, int8, off by
// default since it did not help rec's decoding in ONNX Runtime): on a
// model built in code, MatMul -> Relu -> MatMul (the head) -> Add (bias) -> Softmax, the head's
// bias is shifted per class by the mean of float - quantized logits on the calibration data. The
// logits' systematic shift falls on held-out data too (not only on the data it was measured on);
// quantized.onnx carries the corrected bias (the float model keeps its own), ONNX Runtime gives the
// predicted SNR; quant_cfg.json holds the shifts and --load-config reproduces quantized.onnx byte
// for byte; a shift list of the wrong length is refused in one line. Off, nothing changes. Why
// (rec's spaces): docs/quality.md, "rec: the head's bias corrected".
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/analysis/head_bias_correction.h"
#include "core/export/pipeline.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"

using namespace qs;
using qs::test::exportRun;
using qs::test::OnnxBuilder;
using qs::test::readText;
using qs::test::runFile;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kK = 32, kClasses = 48, kSteps = 10, kSamples = 8;

// The head model (test::writeHeadModel) with an Add(1) before the Relu, whose output's mean is then about 1, so each
// column's weight rounding shifts its class's score by a constant: a systematic shift, as rec's space
// (docs/quality.md, "rec: the spaces"); coarse steps on every sixth column.
std::string writeHeadModel(const std::string& dir, std::mt19937& rng) {
  return test::writeHeadModel(dir, rng, kSteps, kK, kClasses, 6, true);
}

// Writes `x` [kSamples, ...] as dir/name.npy and, one sample each, dir/name/in_<s>_0.npy.
void writeSamples(const Tensor& x, const std::string& dir, const std::string& name) {
  test::writeSamples(x, dir + "/" + name + ".npy", dir + "/" + name);
}

// The exported bias constant 'b' of `file`.
Tensor exportedBias(const std::string& file) {
  auto m = loadModel(file);
  EXPECT_TRUE(m) << m.status().message();
  if (!m) return Tensor();
  const Graph& g = (*m)->graph;
  const ValueId b = g.findValue("b");
  EXPECT_NE(b, kNoValue);
  return b == kNoValue || !g.value(b).constant ? Tensor() : g.value(b).constant->clone();
}

double meanAbs(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += std::fabs(x);
  return v.empty() ? 0.0 : s / (double)v.size();
}

}  // namespace

TEST(HeadBiasCorrection, ShiftsTheHeadsBiasByTheMeanLogitErrorExportsItAndReloadsByteForByte) {
  std::mt19937 rng(27);
  const std::string dir = test::makeTempDir("head-bias-correction");
  const std::string model = writeHeadModel(dir, rng);
  // Calibration and held-out samples from the same distribution.
  ASSERT_NO_FATAL_FAILURE(writeSamples(test::randomTensor({kSamples, kSteps, kK}, rng, -1.f, 1.f), dir, "calib"));
  ASSERT_NO_FATAL_FAILURE(writeSamples(test::randomTensor({kSamples, kSteps, kK}, rng, -1.f, 1.f), dir, "held"));

  EXPECT_FALSE(AnalysisRequest{}.headBiasCorrection);  // off by default (docs/quality.md)
  AnalysisRequest rq = test::remedyRequest(model, dir + "/calib.npy");
  rq.data.batchSize = 1;
  rq.headWeightScale = false;  // the head's weight rounding left as it is: the shift to correct
  rq.headBiasCorrection = false;
  auto off = runAnalysis(rq);
  ASSERT_TRUE(off) << off.status().message();
  EXPECT_TRUE(off->headBiasShifts.empty());
  EXPECT_TRUE(off->session->state().corrections.empty());
  rq.headBiasCorrection = true;
  auto on = runAnalysis(rq);
  ASSERT_TRUE(on) << on.status().message();

  // The head and its bias Add; the logits' error on the calibration data falls.
  const Graph& g = on->model->graph;
  ASSERT_EQ(on->headBiasShifts.size(), 1u);
  const HeadBiasShift& h = on->headBiasShifts[0];
  EXPECT_EQ(g.nodes[(size_t)h.where.head].name, "head");
  EXPECT_EQ(g.nodes[(size_t)h.where.reader].name, "bias");
  EXPECT_EQ(g.value(h.where.bias).name, "b");
  ASSERT_EQ(h.shift.size(), (size_t)kClasses);
  EXPECT_GT(h.maxAbsShift, 0.0);
  EXPECT_LT(h.errorAfter, h.errorBefore);

  // On the held-out samples: the mean logit shift left by the corrected session is smaller than
  // the uncorrected one's (the shift is systematic, not fitted noise), and the logits' error falls.
  CalibrationDataOptions ho;
  ho.path = dir + "/held.npy";
  ho.batchSize = 1;
  auto held = CalibrationData::open(*on->model, ho);
  ASSERT_TRUE(held) << held.status().message();
  auto restOff = measureHeadBiasCorrection(*off->session, **held);
  auto restOn = measureHeadBiasCorrection(*on->session, **held);
  ASSERT_TRUE(restOff && restOn);
  ASSERT_EQ(restOff->size(), 1u);
  ASSERT_EQ(restOn->size(), 1u);
  const double shiftOff = meanAbs((*restOff)[0].shift), shiftOn = meanAbs((*restOn)[0].shift);
  std::printf("head bias correction: mean |shift| %.4g (max %.4g); calibration logits' MSE %.4g -> %.4g; held-out "
              "mean |logit shift| %.4g -> %.4g, MSE %.4g -> %.4g\n",
              h.meanAbsShift, h.maxAbsShift, h.errorBefore, h.errorAfter, shiftOff, shiftOn,
              (*restOff)[0].errorBefore, (*restOn)[0].errorBefore);
  EXPECT_LT(shiftOn, 0.5 * shiftOff);
  EXPECT_LT((*restOn)[0].errorBefore, (*restOff)[0].errorBefore);

  // quantized.onnx: the bias is the model's plus the shift, the session's value; off, the model's.
  const Tensor& b0 = *g.value(h.where.bias).constant;
  const std::string q = exportRun(*on, dir + "/out");
  const std::string qOff = exportRun(*off, dir + "/out_off");
  ASSERT_FALSE(q.empty());
  ASSERT_FALSE(qOff.empty());
  const Tensor bOn = exportedBias(q), bOff = exportedBias(qOff);
  ASSERT_EQ(bOn.numel(), kClasses);
  ASSERT_EQ(bOff.numel(), kClasses);
  const ConstantCorrection* c = on->session->state().correction(h.where.reader, h.where.input);
  ASSERT_NE(c, nullptr);
  for (int64_t k = 0; k < kClasses; ++k) {
    EXPECT_EQ(bOn.data<float>()[k], b0.data<float>()[k] + h.shift[(size_t)k]) << k;
    EXPECT_EQ(bOn.data<float>()[k], c->value.data<float>()[k]) << k;
    EXPECT_EQ(bOff.data<float>()[k], b0.data<float>()[k]) << k;
  }
  EXPECT_NE(readText(dir + "/out/report.json").find("\"head_bias_correction\": \"head (48 classes, mean |shift| "),
            std::string::npos);
  EXPECT_EQ(readText(dir + "/out_off/report.json").find("\"head_bias_correction\""), std::string::npos);
  const std::string cfg = readText(dir + "/out/quant_cfg.json");
  EXPECT_NE(cfg.find("\"head_bias_correction\""), std::string::npos);
  EXPECT_EQ(readText(dir + "/out_off/quant_cfg.json").find("\"head_bias_correction\""), std::string::npos);

  // ONNX Runtime on the export at the prediction (the calibration samples, which the analysis ran on).
  const double predicted = on->result()->outputs[0].metrics.snrDb;
  const double ort = test::ortSnrDb(model, q, dir + "/calib", kSamples);
  std::printf("output SNR: off %.2f dB, on %.2f dB predicted, %.2f dB in ONNX Runtime\n",
              off->result()->outputs[0].metrics.snrDb, predicted, ort);
  EXPECT_NEAR(ort, predicted, 0.5);

  // --load-config: the saved shifts, no measurement (whatever the flag): the same file byte for byte.
  AnalysisRequest reload = test::remedyRequest(model, dir + "/calib.npy");
  reload.data.batchSize = 1;
  reload.loadConfig = dir + "/out/quant_cfg.json";
  auto again = runAnalysis(reload);
  ASSERT_TRUE(again) << again.status().message();
  ASSERT_EQ(again->headBiasShifts.size(), 1u);
  EXPECT_EQ(again->headBiasShifts[0].shift, h.shift);
  EXPECT_EQ(again->headBiasShifts[0].errorBefore, 0.0);  // not measured
  const std::string q2 = exportRun(*again, dir + "/out2");
  ASSERT_FALSE(q2.empty());
  EXPECT_TRUE(readText(q) == readText(q2));

  // A saved shift list of the wrong length: one line naming the file and the bias.
  const std::string refused = test::badConfigError(cfg, "head_bias_correction", "shift", "0.5, ", dir, reload);
  EXPECT_NE(refused.find("bad_cfg.json: quantscope.head_bias_correction 'b' has 49 shifts, the bias 48 classes"),
            std::string::npos)
      << refused;
  EXPECT_EQ(refused.find('\n'), std::string::npos);
  fs::remove_all(dir);
}

// A Gemm head whose C --bias-correction corrects too: the head's shift is added to that corrected
// value (one correction of the Gemm's C, not two).
TEST(HeadBiasCorrection, AddsToTheBiasCorrectionOfAGemmHead) {
  std::mt19937 rng(5);
  const std::string dir = test::makeTempDir("head-bias-gemm");
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> w1((size_t)(kK * kK)), w2((size_t)(kK * kClasses)), b((size_t)kClasses);
  for (float& v : w1) v = 0.3f * n(rng);
  for (float& v : w2) v = 0.3f * n(rng);
  for (float& v : b) v = 0.1f * n(rng);
  for (int64_t c = 0; c < kClasses; c += 5) w2[(size_t)c] = 2.4f;
  OnnxBuilder m;
  m.input("x", {-1, kK}).output("y", {-1, kClasses});
  m.initializer("w1", {kK, kK}, w1);
  m.initializer("w2", {kK, kClasses}, w2);
  m.initializer("b", {kClasses}, b);
  m.node("MatMul", {"x", "w1"}, {"h"}, "inner");
  m.node("Relu", {"h"}, {"r"}, "relu");
  m.node("Gemm", {"r", "w2", "b"}, {"logits"}, "head");
  OnnxBuilder::attrInt(m.node("Softmax", {"logits"}, {"y"}, "softmax"), "axis", -1);
  const std::string model = dir + "/gemm.onnx";
  m.save(model);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", test::randomTensor({32, kK}, rng, -1.f, 1.f)));

  AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
  rq.biasCorrection = true;
  rq.headBiasCorrection = false;
  auto bc = runAnalysis(rq);
  ASSERT_TRUE(bc) << bc.status().message();
  rq.headBiasCorrection = true;
  auto both = runAnalysis(rq);
  ASSERT_TRUE(both) << both.status().message();
  ASSERT_EQ(both->headBiasShifts.size(), 1u);
  const HeadBiasShift& h = both->headBiasShifts[0];
  EXPECT_EQ(both->model->graph.nodes[(size_t)h.where.reader].name, "head");
  EXPECT_EQ(h.where.input, 2u);
  const NodeId gemm = h.where.reader;
  const ConstantCorrection* only = bc->session->state().correction(gemm, 2);
  const ConstantCorrection* sum = both->session->state().correction(gemm, 2);
  ASSERT_NE(only, nullptr);
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(both->session->state().corrections.size(), bc->session->state().corrections.size());
  for (int64_t k = 0; k < kClasses; ++k)
    EXPECT_EQ(sum->value.data<float>()[k], only->value.data<float>()[k] + h.shift[(size_t)k]) << k;
  EXPECT_LT(h.errorAfter, h.errorBefore);
  fs::remove_all(dir);
}
