// The frame that depthwise and pointwise input smoothing (depthwise_smoothing.h,
// pointwise_smoothing.h) share once each has found its candidate Convs: one float run over the
// calibration batches with an observer of the candidates' inputs, then, on a copy of the model,
// each candidate's scales chosen and its Mul inserted (insertSmoothingMul()).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "core/analysis/depthwise_smoothing.h"
#include "core/exec/executor.h"
#include "core/io/calibration_data.h"
#include "core/ir/graph.h"
#include "core/util/progress.h"
#include "core/util/status.h"

namespace qs {

/// An observer of the candidates' inputs that reports a candidate whose input does not fit its
/// weight at run time.
class SmoothingObserver : public ExecutionObserver {
 public:
  /// The candidate Conv whose input did not fit (the last one seen), -1 when none.
  NodeId mismatch() const { return m_mismatch; }

 protected:
  NodeId m_mismatch = -1;
};

/// How many of `data`'s batches a smoothing reads: the first `maxBatches`, all of them when <= 0.
int64_t smoothingBatches(const CalibrationData& data, int maxBatches);

/// What one smoothing pass is called and how its progress is split.
struct SmoothingPassInfo {
  std::string what;            // "depthwise smoothing": the progress stage and the errors' words
  std::string mismatchReason;  // why the node the observer reports does not fit, for the error
  double span = 0.5;           // the calibration run's share of the progress; the choices take the rest
};

/// Chooses one candidate's scales (the `candidate`-th, in the caller's order) and inserts its Mul in
/// `g`, the model's copy, through insertSmoothingMul() with `nodeNames`, recording it in the result's
/// `inputs`; or records in its `skipped` why not.
using SmoothCandidateFn = std::function<void(Graph& g, size_t candidate, std::set<std::string>& nodeNames)>;

/// The shared body of smoothDepthwiseInputs() and smoothPointwiseInputs() once they have `count`
/// candidates (none: `res.model` is `model` and nothing runs). Runs the first `batches` batches of
/// `data` through a float executor of `model` on `threads` threads with `observer` watching
/// (progress from 0 to `info.span`), fails naming the node `observer` reports, then calls
/// `smoothCandidate` for each candidate in order on a copy of `model` (progress from `info.span`
/// to 1), which records what it did in `res`. `res.model` becomes the finalized copy, or `model` when no input was smoothed, and
/// `res.changedInitializers` is sorted. Fails when the model does not run on `data`; Cancelled
/// through `progress`.
Status runSmoothingPass(std::shared_ptr<const Model> model, const CalibrationData& data, int threads, int64_t batches,
                        SmoothingObserver& observer, size_t count, const SmoothingPassInfo& info,
                        const ProgressFn& progress, const SmoothCandidateFn& smoothCandidate,
                        DepthwiseSmoothingResult& res);

}  // namespace qs
