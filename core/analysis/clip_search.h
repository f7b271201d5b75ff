// The `auto` calibration method: per activation tensor, the clip range (amax) whose consumers'
// outputs are least wrong, measured layer-wise on the calibration data.
//
// For each activation point value, the candidates are every histogram method's amax (max,
// entropy, percentile 99.9 / 99.99 / 99.999, mse) and a grid of fractions of max (2^(-k/2),
// k = 0..kClipGridSteps-1, down to ~1/32 of max), then a finer grid around the best of those
// (best * 2^(j/8), j = -2..2). Each candidate is scored by running every consumer of the tensor
// (every node with an activation point on it) on its float inputs with only that input
// fake-quantized at the candidate's scale and its weights fake-quantized as the analysis does,
// against the consumer's float output; the score is the sum over consumers of noise / signal
// (1 / linear SNR), accumulated over the first `maxSamples` (4) calibration samples. The smallest score
// wins; the histogram methods come first, so that a grid point wins only when it is strictly better.
// Softmax outputs keep their pinned [0, 1] range; Concat scale groups take the largest chosen
// amax of their members, as every method does. QuantSession::searchClips (defined in
// clip_search.cpp) then checks the per-tensor choices on the whole graph (outputSnrOfScales)
// against every single method and three mixes, applies the best, and refines it on the outputs
// (clip_refine.h, ClipSearchOptions::refine; docs/quality.md).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/analysis/batch_sweep.h"
#include "core/analysis/clip_refine_options.h"
#include "core/analysis/quant_state.h"
#include "core/exec/executor.h"
#include "core/io/calibration_data.h"
#include "core/quant/calibrator.h"
#include "core/util/progress.h"

namespace qs {

/// Coarse grid size: fractions 2^(-k/2) of max, k = 0..kClipGridSteps-1.
constexpr int kClipGridSteps = 11;
/// Refinement around the coarse winner: best * 2^(j/8), j = -kClipRefineSteps..kClipRefineSteps.
constexpr int kClipRefineSteps = 2;
/// Fewer finite values than this many per histogram bin (on average over the initial bins) make a
/// histogram too sparse to trust: its percentiles, entropy and mse follow single samples. With
/// the default 2048 bins that is 32768 values (the ResNet final Gemm input of 16 samples had 8k).
constexpr int kMinValuesPerBin = 16;

/// One clip candidate of a tensor: "max", "entropy", "percentile_99.99", "mse", "clip_0.354".
struct ClipCandidate {
  std::string name;
  float amax = 0;
};

// ClipChoice (what the search chose for one tensor) is plain result data: core/analysis/results.h.

struct ClipSearchOptions {
  /// Calibration samples the layer-wise runs use (whole batches, at least one batch): the first ones.
  int64_t maxSamples = 4;
  /// Calibration samples the whole-graph check of the choices uses (the first ones).
  int64_t checkSamples = 8;
  /// The refinement on the outputs (clip_refine.h) over the check samples: passes 0 (the default) is none. Its
  /// checkSamples is not read: the refinement scores on checkSamples above, the whole-graph check's. The other
  /// defaults are the whole refinement; the pipeline's default budget is in core/export/pipeline.h.
  RefineOptions refine{.passes = 0};
};

/// Layer-wise consumer SNR (dB) of every candidate amax scored for one tensor, in scoring order.
using ClipScores = std::vector<std::pair<float, double>>;

/// The candidates of a tensor from its histogram, coarse phase: the histogram methods (named
/// first), then the grid of fractions of max; duplicates (equal amax) dropped, amax > 0 only.
std::vector<ClipCandidate> clipCandidates(const TensorStats& stats, const CalibrationSettings& settings);

/// True when `stats` holds too few values for its histogram to be trusted (kMinValuesPerBin).
bool histogramTooSparse(const TensorStats& stats);

/// One warning naming the activation point tensors (up to five, and how many in all) whose
/// histograms are too sparse, for the methods that read the histogram (all but max); empty when none.
std::vector<std::string> sparseHistogramWarnings(const Graph& g, const QuantPlan& plan,
                                                 const std::map<ValueId, TensorStats>& stats,
                                                 const CalibrationSettings& settings);

/// Runs the search for every activation point value of `plan` that has stats (Softmax outputs
/// excepted) over the first samples of `data`, with `state`'s fake-quantized weights. Returns
/// value -> choice. Fails (naming the model) when a run fails or on cancel.
Result<std::map<ValueId, ClipChoice>> searchClipRanges(const Model& model, const Executor& executor,
                                                        const QuantPlan& plan, const QuantState& state,
                                                        const std::map<ValueId, TensorStats>& stats,
                                                        const CalibrationSettings& settings,
                                                        const CalibrationData& data, const ClipSearchOptions& options,
                                                        CancelToken& cancel, const ProgressFn& progress = {},
                                                        std::map<ValueId, ClipScores>* scores = nullptr);

/// The layer-wise SNR of the candidate nearest `amax` in `scores` (NaN when none is within 1e-6 of it).
double clipScoreAt(const ClipScores& scores, float amax);

/// The worst graph-output SNR (dB), pooled over the first `maxSamples` samples of `data`, of the
/// quantized model (the nodes set in `enabled`) under each table of activation scales in `tables`:
/// how `auto` checks its layer-wise choice against each single method on the whole graph. Sets
/// c.state's activations to each table in turn (`act`, the caller's, restored before returning).
Result<std::vector<double>> outputSnrOfScales(const PassContext& c, std::map<ValueId, ActivationQuant>& act,
                                              const std::vector<std::map<ValueId, ActivationQuant>>& tables,
                                              const std::vector<char>& enabled, const CalibrationData& data,
                                              int64_t maxSamples, const ProgressFn& progress = {});

}  // namespace qs
