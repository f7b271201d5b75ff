// quantscope analyze|export --quantize-mode int4: INT4 weight-only quantization
// (core/analysis/int4_analysis.h), its summary and report.json, and the export
// bundle (core/export/int4_export.h) written all or none.
#include <cmath>
#include <cstdio>

#include "app/cli.h"
#include "core/export/int4_export.h"
#include "core/onnx/loader.h"
#include "core/util/atomic_file.h"

namespace qs::cli {

Status finishInt4Options(const AnalysisRequest &a, const std::string &method,
                         int64_t blockSize, Int4Args &out) {
  out.on = true;
  out.options.method = Int4Method::AwqLite; // ModelOpt's default
  if (!method.empty())
    QS_RETURN_IF_ERROR(parseInt4Method(method, out.options.method));
  QS_RETURN_IF_ERROR(checkInt4BlockSize(blockSize));
  out.options.blockSize = blockSize;
  out.options.config = a.config;
  out.options.threads = a.threads;
  auto refuse = [](const std::string &flag) {
    return invalidArgument(flag + " does not apply to --quantize-mode int4");
  };
  if (!std::isnan(a.targetSnrDb))
    return refuse("--target-snr");
  if (!std::isnan(a.targetAgreement))
    return refuse("--target-agreement");
  if (!a.outputKinds.empty())
    return refuse("--output-kind");
  if (!a.loadConfig.empty())
    return refuse("--load-config");
  if (!a.calibrationCache.empty())
    return refuse("--calibration-cache-path");
  if (!a.analysisDataPath.empty())
    return refuse("--analysis-data");
  if (a.threads < 0)
    return invalidArgument("--threads " + std::to_string(a.threads) +
                           ": expected >= 0");
  return Status::ok();
}

namespace {

struct Int4Run {
  std::shared_ptr<const Model> model;
  Int4Result result;
  std::vector<std::string> warnings;
};

Result<Int4Run> runInt4(const AnalysisRequest &rq, const Int4Options &options,
                        bool progress) {
  RunCallbacks cb = terminalCallbacks(progress);
  auto model = loadModel(rq.modelPath);
  if (!model)
    return model.status();
  Int4Run run;
  run.model = std::move(model).value();
  auto data = CalibrationData::open(*run.model, rq.data);
  if (!data)
    return data.status();
  for (const std::string &w : (*data)->warnings()) {
    const bool loud = w == kRandomCalibrationWarning;
    const std::string text =
        loud ? "no --calibration-data: random inputs (token ids uniform over "
               "their embedding table), "
               "as ModelOpt does; the AWQ searches and the SNR figures are "
               "only as good as that"
             : w;
    cb.warning(text, loud);
    run.warnings.push_back(text);
  }
  auto r =
      runInt4Analysis(run.model, **data, options, cb.progress, cb.cancel.get());
  if (!r)
    return r.status();
  run.result = std::move(r).value();
  return run;
}

void printSummary(const Int4Result &r, const char *snrLabel) {
  std::printf(
      "int4 %s, block %lld: %zu weights, %.2f MB -> %.2f MB (%.3fx)\n",
      int4MethodName(r.method).c_str(), (long long)r.blockSize, r.layers.size(),
      (double)r.bytesBefore / 1e6, (double)r.bytesAfter / 1e6,
      r.bytesBefore ? (double)r.bytesAfter / (double)r.bytesBefore : 0.0);
  for (const Int4Layer &l : r.layers) {
    std::printf("  %-40s %-6s layer-wise SNR %7.2f dB  graph-wise %7.2f dB\n",
                l.nodeName.c_str(), l.opType.c_str(), l.layerwise.snrDb,
                l.graphwise.snrDb);
  }
  for (const std::string &s : r.skipped)
    std::printf("  left in float: %s\n", s.c_str());
  for (const Int4OutputResult &o : r.outputs) {
    std::printf("output %-32s %sSNR %8.2f dB  cosine %.6f", o.name.c_str(),
                snrLabel, o.metrics.snrDb, o.metrics.cosine);
    if (!std::isnan(o.top1Agreement))
      std::printf("  top-1 agreement %.4f", o.top1Agreement);
    std::printf("\n");
  }
}

} // namespace

int runAnalyzeInt4(const AnalyzeArgs &args, const Int4Options &options) {
  if (!args.html.empty() || !args.csv.empty()) {
    return reportError(invalidArgument("--html and --csv do not apply to "
                                       "--quantize-mode int4 (use --report)"));
  }
  auto run = runInt4(args.request, options, args.progress);
  if (!run)
    return reportError(run.status());
  printSummary(run->result, "");
  if (!args.report.empty()) {
    const std::string json = int4ReportJson(
        *run->model, run->result, args.request.data.path, run->warnings);
    if (Status w = writeFileAtomic(args.report, json); !w)
      return reportError(w);
  }
  return kExitOk;
}

int runExportInt4(const ExportArgs &args, const Int4Options &options) {
  if (args.target.outputDir.empty() && args.target.outputPath.empty()) {
    return reportError(
        invalidArgument("export: give --output-dir DIR (all files) or "
                        "--output_path FILE (the model alone)"));
  }
  auto run = runInt4(args.request, options, args.progress);
  if (!run)
    return reportError(run.status());
  Int4ExportOptions eo;
  eo.externalData = args.request.externalData;
  if (args.request.externalDataThresholdBytes > 0)
    eo.externalDataThresholdBytes = args.request.externalDataThresholdBytes;
  auto bundle = buildInt4Bundle(*run->model, run->result, args.target,
                                args.request.data.path, run->warnings, eo);
  if (!bundle)
    return reportError(bundle.status());
  printSummary(run->result, "predicted ");
  if (Status st = writeBundle(*bundle); !st)
    return reportError(st);
  std::fprintf(stderr, "wrote %s (opset %lld -> %lld, %zu INT4 weights)%s\n",
               bundle->files.front().path.c_str(),
               (long long)bundle->opsetBefore, (long long)bundle->opsetAfter,
               bundle->weightPoints,
               args.target.outputDir.empty() ? "" : ", report.json");
  return kExitOk;
}

} // namespace qs::cli
