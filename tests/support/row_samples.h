// What the mixed-precision tests (tests/export/test_high_precision*.cpp) share: a model built in code
// whose one input takes rows [N, K], its samples written as ONNX Runtime's batch runner reads them and
// as calibration data, ONNX Runtime run on them (tests/support/ort_batch.mjs, its log beside the
// output folder), and the SNR of per-sample outputs computed by hand. Header-only, like model_helpers.h.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/io/calibration_data.h"
#include "core/io/npy.h"
#include "core/onnx/loader.h"

namespace qs::test {

/// Writes each of `rows` (one sample, K values each) as dir/in_<s>_0.npy ([1, K]) and all of them as
/// dir/calib.npy ([S, K]), then loads the model at `path` into `model` and opens dir/calib.npy for it,
/// batch 1, into `data`. A failure is a test failure and leaves `model` or `data` null.
inline void writeRowSamples(const std::vector<std::vector<float>>& rows, const std::string& dir, const std::string& path,
                            std::shared_ptr<Model>& model, std::shared_ptr<const CalibrationData>& data) {
  const int64_t k = rows.empty() ? 0 : (int64_t)rows[0].size();
  Tensor stacked(DType::Float, {(int64_t)rows.size(), k});
  for (size_t s = 0; s < rows.size(); ++s) {
    Tensor one(DType::Float, {1, k});
    std::copy(rows[s].begin(), rows[s].end(), one.data<float>());
    std::copy(rows[s].begin(), rows[s].end(), stacked.data<float>() + (int64_t)s * k);
    EXPECT_TRUE(writeNpy(dir + "/in_" + std::to_string(s) + "_0.npy", one));
  }
  EXPECT_TRUE(writeNpy(dir + "/calib.npy", stacked));
  auto loaded = loadModel(path);
  EXPECT_TRUE(loaded) << loaded.status().message();
  if (!loaded) return;
  model = *loaded;
  CalibrationDataOptions co;
  co.path = dir + "/calib.npy";
  co.batchSize = 1;
  auto d = CalibrationData::open(*model, co);
  EXPECT_TRUE(d) << d.status().message();
  if (d) data = std::shared_ptr<const CalibrationData>(std::move(d).value());
}

/// tests/support/ort_batch.mjs: ONNX Runtime runs `model` on inDir/in_<s>_0.npy for s < `samples` into
/// outDir/out_<s>_<k>.npy on `threads` threads with `extra` flags ("--level disabled --disable-qdq"), its
/// output in outDir.log. The exit code.
inline int runOrtRows(const std::string& model, const std::string& inDir, const std::string& outDir, int samples,
                      int threads, const std::string& extra = "") {
  const std::string cmd = "ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_batch.mjs " +
                          model + " " + inDir + " " + outDir + " --samples " + std::to_string(samples) + " --threads " +
                          std::to_string(threads) + " " + extra + " > " + outDir + ".log 2>&1";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/// The SNR in dB of `got` against `ref`, both per sample, per output value.
inline double rowsSnrDb(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<double>>& got) {
  double y2 = 0, d2 = 0;
  for (size_t s = 0; s < ref.size(); ++s)
    for (size_t n = 0; n < ref[s].size(); ++n) {
      y2 += ref[s][n] * ref[s][n];
      d2 += (ref[s][n] - got[s][n]) * (ref[s][n] - got[s][n]);
    }
  return 10 * std::log10(y2 / d2);
}

}  // namespace qs::test
