// A small MatMul chain with one obviously bad node, for the sensitivity tests of analysis and
// export: "m2"'s weights hold one outlier per output column, so per-channel INT8 rounds the rest of
// its column to zero, and its quantization dominates the output error.
#pragma once

#include <cmath>
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

// Three MatMuls on one input x (same weight distribution, scaled): "x" (weights x sqrt 3) feeds
// both outputs, "y" (x sqrt 5) only y1, "z" (x sqrt 5) only y2; y1 = hx + hy, y2 = hx + hz. The
// output noise powers are then about 3 + 5 on each output. The greedy pass excludes "x" first (it
// helps both outputs: 5 of 8 left on each, +2.0 dB, where excluding "y" or "z" helps only one), then
// needs both "y" and "z" to pass +3 dB; with "y" and "z" excluded, "x" alone (3 of 8: +4.3 dB) is
// harmless, and the backward pass re-includes it (tests/analysis/test_fallback_curve.cpp,
// tests/export/test_fallback_backward_export.cpp).
inline OnnxBuilder sharedBranchBuilder() {
  OnnxBuilder b(13);
  const int64_t n = 64;
  b.input("x", {1, 16, n}).output("y1", {1, 16, n}).output("y2", {1, 16, n});
  std::mt19937 rng(7);
  const float scale[3] = {std::sqrt(3.0f), std::sqrt(5.0f), std::sqrt(5.0f)};
  const char* names[3] = {"x", "y", "z"};
  for (int i = 0; i < 3; ++i) {
    std::vector<float> w = randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
    for (float& v : w) v *= scale[i];
    b.initializer(std::string("w") + names[i], {n, n}, w);
    b.node("MatMul", {"x", std::string("w") + names[i]}, {std::string("h") + names[i]}, names[i]);
  }
  b.node("Add", {"hx", "hy"}, {"y1"}, "add1");
  b.node("Add", {"hx", "hz"}, {"y2"}, "add2");
  return b;
}

inline std::shared_ptr<Model> sharedBranchModel() { return builtModel(sharedBranchBuilder(), "shared_branch.onnx"); }

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
