// The PTQ remedies inside one run of the pipeline (core/export/pipeline.h): cross-layer
// equalization of the loaded model (prepareRun), the analysis of the model without remedies for
// the report's before/after, and empirical bias correction after calibration (executeRun). Each
// remedy but bias correction replaces the run's model by a copy with changed initializers that
// keeps its float output (SmoothQuant, the depthwise remedies, CLE) or changes nothing in it (weight
// clip search); quantized.onnx writes them (ExportOptions::replacedInitializers). Bias correction
// does change the float output, so it stays in the session's quantized side
// (QuantSession::setConstantCorrections) and quantized.onnx writes it only for quantized nodes
// (ExportOptions::constantValues).
#pragma once

#include "core/export/pipeline.h"

namespace qs {

/// --equalize: replaces run.model by its cross-layer equalized copy (run.remedies records the
/// pairs) and keeps the original in run.originalModel. Nothing when the request asks no remedy.
Status equalizeRunModel(AnalysisRun& run);

/// AnalysisRequest::depthwiseEqualize, after the calibration data opened: replaces run.model (and
/// run.originalModel, the baseline of the remedies' before/after) by its depthwise-equalized copy
/// and records the pairs and changed constants in run.remedies. Nothing when no pair is found.
Status equalizeRunDepthwise(AnalysisRun& run);
/// The same with the pairs' scales a quant_cfg.json saved (--load-config): the saved run's weights.
Status equalizeRunDepthwise(AnalysisRun& run, const std::vector<DepthwiseSmoothingScale>& saved, const std::string& where);

/// AnalysisRequest::depthwiseSmooth, after equalizeRunDepthwise: replaces run.model (and
/// run.originalModel, as there) by a copy with a Mul on the inputs of the depthwise Convs that
/// depthwise equalization cannot pair, where it lowers their layer-wise error; records them, the
/// inserted nodes and the changed weights in run.remedies.
Status smoothRunDepthwise(AnalysisRun& run);
/// The same with the scales a quant_cfg.json saved (--load-config): the saved run's Mul nodes and weights.
Status smoothRunDepthwise(AnalysisRun& run, const std::vector<DepthwiseSmoothingScale>& saved, const std::string& where);

/// AnalysisRequest::pointwiseSmooth, after smoothRunDepthwise: replaces run.model (and
/// run.originalModel, as there) by a copy with a Mul on the inputs of the group-1 Convs where it
/// lowers the quantized Conv's layer-wise output error (core/analysis/pointwise_smoothing.h);
/// records them, appends the inserted nodes and the changed weights in run.remedies.
Status smoothRunPointwise(AnalysisRun& run);
/// The same with the scales a quant_cfg.json saved (--load-config), after the saved depthwise ones.
Status smoothRunPointwise(AnalysisRun& run, const std::vector<DepthwiseSmoothingScale>& saved, const std::string& where);

/// When the request asks for a remedy: a session on run.originalModel with the same
/// configuration and options (no sensitivity), analysed by runRemedies() for remedies.before.
Status createBaselineSession(AnalysisRun& run, const QuantConfig& config, const AnalysisOptions& options,
                             const std::shared_ptr<CancelToken>& cancel);

/// executeRun's remedies, after run.session was calibrated: the baseline's calibration and
/// analysis, then --smoothquant (a new model and session, calibrated again), --weight-clip-search
/// (the same model, a session with the chosen ratios, calibrated again), then --bias-correction
/// (measured with the calibrated session and set in it, QuantSession::setConstantCorrections: the
/// model stays, and quantized.onnx writes a corrected bias only for a node it quantizes).
/// `progress` gets the fraction of this step.
Status runRemedies(AnalysisRun& run, const ProgressFn& progress, const std::shared_ptr<CancelToken>& cancel);

}  // namespace qs
