// What an analysis produces, as plain data: per-node and per-output error figures, the
// quantization parameters of every point, the plan they apply to and the steps of an automatic
// fallback. The export layer (report, quant_cfg.json, calibration.cache, quantized.onnx) and the
// GUI's views read these and nothing else of the analysis, so they do not compile the executor.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/analysis/agreement.h"
#include "core/numeric/metrics.h"
#include "core/quant/calibrator.h"
#include "core/quant/quant_types.h"

namespace qs {

/// Quantization parameters of one activation tensor.
struct ActivationQuant {
  ValueId value = kNoValue;
  float amax = 0;               // of the chosen method (group maximum for shared Concat scales)
  float scale = 0;              // amax / 127 (int8) or amax / 448 (fp8)
  std::array<float, 4> methodAmax{};  // max, entropy, percentile, mse (own tensor, not the group)
  int scaleGroup = -1;
};

/// What the `auto` calibration (core/analysis/clip_search.h) chose for one activation tensor, and
/// how that compared with the best histogram method on the same measure.
struct ClipChoice {
  std::string winner;            // the candidate's name: "mse", "percentile_99.99", "clip_0.354", ...
  float amax = 0;                // the tensor's own choice (its Concat group may take a larger one)
  float absMax = 0;              // the tensor's max |x| (amax / absMax is the clip fraction)
  double consumerSnrDb = 0;      // winner: consumers' output SNR, layer-wise (pooled: 1 / sum(noise/signal))
  std::string bestMethod;        // best of max, entropy, percentile (99.9, 99.99, 99.999), mse
  double bestMethodSnrDb = 0;    // its consumer SNR, the same measure
  int candidates = 0;            // how many distinct candidates were scored
  /// The whole-graph check: "layerwise" when the per-tensor choices won on the worst output SNR,
  /// else the single method applied to every tensor instead ("mse", "percentile_99.99", ...).
  std::string selection;
  std::string layerwiseWinner;       // the per-tensor (layer-wise) winner, whatever the selection
  double selectionOutputSnrDb = 0;   // worst output SNR of the selection on the search's samples
  double layerwiseOutputSnrDb = 0;   // the same of the per-tensor choices
  /// --realisations auto, when the probe found the model spread (RealisationProbe): the tables were
  /// scored on the mean of selectionRealisations realisations of the rounding noise (realisation 0
  /// the plain figure above's measure), selectionOutputSnrDb is that mean, and selectionOnFirst the
  /// table realisation 0 alone would have chosen (its figure selectionOnFirstSnrDb). 1: as before.
  int selectionRealisations = 1;
  std::string selectionOnFirst;
  double selectionOnFirstSnrDb = NAN;
  double selectionFirstRealisationDb = NAN;  // the chosen table's realisation 0 (the plain figure)
  /// The refinement on the outputs (core/analysis/clip_refine.h), when it ran (refinePasses > 0):
  /// refinedFrom names the choice it replaced on this tensor (empty: kept), the rest is the run's.
  bool refineRan = false;
  std::string refinedFrom;
  float refinedFromAmax = 0;
  int refinePasses = 0, refineConeRuns = 0;
  int64_t refineCheckSamples = 0, refineHeldOutSamples = 0;
  double refineCheckBeforeDb = 0, refineCheckAfterDb = 0;          // worst output SNR, check samples
  double refineHeldOutBeforeDb = NAN, refineHeldOutAfterDb = NAN;  // the same, held-out samples
  double refineSeconds = 0;
  int refineTargetsTried = 0;    // tensors with at least one candidate run (first pass)
  double refineWork = 0;         // cone work run, in whole-graph runs over the check samples
  double refineWorkCap = 0;      // the cap it ran under (0: none)
  int refineCappedRuns = 0;      // candidates skipped for the cap
  int refineRealisations = 1;    // realisations each candidate was scored on
  int refineRejectedByMargin = 0;  // candidates with a positive mean gain within the margin
  int refineMeasureRealisations = 0;  // realisations of the mean figures below (0: not measured)
  double refineCheckMeanBeforeDb = NAN, refineCheckMeanAfterDb = NAN;
  double refineHeldOutMeanBeforeDb = NAN, refineHeldOutMeanAfterDb = NAN;
};

/// Per-channel quantization of one weight.
struct WeightQuant {
  NodeId node = -1;
  size_t inputIndex = 0;
  ValueId value = kNoValue;
  int axis = 0;
  std::vector<float> amax, scale;
};

struct NodeResult {
  bool hasGraphwise = false;     // the node has a float output
  ErrorMetrics graphwise;        // its output with every enabled point on vs float
  bool hasLayerwise = false;     // the node is quantizable
  ErrorMetrics layerwise;        // the node alone, its points on, float inputs
  double weightSnrDb = NAN;      // weights quantized only (NaN: no weight)
  double activationSnrDb = NAN;  // activations quantized only (NaN: no activation point)
  double sensitivitySnrDb = NAN; // graph outputs with only this node quantized (all outputs pooled)
  bool sensitivityExact = false; // sensitivitySnrDb from the cone re-run (else the estimate)
  double sensitivityEstimateDb = NAN;  // the first-order estimate (fast_sensitivity.h)
};

struct OutputResult {
  ValueId value = kNoValue;
  std::string name;
  ErrorMetrics metrics;
  AgreementMetrics agreement;  // top-1/top-5 or decoded-sequence agreement (agreement.h); Dense: none
  /// AnalysisOptions::realisations > 1: the output SNR of each realisation of the rounding noise
  /// (realisation 0: the data as given), in dB; `metrics` is over all of them. Empty otherwise.
  std::vector<double> realisationSnrDb;
  /// Mean and sample standard deviation of realisationSnrDb (NaN when it has fewer than 2).
  double realisationMeanDb() const;
  double realisationSdDb() const;
};

/// --realisations auto (docs/quality.md, "Realisations by default: the probe"): a few realisations
/// of the rounding noise at the all-INT8 start; when the worst output's SNR spreads across them by
/// more than thresholdDb (sd), the analysis and the fallback use `chosen` realisations, else 1.
struct RealisationProbe {
  bool ran = false;
  std::string where;             // "table check" (method auto, calibration data) or "analysis"
  int64_t samples = 0;           // the samples it ran on
  std::vector<double> worstSnrDb;  // the worst output's SNR per realisation (0: the plain figure)
  double sdDb = NAN;             // their sample sd
  double thresholdDb = 0;
  int chosen = 1;                // the realisations used after it
};

struct AnalysisResult {
  QuantPlan plan;                     // placement with the user's configuration applied
  std::vector<NodeResult> nodes;      // indexed by NodeId
  std::vector<OutputResult> outputs;  // graph outputs, declaration order
  std::map<ValueId, ActivationQuant> activations;  // every calibrated activation tensor
  /// amax of every float activation tensor (graph inputs and node outputs; a quantization point's is
  /// its scale's), calibrated with the same method or given by a loaded file; filled only with
  /// AnalysisOptions::allTensorRanges (the ranges TensorRT's implicit INT8 needs, quant_files.h).
  std::map<ValueId, float> tensorRanges;
  std::vector<WeightQuant> weights;   // every weight point (enabled or not)
  int64_t samples = 0;
  CalibrationSettings calibration;
  /// Peak resident set size of the process when the analysis finished (bytes; 0: unknown).
  uint64_t peakRssBytes = 0;
  /// The analysis kept no whole float table to stay within AnalysisOptions::memoryBudgetBytes.
  bool streamed = false;
  /// AnalysisOptions::memoryBudgetBytes of the analysis (0: unbounded).
  uint64_t memoryBudgetBytes = 0;
  /// Method `auto` only: per activation tensor, the winning clip candidate (empty otherwise).
  std::map<ValueId, ClipChoice> clipChoices;
  /// --realisations auto: the probe (ran false otherwise).
  RealisationProbe realisationProbe;

  /// Lowest SNR over the graph outputs (the figure targets are checked against).
  double worstOutputSnrDb() const;
  /// Lowest AgreementMetrics::primary() over the outputs that have one; NaN when none has.
  double worstAgreement() const;
};

/// One step of the automatic fallback.
struct FallbackStep {
  NodeId excluded = -1;
  std::vector<double> outputSnrDb;  // per graph output after this exclusion
  std::vector<double> outputAgreement;  // per graph output: AgreementMetrics::primary() (NaN: dense)

  /// Lowest SNR over the graph outputs after this exclusion.
  double worstOutputSnrDb() const;
  /// Lowest agreement over the graph outputs that have one; NaN when none has.
  double worstAgreement() const;
};

}  // namespace qs
