// What the remedy tests (tests/export/test_remedies*.cpp, the depthwise and pointwise smoothing, depthwise
// equalization, bias correction and head tests) share: a shell command's exit code and output, a text file's
// contents, the request they run (max calibration, 2 threads, no sensitivity; det's 4 pages at 256x256),
// ONNX Runtime's SNR on an export, a report checked against its schema, the export of a run, a model file or model run on one input "x", ONNX Runtime on the written inputs,
// the models built in code, samples written one a file, and a saved config spoiled and refused. Header-only,
// like model_helpers.h.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

namespace qs::test {

inline int runCommand(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/// A text file's contents ("" when it cannot be read).
inline std::string readText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline AnalysisRequest remedyRequest(const std::string& model, const std::string& data) {
  AnalysisRequest rq;
  rq.modelPath = model;
  rq.data.path = data;
  rq.calibration.method = CalibMethod::Max;
  rq.methodGiven = true;
  rq.threads = 2;
  rq.sensitivity = false;
  return rq;
}

/// What `args` given to the quantscope binary print (stdout and stderr together).
inline std::string cliOutput(const std::string& args) {
  const std::string cmd = std::string(QS_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

/// remedyRequest on PP-OCRv4 det's pages: 4 of them at 256x256, batch 1, ImageNet normalisation, no
/// layer-wise errors, the Q/DQ Conv path (ORT's arithmetic on the written file).
inline AnalysisRequest detRemedyRequest(const std::string& model, const std::string& pages) {
  AnalysisRequest rq = remedyRequest(model, pages);
  rq.data.maxSamples = 4;
  rq.data.batchSize = 1;
  rq.data.image.width = 256;
  rq.data.image.height = 256;
  rq.data.image.mean = {0.485f, 0.456f, 0.406f};
  rq.data.image.std = {0.229f, 0.224f, 0.225f};
  rq.layerwise = false;
  rq.integerConv = false;
  return rq;
}

/// remedyRequest on rendered text lines (PaddleOCR cls, `width` 192, or rec, 320): `width` x 48, mean/std
/// 0.5, batch 1, no layer-wise errors.
inline AnalysisRequest textLineRemedyRequest(const std::string& model, const std::string& images, int width) {
  AnalysisRequest rq = remedyRequest(model, images);
  rq.data.image.width = width;
  rq.data.image.height = 48;
  rq.data.image.mean = {0.5f, 0.5f, 0.5f};
  rq.data.image.std = {0.5f, 0.5f, 0.5f};
  rq.data.batchSize = 1;
  rq.layerwise = false;
  return rq;
}

/// tests/support/ort_batch.mjs: ONNX Runtime runs `model` on dir/in_<s>_0.npy for s < `samples` into
/// out/out_<s>_<k>.npy, 2 threads, without graph optimisations and with the Q/DQ pairs kept (the
/// file's arithmetic as written). The exit code.
inline int runOrtBatch(const std::string& model, const std::string& dir, const std::string& out, int samples) {
  return runCommand("ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_batch.mjs " +
                    model + " " + dir + " " + out + " --samples " + std::to_string(samples) +
                    " --threads 2 --level disabled --disable-qdq");
}

/// Writes the first input of each batch of run.analysisData as dir/in_<s>_0.npy; the batch count.
inline int writeAnalysisInputs(const AnalysisRun& run, const std::string& dir) {
  const int samples = (int)run.analysisData->batchCount();
  for (int s = 0; s < samples; ++s) {
    auto feeds = run.analysisData->batch(s);
    EXPECT_TRUE(feeds) << feeds.status().message();
    if (!feeds) return 0;
    EXPECT_TRUE(writeNpy(dir + "/in_" + std::to_string(s) + "_0.npy", (*feeds)[0].tensor));
  }
  return samples;
}

/// ONNX Runtime's SNR in dB of quantized `q` against float `model` on the first output, both run by
/// runOrtBatch on the `samples` inputs in `dir` (into dir/fp32 and dir/q); NaN (and a test failure)
/// when a run fails.
inline double ortSnrDb(const std::string& model, const std::string& q, const std::string& dir, int samples) {
  EXPECT_EQ(runOrtBatch(model, dir, dir + "/fp32", samples), 0);
  EXPECT_EQ(runOrtBatch(q, dir, dir + "/q", samples), 0);
  ErrorAccumulator acc;
  for (int s = 0; s < samples; ++s) {
    auto ref = readNpy(dir + "/fp32/out_" + std::to_string(s) + "_0.npy");
    auto got = readNpy(dir + "/q/out_" + std::to_string(s) + "_0.npy");
    EXPECT_TRUE(ref && got);
    if (!ref || !got) return NAN;
    acc.add(*ref, *got);
  }
  return acc.metrics().snrDb;
}

/// ONNX Runtime's SNR in dB of quantized `q`, run by runOrtBatch on dir/in_0_0.npy (into dir/q), against
/// `ref`, the float model's first output on that input; NaN (and a test failure) when the run fails.
inline double ortSnrAgainst(const Tensor& ref, const std::string& q, const std::string& dir) {
  EXPECT_EQ(runOrtBatch(q, dir, dir + "/q", 1), 0);
  auto got = readNpy(dir + "/q/out_0_0.npy");
  EXPECT_TRUE(got) << got.status().message();
  if (!got) return NAN;
  ErrorAccumulator ort;
  ort.add(ref, *got);
  return ort.metrics().snrDb;
}

/// True when the report.json at `path` follows docs/report.schema.json (tests/support/validate_json.py).
inline bool reportFollowsSchema(const std::string& path) {
  return runCommand("/usr/bin/python3 " + std::string(QS_SOURCE_DIR) + "/tests/support/validate_json.py " +
                    std::string(QS_SOURCE_DIR) + "/docs/report.schema.json " + path) == 0;
}

// Exports a run and returns the written quantized.onnx's path ("" on failure, a test failure).
inline std::string exportRun(const AnalysisRun& run, const std::string& dir) {
  ExportTarget t;
  t.outputDir = dir;
  auto b = buildExportBundle(run, t);
  EXPECT_TRUE(b) << b.status().message();
  if (!b) return "";
  EXPECT_TRUE(writeBundle(*b));
  return dir + "/quantized.onnx";
}

// The model's first output on input "x" = `x`, in our executor.
inline Tensor runModel(std::shared_ptr<const Model> m, const Tensor& x) {
  auto ex = Executor::create(std::move(m));
  EXPECT_TRUE(ex) << ex.status().message();
  auto out = (*ex)->run({NamedTensor{"x", x}});
  EXPECT_TRUE(out) << out.status().message();
  return (*out)[0];
}

inline Tensor runFile(const std::string& path, const Tensor& x) {
  auto m = loadModel(path);
  EXPECT_TRUE(m) << m.status().message();
  return runModel(std::move(m).value(), x);
}

/// x [N, steps, k] -> MatMul(w1) [-> Add(b1 = 1), with `innerBias`] -> Relu -> MatMul(w2: the head) -> Add(b) ->
/// Softmax -> y [N, steps, classes], written to dir/head.onnx: the head remedy tests' model (head bias correction,
/// head weight scale). w1, w2 normal with sigma 0.3, b 0.1; w2's row 0 is 2.4 at every `coarseStep`-th column (8x
/// the others' range, as rec's blank column): a coarse step whose rounding, times the Relu output's positive mean,
/// shifts that class's score.
inline std::string writeHeadModel(const std::string& dir, std::mt19937& rng, int64_t steps, int64_t k, int64_t classes,
                                  int64_t coarseStep, bool innerBias) {
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> w1((size_t)(k * k)), w2((size_t)(k * classes)), b((size_t)classes);
  for (float& v : w1) v = 0.3f * n(rng);
  for (float& v : w2) v = 0.3f * n(rng);
  for (float& v : b) v = 0.1f * n(rng);
  for (int64_t c = 0; c < classes; c += coarseStep) w2[(size_t)c] = 2.4f;
  OnnxBuilder m;
  m.input("x", {-1, steps, k}).output("y", {-1, steps, classes});
  m.initializer("w1", {k, k}, w1);
  m.initializer("w2", {k, classes}, w2);
  m.initializer("b", {classes}, b);
  if (innerBias) m.initializer("b1", {k}, std::vector<float>((size_t)k, 1.f));
  m.node("MatMul", {"x", "w1"}, {"h"}, "inner");
  if (innerBias) m.node("Add", {"h", "b1"}, {"h1"}, "inner_bias");
  m.node("Relu", {innerBias ? "h1" : "h"}, {"r"}, "relu");
  m.node("MatMul", {"r", "w2"}, {"z"}, "head");
  m.node("Add", {"z", "b"}, {"logits"}, "bias");
  OnnxBuilder::attrInt(m.node("Softmax", {"logits"}, {"y"}, "softmax"), "axis", -1);
  const std::string path = dir + "/head.onnx";
  m.save(path);
  return path;
}

/// Sample `s` of x [N, ...], as [1, ...] (float).
inline Tensor sampleOf(const Tensor& x, int64_t s) {
  Shape shape = x.shape();
  shape[0] = 1;
  Tensor one(DType::Float, shape);
  const int64_t per = one.numel();
  std::copy(x.data<float>() + s * per, x.data<float>() + (s + 1) * per, one.data<float>());
  return one;
}

/// Writes x [N, ...] to `npy` and each sample, [1, ...], to dir/in_<s>_0.npy (ONNX Runtime's inputs, runOrtBatch).
inline void writeSamples(const Tensor& x, const std::string& npy, const std::string& dir) {
  ASSERT_TRUE(writeNpy(npy, x));
  std::filesystem::create_directories(dir);
  for (int64_t s = 0; s < x.dim(0); ++s)
    ASSERT_TRUE(writeNpy(dir + "/in_" + std::to_string(s) + "_0.npy", sampleOf(x, s)));
}

/// The one-line error of `rq` loading the quant_cfg.json text `cfg` with `extra` put first in the list "<list>": [
/// of its section "<section>", written to dir/bad_cfg.json; "" (and a test failure) when there is no such list or it
/// loads.
inline std::string badConfigError(std::string cfg, const std::string& section, const std::string& list,
                                  const std::string& extra, const std::string& dir, AnalysisRequest rq) {
  const std::string key = "\"" + list + "\": [";
  const size_t at = cfg.find(key, cfg.find("\"" + section + "\""));
  EXPECT_NE(at, std::string::npos) << section << "." << list;
  if (at == std::string::npos) return "";
  cfg.insert(at + key.size(), extra);
  std::ofstream(dir + "/bad_cfg.json") << cfg;
  rq.loadConfig = dir + "/bad_cfg.json";
  auto refused = runAnalysis(rq);
  EXPECT_FALSE(refused);
  return refused ? "" : refused.status().message();
}

/// PP-LCNetV3's affine block on `x`: HardSwish -> Mul(`a`) -> Add(`bb`) -> `y` (scalar initializers `a`
/// and `bb`), nodes "hswish", "affine_mul", "affine_add" with `suffix`, values h<suffix or 1>, m<...>.
inline void addHardSwishAffine(OnnxBuilder& b, const std::string& x, const std::string& y, const std::string& a,
                               const std::string& bb, const std::string& suffix) {
  const std::string tag = suffix.empty() ? "1" : suffix;
  b.node("HardSwish", {x}, {"h" + tag}, "hswish" + suffix);
  b.node("Mul", {"h" + tag, a}, {"m" + tag}, "affine_mul" + suffix);
  b.node("Add", {"m" + tag, bb}, {y}, "affine_add" + suffix);
}

/// x [4, 3, 12, 12] -> Conv(8, 3x3, bias; channels two decades apart) -> [HardSwish -> Mul(1.2) ->
/// Add(0.03), PP-LCNetV3's affine block, when `affine`] -> depthwise Conv(8, 3x3, bias) -> Conv(6, 1x1)
/// -> y, written to dir/dw.onnx (dir/dw_affine.onnx). The depthwise remedy tests' model.
inline std::string writeDepthwiseModel(const std::string& dir, std::mt19937& rng, bool affine) {
  OnnxBuilder b(affine ? 14 : 13);
  b.input("x", {4, 3, 12, 12}).output("y", {4, 6, 12, 12});
  std::vector<float> w1 = randomValues(8 * 27, rng);
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t i = 0; i < 27; ++i) w1[(size_t)(c * 27 + i)] *= std::pow(10.f, (float)(c % 4) / 1.5f - 1.f);
  b.initializer("w1", {8, 3, 3, 3}, w1);
  b.initializer("b1", {8}, randomValues(8, rng, -0.05f, 0.05f));
  if (affine) {
    b.initializer("a", {}, {1.2f});
    b.initializer("bb", {}, {0.03f});
  }
  b.initializer("wd", {8, 1, 3, 3}, randomValues(8 * 9, rng));
  b.initializer("bd", {8}, randomValues(8, rng, -0.1f, 0.1f));
  b.initializer("w3", {6, 8, 1, 1}, randomValues(48, rng));
  auto& c1 = b.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv1");
  OnnxBuilder::attrInts(c1, "pads", {1, 1, 1, 1});
  std::string dwIn = "c1";
  if (affine) {
    addHardSwishAffine(b, "c1", "a1", "a", "bb", "");
    dwIn = "a1";
  }
  auto& dw = b.node("Conv", {dwIn, "wd", "bd"}, {"d1"}, "dwconv");
  OnnxBuilder::attrInts(dw, "pads", {1, 1, 1, 1});
  OnnxBuilder::attrInt(dw, "group", 8);
  b.node("Conv", {"d1", "w3"}, {"y"}, "conv3");
  const std::string path = dir + (affine ? "/dw_affine.onnx" : "/dw.onnx");
  b.save(path);
  return path;
}

/// x [4,3,12,12] -> conv1 (3x3, 8 channels, ranges 0.1..2) -> HardSwish -> Mul(a) -> Add(b) -> pwconv (1x1,
/// 8 -> 6, output ranges apart again) -> HardSwish -> Mul(a2) -> Add(b2) -> kconv (3x3, 6 -> 4, group 1) -> y,
/// written to dir/pw_affine.onnx. The pointwise smoothing tests' model.
inline std::string writePointwiseModel(const std::string& dir, std::mt19937& rng) {
  OnnxBuilder b(14);
  b.input("x", {4, 3, 12, 12}).output("y", {4, 4, 12, 12});
  std::vector<float> w1 = randomValues(8 * 27, rng);
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t i = 0; i < 27; ++i) w1[(size_t)(c * 27 + i)] *= std::pow(10.f, (float)(c % 4) / 1.5f - 1.f);
  b.initializer("w1", {8, 3, 3, 3}, w1);
  b.initializer("b1", {8}, randomValues(8, rng, -0.05f, 0.05f));
  b.initializer("a", {}, {1.2f});
  b.initializer("bb", {}, {0.03f});
  std::vector<float> w2 = randomValues(6 * 8, rng);
  for (int64_t o = 0; o < 6; ++o)
    for (int64_t c = 0; c < 8; ++c) w2[(size_t)(o * 8 + c)] *= std::pow(10.f, (float)(o % 3) / 1.2f - 0.8f);
  b.initializer("w2", {6, 8, 1, 1}, w2);
  b.initializer("b2", {6}, randomValues(6, rng, -0.05f, 0.05f));
  b.initializer("a2", {}, {0.8f});
  b.initializer("bb2", {}, {-0.02f});
  b.initializer("w3", {4, 6, 3, 3}, randomValues(4 * 6 * 9, rng));
  auto& c1 = b.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv1");
  OnnxBuilder::attrInts(c1, "pads", {1, 1, 1, 1});
  addHardSwishAffine(b, "c1", "a1", "a", "bb", "");
  b.node("Conv", {"a1", "w2", "b2"}, {"p1"}, "pwconv");
  addHardSwishAffine(b, "p1", "a2o", "a2", "bb2", "2");
  auto& c3 = b.node("Conv", {"a2o", "w3"}, {"y"}, "kconv");
  OnnxBuilder::attrInts(c3, "pads", {1, 1, 1, 1});
  const std::string path = dir + "/pw_affine.onnx";
  b.save(path);
  return path;
}

}  // namespace qs::test
