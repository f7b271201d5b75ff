// What the PTQ remedies of a run did (cross-layer equalization, bias correction, SmoothQuant,
// weight clip search), and the
// analysis of the same model and data without them, for the report's before/after.
#pragma once

#include <cmath>
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

/// One candidate remedy that `--remedies auto` tried (core/export/remedy_choice.h): the worst output
/// SNR in dB of the INT8 simulation without it (the remedies kept before it) and with it, on the
/// samples the choice was made on and on the samples held out of the choice.
struct RemedyTrial {
  std::string remedy;  // "depthwise_smooth", "pointwise_smooth"
  int items = 0;       // what it changed in the trial (inputs smoothed); 0: not applicable, nothing measured
  double beforeDb = NAN, afterDb = NAN;                // the choice samples
  double heldOutBeforeDb = NAN, heldOutAfterDb = NAN;  // the held-out samples (NaN: none, one batch only)
  bool kept = false;
  std::string reason;  // why it was kept or not, one line
};

/// What `--remedies auto` measured and chose, or what a loaded quant_cfg.json says was chosen.
struct RemedyChoice {
  std::string mode;                  // "auto"; empty: no choice was made (--remedies none)
  bool fromConfig = false;           // read from --load-config's file, not measured in this run
  int64_t choiceSamples = 0, heldOutSamples = 0;
  double marginDb = 0;               // the gain on the choice samples a remedy needs
  std::vector<RemedyTrial> trials;   // in the order tried
  std::vector<std::string> kept;     // the remedies kept, in the order applied
  std::string note;                  // why nothing was tried, when so
  double seconds = 0, cpuSeconds = 0;  // wall and process CPU time of the trials
  bool empty() const { return mode.empty(); }
};

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
  RemedyChoice choice;                            // --remedies auto: what was tried and kept
  bool empty() const { return applied.empty(); }
};

}  // namespace qs
