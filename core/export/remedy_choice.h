// `--remedies auto` (issue #14: "a remedy is on by default only if it helps across the zoo"): each
// remedy on by default only on the models where it helps, chosen per model by measurement instead of
// one global default. The candidates are the remedies quant_cfg.json carries, so that --load-config
// reproduces the export byte for byte: depthwise input smoothing, then pointwise input smoothing
// (their order in a run). Bias correction, SmoothQuant and weight clip search cannot be re-applied from
// a saved file (validateRequest refuses them with --load-config) and stay explicit flags.
//
// The calibration data is split into the first half of its batches (the choice samples) and the rest
// (held out). For each candidate in turn, on top of the candidates kept so far: the model with and
// without it is calibrated on the choice samples and analysed (output SNR only: no layer-wise errors,
// no sensitivity) on both halves. The candidate is kept where its worst output SNR on the choice
// samples rises by at least AnalysisRequest::remedyMarginDb AND does not fall on the held-out samples,
// so that a remedy that fits the noise of a few samples is not kept. A candidate that changes nothing
// on the model (no input it would smooth) is recorded and costs no analysis. With a single batch there
// is nothing to hold out: both figures come from the one batch, and the report says so (held_out_samples 0).
//
// After the choice, the kept remedies are applied as their flags would apply them, on the whole
// calibration data, and the run goes on as usual (the session is made again on the remedied model).
#pragma once

#include <memory>

#include "core/export/pipeline.h"

namespace qs {

/// executeRun's step for RemedyMode::Auto, before calibration (int8, calibrated scales only; a
/// random data set is not measured: run.remedies.choice.note says so): tries the candidates, records
/// the trials in run.remedies.choice, sets the kept ones' flags in run.request, applies them to
/// run.model and makes run.session (and the remedies' baseline session) again on it. `progress` gets
/// this step's fraction. Fails as the analysis fails; Cancelled through `cancel`.
Status chooseRunRemedies(AnalysisRun& run, const ProgressFn& progress, const std::shared_ptr<CancelToken>& cancel);

}  // namespace qs
