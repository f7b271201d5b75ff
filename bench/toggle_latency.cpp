// Latency of one toggle (issue #5): QuantSession::setQuantized, the call the workbench makes when a
// node is switched on or off, on PP-OCR cls with 32 rendered text images (target: the GUI shows
// the new figures within 300 ms, its 40 ms debounce included). For a node early in the graph (the
// largest downstream cone) and one late in it: the first toggle after calibration + analysis, then
// steady-state toggles (switching the node back and forth).
// usage: qs_bench_toggle [MODEL [W H [SAMPLES [THREADS [REPEATS [BOUND]]]]]]
//        (default: cls, 192x48, 32 samples, 0 threads = all cores as the GUI, 15 repeats)
//        W = 0: random inputs (token models: bert_encoder, gpt_decoder), one sample per batch.
//        BOUND: AnalysisOptions::cacheRssBound (the workbench's 1.5, issue 16); 0 (default): the
//        cache budget alone (1 GiB), as before the bound.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "core/analysis/quant_session.h"
#include "core/onnx/loader.h"
#include "core/util/memory.h"
#include "bench/cpu_time.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
using Clock = std::chrono::steady_clock;

namespace {

struct Timing {
  double wallMs = 0, cpuMs = 0;
};

template <class F>
Timing timed(F&& f) {
  double c0 = bench::cpuSeconds();
  auto t0 = Clock::now();
  f();
  Timing t;
  t.wallMs = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  t.cpuMs = 1e3 * (bench::cpuSeconds() - c0);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

// Nodes downstream of `root`, itself included.
size_t coneSize(const Graph& g, NodeId root) {
  std::vector<char> in(g.nodes.size(), 0);
  in[(size_t)root] = 1;
  size_t n = 0;
  for (NodeId id : g.topoOrder) {
    if (!in[(size_t)id])
      for (ValueId v : g.nodes[(size_t)id].inputs)
        if (v != kNoValue && g.value(v).producer >= 0 && in[(size_t)g.value(v).producer]) in[(size_t)id] = 1;
    n += in[(size_t)id];
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  int w = argc > 3 ? std::atoi(argv[2]) : 192, h = argc > 3 ? std::atoi(argv[3]) : 48;
  int samples = argc > 4 ? std::atoi(argv[4]) : 32;
  int threads = argc > 5 ? std::atoi(argv[5]) : 0;
  int repeats = argc > 6 ? std::atoi(argv[6]) : 15;
  double bound = argc > 7 ? std::atof(argv[7]) : 0;
  auto m = loadModel(model);
  if (!m) {
    std::fprintf(stderr, "%s\n", m.status().message().c_str());
    return 2;
  }
  std::string dir = qs::test::makeTempDir("bench-toggle");
  CalibrationDataOptions co;
  if (w > 0) {
    qs::test::writeTextImages(dir, samples, w, h, 7);
    co.path = dir;
  } else {
    co.maxSamples = samples;  // random inputs
    co.batchSize = 1;
  }
  co.image.width = w;
  co.image.height = h;
  co.image.mean = {0.5f, 0.5f, 0.5f};
  co.image.std = {0.5f, 0.5f, 0.5f};
  auto opened = CalibrationData::open(**m, co);
  if (!opened) {
    std::fprintf(stderr, "%s\n", opened.status().message().c_str());
    return 2;
  }
  std::shared_ptr<const CalibrationData> data(std::move(opened).value());
  const Graph& g = (*m)->graph;
  std::printf("model %s, %dx%d, %d samples in %lld batches, threads %d (0 = all cores), cache RSS bound %g\n",
              model.c_str(), w, h, samples, (long long)data->batchCount(), threads, bound);
  std::printf("wall ms (CPU ms of the process, all threads)\n");

  for (const char* where : {"early", "late"}) {
    AnalysisOptions ao;  // the workbench's defaults: layer-wise, sensitivity, 1 GiB cache
    ao.threads = threads;
    ao.cacheRssBound = bound;
    auto s = QuantSession::create(*m, {}, ao);
    if (!s) {
      std::fprintf(stderr, "%s\n", s.status().message().c_str());
      return 2;
    }
    QuantSession& qs = **s;
    Timing cal = timed([&] { (void)qs.calibrate(*data); });
    Timing ana = timed([&] { (void)qs.analyze(data); });
    std::vector<NodeId> q;
    for (NodeId id : g.topoOrder)
      if (qs.plan().nodes[(size_t)id].quantized) q.push_back(id);
    NodeId node = where[0] == 'e' ? q.front() : q[q.size() - 2];
    std::printf("\n%s node %s (%s), downstream cone %zu of %zu nodes; calibrate %.0f (%.0f), analyze %.0f (%.0f), "
                "activation cache %.0f MB over %lld of %lld batches (limit %.0f MB), RSS after analyze %.0f MB\n",
                where, g.nodes[(size_t)node].name.c_str(), g.nodes[(size_t)node].opType.c_str(), coneSize(g, node),
                g.nodes.size(), cal.wallMs, cal.cpuMs, ana.wallMs, ana.cpuMs, (double)qs.cachedBytes() / 1e6,
                (long long)qs.cachedBatches(), (long long)data->batchCount(), (double)qs.cacheLimitBytes() / 1e6,
                (double)currentRssBytes() / 1e6);
    bool on = false;
    Timing first = timed([&] { (void)qs.setQuantized({{node, on}}); });
    std::printf("  first toggle after analyze   %8.1f (%8.1f)\n", first.wallMs, first.cpuMs);
    std::vector<double> wall, cpu;
    for (int r = 0; r < repeats; ++r) {
      on = !on;
      Timing t = timed([&] { (void)qs.setQuantized({{node, on}}); });
      wall.push_back(t.wallMs);
      cpu.push_back(t.cpuMs);
    }
    std::printf("  steady toggles (%d) median   %8.1f (%8.1f), min %.1f, max %.1f\n", repeats, median(wall), median(cpu),
                *std::min_element(wall.begin(), wall.end()), *std::max_element(wall.begin(), wall.end()));
  }
  std::printf("\npeak RSS %.0f MB\n", (double)peakRssBytes() / 1e6);
  std::filesystem::remove_all(dir);
  return 0;
}
