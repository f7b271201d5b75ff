// docs/report.schema.json (JSON Schema, draft 2020-12) against the report.json that `quantscope
// analyze` writes for cls, det and rec, validated by python3-jsonschema (tests/support/validate_json.py).
// The schema is strict (no unknown keys, required keys, types and ranges), so a report field that
// the docs do not describe, or a described field the report lacks, fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kSchema = std::string(QS_SOURCE_DIR) + "/docs/report.schema.json";
const std::string kValidator = std::string(QS_SOURCE_DIR) + "/tests/support/validate_json.py";

struct SchemaCase {
  const char* tag;
  const char* file;
  int width, height;
  const char* extra;  // normalisation and the flags that add optional sections
};

const SchemaCase kCases[] = {
    // cls without the refinement: on these 2 images it alone reaches 40 dB, and the fallback curve is the point here.
    {"cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", 192, 48,
     "--mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 --target-snr 40"},
    {"det", "ch_PP-OCRv4_det_infer.onnx", 160, 160,
     "--mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 --calibration-method max --no-sensitivity --no-layerwise"},
    {"rec", "ch_PP-OCRv4_rec_infer.onnx", 320, 48, "--mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 --calibration-method mse"},
};
void PrintTo(const SchemaCase& c, std::ostream* os) { *os << c.tag; }

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int validate(const std::string& file, const std::string& errFile) {
  const std::string cmd = "/usr/bin/python3 " + kValidator + " " + kSchema + " " + file + " 2>" + errFile;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class ReportSchema : public ::testing::TestWithParam<SchemaCase> {};

TEST_P(ReportSchema, TheReportOfEachModelValidates) {
  const SchemaCase& c = GetParam();
  const std::string model = std::string(QS_MODELS_DIR) + "/" + c.file;
  ASSERT_TRUE(fs::exists(model)) << model << " missing: run scripts/setup.sh";
  const std::string dir = qs::test::makeTempDir(std::string("schema-") + c.tag);
  qs::test::writeTextImages(dir + "/images", 2, c.width, c.height, 5);
  const std::string report = dir + "/report.json";
  const std::string cmd = std::string(QS_BINARY) + " analyze " + model + " --calibration-data " + dir + "/images" +
                          " --image-size " + std::to_string(c.width) + "x" + std::to_string(c.height) + " " + c.extra +
                          // --realisations 1: the curve checks below are realisation 0's rule (with
                          // --realisations auto, cls is spread and the fallback also waits for the mean: wt-mean)
                          " --threads 2 --realisations 1 --report " + report + " >/dev/null 2>" + dir + "/err.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << readFile(dir + "/err.txt");
  EXPECT_EQ(validate(report, dir + "/v.txt"), 0) << readFile(dir + "/v.txt");

  // The layers are every node of the graph but the Constant nodes, as the schema says.
  const Json r = Json::parse(readFile(report));
  EXPECT_GT(r.at("layers").size(), 50u);
  if (std::string(c.tag) == "cls") {
    EXPECT_EQ(r.at("layers").size(), 221u);  // 471 nodes in the file, 250 of them Constant
    ASSERT_TRUE(r.contains("fallback"));
    EXPECT_FALSE(r.at("fallback").at("steps").empty());
    // The fallback curve: points 0, 1, 2... past the target; the steps are the chosen point's, the
    // first that reaches the target, and every point before it misses the target.
    const Json& fb = r.at("fallback");
    const Json& curve = fb.at("curve");
    const int chosen = fb.at("chosen_point").get<int>();
    ASSERT_GT(curve.size(), (size_t)chosen);
    for (size_t i = 0; i < curve.size(); ++i) EXPECT_EQ(curve[i].at("excluded").get<size_t>(), i);
    EXPECT_TRUE(curve[0].at("node").is_null());
    EXPECT_EQ(fb.at("steps").size(), (size_t)chosen);
    auto worst = [](const Json& p) {
      const Json& v = p.at("worst_output_snr_db");
      return v.is_string() ? (v.get<std::string>() == "inf" ? INFINITY : -INFINITY) : v.get<double>();
    };
    for (int i = 0; i < chosen; ++i) EXPECT_LT(worst(curve[(size_t)i]), 40.0) << i;
    EXPECT_TRUE(fb.at("reached").get<bool>());
    EXPECT_GE(worst(curve[(size_t)chosen]), 40.0);
    for (int i = 0; i < chosen; ++i)
      EXPECT_EQ(curve[(size_t)i + 1].at("node"), fb.at("steps")[(size_t)i].at("excluded"));
    EXPECT_GT(curve.size(), (size_t)chosen + 1) << "the curve goes on past the target";
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, ReportSchema, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<SchemaCase>& i) { return std::string(i.param.tag); });

// The check can fail: reports with an unknown key, a missing key, a wrong type and an SNR written
// as a plain string are each rejected.
TEST(ReportSchemaCheck, RejectsReportsThatDoNotFollowTheSchema) {
  const std::string dir = qs::test::makeTempDir("schema-neg");
  const Json good = {
      {"tool", {{"name", "quantscope"}, {"version", "0.1.0"}}},
      {"model", "m.onnx"},
      {"settings", {{"quantize_mode", "int8"}, {"calibration_method", "max"}, {"percentile", 99.99}, {"samples", 2}}},
      {"outputs", {{{"name", "y"}, {"snr_db", 30.5}, {"cosine", 0.99}, {"mse", 0.1}, {"max_abs", 0.5}}}},
      {"layers",
       {{{"node", "conv"}, {"op_type", "Conv"}, {"quantizable", true}, {"quantized", true}, {"reason", ""},
         {"graphwise", {{"snr_db", "inf"}, {"cosine", 1.0}, {"mse", 0.0}, {"max_abs", 0.0}}}, {"layerwise", nullptr},
         {"weight_snr_db", 40.0}, {"activation_snr_db", nullptr}, {"sensitivity_snr_db", nullptr}}}},
      {"subgraph_nodes",
       {{{"node", "add"}, {"op_type", "Add"}, {"scope", "loop/body"}, {"quantized", false},
         {"reason", "inside a subgraph, kept in float"}}}},
      {"tensors", Json::array()},
      {"warnings", Json::array()}};
  std::ofstream(dir + "/good.json") << good.dump();
  ASSERT_EQ(validate(dir + "/good.json", dir + "/v.txt"), 0) << readFile(dir + "/v.txt");

  std::vector<std::pair<std::string, Json>> bad;
  Json j = good;
  j["extra"] = 1;
  bad.emplace_back("unknown top-level key", j);
  j = good;
  j["layers"][0].erase("reason");
  bad.emplace_back("missing reason", j);
  j = good;
  j["layers"][0]["quantized"] = "yes";
  bad.emplace_back("quantized as a string", j);
  j = good;
  j["outputs"][0]["snr_db"] = "30.5";
  bad.emplace_back("SNR as text", j);
  j = good;
  j["layers"][0]["op_type"] = "Constant";
  bad.emplace_back("a Constant node listed", j);
  j = good;
  j["layers"][0]["quantized"] = false;
  bad.emplace_back("not quantized without a reason", j);
  j = good;
  j["subgraph_nodes"][0]["quantized"] = true;
  bad.emplace_back("a subgraph node quantized", j);
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string f = dir + "/bad" + std::to_string(i) + ".json";
    std::ofstream(f) << bad[i].second.dump();
    EXPECT_EQ(validate(f, dir + "/v.txt"), 1) << bad[i].first;
  }
  fs::remove_all(dir);
}

}  // namespace
