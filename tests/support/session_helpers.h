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

/// `ob`'s model (as name/m.onnx in a new temporary folder) with `x` as its calibration data; members
/// left empty (and a test failure) when either does not load.
inline BuiltModel buildWithData(OnnxBuilder& ob, const Tensor& x, const std::string& name) {
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
  auto d = CalibrationData::open(*out.model, co);
  EXPECT_TRUE(d) << d.status().message();
  if (d) out.data = std::shared_ptr<const CalibrationData>(std::move(d).value());
  return out;
}

struct SessionRun {
  std::unique_ptr<QuantSession> session;
  std::shared_ptr<const AnalysisResult> result;
};

/// A session on `b` with `ao`, calibrated and analysed on b.data (a test failure, and empty members,
/// where a step fails).
inline SessionRun calibrateAndAnalyse(const BuiltModel& b, const AnalysisOptions& ao) {
  SessionRun r;
  auto s = QuantSession::create(b.model, {}, ao);
  EXPECT_TRUE(s) << s.status().message();
  if (!s) return r;
  r.session = std::move(s).value();
  EXPECT_TRUE(r.session->calibrate(*b.data));
  auto res = r.session->analyze(b.data);
  EXPECT_TRUE(res) << res.status().message();
  if (res) r.result = *res;
  return r;
}

}  // namespace qs::test
