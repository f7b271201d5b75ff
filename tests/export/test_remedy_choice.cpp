// --remedies auto (core/export/remedy_choice.h): on the pointwise smoothing model built in code (HardSwish-affine
// inputs, channels two decades apart) it keeps pointwise smoothing, which raises the output SNR on the choice and
// the held-out samples, and nothing else (report.json, the HTML and quant_cfg.json say so); its export is the
// explicit flag's byte for byte, ONNX Runtime computes its prediction within 0.5 dB, and --load-config
// reproduces the export byte for byte. A margin no remedy reaches keeps none (the export is --remedies none's).
// On PaddleOCR cls, every kept remedy raised the figure by the margin on the choice samples and did not lower it
// on the held-out ones, and a remedy that lowered it is not kept. The trials keep the run's exclusions. A bad
// --remedies value is refused in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "core/export/report.h"
#include "core/io/npy.h"
#include "tests/support/model_helpers.h"
#include "tests/support/remedy_helpers.h"
#include "tests/support/text_images.h"

using namespace qs;
using qs::test::exportRun;
using qs::test::readText;
namespace fs = std::filesystem;

namespace {

// The pointwise smoothing model and 16 samples of x (4 batches of its static 4: 2 to choose on, 2 held out).
AnalysisRequest pointwiseRequest(const std::string& dir) {
  std::mt19937 rng(5);
  const std::string model = test::writePointwiseModel(dir, rng);
  EXPECT_TRUE(writeNpy(dir + "/x.npy", test::randomTensor({16, 3, 12, 12}, rng, -1.f, 1.f)));
  return test::remedyRequest(model, dir + "/x.npy");
}

void printChoice(const RemedyChoice& c) {
  for (const RemedyTrial& t : c.trials)
    std::printf("%s (%d): %.2f -> %.2f dB, held out %.2f -> %.2f dB, %s: %s\n", t.remedy.c_str(), t.items, t.beforeDb,
                t.afterDb, t.heldOutBeforeDb, t.heldOutAfterDb, t.kept ? "kept" : "not kept", t.reason.c_str());
}

}  // namespace

TEST(RemedyChoice, KeepsPointwiseSmoothingWhereItPaysAndTheExportIsReproducible) {
  const std::string dir = test::makeTempDir("remedy-choice");
  AnalysisRequest rq = pointwiseRequest(dir);
  rq.remedies = RemedyMode::Auto;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  const RemedyChoice& c = run->remedies.choice;
  printChoice(c);
  EXPECT_EQ(c.mode, "auto");
  EXPECT_EQ(c.choiceSamples, 8);
  EXPECT_EQ(c.heldOutSamples, 8);
  ASSERT_EQ(c.trials.size(), 2u);
  EXPECT_EQ(c.trials[0].remedy, "depthwise_smooth");
  EXPECT_EQ(c.trials[0].items, 0);  // no depthwise Conv: nothing measured
  EXPECT_FALSE(c.trials[0].kept);
  EXPECT_EQ(c.trials[1].remedy, "pointwise_smooth");
  EXPECT_TRUE(c.trials[1].kept) << c.trials[1].reason;
  EXPECT_GE(c.trials[1].afterDb, c.trials[1].beforeDb + rq.remedyMarginDb);
  EXPECT_GT(c.trials[1].heldOutAfterDb, c.trials[1].heldOutBeforeDb);
  EXPECT_EQ(c.kept, (std::vector<std::string>{"pointwise_smooth"}));
  EXPECT_TRUE(run->request.pointwiseSmooth);
  EXPECT_EQ(run->remedies.pointwiseSmoothed.size(), 2u);

  // What auto keeps is applied as the flag applies it: the same export as --pointwise-smooth on, and above none.
  AnalysisRequest flag = rq;
  flag.remedies = RemedyMode::None;
  flag.pointwiseSmooth = true;
  auto explicitRun = runAnalysis(flag);
  ASSERT_TRUE(explicitRun) << explicitRun.status().message();
  flag.pointwiseSmooth = false;
  auto none = runAnalysis(flag);
  ASSERT_TRUE(none) << none.status().message();
  EXPECT_TRUE(none->remedies.choice.empty());
  const double predicted = run->result()->worstOutputSnrDb();
  std::printf("none %.2f dB, auto %.2f dB\n", none->result()->worstOutputSnrDb(), predicted);
  EXPECT_GT(predicted, none->result()->worstOutputSnrDb() + 1.0);
  const std::string q = exportRun(*run, dir + "/auto");
  ASSERT_FALSE(q.empty());
  EXPECT_TRUE(readText(q) == readText(exportRun(*explicitRun, dir + "/flag")));

  // report.json and quant_cfg.json record the choice; the report passes the schema.
  const std::string report = readText(dir + "/auto/report.json");
  EXPECT_NE(report.find("\"remedy_choice\""), std::string::npos);
  EXPECT_NE(report.find("\"remedies\": \"auto: pointwise_smooth\""), std::string::npos);
  EXPECT_TRUE(test::reportFollowsSchema(dir + "/auto/report.json"));
  EXPECT_EQ(readText(dir + "/flag/report.json").find("remedy_choice"), std::string::npos);
  const std::string html = reportHtml(*run->model, *run->result(), reportContext(*run));
  EXPECT_NE(html.find("<h2>Remedy choice (auto)</h2><p>Kept: pointwise_smooth."), std::string::npos);
  EXPECT_NE(html.find("<td class=l>pointwise_smooth</td><td>2</td>"), std::string::npos);
  const std::string cfg = readText(dir + "/auto/quant_cfg.json");
  EXPECT_NE(cfg.find("\"remedy_choice\""), std::string::npos);

  // ONNX Runtime on the export at the prediction.
  const double ort = test::ortSnrDb(rq.modelPath, q, dir, test::writeAnalysisInputs(*run, dir));
  std::printf("auto: predicted %.3f dB, ONNX Runtime %.3f dB\n", predicted, ort);
  EXPECT_NEAR(ort, predicted, 0.5);

  // --load-config (with --remedies auto still asked: scales from a file are not chosen again) reproduces it.
  AnalysisRequest reload = rq;
  reload.loadConfig = dir + "/auto/quant_cfg.json";
  auto again = runAnalysis(reload);
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_TRUE(again->remedies.choice.fromConfig);
  EXPECT_EQ(again->remedies.choice.kept, c.kept);
  const std::string q2 = exportRun(*again, dir + "/again");
  EXPECT_TRUE(readText(q) == readText(q2));
  EXPECT_TRUE(cfg == readText(dir + "/again/quant_cfg.json"));
  EXPECT_TRUE(test::reportFollowsSchema(dir + "/again/report.json"));
  fs::remove_all(dir);
}

TEST(RemedyChoice, KeepsNothingBelowTheMargin) {
  const std::string dir = test::makeTempDir("remedy-choice-margin");
  AnalysisRequest rq = pointwiseRequest(dir);
  rq.remedies = RemedyMode::Auto;
  rq.remedyMarginDb = 1000;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  printChoice(run->remedies.choice);
  EXPECT_TRUE(run->remedies.choice.kept.empty());
  ASSERT_EQ(run->remedies.choice.trials.size(), 2u);
  EXPECT_FALSE(run->remedies.choice.trials[1].kept);
  EXPECT_NE(run->remedies.choice.trials[1].reason.find("below the margin"), std::string::npos);
  EXPECT_FALSE(run->request.pointwiseSmooth);
  EXPECT_TRUE(run->remedies.pointwiseSmoothed.empty());
  rq.remedies = RemedyMode::None;
  auto none = runAnalysis(rq);
  ASSERT_TRUE(none) << none.status().message();
  EXPECT_EQ(run->result()->worstOutputSnrDb(), none->result()->worstOutputSnrDb());
  EXPECT_TRUE(readText(exportRun(*run, dir + "/auto")) == readText(exportRun(*none, dir + "/none")));
  fs::remove_all(dir);
}

TEST(RemedyChoice, AnExplicitFlagFixesItsRemedy) {
  const std::string dir = test::makeTempDir("remedy-choice-fixed");
  AnalysisRequest rq = pointwiseRequest(dir);
  rq.remedies = RemedyMode::Auto;
  rq.remediesFixed = {"pointwise_smooth"};  // --pointwise-smooth off
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  ASSERT_EQ(run->remedies.choice.trials.size(), 1u);
  EXPECT_EQ(run->remedies.choice.trials[0].remedy, "depthwise_smooth");
  EXPECT_TRUE(run->remedies.pointwiseSmoothed.empty());
  fs::remove_all(dir);
}

// The trials quantize the model as the run does: with --nodes-to-exclude kconv, the figure before the first
// candidate that changes something is --remedies none's with the same exclusion on the choice samples (the first
// 8 of 16), not the figure of the model quantized whole.
TEST(RemedyChoice, TrialsKeepTheRunsExclusions) {
  const std::string dir = test::makeTempDir("remedy-choice-excluded");
  AnalysisRequest rq = pointwiseRequest(dir);
  rq.remedies = RemedyMode::Auto;
  rq.config.nodesToExclude = {"kconv"};
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  printChoice(run->remedies.choice);
  ASSERT_EQ(run->remedies.choice.trials.size(), 2u);
  const RemedyTrial& t = run->remedies.choice.trials[1];
  ASSERT_EQ(t.remedy, "pointwise_smooth");
  ASSERT_GT(t.items, 0);
  AnalysisRequest first = rq;
  first.remedies = RemedyMode::None;
  first.data.maxSamples = 8;  // the choice samples: the first two batches of 4
  auto excluded = runAnalysis(first);
  ASSERT_TRUE(excluded) << excluded.status().message();
  first.config.nodesToExclude.clear();
  auto whole = runAnalysis(first);
  ASSERT_TRUE(whole) << whole.status().message();
  const double withExclusion = excluded->result()->worstOutputSnrDb(), without = whole->result()->worstOutputSnrDb();
  std::printf("choice samples, none: %.3f dB with kconv excluded, %.3f dB without; the trial's before %.3f dB\n",
              withExclusion, without, t.beforeDb);
  ASSERT_GT(std::abs(withExclusion - without), 0.1);  // else this test could not tell them apart
  EXPECT_NEAR(t.beforeDb, withExclusion, 1e-6);
  fs::remove_all(dir);
}

// PaddleOCR cls on 8 rendered lines (4 to choose on, 4 held out), max calibration: whatever auto keeps gained the
// margin on the choice lines and did not lose on the held-out ones; whatever lowered the figure is not kept; the
// output at auto is at least --remedies none's on the choice lines' measure.
TEST(RemedyChoice, ClsKeepsOnlyWhatRaisesTheFigure) {
  const std::string model = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing: run scripts/setup.sh";
  const std::string dir = test::makeTempDir("remedy-choice-cls");
  test::writeTextImages(dir + "/images", 8, 192, 48, 7);
  AnalysisRequest rq = test::textLineRemedyRequest(model, dir + "/images", 192);
  rq.remedies = RemedyMode::Auto;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  const RemedyChoice& c = run->remedies.choice;
  printChoice(c);
  ASSERT_EQ(c.trials.size(), 2u);
  EXPECT_EQ(c.choiceSamples, 4);
  EXPECT_EQ(c.heldOutSamples, 4);
  for (const RemedyTrial& t : c.trials) {
    EXPECT_GT(t.items, 0) << t.remedy;  // cls has depthwise Convs behind Relu and group-1 Convs
    if (t.kept) {
      EXPECT_GE(t.afterDb - t.beforeDb, rq.remedyMarginDb) << t.remedy;
      EXPECT_GT(t.heldOutAfterDb, t.heldOutBeforeDb) << t.remedy;
    }
    if (t.afterDb < t.beforeDb || t.heldOutAfterDb < t.heldOutBeforeDb) EXPECT_FALSE(t.kept) << t.remedy;
  }
  EXPECT_EQ(run->request.depthwiseSmooth, c.trials[0].kept);
  EXPECT_EQ(run->request.pointwiseSmooth, c.trials[1].kept);
  EXPECT_EQ(run->remedies.pointwiseSmoothed.empty(), !c.trials[1].kept);
  fs::remove_all(dir);
}

TEST(RemedyChoice, CliRefusesABadValue) {
  const std::string out = test::cliOutput("analyze nothing.onnx --remedies some");
  EXPECT_NE(out.find("--remedies 'some': expected auto or none"), std::string::npos) << out;
}
