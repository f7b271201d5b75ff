// The CLI's agreement figures and flags (issue #14, item 5): `analyze` on cls prints the agreement
// under the output's SNR and writes it to report.json, which validates against the schema with a
// --target-agreement fallback in it; bad --target-agreement / --output-kind values and an
// --output-kind naming no output fail in one line with exit code 2 and no report.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"
#include "tests/support/text_images.h"

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using qs::test::readText;
int exitCode(const std::string& cmd) { return qs::test::runCommand(cmd); }

class AgreementCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
    if (!fs::exists(model)) GTEST_SKIP() << "models missing";
    dir = qs::test::makeTempDir("agreement-cli");
    qs::test::writeTextImages(dir + "/images", 4, 192, 48, 5, true);
    common = std::string(QS_BINARY) + " analyze " + model + " --calibration-data " + dir +
             "/images --image-size 192x48 --mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 --calibration-method max " +
             "--no-layerwise --threads 2";
  }
  void TearDown() override {
    if (!dir.empty()) fs::remove_all(dir);
  }
  std::string model, dir, common;
};

}  // namespace

TEST_F(AgreementCli, ReportCarriesAgreementAndTheFallbackToIt) {
  const std::string report = dir + "/r.json";
  const std::string cmd = common + " --target-agreement 1 --output-kind softmax_0.tmp_0=classes --report " + report +
                          " --html " + dir + "/r.html" +
                          " >" + dir + "/out.txt 2>" + dir + "/err.txt";
  ASSERT_EQ(exitCode(cmd), 0) << cmd << "\n" << readText(dir + "/err.txt");
  const std::string out = readText(dir + "/out.txt");
  EXPECT_NE(out.find("agreement (classes): top-1 "), std::string::npos) << out;
  EXPECT_NE(readText(dir + "/err.txt").find("auto fallback to agreement 1:"), std::string::npos)
      << readText(dir + "/err.txt");
  const std::string html = readText(dir + "/r.html");
  EXPECT_NE(html.find("<th>agreement with float</th>"), std::string::npos);
  const Json j = Json::parse(readText(report));
  if (!j.at("fallback").at("steps").empty()) {  // the HTML lists a fallback that excluded something
    EXPECT_NE(html.find("Automatic fallback (target agreement 1.000)"), std::string::npos);
  }
  const Json& a = j.at("outputs").at(0).at("agreement");
  EXPECT_EQ(a.at("kind"), "classes");
  EXPECT_EQ(a.at("positions"), 4);
  EXPECT_EQ(a.at("top1").get<double>(), 1.0);  // excluding every node, if need be, reaches full agreement
  EXPECT_EQ(j.at("settings").at("target_agreement").get<double>(), 1.0);
  EXPECT_EQ(j.at("settings").at("output_kind"), "softmax_0.tmp_0=classes");
  EXPECT_EQ(j.at("fallback").at("target_agreement").get<double>(), 1.0);
  EXPECT_TRUE(j.at("fallback").at("target_snr_db").is_null());
  EXPECT_TRUE(j.at("fallback").at("reached").get<bool>());
  for (const Json& s : j.at("fallback").at("steps")) EXPECT_EQ(s.at("outputs_agreement").size(), 1u);
  const std::string validate = "/usr/bin/python3 " + std::string(QS_SOURCE_DIR) + "/tests/support/validate_json.py " +
                               std::string(QS_SOURCE_DIR) + "/docs/report.schema.json " + report + " 2>" + dir +
                               "/schema.txt";
  EXPECT_EQ(exitCode(validate), 0) << readText(dir + "/schema.txt");
}

TEST_F(AgreementCli, BadValuesFailInOneLine) {
  const struct {
    std::string flags, message;
  } cases[] = {
      {"--target-agreement 1.5", "--target-agreement 1.500000: expected a fraction in [0, 1]"},
      {"--output-kind softmax_0.tmp_0=words", "--output-kind 'softmax_0.tmp_0=words': expected NAME=classes"},
      {"--output-kind nothing", "--output-kind 'nothing': expected NAME=classes"},
      {"--output-kind logits=classes", "--output-kind names 'logits', not a graph output (outputs: softmax_0.tmp_0)"},
  };
  for (const auto& c : cases) {
    const std::string report = dir + "/bad.json";
    const std::string cmd = common + " " + c.flags + " --report " + report + " >/dev/null 2>" + dir + "/err.txt";
    EXPECT_EQ(exitCode(cmd), 2) << c.flags;
    const std::string err = readText(dir + "/err.txt");
    EXPECT_NE(err.find(c.message), std::string::npos) << c.flags << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << c.flags << ": " << err;
    EXPECT_FALSE(fs::exists(report)) << c.flags;
  }
}
