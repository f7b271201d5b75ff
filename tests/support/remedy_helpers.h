// What the remedy tests (tests/export/test_remedies*.cpp) share: a shell command's exit code, a text file's contents, the
// request they run (max calibration, 2 threads, no sensitivity), the export of a run, and a model
// file or model run on one input "x". Header-only, like model_helpers.h.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/exec/executor.h"
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
    b.node("HardSwish", {"c1"}, {"h1"}, "hswish");
    b.node("Mul", {"h1", "a"}, {"m1"}, "affine_mul");
    b.node("Add", {"m1", "bb"}, {"a1"}, "affine_add");
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

}  // namespace qs::test
