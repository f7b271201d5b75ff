// quantscope export: one run of the pipeline, then the export bundle written all or none
// (core/export/bundle.h: the same builder and writer as the workbench's Export).
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "app/cli.h"
#include "core/export/remedy_report.h"

namespace qs::cli {

int runExport(const ExportArgs& args) {
  if (args.target.outputDir.empty() && args.target.outputPath.empty()) {
    return reportError(invalidArgument("export: give --output-dir DIR (all files) or --output_path FILE (the model alone)"));
  }
  if (args.request.whatIf != WhatIf::None) {  // before any work: buildExportBundle would refuse it anyway
    return reportError(invalidArgument(std::string("export: --what-if ") + whatIfName(args.request.whatIf) +
                                       " is an analysis-only bound (" + args.request.modelPath +
                                       "): no engine runs it; use quantscope analyze"));
  }
  if (args.scaleDitherFiles > 0 && args.target.outputDir.empty())  // before any work
    return reportError(invalidArgument("export: --scale-dither-files needs --output-dir (" + args.request.modelPath + ")"));
  RunCallbacks cb = terminalCallbacks(args.progress);
  auto run = prepareRun(args.request, cb);
  if (!run) return reportError(run.status());
  if (Status st = executeRun(*run, cb); !st) return reportError(st);
  if (!run->remedies.choice.empty()) std::fputs(remedyChoiceText(run->remedies.choice).c_str(), stderr);
  if (!std::isnan(args.request.targetSnrDb) || !std::isnan(args.request.targetAgreement)) {
    std::fprintf(stderr, "auto fallback to %s: %zu node(s) excluded\n", fallbackTargetText(args.request).c_str(),
                 run->fallback.size());
  }
  printRealisationProbe(*run->result());
  auto bundle = buildExportBundle(*run, args.target);
  if (!bundle) return reportError(bundle.status());
  for (const auto& o : run->result()->outputs) {
    std::printf("output %-32s %s  cosine %.6f\n", o.name.c_str(), predictedSnrText(o).c_str(), o.metrics.cosine);
    if (const std::string a = describeAgreement(o.agreement); !a.empty())
      std::printf("       %-32s agreement (%s): %s\n", "", outputKindName(o.agreement.kind), a.c_str());
    printRealisations(o);
  }
  if (Status st = writeBundle(*bundle); !st) return reportError(st);
  if (args.scaleDitherFiles > 0) {
    // Our realisations 0..N at the exported point (the fallback's choice is made before, on its own terms).
    auto ours = run->session->realisationSnrDb(args.scaleDitherFiles + 1, args.request.realisationDither, cb.progress);
    if (!ours) return reportError(ours.status());
    char dither[40];
    std::snprintf(dither, sizeof dither, "%.17g", args.request.realisationDither);
    std::string json = std::string("{\"realisation_dither\": ") + dither + ", \"outputs\": [";
    for (size_t o = 0; o < ours->size(); ++o) {
      json += std::string(o ? ", " : "") + "{\"name\": \"" + run->result()->outputs[o].name + "\", \"snr_db\": [";
      for (size_t k = 0; k < (*ours)[o].size(); ++k) {
        char v[40];
        std::snprintf(v, sizeof v, "%s%.17g", k ? ", " : "", (*ours)[o][k]);
        json += v;
      }
      json += "]}";
    }
    json += "]}\n";
    ExportBundle extra;
    extra.files.push_back({(std::filesystem::path(args.target.outputDir) / "dither_realisations.json").string(), json});
    if (Status st = writeBundle(extra); !st) return reportError(st);
    const int given = run->request.scaleDither;
    for (int k = 1; k <= args.scaleDitherFiles; ++k) {
      run->request.scaleDither = k;
      ExportTarget t;
      t.outputPath = (std::filesystem::path(args.target.outputDir) / ("quantized.dither" + std::to_string(k) + ".onnx")).string();
      auto b = buildExportBundle(*run, t);
      if (!b) return reportError(b.status());
      if (Status st = writeBundle(*b); !st) return reportError(st);
    }
    run->request.scaleDither = given;
    std::fprintf(stderr, "wrote quantized.dither1..%d.onnx and dither_realisations.json\n", args.scaleDitherFiles);
  }
  const QuantMode mode = run->result()->plan.mode;
  const bool cache = writesCalibrationCache(mode);
  std::fprintf(stderr, "wrote %s (%s, opset %lld -> %lld, %zu activation Q/DQ pairs, %zu weights)%s\n",
               bundle->files.front().path.c_str(), quantModeName(mode).c_str(), (long long)bundle->opsetBefore,
               (long long)bundle->opsetAfter, bundle->activationPairs, bundle->weightPoints,
               args.target.outputDir.empty() ? ""
               : cache                       ? ", quant_cfg.json, calibration.cache, report.json"
                                             : ", quant_cfg.json, report.json");
  if (!args.target.outputDir.empty() && !cache) {
    std::fprintf(stderr, "note: no calibration.cache for %s: TensorRT's calibration cache holds INT8 scales only; "
                         "quantized.onnx carries the %s Q/DQ for TensorRT's explicit quantization\n",
                 quantModeName(mode).c_str(), quantModeName(mode).c_str());
  }
  return kExitOk;
}

}  // namespace qs::cli
