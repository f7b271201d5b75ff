// What the remedy tests (tests/export/test_remedies*.cpp) share: a shell command's exit code, a text file's contents, the
// request they run (max calibration, 2 threads, no sensitivity), the export of a run, and a model
// file or model run on one input "x". Header-only, like model_helpers.h.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>

#include "core/exec/executor.h"
#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "core/onnx/loader.h"

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

}  // namespace qs::test
