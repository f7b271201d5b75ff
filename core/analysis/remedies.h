// What the PTQ remedies of a run did (cross-layer equalization, bias correction, SmoothQuant,
// weight clip search), and the
// analysis of the same model and data without them, for the report's before/after.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/analysis/bias_correction.h"
#include "core/analysis/depthwise_equalization.h"
#include "core/analysis/depthwise_smoothing.h"
#include "core/analysis/pointwise_smoothing.h"
#include "core/analysis/results.h"
#include "core/analysis/smoothquant.h"
#include "core/analysis/weight_clip.h"
#include "core/quant/equalization.h"

namespace qs {

struct RemedySummary {
  std::vector<std::string> applied;               // "equalize", "bias_correction", in the order applied
  std::vector<EqualizedPair> pairs;               // cross-layer equalization
  std::vector<BiasShift> biasShifts;              // bias correction
  std::vector<std::string> biasSkipped;           // quantized Conv/Gemm/MatMul without a correctable bias
  std::vector<SmoothedGroup> smoothed;            // SmoothQuant
  std::vector<std::string> smoothSkipped;         // "node: reason"
  std::vector<WeightClipNode> weightClips;        // weight clip search
  std::vector<DepthwiseEqualizedPair> depthwisePairs;  // depthwise input equalization (not in `applied`: on by default)
  std::vector<DepthwiseSmoothedInput> depthwiseSmoothed;  // depthwise input smoothing (not in `applied`: it keeps the float output)
  std::vector<DepthwiseSmoothedInput> pointwiseSmoothed;  // group-1 Conv input smoothing (pointwise set; keeps the float output)
  std::vector<std::string> insertedNodes;         // nodes a remedy added (the smoothings' Muls): quantized.onnx writes them
  std::vector<std::string> changedInitializers;   // sorted: what quantized.onnx takes from the remedied model
  std::shared_ptr<const AnalysisResult> before;   // the analysis without remedies (no sensitivity)
  bool empty() const { return applied.empty(); }
};

}  // namespace qs
