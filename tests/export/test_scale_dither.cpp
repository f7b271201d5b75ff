// quantscope export --scale-dither K (AnalysisRequest::scaleDither; docs/quality.md, "ONNX Runtime's own
// realisations"): quantized.onnx written with the activation scales of realisation K of --realisations,
// so that ONNX Runtime can run the same realisation our dithered pass K measured. On PaddleOCR cls (8
// rendered text lines): every activation scale in the dithered file is, bit for bit, the scale the
// session's pass K runs (QuantSession::realisationState), most of them differ from the analysed ones,
// nothing else in the file changes, and realisation 0 (the default) writes today's file byte for byte.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/analysis/quant_session.h"
#include "tests/support/remedy_helpers.h"
#include "tests/support/text_images.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

std::string readBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The scalar float initializers of a model file, by name, and everything else as bytes.
struct Parsed {
  std::map<std::string, float> scalars;
  std::map<std::string, std::string> others;
  std::vector<std::string> nodes;  // op:name:inputs
};

Parsed parse(const std::string& bytes) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  Parsed p;
  for (const auto& t : m.graph().initializer()) {
    if (t.dims_size() == 0 && t.data_type() == onnx::TensorProto::FLOAT && t.raw_data().size() == 4) {
      float v;
      std::memcpy(&v, t.raw_data().data(), 4);
      p.scalars[t.name()] = v;
    } else {
      p.others[t.name()] = t.SerializeAsString();
    }
  }
  for (const auto& n : m.graph().node()) {
    std::string s = n.op_type() + ":" + n.name();
    for (const auto& i : n.input()) s += ":" + i;
    p.nodes.push_back(s);
  }
  return p;
}

std::string exportWith(AnalysisRun& run, int k, const std::string& dir) {
  run.request.scaleDither = k;
  const std::string q = test::exportRun(run, dir);
  run.request.scaleDither = 0;
  return q.empty() ? "" : readBytes(q);
}

TEST(ScaleDither, ExportKCarriesTheScalesOfRealisationKAndZeroIsTodaysFile) {
  const std::string model = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing: run scripts/setup.sh";
  const std::string dir = test::makeTempDir("scale-dither");
  test::writeTextImages(dir + "/images", 8, 192, 48, 7);
  AnalysisRequest rq = test::textLineRemedyRequest(model, dir + "/images", 192);
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  const Graph& g = run->model->graph;

  const std::string plain = exportWith(*run, 0, dir + "/plain");
  ASSERT_FALSE(plain.empty());
  // Another run of the same request, exported without touching scaleDither: today's file.
  auto again = runAnalysis(rq);
  ASSERT_TRUE(again) << again.status().message();
  const std::string today = test::exportRun(*again, dir + "/today");
  ASSERT_FALSE(today.empty());
  EXPECT_TRUE(plain == readBytes(today)) << "realisation 0 writes the file of an export without the flag";

  const Parsed p0 = parse(plain);
  for (int k : {1, 5}) {
    const double dither = run->request.realisationDither;
    const std::string bytes = exportWith(*run, k, dir + "/k" + std::to_string(k));
    ASSERT_FALSE(bytes.empty());
    EXPECT_FALSE(bytes == plain);
    const Parsed pk = parse(bytes);
    EXPECT_EQ(pk.nodes, p0.nodes) << "the dither changes scales, not the graph";
    EXPECT_TRUE(pk.others == p0.others) << "weights, weight scales and zero points are the analysed ones";
    const QuantState state = run->session->realisationState(k, dither);
    int matched = 0, moved = 0;
    for (const auto& [v, q] : state.act) {
      const auto it = pk.scalars.find(g.value(v).name + "_scale");
      if (it == pk.scalars.end()) continue;  // not exported (its consumers are not quantized)
      ++matched;
      EXPECT_EQ(it->second, q.scale) << g.value(v).name << ": realisation " << k << "'s scale";
      const float analysed = run->result()->activations.at(v).scale;
      EXPECT_EQ(p0.scalars.at(it->first), analysed) << g.value(v).name;
      moved += it->second != analysed;
      EXPECT_NEAR(it->second / analysed, 1.0, 10 * dither) << g.value(v).name;
    }
    std::printf("realisation %d: %d activation scales in the file, %d moved by the dither\n", k, matched, moved);
    EXPECT_GT(matched, 10);
    EXPECT_GT(moved, matched / 2) << "a 1e-6 dither moves most float scales by at least one ulp";
    // Both seeds draw differently.
    if (k == 5) {
      const QuantState one = run->session->realisationState(1, dither);
      int differ = 0;
      for (const auto& [v, q] : state.act) differ += one.act.at(v).scale != q.scale;
      EXPECT_GT(differ, 0);
    }
  }
  // The session's realisation 0 is the analysed state.
  const QuantState zero = run->session->realisationState(0, run->request.realisationDither);
  for (const auto& [v, q] : zero.act) EXPECT_EQ(q.scale, run->result()->activations.at(v).scale);
  fs::remove_all(dir);
}

TEST(ScaleDither, ANegativeSeedIsRefusedInOneLine) {
  const std::string model = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing: run scripts/setup.sh";
  AnalysisRequest rq = test::textLineRemedyRequest(model, "/nonexistent", 192);
  rq.scaleDither = -2;
  auto run = runAnalysis(rq);
  ASSERT_FALSE(run);
  EXPECT_NE(run.status().message().find("--scale-dither -2"), std::string::npos) << run.status().message();
}

}  // namespace

namespace {

// The CLI: --scale-dither-files N writes quantized.dither<k>.onnx for k = 1..N and our realisations
// 0..N in dither_realisations.json from one run, realisation 0 the exported point's SNR; it needs
// --output-dir and says so in one line before any work.
TEST(ScaleDither, CliWritesTheFilesAndOurRealisationsFromOneRun) {
  const std::string model = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing: run scripts/setup.sh";
  const std::string dir = test::makeTempDir("scale-dither-cli");
  test::writeTextImages(dir + "/images", 8, 192, 48, 7);
  AnalysisRequest rq = test::textLineRemedyRequest(model, dir + "/images", 192);
  auto run = prepareRun(rq);
  ASSERT_TRUE(run) << run.status().message();
  // The 8 preprocessed lines as one .npy for the CLI.
  Tensor all(DType::Float, {8, 3, 48, 192});
  for (int s = 0; s < 8; ++s) {
    auto feeds = run->analysisData->batch(s);
    ASSERT_TRUE(feeds) << feeds.status().message();
    const Tensor& t = (*feeds)[0].tensor;
    ASSERT_EQ(t.numel(), 3 * 48 * 192);
    std::memcpy(all.data<float>() + (size_t)s * t.numel(), t.data<float>(), (size_t)t.numel() * 4);
  }
  ASSERT_TRUE(writeNpy(dir + "/x.npy", all));
  const std::string common = model + " --calibration-data " + dir + "/x.npy --calibration-size 8 --no-sensitivity";
  const std::string refused = test::cliOutput("export " + common + " --scale-dither-files 2 --output-path " + dir + "/m.onnx");
  EXPECT_NE(refused.find("--scale-dither-files needs --output-dir"), std::string::npos) << refused;
  EXPECT_FALSE(fs::exists(dir + "/m.onnx"));
  const std::string out = test::cliOutput("export " + common + " --scale-dither-files 2 --output-dir " + dir + "/out");
  for (const char* f : {"quantized.onnx", "quantized.dither1.onnx", "quantized.dither2.onnx", "report.json"})
    EXPECT_TRUE(fs::exists(dir + "/out/" + f)) << f << "\n" << out;
  EXPECT_FALSE(fs::exists(dir + "/out/quantized.dither3.onnx"));
  EXPECT_FALSE(readBytes(dir + "/out/quantized.dither1.onnx") == readBytes(dir + "/out/quantized.onnx"));
  EXPECT_FALSE(readBytes(dir + "/out/quantized.dither1.onnx") == readBytes(dir + "/out/quantized.dither2.onnx"));
  const std::string json = readBytes(dir + "/out/dither_realisations.json");
  const std::string report = readBytes(dir + "/out/report.json");
  // Realisation 0 is the exported point's SNR (report.json's outputs[0].snr_db), then two more.
  const size_t at = json.find("\"snr_db\": [");
  ASSERT_NE(at, std::string::npos) << json;
  const double r0 = std::stod(json.substr(at + 11));
  const size_t rs = report.find("\"snr_db\"", report.find("\"outputs\""));
  ASSERT_NE(rs, std::string::npos);
  const double predicted = std::stod(report.substr(report.find(':', rs) + 1));
  EXPECT_NEAR(r0, predicted, 1e-3 * std::max(1.0, std::fabs(predicted)));
  const std::string list = json.substr(at, json.find(']', at) - at);
  EXPECT_EQ(std::count(list.begin(), list.end(), ','), 2) << "realisations 0, 1 and 2: " << list;
  fs::remove_all(dir);
}

}  // namespace
