// Task-level agreement of the exported INT8 models in ONNX Runtime (issue #14, item 5): rec and
// det exported by the CLI at its defaults (calibrated on 16 rendered text lines), then the float
// model and quantized.onnx run in ONNX Runtime on 16 other rendered lines: how many lines rec
// greedy-decodes like the float model, and det's text mask (probability > 0.3) IoU with the
// float model's. The figures go to docs/quality.md ("Task agreement"); the thresholds are what
// the code reaches today, one constant each, to be raised towards the targets (15 of 16
// lines, IoU 0.97) as the calibrator improves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/analysis/agreement.h"
#include "core/io/calibration_data.h"
#include "core/io/npy.h"
#include "core/onnx/loader.h"
#include "tests/support/sanitizer.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

// What the CLI's defaults reach today (measured, docs/quality.md); the targets in brackets.
// With auto and depthwise input equalization (2026-11-26): rec 8 of 16 lines (5 of them lines the
// float model decodes to nothing), CER 19.6%; det mean IoU 0.9674 (worst image 0.935). With
// QS_TASK_AGREEMENT_FLAGS="--depthwise-smooth on" (not the default): rec 6 of 16, CER 23.2% (ORT
// parts from the simulation on rec, which predicts a gain: docs/quality.md, "Depthwise input
// smoothing"); det mean IoU 0.9733 (worst image 0.904).
// rec's 15 of 16 needs about 38 dB at its output on these lines, where the float model has
// near-ties (printed): docs/quality.md, "rec: what breaks the decoding". 2026-11-26 (wt-rec): 9 of 16.
constexpr int kRecMinLinesAlike = 8;       // of kLines [15]
constexpr double kDetMinMaskIou = 0.96;    // [0.97]
constexpr int kLines = 16;
constexpr float kNearTie = 0.05f;  // a top-1 - top-2 probability gap printed as a near-tie

struct TaskCase {
  const char* file;
  int width, height;
};

// Extra export flags for measuring other settings (docs/quality.md, "Task agreement"), e.g.
// QS_TASK_AGREEMENT_FLAGS="--calibration-method mse": the figures are printed, the thresholds (which
// hold for the defaults) not asserted.
std::string extraFlags() {
  const char* e = std::getenv("QS_TASK_AGREEMENT_FLAGS");
  return e ? std::string(" ") + e : std::string();
}

std::string modelPath(const char* file) { return std::string(QS_SOURCE_DIR) + "/.cache/models/" + file; }

std::string readText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Exports `c` at the CLI's defaults (the sweeps that only feed the report left out) into dir/q,
// calibrated on kLines rendered lines, and writes kLines other lines as dir/in/in_0.npy.
void prepare(const TaskCase& c, const std::string& dir) {
  const std::string calib = dir + "/calib", eval = dir + "/eval";
  qs::test::writeTextImages(calib, kLines, c.width, c.height, 11);
  qs::test::writeTextImages(eval, kLines, c.width, c.height, 29);
  const std::string size = std::to_string(c.width) + "x" + std::to_string(c.height);
  const std::string cmd = std::string(QS_BINARY) + " export " + modelPath(c.file) + " --calibration-data " + calib +
                          " --image-size " + size + " --mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 --no-sensitivity" +
                          " --no-layerwise --threads 2" + extraFlags() + " --output-dir " + dir + "/q >" + dir + "/export.out 2>" + dir +
                          "/export.err";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << readText(dir + "/export.err");
  auto model = loadModel(modelPath(c.file));
  ASSERT_TRUE(model) << model.status().message();
  CalibrationDataOptions o;
  o.path = eval;
  o.batchSize = kLines;
  o.image.width = c.width;
  o.image.height = c.height;
  o.image.mean = {0.5f, 0.5f, 0.5f};
  o.image.std = {0.5f, 0.5f, 0.5f};
  auto data = CalibrationData::open(**model, o);
  ASSERT_TRUE(data) << data.status().message();
  auto feeds = (*data)->batch(0);
  ASSERT_TRUE(feeds) << feeds.status().message();
  ASSERT_EQ(feeds->size(), 1u);
  ASSERT_EQ((*feeds)[0].tensor.dim(0), kLines);
  fs::create_directories(dir + "/in");
  ASSERT_TRUE(writeNpy(dir + "/in/in_0.npy", (*feeds)[0].tensor));
}

// The model's first output in ONNX Runtime on dir/in.
Tensor runOrt(const std::string& model, const std::string& dir, const std::string& out) {
  fs::create_directories(out);
  const std::string cmd = "ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_run.mjs " +
                          model + " " + dir + "/in " + out + " --threads 2";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto t = readNpy(out + "/out_0.npy");
  EXPECT_TRUE(t) << t.status().message();
  return t ? std::move(t).value() : Tensor();
}

class TaskAgreement : public ::testing::Test {
 protected:
  void SetUp() override { dir = qs::test::makeTempDir("task-agreement"); }
  // QS_TASK_AGREEMENT_KEEP=1 keeps the folder (images, eval inputs, export, ORT outputs) for
  // measuring other placements on the same export (scripts/task_agreement_exclusions.py).
  void TearDown() override {
    if (std::getenv("QS_TASK_AGREEMENT_KEEP")) {
      std::printf("kept %s\n", dir.c_str());
      return;
    }
    if (!dir.empty()) fs::remove_all(dir);
  }
  std::string dir;
};

}  // namespace

TEST_F(TaskAgreement, RecDecodesRenderedLinesLikeTheFloatModel) {
  const TaskCase c{"ch_PP-OCRv4_rec_infer.onnx", 320, 48};
  if (!fs::exists(modelPath(c.file))) GTEST_SKIP() << "models missing";
  if (qs::test::kUnderSanitizer) GTEST_SKIP() << "release build only (a task measure; the export's code runs under ASan elsewhere)";
  ASSERT_NO_FATAL_FAILURE(prepare(c, dir));
  const Tensor f = runOrt(modelPath(c.file), dir, dir + "/float");
  const Tensor q = runOrt(dir + "/q/quantized.onnx", dir, dir + "/quant");
  ASSERT_EQ(f.rank(), 3);
  ASSERT_EQ(f.shape(), q.shape());
  const int64_t steps = f.dim(1), classes = f.dim(2);
  int alike = 0, emptyFloat = 0, nearTies = 0;
  int64_t edits = 0, chars = 0;
  for (int64_t s = 0; s < kLines; ++s) {
    // The float model's own smallest top-1 - top-2 probability gap over the line's steps: a line
    // with a near-tie flips under any small perturbation (docs/quality.md, "rec: what breaks").
    float minGap = 1.0f;
    for (int64_t t = 0; t < steps; ++t) {
      const float* p = f.data<float>() + (s * steps + t) * classes;
      float top1 = -1.0f, top2 = -1.0f;
      for (int64_t k = 0; k < classes; ++k) {
        if (p[k] > top1) {
          top2 = top1;
          top1 = p[k];
        } else if (p[k] > top2) {
          top2 = p[k];
        }
      }
      minGap = std::min(minGap, top1 - top2);
    }
    nearTies += minGap < kNearTie;
    const auto a = ctcGreedyDecode(f.data<float>() + s * steps * classes, steps, classes);
    const auto b = ctcGreedyDecode(q.data<float>() + s * steps * classes, steps, classes);
    alike += a == b;
    emptyFloat += a.empty();
    edits += editDistance(a, b);
    chars += (int64_t)a.size();
  }
  // The same figures from the analysis's accumulator (what report.json says), over ORT's outputs.
  AgreementAccumulator acc;
  acc.add(f, q, OutputKind::Sequence);
  EXPECT_EQ(acc.metrics().sequences, kLines);
  EXPECT_DOUBLE_EQ(acc.metrics().sequenceAgreement, (double)alike / kLines);
  std::printf("rec, export%s, ONNX Runtime: %d/%d lines decoded like the float model (%d of them empty in "
              "float), CER %.1f%% (%lld edits over %lld characters)\n",
              extraFlags().empty() ? " at the CLI defaults" : extraFlags().c_str(), alike, kLines, emptyFloat,
              chars > 0 ? 100.0 * (double)edits / (double)chars : 0.0, (long long)edits, (long long)chars);
  std::printf("rec, float model in ONNX Runtime: %d of %d lines have a step whose top-1 and top-2 probabilities are "
              "less than %.2f apart\n",
              nearTies, kLines, (double)kNearTie);
  EXPECT_GT(chars, kLines) << "the float model decodes the rendered lines to (almost) nothing";
  if (extraFlags().empty()) {
    EXPECT_GE(alike, kRecMinLinesAlike);
  }
  // The report of the same export gives the analysis's own figure (on the calibration lines).
  const std::string report = readText(dir + "/q/report.json");
  EXPECT_NE(report.find("\"kind\": \"sequence\""), std::string::npos);
  const size_t at = report.find("\"sequence_agreement\": ");
  ASSERT_NE(at, std::string::npos);
  std::printf("rec, the analysis's prediction on the %d calibration lines: sequence agreement %s\n", kLines,
              report.substr(at + 22, report.find_first_of(",\n}", at + 22) - at - 22).c_str());
}

TEST_F(TaskAgreement, DetTextMaskOverlapsTheFloatModels) {
  const TaskCase c{"ch_PP-OCRv4_det_infer.onnx", 320, 320};
  if (!fs::exists(modelPath(c.file))) GTEST_SKIP() << "models missing";
  if (qs::test::kUnderSanitizer) GTEST_SKIP() << "release build only (a task measure; the export's code runs under ASan elsewhere)";
  ASSERT_NO_FATAL_FAILURE(prepare(c, dir));
  const Tensor f = runOrt(modelPath(c.file), dir, dir + "/float");
  const Tensor q = runOrt(dir + "/q/quantized.onnx", dir, dir + "/quant");
  ASSERT_EQ(f.shape(), q.shape());
  ASSERT_EQ(f.dim(0), kLines);
  // Mean over the images of |float mask & quantized mask| / |float mask | quantized mask|.
  const int64_t per = f.numel() / kLines;
  double sumIou = 0, worst = 1;
  int64_t textPixels = 0;
  for (int64_t s = 0; s < kLines; ++s) {
    int64_t inter = 0, uni = 0;
    for (int64_t i = s * per; i < (s + 1) * per; ++i) {
      const bool a = f.data<float>()[i] > 0.3f, b = q.data<float>()[i] > 0.3f;
      inter += a && b;
      uni += a || b;
      textPixels += a;
    }
    const double iou = uni > 0 ? (double)inter / (double)uni : 1.0;
    sumIou += iou;
    worst = std::min(worst, iou);
  }
  const double meanIou = sumIou / kLines;
  std::printf("det, export%s, ONNX Runtime: text mask (p > 0.3) IoU with the float model's: mean %.4f, "
              "worst image %.4f (%lld float text pixels)\n",
              extraFlags().empty() ? " at the CLI defaults" : extraFlags().c_str(), meanIou, worst,
              (long long)textPixels);
  EXPECT_GT(textPixels, 100 * kLines) << "the float model finds no text in the rendered images";
  if (extraFlags().empty()) {
    EXPECT_GE(meanIou, kDetMinMaskIou);
  }
}
