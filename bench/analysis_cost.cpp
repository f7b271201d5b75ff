// Cost of the analyses against plain float passes over the same samples (issue #3):
//   graph-wise + layer-wise + weight/activation split vs one float pass (target <= 3x),
//   the sensitivity sweep vs PPQ's method (two full passes per quantized node; target <= 0.5x),
//   peak RSS (target < 2 GB).
// usage: qs_bench_analysis [MODEL [W H [SAMPLES [THREADS [PPQ_NODES]]]]]
//        (default: PP-OCRv4 det, 640x640, 16 samples, 2 threads, 3 PPQ-style nodes measured)
//
// Each part runs in its own child process (this program with --part), so that each peak RSS is
// that part's own and the buffer pool of one part does not serve the next. Times are CPU seconds
// of the process (all threads): on a shared machine, wall time measures the neighbours too. The
// float baselines are the quickest of three passes.
// The parts of one analyze() are told apart by difference: a run without layer-wise, one with,
// one with sensitivity too (batches run on both threads at once, so stages overlap in time).
// Every part works on the images decoded once beforehand (DecodedData): decoding PNGs is neither
// analysis nor float-pass cost.
// QS_EXACT_CACHE=FILE: "--part full" writes the exact per-node sensitivities there, "--part fast"
// reads them back and prints the estimate's Spearman and top-10 overlap against them, so that the
// estimate can be iterated on without re-running the sweep.
// QS_CACHE_BUDGET=BYTES: AnalysisOptions::cacheBudgetBytes (0: keep no tables for toggles, as the CLI).
// QS_PREPACK=0: AnalysisOptions::prepackWeights off (Wq packed on every run), for A/B runs.
// QS_DNNL_WQ=0: AnalysisOptions::dnnlMatMul off (Wq in the kernel's panels, not oneDNN's layout).
// QS_CONE_INPUTS=0: AnalysisOptions::keepConeInputs off (exact_one then re-runs the float prefix).
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>

#include "core/analysis/fast_sensitivity.h"
#include "core/analysis/quant_session.h"
#include "core/onnx/loader.h"
#include "core/numeric/fake_quant.h"
#include "core/util/memory.h"
#include "bench/cpu_time.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;

namespace {

struct Args {
  std::string model = std::string(QS_MODELS_DIR) + "/ch_PP-OCRv4_det_infer.onnx";
  int w = 640, h = 640, samples = 16, threads = 2, ppqNodes = 3;
};

struct Setup {
  std::shared_ptr<Model> model;
  std::shared_ptr<const CalibrationData> data;
  std::string dir;
};

Setup open(const Args& a) {
  Setup s;
  auto m = loadModel(a.model);
  if (!m) {
    std::fprintf(stderr, "%s\n", m.status().message().c_str());
    std::exit(2);
  }
  s.model = *m;
  s.dir = qs::test::makeTempDir("bench-analysis");
  CalibrationDataOptions co;
  if (a.w == 0) {
    // Random inputs (the zoo's token-id and image models alike), one sample per batch.
    co.maxSamples = a.samples;
    co.batchSize = 1;
    co.seed = 7;
  } else {
    qs::test::writeTextImages(s.dir, a.samples, a.w, a.h, 7);
    co.path = s.dir;
  }
  co.image.width = a.w;
  co.image.height = a.h;
  co.image.mean = {0.485f, 0.456f, 0.406f};
  co.image.std = {0.229f, 0.224f, 0.225f};
  auto opened = CalibrationData::open(*s.model, co);
  if (!opened) {
    std::fprintf(stderr, "%s\n", opened.status().message().c_str());
    std::exit(2);
  }
  s.data = std::shared_ptr<const CalibrationData>(std::move(opened).value());
  return s;
}

// Prints "key value" lines that the parent reads back.
void emit(const char* key, double v) { std::printf("%s %.6f\n", key, v); }

// Fake-quantizes the points of one node only (PPQ's per-node step, built from the public results).
class OneNodeTransform : public InputTransform {
 public:
  OneNodeTransform(const AnalysisResult& r, NodeId node) : m_node(node), m_mode(r.plan.mode) {
    for (const ActivationPoint& p : r.plan.activations) {
      auto it = r.activations.find(p.value);
      if (p.node == node && it != r.activations.end()) m_actScale[p.inputIndex] = it->second.scale;
    }
    m_weights = &r.weights;
  }
  const Tensor* transform(NodeId node, size_t input, const Tensor& value, Tensor& storage) override {
    if (node != m_node || value.dtype() != DType::Float) return nullptr;
    auto a = m_actScale.find(input);
    if (a != m_actScale.end()) {
      storage = fakeQuantize(value, {a->second}, 0, m_mode, kActQmin, kActQmax);
      return &storage;
    }
    for (const WeightQuant& w : *m_weights)
      if (w.node == node && w.inputIndex == input) {
        storage = fakeQuantize(value, w.scale, w.axis, m_mode, kWeightQmin, kWeightQmax);
        return &storage;
      }
    return nullptr;
  }

 private:
  NodeId m_node;
  QuantMode m_mode;
  std::map<size_t, float> m_actScale;
  const std::vector<WeightQuant>* m_weights = nullptr;
};

// The image folder's batches decoded once, served from memory: every part, the float passes
// and the analyses alike, times its computation on the same tensors, not PNG decoding.
class DecodedData : public CalibrationData {
 public:
  DecodedData(const CalibrationData& from) : m_size(from.batchSize()), m_samples(from.sampleCount()), m_what(from.description()) {
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

int runPart(const std::string& part, const Args& a) {
  Setup s = open(a);
  // Batches decoded first: decoding is not analysis cost (nor float-pass cost).
  auto decoded = std::make_shared<const DecodedData>(*s.data);
  s.data = decoded;
  const std::vector<std::vector<NamedTensor>>& batches = decoded->batches();
  if (part == "float" || part == "float-rewritten") {
    ExecutorOptions eo;
    eo.threads = a.threads;
    eo.rewrites = part == "float-rewritten";
    auto ex = Executor::create(s.model, eo);
    (void)(*ex)->run(batches[0]);  // warm-up
    // The quickest of three passes: the baseline of every ratio, so the least disturbed one.
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      double t0 = bench::cpuSeconds();
      for (const auto& b : batches) (void)(*ex)->run(b);
      best = std::min(best, bench::cpuSeconds() - t0);
    }
    emit("seconds", best);
  } else if (part == "float-kept") {
    // The float pass as the analysis needs it: every activation kept (runNodes into a table).
    ExecutorOptions eo;
    eo.threads = a.threads;
    auto ex = Executor::create(s.model, eo);
    double t0 = bench::cpuSeconds();
    for (const auto& b : batches) {
      auto table = (*ex)->makeValueTable(b);
      (void)(*ex)->runNodes(s.model->graph.topoOrder, *table);
    }
    emit("seconds", bench::cpuSeconds() - t0);
  } else {
    AnalysisOptions ao;
    ao.threads = a.threads;
    ao.calibration.method = CalibMethod::Max;
    ao.layerwise = part == "analysis" || part == "full";  // "graphwise" (for profiles): neither
    ao.sensitivity = part == "full" || part == "fast";
    if (part == "fast") ao.sensitivityMethod = SensitivityMethod::Fast;
    // QS_CACHE_BUDGET=0: no tables kept for toggles, as `quantscope analyze` runs without a
    // fallback target (AnalysisRequest::keepForToggles); unset: the library's default budget.
    if (const char* cb = std::getenv("QS_CACHE_BUDGET")) ao.cacheBudgetBytes = std::strtoull(cb, nullptr, 10);
    // QS_PREPACK=0: the fake-quantized MatMul weights packed on every run (A/B in one binary).
    if (const char* pp = std::getenv("QS_PREPACK")) ao.prepackWeights = std::string(pp) != "0";
    // QS_DNNL_WQ=0: Wq's products on the kernel's panels where oneDNN's matmul would take them.
    if (const char* dw = std::getenv("QS_DNNL_WQ")) ao.dnnlMatMul = std::string(dw) != "0";
    // QS_CONE_INPUTS=0: no cone inputs kept for exactSensitivity (AnalysisOptions::keepConeInputs).
    if (const char* ci = std::getenv("QS_CONE_INPUTS")) ao.keepConeInputs = std::string(ci) != "0";
    auto session = QuantSession::create(s.model, {}, ao);
    if (!session) {
      std::fprintf(stderr, "%s\n", session.status().message().c_str());
      return 2;
    }
    QuantSession& qs = **session;
    double t0 = bench::cpuSeconds();
    (void)qs.calibrate(*s.data);
    emit("calibration", bench::cpuSeconds() - t0);
    t0 = bench::cpuSeconds();
    auto r = qs.analyze(s.data);
    if (!r) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      return 2;
    }
    emit("seconds", bench::cpuSeconds() - t0);
    int quantized = 0;
    for (const auto& n : (*r)->plan.nodes) quantized += n.quantized;
    emit("quantized", quantized);
    emit("cached_bytes", (double)qs.cachedBytes());
    emit("cached_batches", (double)qs.cachedBatches());
    emit("cone_input_batches", (double)qs.coneInputBatches());
    emit("cone_input_nodes", (double)qs.coneInputNodes().size());
    if (part == "full") {
      // The estimate against the exact sweep, over the quantizable nodes.
      std::vector<double> exact, fast;
      for (const NodeResult& nr : (*r)->nodes) {
        if (std::isnan(nr.sensitivitySnrDb)) continue;
        exact.push_back(nr.sensitivitySnrDb);
        fast.push_back(nr.sensitivityEstimateDb);
      }
      if (const char* cache = std::getenv("QS_EXACT_CACHE")) {
        // One exact figure per node (NaN where none): the fast part compares against it.
        FILE* f = std::fopen(cache, "w");
        for (size_t i = 0; f && i < (*r)->nodes.size(); ++i) std::fprintf(f, "%.17g\n", (*r)->nodes[i].sensitivitySnrDb);
        if (f) std::fclose(f);
      }
      emit("spearman", spearmanCorrelation(fast, exact));
      emit("top10", lowestOverlap(fast, exact, 10));
      emit("ranked", (double)exact.size());
    }
    if (part == "fast" && std::getenv("QS_EXACT_CACHE")) {
      // The estimate against the exact sweep of an earlier "full" run with the same arguments.
      std::vector<double> exact, fast;
      if (FILE* f = std::fopen(std::getenv("QS_EXACT_CACHE"), "r")) {
        char line[64];
        for (size_t i = 0; i < (*r)->nodes.size() && std::fgets(line, sizeof line, f); ++i) {
          const double e = std::strtod(line, nullptr);
          if (std::isnan(e)) continue;
          exact.push_back(e);
          fast.push_back((*r)->nodes[i].sensitivitySnrDb);
        }
        std::fclose(f);
      }
      emit("spearman", spearmanCorrelation(fast, exact));
      emit("top10", lowestOverlap(fast, exact, 10));
      emit("ranked", (double)exact.size());
    }
    if (part == "fast") {
      // The exact figure of the node the estimate ranks worst, on demand.
      NodeId worst = -1;
      for (size_t i = 0; i < (*r)->nodes.size(); ++i) {
        const double v = (*r)->nodes[i].sensitivitySnrDb;
        if (!std::isnan(v) && (worst < 0 || v < (*r)->nodes[(size_t)worst].sensitivitySnrDb)) worst = (NodeId)i;
      }
      if (worst >= 0) {
        double e0 = bench::cpuSeconds();
        const auto& ci = qs.coneInputNodes();
        emit("worst_inputs_kept", std::find(ci.begin(), ci.end(), worst) != ci.end() ? 1.0 : 0.0);
        (void)qs.exactSensitivity({worst});
        emit("exact_one", bench::cpuSeconds() - e0);
      }
    }
    if (part == "ppq") {
      // PPQ's method for a few nodes spread over the graph: per node, a float pass and a pass with
      // only that node quantized, over every sample.
      std::vector<NodeId> q;
      for (NodeId id : s.model->graph.topoOrder)
        if ((*r)->plan.nodes[(size_t)id].quantized) q.push_back(id);
      ExecutorOptions eo;
      eo.threads = a.threads;
      auto ex = Executor::create(s.model, eo);
      (void)(*ex)->run(batches[0]);
      double total = 0;
      for (int k = 0; k < a.ppqNodes; ++k) {
        NodeId node = q[(q.size() - 1) * (size_t)k / (size_t)std::max(1, a.ppqNodes - 1)];
        OneNodeTransform t(**r, node);
        RunOptions ro;
        ro.inputTransform = &t;
        double c0 = bench::cpuSeconds();
        for (const auto& b : batches) {
          (void)(*ex)->run(b);
          (void)(*ex)->run(b, ro);
        }
        total += bench::cpuSeconds() - c0;
      }
      emit("ppq_per_node", total / a.ppqNodes);
    }
  }
  emit("peak_rss", (double)peakRssBytes());
  std::fflush(stdout);
  std::filesystem::remove_all(s.dir);
  return 0;
}

std::map<std::string, double> child(const char* self, const std::string& part, const Args& a) {
  std::string cmd = std::string(self) + " --part " + part + " '" + a.model + "' " + std::to_string(a.w) + " " +
                    std::to_string(a.h) + " " + std::to_string(a.samples) + " " + std::to_string(a.threads) + " " +
                    std::to_string(a.ppqNodes);
  std::map<std::string, double> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char key[64];
  double v;
  while (std::fscanf(p, "%63s %lf", key, &v) == 2) out[key] = v;
  if (pclose(p) != 0) {
    std::fprintf(stderr, "part %s failed\n", part.c_str());
    std::exit(1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string part;
  int first = 1;
  if (argc > 2 && std::string(argv[1]) == "--part") {
    part = argv[2];
    first = 3;
  }
  Args a;
  int n = argc - first;
  char** v = argv + first;
  if (n > 0) a.model = v[0];
  if (n > 2) a.w = std::atoi(v[1]), a.h = std::atoi(v[2]);
  if (n > 3) a.samples = std::atoi(v[3]);
  if (n > 4) a.threads = std::atoi(v[4]);
  if (n > 5) a.ppqNodes = std::atoi(v[5]);
  if (!part.empty()) return runPart(part, a);

  if (a.ppqNodes < 0) {
    // Quick: the float baseline, the exact and the fast analysis only (docs/performance.md,
    // "Fast sensitivity"). W = H = 0 feeds random inputs (the zoo's models).
    auto fl = child(argv[0], "float", a);
    auto full = child(argv[0], "full", a);
    auto fast = child(argv[0], "fast", a);
    const double f = fl["seconds"];
    std::printf("%s | %d nodes | Spearman %.3f | top-10 %d | float %.2f s | exact analysis %.2fx | fast analysis %.2fx"
                " | exact one node %.2fx | peak RSS exact %.0f MB, fast %.0f MB\n",
                std::filesystem::path(a.model).stem().c_str(), (int)full["ranked"], full["spearman"], (int)full["top10"],
                f, full["seconds"] / f, fast["seconds"] / f, fast["exact_one"] / f, full["peak_rss"] / 1e6,
                fast["peak_rss"] / 1e6);
    return 0;
  }
  auto fl = child(argv[0], "float", a);
  auto flr = child(argv[0], "float-rewritten", a);
  auto kept = child(argv[0], "float-kept", a);
  auto gw = child(argv[0], "graphwise", a);
  auto an = child(argv[0], "analysis", a);
  auto full = child(argv[0], "full", a);
  auto fast = child(argv[0], "fast", a);
  auto ppq = a.ppqNodes > 0 && a.w > 0 ? child(argv[0], "ppq", a) : std::map<std::string, double>{};
  const double f = fl["seconds"];
  const int quantized = (int)full["quantized"];
  // Batches run on both threads at once, so the sweep is told apart by difference, not by stage.
  const double sweep = full["seconds"] - an["seconds"], ppqEstimate = 2.0 * quantized * f;
  std::printf("(CPU seconds of the process, all threads; each part in its own process)\n");
  std::printf("model %s, %dx%d, %d samples, %d threads, %d quantized nodes\n", a.model.c_str(), a.w, a.h, a.samples,
              a.threads, quantized);
  std::printf("float pass over the samples              %8.2f s  (peak RSS %.0f MB)\n", f, fl["peak_rss"] / 1e6);
  std::printf("float pass, rewritten graph (as `run`)   %8.2f s  (%.2fx)\n", flr["seconds"], flr["seconds"] / f);
  std::printf("float pass keeping every activation       %8.2f s  (%.2fx; a batch kept whole for toggles)\n",
              kept["seconds"], kept["seconds"] / f);
  std::printf("calibration                              %8.2f s  (%.2fx float)\n", an["calibration"], an["calibration"] / f);
  std::printf("graph-wise + layer-wise + w/a split      %8.2f s  (%.2fx float; target <= 3x; peak RSS %.0f MB)\n",
              an["seconds"], an["seconds"] / f, an["peak_rss"] / 1e6);
  // One sweep computes all three; the layer-wise share is what a sweep without it does not cost.
  std::printf("  of which float + graph-wise (a sweep without layer-wise) %8.2f s  (%.2fx float)\n", gw["seconds"],
              gw["seconds"] / f);
  std::printf("  of which layer-wise + w/a split        %8.2f s  (%.2fx float)\n", an["seconds"] - gw["seconds"],
              (an["seconds"] - gw["seconds"]) / f);
  std::printf("full analysis (+ sensitivity sweep)      %8.2f s  (%.2fx float; peak RSS %.0f MB, target < 2048)\n",
              full["seconds"], full["seconds"] / f, full["peak_rss"] / 1e6);
  std::printf("  of which sensitivity sweep             %8.2f s  (PPQ estimate 2 x %d x float = %.1f s; ratio %.3f; target <= 0.5)\n",
              sweep, quantized, ppqEstimate, sweep / ppqEstimate);
  std::printf("fast analysis (graph-wise, layer-wise, split, estimated sensitivity) %8.2f s  (%.2fx float; target <= 4x; peak RSS %.0f MB)\n",
              fast["seconds"], fast["seconds"] / f, fast["peak_rss"] / 1e6);
  std::printf("  exact sensitivity of one node on demand %8.2f s  (%.2fx float)\n", fast["exact_one"], fast["exact_one"] / f);
  std::printf("estimate vs exact sweep over %d nodes: Spearman %.3f, top-10 overlap %d\n", (int)full["ranked"],
              full["spearman"], (int)full["top10"]);
  std::printf("activations kept for toggles (full run)   %8.0f MB, %d of %d batches\n", full["cached_bytes"] / 1e6,
              (int)full["cached_batches"], a.samples);
  if (!ppq.empty()) {
    const double perNode = ppq["ppq_per_node"];
    std::printf("PPQ's step measured on %d nodes           %8.2f s per node (%.2fx float; estimate 2x); sweep vs measured: %.3f\n",
                a.ppqNodes, perNode, perNode / f, sweep / (perNode * quantized));
  }
  return 0;
}
