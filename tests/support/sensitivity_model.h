// A small MatMul chain with one obviously bad node, for the sensitivity tests of analysis and
// export: "m2"'s weights hold one outlier per output column, so per-channel INT8 rounds the rest of
// its column to zero, and its quantization dominates the output error.
#pragma once

#include <random>

#include "core/io/calibration_data.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

namespace qs::test {

inline std::shared_ptr<Model> badNodeChainModel() {
  OnnxBuilder b(13);
  const int64_t n = 32;
  b.input("x", {1, 8, n}).output("y", {1, 8, n});  // M = 8: not a GEMV, so quantizable
  std::mt19937 rng(11);
  for (int k = 1; k <= 4; ++k) {
    std::vector<float> w = randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
    if (k == 2)
      for (int64_t c = 0; c < n; ++c) w[(size_t)(((c * 7) % n) * n + c)] = 40.0f;  // row (7c mod n), column c
    b.initializer("w" + std::to_string(k), {n, n}, w);
    const std::string in = k == 1 ? "x" : "r" + std::to_string(k - 1);
    const std::string mm = k == 4 ? "y" : "h" + std::to_string(k);
    b.node("MatMul", {in, "w" + std::to_string(k)}, {mm}, "m" + std::to_string(k));
    if (k < 4) b.node("Tanh", {mm}, {"r" + std::to_string(k)}, "t" + std::to_string(k));
  }
  return builtModel(b, "bad_node_chain.onnx");
}

/// Random inputs for `model`, `samples` of them, one per batch.
inline std::shared_ptr<const CalibrationData> randomData(const Model& model, int64_t samples) {
  CalibrationDataOptions co;
  co.maxSamples = samples;
  co.batchSize = 1;
  co.seed = 3;
  auto d = CalibrationData::open(model, co);
  EXPECT_TRUE(d) << d.status().message();
  return d ? std::shared_ptr<const CalibrationData>(std::move(d).value()) : nullptr;
}

}  // namespace qs::test
