// quantscope analyze --memory-budget (core/analysis/streaming.h) end to end: a budget below any
// activation table streams and gives the report of the unbounded run; bad sizes exit 2 with one line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/util/memory_budget.h"
#include "tests/support/sensitivity_model.h"

namespace fs = std::filesystem;

namespace {

struct CliRun {
  int exitCode = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliRun quantscope(const std::string& args, const std::string& dir) {
  const std::string cmd = std::string(QS_BINARY) + " " + args + " >" + dir + "/out.txt 2>" + dir + "/err.txt";
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(dir + "/out.txt"), slurp(dir + "/err.txt")};
}

}  // namespace

TEST(CliMemory, ParseByteSize) {
  uint64_t b = 0;
  ASSERT_TRUE(qs::parseByteSize("4G", b));
  EXPECT_EQ(b, uint64_t(4) << 30);
  ASSERT_TRUE(qs::parseByteSize("512m", b));
  EXPECT_EQ(b, uint64_t(512) << 20);
  ASSERT_TRUE(qs::parseByteSize("1.5GiB", b));
  EXPECT_EQ(b, uint64_t(3) << 29);
  ASSERT_TRUE(qs::parseByteSize("65536", b));
  EXPECT_EQ(b, 65536u);
  for (const char* bad : {"", "G", "4X", "-1G", "0", "4 G", "1e30T", "nan"}) {
    const qs::Status st = qs::parseByteSize(bad, b);
    EXPECT_FALSE(st) << bad;
    EXPECT_NE(st.message().find("--memory-budget"), std::string::npos) << st.message();
  }
  EXPECT_EQ(qs::formatByteSize(uint64_t(3) << 29), "1.50 GiB");
  EXPECT_EQ(qs::formatByteSize(512), "512 B");
  EXPECT_GT(qs::defaultMemoryBudgetBytes(), 0u);
}

TEST(CliMemory, TinyBudgetStreamsWithTheSameReport) {
  const std::string dir = qs::test::makeTempDir("cli-mem");
  // x -> MatMul -> Tanh -> MatMul (an outlier per column) -> Tanh -> MatMul -> Tanh -> MatMul -> y
  qs::test::OnnxBuilder mb(13);
  const int64_t n = 32;
  mb.input("x", {1, 8, n}).output("y", {1, 8, n});
  std::mt19937 rng(11);
  for (int k = 1; k <= 4; ++k) {
    std::vector<float> w = qs::test::randomValues((size_t)(n * n), rng, -0.3f, 0.3f);
    if (k == 2)
      for (int64_t c = 0; c < n; ++c) w[(size_t)(((c * 7) % n) * n + c)] = 40.0f;
    mb.initializer("w" + std::to_string(k), {n, n}, w);
    const std::string in = k == 1 ? "x" : "r" + std::to_string(k - 1);
    const std::string mm = k == 4 ? "y" : "h" + std::to_string(k);
    mb.node("MatMul", {in, "w" + std::to_string(k)}, {mm}, "m" + std::to_string(k));
    if (k < 4) mb.node("Tanh", {mm}, {"r" + std::to_string(k)}, "t" + std::to_string(k));
  }
  const std::string path = dir + "/chain.onnx";
  mb.save(path);
  const std::string common = "analyze " + path +
                             " --calibration-size 3 --calibration-method max --threads 1 --sensitivity exact ";
  CliRun full = quantscope(common + "--memory-budget 64G --report " + dir + "/full.json", dir);
  ASSERT_EQ(full.exitCode, 0) << full.err;
  CliRun tiny = quantscope(common + "--memory-budget 1K --report " + dir + "/tiny.json", dir);
  ASSERT_EQ(tiny.exitCode, 0) << tiny.err;
  EXPECT_NE(tiny.out.find("memory: peak RSS"), std::string::npos) << tiny.out;
  EXPECT_NE(tiny.out.find("budget 1.00 KiB (streamed"), std::string::npos) << tiny.out;
  EXPECT_EQ(full.out.find("streamed"), std::string::npos) << full.out;
  nlohmann::json a = nlohmann::json::parse(slurp(dir + "/full.json"));
  nlohmann::json b = nlohmann::json::parse(slurp(dir + "/tiny.json"));
  EXPECT_EQ(a["streamed"], false);
  EXPECT_EQ(b["streamed"], true);
  EXPECT_EQ(b["memory_budget_bytes"], 1024);
  // The figures: every layer's and output's, equal to float rounding.
  ASSERT_EQ(a["layers"].size(), b["layers"].size());
  int compared = 0;
  for (size_t i = 0; i < a["layers"].size(); ++i) {
    for (const char* key : {"sensitivity_snr_db", "graphwise", "layerwise"}) {
      const nlohmann::json &x = a["layers"][i][key], &y = b["layers"][i][key];
      ASSERT_EQ(x.is_null(), y.is_null()) << key;
      if (x.is_number()) {
        EXPECT_NEAR(x.get<double>(), y.get<double>(), 1e-6) << key;
        ++compared;
      } else if (x.is_object() && x.contains("snr_db") && x["snr_db"].is_number()) {
        EXPECT_NEAR(x["snr_db"].get<double>(), y["snr_db"].get<double>(), 1e-6) << key;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 8);  // 4 MatMuls: sensitivity and graph-wise at least
  EXPECT_NEAR(a["outputs"][0]["snr_db"].get<double>(), b["outputs"][0]["snr_db"].get<double>(), 1e-6);

  CliRun bad = quantscope(common + "--memory-budget 4X", dir);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--memory-budget '4X'"), std::string::npos) << bad.err;
  fs::remove_all(dir);
}
