// The quantscope binary end to end: exit codes and one-line errors for bad models and bad
// input files, and info/run on a model built in code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/io/npy.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  int exitCode = -1;
  std::string out, err;
};

Outcome runQuantscope(const std::string& args, const std::string& dir) {
  std::string errFile = dir + "/stderr.txt";
  std::string cmd = std::string(QS_BINARY) + " " + args + " 2>" + errFile;
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  int status = pclose(p);
  o.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(errFile);
  std::stringstream ss;
  ss << e.rdbuf();
  o.err = ss.str();
  return o;
}

int lineCount(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

struct CliTest : ::testing::Test {
  std::string dir = qs::test::makeTempDir("cli");
  std::string model = dir + "/add.onnx";
  void SetUp() override {
    OnnxBuilder b(13);
    b.input("x", {2, 3}).output("y", {2, 3});
    b.initializer("w", {3}, {1.f, 2.f, 3.f});
    b.node("Add", {"x", "w"}, {"y"}, "add");
    b.save(model);
  }
  void TearDown() override { fs::remove_all(dir); }
};

}  // namespace

TEST_F(CliTest, InfoPrintsJson) {
  auto o = runQuantscope("info --json " + model, dir);
  EXPECT_EQ(o.exitCode, 0) << o.err;
  EXPECT_NE(o.out.find("\"opset\": 13"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\"parameter_count\": 3"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\"Add\": 1"), std::string::npos) << o.out;
}

TEST_F(CliTest, RunWritesOutputsKeyedByName) {
  Tensor x(DType::Float, {2, 3});
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = (float)i;
  ASSERT_TRUE(writeNpz(dir + "/in.npz", {{"x", x}}, false));
  auto o = runQuantscope("run " + model + " --input " + dir + "/in.npz --output " + dir + "/out.npz --repeat 3 --profile " +
                             dir + "/p.json",
                         dir);
  ASSERT_EQ(o.exitCode, 0) << o.err;
  EXPECT_NE(o.out.find("\"ms_median\""), std::string::npos);
  auto out = readNpz(dir + "/out.npz");
  ASSERT_TRUE(out) << out.status().message();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].name, "y");
  EXPECT_EQ((*out)[0].tensor.data<float>()[5], 5.f + 3.f);
  EXPECT_TRUE(fs::exists(dir + "/p.json"));
}

TEST_F(CliTest, BadModelsExitTwoWithOneLine) {
  qs::test::writeBytes(dir + "/empty.onnx", "");
  qs::test::writeBytes(dir + "/junk.onnx", std::string(1000, '\x07'));
  for (std::string m : {dir + "/empty.onnx", dir + "/junk.onnx", dir + "/missing.onnx"}) {
    auto o = runQuantscope("info " + m, dir);
    EXPECT_EQ(o.exitCode, 2) << m;
    EXPECT_EQ(lineCount(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(m), std::string::npos) << o.err;
  }
}

TEST_F(CliTest, BadInputFilesExitTwoWithOneLine) {
  Tensor good(DType::Float, {2, 3});
  Tensor wrongShape(DType::Float, {3, 2});
  Tensor wrongType(DType::Int32, {2, 3});
  for (int i = 0; i < 6; ++i) good.data<float>()[i] = 1.f;
  ASSERT_TRUE(writeNpz(dir + "/name.npz", {{"input", good}}, false));
  ASSERT_TRUE(writeNpz(dir + "/shape.npz", {{"x", wrongShape}}, false));
  ASSERT_TRUE(writeNpz(dir + "/dtype.npz", {{"x", wrongType}}, true));
  qs::test::writeBytes(dir + "/notnpz.npz", "this is not a zip archive");
  struct Case {
    std::string file, message;
  } cases[] = {
      {"name.npz", "key 'input' is not an input"},
      {"shape.npz", "input 'x' expects shape [2,3], got [3,2]"},
      {"dtype.npz", "input 'x' expects float, got int32"},
      {"notnpz.npz", "notnpz.npz"},
  };
  for (const auto& c : cases) {
    std::string out = dir + "/out-" + c.file;
    auto o = runQuantscope("run " + model + " --input " + dir + "/" + c.file + " --output " + out, dir);
    EXPECT_EQ(o.exitCode, 2) << c.file << ": " << o.err;
    EXPECT_EQ(lineCount(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(c.message), std::string::npos) << o.err;
    EXPECT_FALSE(fs::exists(out)) << "no output file on failure";
  }
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(runQuantscope("run " + model, dir).exitCode, 2);
  EXPECT_EQ(runQuantscope("info", dir).exitCode, 2);
  EXPECT_EQ(runQuantscope("run " + model + " --threads -3 --random-input", dir).exitCode, 2);
}
