// What the analysis tests on models built in code share: the model loaded from an OnnxBuilder with its
// calibration data (one input "x", written as x.npy into a fresh temporary folder), and a session
// calibrated and analysed on it. Header-only, like model_helpers.h.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/analysis/quant_session.h"
#include "core/io/calibration_data.h"
#include "core/io/npy.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

namespace qs::test {

struct BuiltModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<const CalibrationData> data;
};

/// `ob`'s model (as name/m.onnx in a new temporary folder) with `x` as its calibration data, fed
/// `batchSize` samples a batch (0: the data's default); members left empty (and a test failure) when
/// either does not load.
inline BuiltModel buildWithData(const OnnxBuilder& ob, const Tensor& x, const std::string& name, int64_t batchSize = 0) {
  const std::string dir = makeTempDir(name);
  const std::string bytes = ob.bytes();
  BuiltModel out;
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), dir + "/m.onnx", "");
  EXPECT_TRUE(m) << m.status().message();
  if (!m) return out;
  out.model = *m;
  EXPECT_TRUE(writeNpy(dir + "/x.npy", x));
  CalibrationDataOptions co;
  co.path = dir + "/x.npy";
  co.batchSize = batchSize;
  auto d = CalibrationData::open(*out.model, co);
  EXPECT_TRUE(d) << d.status().message();
  if (d) out.data = std::shared_ptr<const CalibrationData>(std::move(d).value());
  return out;
}

struct SessionRun {
  std::unique_ptr<QuantSession> session;
  std::shared_ptr<const AnalysisResult> result;
};

/// A session on `model` with `config` and `ao`, calibrated on `data` (a test failure, and an empty
/// session, where a step fails).
inline SessionRun calibrated(const std::shared_ptr<Model>& model, const CalibrationData& data, const AnalysisOptions& ao,
                             const QuantConfig& config = {}) {
  SessionRun r;
  auto s = QuantSession::create(model, config, ao);
  EXPECT_TRUE(s) << s.status().message();
  if (!s) return r;
  r.session = std::move(s).value();
  EXPECT_TRUE(r.session->calibrate(data));
  return r;
}

/// calibrated(), then analysed on `data` (result empty, and a test failure, where it fails).
inline SessionRun calibrateAndAnalyse(const std::shared_ptr<Model>& model, const std::shared_ptr<const CalibrationData>& data,
                                      const AnalysisOptions& ao, const QuantConfig& config = {}) {
  SessionRun r = calibrated(model, *data, ao, config);
  if (!r.session) return r;
  auto res = r.session->analyze(data);
  EXPECT_TRUE(res) << res.status().message();
  if (res) r.result = *res;
  return r;
}

/// A session on `b` with `ao`, calibrated and analysed on b.data.
inline SessionRun calibrateAndAnalyse(const BuiltModel& b, const AnalysisOptions& ao) {
  return calibrateAndAnalyse(b.model, b.data, ao);
}

}  // namespace qs::test
