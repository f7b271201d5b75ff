// Issue #19's development models through the CLI end to end: `quantscope analyze` and
// `quantscope export` on the LSTM speech model, the scripted If/Loop model and the NMS detector,
// then the exported quantized.onnx run in ONNX Runtime on the calibration samples: its output SNR
// against ORT's FP32 outputs must be within 0.5 dB of the SNR report.json predicted.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

int run(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct DevCase {
  const char* name;
  Shape sampleShape;  // one sample, batch 1
};

class DevModelExport : public ::testing::TestWithParam<DevCase> {};

TEST_P(DevModelExport, AnalyzeAndExportRunAndOrtMatchesThePrediction) {
  const DevCase& c = GetParam();
  const std::string model = std::string(QS_SOURCE_DIR) + "/.cache/zoo/" + c.name + ".onnx";
  ASSERT_TRUE(fs::exists(model)) << model << " missing: run scripts/setup.sh";
  constexpr int kSamples = 6;
  const std::string dir = qs::test::makeTempDir("dev-export");
  // Calibration samples stacked in one .npy (batch of kSamples, fed one at a time), and the same
  // samples one file each for ORT.
  Shape all = c.sampleShape;
  all[0] = kSamples;
  Tensor stacked(DType::Float, all);
  std::mt19937 rng(1919);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t per = stacked.numel() / kSamples;
  for (int s = 0; s < kSamples; ++s) {
    Tensor one(DType::Float, c.sampleShape);
    const float scale = 0.4f + 0.1f * float(s), offset = s % 2 ? 0.3f : -0.2f;
    for (int64_t k = 0; k < per; ++k) one.data<float>()[k] = scale * normal(rng) + offset;
    std::copy(one.data<float>(), one.data<float>() + per, stacked.data<float>() + s * per);
    ASSERT_TRUE(writeNpy(dir + "/in_" + std::to_string(s) + "_0.npy", one));
  }
  ASSERT_TRUE(writeNpy(dir + "/calib.npy", stacked));
  const std::string q = std::string(QS_BINARY);
  const std::string data = " --calibration-data " + dir + "/calib.npy --calibration-batch-size 1 --calibration-method max";
  ASSERT_EQ(run(q + " analyze " + model + data + " --report " + dir + "/analyze.json > " + dir + "/analyze.txt 2>&1"), 0)
      << std::ifstream(dir + "/analyze.txt").rdbuf();
  ASSERT_EQ(run(q + " export " + model + data + " --output-dir " + dir + "/out > " + dir + "/export.txt 2>&1"), 0)
      << std::ifstream(dir + "/export.txt").rdbuf();
  Json report = Json::parse(std::ifstream(dir + "/out/report.json"));
  Json analyzed = Json::parse(std::ifstream(dir + "/analyze.json"));
  ASSERT_EQ(report.at("outputs").size(), analyzed.at("outputs").size());

  const std::string ort = "ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) + "/tests/support/ort_batch.mjs ";
  const std::string n = " --samples " + std::to_string(kSamples) + " --threads 2";
  ASSERT_EQ(run(ort + model + " " + dir + " " + dir + "/fp32" + n), 0);
  ASSERT_EQ(run(ort + dir + "/out/quantized.onnx " + dir + " " + dir + "/q" + n + " --level basic --disable-qdq"), 0);
  int checked = 0;
  for (size_t i = 0; i < report.at("outputs").size(); ++i) {
    ErrorAccumulator acc;
    bool sameShapes = true, isFloat = true;
    for (int s = 0; s < kSamples; ++s) {
      const std::string f = "/out_" + std::to_string(s) + "_" + std::to_string(i) + ".npy";
      auto ref = readNpy(dir + "/fp32" + f);
      auto got = readNpy(dir + "/q" + f);
      ASSERT_TRUE(ref && got) << f;
      sameShapes = sameShapes && ref->shape() == got->shape();
      isFloat = isFloat && ref->dtype() == DType::Float;
      acc.add(*ref, *got);
    }
    const std::string name = report["outputs"][i]["name"];
    const double predicted = report["outputs"][i]["snr_db"].is_number() ? report["outputs"][i]["snr_db"].get<double>() : 999.0;
    const double measured = acc.metrics().snrDb;
    std::printf("%s output '%s': predicted %.2f dB, ORT %.2f dB%s\n", c.name, name.c_str(), predicted, measured,
                sameShapes ? "" : " (shapes differ between FP32 and INT8: selections changed)");
    // Outputs whose shape follows the data (the boxes NMS keeps) compare element by element only
    // where the selections agree; those are reported, the others checked.
    if (!sameShapes || !isFloat) continue;
    EXPECT_NEAR(measured, predicted, 0.5) << c.name << " output " << name;
    ++checked;
  }
  EXPECT_GE(checked, 1) << c.name << ": no output could be compared";
  fs::remove_all(dir);
}

// `info` counts the nodes inside the If branches and the Loop body apart from the main graph's,
// and the analysis report lists them as kept in float, with the control-flow nodes' reason.
TEST(DevModelCli, InfoAndReportListTheNodesInsideSubgraphs) {
  const std::string model = std::string(QS_SOURCE_DIR) + "/.cache/zoo/scripted_control.onnx";
  ASSERT_TRUE(fs::exists(model)) << model << " missing: run scripts/setup.sh";
  const std::string dir = qs::test::makeTempDir("dev-info");
  const std::string q = std::string(QS_BINARY);
  ASSERT_EQ(run(q + " info --json " + model + " > " + dir + "/info.json"), 0);
  Json info = Json::parse(std::ifstream(dir + "/info.json"));
  EXPECT_EQ(info.at("op_histogram").at("If"), 1);
  EXPECT_EQ(info.at("op_histogram").at("Loop"), 1);
  EXPECT_EQ(info.at("op_histogram").at("Gemm"), 2);              // the main graph's: input and output layers
  EXPECT_EQ(info.at("subgraph_op_histogram").at("Gemm"), 3);     // two branches and the loop body
  EXPECT_EQ(info.at("subgraph_node_count"), 9);
  ASSERT_EQ(run(q + " analyze " + model + " --shape x=2x16 --report " + dir + "/r.json > /dev/null 2>&1"), 0);
  Json r = Json::parse(std::ifstream(dir + "/r.json"));
  ASSERT_EQ(r.at("subgraph_nodes").size(), 9u);
  for (const auto& n : r.at("subgraph_nodes")) {
    EXPECT_EQ(n.at("reason"), "inside a subgraph, kept in float");
    const std::string scope = n.at("scope");
    EXPECT_TRUE(scope == "/If/then_branch" || scope == "/If/else_branch" || scope == "/Loop/body") << scope;
  }
  int controlFlow = 0;
  for (const auto& l : r.at("layers")) {
    if (l.at("op_type") != "If" && l.at("op_type") != "Loop") continue;
    ++controlFlow;
    EXPECT_FALSE(l.at("quantized").get<bool>());
    EXPECT_NE(l.at("reason").get<std::string>().find("control flow"), std::string::npos);
  }
  EXPECT_EQ(controlFlow, 2);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Issue19, DevModelExport,
                         ::testing::Values(DevCase{"lstm_speech", {1, 40, 40}}, DevCase{"scripted_control", {1, 16}},
                                           DevCase{"nms_detector", {1, 3, 128, 128}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
