// ONNX Runtime (onnxruntime-node, tests/support/ort_run.mjs) as the reference of the kernel and
// executor tests: runs a model built in code on given feeds and returns every output. Header-only,
// like model_helpers.h: the test binaries link the core, qs_test_support does not.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/io/npy.h"
#include "tests/support/onnx_builder.h"

namespace qs::test {

/// ONNX Runtime's outputs (in the model's output order) for `b` run on `feeds` (in the model's
/// input order), with one thread. A failed run is a test failure and gives fewer outputs.
inline std::vector<Tensor> runOrt(const OnnxBuilder& b, const std::vector<Tensor>& feeds) {
  const std::string dir = makeTempDir("ort_run");
  writeBytes(dir + "/m.onnx", b.bytes());
  for (size_t i = 0; i < feeds.size(); ++i) {
    Status st = writeNpy(dir + "/in_" + std::to_string(i) + ".npy", feeds[i]);
    EXPECT_TRUE(st.isOk()) << st.message();
  }
  const std::string cmd = "ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_run.mjs " +
                          dir + "/m.onnx " + dir + " " + dir + " --threads 1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<Tensor> outs;
  for (int i = 0; std::filesystem::exists(dir + "/out_" + std::to_string(i) + ".npy"); ++i) {
    auto t = readNpy(dir + "/out_" + std::to_string(i) + ".npy");
    EXPECT_TRUE(t) << t.status().message();
    if (t) outs.push_back(std::move(t).value());
  }
  std::filesystem::remove_all(dir);
  return outs;
}

}  // namespace qs::test
