// The `auto` calibrator's last step: the clip ranges refined on the graph's OUTPUTS.
//
// The layer-wise search (clip_search.h) chooses each tensor's amax by its consumers' error alone,
// and the whole-graph check only picks among whole tables; the optimum of each tensor for its
// consumers is not the graph's. This pass is a greedy coordinate descent on the worst output SNR:
// tensor by tensor, the noisiest (lowest layer-wise consumer SNR) first, a few candidate amax
// values (a grid around the current one and the tensor's histogram methods) are tried, each by
// re-running only the tensor's downstream cone over cached quantized activations of the check
// samples; a candidate is kept only when it raises the worst output SNR over those samples (so the
// pass never lowers it). To show over-fitting, the worst output SNR on held-out samples (those
// after the check samples) is measured before and after, and reported beside it. With
// RefineOptions::realisations R > 1 each candidate is scored on the mean over R realisations of
// the rounding noise (the activation scales dithered as --realisations does) and kept only above a
// margin of standard errors; the check and held-out figures are also given on the mean of 8
// realisations (docs/quality.md, "Refinement on the mean of realisations").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/analysis/batch_sweep.h"
#include "core/analysis/clip_refine_options.h"
#include "core/analysis/clip_search.h"
#include "core/analysis/quant_state.h"
#include "core/io/calibration_data.h"
#include "core/util/progress.h"

namespace qs {

/// One tensor the refinement may move: its candidates are tried in order.
struct RefineTarget {
  ValueId value = kNoValue;
  std::vector<ClipCandidate> candidates;  // amax > 0; the current amax need not be among them
};

struct ClipRefineResult {
  std::map<ValueId, ClipCandidate> changed;  // tensor -> the candidate applied instead
  double checkBeforeDb = 0, checkAfterDb = 0;      // worst output SNR on the check samples
  double heldOutBeforeDb = NAN, heldOutAfterDb = NAN;  // the same on the held-out samples (NaN: none)
  int64_t checkSamples = 0, heldOutSamples = 0;
  int realisations = 1;  // the realisations each candidate was scored on (RefineOptions::realisations)
  /// The mean over RefineOptions::measureRealisations realisations of the worst output SNR, check and
  /// held-out samples, before and after (NaN: not measured / no held-out samples).
  int measureRealisations = 0;
  double checkMeanBeforeDb = NAN, checkMeanAfterDb = NAN;
  double heldOutMeanBeforeDb = NAN, heldOutMeanAfterDb = NAN;
  int rejectedByMargin = 0;  // candidates whose mean gain was positive but within the margin
  int passes = 0;     // passes run (stops early when a pass changes nothing)
  int coneRuns = 0;   // cone re-runs (per candidate, all check batches together)
  int targetsTried = 0;   // targets (first pass) with at least one candidate run
  double work = 0;        // cone work run, in whole-graph runs over the check samples (RefineOptions::workCap)
  double workCap = 0;     // the cap it ran under (0: none)
  int cappedRuns = 0;     // candidates skipped because their cone would have passed the cap
  double seconds = 0;
};

/// The candidates the refinement tries for a tensor whose amax is `current` (of max |x| `absMax`):
/// current * 2^(k/4), k = -1, 1 (at most absMax), then the first of `extra` (the layer-wise
/// winner), then k = -2, 2, then the rest of `extra` (the histogram methods' amax), each skipped
/// when within 3% of one already listed or of current: the likeliest first, for
/// RefineOptions::maxCandidates.
std::vector<ClipCandidate> refineCandidates(float current, float absMax, const std::vector<ClipCandidate>& extra);

/// Runs o.passes passes over `targets` (in that order; the first o.maxTargets) on the first
/// o.checkSamples samples of `data` (whole batches, at least one), with the quantized model of the
/// nodes set in `enabled` under `act` (c.state's activation table: left at the refined scales on
/// success). Tensors in a Concat scale group are not moved. o.heldOutSamples samples after the
/// check samples (fewer when `data` has fewer) are measured before and after. Fails when a run
/// fails or on cancel (`act` restored).
Result<ClipRefineResult> refineClipsOnOutputs(const PassContext& c, const QuantPlan& plan,
                                              std::map<ValueId, ActivationQuant>& act,
                                              const std::vector<RefineTarget>& targets, const std::vector<char>& enabled,
                                              const CalibrationData& data, const RefineOptions& o,
                                              HighPrecision highPrecision, const ProgressFn& progress = {});

}  // namespace qs
