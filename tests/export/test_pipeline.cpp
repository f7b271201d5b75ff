// The one pipeline (core/export/pipeline.h) and the one export bundle (core/export/bundle.h) that
// the CLI and the workbench both call: errors before work, warnings, cancel, settings, and files
// written all or none, byte-identical to what `quantscope export` writes for the same request.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

const std::string kCls = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Pipeline : ::testing::Test {
  std::string dir, images;
  AnalysisRequest request;
  void SetUp() override {
    if (!fs::exists(kCls)) GTEST_SKIP() << "models missing: run scripts/setup.sh";
    dir = qs::test::makeTempDir("pipeline");
    images = dir + "/images";
    qs::test::writeTextImages(images, 3, 192, 48, 11);
    request.modelPath = kCls;
    request.data.path = images;
    request.data.image.width = 192;
    request.data.image.height = 48;
    request.data.image.mean = {0.5f, 0.5f, 0.5f};
    request.data.image.std = {0.5f, 0.5f, 0.5f};
    request.calibration.method = CalibMethod::Max;
    request.threads = 2;
    request.layerwise = request.sensitivity = false;
  }
  void TearDown() override {
    if (!dir.empty()) fs::remove_all(dir);
  }
};

TEST_F(Pipeline, ErrorsComeBeforeAnyWork) {
  int progressCalls = 0;
  RunCallbacks cb;
  cb.progress = [&](double, const std::string&) { return ++progressCalls, true; };
  AnalysisRequest bad = request;
  bad.data.path = dir + "/no-such-folder";
  auto r = prepareRun(bad, cb);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("no-such-folder"), std::string::npos) << r.status().message();
  bad = request;
  bad.loadConfig = "a.json";
  bad.calibrationCache = "b.cache";
  r = prepareRun(bad, cb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  bad = request;
  bad.modelPath = dir + "/missing.onnx";
  r = prepareRun(bad, cb);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("missing.onnx"), std::string::npos);
  EXPECT_EQ(progressCalls, 0);
}

TEST_F(Pipeline, NamesParseInOnePlaceWithOneMessage) {
  CalibMethod m;
  QuantMode q;
  EXPECT_TRUE(parseCalibrationMethod("mse", m));
  EXPECT_EQ(m, CalibMethod::Mse);
  Status bad = parseCalibrationMethod("kl", m);
  EXPECT_EQ(bad.message(), "--calibration-method 'kl': expected max, entropy, percentile or mse");
  EXPECT_FALSE(parseQuantizeMode("int4", q));
  EXPECT_EQ(defaultCalibrationMethod(QuantMode::Int8), CalibMethod::Entropy);
  EXPECT_EQ(defaultCalibrationMethod(QuantMode::Fp8), CalibMethod::Max);
  EXPECT_TRUE(checkExportable(QuantMode::Int8, "m.onnx"));
  Status fp8 = checkExportable(QuantMode::Fp8, "m.onnx");
  EXPECT_EQ(fp8.code(), StatusCode::Unsupported);
  EXPECT_EQ(fp8.message().rfind("m.onnx: fp8 export", 0), 0u) << fp8.message();
}

TEST_F(Pipeline, RandomDataWarnsLoudlyOnceAndCancelStopsTheRun) {
  // Random inputs need fixed input dims (cls's are symbolic): x[1,4,8,8] -> Conv -> y.
  qs::test::OnnxBuilder b;
  b.input("x", {1, 4, 8, 8}).output("y", {1, 2, 8, 8});
  b.initializer("w", {2, 4, 1, 1}, {0.5f, -0.25f, 1.f, 0.125f, -1.f, 0.75f, 0.3f, -0.6f});
  b.node("Conv", {"x", "w"}, {"y"}, "conv");
  b.save(dir + "/conv.onnx");
  AnalysisRequest random = request;
  random.modelPath = dir + "/conv.onnx";
  random.data = {};
  random.data.maxSamples = 1;
  std::vector<std::pair<std::string, bool>> warnings;
  RunCallbacks cb;
  cb.warning = [&](const std::string& w, bool loud) { warnings.emplace_back(w, loud); };
  cb.cancel = std::make_shared<CancelToken>();
  auto run = prepareRun(random, cb);
  ASSERT_TRUE(run) << run.status().message();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].first, kRandomCalibrationWarning);
  EXPECT_TRUE(warnings[0].second);
  EXPECT_EQ(run->warnings.size(), 1u);
  cb.cancel->cancel();
  Status st = executeRun(*run, cb);
  EXPECT_EQ(st.code(), StatusCode::Cancelled) << st.message();
  EXPECT_FALSE(run->result());
}

TEST_F(Pipeline, BundleIsWhatTheCliWritesByteForByte) {
  auto run = runAnalysis(request);
  ASSERT_TRUE(run) << run.status().message();
  auto bundle = buildExportBundle(*run, {dir + "/lib", ""});
  ASSERT_TRUE(bundle) << bundle.status().message();
  ASSERT_EQ(bundle->files.size(), 4u);
  ASSERT_TRUE(writeBundle(*bundle));
  const std::string cmd = std::string(QS_BINARY) + " export " + kCls + " --calibration-data " + images +
                          " --image-size 192x48 --mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 --calibration-method max" +
                          " --no-layerwise --no-sensitivity --threads 2 --output-dir " + dir + "/cli >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const char* f : {"quantized.onnx", "quant_cfg.json", "calibration.cache", "report.json"}) {
    const std::string a = readFile(dir + "/lib/" + f), b = readFile(dir + "/cli/" + f);
    EXPECT_FALSE(a.empty()) << f;
    EXPECT_TRUE(a == b) << f << " differs between the library and the CLI";
  }
}

TEST_F(Pipeline, BundleIsWrittenAllOrNone) {
  auto run = runAnalysis(request);
  ASSERT_TRUE(run) << run.status().message();
  auto bundle = buildExportBundle(*run, {dir + "/out/a", ""});
  ASSERT_TRUE(bundle) << bundle.status().message();
  // The last file cannot be written: its folder would have to be created under a regular file.
  std::ofstream(dir + "/blocker") << "x";
  bundle->files.back().path = dir + "/blocker/sub/report.json";
  Status st = writeBundle(*bundle);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("blocker"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(dir + "/out")) << "the folders it created are removed with the files";
  // Refusals before anything is written: the input model as output, FP8.
  auto over = buildExportBundle(*run, {"", kCls});
  ASSERT_FALSE(over);
  EXPECT_NE(over.status().message().find("is the input model"), std::string::npos);
  AnalysisRequest fp8 = request;
  fp8.calibration.mode = QuantMode::Fp8;
  auto fp8Run = runAnalysis(fp8);
  ASSERT_TRUE(fp8Run) << fp8Run.status().message();
  auto refused = buildExportBundle(*fp8Run, {dir + "/fp8", ""});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().message(), checkExportable(QuantMode::Fp8, kCls).message());
  EXPECT_FALSE(fs::exists(dir + "/fp8"));
}

TEST_F(Pipeline, SettingsOfTheReportComeFromTheRequest) {
  AnalysisRequest r = request;
  r.config.nodesToExclude = {"conv1.*", "fc$"};
  auto run = prepareRun(r);
  ASSERT_TRUE(run) << run.status().message();
  auto s = runSettings(*run);
  EXPECT_EQ(s.at("calibration_data"), images);
  EXPECT_EQ(s.at("nodes_to_exclude"), "conv1.*,fc$");
  EXPECT_EQ(s.at("layerwise"), "off");
}

}  // namespace
