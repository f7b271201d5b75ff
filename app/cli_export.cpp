// quantscope export: the analysis of `analyze`, then quantized.onnx, quant_cfg.json,
// calibration.cache and report.json, written all or nothing (issue #4).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "app/cli.h"
#include "core/analysis/quant_session.h"
#include "core/analysis/report.h"
#include "core/io/calibration_data.h"
#include "core/onnx/exporter.h"
#include "core/onnx/loader.h"
#include "core/quant/quant_files.h"

namespace qs::cli {

namespace {

namespace fs = std::filesystem;

std::atomic<bool>* g_exportCancel = nullptr;
extern "C" void onExportInterrupt(int) {
  if (g_exportCancel) g_exportCancel->store(true);
}

void warn(std::vector<std::string>& all, const std::string& w) {
  std::fprintf(stderr, "quantscope: warning: %s\n", w.c_str());
  all.push_back(w);
}

// One line per stage and per tenth of a stage on stderr.
ProgressFn stageProgress() {
  auto last = std::make_shared<std::pair<std::string, int>>("", -1);
  return [last](double f, const std::string& stage) {
    int tenth = (int)(f * 10);
    if (stage != last->first || tenth != last->second) {
      std::fprintf(stderr, "%-28s %5.1f%%\n", stage.c_str(), 100 * f);
      *last = {stage, tenth};
    }
    return true;
  };
}

struct OutputFile {
  std::string path;
  const std::string* contents;
};

// Writes every file or none: each to a temporary file beside it (flushed and synced), then all
// renamed. On any failure the temporary files, and the folder when this call created it, are
// removed, so a failed export leaves nothing behind.
Status writeAllOrNothing(const std::vector<OutputFile>& files) {
  std::vector<fs::path> createdDirs;
  std::vector<std::string> temps;
  auto rollback = [&]() {
    std::error_code ec;
    for (const auto& t : temps) fs::remove(t, ec);
    for (auto it = createdDirs.rbegin(); it != createdDirs.rend(); ++it) fs::remove(*it, ec);
  };
  for (const OutputFile& f : files) {
    fs::path dir = fs::path(f.path).parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      // Remember each level this call creates, outermost first.
      std::vector<fs::path> missing;
      for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) missing.push_back(p);
      if (!fs::create_directories(dir, ec) && !fs::is_directory(dir)) {
        rollback();
        return ioError(dir.string() + ": cannot create the output folder: " + ec.message());
      }
      createdDirs.insert(createdDirs.end(), missing.rbegin(), missing.rend());
    }
    std::string tmpl = f.path + ".tmp-XXXXXX";
    int fd = mkstemp(tmpl.data());
    if (fd < 0) {
      Status st = ioError(f.path + ": cannot write: " + std::strerror(errno));
      rollback();
      return st;
    }
    temps.push_back(tmpl);
    const char* p = f.contents->data();
    size_t left = f.contents->size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      p += n;
      left -= (size_t)n;
    }
    int err = left ? errno : 0;
    if (!err && fsync(fd) != 0) err = errno;
    if (::close(fd) != 0 && !err) err = errno;
    if (!err) fchmodat(AT_FDCWD, tmpl.c_str(), 0644, 0);  // mkstemp makes 0600
    if (err || left) {
      Status st = ioError(f.path + ": write failed: " + std::strerror(err ? err : EIO));
      rollback();
      return st;
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    fs::rename(temps[i], files[i].path, ec);
    if (ec) {
      Status st = ioError(files[i].path + ": cannot move the finished file into place: " + ec.message());
      for (size_t j = 0; j < i; ++j) fs::remove(files[j].path, ec);
      temps.erase(temps.begin(), temps.begin() + (long)i);
      rollback();
      return st;
    }
  }
  return Status::ok();
}

bool samePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

}  // namespace

int runExport(const ExportArgs& args) {
  const AnalyzeArgs& an = args.analysis;
  if (args.outputDir.empty() && args.outputPath.empty()) {
    return reportError(invalidArgument("export: give --output-dir DIR (all files) or --output_path FILE (the model alone)"));
  }
  if (!args.loadConfig.empty() && !args.calibrationCache.empty()) {
    return reportError(invalidArgument("export: --load-config and --calibration-cache-path both give the scales; use one"));
  }
  const std::string modelOut = !args.outputPath.empty() ? args.outputPath : (fs::path(args.outputDir) / "quantized.onnx").string();
  const std::string dataName = fs::path(modelOut).filename().string() + ".data";
  for (const std::string& out : {modelOut, (fs::path(modelOut).parent_path() / dataName).string()}) {
    if (samePath(out, an.model)) {
      return reportError(invalidArgument(out + ": is the input model; export never overwrites it (choose another output)"));
    }
  }

  // Scales and states from a saved config, if any.
  SavedQuantConfig saved;
  const bool fromConfig = !args.loadConfig.empty();
  if (fromConfig) {
    auto s = readQuantConfig(args.loadConfig);
    if (!s) return reportError(s.status());
    saved = std::move(s).value();
  }
  std::string mode = fromConfig ? quantModeName(saved.mode) : an.quantizeMode;
  if (mode == "fp8") {
    return reportError(unsupported(an.model + ": fp8 export needs FLOAT8E4M3FN and opset 19, which the ONNX library of "
                                   "this build (1.12) does not know; use 'quantscope analyze --quantize-mode fp8' to "
                                   "study fp8, or export int8"));
  }

  auto model = loadModel(an.model);
  if (!model) return reportError(model.status());
  auto fingerprint = fileFingerprint(an.model);
  if (!fingerprint) return reportError(fingerprint.status());
  std::vector<std::string> warnings;
  if (fromConfig && !saved.modelFingerprint.empty() && saved.modelFingerprint != *fingerprint) {
    warn(warnings, args.loadConfig + ": made for a model file with another fingerprint (" + saved.modelFingerprint +
                       ", this one " + *fingerprint + "); its names and weights match, so it is used");
  }

  AnalysisOptions ao;
  ao.threads = an.threads;
  ao.layerwise = !an.noLayerwise;
  ao.sensitivity = !an.noSensitivity || !std::isnan(an.targetSnr);
  if (fromConfig) {
    ao.calibration = saved.calibration;
  } else {
    ao.calibration.percentile = an.percentile;
    if (!parseCalibMethod(an.calibrationMethod, ao.calibration.method)) {
      return reportError(invalidArgument("--calibration-method '" + an.calibrationMethod +
                                         "': expected max, entropy, percentile or mse"));
    }
    if (!parseQuantMode(an.quantizeMode, ao.calibration.mode)) {
      return reportError(invalidArgument("--quantize-mode '" + an.quantizeMode + "': expected int8 or fp8"));
    }
  }

  CalibrationDataOptions co = an.data;
  auto calib = CalibrationData::open(**model, co);
  if (!calib) return reportError(calib.status());
  std::shared_ptr<const CalibrationData> calibData(std::move(calib).value());
  for (const auto& w : calibData->warnings()) warn(warnings, w);
  const bool scalesGiven = fromConfig || !args.calibrationCache.empty();
  if (calibData->isRandom()) {
    if (scalesGiven) {
      warn(warnings, "no --calibration-data: report.json's predicted SNR is computed on random inputs (the scales come from " +
                         (fromConfig ? args.loadConfig : args.calibrationCache) + ")");
    } else {
      std::fprintf(stderr, "quantscope: WARNING: %s\n", kRandomCalibrationWarning);
      warnings.push_back(kRandomCalibrationWarning);
    }
  }
  std::shared_ptr<const CalibrationData> analysisData = calibData;
  if (!an.analysisData.empty()) {
    CalibrationDataOptions ado = an.data;
    ado.path = an.analysisData;
    auto ad = CalibrationData::open(**model, ado);
    if (!ad) return reportError(ad.status());
    analysisData = std::shared_ptr<const CalibrationData>(std::move(ad).value());
  }

  QuantConfig config = an.config;
  const bool extraGiven = !an.config.nodesToExclude.empty() || !an.config.nodesToQuantize.empty() ||
                          !an.config.opTypesToExclude.empty() || !an.config.opTypesToQuantize.empty();
  if (fromConfig) {
    auto c = configForSavedStates(saved, **model, an.config, args.loadConfig);
    if (!c) return reportError(c.status());
    config = std::move(c).value();
  }
  std::vector<std::string> configWarnings;
  auto session = QuantSession::create(*model, config, ao, &configWarnings);
  if (!session) return reportError(session.status());
  for (const auto& w : configWarnings) warn(warnings, w);
  if (fromConfig) {
    Status st = checkSavedStates(saved, **model, (*session)->plan(), extraGiven, args.loadConfig);
    if (!st) return reportError(st);
  }

  g_exportCancel = &(*session)->cancelFlag();
  std::signal(SIGINT, onExportInterrupt);
  std::signal(SIGTERM, onExportInterrupt);
  ProgressFn pf = stageProgress();
  std::string dataDescription = calibData->description();
  if (fromConfig) {
    Status st = (*session)->setActivationAmax(saved.actAmax);
    if (!st) return reportError(st.withContext(args.loadConfig));
    dataDescription = saved.calibrationData.empty() ? args.loadConfig : saved.calibrationData;
  } else if (!args.calibrationCache.empty()) {
    auto cache = readCalibrationCache(args.calibrationCache);
    if (!cache) return reportError(cache.status());
    std::map<std::string, float> amax;
    std::vector<std::string> unknown;
    for (const auto& [name, scale] : cache->scales) {
      if ((*model)->graph.findValue(name) == kNoValue) unknown.push_back(name);
      else amax[name] = amaxForScale(scale, QuantMode::Int8);
    }
    if (amax.empty() && !cache->scales.empty()) {
      return reportError(invalidArgument(args.calibrationCache + ": none of its " + std::to_string(cache->scales.size()) +
                                         " tensors (first '" + cache->scales.begin()->first + "') is in " + an.model +
                                         ": the cache was made for another model"));
    }
    if (!unknown.empty()) {
      warn(warnings, args.calibrationCache + ": " + std::to_string(unknown.size()) + " tensor(s) not in the model are ignored (first '" +
                         unknown.front() + "')");
    }
    Status st = (*session)->setActivationAmax(amax);
    if (!st) return reportError(st.withContext(args.calibrationCache));
    dataDescription = args.calibrationCache;
  } else {
    Status st = (*session)->calibrate(*calibData, pf);
    if (!st) return reportError(st);
  }

  auto result = (*session)->analyze(analysisData, pf);
  if (!result) return reportError(result.status());
  ReportContext ctx;
  ctx.modelPath = an.model;
  ctx.settings = an.settingsEcho;
  if (!std::isnan(an.targetSnr)) {
    auto steps = (*session)->autoFallback(an.targetSnr, pf);
    if (!steps) return reportError(steps.status());
    ctx.fallback = *steps;
    ctx.targetSnrDb = an.targetSnr;
    result = (*session)->result();
    std::fprintf(stderr, "auto fallback to %.1f dB: %zu node(s) excluded\n", an.targetSnr, steps->size());
  }
  g_exportCancel = nullptr;
  const AnalysisResult& r = **result;
  const Graph& g = (*model)->graph;

  // Quantized nodes whose activation tensor got no scale (a cache or config without it) keep that
  // input in float, in the simulation and in the export alike: say so.
  if (scalesGiven) {
    std::set<std::string> missing;
    for (const ActivationPoint& a : r.plan.activations)
      if (isNodeQuantized(r.plan, a.node) && !r.activations.count(a.value)) missing.insert(g.value(a.value).name);
    if (!missing.empty()) {
      warn(warnings, std::to_string(missing.size()) + " quantized tensor(s) have no scale in " +
                         (fromConfig ? args.loadConfig : args.calibrationCache) + " and stay float (first '" +
                         *missing.begin() + "')");
    }
  }
  ctx.warnings = warnings;

  ExportOptions eo;
  eo.dqOnly = args.dqOnlyGiven || !fromConfig ? args.dqOnly : saved.dqOnly;
  eo.externalData = args.externalData || (fromConfig && saved.externalData);
  eo.externalDataName = dataName;
  if ((*model)->defaultOpset() < 13 && analysisData->batchCount() > 0) {
    auto feeds = analysisData->batch(0);
    if (!feeds) return reportError(feeds.status());
    auto ranks = observeRanks((*session)->executor(), *feeds);
    if (!ranks) return reportError(ranks.status());
    eo.observedRanks = std::move(ranks).value();
  }
  auto exported = buildQuantizedModel(an.model, **model, r, eo);
  if (!exported) return reportError(exported.status());

  for (const auto& o : r.outputs) {
    std::printf("output %-32s predicted SNR %8.2f dB  cosine %.6f\n", o.name.c_str(), o.metrics.snrDb, o.metrics.cosine);
  }
  std::vector<OutputFile> files{{modelOut, &exported->modelBytes}};
  if (!exported->externalDataName.empty()) {
    files.push_back({(fs::path(modelOut).parent_path() / exported->externalDataName).string(), &exported->externalDataBytes});
  }
  std::string cfgText, cacheText, reportText;
  if (!args.outputDir.empty()) {
    QuantConfigContext qc;
    qc.modelPath = an.model;
    qc.modelFingerprint = *fingerprint;
    qc.calibrationData = dataDescription;
    qc.config = fromConfig ? saved.config : an.config;
    if (fromConfig) {  // command-line additions are part of what this export did
      auto add = [](std::vector<std::string>& to, const std::vector<std::string>& from) {
        to.insert(to.end(), from.begin(), from.end());
      };
      add(qc.config.nodesToExclude, an.config.nodesToExclude);
      add(qc.config.nodesToQuantize, an.config.nodesToQuantize);
      add(qc.config.opTypesToExclude, an.config.opTypesToExclude);
      add(qc.config.opTypesToQuantize, an.config.opTypesToQuantize);
    }
    qc.dqOnly = eo.dqOnly;
    qc.externalData = eo.externalData;
    cfgText = quantConfigJson(**model, r, qc);
    cacheText = calibrationCacheText(**model, r);
    reportText = reportJson(**model, r, ctx);
    fs::path dir(args.outputDir);
    files.push_back({(dir / "quant_cfg.json").string(), &cfgText});
    files.push_back({(dir / "calibration.cache").string(), &cacheText});
    files.push_back({(dir / "report.json").string(), &reportText});
  }
  for (const auto& f : files) {
    if (samePath(f.path, an.model)) {
      return reportError(invalidArgument(f.path + ": is the input model; export never overwrites it"));
    }
  }
  if (Status st = writeAllOrNothing(files); !st) return reportError(st);
  std::fprintf(stderr, "wrote %s (opset %lld -> %lld, %zu activation Q/DQ pairs, %zu weights)%s\n", modelOut.c_str(),
               (long long)exported->opsetBefore, (long long)exported->opsetAfter, exported->activationPairs,
               exported->weightPoints, args.outputDir.empty() ? "" : ", quant_cfg.json, calibration.cache, report.json");
  return kExitOk;
}

}  // namespace qs::cli
