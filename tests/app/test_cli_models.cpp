// The quantscope binary on the sample models (PP-OCRv4 det: input x [N,3,H,W] with symbolic N, H
// and W): random calibration inputs need --shape, which analyze and export take.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/onnx_builder.h"

namespace {

namespace fs = std::filesystem;

const std::string kDet = std::string(QS_MODELS_DIR) + "/ch_PP-OCRv4_det_infer.onnx";

struct Outcome {
  int exitCode = -1;
  std::string out, err;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Outcome quantscope(const std::string& args, const std::string& dir) {
  const std::string cmd = std::string(QS_BINARY) + " " + args + " >" + dir + "/out.txt 2>" + dir + "/err.txt";
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, readFile(dir + "/out.txt"), readFile(dir + "/err.txt")};
}

int lines(const std::string& s) { return (int)std::count(s.begin(), s.end(), '\n'); }

TEST(CliOnDet, RandomInputsNeedAShapeAndWorkWithOne) {
  if (!fs::exists(kDet)) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  const std::string dir = qs::test::makeTempDir("cli-det");
  // Without a shape: one line that says which input and suggests the flag, nothing written.
  Outcome refused = quantscope("export " + kDet + " --output-dir " + dir + "/none", dir);
  EXPECT_EQ(refused.exitCode, 2);
  EXPECT_EQ(lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("input 'x'"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--shape x="), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(dir + "/none"));
  // With one: analyze reports the output, export writes the four files; the loud warning says
  // the scales of random data mean nothing.
  Outcome an = quantscope("analyze " + kDet + " --shape x=1x3x96x96 --calibration-size 2 --no-sensitivity --threads 2 --report " +
                          dir + "/r.json",
                      dir);
  ASSERT_EQ(an.exitCode, 0) << an.err;
  EXPECT_NE(an.out.find("output sigmoid_0.tmp_0"), std::string::npos) << an.out;
  EXPECT_NE(an.err.find("WARNING: no calibration data"), std::string::npos) << an.err;
  EXPECT_NE(readFile(dir + "/r.json").find("\"samples\": 2"), std::string::npos);
  Outcome ex = quantscope("export " + kDet + " --shape x=1x3x64x64 --no-sensitivity --no-layerwise --threads 2 --output-dir " +
                          dir + "/out",
                      dir);
  ASSERT_EQ(ex.exitCode, 0) << ex.err;
  for (const char* f : {"quantized.onnx", "quant_cfg.json", "calibration.cache", "report.json"})
    EXPECT_TRUE(fs::exists(dir + "/out/" + f)) << f;
  fs::remove_all(dir);
}

}  // namespace
