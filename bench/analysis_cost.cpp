// Cost of the analyses against plain float passes over the same samples (issue #3):
//   graph-wise + layer-wise + weight/activation split vs one float pass (target <= 3x),
//   the sensitivity sweep vs PPQ's method (two full passes per quantized node; target <= 0.5x),
//   peak RSS (target < 2 GB).
// usage: qs_bench_analysis [MODEL [W H [SAMPLES [THREADS]]]]  (default: PP-OCRv4 det, 640x640, 16, 2)
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/analysis/quant_session.h"
#include "core/onnx/loader.h"
#include "core/util/memory.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
using Clock = std::chrono::steady_clock;

// CPU time of the process (all threads): on a shared machine, wall time measures the neighbours too.
static double cpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double g_cpu0 = 0;
static double secondsSince(Clock::time_point t0) {
  (void)t0;
  return cpuNow() - g_cpu0;
}
#define START() (g_cpu0 = cpuNow(), Clock::now())

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : std::string(QS_MODELS_DIR) + "/ch_PP-OCRv4_det_infer.onnx";
  int w = argc > 3 ? std::atoi(argv[2]) : 640, h = argc > 3 ? std::atoi(argv[3]) : 640;
  int samples = argc > 4 ? std::atoi(argv[4]) : 16;
  int threads = argc > 5 ? std::atoi(argv[5]) : 2;
  auto m = loadModel(model);
  if (!m) {
    std::fprintf(stderr, "%s\n", m.status().message().c_str());
    return 2;
  }
  std::string dir = qs::test::makeTempDir("bench-analysis");
  qs::test::writeTextImages(dir, samples, w, h, 7);
  CalibrationDataOptions co;
  co.path = dir;
  co.image.width = w;
  co.image.height = h;
  co.image.mean = {0.485f, 0.456f, 0.406f};
  co.image.std = {0.229f, 0.224f, 0.225f};
  auto opened = CalibrationData::open(**m, co);
  if (!opened) {
    std::fprintf(stderr, "%s\n", opened.status().message().c_str());
    return 2;
  }
  std::shared_ptr<const CalibrationData> data(std::move(opened).value());

  // One float pass over the samples (batches decoded first: decoding is not analysis cost).
  std::vector<std::vector<NamedTensor>> batches;
  for (int64_t b = 0; b < data->batchCount(); ++b) batches.push_back(data->batch(b).value());
  ExecutorOptions eo;
  eo.threads = threads;
  auto ex = Executor::create(*m, eo);
  (void)(*ex)->run(batches[0]);  // warm-up
  auto t0 = START();
  for (const auto& b : batches) (void)(*ex)->run(b);
  double floatPass = secondsSince(t0);

  AnalysisOptions ao;
  ao.threads = threads;
  ao.calibration.method = CalibMethod::Max;
  ao.sensitivity = false;
  auto s = QuantSession::create(*m, {}, ao);
  t0 = START();
  (void)(*s)->calibrate(*data);
  double calib = secondsSince(t0);
  t0 = START();
  auto r = (*s)->analyze(data);
  double analysis = secondsSince(t0);
  int quantized = 0;
  for (const auto& n : (*r)->plan.nodes) quantized += n.quantized;

  AnalysisOptions so = ao;
  so.layerwise = false;
  so.sensitivity = true;
  auto s2 = QuantSession::create(*m, {}, so);
  (void)(*s2)->calibrate(*data);
  t0 = START();
  (void)(*s2)->analyze(data);
  double withSensitivity = secondsSince(t0);
  AnalysisOptions go = so;
  go.sensitivity = false;
  auto s3 = QuantSession::create(*m, {}, go);
  (void)(*s3)->calibrate(*data);
  t0 = START();
  (void)(*s3)->analyze(data);
  double graphwiseOnly = secondsSince(t0);
  double sweep = withSensitivity - graphwiseOnly;
  double ppq = 2.0 * quantized * floatPass;

  std::printf("(CPU seconds of the process, all threads)\n");
  std::printf("model %s, %dx%d, %d samples, %d threads, %d quantized nodes\n", model.c_str(), w, h, samples, threads,
              quantized);
  std::printf("float pass over the samples          %8.2f s\n", floatPass);
  std::printf("calibration                          %8.2f s  (%.2fx float)\n", calib, calib / floatPass);
  std::printf("graph-wise + layer-wise + w/a split  %8.2f s  (%.2fx float; target <= 3x)\n", analysis, analysis / floatPass);
  std::printf("graph-wise only                      %8.2f s  (%.2fx float)\n", graphwiseOnly, graphwiseOnly / floatPass);
  std::printf("sensitivity sweep                    %8.2f s  (PPQ's 2 passes/node: %.1f s; ratio %.3f; target <= 0.5)\n",
              sweep, ppq, sweep / ppq);
  std::printf("peak RSS                             %8.0f MB (target < 2048)\n", (double)peakRssBytes() / 1e6);
  std::filesystem::remove_all(dir);
  return 0;
}
