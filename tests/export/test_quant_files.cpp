// quant_cfg.json and calibration.cache (core/export/quant_files.h) on their own: formats, the
// one-line errors of damaged files, round trips through the parsers, the model fingerprint.
// The files written from real analyses and reloaded by `quantscope export` are in test_exporter.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/analysis/quant_session.h"
#include "core/export/quant_files.h"
#include "core/numeric/fake_quant.h"
#include "core/onnx/loader.h"
#include "core/quant/calibrator.h"
#include "core/quant/placement.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

// x -> Conv(4 -> 4, 3x3) -> Relu -> Conv(4 -> 2, 1x1) -> y, weights seeded.
std::shared_ptr<Model> twoConvModel(const std::string& tag, float weightScale = 1.f) {
  qs::test::OnnxBuilder b;
  b.input("x", {1, 4, 8, 8}).output("y", {1, 2, 8, 8});
  std::vector<float> w1(4 * 4 * 9), w2(2 * 4);
  uint32_t seed = 7;
  for (float* w : {w1.data(), w2.data()}) {
    const size_t n = w == w1.data() ? w1.size() : w2.size();
    for (size_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      w[i] = weightScale * ((float)(seed >> 8) / (float)(1u << 24) - 0.5f);
    }
  }
  b.initializer("w1", {4, 4, 3, 3}, w1);
  b.initializer("w2", {2, 4, 1, 1}, w2);
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  qs::test::OnnxBuilder::attrInts(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"}, "relu1");
  b.node("Conv", {"r1", "w2"}, {"y"}, "conv2");
  std::string bytes;
  b.proto().SerializeToString(&bytes);
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), tag + ".onnx", "");
  EXPECT_TRUE(m) << m.status().message();
  return m ? std::move(m).value() : nullptr;
}

std::shared_ptr<const AnalysisResult> analysed(const std::shared_ptr<Model>& model, CalibMethod method) {
  AnalysisOptions ao;
  ao.threads = 2;
  ao.layerwise = ao.sensitivity = false;
  ao.calibration.method = method;
  auto s = QuantSession::create(model, {}, ao);
  if (!s) return nullptr;
  CalibrationDataOptions co;
  co.maxSamples = 2;
  co.seed = 3;
  auto data = CalibrationData::open(*model, co);
  if (!data) return nullptr;
  std::shared_ptr<const CalibrationData> shared(std::move(data).value());
  if (!(*s)->calibrate(*shared)) return nullptr;
  auto r = (*s)->analyze(shared);
  return r ? *r : nullptr;
}

}  // namespace

TEST(CalibrationCacheFile, FormatAndCorruptLines) {
  auto ok = parseCalibrationCache("TRT-8601-EntropyCalibration2\nx: 3c010204\nname: with: colon: 3f800000\n", "c.cache");
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ(ok->scales.at("x"), 0.007874016f);  // 1/127
  EXPECT_EQ(ok->scales.at("name: with: colon"), 1.0f);
  struct Bad {
    std::string text, needle;
  } bad[] = {
      {"", "empty"},
      {"not a header\nx: 3c010204\n", "c.cache:1:"},
      {"TRT-8601-MinMaxCalibration\nx 3c010204\n", "c.cache:2:"},
      {"TRT-8601-MinMaxCalibration\nx: 3c0102\n", "8 hex digits"},
      {"TRT-8601-MinMaxCalibration\nx: 3c01020g\n", "8 hex digits"},
      {"TRT-8601-MinMaxCalibration\nx: bc010204\n", "positive"},
      {"TRT-8601-MinMaxCalibration\nx: 7fc00000\n", "positive"},
      {"TRT-8601-MinMaxCalibration\nx: 3c010204\nx: 3c010204\n", "twice"},
  };
  for (const auto& b : bad) {
    auto r = parseCalibrationCache(b.text, "c.cache");
    ASSERT_FALSE(r) << b.text;
    EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
    EXPECT_NE(r.status().message().find(b.needle), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

TEST(CalibrationCacheFile, AmaxForScaleInvertsScaleFromAmax) {
  uint32_t seed = 1;
  for (int i = 0; i < 20000; ++i) {
    seed = seed * 1664525u + 1013904223u;
    float amax = std::ldexp(1.f + (float)(seed >> 8) / (float)(1u << 24), (int)(seed % 40) - 20);
    float scale = scaleFromAmax(amax, QuantMode::Int8);
    EXPECT_EQ(scaleFromAmax(amaxForScale(scale, QuantMode::Int8), QuantMode::Int8), scale) << amax;
  }
}

TEST(CalibrationCacheFile, HeaderNamesTheMethodsAlgorithm) {
  EXPECT_EQ(calibrationCacheHeader(CalibMethod::Entropy), "TRT-100000-EntropyCalibration2");
  EXPECT_EQ(calibrationCacheHeader(CalibMethod::Max), "TRT-100000-MinMaxCalibration");
  // No TensorRT calibrator computes percentile or mse: named as the one trtexec --calib reads with.
  EXPECT_EQ(calibrationCacheHeader(CalibMethod::Percentile), "TRT-100000-EntropyCalibration2");
  EXPECT_EQ(calibrationCacheHeader(CalibMethod::Mse), "TRT-100000-EntropyCalibration2");
  EXPECT_EQ(calibrationCacheHeader(CalibMethod::Mse, TrtVersion{8, 6, 1}, "LegacyCalibration"), "TRT-8601-LegacyCalibration");
  EXPECT_EQ(headerAlgorithm("TRT-8601-MinMaxCalibration"), "MinMaxCalibration");
  EXPECT_EQ(headerAlgorithm("TRT-100300-EntropyCalibration2"), "EntropyCalibration2");
}

TEST(CalibrationCacheFile, TrtVersionGivesTheHeaderNumberOfThatRelease) {
  struct Case {
    const char* text;
    int number;
    const char* name;
  } cases[] = {
      {"8.5", 8501, "8.5.1"},   {"8.6", 8601, "8.6.1"},     {"8.6.1", 8601, "8.6.1"}, {"8.5.3", 8503, "8.5.3"},
      {"10", 100000, "10.0.0"}, {"10.3", 100300, "10.3.0"}, {"10.3.0", 100300, "10.3.0"},
      {"10.9", 100900, "10.9.0"}, {"10.13.2", 101302, "10.13.2"},
  };
  for (const auto& c : cases) {
    TrtVersion v;
    Status st = parseTrtVersion(c.text, v);
    ASSERT_TRUE(st) << c.text << ": " << st.message();
    EXPECT_EQ(trtVersionNumber(v), c.number) << c.text;
    EXPECT_EQ(trtVersionName(v), c.name) << c.text;
    EXPECT_EQ(calibrationCacheHeader(CalibMethod::Max, v), "TRT-" + std::to_string(c.number) + "-MinMaxCalibration");
  }
  EXPECT_EQ(trtVersionNumber(TrtVersion{}), 100000);  // the default: 10
  for (const char* bad : {"11", "11.0", "9", "9.2", "7.2", "8", "8.4", "10.", "10..1", "x", "", "10.3.0.1", "10.100",
                          "-10", "10,3", "1000"}) {
    TrtVersion v{8, 6, 1};
    Status st = parseTrtVersion(bad, v);
    ASSERT_FALSE(st) << bad;
    EXPECT_EQ(st.code(), StatusCode::InvalidArgument) << bad;
    EXPECT_NE(st.message().find("--trt-version '" + std::string(bad) + "'"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
    EXPECT_EQ(trtVersionNumber(v), 8601) << "unchanged on failure: " << bad;
  }
  TrtVersion v;
  Status eleven = parseTrtVersion("11", v);
  EXPECT_NE(eleven.message().find("no calibrators"), std::string::npos) << eleven.message();
  EXPECT_NE(eleven.message().find("quantized.onnx"), std::string::npos) << eleven.message();
}

TEST(QuantCfgJson, WrittenThenParsedGivesTheSameScalesStatesAndSettings) {
  auto model = twoConvModel("cfg");
  ASSERT_TRUE(model);
  auto r = analysed(model, CalibMethod::Percentile);
  ASSERT_TRUE(r);
  QuantConfigContext ctx;
  ctx.modelPath = "cfg.onnx";
  ctx.modelFingerprint = "0123456789abcdef";
  ctx.calibrationData = "random";
  ctx.config.nodesToExclude = {"nothing.*"};
  ctx.dqOnly = false;
  const std::string text = quantConfigJson(*model, *r, ctx);
  EXPECT_EQ(text, quantConfigJson(*model, *r, ctx)) << "deterministic";
  auto saved = parseQuantConfig(text, "quant_cfg.json");
  ASSERT_TRUE(saved) << saved.status().message();
  EXPECT_EQ(saved->toolVersion, kVersion);
  EXPECT_EQ(saved->modelFingerprint, "0123456789abcdef");
  EXPECT_EQ(saved->calibration.method, CalibMethod::Percentile);
  EXPECT_EQ(saved->calibration.mode, QuantMode::Int8);
  EXPECT_EQ(saved->calibrationData, "random");
  EXPECT_EQ(saved->config.nodesToExclude, std::vector<std::string>{"nothing.*"});
  EXPECT_FALSE(saved->dqOnly);
  const Graph& g = model->graph;
  const auto tensors = exportedActivationTensors(g, *r);
  ASSERT_EQ(saved->actAmax.size(), tensors.size());
  ASSERT_GE(tensors.size(), 2u);  // both Conv inputs
  for (ValueId v : tensors) {
    const float amax = saved->actAmax.at(g.value(v).name);
    EXPECT_EQ(scaleFromAmax(amax, QuantMode::Int8), r->activations.at(v).scale) << g.value(v).name;  // bitwise
  }
  ASSERT_EQ(saved->weights.size(), 2u);
  EXPECT_EQ(saved->weights[0].amax, r->weights[0].amax);
  EXPECT_EQ(saved->nodes.size(), g.nodes.size());
  // The saved states reproduce the plan on the same model, and are refused on another one.
  auto same = configForSavedStates(*saved, *model, {}, "quant_cfg.json");
  EXPECT_TRUE(same) << same.status().message();
  auto other = twoConvModel("other", 2.f);
  auto refused = configForSavedStates(*saved, *other, {}, "quant_cfg.json");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("made for another model"), std::string::npos) << refused.status().message();
}

TEST(QuantCfgJson, PpqFileWithActQuantInfoAloneKeepsEveryDefault) {
  auto s = parseQuantConfig(R"({"act_quant_info": {"x": 2.5, "c1": 0.125}})", "ppq.json");
  ASSERT_TRUE(s) << s.status().message();
  EXPECT_EQ(s->actAmax.size(), 2u);
  EXPECT_EQ(s->actAmax.at("x"), 2.5f);
  EXPECT_EQ(s->calibration.mode, QuantMode::Int8);
  EXPECT_TRUE(s->nodes.empty());
  EXPECT_TRUE(s->weights.empty());
  EXPECT_TRUE(s->dqOnly);
  EXPECT_FALSE(s->hasQuantscope);
  EXPECT_FALSE(s->trtVersion);
}

TEST(QuantCfgJson, TrtVersionAndCalibratorAreSavedAndReadBack) {
  auto model = twoConvModel("trt");
  ASSERT_TRUE(model);
  auto r = analysed(model, CalibMethod::Percentile);
  ASSERT_TRUE(r);
  QuantConfigContext ctx;
  ctx.trtVersion = TrtVersion{8, 6, 1};
  ctx.trtAlgorithm = "LegacyCalibration";
  std::string text = quantConfigJson(*model, *r, ctx);
  EXPECT_NE(text.find("\"trt_version\": \"8.6.1\""), std::string::npos) << text;
  auto s = parseQuantConfig(text, "cfg.json");
  ASSERT_TRUE(s) << s.status().message();
  EXPECT_TRUE(s->hasQuantscope);
  ASSERT_TRUE(s->trtVersion);
  EXPECT_EQ(*s->trtVersion, (TrtVersion{8, 6, 1}));
  EXPECT_EQ(s->trtAlgorithm, "LegacyCalibration");
  for (const char* bad : {R"({"act_quant_info": {}, "quantscope": {"export": {"trt_version": "11"}}})",
                          R"({"act_quant_info": {}, "quantscope": {"export": {"trt_calibrator": "Kl"}}})"}) {
    auto b = parseQuantConfig(bad, "cfg.json");
    ASSERT_FALSE(b) << bad;
    EXPECT_NE(b.status().message().find("cfg.json"), std::string::npos) << b.status().message();
  }
}

TEST(QuantCfgJson, DamagedFilesGiveOneLineNamingTheFileAndKey) {
  struct Bad {
    const char* text;
    const char* needle;
  } bad[] = {
      {"{", "cfg.json"},
      {R"({"act_quant_info": {"x": -1}})", "x"},
      {R"({"act_quant_info": {"x": "big"}})", "x"},
      {R"({"act_quant_info": {}, "quantscope": {"mode": "int4"}})", "int4"},
      {R"({"act_quant_info": {}, "quantscope": {"calibration": {"method": "kl"}}})", "kl"},
      {R"({"act_quant_info": {}, "quantscope": {"export": {"dq_only": 3}}})", "dq_only"},
  };
  for (const auto& b : bad) {
    auto r = parseQuantConfig(b.text, "cfg.json");
    ASSERT_FALSE(r) << b.text;
    EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument) << b.text;
    EXPECT_NE(r.status().message().find("cfg.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(b.needle), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
  }
}

TEST(ModelFingerprint, IsFnv1a64OfTheFileBytes) {
  const fs::path dir = qs::test::makeTempDir("fingerprint");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  };
  auto empty = fileFingerprint(write("empty", ""));
  auto a = fileFingerprint(write("a", "a"));
  ASSERT_TRUE(empty && a);
  EXPECT_EQ(*empty, "cbf29ce484222325");  // FNV-1a 64 offset basis
  EXPECT_EQ(*a, "af63dc4c8601ec8c");
  auto missing = fileFingerprint((dir / "none").string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("none"), std::string::npos);
  fs::remove_all(dir);
}
