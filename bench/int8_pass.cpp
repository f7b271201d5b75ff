// Integer Convs in the analysis (issue 16): the quantized pass with INT8 Convs evaluated as
// u8 x s8 -> int32 GEMMs (core/kernels/qconv.h: AVX-512 VNNI, or AVX2 where the CPU lacks VNNI)
// against the same pass with FP32 convolutions of fake-quantized tensors
// (AnalysisOptions::integerConv off), on one model, in one process, the variants alternating
// round by round; medians of CPU seconds (all threads) over the rounds.
//
//   float        the float pass keeping every activation, as the analysis runs it (BatchSweep::run):
//                each elementwise chain in one pass (runFloatChain), every other node by its kernel
//   graph-wise   analyze() without layer-wise and sensitivity: a float pass and the quantized
//                pass, each node compared as it comes; the quantized pass = graph-wise - float
//   +layer-wise  analyze() with the layer-wise runs and the weight/activation split too
//
// usage: qs_bench_int8 [MODEL [W H [SAMPLES [THREADS [ROUNDS]]]]]
//        (default: PP-OCRv4 det, 640x640, 4 samples, 1 thread, 5 rounds; W = H = 0: random
//        inputs, one sample per batch, for the zoo's models)
//        QS_INT8_PROFILE=int|fq: only that variant's graph-wise analyze, ROUNDS times, nothing
//        printed (to run under `perf record`)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench/cpu_time.h"
#include "core/analysis/compare_outputs.h"
#include "core/analysis/quant_session.h"
#include "core/kernels/qconv.h"
#include "core/onnx/loader.h"
#include "core/util/memory.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;

namespace {

struct Args {
  std::string model = std::string(QS_MODELS_DIR) + "/ch_PP-OCRv4_det_infer.onnx";
  int w = 640, h = 640, samples = 4, threads = 1, rounds = 5;
};

// The batches decoded once and served from memory: every variant times its computation on the
// same tensors, not image decoding.
class DecodedData : public CalibrationData {
 public:
  explicit DecodedData(const CalibrationData& from)
      : m_size(from.batchSize()), m_samples(from.sampleCount()), m_what(from.description()) {
    for (int64_t b = 0; b < from.batchCount(); ++b) m_batches.push_back(from.batch(b).value());
  }
  int64_t sampleCount() const override { return m_samples; }
  int64_t batchSize() const override { return m_size; }
  Result<std::vector<NamedTensor>> batch(int64_t index) const override { return m_batches.at((size_t)index); }
  std::string description() const override { return m_what + " (decoded)"; }
  const std::vector<std::vector<NamedTensor>>& batches() const { return m_batches; }

 private:
  int64_t m_size, m_samples;
  std::string m_what;
  std::vector<std::vector<NamedTensor>> m_batches;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(2);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (argc > 1) a.model = argv[1];
  if (argc > 3) a.w = std::atoi(argv[2]), a.h = std::atoi(argv[3]);
  if (argc > 4) a.samples = std::atoi(argv[4]);
  if (argc > 5) a.threads = std::atoi(argv[5]);
  if (argc > 6) a.rounds = std::max(1, std::atoi(argv[6]));

  auto loaded = loadModel(a.model);
  if (!loaded) fail(loaded.status().message());
  std::shared_ptr<Model> model = *loaded;
  const std::string dir = qs::test::makeTempDir("bench-int8");
  CalibrationDataOptions co;
  if (a.w == 0) {
    co.maxSamples = a.samples;
    co.batchSize = 1;
    co.seed = 7;
  } else {
    qs::test::writeTextImages(dir, a.samples, a.w, a.h, 7);
    co.path = dir;
  }
  co.image.width = a.w;
  co.image.height = a.h;
  co.image.mean = {0.485f, 0.456f, 0.406f};
  co.image.std = {0.229f, 0.224f, 0.225f};
  auto opened = CalibrationData::open(*model, co);
  if (!opened) fail(opened.status().message());
  auto data = std::make_shared<const DecodedData>(**opened);
  std::filesystem::remove_all(dir);

  ExecutorOptions eo;
  eo.threads = a.threads;
  auto ex = Executor::create(model, eo);
  if (!ex) fail(ex.status().message());

  // Sessions: [integer][layer-wise]. Nothing kept for toggles: every analyze() does the same work.
  std::unique_ptr<QuantSession> sessions[2][2];
  for (int integer = 0; integer < 2; ++integer)
    for (int lw = 0; lw < 2; ++lw) {
      AnalysisOptions ao;
      ao.threads = a.threads;
      ao.calibration.method = CalibMethod::Max;
      ao.layerwise = lw == 1;
      ao.sensitivity = false;
      ao.integerConv = integer == 1;
      ao.cacheBudgetBytes = 0;
      auto s = QuantSession::create(model, {}, ao);
      if (!s) fail(s.status().message());
      if (Status st = (*s)->calibrate(*data); !st) fail(st.message());
      sessions[integer][lw] = std::move(*s);
    }

  // The analysis's chains (the same plan in every session).
  const Graph& g = model->graph;
  const auto chainAt = findElementwiseChains(g, sessions[0][0]->state());
  auto floatPass = [&](const std::vector<NamedTensor>& b) {
    auto table = (*ex)->makeValueTable(b);
    if (!table) fail(table.status().message());
    std::vector<char> done(g.nodes.size(), 0);
    for (NodeId id : g.topoOrder) {
      if (done[(size_t)id]) continue;
      const ElementwiseChain* ch = chainAt[(size_t)id].get();
      if (ch && runFloatChain(g, *ch, *table)) {
        for (NodeId member : ch->nodes) done[(size_t)member] = 1;
        continue;
      }
      if (Status st = (*ex)->runNodes(std::span<const NodeId>(&id, 1), *table); !st) fail(st.message());
    }
  };

  if (const char* p = std::getenv("QS_INT8_PROFILE")) {
    const int integer = std::string(p) == "int" ? 1 : 0;
    for (int r = 0; r < a.rounds; ++r)
      if (auto res = sessions[integer][0]->analyze(data); !res) fail(res.status().message());
    return 0;
  }
  std::map<std::string, std::vector<double>> t;
  double snr[2] = {0, 0};
  for (int r = 0; r < a.rounds + 1; ++r) {  // round 0 warms up (packed weights, buffer pool)
    const bool keep = r > 0;
    double t0 = bench::cpuSeconds();
    for (const auto& b : data->batches()) floatPass(b);
    if (keep) t["float"].push_back(bench::cpuSeconds() - t0);
    // Alternate which of the integer and FP32 variants goes first.
    for (int k = 0; k < 4; ++k) {
      const int integer = (k + r) % 2, lw = k / 2;
      t0 = bench::cpuSeconds();
      auto res = sessions[integer][lw]->analyze(data);
      const double dt = bench::cpuSeconds() - t0;
      if (!res) fail(res.status().message());
      if (keep) t[std::string(lw ? "layerwise" : "graphwise") + (integer ? "-int" : "-fq")].push_back(dt);
      if (!lw && !(*res)->outputs.empty()) snr[integer] = (*res)->outputs[0].metrics.snrDb;
    }
  }
  const double f = median(t["float"]);
  const double gwI = median(t["graphwise-int"]), gwF = median(t["graphwise-fq"]);
  const double lwI = median(t["layerwise-int"]), lwF = median(t["layerwise-fq"]);
  std::vector<double> passI, passF;  // the quantized pass per round: graph-wise - float
  for (size_t i = 0; i < t["float"].size(); ++i) {
    passI.push_back(t["graphwise-int"][i] - t["float"][i]);
    passF.push_back(t["graphwise-fq"][i] - t["float"][i]);
  }
  const double qI = median(passI), qF = median(passF);
  std::printf("model %s, %dx%d, %d samples, %d threads, qconv %s, medians of %d rounds (CPU s, all threads)\n",
              std::filesystem::path(a.model).stem().c_str(), a.w, a.h, a.samples, a.threads, qconvKernelName(), a.rounds);
  std::printf("  float pass (every activation kept)   %7.3f s\n", f);
  std::printf("  graph-wise analyze      FP32 fq %7.3f s   integer %7.3f s   %.2fx\n", gwF, gwI, gwF / gwI);
  std::printf("  quantized pass (- float)  FP32 fq %7.3f s   integer %7.3f s   %.2fx\n", qF, qI, qF / qI);
  std::printf("  + layer-wise and split  FP32 fq %7.3f s   integer %7.3f s   %.2fx\n", lwF, lwI, lwF / lwI);
  std::printf("  output 0 SNR: FP32 fq %.4f dB, integer %.4f dB; peak RSS %.0f MB\n", snr[0], snr[1],
              (double)peakRssBytes() / 1e6);
  return 0;
}
