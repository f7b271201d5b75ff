// The files of an export, built in memory and written all or none: quantized.onnx (and its
// external data), quant_cfg.json, calibration.cache and report.json. `quantscope export` and the
// workbench's Export both call these two functions, so for the same run they write the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/export/pipeline.h"
#include "core/export/report.h"

namespace qs {

/// Where an export goes.
struct ExportTarget {
  std::string outputDir;   // every file: quantized.onnx, quant_cfg.json, calibration.cache, report.json
  std::string outputPath;  // or the model alone at this path (ModelOpt's --output_path)
};

struct BundleFile {
  std::string path;
  std::string bytes;
};

struct ExportBundle {
  std::vector<BundleFile> files;  // the model first
  int64_t opsetBefore = 0, opsetAfter = 0;
  size_t activationPairs = 0, weightPoints = 0;
};

/// The report context of a run: its settings, warnings and fallback steps.
ReportContext reportContext(const AnalysisRun& run);

/// Builds every file of `target` from the run's current result (toggles included); an fp8 run
/// has no calibration.cache (writesCalibrationCache). Fails before
/// anything is written: no result yet, an output that would overwrite the
/// input model, or what buildQuantizedModel refuses.
Result<ExportBundle> buildExportBundle(const AnalysisRun& run, const ExportTarget& target);

/// Writes every file or none: each to a temporary file beside it (flushed and synced), then all
/// renamed into place. On any failure the temporary files, the files already renamed and the
/// folders this call created are removed.
Status writeBundle(const ExportBundle& bundle);

}  // namespace qs
