// quantscope analyze: calibrate, analyse and report (issue #3).
#include <unistd.h>

#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "app/cli.h"
#include "core/analysis/quant_session.h"
#include "core/analysis/report.h"
#include "core/io/calibration_data.h"
#include "core/onnx/loader.h"
#include "core/util/atomic_file.h"

namespace qs::cli {

namespace {

std::atomic<bool>* g_cancel = nullptr;
extern "C" void onInterrupt(int) {
  if (g_cancel) g_cancel->store(true);
}

// Progress with an ETA on stderr, redrawn in place on a terminal, one line per stage otherwise.
class ProgressPrinter {
 public:
  ProgressPrinter() : m_start(std::chrono::steady_clock::now()), m_tty(isatty(2)) {}
  bool operator()(double f, const std::string& stage) {
    auto now = std::chrono::steady_clock::now();
    double elapsed = std::chrono::duration<double>(now - m_start).count();
    if (stage != m_stage) {
      if (m_tty && !m_stage.empty()) std::fputc('\n', stderr);
      m_stage = stage;
      m_stageStart = now;
      m_last = {};
    }
    if (now - m_last < std::chrono::milliseconds(250) && f < 1.0) return true;
    m_last = now;
    double stageElapsed = std::chrono::duration<double>(now - m_stageStart).count();
    double eta = f > 0.01 ? stageElapsed * (1.0 - f) / f : NAN;
    char line[256];
    if (std::isnan(eta)) std::snprintf(line, sizeof line, "%-28s %5.1f%%  %6.1fs", stage.c_str(), 100 * f, elapsed);
    else std::snprintf(line, sizeof line, "%-28s %5.1f%%  %6.1fs  ETA %5.1fs", stage.c_str(), 100 * f, elapsed, eta);
    std::fprintf(stderr, m_tty ? "\r%s" : "%s\n", line);
    return true;
  }
  ~ProgressPrinter() {
    if (m_tty && !m_stage.empty()) std::fputc('\n', stderr);
  }

 private:
  std::chrono::steady_clock::time_point m_start, m_stageStart, m_last;
  std::string m_stage;
  bool m_tty;
};

}  // namespace

int runAnalyze(const AnalyzeArgs& args) {
  auto model = loadModel(args.model);
  if (!model) return reportError(model.status());

  AnalysisOptions ao;
  ao.threads = args.threads;
  ao.calibration.percentile = args.percentile;
  if (!parseCalibMethod(args.calibrationMethod, ao.calibration.method)) {
    return reportError(invalidArgument("--calibration-method '" + args.calibrationMethod +
                                       "': expected max, entropy, percentile or mse"));
  }
  if (!parseQuantMode(args.quantizeMode, ao.calibration.mode)) {
    return reportError(invalidArgument("--quantize-mode '" + args.quantizeMode + "': expected int8 or fp8"));
  }
  ao.layerwise = !args.noLayerwise;
  ao.sensitivity = !args.noSensitivity || !std::isnan(args.targetSnr);

  CalibrationDataOptions co = args.data;
  auto calib = CalibrationData::open(**model, co);
  if (!calib) return reportError(calib.status());
  std::shared_ptr<const CalibrationData> calibData(std::move(calib).value());
  std::vector<std::string> warnings = calibData->warnings();
  for (const auto& w : calibData->warnings()) std::fprintf(stderr, "quantscope: warning: %s\n", w.c_str());
  if (calibData->isRandom()) {
    std::fprintf(stderr, "quantscope: WARNING: %s\n", kRandomCalibrationWarning);
  }
  std::shared_ptr<const CalibrationData> analysisData = calibData;
  if (!args.analysisData.empty()) {
    CalibrationDataOptions ado = args.data;
    ado.path = args.analysisData;
    auto ad = CalibrationData::open(**model, ado);
    if (!ad) return reportError(ad.status());
    analysisData = std::shared_ptr<const CalibrationData>(std::move(ad).value());
  }

  std::vector<std::string> configWarnings;
  auto session = QuantSession::create(*model, args.config, ao, &configWarnings);
  if (!session) return reportError(session.status());
  for (const auto& w : configWarnings) std::fprintf(stderr, "quantscope: warning: %s\n", w.c_str());
  warnings.insert(warnings.end(), configWarnings.begin(), configWarnings.end());

  g_cancel = &(*session)->cancelFlag();
  std::signal(SIGINT, onInterrupt);
  std::signal(SIGTERM, onInterrupt);
  ProgressPrinter progress;
  ProgressFn pf = [&](double f, const std::string& s) { return progress(f, s); };
  Status st = (*session)->calibrate(*calibData, pf);
  if (!st) return reportError(st);
  auto result = (*session)->analyze(analysisData, pf);
  if (!result) return reportError(result.status());
  ReportContext ctx;
  ctx.modelPath = args.model;
  ctx.warnings = warnings;
  ctx.settings = args.settingsEcho;
  if (!std::isnan(args.targetSnr)) {
    auto steps = (*session)->autoFallback(args.targetSnr, pf);
    if (!steps) return reportError(steps.status());
    ctx.fallback = *steps;
    ctx.targetSnrDb = args.targetSnr;
    result = (*session)->result();
    const Graph& g = (*model)->graph;
    std::fprintf(stderr, "auto fallback to %.1f dB: %zu node(s) excluded\n", args.targetSnr, steps->size());
    for (const auto& s : *steps) {
      double worst = INFINITY;
      for (double v : s.outputSnrDb) worst = std::min(worst, v);
      std::fprintf(stderr, "  exclude %-40s worst output SNR %.2f dB\n", g.nodes[(size_t)s.excluded].name.c_str(), worst);
    }
  }
  g_cancel = nullptr;
  const AnalysisResult& r = **result;
  for (const auto& o : r.outputs) {
    std::printf("output %-32s SNR %8.2f dB  cosine %.6f  MSE %.4g\n", o.name.c_str(), o.metrics.snrDb, o.metrics.cosine,
                o.metrics.mse);
  }
  if (!args.report.empty()) {
    if (Status w = writeFileAtomic(args.report, reportJson(**model, r, ctx)); !w) return reportError(w);
  }
  if (!args.html.empty()) {
    if (Status w = writeFileAtomic(args.html, reportHtml(**model, r, ctx)); !w) return reportError(w);
  }
  if (!args.csv.empty()) {
    if (Status w = writeFileAtomic(args.csv, layersCsv(**model, r)); !w) return reportError(w);
  }
  return kExitOk;
}

}  // namespace qs::cli
