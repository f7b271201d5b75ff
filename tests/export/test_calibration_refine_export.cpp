// --calibration-refine (core/analysis/clip_refine.h) changes no weight of the float model: it moves activation
// ranges, which reach quantized.onnx as the scales of its QuantizeLinear/DequantizeLinear pairs. On the pointwise
// smoothing model built in code (method auto, 16 samples), one pass changes the written file (the refined scales are
// the exported ones), and ONNX Runtime computes the refined export's predicted output SNR within 0.5 dB.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "core/export/pipeline.h"
#include "core/io/npy.h"
#include "tests/support/model_helpers.h"
#include "tests/support/remedy_helpers.h"

using namespace qs;
namespace fs = std::filesystem;

TEST(CalibrationRefineExport, RefinedScalesReachTheExportAndOnnxRuntimeComputesThePrediction) {
  const std::string dir = test::makeTempDir("refine-export");
  std::mt19937 rng(5);
  const std::string model = test::writePointwiseModel(dir, rng);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", test::randomTensor({16, 3, 12, 12}, rng, -1.f, 1.f)));
  AnalysisRequest rq = test::remedyRequest(model, dir + "/x.npy");
  rq.calibration.method = CalibMethod::Auto;
  auto plain = runAnalysis(rq);
  ASSERT_TRUE(plain) << plain.status().message();
  rq.calibrationRefine.passes = 1;
  auto refined = runAnalysis(rq);
  ASSERT_TRUE(refined) << refined.status().message();
  const std::string q0 = test::exportRun(*plain, dir + "/plain"), q1 = test::exportRun(*refined, dir + "/refined");
  ASSERT_FALSE(q0.empty() || q1.empty());
  EXPECT_FALSE(test::readText(q0) == test::readText(q1));  // the refined ranges are in the file
  const double predicted = refined->result()->worstOutputSnrDb();
  const double ort = test::ortSnrDb(model, q1, dir, test::writeAnalysisInputs(*refined, dir));
  std::printf("calibration refine: %.3f dB without, %.3f dB with one pass (predicted); ONNX Runtime %.3f dB\n",
              plain->result()->worstOutputSnrDb(), predicted, ort);
  EXPECT_NEAR(ort, predicted, 0.5);
  fs::remove_all(dir);
}
