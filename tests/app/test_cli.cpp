// The quantscope binary end to end: exit codes and one-line errors for bad models and bad
// input files, and info/run on a model built in code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

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
  EXPECT_NE(o.out.find("\"shape_inference\": \"done\""), std::string::npos) << o.out;
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
    // The same files as calibration data: one line naming the file, before any progress, nothing written.
    for (const std::string& cmd : {"analyze " + model + " --progress --calibration-data " + dir + "/" + c.file +
                                      " --report " + out,
                                  "export " + model + " --progress --calibration-data " + dir + "/" + c.file +
                                      " --output-dir " + out}) {
      auto a = runQuantscope(cmd, dir);
      EXPECT_EQ(a.exitCode, 2) << cmd << ": " << a.err;
      EXPECT_EQ(lineCount(a.err), 1) << cmd << ": " << a.err;
      EXPECT_NE(a.err.find(c.file), std::string::npos) << a.err;
      EXPECT_FALSE(fs::exists(out)) << cmd;
    }
  }
}

TEST_F(CliTest, RandomInputsOfSymbolicDimsTakeShapes) {
  // x[N, 4, H, W] -> Conv -> y: random calibration inputs need --shape, which analyze and export take.
  OnnxBuilder b(13);
  b.input("x", {-1, 4, -1, -1}).output("y", {-1, 2, -1, -1});
  b.initializer("w", {2, 4, 1, 1}, {0.5f, -0.25f, 1.f, 0.125f, -1.f, 0.75f, 0.3f, -0.6f});
  b.node("Conv", {"x", "w"}, {"y"}, "conv");
  b.save(dir + "/dyn.onnx");
  auto refused = runQuantscope("analyze " + dir + "/dyn.onnx", dir);
  EXPECT_EQ(refused.exitCode, 2);
  EXPECT_EQ(lineCount(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("--shape x=1x4x224x224"), std::string::npos) << "suggests a shape: " << refused.err;
  auto an = runQuantscope("analyze " + dir + "/dyn.onnx --shape x=2x4x16x16 --report " + dir + "/r.json", dir);
  EXPECT_EQ(an.exitCode, 0) << an.err;
  EXPECT_NE(an.out.find("output y"), std::string::npos) << an.out;
  auto ex = runQuantscope("export " + dir + "/dyn.onnx --shape x=1x4x8x8 --output-dir " + dir + "/out", dir);
  EXPECT_EQ(ex.exitCode, 0) << ex.err;
  EXPECT_TRUE(fs::exists(dir + "/out/quantized.onnx"));
  auto bad = runQuantscope("export " + dir + "/dyn.onnx --shape x=1x3x8x8 --output-dir " + dir + "/bad", dir);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("dim 1 is fixed at 4"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir + "/bad"));
  auto huge = runQuantscope("analyze " + dir + "/dyn.onnx --shape x=1x4x1048576x1048576", dir);
  EXPECT_EQ(huge.exitCode, 2) << huge.err;
  EXPECT_EQ(lineCount(huge.err), 1) << huge.err;
  EXPECT_NE(huge.err.find("more than 2^34 elements"), std::string::npos) << huge.err;
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(runQuantscope("run " + model, dir).exitCode, 2);
  EXPECT_EQ(runQuantscope("info", dir).exitCode, 2);
  EXPECT_EQ(runQuantscope("run " + model + " --threads -3 --random-input", dir).exitCode, 2);
}

namespace {

// x[1,3,S,S] -> Conv(4) -> Relu -> Conv(4) -> y, with `repeat` extra Conv+Relu pairs.
void writeConvModel(const std::string& path, int size, int repeat) {
  OnnxBuilder b(13);
  b.input("x", {1, 3, size, size}).output("y", {1, 4, size, size});
  std::vector<float> w1(4 * 3 * 9), w2(4 * 4 * 9);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = std::sin((float)i) * 0.3f;
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = std::cos((float)i) * 0.2f;
  b.initializer("w1", {4, 3, 3, 3}, w1);
  b.initializer("w2", {4, 4, 3, 3}, w2);
  auto conv = [&](const std::string& in, const std::string& w, const std::string& out, const std::string& name) {
    auto& n = b.node("Conv", {in, w}, {out}, name);
    OnnxBuilder::attrInts(n, "pads", {1, 1, 1, 1});
  };
  conv("x", "w1", "c1", "conv1");
  b.node("Relu", {"c1"}, {"r1"}, "relu1");
  std::string last = "r1";
  for (int k = 0; k < repeat; ++k) {
    conv(last, "w2", "cc" + std::to_string(k), "convx" + std::to_string(k));
    b.node("Relu", {"cc" + std::to_string(k)}, {"rr" + std::to_string(k)}, "relux" + std::to_string(k));
    last = "rr" + std::to_string(k);
  }
  conv(last, "w2", "y", "conv2");
  b.save(path);
}

}  // namespace

TEST_F(CliTest, AnalyzeWritesReportsAndWarnsLoudlyOnRandomData) {
  std::string m = dir + "/conv.onnx";
  writeConvModel(m, 8, 1);
  auto o = runQuantscope("analyze " + m + " --calibration-size 3 --calibration-method max --nodes-to-exclude nomatch.* --report " +
                             dir + "/r.json --html " + dir + "/r.html --csv " + dir + "/r.csv",
                         dir);
  ASSERT_EQ(o.exitCode, 0) << o.err;
  EXPECT_NE(o.err.find("WARNING: no calibration data: random inputs make the scales meaningless"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("nomatch.*"), std::string::npos) << "an unmatched pattern is named: " << o.err;
  std::ifstream j(dir + "/r.json");
  std::stringstream ss;
  ss << j.rdbuf();
  for (const char* key : {"\"model\"", "\"settings\"", "\"outputs\"", "\"layers\"", "\"tensors\"", "\"graphwise\"",
                          "\"layerwise\"", "\"weight_snr_db\"", "\"activation_snr_db\"", "\"sensitivity_snr_db\"",
                          "\"conv1\""})
    EXPECT_NE(ss.str().find(key), std::string::npos) << key;
  EXPECT_TRUE(fs::exists(dir + "/r.html"));
  EXPECT_TRUE(fs::exists(dir + "/r.csv"));
}

// --realisations auto|N (docs/user-guide.md, "Auto-fallback"): with auto, report.json says what its
// probe found; without the flag there is no probe; a count still works; anything else is one line and exit 2.
TEST_F(CliTest, RealisationsParseAutoAndCountsAndRejectJunk) {
  std::string m = dir + "/conv.onnx";
  writeConvModel(m, 8, 1);
  auto read = [](const std::string& path) {
    std::ifstream j(path);
    std::stringstream ss;
    ss << j.rdbuf();
    return nlohmann::json::parse(ss.str());
  };
  for (const char* method : {"auto", "max"}) {  // the probe at the table check, and after the analysis
    SCOPED_TRACE(method);
    auto def = runQuantscope("analyze " + m + " --calibration-size 4 --calibration-method " + method + " --realisations auto --report " +
                                 dir + "/auto.json",
                             dir);
    ASSERT_EQ(def.exitCode, 0) << def.err;
    EXPECT_NE(def.err.find("realisations auto: probe of 4"), std::string::npos) << def.err;
    const nlohmann::json r = read(dir + "/auto.json");
    EXPECT_EQ(r["settings"]["realisations"], "auto");
    ASSERT_TRUE(r.contains("realisation_probe")) << r.dump();
    const nlohmann::json& p = r["realisation_probe"];
    EXPECT_EQ(p["where"], std::string(method) == "auto" ? "table check" : "analysis");
    EXPECT_EQ(p["worst_snr_db"].size(), 4u);
    for (const char* key : {"samples", "sd_db", "threshold_db", "realisations"}) EXPECT_TRUE(p.contains(key)) << key;
    const int chosen = p["realisations"];
    EXPECT_TRUE(chosen == 1 || chosen == 8) << chosen;
    EXPECT_EQ(r["outputs"][0].contains("realisations"), chosen > 1);
  }
  auto plain = runQuantscope("analyze " + m + " --calibration-size 4 --report " + dir + "/1.json", dir);
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  EXPECT_EQ(plain.err.find("realisations auto"), std::string::npos) << plain.err;
  const nlohmann::json r1 = read(dir + "/1.json");
  EXPECT_FALSE(r1["settings"].contains("realisations")) << r1["settings"].dump();  // 1: the default, not written
  EXPECT_FALSE(r1.contains("realisation_probe"));
  auto three = runQuantscope("analyze " + m + " --calibration-size 4 --realisations 3 --report " + dir + "/3.json", dir);
  ASSERT_EQ(three.exitCode, 0) << three.err;
  const nlohmann::json r3 = read(dir + "/3.json");
  EXPECT_EQ(r3["settings"]["realisations"], "3");
  EXPECT_FALSE(r3.contains("realisation_probe"));
  EXPECT_EQ(r3["outputs"][0]["realisations"]["snr_db"].size(), 3u);
  for (const char* junk : {"junk", "0", "65", "3x", "-1", "\"\""}) {
    SCOPED_TRACE(junk);
    auto bad = runQuantscope("analyze " + m + " --realisations " + junk + " --report " + dir + "/bad.json", dir);
    EXPECT_EQ(bad.exitCode, 2) << bad.err;
    EXPECT_EQ(lineCount(bad.err), 1) << bad.err;
    EXPECT_NE(bad.err.find("--realisations"), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("expected auto or a count from 1 to 64"), std::string::npos) << bad.err;
    EXPECT_FALSE(fs::exists(dir + "/bad.json"));
  }
}

TEST_F(CliTest, CalibrationRefineRealisationsParseAndRejectJunk) {
  // --calibration-refine-realisations R: the refinement scores its candidates on the mean of R
  // realisations (report.json: settings and tensors[].auto.refine.realisations); junk is one line.
  std::string m = dir + "/conv.onnx";
  writeConvModel(m, 8, 1);
  auto ok = runQuantscope("analyze " + m + " --calibration-size 4 --calibration-refine 1 --calibration-refine-realisations 3 "
                          "--report " + dir + "/r3.json", dir);
  ASSERT_EQ(ok.exitCode, 0) << ok.err;
  std::ifstream j(dir + "/r3.json");
  std::stringstream ss;
  ss << j.rdbuf();
  const nlohmann::json r = nlohmann::json::parse(ss.str());
  EXPECT_EQ(r["settings"]["calibration_refine_realisations"], "3");
  int refined = 0;
  for (const auto& t : r["tensors"])
    if (t.contains("auto") && t["auto"].contains("refine")) {
      ++refined;
      EXPECT_EQ(t["auto"]["refine"]["realisations"], 3) << t.dump();
      EXPECT_EQ(t["auto"]["refine"]["measure_realisations"], 8) << t.dump();
    }
  EXPECT_GT(refined, 0) << r.dump();
  for (const char* junk : {"junk", "65", "-1", "2x"}) {
    SCOPED_TRACE(junk);
    auto bad = runQuantscope("analyze " + m + " --calibration-refine 1 --calibration-refine-realisations " + junk +
                                 " --report " + dir + "/bad.json",
                             dir);
    EXPECT_EQ(bad.exitCode, 2) << bad.err;
    EXPECT_EQ(lineCount(bad.err), 1) << bad.err;
    EXPECT_NE(bad.err.find("--calibration-refine-realisations"), std::string::npos) << bad.err;
    EXPECT_FALSE(fs::exists(dir + "/bad.json"));
  }
  for (const char* junk : {"junk", "-1", "1e9", "2x"}) {
    SCOPED_TRACE(junk);
    auto bad = runQuantscope("analyze " + m + " --calibration-refine 1 --calibration-refine-margin " + std::string(junk) +
                                 " --report " + dir + "/bad.json",
                             dir);
    EXPECT_EQ(bad.exitCode, 2) << bad.err;
    EXPECT_EQ(lineCount(bad.err), 1) << bad.err;
    EXPECT_NE(bad.err.find("--calibration-refine-margin"), std::string::npos) << bad.err;
    EXPECT_FALSE(fs::exists(dir + "/bad.json"));
  }
}

TEST_F(CliTest, AnalyzeBadOptionsAndDataExitTwo) {
  std::string m = dir + "/conv.onnx";
  writeConvModel(m, 8, 0);
  auto bad = runQuantscope("analyze " + m + " --calibration-method bogus --report " + dir + "/r.json", dir);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_EQ(lineCount(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("bogus"), std::string::npos);
  auto regex = runQuantscope("analyze " + m + " --nodes-to-exclude '(' --report " + dir + "/r.json", dir);
  EXPECT_EQ(regex.exitCode, 2) << regex.err;
  Tensor x(DType::Float, {2, 3, 8, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.5f;
  x.data<float>()[200] = NAN;  // in sample 1
  ASSERT_TRUE(writeNpz(dir + "/nan.npz", {{"x", x}}, false));
  auto nan = runQuantscope("analyze " + m + " --calibration-data " + dir + "/nan.npz --report " + dir + "/r.json", dir);
  EXPECT_EQ(nan.exitCode, 2) << nan.err;
  EXPECT_NE(nan.err.find("'x'"), std::string::npos) << nan.err;
  EXPECT_NE(nan.err.find("NaN"), std::string::npos) << nan.err;
  EXPECT_FALSE(fs::exists(dir + "/r.json"));
}

TEST_F(CliTest, AnalyzeCancelsCleanlyOnInterrupt) {
  std::string m = dir + "/big.onnx";
  writeConvModel(m, 256, 12);
  std::string report = dir + "/r.json";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string errFile = dir + "/int.txt";
    freopen(errFile.c_str(), "w", stderr);
    execl(QS_BINARY, QS_BINARY, "analyze", m.c_str(), "--calibration-size", "400", "--calibration-method", "max",
          "--report", report.c_str(), (char*)nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal instead of cancelling";
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream e(dir + "/int.txt");
  std::stringstream ss;
  ss << e.rdbuf();
  EXPECT_NE(ss.str().find("cancelled"), std::string::npos) << ss.str();
  EXPECT_FALSE(fs::exists(report));
}

// Every hostile model of the loader tests, through the binary: non-zero exit, one line naming the file.
TEST_F(CliTest, HostileModelsExitNonZeroWithOneLine) {
  auto base = [] {
    OnnxBuilder b(13);
    b.input("x", {2, 3}).output("y", {2, 3});
    b.initializer("w", {3}, {1.f, 2.f, 3.f});
    b.node("Add", {"x", "w"}, {"s"}, "add");
    b.node("Relu", {"s"}, {"y"}, "relu");
    return b;
  };
  std::vector<std::pair<std::string, std::string>> cases;  // file, expected fragment
  {
    std::string bytes = base().bytes();
    qs::test::writeBytes(dir + "/truncated.onnx", bytes.substr(0, bytes.size() / 2));
    cases.push_back({"truncated.onnx", "not a valid ONNX model"});
  }
  {
    auto b = base();
    b.graph().mutable_node(1)->set_input(0, "ghost");
    b.save(dir + "/dangling.onnx");
    cases.push_back({"dangling.onnx", "node 'relu' (Relu): input 'ghost'"});
  }
  {
    OnnxBuilder b(13);
    b.input("x", {1}).output("y", {1});
    b.node("Add", {"x", "c"}, {"a"}, "a");
    b.node("Relu", {"a"}, {"c"}, "b");
    b.node("Neg", {"a"}, {"y"}, "out");
    b.save(dir + "/cycle.onnx");
    cases.push_back({"cycle.onnx", "cycle"});
  }
  {
    auto b = base();
    b.graph().mutable_initializer(0)->add_dims(2);
    b.save(dir + "/size.onnx");
    cases.push_back({"size.onnx", "tensor 'w' dims [3,2] need 6 elements"});
  }
  {
    auto b = base();
    auto* t = b.graph().mutable_initializer(0);
    t->clear_dims();
    t->add_dims(int64_t(1) << 20);
    t->add_dims(int64_t(1) << 20);
    b.save(dir + "/huge.onnx");
    cases.push_back({"huge.onnx", "beyond the limit"});
  }
  {
    auto b = base();
    auto* t = b.graph().mutable_initializer(0);
    t->clear_raw_data();
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = t->add_external_data();
    kv->set_key("location");
    kv->set_value("../../etc/passwd");
    b.save(dir + "/escape.onnx");
    cases.push_back({"escape.onnx", "escapes the model's folder"});
  }
  {
    OnnxBuilder b(13);
    b.input("x", {1}).output("y", {1});
    b.node("FancyOp", {"x"}, {"y"}, "fancy");
    b.save(dir + "/unknown.onnx");
    cases.push_back({"unknown.onnx", "unsupported op: FancyOp (node 'fancy')"});
  }
  {
    // libonnx 1.12's shape inference crashes on this node; it runs in a child process.
    OnnxBuilder b(13);
    b.input("x", {1, 1, 2, 2, 4}).output("y", {1});
    b.initializerInt64("idx", {2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0});
    auto& n = b.node("GatherND", {"x", "idx"}, {"y"}, "gather");
    auto* bd = n.add_attribute();
    bd->set_name("batch_dims");
    bd->set_type(onnx::AttributeProto::INT);
    bd->set_i(-4);
    b.save(dir + "/gathernd.onnx");
    cases.push_back({"gathernd.onnx", "node 'gather' (GatherND)"});
  }
  {
    // A Conv whose weight does not fit its input: only running it finds that (the dry run of
    // analyze and export, before any progress).
    OnnxBuilder b(13);
    b.input("x", {1, 3, 8, 8}).output("y", {1, 4, 6, 6});
    b.initializer("w", {4, 5, 3, 3}, std::vector<float>(4 * 5 * 9, 0.1f));
    b.node("Conv", {"x", "w"}, {"y"}, "conv");
    b.save(dir + "/conv_mismatch.onnx");
    cases.push_back({"conv_mismatch.onnx", "node 'conv' (Conv)"});
  }
  for (const auto& [file, fragment] : cases) {
    // analyze and export: the one line, before any progress or warning (random data warns), and
    // nothing written (--progress would print progress lines, were any work started).
    for (const std::string& cmd : {"analyze " + dir + "/" + file + " --progress --report " + dir + "/r.json",
                                  "export " + dir + "/" + file + " --progress --output-dir " + dir + "/out"}) {
      auto o = runQuantscope(cmd, dir);
      EXPECT_EQ(o.exitCode, 2) << cmd << ": " << o.err;
      EXPECT_EQ(lineCount(o.err), 1) << cmd << ": " << o.err;
      EXPECT_NE(o.err.find(fragment), std::string::npos) << cmd << ": " << o.err;
      EXPECT_FALSE(fs::exists(dir + "/r.json") || fs::exists(dir + "/out")) << cmd;
    }
    if (file == "conv_mismatch.onnx") continue;  // loads and plans: `run` reports it at run time, tested elsewhere
    // `run` creates the executor, so unsupported ops are refused too; info lists them instead.
    auto o = runQuantscope("run " + dir + "/" + file + " --random-input --output " + dir + "/o.npz", dir);
    EXPECT_EQ(o.exitCode, 2) << file << ": " << o.err;
    EXPECT_EQ(lineCount(o.err), 1) << file << ": " << o.err;
    EXPECT_NE(o.err.find(dir + "/" + file), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(fragment), std::string::npos) << file << ": " << o.err;
    EXPECT_FALSE(fs::exists(dir + "/o.npz"));
  }
  auto info = runQuantscope("info " + dir + "/unknown.onnx", dir);
  EXPECT_EQ(info.exitCode, 0);
  EXPECT_NE(info.out.find("FancyOp (node 'fancy')"), std::string::npos) << info.out;
  auto crashed = runQuantscope("info " + dir + "/gathernd.onnx", dir);
  EXPECT_EQ(crashed.exitCode, 0) << crashed.err;
  EXPECT_NE(crashed.out.find("shape inference: crashed (signal SIGSEGV)"), std::string::npos) << crashed.out;
}

// export's calibration.cache for each TensorRT: the header, refusals, imported caches and PPQ files.
TEST_F(CliTest, ExportCacheHeaderFollowsTrtVersionAndScales) {
  // x -> Conv -> c -> Relu -> y: x is a quantization point, c (fused into the Conv) is not.
  OnnxBuilder b(13);
  b.input("x", {1, 4, 8, 8}).output("y", {1, 2, 8, 8});
  b.initializer("w", {2, 4, 1, 1}, {0.5f, -0.25f, 0.125f, 1.f, -1.f, 0.75f, 0.25f, -0.5f});
  b.node("Conv", {"x", "w"}, {"c"}, "conv");
  b.node("Relu", {"c"}, {"y"}, "relu");
  const std::string conv = dir + "/conv.onnx";
  b.save(conv);
  auto header = [&](const std::string& out) {
    std::ifstream in(out + "/calibration.cache");
    std::string line;
    std::getline(in, line);
    return line;
  };
  const std::string common = "export " + conv + " --calibration-method max --no-layerwise --no-sensitivity --threads 1";
  struct Case {
    std::string flag, header;
  } cases[] = {
      {"", "TRT-100000-MinMaxCalibration"},
      {"--trt-version 8.5", "TRT-8501-MinMaxCalibration"},
      {"--trt-version 8.6", "TRT-8601-MinMaxCalibration"},
      {"--trt-version 10.3", "TRT-100300-MinMaxCalibration"},
      {"--trt-version 10.3 --trt-calibrator EntropyCalibration2", "TRT-100300-EntropyCalibration2"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const std::string out = dir + "/h" + std::to_string(i++);
    auto o = runQuantscope(common + " " + c.flag + " --output-dir " + out, dir);
    ASSERT_EQ(o.exitCode, 0) << c.flag << ": " << o.err;
    EXPECT_EQ(header(out), c.header) << c.flag;
  }
  for (const std::string bad : {"11", "garbage", "9"}) {
    const std::string out = dir + "/bad";
    auto o = runQuantscope(common + " --trt-version " + bad + " --output-dir " + out, dir);
    EXPECT_EQ(o.exitCode, 2) << bad;
    EXPECT_EQ(lineCount(o.err), 1) << o.err;
    EXPECT_NE(o.err.find("--trt-version '" + bad + "'"), std::string::npos) << o.err;
    if (bad == "11") {
      EXPECT_NE(o.err.find("no calibrators"), std::string::npos) << o.err;
    }
    EXPECT_FALSE(fs::exists(out)) << bad;
  }
  // Percentile: no TensorRT calibrator; named EntropyCalibration2, with a warning.
  auto pct = runQuantscope("export " + conv + " --calibration-method percentile --no-layerwise --no-sensitivity "
                           "--trt-version 8.6.1 --output-dir " + dir + "/pct", dir);
  ASSERT_EQ(pct.exitCode, 0) << pct.err;
  EXPECT_EQ(header(dir + "/pct"), "TRT-8601-EntropyCalibration2");
  EXPECT_NE(pct.err.find("TensorRT has no percentile calibrator"), std::string::npos) << pct.err;

  // A MinMax cache written by hand keeps its algorithm (with the CLI's default method, entropy).
  qs::test::writeBytes(dir + "/minmax.cache", "TRT-8601-MinMaxCalibration\nx: 3c010204\nc: 3c010204\n");
  auto mm = runQuantscope("export " + conv + " --no-layerwise --no-sensitivity --all-tensor-ranges off "
                          "--calibration-cache-path " + dir + "/minmax.cache --output-dir " + dir + "/mm", dir);
  ASSERT_EQ(mm.exitCode, 0) << mm.err;
  EXPECT_EQ(header(dir + "/mm"), "TRT-100000-MinMaxCalibration");
  EXPECT_NE(mm.err.find("minmax.cache: 1 scales not used: not quantization points, and --all-tensor-ranges is off ('c')"),
            std::string::npos) << mm.err;

  // PPQ's file with a range for c: reported; the method is max unless given.
  qs::test::writeBytes(dir + "/ppq.json", R"({"act_quant_info": {"x": 1.0, "c": 2.0}})");
  auto ppq = runQuantscope("export " + conv + " --no-layerwise --no-sensitivity --all-tensor-ranges off --load-config " +
                           dir + "/ppq.json --output-dir " + dir + "/ppq", dir);
  ASSERT_EQ(ppq.exitCode, 0) << ppq.err;
  EXPECT_EQ(header(dir + "/ppq"), "TRT-100000-MinMaxCalibration");
  EXPECT_NE(ppq.err.find("ppq.json: 1 ranges not used: not quantization points, and --all-tensor-ranges is off ('c')"),
            std::string::npos) << ppq.err;
  auto ppqEntropy = runQuantscope("export " + conv + " --no-layerwise --no-sensitivity --calibration-method entropy "
                                  "--load-config " + dir + "/ppq.json --output-dir " + dir + "/ppq2", dir);
  ASSERT_EQ(ppqEntropy.exitCode, 0) << ppqEntropy.err;
  EXPECT_EQ(header(dir + "/ppq2"), "TRT-100000-EntropyCalibration2");
}
