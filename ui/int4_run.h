// The workbench's INT4 weight-only mode (--quantize-mode int4): the settings the calibration
// dialog and the project file carry, and the adapter that shows an Int4Result
// (core/analysis/int4_analysis.h) in the views made for an AnalysisResult: the quantized MatMul and
// Gemm nodes with their layer-wise and graph-wise output SNR and their weight SNR (the weight the
// exported model computes against the float one), the outputs' SNR.
#pragma once

#include <memory>

#include "core/analysis/int4_analysis.h"
#include "core/analysis/results.h"
#include "ui/property_tree_model.h"

namespace qs::ui {

struct Int4Settings {
  bool on = false;                          // the dialog's mode is int4
  Int4Method method = Int4Method::AwqLite;  // ModelOpt's default, as the CLI's
  int64_t blockSize = 128;
};

/// The views' result for an INT4 analysis of `model`: one NodeResult per node, the int4 layers
/// quantized (weightSnrDb: the layer's output with only its weight quantized, float input, as the
/// column means for int8; for weight-only int4 the layer-wise SNR),
/// the others left in float with the reason.
std::shared_ptr<const AnalysisResult> int4AsAnalysisResult(const Model& model, const Int4Result& r);

/// The summary lines of an INT4 run: method, block size, weight bytes before and after.
std::vector<PropertyEntry> int4Summary(const Int4Result& r);

}  // namespace qs::ui
