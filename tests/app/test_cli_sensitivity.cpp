// quantscope analyze --sensitivity exact|fast|off and --model-explorer, end to end on a built
// MatMul chain with one bad node (tests/support/sensitivity_model.h).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/onnx_builder.h"

namespace fs = std::filesystem;

namespace {

struct CliRun {
  int exitCode = -1;
  std::string err;
};

CliRun quantscope(const std::string& args, const std::string& dir) {
  const std::string cmd = std::string(QS_BINARY) + " " + args + " >" + dir + "/out.txt 2>" + dir + "/err.txt";
  const int st = std::system(cmd.c_str());
  std::ifstream e(dir + "/err.txt");
  std::stringstream ss;
  ss << e.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, ss.str()};
}

// x -> MatMul m1 -> Tanh -> MatMul m2 (outliers in its weights) -> Tanh -> MatMul m3 -> y.
std::string writeModel(const std::string& dir) {
  qs::test::OnnxBuilder b(13);
  const int64_t n = 16;
  b.input("x", {1, 8, n}).output("y", {1, 8, n});  // M = 8: not a GEMV, so quantizable
  for (int k = 1; k <= 3; ++k) {
    std::vector<float> w((size_t)(n * n));
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * std::sin(0.7f * (float)i + (float)k);
    if (k == 2)
      for (int64_t c = 0; c < n; ++c) w[(size_t)(((c * 5) % n) * n + c)] = 30.0f;
    b.initializer("w" + std::to_string(k), {n, n}, w);
    const std::string in = k == 1 ? "x" : "r" + std::to_string(k - 1);
    const std::string out = k == 3 ? "y" : "h" + std::to_string(k);
    b.node("MatMul", {in, "w" + std::to_string(k)}, {out}, "m" + std::to_string(k));
    if (k < 3) b.node("Tanh", {out}, {"r" + std::to_string(k)}, "t" + std::to_string(k));
  }
  const std::string path = dir + "/chain.onnx";
  b.save(path);
  return path;
}

nlohmann::json readJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST(CliSensitivity, ModesAndModelExplorerOverlays) {
  const std::string dir = qs::test::makeTempDir("cli-sens");
  const std::string model = writeModel(dir);
  const std::string common = "analyze " + model + " --calibration-size 2 --calibration-method max --threads 1 ";
  for (const char* mode : {"exact", "fast", "off"}) {
    const std::string report = dir + "/" + mode + ".json";
    CliRun r = quantscope(common + "--sensitivity " + mode + " --report " + report, dir);
    ASSERT_EQ(r.exitCode, 0) << mode << ": " << r.err;
    const nlohmann::json j = readJson(report);
    EXPECT_EQ(j["settings"]["sensitivity"], mode);
    EXPECT_GT(j["peak_rss_bytes"].get<uint64_t>(), 0u);
    for (const auto& l : j["layers"]) {
      if (!l["quantizable"].get<bool>()) continue;
      EXPECT_EQ(l["sensitivity_snr_db"].is_null(), std::string(mode) == "off") << mode << " " << l["node"];
      EXPECT_EQ(l["sensitivity_exact"].get<bool>(), std::string(mode) == "exact") << mode << " " << l["node"];
    }
  }
  CliRun me = quantscope(common + "--model-explorer " + dir + "/me.json", dir);
  ASSERT_EQ(me.exitCode, 0) << me.err;
  for (const char* f : {"me.json", "me-layerwise.json", "me-sensitivity.json"}) {
    const nlohmann::json j = readJson(dir + "/" + f);
    ASSERT_EQ(j.size(), 1u) << f;  // one graph
    const nlohmann::json& results = j.begin().value()["results"];
    for (const char* key : {"h1", "h2", "y"}) EXPECT_TRUE(results.contains(key)) << f << " " << key;
  }
  CliRun bad = quantscope(common + "--sensitivity sometimes", dir);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--sensitivity 'sometimes'"), std::string::npos) << bad.err;
  fs::remove_all(dir);
}
