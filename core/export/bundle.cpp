#include "core/export/bundle.h"


#include <filesystem>

#include "core/analysis/quant_state.h"
#include "core/exec/executor.h"
#include "core/export/exporter.h"
#include "core/quant/quant_config.h"
#include "core/util/atomic_file.h"

namespace qs {

namespace fs = std::filesystem;

namespace {

bool samePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

}  // namespace

ReportContext reportContext(const AnalysisRun& run) {
  ReportContext ctx;
  ctx.modelPath = run.request.modelPath;
  ctx.settings = runSettings(run);
  ctx.warnings = run.warnings;
  ctx.fallback = run.fallback;
  ctx.fallbackCurve = run.fallbackCurve;
  ctx.activationSplit = run.activationSplit;
  ctx.targetSnrDb = run.request.targetSnrDb;
  ctx.targetAgreement = run.request.targetAgreement;
  if (!run.remedies.empty()) ctx.remedies = run.remedies;
  if (!run.remedies.choice.empty()) ctx.remedyChoice = run.remedies.choice;
  return ctx;
}

Result<ExportBundle> buildExportBundle(const AnalysisRun& run, const ExportTarget& target) {
  const AnalysisRequest& rq = run.request;
  const auto result = run.result();
  if (!run.model || !result) return invalidArgument("nothing to export: calibrate first");
  if (rq.whatIf != WhatIf::None) {
    return invalidArgument(std::string("export: --what-if ") + whatIfName(rq.whatIf) + " is an analysis-only bound (" +
                           run.request.modelPath + "): no engine runs it, so nothing can be exported");
  }
  if (target.outputDir.empty() && target.outputPath.empty()) {
    return invalidArgument("export: give --output-dir DIR (all files) or --output_path FILE (the model alone)");
  }
  const std::string modelOut =
      !target.outputPath.empty() ? target.outputPath : (fs::path(target.outputDir) / "quantized.onnx").string();
  const fs::path modelDir = fs::path(modelOut).parent_path();
  ExportOptions eo;
  eo.dqOnly = rq.dqOnly.value_or(true);
  eo.externalData = rq.externalData;
  if (rq.externalDataThresholdBytes > 0) eo.externalDataThresholdBytes = rq.externalDataThresholdBytes;
  eo.replacedInitializers = run.remedies.changedInitializers;
  eo.insertedNodes = run.remedies.insertedNodes;
  // --bias-correction: the corrected constant of each node the export quantizes; a node left in
  // float (excluded, or toggled off after the run) keeps the model's value, as the analysis does.
  if (run.session) {
    const Graph& g = run.model->graph;
    for (const ConstantCorrection& c : run.session->state().corrections)
      if (isNodeQuantized(result->plan, c.owner))
        eo.constantValues[g.value(g.nodes[(size_t)c.reader].inputs[c.input]).name] = c.value;
  }
  eo.externalDataName = fs::path(modelOut).filename().string() + ".data";
  for (const std::string& out : {modelOut, (modelDir / eo.externalDataName).string()}) {
    if (samePath(out, rq.modelPath)) {
      return invalidArgument(out + ": is the input model; export never overwrites it (choose another output)");
    }
  }
  const AnalysisResult& r = *result;
  if (run.model->defaultOpset() < 13 && run.analysisData && run.analysisData->batchCount() > 0) {
    auto feeds = run.analysisData->batch(0);
    if (!feeds) return feeds.status();
    auto ranks = observeRanks(run.session->executor(), *feeds);
    if (!ranks) return ranks.status();
    eo.observedRanks = std::move(ranks).value();
  }
  // --scale-dither K: the model with realisation K's activation scales (the other files keep r's).
  AnalysisResult dithered;
  if (rq.scaleDither > 0) {
    dithered = r;
    ditherActivationScales(dithered.activations, rq.scaleDither, rq.realisationDither);
  }
  auto exported = buildQuantizedModel(rq.modelPath, *run.model, rq.scaleDither > 0 ? dithered : r, eo);
  if (!exported) return exported.status();

  ExportBundle b;
  b.opsetBefore = exported->opsetBefore;
  b.opsetAfter = exported->opsetAfter;
  b.activationPairs = exported->activationPairs;
  b.weightPoints = exported->weightPoints;
  b.files.push_back({modelOut, std::move(exported->modelBytes)});
  if (!exported->externalDataName.empty()) {
    b.files.push_back({(modelDir / exported->externalDataName).string(), std::move(exported->externalDataBytes)});
  }
  if (!target.outputDir.empty()) {
    QuantConfigContext qc;
    qc.modelPath = rq.modelPath;
    qc.modelFingerprint = run.modelFingerprint;
    qc.calibrationData = run.scaleSource;
    qc.config = run.exportedConfig;
    qc.dqOnly = eo.dqOnly;
    qc.externalData = eo.externalData;
    qc.trtVersion = run.trtVersion;
    qc.trtAlgorithm = run.trtAlgorithm;
    for (const DepthwiseEqualizedPair& p : run.remedies.depthwisePairs)
      qc.depthwiseEqualize.push_back({run.model->graph.nodes[(size_t)p.consumer].name, p.scale});
    for (const DepthwiseSmoothedInput& d : run.remedies.depthwiseSmoothed)
      qc.depthwiseSmooth.push_back({run.model->graph.nodes[(size_t)d.consumer].name, d.scale});
    for (const DepthwiseSmoothedInput& d : run.remedies.pointwiseSmoothed)
      qc.pointwiseSmooth.push_back({run.model->graph.nodes[(size_t)d.consumer].name, d.scale});
    qc.headWeightScale = run.headWeightRatios;
    for (const HeadBiasShift& h : run.headBiasShifts)
      qc.headBiasCorrection.push_back({run.model->graph.nodes[(size_t)h.where.head].name,
                                       run.model->graph.value(h.where.bias).name, h.shift});
    qc.remedyMode = run.remedies.choice.mode;
    qc.remediesKept = run.remedies.choice.kept;
    const fs::path dir(target.outputDir);
    b.files.push_back({(dir / "quant_cfg.json").string(), quantConfigJson(*run.model, r, qc)});
    if (writesCalibrationCache(r.plan.mode)) {
      b.files.push_back({(dir / "calibration.cache").string(),
                         calibrationCacheText(*run.model, r, calibrationCacheHeader(r.calibration.method, run.trtVersion, run.trtAlgorithm))});
    }
    b.files.push_back({(dir / "report.json").string(), reportJson(*run.model, r, reportContext(run))});
  }
  for (const BundleFile& f : b.files) {
    if (samePath(f.path, rq.modelPath)) return invalidArgument(f.path + ": is the input model; export never overwrites it");
  }
  return b;
}

Status writeBundle(const ExportBundle& bundle) {
  std::vector<fs::path> createdDirs;
  std::vector<std::string> temps;
  auto rollback = [&]() {
    std::error_code ec;
    for (const auto& t : temps) fs::remove(t, ec);
    for (auto it = createdDirs.rbegin(); it != createdDirs.rend(); ++it) fs::remove(*it, ec);
  };
  for (const BundleFile& f : bundle.files) {
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
    std::string tmp;
    Status st = writeTemporaryFile(f.path, f.bytes, tmp);
    if (!tmp.empty()) temps.push_back(tmp);
    if (!st) {
      rollback();
      return st;
    }
  }
  for (size_t i = 0; i < bundle.files.size(); ++i) {
    std::error_code ec;
    fs::rename(temps[i], bundle.files[i].path, ec);
    if (ec) {
      Status st = ioError(bundle.files[i].path + ": cannot move the finished file into place: " + ec.message());
      for (size_t j = 0; j < i; ++j) fs::remove(bundle.files[j].path, ec);
      temps.erase(temps.begin(), temps.begin() + (long)i);
      rollback();
      return st;
    }
  }
  return Status::ok();
}

}  // namespace qs
