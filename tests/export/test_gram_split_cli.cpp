// `--gram-split on|off` (issue #16, analysis cost): the weight/activation split of MatMuls with a
// 2-D weight from Gram matrices where cheaper (the default), or from the products with `off`. On
// rec (whose SVTR MatMuls take the Gram route): `off` is recorded in report.json's settings, the
// split figures differ between the runs (the flag reaches the analysis) by at most 1e-3 dB, every
// other figure is the same; a bad value fails in one line with exit code 2 and no report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"
#include "tests/support/text_images.h"

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using qs::test::readText;

class GramSplitCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model = std::string(QS_MODELS_DIR) + "/ch_PP-OCRv4_rec_infer.onnx";
    if (!fs::exists(model)) GTEST_SKIP() << "models missing";
    dir = qs::test::makeTempDir("gram-split-cli");
    qs::test::writeTextImages(dir + "/images", 2, 320, 48, 3);
    common = std::string(QS_BINARY) + " analyze " + model + " --calibration-data " + dir +
             "/images --image-size 320x48 --mean 0.5,0.5,0.5 --std 0.5,0.5,0.5 --calibration-method max " +
             "--sensitivity off --threads 2";
  }
  void TearDown() override {
    if (!dir.empty()) fs::remove_all(dir);
  }
  std::string model, dir, common;
};

}  // namespace

TEST_F(GramSplitCli, OffIsRecordedAndAgreesWithTheGramRoute) {
  Json reports[2];
  for (int off = 0; off < 2; ++off) {
    const std::string report = dir + "/r" + std::to_string(off) + ".json";
    const std::string cmd = common + (off ? " --gram-split off" : "") + " --report " + report + " >/dev/null 2>" +
                            dir + "/err.txt";
    ASSERT_EQ(qs::test::runCommand(cmd), 0) << cmd << "\n" << readText(dir + "/err.txt");
    reports[off] = Json::parse(readText(report));
  }
  EXPECT_FALSE(reports[0]["settings"].contains("gram_split"));
  EXPECT_EQ(reports[1]["settings"].value("gram_split", ""), "off");
  const Json& on = reports[0]["layers"];
  const Json& off = reports[1]["layers"];
  ASSERT_EQ(on.size(), off.size());
  int differ = 0;
  for (size_t i = 0; i < on.size(); ++i) {
    for (const char* key : {"weight_snr_db", "activation_snr_db"}) {
      const Json &a = on[i][key], &b = off[i][key];
      if (!a.is_number() || !b.is_number()) {
        EXPECT_EQ(a, b) << on[i]["node"] << " " << key;
        continue;
      }
      const double d = std::fabs(a.get<double>() - b.get<double>());
      differ += d > 0;
      EXPECT_LE(d, 1e-3) << on[i]["node"] << " " << key << ": " << a << " dB from Grams, " << b << " from products";
    }
    // The layer-wise (both points) and graph-wise figures come from the same products either way.
    EXPECT_EQ(on[i]["layerwise"], off[i]["layerwise"]) << on[i]["node"];
    EXPECT_EQ(on[i]["graphwise"], off[i]["graphwise"]) << on[i]["node"];
  }
  EXPECT_GE(differ, 2);
}

TEST_F(GramSplitCli, BadValueFailsInOneLine) {
  const std::string report = dir + "/bad.json";
  const std::string cmd = common + " --gram-split maybe --report " + report + " >/dev/null 2>" + dir + "/err.txt";
  EXPECT_EQ(qs::test::runCommand(cmd), 2);
  const std::string err = readText(dir + "/err.txt");
  EXPECT_NE(err.find("--gram-split 'maybe': expected on or off"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(fs::exists(report));
}
