// The one pipeline (core/export/pipeline.h) and the one export bundle (core/export/bundle.h) that
// the CLI and the workbench both call: errors before work, warnings, cancel, settings, and files
// written all or none, byte-identical to what `quantscope export` writes for the same request.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "core/onnx/loader.h"
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
  EXPECT_EQ(bad.message(), "--calibration-method 'kl': expected auto, max, entropy, percentile or mse");
  EXPECT_FALSE(parseQuantizeMode("int4", q));
  EXPECT_EQ(defaultCalibrationMethod(QuantMode::Int8), CalibMethod::Auto);
  EXPECT_EQ(defaultCalibrationMethod(QuantMode::Fp8), CalibMethod::Max);
  EXPECT_TRUE(writesCalibrationCache(QuantMode::Int8));
  EXPECT_FALSE(writesCalibrationCache(QuantMode::Fp8));  // TensorRT's cache is INT8-only
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
                          // --realisations 1: the default of AnalysisRequest and the CLI (auto changes the figures)
                          " --no-layerwise --no-sensitivity --threads 2 --realisations 1 --output-dir " + dir +
                          "/cli >/dev/null 2>&1";
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
  // Refusal before anything is written: the input model as output.
  auto over = buildExportBundle(*run, {"", kCls});
  ASSERT_FALSE(over);
  EXPECT_NE(over.status().message().find("is the input model"), std::string::npos);
  // FP8: quantized.onnx, quant_cfg.json and report.json, no calibration.cache (INT8-only);
  // weights default to float + Q/DQ (ModelOpt's fp8 layout).
  AnalysisRequest fp8 = request;
  fp8.calibration.mode = QuantMode::Fp8;
  auto fp8Run = runAnalysis(fp8);
  ASSERT_TRUE(fp8Run) << fp8Run.status().message();
  EXPECT_EQ(fp8Run->request.dqOnly, std::optional<bool>(false));
  auto fp8Bundle = buildExportBundle(*fp8Run, {dir + "/fp8", ""});
  ASSERT_TRUE(fp8Bundle) << fp8Bundle.status().message();
  std::vector<std::string> names;
  for (const auto& f : fp8Bundle->files) names.push_back(fs::path(f.path).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"quantized.onnx", "quant_cfg.json", "report.json"}));
  EXPECT_EQ(fp8Bundle->opsetAfter, 19);
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

// ---- what TensorRT, PPQ and ModelOpt read: the cache header, unused ranges -------------------

// The exported tensors of a max run, and a tensor of the model that is no quantization point.
struct Points {
  std::vector<std::string> exported;
  std::string other;
};
Points pointsOf(const AnalysisRun& run) {
  Points p;
  const Graph& g = run.model->graph;
  for (ValueId v : exportedActivationTensors(g, *run.result())) p.exported.push_back(g.value(v).name);
  std::set<std::string> all;
  for (const ActivationPoint& a : run.result()->plan.activations) all.insert(g.value(a.value).name);
  for (const Node& n : g.nodes)
    for (ValueId v : n.outputs)
      if (v != kNoValue && p.other.empty() && !all.count(g.value(v).name)) p.other = g.value(v).name;
  return p;
}

bool hasWarning(const AnalysisRun& run, const std::string& needle) {
  for (const auto& w : run.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

TEST_F(Pipeline, CacheHeaderFollowsTheTrtVersionAndTheMethod) {
  request.writesCache = true;
  struct Case {
    CalibMethod method;
    std::optional<TrtVersion> version;
    std::string calibrator, header;
    bool warns;
  } cases[] = {
      {CalibMethod::Max, std::nullopt, "", "TRT-100000-MinMaxCalibration\n", false},
      {CalibMethod::Max, TrtVersion{8, 5, 1}, "", "TRT-8501-MinMaxCalibration\n", false},
      {CalibMethod::Percentile, TrtVersion{8, 6, 1}, "", "TRT-8601-EntropyCalibration2\n", true},
      {CalibMethod::Percentile, TrtVersion{10, 3, 0}, "LegacyCalibration", "TRT-100300-LegacyCalibration\n", false},
  };
  for (const auto& c : cases) {
    AnalysisRequest r = request;
    r.calibration.method = c.method;
    r.trtVersion = c.version;
    r.trtAlgorithm = c.calibrator;
    auto run = runAnalysis(r);
    ASSERT_TRUE(run) << run.status().message();
    auto bundle = buildExportBundle(*run, {dir + "/h", ""});
    ASSERT_TRUE(bundle) << bundle.status().message();
    std::string cacheText, cfg;
    for (const auto& f : bundle->files) {
      if (f.path.ends_with("calibration.cache")) cacheText = f.bytes;
      if (f.path.ends_with("quant_cfg.json")) cfg = f.bytes;
    }
    EXPECT_EQ(cacheText.rfind(c.header, 0), 0u) << c.header << cacheText.substr(0, 40);
    EXPECT_EQ(hasWarning(*run, "TensorRT has no percentile calibrator"), c.warns) << c.header;
    const std::string version = trtVersionName(c.version.value_or(TrtVersion{}));
    EXPECT_EQ(runSettings(*run).at("trt_version"), version);
    EXPECT_NE(cfg.find("\"trt_version\": \"" + version + "\""), std::string::npos) << cfg.substr(0, 200);
  }
  AnalysisRequest bad = request;
  bad.trtAlgorithm = "KL";
  auto refused = prepareRun(bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("--trt-calibrator 'KL'"), std::string::npos);
}

TEST_F(Pipeline, ImportedCacheKeepsItsAlgorithmAndReportsUnusedScales) {
  auto first = runAnalysis(request);
  ASSERT_TRUE(first) << first.status().message();
  Points p = pointsOf(*first);
  ASSERT_FALSE(p.exported.empty());
  ASSERT_FALSE(p.other.empty());
  // A MinMax cache written by hand for TensorRT 8.6, naming a Conv output and a tensor the model lacks.
  std::string text = "TRT-8601-MinMaxCalibration\n";
  for (const auto& name : p.exported) text += name + ": 3c010204\n";
  text += p.other + ": 3c010204\nnot_in_model: 3c010204\n";
  std::ofstream(dir + "/minmax.cache") << text;
  AnalysisRequest r = request;
  r.calibration.method = CalibMethod::Entropy;  // the CLI's default, not given
  r.calibrationCache = dir + "/minmax.cache";
  r.writesCache = true;
  // Without all tensor ranges, the Conv output's scale is read but not used, and said so.
  r.allTensorRanges = false;
  auto pointsOnly = runAnalysis(r);
  ASSERT_TRUE(pointsOnly) << pointsOnly.status().message();
  EXPECT_TRUE(hasWarning(*pointsOnly, "1 tensor(s) not in the model are ignored (first 'not_in_model')"));
  EXPECT_TRUE(hasWarning(*pointsOnly, "minmax.cache: 1 scales not used: not quantization points, and --all-tensor-ranges "
                                      "is off ('" + p.other + "')"));
  // With them (the default), it is written back for TensorRT's implicit INT8, and nothing is unused.
  r.allTensorRanges.reset();
  auto run = runAnalysis(r);
  ASSERT_TRUE(run) << run.status().message();
  EXPECT_TRUE(hasWarning(*run, "1 tensor(s) not in the model are ignored (first 'not_in_model')"));
  for (const auto& w : run->warnings) EXPECT_EQ(w.find("not used"), std::string::npos) << w;
  auto bundle = buildExportBundle(*run, {dir + "/c", ""});
  ASSERT_TRUE(bundle) << bundle.status().message();
  for (const auto& f : bundle->files) {
    if (f.path.ends_with("calibration.cache")) {
      EXPECT_EQ(f.bytes.rfind("TRT-100000-MinMaxCalibration\n", 0), 0u) << f.bytes;
      EXPECT_NE(f.bytes.find(p.other + ": 3c010204\n"), std::string::npos) << f.bytes;
    }
    if (f.path.ends_with("quant_cfg.json")) {
      EXPECT_NE(f.bytes.find("\"method\": \"max\""), std::string::npos);
    }
  }
}

TEST_F(Pipeline, PpqConfigTakesTheGivenMethodAndReportsUnusedRanges) {
  auto first = runAnalysis(request);
  ASSERT_TRUE(first) << first.status().message();
  Points p = pointsOf(*first);
  ASSERT_FALSE(p.other.empty());
  // PPQ's exporter: act_quant_info alone, with a range for a tensor that is no quantization point.
  std::string json = "{\"act_quant_info\": {";
  for (const auto& name : p.exported) json += "\"" + name + "\": 2.5, ";
  json += "\"" + p.other + "\": 4.0}}";
  std::ofstream(dir + "/ppq.json") << json;
  for (bool given : {false, true}) {
    AnalysisRequest r = request;
    r.calibration.method = CalibMethod::Percentile;
    r.methodGiven = given;
    r.loadConfig = dir + "/ppq.json";
    r.writesCache = true;
    r.allTensorRanges = false;
    auto pointsOnly = runAnalysis(r);
    ASSERT_TRUE(pointsOnly) << pointsOnly.status().message();
    EXPECT_TRUE(hasWarning(*pointsOnly, "ppq.json: 1 ranges not used: not quantization points, and --all-tensor-ranges "
                                        "is off ('" + p.other + "')"));
    r.allTensorRanges.reset();
    auto run = runAnalysis(r);
    ASSERT_TRUE(run) << run.status().message();
    for (const auto& w : run->warnings) EXPECT_EQ(w.find("not used"), std::string::npos) << w;
    auto bundle = buildExportBundle(*run, {dir + "/p", ""});
    ASSERT_TRUE(bundle) << bundle.status().message();
    for (const auto& f : bundle->files) {
      if (f.path.ends_with("calibration.cache")) {
        EXPECT_EQ(f.bytes.rfind(given ? "TRT-100000-EntropyCalibration2\n" : "TRT-100000-MinMaxCalibration\n", 0), 0u)
            << given << f.bytes.substr(0, 40);
      }
      if (f.path.ends_with("quant_cfg.json")) {
        EXPECT_NE(f.bytes.find(given ? "\"method\": \"percentile\"" : "\"method\": \"max\""), std::string::npos)
            << given;
      }
    }
  }
}

}  // namespace

namespace {

// For TensorRT's implicit INT8 (issue 18): by default quant_cfg.json and calibration.cache carry a
// range for every float activation tensor the quantized nodes read or write, checked here against
// the graph of cls; the json names its Q/DQ points; a node left out keeps its own tensors out of
// the files (so that TensorRT keeps it in float), and with --all-tensor-ranges off the run names
// the layers TensorRT would run outside INT8.
TEST_F(Pipeline, AllTensorRangesCoverEveryTensorOfTheQuantizedNodes) {
  auto model = loadModel(kCls);
  ASSERT_TRUE(model) << model.status().message();
  const Graph& g = (*model)->graph;
  AnalysisRequest r = request;
  r.config.nodesToExclude = {"p2o.Conv.3$"};
  auto run = runAnalysis(r);
  ASSERT_TRUE(run) << run.status().message();
  for (const auto& w : run->warnings) EXPECT_EQ(w.find("would run outside INT8"), std::string::npos) << w;
  auto bundle = buildExportBundle(*run, {dir + "/all", ""});
  ASSERT_TRUE(bundle) << bundle.status().message();
  nlohmann::json cfg;
  std::string cache;
  for (const auto& f : bundle->files) {
    if (f.path.ends_with("quant_cfg.json")) cfg = nlohmann::json::parse(f.bytes);
    if (f.path.ends_with("calibration.cache")) cache = f.bytes;
  }
  ASSERT_TRUE(cfg.contains("act_quant_info"));
  const auto& act = cfg["act_quant_info"];
  const AnalysisResult& res = *run->result();
  auto isActivation = [&](ValueId v) {
    return v != kNoValue && !g.value(v).constant && g.value(v).dtype == DType::Float;
  };
  NodeId excluded = -1;
  int quantized = 0, checked = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (node.name == "p2o.Conv.3") excluded = (NodeId)n;
    if (!res.plan.nodes[n].quantized) continue;
    ++quantized;
    std::vector<ValueId> tensors(node.inputs.begin(), node.inputs.end());
    tensors.insert(tensors.end(), node.outputs.begin(), node.outputs.end());
    for (ValueId v : tensors) {
      if (!isActivation(v)) continue;
      ++checked;
      const std::string& name = g.value(v).name;
      ASSERT_TRUE(act.contains(name)) << node.name << " reads or writes '" << name << "', which has no range";
      EXPECT_GT(act[name].get<double>(), 0.0) << name;
      EXPECT_NE(cache.find("\n" + name + ": "), std::string::npos) << name << " missing from calibration.cache";
    }
  }
  EXPECT_GT(quantized, 40);
  EXPECT_GT(checked, 100);
  // The left-out Conv's output has no range (its input is also the previous quantized node's
  // output, which keeps one).
  ASSERT_GE(excluded, 0);
  ASSERT_FALSE(res.plan.nodes[(size_t)excluded].quantized);
  EXPECT_FALSE(act.contains(g.value(g.nodes[(size_t)excluded].outputs[0]).name));
  // qdq_points: exactly the tensors quantized.onnx gives a Q/DQ pair.
  std::set<std::string> points, want;
  for (const auto& p : cfg["quantscope"]["qdq_points"]) points.insert(p.get<std::string>());
  for (ValueId v : exportedActivationTensors(g, res)) want.insert(g.value(v).name);
  EXPECT_EQ(points, want);
  EXPECT_GT(act.size(), points.size());

  // Off: only the points, and the layers that would leave INT8 are named.
  r.allTensorRanges = false;
  auto off = runAnalysis(r);
  ASSERT_TRUE(off) << off.status().message();
  bool named = false;
  for (const auto& w : off->warnings)
    named = named || (w.find("quantized layer(s) would run outside INT8") != std::string::npos &&
                      w.find("'p2o.Conv.0'") != std::string::npos);
  EXPECT_TRUE(named);
  auto offBundle = buildExportBundle(*off, {dir + "/off", ""});
  ASSERT_TRUE(offBundle) << offBundle.status().message();
  for (const auto& f : offBundle->files)
    if (f.path.ends_with("quant_cfg.json")) {
      EXPECT_EQ(nlohmann::json::parse(f.bytes)["act_quant_info"].size(), want.size());
    }
}

}  // namespace
