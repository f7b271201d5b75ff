// The export end to end (issue #4): quantized.onnx passes the ONNX checker and runs in ONNX
// Runtime with the SNR the analysis predicted (PaddleOCR cls and PP-OCRv4 det, rendered text
// images, every calibration method, with exclusions); the Q/DQ placement on a small built model;
// calibration-cache and quant_cfg.json round trips; bad inputs give one-line errors and no files.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/analysis/quant_session.h"
#include "core/io/npy.h"
#include "core/export/exporter.h"
#include "core/onnx/loader.h"
#include "core/export/quant_files.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
using qs::test::OnnxBuilder;
namespace fs = std::filesystem;

namespace {

const std::string kCls = "ch_ppocr_mobile_v2.0_cls_infer.onnx";
const std::string kDet = "ch_PP-OCRv4_det_infer.onnx";

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

onnx::ModelProto parseModel(const std::string& bytes) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

int runCommand(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The ORT runner over several samples: in_<s>_<i>.npy -> out_<s>_<i>.npy.
int runOrt(const std::string& model, const std::string& inDir, const std::string& outDir, int samples,
           const std::string& extra) {
  std::string cmd = "ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_batch.mjs " + model +
                    " " + inDir + " " + outDir + " --samples " + std::to_string(samples) + " --threads 2 " + extra;
  return runCommand(cmd);
}

// A PaddleOCR model with rendered text images as calibration data, its inputs written for ORT and
// ORT's FP32 outputs computed once.
struct ModelCase {
  std::shared_ptr<Model> model;
  std::string path, dir, imageDir;
  std::shared_ptr<const CalibrationData> data;
  int samples = 0;
  std::array<float, 3> mean{}, std{};
  int width = 0, height = 0;
};

std::map<std::string, std::unique_ptr<ModelCase>>& caseTable() {
  static std::map<std::string, std::unique_ptr<ModelCase>> cases;
  return cases;
}

// Removes the cases' folders when every test of the process has run.
struct CaseCleanup : ::testing::Environment {
  void TearDown() override {
    for (auto& [file, c] : caseTable())
      if (!c->dir.empty()) fs::remove_all(c->dir);
  }
};
::testing::Environment* const g_cleanup = ::testing::AddGlobalTestEnvironment(new CaseCleanup);

ModelCase* openCase(const std::string& file) {
  auto& cases = caseTable();
  auto it = cases.find(file);
  if (it != cases.end()) return it->second->model ? it->second.get() : nullptr;
  auto c = std::make_unique<ModelCase>();
  ModelCase* out = c.get();
  cases[file] = std::move(c);
  out->path = std::string(QS_MODELS_DIR) + "/" + file;
  if (!fs::exists(out->path)) return nullptr;
  const bool det = file == kDet;
  out->width = det ? 256 : 192;
  out->height = det ? 256 : 48;
  out->samples = det ? 3 : 6;
  out->mean = det ? std::array<float, 3>{0.485f, 0.456f, 0.406f} : std::array<float, 3>{0.5f, 0.5f, 0.5f};
  out->std = det ? std::array<float, 3>{0.229f, 0.224f, 0.225f} : std::array<float, 3>{0.5f, 0.5f, 0.5f};
  auto m = loadModel(out->path);
  EXPECT_TRUE(m) << m.status().message();
  if (!m) return nullptr;
  out->dir = qs::test::makeTempDir("export");
  out->imageDir = out->dir + "/images";
  qs::test::writeTextImages(out->imageDir, out->samples, out->width, out->height, 7);
  CalibrationDataOptions co;
  co.path = out->imageDir;
  co.image.width = out->width;
  co.image.height = out->height;
  co.image.mean = out->mean;
  co.image.std = out->std;
  co.batchSize = 1;
  auto d = CalibrationData::open(**m, co);
  EXPECT_TRUE(d) << d.status().message();
  if (!d) return nullptr;
  out->data = std::shared_ptr<const CalibrationData>(std::move(d).value());
  for (int64_t s = 0; s < out->data->batchCount(); ++s) {
    auto feeds = out->data->batch(s);
    EXPECT_TRUE(feeds);
    for (size_t i = 0; i < feeds->size(); ++i)
      EXPECT_TRUE(writeNpy(out->dir + "/in_" + std::to_string(s) + "_" + std::to_string(i) + ".npy", (*feeds)[i].tensor));
  }
  EXPECT_EQ(runOrt(out->path, out->dir, out->dir + "/fp32", out->samples, ""), 0);
  out->model = *m;
  return out;
}

std::unique_ptr<QuantSession> analysedSession(const ModelCase& c, CalibMethod method, const QuantConfig& cfg = {}) {
  AnalysisOptions ao;
  ao.calibration.method = method;
  ao.threads = 2;
  ao.layerwise = false;
  ao.sensitivity = false;
  auto s = QuantSession::create(c.model, cfg, ao);
  EXPECT_TRUE(s) << s.status().message();
  if (!s) return nullptr;
  Status st = (*s)->calibrate(*c.data);
  EXPECT_TRUE(st) << st.message();
  auto r = (*s)->analyze(c.data);
  EXPECT_TRUE(r) << r.status().message();
  return std::move(s).value();
}

ExportOptions exportOptions(const ModelCase& c, const QuantSession& s) {
  ExportOptions eo;
  auto feeds = c.data->batch(0);
  EXPECT_TRUE(feeds);
  auto ranks = observeRanks(s.executor(), *feeds);
  EXPECT_TRUE(ranks) << ranks.status().message();
  eo.observedRanks = *ranks;
  return eo;
}

// Writes the exported model, checks it, and returns the SNR of ORT's outputs on it against ORT's
// FP32 outputs over every sample, per output, for one ORT configuration.
std::vector<double> ortSnr(const ModelCase& c, const std::string& qModel, const std::string& tag, const std::string& ortFlags) {
  std::string outDir = c.dir + "/q_" + tag;
  EXPECT_EQ(runOrt(qModel, c.dir, outDir, c.samples, ortFlags), 0) << qModel << " " << ortFlags;
  std::vector<double> snr;
  const size_t outputs = c.model->graph.outputs.size();
  for (size_t i = 0; i < outputs; ++i) {
    ErrorAccumulator acc;
    for (int s = 0; s < c.samples; ++s) {
      std::string name = "/out_" + std::to_string(s) + "_" + std::to_string(i) + ".npy";
      auto ref = readNpy(c.dir + "/fp32" + name);
      auto got = readNpy(outDir + name);
      EXPECT_TRUE(ref && got) << name;
      if (!ref || !got) return {};
      acc.add(*ref, *got);
    }
    snr.push_back(acc.metrics().snrDb);
  }
  fs::remove_all(outDir);
  return snr;
}

// The fidelity check of one export: predicted vs ORT with Q/DQ run as written (no fusion: exactly
// the simulation's arithmetic) and with ORT's default optimisations (what a user gets).
void expectFidelity(const std::string& file, CalibMethod method, const QuantConfig& cfg, const std::string& tag,
                    bool dqOnly = true) {
  ModelCase* c = openCase(file);
  if (!c) GTEST_SKIP() << file << " missing: run scripts/setup.sh";
  auto s = analysedSession(*c, method, cfg);
  ASSERT_TRUE(s);
  auto r = s->result();
  ExportOptions eo = exportOptions(*c, *s);
  eo.dqOnly = dqOnly;
  auto ex = buildQuantizedModel(c->path, *c->model, *r, eo);
  ASSERT_TRUE(ex) << ex.status().message();
  std::string qPath = c->dir + "/" + tag + ".onnx";
  qs::test::writeBytes(qPath, ex->modelBytes);
  Status chk = checkOnnxModelFile(qPath);
  EXPECT_TRUE(chk) << chk.message();
  EXPECT_EQ(ex->opsetAfter, 13);
  auto exact = ortSnr(*c, qPath, tag + "_exact", "--level basic --disable-qdq");
  auto all = ortSnr(*c, qPath, tag + "_all", "--level all");
  ASSERT_EQ(exact.size(), r->outputs.size());
  ASSERT_EQ(all.size(), r->outputs.size());
  for (size_t i = 0; i < r->outputs.size(); ++i) {
    double predicted = r->outputs[i].metrics.snrDb;
    std::printf("FIDELITY %-4s %-10s %-12s output %-20s predicted %7.3f dB | ORT exact %7.3f (gap %+.3f) | ORT all %7.3f (gap %+.3f)\n",
                file == kCls ? "cls" : "det", calibMethodName(method).c_str(), tag.c_str(), r->outputs[i].name.c_str(),
                predicted, exact[i], exact[i] - predicted, all[i], all[i] - predicted);
    EXPECT_NEAR(exact[i], predicted, 0.5) << file << " " << tag << " output " << r->outputs[i].name;
    EXPECT_NEAR(all[i], predicted, 0.5) << file << " " << tag << " output " << r->outputs[i].name;
  }
  fs::remove(qPath);
}

// A few quantized nodes spread over the graph, excluded by exact name.
QuantConfig someExclusions(const ModelCase& c) {
  QuantPlan plan;
  AnalysisOptions ao;
  auto s = QuantSession::create(c.model, {}, ao);
  EXPECT_TRUE(s);
  std::vector<std::string> names;
  for (NodeId id : c.model->graph.topoOrder)
    if ((*s)->plan().nodes[(size_t)id].quantized) names.push_back(c.model->graph.nodes[(size_t)id].name);
  QuantConfig cfg;
  for (size_t i : {size_t(0), names.size() / 3, names.size() / 2, names.size() - 1}) {
    std::string n;
    for (char ch : names[i]) n += (std::string(".()[]+*?^$|\\{}").find(ch) != std::string::npos) ? std::string("\\") + ch : std::string(1, ch);
    cfg.nodesToExclude.push_back(n + "$");
  }
  return cfg;
}

class Fidelity : public ::testing::TestWithParam<std::tuple<std::string, CalibMethod>> {};

TEST_P(Fidelity, OrtMatchesPredictedSnr) {
  auto [file, method] = GetParam();
  expectFidelity(file, method, {}, calibMethodName(method));
}

INSTANTIATE_TEST_SUITE_P(PaddleOcr, Fidelity,
                         ::testing::Combine(::testing::Values(kCls, kDet),
                                            ::testing::Values(CalibMethod::Max, CalibMethod::Entropy,
                                                              CalibMethod::Percentile, CalibMethod::Mse)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == kCls ? "cls_" : "det_") +
                                  calibMethodName(std::get<1>(info.param));
                         });

TEST(ExportFidelity, ClsWithExclusions) {
  ModelCase* c = openCase(kCls);
  if (!c) GTEST_SKIP() << "models missing";
  expectFidelity(kCls, CalibMethod::Entropy, someExclusions(*c), "excluded");
}

TEST(ExportFidelity, DetWithExclusions) {
  ModelCase* c = openCase(kDet);
  if (!c) GTEST_SKIP() << "models missing";
  expectFidelity(kDet, CalibMethod::Entropy, someExclusions(*c), "excluded");
}

TEST(ExportFidelity, ClsFloatWeightsWithQdqPairs) {
  expectFidelity(kCls, CalibMethod::Max, {}, "no_dq_only", /*dqOnly=*/false);
}

// ---- structure of quantized.onnx on a small built model ----------------------------------------

// x -> conv1 -> y1 (graph output, also read by conv2 and conv3) ; conv2, conv3 -> add -> z
std::string buildSmallModel(const std::string& dir, int64_t opset) {
  OnnxBuilder b(opset);
  b.input("x", {1, 2, 6, 6}).output("y1", {1, 4, 6, 6}).output("z", {1, 4, 6, 6});
  std::vector<float> w1(4 * 2 * 9), w2(4 * 4 * 9), w3(4 * 4 * 9);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = std::sin(0.7f * (float)i);
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = std::cos(0.3f * (float)i);
  for (size_t i = 0; i < w3.size(); ++i) w3[i] = std::sin(0.11f * (float)i + 1.f);
  b.initializer("w1", {4, 2, 3, 3}, w1);
  b.initializer("w2", {4, 4, 3, 3}, w2);
  b.initializer("w3", {4, 4, 3, 3}, w3);
  for (auto [name, in, w, out] : {std::array<const char*, 4>{"conv1", "x", "w1", "y1"}, {"conv2", "y1", "w2", "y2"},
                                  {"conv3", "y1", "w3", "y3"}}) {
    auto& n = b.node("Conv", {in, w}, {out}, name);
    OnnxBuilder::attrInts(n, "pads", {1, 1, 1, 1});
  }
  b.node("Relu", {"y3"}, {"y3r"}, "relu3");
  b.node("Add", {"y2", "y3r"}, {"z"}, "add");
  std::string path = dir + "/small.onnx";
  b.save(path);
  return path;
}

struct SmallExport {
  onnx::ModelProto proto;
  std::shared_ptr<const AnalysisResult> result;
};

SmallExport exportSmall(const std::string& dir, int64_t opset, bool dqOnly) {
  std::string path = buildSmallModel(dir, opset);
  auto m = loadModel(path);
  EXPECT_TRUE(m) << m.status().message();
  AnalysisOptions ao;
  ao.threads = 1;
  auto s = QuantSession::create(*m, {}, ao);
  EXPECT_TRUE(s);
  CalibrationDataOptions co;
  co.maxSamples = 2;
  auto data = CalibrationData::open(**m, co);
  EXPECT_TRUE(data);
  std::shared_ptr<const CalibrationData> d(std::move(data).value());
  EXPECT_TRUE((*s)->calibrate(*d));
  auto r = (*s)->analyze(d);
  EXPECT_TRUE(r) << r.status().message();
  ExportOptions eo;
  eo.dqOnly = dqOnly;
  auto ex = buildQuantizedModel(path, **m, **r, eo);
  EXPECT_TRUE(ex) << ex.status().message();
  return {parseModel(ex->modelBytes), *r};
}

const onnx::NodeProto* findNode(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& n : g.node())
    if (n.name() == name) return &n;
  return nullptr;
}

TEST(ExportStructure, QdqOnNodeInputsSharedPairsAndFloatGraphOutput) {
  std::string dir = qs::test::makeTempDir("export-small");
  SmallExport e = exportSmall(dir, 13, true);
  const auto& g = e.proto.graph();
  // conv1's input x and the shared y1 each get one pair; conv2 and conv3 read the same DQ output.
  ASSERT_TRUE(findNode(g, "x_QuantizeLinear"));
  ASSERT_TRUE(findNode(g, "y1_QuantizeLinear"));
  ASSERT_TRUE(findNode(g, "y1_DequantizeLinear"));
  int yPairs = 0;
  for (const auto& n : g.node()) yPairs += n.op_type() == "QuantizeLinear" && n.input(0) == "y1";
  EXPECT_EQ(yPairs, 1);
  EXPECT_EQ(findNode(g, "conv2")->input(0), "y1_DequantizeLinear_Output");
  EXPECT_EQ(findNode(g, "conv3")->input(0), "y1_DequantizeLinear_Output");
  // The graph output y1 stays the float tensor conv1 produces.
  EXPECT_EQ(g.output(0).name(), "y1");
  EXPECT_EQ(findNode(g, "conv1")->output(0), "y1");
  // Weights: int8 initializers + per-channel DequantizeLinear(axis 0); the float weights are gone.
  std::map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : g.initializer()) inits[t.name()] = &t;
  for (const char* w : {"w1", "w2", "w3"}) {
    EXPECT_FALSE(inits.count(w)) << w;
    ASSERT_TRUE(inits.count(std::string(w) + "_quantized")) << w;
    EXPECT_EQ(inits[std::string(w) + "_quantized"]->data_type(), onnx::TensorProto::INT8);
    EXPECT_EQ(inits[std::string(w) + "_scale"]->dims(0), 4);
    const auto* dq = findNode(g, std::string(w) + "_DequantizeLinear");
    ASSERT_TRUE(dq);
    ASSERT_EQ(dq->attribute_size(), 1);
    EXPECT_EQ(dq->attribute(0).i(), 0);
  }
  // Activation scales: the session's, zero point int8 0, scalar.
  const auto* xs = inits.at("x_scale");
  float s;
  std::memcpy(&s, xs->raw_data().data(), 4);
  auto small = loadModel(dir + "/small.onnx");
  ASSERT_TRUE(small);
  EXPECT_EQ(s, e.result->activations.at((*small)->graph.findValue("x")).scale);
  EXPECT_EQ(inits.at("x_zero_point")->data_type(), onnx::TensorProto::INT8);
  EXPECT_EQ(inits.at("x_zero_point")->dims_size(), 0);
  // The residual Add: only the skip input (conv2's branch or relu's) has a pair, not both.
  const auto* add = findNode(g, "add");
  int quantizedInputs = (add->input(0).find("_DequantizeLinear_Output") != std::string::npos) +
                        (add->input(1).find("_DequantizeLinear_Output") != std::string::npos);
  EXPECT_LE(quantizedInputs, 1);
  fs::remove_all(dir);
}

TEST(ExportStructure, OldOpsetRaisedAndFloatWeightsWithQdq) {
  std::string dir = qs::test::makeTempDir("export-small");
  SmallExport e = exportSmall(dir, 11, false);
  EXPECT_EQ(e.proto.opset_import(0).version(), 13);
  const auto& g = e.proto.graph();
  const auto* q = findNode(g, "w2_QuantizeLinear");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->input(0), "w2");
  bool floatKept = false;
  for (const auto& t : g.initializer()) floatKept |= t.name() == "w2" && t.data_type() == onnx::TensorProto::FLOAT;
  EXPECT_TRUE(floatKept);
  std::string path = dir + "/q.onnx";
  qs::test::writeBytes(path, e.proto.SerializeAsString());
  EXPECT_TRUE(checkOnnxModelFile(path));
  fs::remove_all(dir);
}

TEST(ExportStructure, Fp8IsRefusedClearly) {
  std::string dir = qs::test::makeTempDir("export-small");
  std::string path = buildSmallModel(dir, 13);
  auto m = loadModel(path);
  ASSERT_TRUE(m);
  AnalysisResult r;
  r.plan.mode = QuantMode::Fp8;
  auto ex = buildQuantizedModel(path, **m, r);
  ASSERT_FALSE(ex);
  EXPECT_EQ(ex.status().code(), StatusCode::Unsupported);
  EXPECT_NE(ex.status().message().find("opset 19"), std::string::npos) << ex.status().message();
  fs::remove_all(dir);
}

// ---- file round trips -----------------------------------------------------------------------------

TEST(CalibrationCacheFile, WrittenThenLoadedGivesIdenticalScales) {
  ModelCase* c = openCase(kCls);
  if (!c) GTEST_SKIP() << "models missing";
  for (CalibMethod method : {CalibMethod::Entropy, CalibMethod::Percentile}) {
    auto s = analysedSession(*c, method);
    ASSERT_TRUE(s);
    auto r = s->result();
    std::string text = calibrationCacheText(*c->model, *r);
    EXPECT_EQ(text.substr(0, text.find('\n')), calibrationCacheHeader(method));
    auto cache = parseCalibrationCache(text, "calibration.cache");
    ASSERT_TRUE(cache) << cache.status().message();
    std::map<std::string, float> amax;
    for (const auto& [name, scale] : cache->scales) amax[name] = amaxForScale(scale, QuantMode::Int8);
    AnalysisOptions ao;
    ao.threads = 2;
    ao.layerwise = ao.sensitivity = false;
    auto fresh = QuantSession::create(c->model, {}, ao);
    ASSERT_TRUE(fresh);
    ASSERT_TRUE((*fresh)->setActivationAmax(amax));
    auto r2 = (*fresh)->analyze(c->data);
    ASSERT_TRUE(r2);
    const Graph& g = c->model->graph;
    auto tensors = exportedActivationTensors(g, *r);
    ASSERT_EQ(tensors.size(), cache->scales.size());
    for (ValueId v : tensors) {
      ASSERT_TRUE((*r2)->activations.count(v)) << g.value(v).name;
      EXPECT_EQ((*r2)->activations.at(v).scale, r->activations.at(v).scale) << g.value(v).name;  // bitwise
    }
    EXPECT_EQ((*r2)->outputs[0].metrics.snrDb, r->outputs[0].metrics.snrDb);
    // And the exported model is the same bytes.
    ExportOptions eo = exportOptions(*c, *s);
    auto a = buildQuantizedModel(c->path, *c->model, *r, eo);
    auto b = buildQuantizedModel(c->path, *c->model, **r2, eo);
    ASSERT_TRUE(a && b);
    EXPECT_TRUE(a->modelBytes == b->modelBytes);
  }
}

// ---- the CLI: config reload byte for byte, bad inputs ------------------------------------------------

struct Outcome {
  int exitCode = -1;
  std::string err;
};

Outcome quantscope(const std::string& args, const std::string& errFile) {
  int code = runCommand(std::string(QS_BINARY) + " " + args + " >/dev/null 2>" + errFile);
  return {code, readFile(errFile)};
}

int lineCount(const std::string& s) { return (int)std::count(s.begin(), s.end(), '\n'); }

struct ExportCli : ::testing::Test {
  ModelCase* c = nullptr;
  std::string dir;
  std::string common;
  void SetUp() override {
    c = openCase(kCls);
    if (!c) GTEST_SKIP() << "models missing";
    dir = qs::test::makeTempDir("export-cli");
    common = c->path + " --calibration-data " + c->imageDir + " --image-size 192x48 --mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 " +
             "--no-sensitivity --no-layerwise --threads 2";
  }
  void TearDown() override {
    if (!dir.empty()) fs::remove_all(dir);
  }
};

TEST_F(ExportCli, ConfigReloadReproducesTheModelByteForByte) {
  Outcome a = quantscope("export " + common + " --calibration-method percentile --nodes-to-exclude 'p2o.Conv.1$' --output-dir " +
                             dir + "/a",
                         dir + "/a.err");
  ASSERT_EQ(a.exitCode, 0) << a.err;
  for (const char* f : {"quantized.onnx", "quant_cfg.json", "calibration.cache", "report.json"})
    EXPECT_TRUE(fs::exists(dir + "/a/" + f)) << f;
  EXPECT_TRUE(checkOnnxModelFile(dir + "/a/quantized.onnx"));
  std::string cfg = readFile(dir + "/a/quant_cfg.json");
  EXPECT_EQ(cfg.find("{\n    \"act_quant_info\": {"), 0u);
  EXPECT_NE(cfg.find("excluded by --nodes-to-exclude 'p2o.Conv.1$'"), std::string::npos);
  // Percentile: TensorRT has no such calibrator; the header names the one trtexec reads with (--trt-version 10 by default).
  EXPECT_EQ(readFile(dir + "/a/calibration.cache").rfind("TRT-100000-EntropyCalibration2\n", 0), 0u);
  EXPECT_NE(readFile(dir + "/a/report.json").find("\"snr_db\""), std::string::npos);

  // Reload: no calibration (the data, two samples here, only feeds report.json's analysis; had it
  // been calibrated on, the percentile scales would differ): same model, byte for byte.
  Outcome b = quantscope("export " + common + " --calibration-size 2 --load-config " + dir + "/a/quant_cfg.json " +
                             "--output-dir " + dir + "/b",
                         dir + "/b.err");
  ASSERT_EQ(b.exitCode, 0) << b.err;
  EXPECT_TRUE(readFile(dir + "/a/quantized.onnx") == readFile(dir + "/b/quantized.onnx"));
  EXPECT_EQ(readFile(dir + "/a/calibration.cache"), readFile(dir + "/b/calibration.cache"));
  // ModelOpt's flags: the model alone from the cache, same exclusions: same bytes again.
  Outcome d = quantscope("export " + common + " --nodes_to_exclude 'p2o.Conv.1$' --calibration_cache_path " + dir +
                             "/a/calibration.cache --output_path " + dir + "/model_only.onnx",
                         dir + "/d.err");
  ASSERT_EQ(d.exitCode, 0) << d.err;
  EXPECT_TRUE(readFile(dir + "/a/quantized.onnx") == readFile(dir + "/model_only.onnx"));
  EXPECT_FALSE(fs::exists(dir + "/quant_cfg.json"));
}

TEST_F(ExportCli, ExternalDataRunsTheSame) {
  Outcome a = quantscope("export " + common + " --calibration-method max --output-dir " + dir + "/in", dir + "/a.err");
  ASSERT_EQ(a.exitCode, 0) << a.err;
  Outcome b = quantscope("export " + common + " --calibration-method max --use-external-data-format --output_path " + dir +
                             "/ext/q.onnx",
                         dir + "/b.err");
  ASSERT_EQ(b.exitCode, 0) << b.err;
  ASSERT_TRUE(fs::exists(dir + "/ext/q.onnx.data"));
  EXPECT_LT(fs::file_size(dir + "/ext/q.onnx") + 50000, fs::file_size(dir + "/in/quantized.onnx"));
  EXPECT_GT(fs::file_size(dir + "/ext/q.onnx.data"), 50000u);
  EXPECT_TRUE(checkOnnxModelFile(dir + "/ext/q.onnx"));
  ASSERT_EQ(runOrt(dir + "/in/quantized.onnx", c->dir, dir + "/o1", 1, ""), 0);
  ASSERT_EQ(runOrt(dir + "/ext/q.onnx", c->dir, dir + "/o2", 1, ""), 0);
  EXPECT_TRUE(readFile(dir + "/o1/out_0_0.npy") == readFile(dir + "/o2/out_0_0.npy"));
}

TEST_F(ExportCli, BadInputsGiveOneLineAndNoFiles) {
  std::string cacheFile = dir + "/bad.cache";
  qs::test::writeBytes(cacheFile, "TRT-8601-EntropyCalibration2\nx: 3c010204\nrelu_0.tmp_0 3c010204\n");
  std::string detCfg;  // a config made for the det model
  {
    ModelCase* det = openCase(kDet);
    if (det) {
      Outcome o = quantscope("export " + det->path + " --calibration-data " + det->imageDir +
                                 " --image-size 256x256 --calibration-size 1 --calibration-method max --no-sensitivity "
                                 "--no-layerwise --threads 2 --output-dir " + dir + "/det",
                             dir + "/det.err");
      ASSERT_EQ(o.exitCode, 0) << o.err;
      detCfg = dir + "/det/quant_cfg.json";
    }
  }
  std::string readOnly = dir + "/not_a_dir";
  qs::test::writeBytes(readOnly, "a file where a folder is expected");
  struct Case {
    std::string args, needle, outDir;
  } cases[] = {
      {"export " + common + " --calibration-cache-path " + cacheFile + " --output-dir " + dir + "/o1", "bad.cache:3:", dir + "/o1"},
      {"export " + common + " --output-dir " + readOnly + "/sub", "not_a_dir", readOnly + "/sub"},
      {"export " + common + " --output_path " + c->path, "never overwrites", ""},
      {"export " + common + " --quantize-mode fp8 --output-dir " + dir + "/o3", "opset 19", dir + "/o3"},
      {"export " + common + " --load-config " + dir + "/missing.json --output-dir " + dir + "/o4", "missing.json", dir + "/o4"},
      {"export " + common, "--output-dir", ""},
  };
  std::vector<Case> all(std::begin(cases), std::end(cases));
  if (!detCfg.empty()) all.push_back({"export " + common + " --load-config " + detCfg + " --output-dir " + dir + "/o5",
                                      "another model", dir + "/o5"});
  if (geteuid() != 0) {  // permissions do not stop root
    fs::create_directories(dir + "/ro");
    fs::permissions(dir + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
    all.push_back({"export " + common + " --output-dir " + dir + "/ro", "ro/quantized.onnx", dir + "/ro"});
  }
  auto before = fs::file_size(c->path);
  for (const Case& k : all) {
    Outcome o = quantscope(k.args, dir + "/err.txt");
    EXPECT_EQ(o.exitCode, 2) << k.args << "\n" << o.err;
    std::string last = o.err.substr(o.err.rfind("quantscope: error:") == std::string::npos ? 0 : o.err.rfind("quantscope: error:"));
    EXPECT_EQ(lineCount(last), 1) << o.err;
    EXPECT_NE(last.find(k.needle), std::string::npos) << k.needle << " not in: " << o.err;
    if (!k.outDir.empty() && k.outDir != dir + "/ro") {
      EXPECT_FALSE(fs::exists(k.outDir)) << k.outDir;
    }
  }
  if (geteuid() != 0) {
    EXPECT_TRUE(fs::is_empty(dir + "/ro"));
  }
  EXPECT_EQ(fs::file_size(c->path), before);
}

}  // namespace
