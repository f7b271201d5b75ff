// The split of each activation point's error into clip and rounding noise
// (core/analysis/activation_split.h): at the tensor the two parts are those of the elements that
// saturate and of the others, and add up to the point's whole error (checked against a reference
// computed here element by element); with the max calibration nothing clips, and the rounding part at
// the consumer is the layer-wise activation SNR the analysis reports; with a range of a quarter of
// the max the clip part dominates, at the tensor and at the consumer. report.json carries both only
// when the split ran; `quantscope analyze --activation-split on` writes it, following
// docs/report.schema.json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/analysis/activation_split.h"
#include "core/analysis/quant_session.h"
#include "core/export/report.h"
#include "core/numeric/fake_quant.h"
#include "tests/support/remedy_helpers.h"
#include "tests/support/sensitivity_model.h"

using namespace qs;
using namespace qs::test;

namespace {

// x -> MatMul "m" (random weights) -> y: the activation point is x, the graph input.
OnnxBuilder oneMatMulBuilder() {
  OnnxBuilder b(13);
  const int64_t n = 32;
  b.input("x", {1, 8, n}).output("y", {1, 8, n});
  std::mt19937 rng(3);
  b.initializer("w", {n, n}, randomValues((size_t)(n * n), rng, -0.3f, 0.3f));
  b.node("MatMul", {"x", "w"}, {"y"}, "m");
  return b;
}

std::shared_ptr<Model> oneMatMulModel() { return builtModel(oneMatMulBuilder(), "one_matmul.onnx"); }

struct Analysed {
  std::shared_ptr<Model> model;
  std::shared_ptr<const CalibrationData> data;
  std::unique_ptr<QuantSession> session;
};

Analysed analysed(float amaxFraction) {
  Analysed a;
  a.model = oneMatMulModel();
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  auto s = QuantSession::create(a.model, QuantConfig{}, ao);
  EXPECT_TRUE(s) << s.status().message();
  a.session = std::move(s).value();
  a.data = randomData(*a.model, 4);
  EXPECT_TRUE(a.session->calibrate(*a.data));
  if (amaxFraction < 1) {
    const ValueId x = a.model->graph.findValue("x");
    const float amax = a.session->state().activation(x)->amax;
    EXPECT_TRUE(a.session->setActivationAmax({{"x", amax * amaxFraction}}));
  }
  auto r = a.session->analyze(a.data);
  EXPECT_TRUE(r) << r.status().message();
  return a;
}

// The reference: every element of x over the data, fake-quantized at `scale`, its error put in the
// clip part where x / scale rounds outside -128..127.
TensorNoiseSplit referenceSplit(const CalibrationData& data, float scale) {
  TensorNoiseSplit t;
  for (int64_t b = 0; b < data.batchCount(); ++b) {
    auto feeds = data.batch(b);
    EXPECT_TRUE(feeds);
    const Tensor& x = (*feeds)[0].tensor;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = x.data<float>()[i];
      float q = 0;
      fakeQuantInt8(&v, &q, 1, scale, kActQmin, kActQmax);
      const double e = (double)q - (double)v;
      const float k = std::nearbyint(v / scale);
      t.signal += (double)v * v;
      ++t.count;
      if (k < kActQmin || k > kActQmax) {
        ++t.clipped;
        t.clipNoise += e * e;
      } else {
        t.roundingNoise += e * e;
      }
    }
  }
  return t;
}

}  // namespace

TEST(ActivationSplit, MaxCalibrationHasNoClipNoiseAndTheRoundingPartIsTheActivationSnr) {
  Analysed a = analysed(1.0f);
  auto split = activationNoiseSplit(*a.session, *a.data);
  ASSERT_TRUE(split) << split.status().message();
  const Graph& g = a.model->graph;
  const ValueId x = g.findValue("x");
  ASSERT_EQ(split->tensors.count(x), 1u);
  const TensorNoiseSplit& t = split->tensors.at(x);
  EXPECT_EQ(t.count, 4 * 8 * 32);
  EXPECT_EQ(t.clipped, 0);
  EXPECT_EQ(t.clipNoise, 0.0);
  EXPECT_GT(t.roundingNoise, 0.0);
  EXPECT_TRUE(std::isinf(t.clipSnrDb()));
  ASSERT_EQ(split->nodes.size(), 1u);
  const NodeId m = split->nodes.begin()->first;
  EXPECT_EQ(g.nodes[(size_t)m].name, "m");
  EXPECT_TRUE(std::isinf(split->nodes.at(m).clipSnrDb));
  // Nothing clips, so the rounding-only input is the fake-quantized input: the analysis's figure.
  EXPECT_NEAR(split->nodes.at(m).roundingSnrDb, a.session->result()->nodes[(size_t)m].activationSnrDb, 0.01);
  EXPECT_EQ(split->samples, 4);
}

TEST(ActivationSplit, ClipAndRoundingPartsAddUpToTheTensorErrorAndClipDominatesAtAQuarterOfTheMax) {
  Analysed a = analysed(0.25f);
  auto split = activationNoiseSplit(*a.session, *a.data);
  ASSERT_TRUE(split) << split.status().message();
  const Graph& g = a.model->graph;
  const ValueId x = g.findValue("x");
  const TensorNoiseSplit& t = split->tensors.at(x);
  const TensorNoiseSplit ref = referenceSplit(*a.data, a.session->state().activation(x)->scale);
  EXPECT_EQ(t.count, ref.count);
  EXPECT_EQ(t.clipped, ref.clipped);
  EXPECT_GT(t.clipped, t.count / 2);  // uniform data clipped at a quarter of its max
  EXPECT_NEAR(t.signal, ref.signal, 1e-9 * ref.signal);
  EXPECT_NEAR(t.clipNoise, ref.clipNoise, 1e-9 * ref.clipNoise);
  EXPECT_NEAR(t.roundingNoise, ref.roundingNoise, 1e-9 * ref.roundingNoise);
  EXPECT_GT(t.clipShare(), 0.99);
  EXPECT_LT(t.clipSnrDb() + 20, t.roundingSnrDb());
  // At the consumer too; together the two parts give about the activation SNR (their cross term
  // is what the node's sums mix of the two).
  const NodeId m = split->nodes.begin()->first;
  const NodeNoiseSplit& ns = split->nodes.at(m);
  EXPECT_LT(ns.clipSnrDb + 20, ns.roundingSnrDb);
  const double both = -10 * std::log10(std::pow(10, -ns.clipSnrDb / 10) + std::pow(10, -ns.roundingSnrDb / 10));
  EXPECT_NEAR(both, a.session->result()->nodes[(size_t)m].activationSnrDb, 0.5);
}

TEST(ActivationSplit, ReportCarriesTheSplitOnlyWhenItRan) {
  Analysed a = analysed(0.25f);
  auto split = activationNoiseSplit(*a.session, *a.data);
  ASSERT_TRUE(split) << split.status().message();
  ReportContext ctx;
  const auto without = nlohmann::json::parse(reportJson(*a.model, *a.session->result(), ctx));
  ctx.activationSplit = *split;
  const auto with = nlohmann::json::parse(reportJson(*a.model, *a.session->result(), ctx));
  auto layer = [](const nlohmann::json& j) {
    for (const auto& l : j["layers"])
      if (l["node"] == "m") return l;
    return nlohmann::json();
  };
  auto tensor = [](const nlohmann::json& j) {
    for (const auto& t : j["tensors"])
      if (t["name"] == "x") return t;
    return nlohmann::json();
  };
  EXPECT_FALSE(layer(without).contains("activation_clip_snr_db"));
  EXPECT_FALSE(tensor(without).contains("noise_split"));
  ASSERT_TRUE(layer(with)["activation_clip_snr_db"].is_number());
  ASSERT_TRUE(layer(with)["activation_rounding_snr_db"].is_number());
  const auto ns = tensor(with)["noise_split"];
  ASSERT_TRUE(ns.is_object());
  const TensorNoiseSplit& t = split->tensors.begin()->second;
  EXPECT_NEAR(ns["clip_snr_db"].get<double>(), t.clipSnrDb(), 1e-9);
  EXPECT_NEAR(ns["rounding_snr_db"].get<double>(), t.roundingSnrDb(), 1e-9);
  EXPECT_NEAR(ns["clipped_fraction"].get<double>(), (double)t.clipped / (double)t.count, 1e-12);
  EXPECT_EQ(ns["elements"].get<int64_t>(), t.count);
}

TEST(ActivationSplit, CliWritesItIntoReportJsonFollowingTheSchema) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qs_activation_split_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "m.onnx", std::ios::binary);
    f << oneMatMulBuilder().bytes();
  }
  const std::string base = std::string(QS_BINARY) + " analyze " + (dir / "m.onnx").string() +
                           " --calibration-size 4 --calibration-method percentile --threads 1 --report ";
  ASSERT_EQ(runCommand(base + (dir / "on.json").string() + " --activation-split on > /dev/null 2>&1"), 0);
  ASSERT_EQ(runCommand(base + (dir / "off.json").string() + " > /dev/null 2>&1"), 0);
  const auto on = nlohmann::json::parse(readText((dir / "on.json").string()));
  const auto off = nlohmann::json::parse(readText((dir / "off.json").string()));
  EXPECT_EQ(on["settings"]["activation_split"], "on");
  EXPECT_FALSE(off["settings"].contains("activation_split"));
  bool layer = false, tensor = false;
  for (const auto& l : on["layers"])
    if (l["node"] == "m") layer = l["activation_rounding_snr_db"].is_number() && l.contains("activation_clip_snr_db");
  for (const auto& t : on["tensors"])
    if (t["name"] == "x") tensor = t["noise_split"]["rounding_snr_db"].is_number();
  EXPECT_TRUE(layer);
  EXPECT_TRUE(tensor);
  for (const auto& l : off["layers"]) EXPECT_FALSE(l.contains("activation_clip_snr_db"));
  for (const char* f : {"on.json", "off.json"})
    EXPECT_TRUE(test::reportFollowsSchema((dir / f).string()))
        << f;
  fs::remove_all(dir);
}
