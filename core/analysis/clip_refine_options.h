// The options of the refinement of the clip ranges on the graph's outputs (clip_refine.h), apart so
// that ClipSearchOptions (clip_search.h, which clip_refine.h includes) can hold them.
#pragma once

#include <cstdint>

namespace qs {

/// How much of the refinement runs. The defaults are the whole refinement (every target, every
/// candidate, no cap); QuantSession passes ClipSearchOptions::refine (the default budget: docs/quality.md).
struct RefineOptions {
  int passes = 1;                // passes over the targets; a pass that changes nothing ends it
  int64_t checkSamples = 8;      // the first samples, on which candidates are scored
  int64_t heldOutSamples = 8;    // the samples after them, measured before and after only
  int maxTargets = 0;            // only the first this many targets (the caller orders them); 0: all
  int maxCandidates = 0;         // only the first this many candidates of each target; 0: all
  /// Cone work allowed, in whole-graph runs over the check samples (a cone's work: the estimated
  /// FLOPs of its nodes over the whole graph's); a candidate whose cone would pass the cap is
  /// skipped, cheaper ones after it still run. Machine-independent, so results do not depend on
  /// the load. 0: no cap.
  double workCap = 0;
  /// A pass that raises the check samples' worst output SNR by less than this (dB) is the last one.
  double minPassGainDb = 0;
  /// Realisations of the rounding noise each candidate is scored on (docs/quality.md, "Refinement on
  /// the mean of realisations"): realisation 0 is the plain scales, k > 0 every activation scale
  /// dithered by ditherActivationScales(k, realisationDither), as --realisations draws them. With
  /// R > 1 a candidate is kept only when the mean over the R realisations of its worst output SNR
  /// rises, and by more than marginSe standard errors of the paired differences (candidate minus the
  /// current scales, realisation by realisation). Each candidate costs R cone runs and the check
  /// samples' quantized tables are held R times (rec at R = 8: 20.7 GB), so the default is 1, not
  /// the session's realisations; 0: the session's realisations (QuantSession; 1 in
  /// refineClipsOnOutputs).
  int realisations = 1;
  double realisationDither = 1e-6;
  /// With realisations > 1, the refinement refuses to start (one line) when the check samples'
  /// quantized tables, held once per realisation, would pass this many bytes (the session's
  /// --memory-budget; 0: unbounded). Estimated from the first table. R = 1 is not checked: it holds
  /// what the refinement always held.
  uint64_t memoryBudgetBytes = 0;
  double marginSe = 2.0;
  /// The check and held-out samples' worst output SNR before and after are also measured on the mean
  /// of this many realisations (0: not measured), whatever `realisations` is, so that runs with
  /// different R compare on the same figure (2 x this many whole quantized passes over each set).
  int measureRealisations = 8;
};

}  // namespace qs
