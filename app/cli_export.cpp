// quantscope export: one run of the pipeline, then the export bundle written all or none
// (core/export/bundle.h: the same builder and writer as the workbench's Export).
#include <cmath>
#include <cstdio>

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
