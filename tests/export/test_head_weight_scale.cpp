// The head weight scale search (AnalysisRequest::headWeightScale, on by default, int8): on a model
// built in code, MatMul -> Relu -> MatMul (the head) -> Add (bias) -> Softmax, only the head is
// searched (outputHeads); its per-channel weight scales move by at most 1 +- 16/256, its own output
// error on the calibration data falls; quantized.onnx carries
// the scales (ONNX Runtime at the prediction), quant_cfg.json the ratios, and --load-config
// reproduces quantized.onnx byte for byte. Off, the scales are the weights' abs max / 127 as
// before. Why (rec's spaces): docs/quality.md, "rec: the spaces (2026-11-27, wt-recsp)".
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/analysis/weight_clip.h"
#include "core/export/pipeline.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"

using namespace qs;
using qs::test::exportRun;
using qs::test::OnnxBuilder;
using qs::test::readText;
using qs::test::runFile;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kK = 32, kClasses = 48, kSteps = 10;

// The head model (test::writeHeadModel): column 0 of the head has one weight 8x the others' range (as rec's blank
// column).
std::string writeHeadModel(const std::string& dir, std::mt19937& rng) {
  return test::writeHeadModel(dir, rng, kSteps, kK, kClasses, kClasses, false);
}

}  // namespace

TEST(HeadWeightScale, SearchesOnlyTheHeadLowersItsErrorAndReloadsByteForByte) {
  std::mt19937 rng(14);
  const std::string dir = test::makeTempDir("head-weight-scale");
  const std::string model = writeHeadModel(dir, rng);
  const Tensor x = test::randomTensor({8, kSteps, kK}, rng, -1.f, 1.f);
  ASSERT_NO_FATAL_FAILURE(test::writeSamples(x, dir + "/x.npy", dir));

  EXPECT_TRUE(AnalysisRequest{}.headWeightScale);  // on by default
  AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
  rq.headWeightScale = false;
  auto off = runAnalysis(rq);
  ASSERT_TRUE(off) << off.status().message();
  EXPECT_TRUE(off->headWeightRatios.empty());
  rq.headWeightScale = true;
  auto on = runAnalysis(rq);
  ASSERT_TRUE(on) << on.status().message();

  // Only the head, not the inner MatMul.
  const Graph& g = on->model->graph;
  const std::vector<NodeId> heads = outputHeads(*on->session);
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_EQ(g.nodes[(size_t)heads[0]].name, "head");
  ASSERT_EQ(on->headWeightScale.size(), 1u);
  const WeightClipNode& h = on->headWeightScale[0];
  EXPECT_EQ(g.nodes[(size_t)h.node].name, "head");
  EXPECT_GT(h.clipped, 0);
  EXPECT_LT(h.errorAfter, 0.95 * h.errorBefore);
  ASSERT_EQ(on->headWeightRatios.size(), 1u);
  EXPECT_EQ(on->headWeightRatios[0].tensor, "w2");
  for (float r : on->headWeightRatios[0].ratio) {
    EXPECT_GE(r, 1.f - 16.f / 256.f);
    EXPECT_LE(r, 1.f + 16.f / 256.f);
  }
  // The session's weight scales are the ratios times abs max / 127; off, abs max / 127.
  for (const auto* run : {&*off, &*on}) {
    for (const WeightQuant& w : run->result()->weights) {
      if (g.value(w.value).name != "w2") continue;
      const Tensor& t = *g.value(w.value).constant;
      for (int64_t c = 0; c < kClasses; ++c) {
        float amax = 0;
        for (int64_t k = 0; k < kK; ++k) amax = std::max(amax, std::fabs(t.data<float>()[k * kClasses + c]));
        const float r = run == &*off ? 1.f : on->headWeightRatios[0].ratio[(size_t)c];
        EXPECT_EQ(w.amax[(size_t)c], amax * r) << c;
      }
    }
  }
  const double before = off->result()->outputs[0].metrics.snrDb, after = on->result()->outputs[0].metrics.snrDb;
  std::printf("head weight scale search: %d of %d channels changed, head error %.4g -> %.4g, output %.2f -> %.2f dB\n",
              h.clipped, h.channels, h.errorBefore, h.errorAfter, before, after);
  // Not asserted: the output SNR. The search minimises the head's own output error (the logits), not the
  // Softmax's; on this model the logits' error falls by a fifth while the Softmax output loses 1.0 dB
  // (39.04 -> 38.04 dB, docs/quality.md "rec: the spaces").

  // quantized.onnx: ONNX Runtime at the prediction; report.json and quant_cfg.json name it.
  const std::string q = exportRun(*on, dir + "/out");
  ASSERT_FALSE(q.empty());
  EXPECT_NE(readText(dir + "/out/report.json").find("\"head_weight_scale\": \"head ("), std::string::npos);
  const std::string cfg = readText(dir + "/out/quant_cfg.json");
  EXPECT_NE(cfg.find("\"head_weight_scale\""), std::string::npos);
  ASSERT_EQ(test::runOrtBatch(q, dir, dir + "/q", 8), 0);
  ErrorAccumulator ort;
  for (int s = 0; s < 8; ++s) {
    auto got = readNpy(dir + "/q/out_" + std::to_string(s) + "_0.npy");
    ASSERT_TRUE(got) << got.status().message();
    ort.add(runFile(model, test::sampleOf(x, s)), *got);
  }
  std::printf("ONNX Runtime on quantized.onnx: %.2f dB (predicted %.2f)\n", ort.metrics().snrDb, after);
  EXPECT_NEAR(ort.metrics().snrDb, after, 0.5);

  // --load-config: the saved ratios, no search: the same file byte for byte.
  AnalysisRequest reload = test::remedyRequest(model, dir + "/x.npy");
  reload.loadConfig = dir + "/out/quant_cfg.json";
  auto again = runAnalysis(reload);
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_TRUE(again->headWeightScale.empty());
  const std::string q2 = exportRun(*again, dir + "/out2");
  ASSERT_FALSE(q2.empty());
  EXPECT_TRUE(readText(q) == readText(q2));

  // A saved ratio list of the wrong length: one line naming the file and the weight.
  const std::string refused = test::badConfigError(cfg, "head_weight_scale", "ratio", "1.0, ", dir, reload);
  EXPECT_NE(refused.find("bad_cfg.json: quantscope.head_weight_scale 'w2' has 49 ratios, the weight 48 channels"),
            std::string::npos)
      << refused;
  EXPECT_EQ(refused.find('\n'), std::string::npos);
  fs::remove_all(dir);
}
