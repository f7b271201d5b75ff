// Mixed precision (--high-precision-dtype, issue 14 item 3): the analysis's fp16/bf16 simulation
// equals rounding by hand on a small built model, the exported quantized.onnx holds its float part
// in float16 (Casts at the graph's float32 inputs and outputs, float16 Q/DQ scales) and ONNX
// Runtime computes on it what was simulated; PaddleOCR cls in ORT matches the predicted SNR; a bad
// flag value is one line and a non-zero exit.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/analysis/quant_session.h"
#include "core/export/exporter.h"
#include "core/io/npy.h"
#include "core/ir/half.h"
#include "core/onnx/loader.h"
#include "tests/support/font_text_images.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/row_samples.h"
#include "tests/support/sanitizer.h"
#include "tests/support/text_images.h"

using namespace qs;
using qs::test::OnnxBuilder;
using qs::test::rowsSnrDb;
using qs::test::runOrtRows;
using qs::test::writeRowSamples;
namespace fs = std::filesystem;

namespace {

constexpr int kSamples = 6, kK = 8, kN = 4;

int runCommand(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

float r16(float x) { return roundToHighPrecision(x, HighPrecision::Fp16); }

// X [N, 8] -> Mul(C) -> Add(B) -> MatMul(W [8, 4]) -> Y: the MatMul quantized (its input and its
// weight), the Mul and Add in float.
struct SmallModel {
  std::vector<float> c, b, w;
  std::vector<std::vector<float>> x;  // per sample, kK values
  std::string dir, path;
  std::shared_ptr<Model> model;
  std::shared_ptr<const CalibrationData> data;
};

SmallModel makeSmallModel() {
  SmallModel m;
  std::mt19937 rng(16);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int i = 0; i < kK; ++i) m.c.push_back(1.f + 0.37f * normal(rng));
  for (int i = 0; i < kK; ++i) m.b.push_back(0.1f * normal(rng));
  for (int i = 0; i < kK * kN; ++i) m.w.push_back(0.5f * normal(rng));
  OnnxBuilder ob(13);
  ob.input("X", {-1, kK}).output("Y", {-1, kN});
  ob.initializer("C", {kK}, m.c);
  ob.initializer("B", {kK}, m.b);
  ob.initializer("W", {kK, kN}, m.w);
  ob.node("Mul", {"X", "C"}, {"xc"}, "mul");
  ob.node("Add", {"xc", "B"}, {"xb"}, "add");
  ob.node("MatMul", {"xb", "W"}, {"Y"}, "mm");
  m.dir = qs::test::makeTempDir("high-precision");
  m.path = m.dir + "/small.onnx";
  ob.save(m.path);
  for (int s = 0; s < kSamples; ++s) {
    std::vector<float> v;
    for (int i = 0; i < kK; ++i) v.push_back(1.7f * normal(rng) + 0.013f * (float)s);
    m.x.push_back(v);
  }
  writeRowSamples(m.x, m.dir, m.path, m.model, m.data);
  return m;
}

std::shared_ptr<const AnalysisResult> analyse(const SmallModel& m, HighPrecision p, const QuantConfig& cfg,
                                              std::unique_ptr<QuantSession>* keep = nullptr) {
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.calibration.highPrecision = p;
  ao.threads = 1;
  ao.sensitivity = false;
  auto s = QuantSession::create(m.model, cfg, ao);
  EXPECT_TRUE(s) << s.status().message();
  if (!s) return nullptr;
  Status st = (*s)->calibrate(*m.data);
  EXPECT_TRUE(st) << st.message();
  auto r = (*s)->analyze(m.data);
  EXPECT_TRUE(r) << r.status().message();
  if (!r) return nullptr;
  if (keep) *keep = std::move(s).value();
  return *r;
}

// The float model and the fp16 model by hand, per sample: y[s][n].
struct ByHand {
  std::vector<std::vector<double>> ref, fp16;
};

ByHand byHand(const SmallModel& m, bool quantized, float actScale, const std::vector<float>& wScale) {
  ByHand h;
  for (const auto& x : m.x) {
    std::vector<double> ref(kN, 0.0), q(kN, 0.0);
    std::vector<float> xbF(kK), xbQ(kK);
    for (int k = 0; k < kK; ++k) {
      xbF[k] = x[k] * m.c[k] + m.b[k];
      // Cast at the input, float16 constants; ORT's CPU provider runs Mul and Add in float32 with
      // no Cast between them, so their outputs are not rounded.
      float v = r16(x[k]) * r16(m.c[k]) + r16(m.b[k]);
      if (quantized) {  // the float16 QuantizeLinear reads v rounded; DequantizeLinear runs in float32
        float qv = std::min(127.f, std::max(-128.f, std::nearbyint(r16(v) / actScale)));
        v = qv * actScale;
      }
      xbQ[k] = v;
    }
    for (int n = 0; n < kN; ++n) {
      float acc = 0;
      for (int k = 0; k < kK; ++k) {
        const float wv = m.w[(size_t)(k * kN + n)];
        float wq = r16(wv);
        if (quantized) {
          float qv = std::min(127.f, std::max(-127.f, std::nearbyint(wv / wScale[(size_t)n])));
          wq = r16(qv * wScale[(size_t)n]);  // a weight's DequantizeLinear stays float16
        }
        ref[n] += (double)xbF[k] * wv;
        acc += xbQ[k] * wq;
      }
      q[n] = acc;  // the MatMul in float32; ORT drops the Cast pair at the graph output
    }
    h.ref.push_back(ref);
    h.fp16.push_back(q);
  }
  return h;
}

float maxAbs(const std::vector<std::vector<float>>& x, const SmallModel& m) {
  float a = 0;
  for (const auto& v : x)
    for (int k = 0; k < kK; ++k) a = std::max(a, std::fabs(v[k] * m.c[k] + m.b[k]));
  return a;
}

TEST(HighPrecision, ParseNamesAndRefusesOthers) {
  HighPrecision p = HighPrecision::Fp32;
  EXPECT_TRUE(parseHighPrecision("fp16", p));
  EXPECT_EQ(p, HighPrecision::Fp16);
  EXPECT_TRUE(parseHighPrecision("bf16", p));
  EXPECT_EQ(p, HighPrecision::Bf16);
  EXPECT_TRUE(parseHighPrecision("fp32", p));
  EXPECT_EQ(p, HighPrecision::Fp32);
  Status st = parseHighPrecision("fp8", p);
  EXPECT_FALSE(st);
  EXPECT_EQ(st.message(), "--high-precision-dtype 'fp8': expected fp32, fp16 or bf16");
  // A scale never rounds to zero or infinity.
  EXPECT_GT(roundScale(1e-9f, HighPrecision::Fp16), 0.f);
  EXPECT_TRUE(std::isfinite(roundScale(1e6f, HighPrecision::Fp16)));
  EXPECT_EQ(roundScale(0.1f, HighPrecision::Fp32), 0.1f);
}

// Every node excluded: the whole model in float16, the output SNR that of rounding by hand.
TEST(HighPrecision, Fp16SimulationOfTheFloatPartEqualsRoundingByHand) {
  SmallModel m = makeSmallModel();
  ASSERT_TRUE(m.model && m.data);
  QuantConfig cfg;
  cfg.nodesToExclude = {"mm"};
  auto r = analyse(m, HighPrecision::Fp16, cfg);
  ASSERT_TRUE(r);
  ByHand h = byHand(m, false, 0, {});
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_NEAR(r->outputs[0].metrics.snrDb, rowsSnrDb(h.ref, h.fp16), 1e-3);
  EXPECT_LT(r->outputs[0].metrics.snrDb, 80.0);  // rounded indeed: fp32 would compare exactly
  auto r32 = analyse(m, HighPrecision::Fp32, cfg);
  ASSERT_TRUE(r32);
  EXPECT_GT(r32->outputs[0].metrics.snrDb, r->outputs[0].metrics.snrDb + 20);
  fs::remove_all(m.dir);
}

// The MatMul quantized: scales rounded to float16, the QuantizeLinear input and the dequantized
// weight rounded, node outputs not; then the export run in ONNX Runtime computes the same outputs.
TEST(HighPrecision, Fp16QuantizedSimulationEqualsByHandAndOrtComputesIt) {
  SmallModel m = makeSmallModel();
  ASSERT_TRUE(m.model && m.data);
  std::unique_ptr<QuantSession> session;
  auto r = analyse(m, HighPrecision::Fp16, {}, &session);
  ASSERT_TRUE(r);
  // The scales: amax / 127 rounded to float16.
  const ValueId xb = m.model->graph.findValue("xb");
  ASSERT_TRUE(r->activations.count(xb));
  const float actScale = r->activations.at(xb).scale;
  EXPECT_EQ(actScale, r16(maxAbs(m.x, m) / 127.f));
  ASSERT_EQ(r->weights.size(), 1u);
  ASSERT_EQ(r->weights[0].axis, 1);
  std::vector<float> wScale;
  for (int n = 0; n < kN; ++n) {
    float a = 0;
    for (int k = 0; k < kK; ++k) a = std::max(a, std::fabs(m.w[(size_t)(k * kN + n)]));
    wScale.push_back(r16(a / 127.f));
    EXPECT_EQ(r->weights[0].scale[(size_t)n], wScale.back()) << "channel " << n;
  }
  ByHand h = byHand(m, true, actScale, wScale);
  EXPECT_NEAR(r->outputs[0].metrics.snrDb, rowsSnrDb(h.ref, h.fp16), 1e-3);

  // The export: float16 initializers, Casts at the float32 I/O, opset 19. ORT 1.30's CPU provider
  // is no exact float16 executor: it runs the float16 nodes it has no kernel for in float32 and
  // drops the Cast pairs between them (measured: Cast(x, fp16) -> Add -> Cast(fp32) returns 2 x
  // unrounded), so its outputs match the by-hand ones to a few float16 ulps of the intermediates,
  // and its output SNR the predicted one.
  auto ex = buildQuantizedModel(m.path, *m.model, *r);
  ASSERT_TRUE(ex) << ex.status().message();
  EXPECT_EQ(ex->opsetAfter, 19);
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(ex->modelBytes));
  for (const auto& t : proto.graph().initializer())
    EXPECT_TRUE(t.data_type() == onnx::TensorProto::FLOAT16 || t.data_type() == onnx::TensorProto::INT8) << t.name();
  EXPECT_EQ(proto.graph().input(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT);
  EXPECT_EQ(proto.graph().output(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT);
  int casts = 0;
  for (const auto& n : proto.graph().node()) casts += n.op_type() == "Cast";
  EXPECT_EQ(casts, 2);
  const std::string q = m.dir + "/quantized.onnx";
  qs::test::writeBytes(q, ex->modelBytes);
  ASSERT_EQ(runOrtRows(q, m.dir, m.dir + "/q", kSamples, 2, "--level basic --disable-qdq"), 0)
      << std::ifstream(m.dir + "/q.log").rdbuf();
  double largest = 0;
  for (const auto& v : h.fp16)
    for (double x : v) largest = std::max(largest, std::fabs(x));
  std::vector<std::vector<double>> ort;
  for (int s = 0; s < kSamples; ++s) {
    auto y = readNpy(m.dir + "/q/out_" + std::to_string(s) + "_0.npy");
    ASSERT_TRUE(y) << y.status().message();
    ASSERT_EQ(y->numel(), kN);
    ort.emplace_back(y->data<float>(), y->data<float>() + kN);
    for (int n = 0; n < kN; ++n) {
      const double want = h.fp16[(size_t)s][(size_t)n];
      EXPECT_NEAR(y->data<float>()[n], want, 2e-3 * largest) << "sample " << s << " output " << n;
    }
  }
  EXPECT_NEAR(rowsSnrDb(h.ref, ort), r->outputs[0].metrics.snrDb, 0.5);
  fs::remove_all(m.dir);
}

// bf16: bfloat16 initializers and scales (ORT 1.30's CPU provider has no bfloat16 MatMul or
// Mul kernels, so the file is checked here and not run).
TEST(HighPrecision, Bf16ExportHoldsBfloat16) {
  SmallModel m = makeSmallModel();
  ASSERT_TRUE(m.model && m.data);
  auto r = analyse(m, HighPrecision::Bf16, {});
  ASSERT_TRUE(r);
  const ValueId xb = m.model->graph.findValue("xb");
  EXPECT_EQ(r->activations.at(xb).scale, roundToHighPrecision(maxAbs(m.x, m) / 127.f, HighPrecision::Bf16));
  auto ex = buildQuantizedModel(m.path, *m.model, *r);
  ASSERT_TRUE(ex) << ex.status().message();
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(ex->modelBytes));
  int bf16 = 0;
  for (const auto& t : proto.graph().initializer()) {
    EXPECT_NE(t.data_type(), onnx::TensorProto::FLOAT) << t.name();
    bf16 += t.data_type() == onnx::TensorProto::BFLOAT16;
  }
  EXPECT_EQ(bf16, 4);  // C, B and the two scales (the weight is int8)
  fs::remove_all(m.dir);
}

// A BatchNormalization whose running variance exceeds float16's range (as det's first one does)
// stays float32 in the analysis and the export: the prediction is that of float16 rounding around
// it, not the zero output a float16 variance (infinity) gives, and ORT agrees.
TEST(HighPrecision, NodeWithConstantsBeyondFloat16StaysFloat32) {
  const std::string dir = qs::test::makeTempDir("high-precision-bn");
  OnnxBuilder ob(13);
  ob.input("X", {1, 4, 3, 3}).output("Y", {1, 4, 3, 3});
  ob.initializer("scale", {4}, {300.f, 250.f, 400.f, 350.f});
  ob.initializer("bias", {4}, {0.1f, -0.2f, 0.3f, 0.f});
  ob.initializer("mean", {4}, {0.5f, -0.5f, 0.f, 1.f});
  ob.initializer("var", {4}, {9.8e7f, 1e5f, 2e6f, 7e4f});
  ob.node("BatchNormalization", {"X", "scale", "bias", "mean", "var"}, {"Y"}, "bn");
  ob.save(dir + "/bn.onnx");
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  Tensor x(DType::Float, {1, 4, 3, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 2.f * normal(rng);
  ASSERT_TRUE(writeNpy(dir + "/calib.npy", x));
  ASSERT_TRUE(writeNpy(dir + "/in_0_0.npy", x));
  auto model = loadModel(dir + "/bn.onnx");
  ASSERT_TRUE(model) << model.status().message();
  CalibrationDataOptions co;
  co.path = dir + "/calib.npy";
  auto d = CalibrationData::open(**model, co);
  ASSERT_TRUE(d) << d.status().message();
  std::shared_ptr<const CalibrationData> data(std::move(d).value());
  AnalysisOptions ao;
  ao.calibration.highPrecision = HighPrecision::Fp16;
  ao.threads = 1;
  ao.sensitivity = false;
  auto s = QuantSession::create(*model, {}, ao);
  ASSERT_TRUE(s) << s.status().message();
  ASSERT_TRUE((*s)->calibrate(*data));
  auto r = (*s)->analyze(data);
  ASSERT_TRUE(r) << r.status().message();
  const double predicted = (*r)->outputs[0].metrics.snrDb;
  EXPECT_GT(predicted, 50.0);  // a float16 variance would make Y = bias: about 0 dB
  auto ex = buildQuantizedModel(dir + "/bn.onnx", **model, **r);
  ASSERT_TRUE(ex) << ex.status().message();
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(ex->modelBytes));
  for (const auto& t : proto.graph().initializer()) EXPECT_EQ(t.data_type(), onnx::TensorProto::FLOAT) << t.name();
  int casts = 0;
  for (const auto& n : proto.graph().node()) casts += n.op_type() == "Cast";
  EXPECT_EQ(casts, 4);  // in, to float32 before the node, back to float16 after it, out
  qs::test::writeBytes(dir + "/q.onnx", ex->modelBytes);
  ASSERT_EQ(runOrtRows(dir + "/bn.onnx", dir, dir + "/fp32", 1, 2), 0) << std::ifstream(dir + "/fp32.log").rdbuf();
  ASSERT_EQ(runOrtRows(dir + "/q.onnx", dir, dir + "/q", 1, 2), 0) << std::ifstream(dir + "/q.log").rdbuf();
  auto ref = readNpy(dir + "/fp32/out_0_0.npy");
  auto got = readNpy(dir + "/q/out_0_0.npy");
  ASSERT_TRUE(ref && got);
  ErrorAccumulator acc;
  acc.add(*ref, *got);
  EXPECT_GT(acc.metrics().snrDb, 50.0);
  fs::remove_all(dir);
}

// PaddleOCR cls in float16 outside INT8, `exclude` left out of INT8 (in float16 then): the
// predicted output SNR and ORT's on the export, at ORT's graph optimization `levels`.
struct ClsFp16 {
  double predicted = 0;
  std::vector<double> measured;  // per level
};

const std::string kClsSamples = std::string(QS_SOURCE_DIR) + "/.cache/samples/cls";

// The text lines cls is run on: stb_easy_font's blocky glyphs (text_images.h), DejaVu fonts through
// FreeType (font_text_images.h) or the first `count` of .cache/samples/cls.
enum class ClsLines { Synthetic, Fonts, Samples };

void runClsFp16(const std::vector<std::string>& exclude, const std::vector<std::string>& levels, ClsFp16& out,
                ClsLines lines = ClsLines::Synthetic, int count = kSamples) {
  const std::string path = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  const std::string dir = qs::test::makeTempDir("high-precision-cls");
  if (lines == ClsLines::Synthetic) {
    qs::test::writeTextImages(dir + "/images", count, 192, 48, 7);
  } else if (lines == ClsLines::Fonts) {
    std::string error;
    ASSERT_FALSE(qs::test::writeFontTextImages(dir + "/images", count, 192, 48, 7, false, &error).empty()) << error;
    fs::remove(dir + "/images/labels.txt");
  } else {
    fs::create_directories(dir + "/images");
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(kClsSamples))
      if (e.path().extension() == ".png") files.push_back(e.path());  // not setup.sh's .done marker
    std::sort(files.begin(), files.end());
    ASSERT_GE((int)files.size(), count) << kClsSamples;
    for (size_t i = 0; i < (size_t)count; ++i) fs::copy(files[i], dir + "/images/" + files[i].filename().string());
  }
  auto m = loadModel(path);
  ASSERT_TRUE(m) << m.status().message();
  CalibrationDataOptions co;
  co.path = dir + "/images";
  co.image.width = 192;
  co.image.height = 48;
  co.image.mean = {0.5f, 0.5f, 0.5f};
  co.image.std = {0.5f, 0.5f, 0.5f};
  co.batchSize = 1;
  auto d = CalibrationData::open(**m, co);
  ASSERT_TRUE(d) << d.status().message();
  std::shared_ptr<const CalibrationData> data(std::move(d).value());
  for (int64_t s = 0; s < data->batchCount(); ++s) {
    auto feeds = data->batch(s);
    ASSERT_TRUE(feeds);
    ASSERT_TRUE(writeNpy(dir + "/in_" + std::to_string(s) + "_0.npy", (*feeds)[0].tensor));
  }
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.calibration.highPrecision = HighPrecision::Fp16;
  ao.threads = 2;
  ao.layerwise = false;
  ao.sensitivity = false;
  QuantConfig cfg;
  cfg.nodesToExclude = exclude;
  auto s = QuantSession::create(*m, cfg, ao);
  ASSERT_TRUE(s) << s.status().message();
  ASSERT_TRUE((*s)->calibrate(*data));
  auto r = (*s)->analyze(data);
  ASSERT_TRUE(r) << r.status().message();
  ExportOptions eo;
  auto feeds = data->batch(0);
  ASSERT_TRUE(feeds);
  auto ranks = observeRanks((*s)->executor(), *feeds);
  ASSERT_TRUE(ranks) << ranks.status().message();
  eo.observedRanks = *ranks;
  auto ex = buildQuantizedModel(path, **m, **r, eo);
  ASSERT_TRUE(ex) << ex.status().message();
  const std::string q = dir + "/quantized.onnx";
  qs::test::writeBytes(q, ex->modelBytes);
  const int samples = (int)data->batchCount();
  ASSERT_EQ(runOrtRows(path, dir, dir + "/fp32", samples, 2), 0) << std::ifstream(dir + "/fp32.log").rdbuf();
  out.predicted = (*r)->outputs[0].metrics.snrDb;
  for (const std::string& level : levels) {
    const std::string o = dir + "/q_" + level;
    ASSERT_EQ(runOrtRows(q, dir, o, samples, 2, "--level " + level + " --disable-qdq"), 0) << std::ifstream(o + ".log").rdbuf();
    ErrorAccumulator acc;
    for (int i = 0; i < samples; ++i) {
      auto ref = readNpy(dir + "/fp32/out_" + std::to_string(i) + "_0.npy");
      auto got = readNpy(o + "/out_" + std::to_string(i) + "_0.npy");
      ASSERT_TRUE(ref && got);
      acc.add(*ref, *got);
    }
    out.measured.push_back(acc.metrics().snrDb);
    std::printf("cls fp16, %d lines, %zu excluded, ORT level %s: predicted %.3f dB, ORT %.3f dB\n", samples,
                exclude.size(), level.c_str(), out.predicted, out.measured.back());
  }
  fs::remove_all(dir);
}

// Every node in INT8: ORT's output SNR near the prediction as the model is written (graph
// optimizations disabled). On the 6 stb_easy_font lines this test used before, ORT measured 0.53 dB
// above the prediction, more than 0.5; that gap is the sample set, not the simulation (docs/quality.md,
// "Mixed precision", 2026-11-27): on the 16 real lines of .cache/samples/cls and on 16 FreeType-rendered
// lines the two agree to 0.06 dB and 0.000 dB. Where they differ, one or two lines near cls's decision
// boundary carry most of the output error, and there ORT differs from itself by as much when the
// float16 rounding of a few tensors changes. With ORT's basic optimizations (float16 DequantizeLinear
// and BatchNormalization folded into the Convs, a graph the analysis does not simulate): 0.43 dB below
// the prediction on the real lines, 3.55 dB on the rendered ones (printed, not asserted).
TEST(HighPrecision, ClsFp16ExportMatchesThePredictionInOrt) {
  if (!fs::exists(std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx") || !fs::exists(kClsSamples))
    GTEST_SKIP() << "cls model or samples missing: run scripts/setup.sh";
  ClsFp16 real;
  runClsFp16({}, {"disabled", "basic"}, real, ClsLines::Samples, 16);
  ASSERT_EQ(real.measured.size(), 2u);
  EXPECT_NEAR(real.measured[0], real.predicted, 0.5) << "level disabled, .cache/samples/cls";
  EXPECT_NEAR(real.measured[1], real.predicted, 0.75) << "level basic, .cache/samples/cls";
  EXPECT_GT(real.measured[0], 10.0);
  if (qs::test::kUnderSanitizer) return;
  ClsFp16 fonts;
  runClsFp16({}, {"disabled", "basic"}, fonts, ClsLines::Fonts, 16);
  ASSERT_EQ(fonts.measured.size(), 2u);
  EXPECT_NEAR(fonts.measured[0], fonts.predicted, 0.5) << "level disabled, rendered lines";
  EXPECT_GT(fonts.measured[1], 10.0) << "level basic, rendered lines";
}

// Regression (fp16 fallback 2.3 dB optimistic): ten Convs left out of INT8 (those --target-snr 30
// excluded with max calibration) run in float16 there, where ORT computes the float chains between
// them in float32. Rounding every node output, as the analysis did, predicted 2.3 dB more than ORT
// measured on the lead's 8 images; now 0.13 dB apart on these 6.
TEST(HighPrecision, ClsFp16WithExcludedNodesMatchesThePredictionInOrt) {
  if (qs::test::kUnderSanitizer) GTEST_SKIP() << "slow under sanitizers";
  if (!fs::exists(std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx"))
    GTEST_SKIP() << "cls model missing: run scripts/setup.sh";
  ClsFp16 r;
  runClsFp16({"p2o.Conv.13$", "p2o.Conv.7$", "p2o.Conv.2$", "p2o.Conv.51$", "p2o.Conv.8$", "p2o.Conv.1$", "p2o.Conv.18$",
              "p2o.Conv.46$", "p2o.Conv.41$", "p2o.Conv.5$"},
             {"disabled", "basic"}, r);
  ASSERT_EQ(r.measured.size(), 2u);
  EXPECT_NEAR(r.measured[0], r.predicted, 0.5) << "level disabled";
  // Not asserted: with basic optimizations ORT computes another graph (BatchNormalization folded
  // into the float16 Convs, ...), measured 3.4 dB above the prediction here (printed above).
  EXPECT_GT(r.measured[1], 10.0) << "level basic";
}

// The CLI: a bad value is one line naming the flag and the value, exit non-zero, no files.
TEST(HighPrecision, CliRefusesABadValueInOneLine) {
  const std::string dir = qs::test::makeTempDir("high-precision-cli");
  SmallModel m = makeSmallModel();
  const std::string cmd = std::string(QS_BINARY) + " export " + m.path + " --high-precision-dtype fp12 --output-dir " +
                          dir + "/out > " + dir + "/err.txt 2>&1";
  EXPECT_NE(runCommand(cmd), 0);
  std::ifstream in(dir + "/err.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string err = ss.str();
  EXPECT_NE(err.find("--high-precision-dtype 'fp12': expected fp32, fp16 or bf16"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(fs::exists(dir + "/out/quantized.onnx"));
  fs::remove_all(dir);
  fs::remove_all(m.dir);
}

}  // namespace
