// INT4 weight-only quantization (issue #15 part 2): the int4 arithmetic and
// packing; on the GPT-style decoder and the BERT-style encoder, AWQ (lite and
// clip) at least as good as RTN, the exported model running in ONNX Runtime
// with the SNR the analysis predicted and the quantized weights at most 0.16x
// their FP32 bytes; a small built model whose opset (ReduceMean's axes), Gemm
// transB and partial last block go through the export; bad inputs give one-line
// errors and write nothing.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/analysis/int4_analysis.h"
#include "core/exec/executor.h"
#include "core/export/int4_export.h"
#include "core/io/npy.h"
#include "core/onnx/loader.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/sanitizer.h"

using namespace qs;
using qs::test::OnnxBuilder;
namespace fs = std::filesystem;

namespace {

const std::string kZoo = std::string(QS_SOURCE_DIR) + "/.cache/zoo/";

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int runCommand(const std::string &cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct Cli {
  int rc;
  std::string err;
};
Cli runCli(const std::string &args, const std::string &dir) {
  const std::string errFile = dir + "/stderr.txt";
  const int rc = runCommand(std::string(QS_BINARY) + " " + args +
                            " > /dev/null 2> " + errFile);
  return {rc, readFile(errFile)};
}

Int4Result analyse(const std::shared_ptr<Model> &model,
                   const CalibrationData &data, Int4Method method,
                   int64_t block) {
  Int4Options o;
  o.method = method;
  o.blockSize = block;
  o.threads = 2;
  auto r = runInt4Analysis(model, data, o);
  EXPECT_TRUE(r) << r.status().message();
  return r ? std::move(r).value() : Int4Result{};
}

std::unique_ptr<CalibrationData> randomData(const Model &m, int64_t samples) {
  CalibrationDataOptions co;
  co.maxSamples = samples;
  co.batchSize = 1;
  auto d = CalibrationData::open(m, co);
  EXPECT_TRUE(d) << d.status().message();
  return d ? std::move(d).value() : nullptr;
}

// Runs `modelBytes` in ONNX Runtime on every batch of `data` and returns the
// output SNR per output against our FP32 run of `model` (SNR over all samples).
std::vector<double> ortSnr(const std::shared_ptr<Model> &model,
                           const CalibrationData &data,
                           const std::string &modelBytes,
                           const std::string &dir,
                           const std::string &extra = "") {
  const std::string file = dir + "/q.onnx", in = dir + "/in",
                    out = dir + "/out";
  fs::create_directories(in);
  fs::create_directories(out);
  qs::test::writeBytes(file, modelBytes);
  auto ex = Executor::create(model);
  EXPECT_TRUE(ex);
  std::vector<std::vector<Tensor>> refs;
  const int64_t n = data.batchCount();
  for (int64_t b = 0; b < n; ++b) {
    auto feeds = int4CalibrationBatch(*model, data, b);
    EXPECT_TRUE(feeds);
    for (size_t i = 0; i < feeds->size(); ++i)
      EXPECT_TRUE(writeNpy(in + "/in_" + std::to_string(b) + "_" +
                               std::to_string(i) + ".npy",
                           (*feeds)[i].tensor));
    auto r = (*ex)->run(*feeds);
    EXPECT_TRUE(r);
    refs.push_back(std::move(r).value());
  }
  const std::string cmd =
      "ORT_DISABLE_TELEMETRY=1 node " + std::string(QS_SOURCE_DIR) +
      "/tests/support/ort_batch.mjs " + file + " " + in + " " + out +
      " --samples " + std::to_string(n) + " --threads 2 " + extra + " > " +
      dir + "/ort.txt 2>&1";
  EXPECT_EQ(runCommand(cmd), 0) << readFile(dir + "/ort.txt");
  std::vector<ErrorAccumulator> acc(model->graph.outputs.size());
  for (int64_t b = 0; b < n; ++b) {
    for (size_t o = 0; o < acc.size(); ++o) {
      auto t = readNpy(out + "/out_" + std::to_string(b) + "_" +
                       std::to_string(o) + ".npy");
      EXPECT_TRUE(t) << t.status().message();
      if (t)
        acc[o].add(refs[(size_t)b][o], *t);
    }
  }
  std::vector<double> snr;
  for (auto &a : acc)
    snr.push_back(a.metrics().snrDb);
  return snr;
}

class Int4Model : public ::testing::TestWithParam<std::string> {
 protected:
  // The zoo model of the parameter, or nullptr when the test is to be skipped (model not made,
  // or an ASan build, where each of these runs takes minutes: the built-model tests above cover
  // the same code under the sanitizers).
  std::shared_ptr<Model> zooModel() {
    if (qs::test::kUnderSanitizer) return nullptr;
    const std::string path = kZoo + GetParam() + ".onnx";
    if (!fs::exists(path)) return nullptr;
    auto m = loadModel(path);
    EXPECT_TRUE(m) << m.status().message();
    return m ? *m : nullptr;
  }
};

TEST_P(Int4Model, AwqLiteAndAwqClipAreAtLeastAsGoodAsRtn) {
  std::shared_ptr<Model> model = zooModel();
  auto m = &model;
  if (!model) GTEST_SKIP() << GetParam() << ": not made, or an ASan build";
  auto data = randomData(**m, 2);
  ASSERT_TRUE(data);
  const Int4Result rtn = analyse(*m, *data, Int4Method::RtnDq, 128);
  const Int4Result lite = analyse(*m, *data, Int4Method::AwqLite, 128);
  const Int4Result clip = analyse(*m, *data, Int4Method::AwqClip, 128);
  ASSERT_FALSE(rtn.outputs.empty());
  for (size_t o = 0; o < rtn.outputs.size(); ++o) {
    SCOPED_TRACE(rtn.outputs[o].name);
    EXPECT_GE(lite.outputs[o].metrics.snrDb, rtn.outputs[o].metrics.snrDb);
    EXPECT_GE(clip.outputs[o].metrics.snrDb, rtn.outputs[o].metrics.snrDb);
    EXPECT_TRUE(std::isfinite(rtn.outputs[o].metrics.snrDb));
  }
  // Per layer, the searches never lose to round-to-nearest on their own tokens
  // (awq_lite includes s = 1).
  for (size_t i = 0; i < rtn.layers.size(); ++i)
    EXPECT_GE(lite.layers[i].layerwise.snrDb,
              rtn.layers[i].layerwise.snrDb - 1e-6);
}

TEST_P(Int4Model, ExportRunsInOrtWithThePredictedSnrAndFewBytes) {
  std::shared_ptr<Model> model = zooModel();
  auto m = &model;
  if (!model) GTEST_SKIP() << GetParam() << ": not made, or an ASan build";
  auto data = randomData(**m, 2);
  ASSERT_TRUE(data);
  const std::string dir = qs::test::makeTempDir("int4");
  for (auto [method, block] : {std::pair{Int4Method::AwqLite, int64_t(128)},
                               std::pair{Int4Method::RtnDq, int64_t(32)}}) {
    SCOPED_TRACE(int4MethodName(method) + " block " + std::to_string(block));
    const Int4Result r = analyse(*m, *data, method, block);
    ASSERT_FALSE(r.layers.empty());
    EXPECT_LE((double)r.bytesAfter, 0.16 * (double)r.bytesBefore);
    auto q = buildInt4Model(**m, r);
    ASSERT_TRUE(q) << q.status().message();
    EXPECT_EQ(q->opsetAfter, 21);
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(q->bytes));
    int dq = 0;
    for (const auto &n : proto.graph().node()) {
      if (n.op_type() != "DequantizeLinear")
        continue;
      ++dq;
      for (const auto &a : n.attribute()) {
        if (a.name() == "block_size") {
          EXPECT_EQ(a.i(), block);
        }
      }
    }
    EXPECT_EQ(dq, (int)r.layers.size());
    int int4 = 0;
    for (const auto &t : proto.graph().initializer())
      int4 += t.data_type() == 22;
    EXPECT_EQ(int4, (int)r.layers.size());
    const std::vector<double> measured =
        ortSnr(*m, *data, q->bytes, dir + "/" + int4MethodName(method));
    ASSERT_EQ(measured.size(), r.outputs.size());
    for (size_t o = 0; o < measured.size(); ++o) {
      EXPECT_NEAR(measured[o], r.outputs[o].metrics.snrDb, 0.5)
          << r.outputs[o].name;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Zoo, Int4Model,
                         ::testing::Values("gpt_decoder", "bert_encoder"));

TEST(Int4Math, ScalesRoundingAndPacking) {
  // K = 3 (one partial block of 16), N = 2: scale = amax / 7, round half to
  // even, clamp to [-8, 7].
  const std::vector<float> w = {7.0f, 1.0f, -3.5f, -0.25f, 2.5f, 0.0f};
  const Int4Weight q = quantizeInt4(w.data(), 3, 2, 16);
  ASSERT_EQ(q.scale.size(), 2u);
  EXPECT_FLOAT_EQ(q.scale[0], 1.0f);
  EXPECT_FLOAT_EQ(q.scale[1], 1.0f / 7.0f);
  EXPECT_EQ(q.q,
            (std::vector<int8_t>{7, 7, -4, -2, 2,
                                 0})); // -3.5 -> -4, 2.5 -> 2 (half to even)
  const std::vector<float> clip = {0.5f, 1.0f};
  EXPECT_EQ(quantizeInt4(w.data(), 3, 2, 16, clip.data()).q[0], 7);
  EXPECT_EQ(quantizeInt4(w.data(), 3, 2, 16, clip.data()).q[2],
            -7); // -3.5 / 0.5 = -7
  const std::vector<uint8_t> packed = packInt4({1, -8, 7});
  EXPECT_EQ(packed, (std::vector<uint8_t>{0x81, 0x07}));
  EXPECT_EQ(unpackInt4(packed, 3), (std::vector<int8_t>{1, -8, 7}));
  EXPECT_TRUE(checkInt4BlockSize(16));
  EXPECT_FALSE(checkInt4BlockSize(48));
  EXPECT_FALSE(checkInt4BlockSize(8));
}

// x [N, 40] -> ReduceMean(axes [1]) subtracted -> Gemm(transB, W [24, 40]) ->
// MatMul(W2 [24, 16]). Opset 13: ReduceMean's axes attribute must become an
// input at 21; K = 40 with block 16 leaves a last block of 8.
std::string smallModel(int64_t k2 = 24) {
  OnnxBuilder b(13);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w1(24 * 40), w2((size_t)(k2 * 16));
  for (float &v : w1)
    v = u(rng);
  for (float &v : w2)
    v = u(rng);
  b.input("x", {-1, 40}).output("y", {-1, 16});
  b.initializer("w1", {24, 40}, w1);
  b.initializer("w2", {k2, 16}, w2);
  auto &rm = b.node("ReduceMean", {"x"}, {"mean"}, "mean");
  OnnxBuilder::attrInts(rm, "axes", {1});
  b.node("Sub", {"x", "mean"}, {"centred"}, "centre");
  auto &gemm = b.node("Gemm", {"centred", "w1"}, {"h"}, "fc1");
  OnnxBuilder::attrInt(gemm, "transB", 1);
  if (k2 != 24) {
    b.initializerInt64("shape", {2}, {-1, k2});
    b.node("Reshape", {"h", "shape"}, {"h2"}, "reshape");
  }
  b.node("MatMul", {k2 != 24 ? "h2" : "h", "w2"}, {"y"}, "fc2");
  return b.bytes();
}

TEST(Int4Export, SmallModelOpsetGemmTransBAndPartialBlockRunInOrt) {
  const std::string dir = qs::test::makeTempDir("int4small");
  const std::string path = dir + "/small.onnx";
  qs::test::writeBytes(path, smallModel());
  auto m = loadModel(path);
  ASSERT_TRUE(m) << m.status().message();
  auto data = randomData(**m, 3);
  ASSERT_TRUE(data);
  for (Int4Method method :
       {Int4Method::RtnDq, Int4Method::AwqLite, Int4Method::AwqClip}) {
    SCOPED_TRACE(int4MethodName(method));
    const Int4Result r = analyse(*m, *data, method, 16);
    ASSERT_EQ(r.layers.size(), 2u);
    EXPECT_TRUE(r.layers[0].transposed);
    EXPECT_EQ(r.layers[0].weight.blocks(), 3);
    auto q = buildInt4Model(**m, r);
    ASSERT_TRUE(q) << q.status().message();
    EXPECT_EQ(q->opsetBefore, 13);
    // Without graph optimisations ORT computes what the simulation does (to
    // float rounding); with them it fuses DequantizeLinear + MatMul into
    // MatMulNBits, whose default accuracy level quantizes the activations to
    // int8 on the CPU (a few tenths of a dB, within the 0.5 dB budget).
    const std::vector<double> exact =
        ortSnr(*m, *data, q->bytes, dir + "/" + int4MethodName(method),
               "--level disabled");
    ASSERT_EQ(exact.size(), 1u);
    EXPECT_NEAR(exact[0], r.outputs[0].metrics.snrDb, 0.01);
    const std::vector<double> fused = ortSnr(
        *m, *data, q->bytes, dir + "/" + int4MethodName(method) + "_fused");
    ASSERT_EQ(fused.size(), 1u);
    EXPECT_NEAR(fused[0], r.outputs[0].metrics.snrDb, 0.5);
  }
  fs::remove_all(dir);
}

TEST(Int4Cli, BadInputsGiveOneLineErrorsAndWriteNothing) {
  const std::string dir = qs::test::makeTempDir("int4cli");
  const std::string small = dir + "/small.onnx", odd = dir + "/odd.onnx",
                    out = dir + "/out";
  qs::test::writeBytes(small, smallModel());
  qs::test::writeBytes(odd, smallModel(25));
  struct Case {
    std::string args, message;
  } cases[] = {
      {"export " + small +
           " --quantize-mode int4 --block-size 48 --output-dir " + out,
       "--block-size 48: expected a power of two >= 16 (16, 32, 64, 128, ...)"},
      {"export " + small +
           " --quantize-mode int4 --block-size 8 --output-dir " + out,
       "--block-size 8: expected a power of two >= 16"},
      {"export " + small +
           " --quantize-mode int4 --calibration-method entropy --output-dir " +
           out,
       "--calibration-method 'entropy': expected rtn_dq, awq_lite or awq_clip "
       "for --quantize-mode int4"},
      {"export " + small + " --block-size 64 --output-dir " + out,
       "--block-size needs --quantize-mode int4"},
      {"export " + odd +
           " --quantize-mode int4 --calibration-method rtn_dq --output-dir " +
           out,
       "node 'fc2' (MatMul): weight 'w2' has an odd reduction dim K=25: INT4 "
       "packs two values per byte along K"},
      {"analyze " + small + " --quantize-mode int4 --target-snr 20",
       "--target-snr does not apply to --quantize-mode int4"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.args);
    const Cli r = runCli(c.args, dir);
    EXPECT_EQ(r.rc, 2);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    const size_t at = r.err.find("quantscope: error: ");
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n', at), r.err.size() - 1)
        << r.err; // the error is the last line, and one line
    EXPECT_FALSE(fs::exists(out));
  }
  // And a good run writes both files.
  const Cli ok = runCli("export " + small +
                            " --quantize-mode int4 --calibration-method "
                            "awq_clip --block-size 16 --output-dir " +
                            out,
                        dir);
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "/quantized.onnx"));
  EXPECT_TRUE(fs::exists(out + "/report.json"));
  // report.json follows docs/report.schema.json (its int4 branch), and the schema rejects an int4
  // report with an int8-only key.
  const std::string validator = "/usr/bin/python3 " + std::string(QS_SOURCE_DIR) + "/tests/support/validate_json.py " +
                                std::string(QS_SOURCE_DIR) + "/docs/report.schema.json ";
  EXPECT_EQ(runCommand(validator + out + "/report.json 2> " + dir + "/v.txt"), 0) << readFile(dir + "/v.txt");
  std::string bad = readFile(out + "/report.json");
  bad.insert(bad.find('{') + 1, "\"tensors\": [],");
  qs::test::writeBytes(dir + "/bad.json", bad);
  EXPECT_EQ(runCommand(validator + dir + "/bad.json 2> " + dir + "/v.txt"), 1);
  fs::remove_all(dir);
}

// The "external data out": past --external-data-threshold (2 GB - 64 MB
// by default) the initializers go to quantized.onnx.data beside the model, and
// ONNX Runtime runs that pair exactly as the inline export.
TEST(Int4Export, ExternalDataSideFileRunsInOrtAsTheInlineExport) {
  const std::string dir = qs::test::makeTempDir("int4ext");
  const std::string small = dir + "/wide.onnx";
  {
    // Two MatMuls whose packed INT4 weights (8 KB, 4 KB) pass the 1 KB below
    // which initializers stay inline.
    OnnxBuilder b(13);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> w1(256 * 64), w2(64 * 128);
    for (float &v : w1)
      v = u(rng);
    for (float &v : w2)
      v = u(rng);
    b.input("x", {-1, 256}).output("y", {-1, 128});
    b.initializer("w1", {256, 64}, w1);
    b.initializer("w2", {64, 128}, w2);
    b.node("MatMul", {"x", "w1"}, {"h"}, "fc1");
    b.node("MatMul", {"h", "w2"}, {"y"}, "fc2");
    qs::test::writeBytes(small, b.bytes());
  }
  const std::string common = "export " + small +
                             " --quantize-mode int4 --calibration-method "
                             "rtn_dq --block-size 16 --output-dir ";
  const Cli inl = runCli(common + dir + "/inline", dir);
  ASSERT_EQ(inl.rc, 0) << inl.err;
  const Cli ext = runCli(common + dir + "/ext --external-data-threshold 1", dir);
  ASSERT_EQ(ext.rc, 0) << ext.err;
  EXPECT_FALSE(fs::exists(dir + "/inline/quantized.onnx.data"));
  ASSERT_TRUE(fs::exists(dir + "/ext/quantized.onnx.data"));
  const std::string extModel = readFile(dir + "/ext/quantized.onnx");
  EXPECT_LT(extModel.size(), readFile(dir + "/inline/quantized.onnx").size());
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(extModel));
  int external = 0;
  for (const auto &t : proto.graph().initializer())
    external += t.data_location() == onnx::TensorProto::EXTERNAL;
  EXPECT_EQ(external, 4); // fc1 and fc2: packed INT4 weights, block scales

  auto m = loadModel(small);
  ASSERT_TRUE(m) << m.status().message();
  auto data = randomData(**m, 3);
  ASSERT_TRUE(data);
  fs::create_directories(dir + "/ortA");
  fs::create_directories(dir + "/ortB");
  fs::copy_file(dir + "/ext/quantized.onnx.data",
                dir + "/ortB/quantized.onnx.data");
  const auto a =
      ortSnr(*m, *data, readFile(dir + "/inline/quantized.onnx"), dir + "/ortA");
  const auto b = ortSnr(*m, *data, extModel, dir + "/ortB");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_TRUE(std::isfinite(a[0]));
  EXPECT_EQ(a[0], b[0]);

  // A bad threshold is one line and nothing written.
  const Cli bad = runCli(common + dir + "/bad --external-data-threshold 0", dir);
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--external-data-threshold"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(fs::exists(dir + "/bad"));
  fs::remove_all(dir);
}

} // namespace

namespace {

// The table of docs/export.md ("INT4 weight-only"): run by hand with
// qs_test_export --gtest_also_run_disabled_tests --gtest_filter='*Int4Table*'.
TEST(Int4Table, DISABLED_PrintsTheDocsTable) {
  for (const std::string name : {"gpt_decoder", "bert_encoder"}) {
    const std::string path = kZoo + name + ".onnx";
    if (!fs::exists(path)) continue;
    auto m = loadModel(path);
    ASSERT_TRUE(m);
    auto data = randomData(**m, 4);
    const std::string dir = qs::test::makeTempDir("int4table");
    for (int64_t block : {32, 128}) {
      for (Int4Method method : {Int4Method::RtnDq, Int4Method::AwqLite, Int4Method::AwqClip}) {
        const Int4Result r = analyse(*m, *data, method, block);
        auto q = buildInt4Model(**m, r);
        ASSERT_TRUE(q);
        const auto ort = ortSnr(*m, *data, q->bytes, dir + "/" + int4MethodName(method) + std::to_string(block));
        for (size_t o = 0; o < r.outputs.size(); ++o) {
          std::printf("| %s | %s | %s | %lld | %.2f | %.2f | %s | %.3f |\n", name.c_str(), r.outputs[o].name.c_str(),
                      int4MethodName(method).c_str(), (long long)block, r.outputs[o].metrics.snrDb, ort[o],
                      std::isnan(r.outputs[o].top1Agreement) ? "n/a"
                                                              : (std::to_string(r.outputs[o].top1Agreement * 100).substr(0, 5) + " %").c_str(),
                      (double)r.bytesAfter / (double)r.bytesBefore);
        }
      }
    }
    fs::remove_all(dir);
  }
}

}  // namespace
