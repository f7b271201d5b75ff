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
#include <random>
#include <sstream>

#include "core/analysis/quant_session.h"
#include "core/io/npy.h"
#include "core/export/exporter.h"
#include "core/onnx/loader.h"
#include "core/export/quant_files.h"
#include "core/numeric/fake_quant.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
using qs::test::OnnxBuilder;
namespace fs = std::filesystem;

namespace {

const std::string kCls = "ch_ppocr_mobile_v2.0_cls_infer.onnx";
const std::string kDet = "ch_PP-OCRv4_det_infer.onnx";
const std::string kRec = "ch_PP-OCRv4_rec_infer.onnx";

const char* shortName(const std::string& file) { return file == kCls ? "cls" : file == kDet ? "det" : "rec"; }

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
  const bool det = file == kDet, rec = file == kRec;
  out->width = det ? 256 : rec ? 320 : 192;
  out->height = det ? 256 : 48;
  out->samples = det || rec ? 3 : 6;
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

std::unique_ptr<QuantSession> analysedSession(const ModelCase& c, CalibMethod method, const QuantConfig& cfg = {},
                                              QuantMode mode = QuantMode::Int8) {
  AnalysisOptions ao;
  ao.calibration.method = method;
  ao.calibration.mode = mode;
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
                    bool dqOnly = true, QuantMode mode = QuantMode::Int8, bool checkAll = true) {
  ModelCase* c = openCase(file);
  if (!c) GTEST_SKIP() << file << " missing: run scripts/setup.sh";
  auto s = analysedSession(*c, method, cfg, mode);
  ASSERT_TRUE(s);
  auto r = s->result();
  ExportOptions eo = exportOptions(*c, *s);
  eo.dqOnly = dqOnly;
  auto ex = buildQuantizedModel(c->path, *c->model, *r, eo);
  ASSERT_TRUE(ex) << ex.status().message();
  std::string qPath = c->dir + "/" + tag + ".onnx";
  qs::test::writeBytes(qPath, ex->modelBytes);
  if (mode == QuantMode::Int8) {
    Status chk = checkOnnxModelFile(qPath);  // libonnx 1.12's checker predates FLOAT8E4M3FN: ORT checks fp8 below
    EXPECT_TRUE(chk) << chk.message();
  }
  EXPECT_EQ(ex->opsetAfter, mode == QuantMode::Fp8 ? 19 : 13);
  auto exact = ortSnr(*c, qPath, tag + "_exact", "--level basic --disable-qdq");
  // ORT 1.30's QDQ transformers (on at 'extended' and 'all' unless session.disable_quant_qdq=1)
  // rewrite fp8 Q/DQ into kernels it lacks (QLinearConv on float8e4m3fn, Reshape on
  // float8e4m3fn), and the session fails to load: fp8 runs at 'all' with them off.
  auto all = ortSnr(*c, qPath, tag + "_all", mode == QuantMode::Fp8 ? "--level all --disable-qdq" : "--level all");
  ASSERT_EQ(exact.size(), r->outputs.size());
  ASSERT_EQ(all.size(), r->outputs.size());
  for (size_t i = 0; i < r->outputs.size(); ++i) {
    double predicted = r->outputs[i].metrics.snrDb;
    std::printf("FIDELITY %-4s %-4s %-10s %-12s output %-20s predicted %7.3f dB | ORT exact %7.3f (gap %+.3f) | ORT all %7.3f (gap %+.3f)\n",
                shortName(file), quantModeName(mode).c_str(), calibMethodName(method).c_str(), tag.c_str(), r->outputs[i].name.c_str(),
                predicted, exact[i], exact[i] - predicted, all[i], all[i] - predicted);
    EXPECT_NEAR(exact[i], predicted, 0.5) << file << " " << tag << " output " << r->outputs[i].name;
    if (checkAll) {
      EXPECT_NEAR(all[i], predicted, 0.5) << file << " " << tag << " output " << r->outputs[i].name;
    }
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

// FP8 E4M3FN (issue #15): opset 19, FLOAT8E4M3FN zero points, scales amax / 448, the default max
// calibration. ORT's QuantizeLinear rounds to nearest even and saturates as the simulation does
// (Fp8QuantizeLinearInOrtEqualsTheSimulation), so the measured SNR must follow the prediction.
TEST(ExportFidelityFp8, ClsFloatWeightsWithQdqPairs) {
  expectFidelity(kCls, CalibMethod::Max, {}, "fp8_qdq", /*dqOnly=*/false, QuantMode::Fp8);
}

TEST(ExportFidelityFp8, ClsFp8WeightInitializers) {
  expectFidelity(kCls, CalibMethod::Max, {}, "fp8_dq_only", /*dqOnly=*/true, QuantMode::Fp8);
}

// det: ORT exact agrees; ORT's 'extended' and 'all' levels change det's fp8 result (4.5 dB
// instead of 19.7, with or without its QDQ transformers, with fp8 initializers too), which the
// int8 export does not show: an ORT 1.30 CPU issue with fp8 graphs, printed but not checked.
TEST(ExportFidelityFp8, DetFloatWeightsWithQdqPairs) {
  expectFidelity(kDet, CalibMethod::Max, {}, "fp8_qdq", /*dqOnly=*/false, QuantMode::Fp8, /*checkAll=*/false);
}

// PP-OCRv4 rec (opset 11 with ReduceMean: its axes move to an input at 18).
TEST(ExportFidelityFp8, RecFloatWeightsWithQdqPairs) {
  expectFidelity(kRec, CalibMethod::Max, {}, "fp8_qdq", /*dqOnly=*/false, QuantMode::Fp8);
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

// ---- FP8 (issue #15) ---------------------------------------------------------------------------

// x[1,16,6,6] -> conv1 -> y1 -> conv2 -> y2 -> ReduceMean(axes 2,3) -> m; y2 -> Split(axis 1) -> s0, s1.
// 16 channels: TensorRT's FP8 convolutions need Cin and Cout >= 16 (ModelOpt), so both are quantized.
// ReduceMean (axes became an input at 18) and Split without sizes (num_outputs at 18) exercise the
// raise past libonnx's opset 17.
std::string buildFp8Model(const std::string& dir, int64_t opset) {
  OnnxBuilder b(opset);
  b.input("x", {1, 16, 6, 6}).output("m", {1, 16, 1, 1}).output("s0", {1, 8, 6, 6}).output("s1", {1, 8, 6, 6});
  std::vector<float> w1(16 * 16 * 9), w2(16 * 16 * 9);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.2f * std::sin(0.7f * (float)i);
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.1f * std::cos(0.3f * (float)i) * (1.f + (float)(i % 7));
  b.initializer("w1", {16, 16, 3, 3}, w1);
  b.initializer("w2", {16, 16, 3, 3}, w2);
  OnnxBuilder::attrInts(b.node("Conv", {"x", "w1"}, {"y1"}, "conv1"), "pads", {1, 1, 1, 1});
  OnnxBuilder::attrInts(b.node("Conv", {"y1", "w2"}, {"y2"}, "conv2"), "pads", {1, 1, 1, 1});
  OnnxBuilder::attrInts(b.node("ReduceMean", {"y2"}, {"m"}, "mean"), "axes", {2, 3});
  OnnxBuilder::attrInt(b.node("Split", {"y2"}, {"s0", "s1"}, "split"), "axis", 1);
  std::string path = dir + "/fp8.onnx";
  b.save(path);
  return path;
}

TEST(ExportStructure, Fp8DeclaresOpset19AndFloat8ZeroPoints) {
  std::string dir = qs::test::makeTempDir("export-fp8");
  std::string path = buildFp8Model(dir, 11);
  auto m = loadModel(path);
  ASSERT_TRUE(m) << m.status().message();
  AnalysisOptions ao;
  ao.threads = 1;
  ao.calibration.mode = QuantMode::Fp8;
  ao.calibration.method = CalibMethod::Max;
  auto s = QuantSession::create(*m, {}, ao);
  ASSERT_TRUE(s);
  CalibrationDataOptions co;
  co.maxSamples = 2;
  auto data = CalibrationData::open(**m, co);
  ASSERT_TRUE(data);
  std::shared_ptr<const CalibrationData> d(std::move(data).value());
  ASSERT_TRUE((*s)->calibrate(*d));
  auto r = (*s)->analyze(d);
  ASSERT_TRUE(r) << r.status().message();
  const Graph& graph = (*m)->graph;
  auto feeds = d->batch(0);
  ASSERT_TRUE(feeds);
  ASSERT_TRUE(writeNpy(dir + "/in_0_0.npy", (*feeds)[0].tensor));

  for (bool dqOnly : {false, true}) {
    SCOPED_TRACE(dqOnly ? "fp8 initializers" : "float weights with Q/DQ");
    ExportOptions eo;
    eo.dqOnly = dqOnly;
    auto ex = buildQuantizedModel(path, **m, **r, eo);
    ASSERT_TRUE(ex) << ex.status().message();
    EXPECT_EQ(ex->opsetBefore, 11);
    EXPECT_EQ(ex->opsetAfter, 19);
    EXPECT_EQ(ex->activationPairs, 2u);
    EXPECT_EQ(ex->weightPoints, 2u);
    onnx::ModelProto proto = parseModel(ex->modelBytes);
    ASSERT_EQ(proto.opset_import_size(), 1);
    EXPECT_EQ(proto.opset_import(0).version(), 19);
    EXPECT_GE(proto.ir_version(), 9);
    const auto& g = proto.graph();
    std::map<std::string, const onnx::TensorProto*> inits;
    for (const auto& t : g.initializer()) inits[t.name()] = &t;
    // Every zero point: FLOAT8E4M3FN (17), +0, one byte per element in raw_data.
    int zeroPoints = 0;
    for (const auto& [name, t] : inits) {
      if (name.size() < 11 || name.compare(name.size() - 11, 11, "_zero_point") != 0) continue;
      ++zeroPoints;
      EXPECT_EQ(t->data_type(), 17) << name;
      int64_t n = 1;
      for (int64_t dim : t->dims()) n *= dim;
      EXPECT_EQ(t->raw_data(), std::string((size_t)n, '\0')) << name;
    }
    EXPECT_EQ(zeroPoints, 4);
    // Activation scales amax / 448, as simulated.
    const ActivationQuant& xq = (*r)->activations.at(graph.findValue("x"));
    float xs;
    std::memcpy(&xs, inits.at("x_scale")->raw_data().data(), 4);
    EXPECT_EQ(xs, xq.scale);
    EXPECT_FLOAT_EQ(xs, xq.amax / 448.f);
    // Weights: per channel on axis 0, the simulation's values.
    const WeightQuant* wq = nullptr;
    for (const WeightQuant& w : (*r)->weights)
      if (graph.value(w.value).name == "w2") wq = &w;
    ASSERT_TRUE(wq);
    const Tensor& w2 = *graph.value(wq->value).constant;
    Tensor simulated = fakeQuantize(w2, wq->scale, 0, QuantMode::Fp8, kWeightQmin, kWeightQmax);
    const auto* dq = findNode(g, "w2_DequantizeLinear");
    ASSERT_TRUE(dq);
    ASSERT_EQ(dq->attribute_size(), 1);
    EXPECT_EQ(dq->attribute(0).i(), 0);
    if (dqOnly) {
      ASSERT_TRUE(inits.count("w2_quantized"));
      const auto* q = inits.at("w2_quantized");
      EXPECT_EQ(q->data_type(), 17);
      ASSERT_EQ(q->raw_data().size(), (size_t)w2.numel());
      EXPECT_FALSE(inits.count("w2"));
      for (int64_t i = 0; i < w2.numel(); ++i) {
        const float v = fp8E4M3Value((uint8_t)q->raw_data()[(size_t)i]) * wq->scale[(size_t)(i / (16 * 9))];
        ASSERT_EQ(v, simulated.data<float>()[i]) << i;
      }
    } else {
      const auto* q = findNode(g, "w2_QuantizeLinear");
      ASSERT_TRUE(q);
      EXPECT_EQ(q->input(0), "w2");
      EXPECT_EQ(inits.at("w2")->data_type(), onnx::TensorProto::FLOAT);
    }
    // Raised past 17 by hand: ReduceMean's axes are an int64 input, Split says how many outputs.
    const auto* mean = findNode(g, "mean");
    ASSERT_TRUE(mean);
    EXPECT_EQ(mean->attribute_size(), 0);
    ASSERT_EQ(mean->input_size(), 2);
    const auto* axes = inits.at(mean->input(1));
    EXPECT_EQ(axes->data_type(), onnx::TensorProto::INT64);
    std::vector<int64_t> axv(2);
    ASSERT_EQ(axes->raw_data().size(), 16u);
    std::memcpy(axv.data(), axes->raw_data().data(), 16);
    EXPECT_EQ(axv, (std::vector<int64_t>{2, 3}));
    const auto* split = findNode(g, "split");
    ASSERT_TRUE(split);
    bool numOutputs = false;
    for (const auto& a : split->attribute()) numOutputs |= a.name() == "num_outputs" && a.i() == 2;
    EXPECT_TRUE(numOutputs);
    // ONNX Runtime 1.30 loads and runs it (its checker is the one that knows opset 19 and FP8),
    // with its QDQ transformers off (see expectFidelity).
    std::string q = dir + (dqOnly ? "/q_dq.onnx" : "/q_qdq.onnx");
    qs::test::writeBytes(q, ex->modelBytes);
    EXPECT_EQ(runOrt(q, dir, dir + "/out", 1, "--level all --disable-qdq"), 0);
    EXPECT_TRUE(fs::exists(dir + "/out/out_0_2.npy"));
    fs::remove_all(dir + "/out");
  }
  fs::remove_all(dir);
}

// ORT's QuantizeLinear -> DequantizeLinear to FLOAT8E4M3FN (opset 19, saturate=1) against the
// simulation, bit for bit: every grid value, every midpoint between neighbours (ties to even),
// subnormals, values past 448 (saturation, no infinity) and random values, at two scales.
TEST(ExportFp8, QuantizeLinearInOrtEqualsTheSimulation) {
  std::vector<float> x;
  for (int b = 0; b < 0x7F; ++b) {
    const float v = fp8E4M3Value((uint8_t)b), next = fp8E4M3Value((uint8_t)(b + 1));
    for (float sgn : {1.f, -1.f}) {
      x.push_back(sgn * v);
      if (b + 1 < 0x7F) {
        const float mid = 0.5f * (v + next);
        x.insert(x.end(), {sgn * mid, sgn * std::nextafter(mid, 0.f), sgn * std::nextafter(mid, 1000.f)});
      }
    }
  }
  for (float v : {448.f, 456.f, 463.99f, 464.f, 464.01f, 480.f, 1000.f, 1e30f, 0.0009765625f, 0.00097656f, 0.00097657f})
    x.insert(x.end(), {v, -v});
  std::mt19937 rng(5);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (int i = 0; i < 20000; ++i) x.push_back(gauss(rng) * std::pow(10.f, (float)(i % 9) - 4.f));
  const int64_t n = (int64_t)x.size();
  const std::vector<float> scales = {1.f, 0.0173f};

  std::string dir = qs::test::makeTempDir("export-fp8-ort");
  OnnxBuilder b(19);
  b.proto().set_ir_version(9);
  b.input("x", {n}).output("y0", {n}).output("y1", {n});
  for (size_t k = 0; k < scales.size(); ++k) {
    const std::string sk = "s" + std::to_string(k), zk = "z" + std::to_string(k), yk = "y" + std::to_string(k);
    b.initializer(sk, {}, {scales[k]});
    auto* z = b.graph().add_initializer();
    z->set_name(zk);
    z->set_data_type(17);  // FLOAT8E4M3FN
    z->set_raw_data(std::string(1, '\0'));
    b.node("QuantizeLinear", {"x", sk, zk}, {"q" + std::to_string(k)}, "q" + std::to_string(k));
    b.node("DequantizeLinear", {"q" + std::to_string(k), sk, zk}, {yk}, "dq" + std::to_string(k));
  }
  b.save(dir + "/qdq.onnx");
  Tensor xt(DType::Float, {n});
  std::copy(x.begin(), x.end(), xt.data<float>());
  ASSERT_TRUE(writeNpy(dir + "/in_0.npy", xt));
  ASSERT_EQ(runCommand("ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_run.mjs " + dir +
                       "/qdq.onnx " + dir + " " + dir + "/out"),
            0);
  for (size_t k = 0; k < scales.size(); ++k) {
    auto got = readNpy(dir + "/out/out_" + std::to_string(k) + ".npy");
    ASSERT_TRUE(got) << got.status().message();
    ASSERT_EQ(got->numel(), n);
    Tensor want = fakeQuantize(xt, {scales[k]}, 0, QuantMode::Fp8, kActQmin, kActQmax);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float a = got->data<float>()[i], e = want.data<float>()[i];
      if (!(a == e)) {
        if (differ++ < 5) ADD_FAILURE() << "scale " << scales[k] << ": x " << x[(size_t)i] << " ORT " << a << " ours " << e;
      }
    }
    EXPECT_EQ(differ, 0) << "scale " << scales[k];
  }
  fs::remove_all(dir);
}

// A BatchNormalization with its training outputs (mean, var, saved mean, saved var), as old
// exporters wrote it: valid up to opset 13, where int8 stops, but opset 14 dropped those outputs
// and the converter refuses to raise it. fp8 needs 19: one line naming the op, nothing written.
TEST(ExportStructure, Fp8RefusesAnOpItCannotRaiseNamingIt) {
  std::string dir = qs::test::makeTempDir("export-fp8-refused");
  OnnxBuilder b(11);
  b.input("x", {1, 16, 6, 6}).output("m", {1, 16, 6, 6});
  std::vector<float> w(16 * 16 * 9), ones(16, 1.f), zeros(16, 0.f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.5f * (float)i);
  b.initializer("w", {16, 16, 3, 3}, w);
  for (const char* n : {"gamma", "var"}) b.initializer(n, {16}, ones);
  for (const char* n : {"beta", "mean"}) b.initializer(n, {16}, zeros);
  OnnxBuilder::attrInts(b.node("Conv", {"x", "w"}, {"y"}, "conv"), "pads", {1, 1, 1, 1});
  b.node("BatchNormalization", {"y", "gamma", "beta", "mean", "var"}, {"m", "m_mean", "m_var", "m_saved_mean", "m_saved_var"},
         "bn");
  b.save(dir + "/old.onnx");
  std::string err = dir + "/err.txt";
  int code = runCommand(std::string(QS_BINARY) + " export " + dir + "/old.onnx --quantize-mode fp8 --calibration-size 1 " +
                        "--no-sensitivity --no-layerwise --threads 1 --output-dir " + dir + "/out >/dev/null 2>" + err);
  std::string text = readFile(err);
  EXPECT_EQ(code, 2) << text;
  std::string last = text.substr(text.rfind("quantscope: error:") == std::string::npos ? 0 : text.rfind("quantscope: error:"));
  EXPECT_EQ(std::count(last.begin(), last.end(), '\n'), 1) << text;
  EXPECT_NE(last.find("BatchNormalization"), std::string::npos) << text;
  std::printf("REFUSED %s", last.c_str());
  EXPECT_NE(last.find("19"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(dir + "/out"));
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
    // --remedies none (the default, given so that these tests keep it): they compare an export with one from its
    // calibration.cache, which holds scales only and so cannot carry a smoothing that --remedies auto may keep.
    common = c->path + " --calibration-data " + c->imageDir + " --image-size 192x48 --mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 " +
             "--no-sensitivity --no-layerwise --threads 2 --remedies none";
  }
  void TearDown() override {
    if (!dir.empty()) fs::remove_all(dir);
  }
};

TEST_F(ExportCli, ConfigReloadReproducesTheModelByteForByte) {
  // --head-weight-scale off: the export from calibration.cache below (activation scales only) cannot
  // carry the head's searched weight scales, which quant_cfg.json does.
  Outcome a = quantscope("export " + common + " --calibration-method percentile --head-weight-scale off " +
                             "--nodes-to-exclude 'p2o.Conv.1$' --output-dir " + dir + "/a",
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
  // Past --external-data-threshold (2 GB - 64 MB unless given) the side file is written unasked.
  Outcome t = quantscope("export " + common + " --calibration-method max --external-data-threshold 100000 --output_path " +
                             dir + "/thr/q.onnx",
                         dir + "/t.err");
  ASSERT_EQ(t.exitCode, 0) << t.err;
  ASSERT_TRUE(fs::exists(dir + "/thr/q.onnx.data"));
  EXPECT_TRUE(readFile(dir + "/thr/q.onnx.data") == readFile(dir + "/ext/q.onnx.data"));
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
