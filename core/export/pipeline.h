// One analysis run, from a request to results: what `quantscope analyze` and `quantscope export`
// do, and what the workbench's Calibrate does. The front ends only parse their input (flags, the
// calibration dialog, a project file) into an AnalysisRequest and show what the run reports
// through its callbacks; the run itself, its checks and its warnings are here, once.
//
//   AnalysisRequest --validateRequest--> prepareRun: model, data, saved scales, session
//                                        (every model, data and config error, before any work)
//                   --executeRun-->      calibrate (or apply the loaded scales), analyse, fallback
//                   --buildExportBundle (core/export/bundle.h)--> files, written all or none
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/activation_split.h"
#include "core/analysis/clip_refine_options.h"
#include "core/analysis/fallback_curve.h"
#include "core/analysis/head_bias_correction.h"
#include "core/analysis/quant_session.h"
#include "core/analysis/remedies.h"
#include "core/analysis/weight_clip.h"
#include "core/export/quant_files.h"
#include "core/io/calibration_data.h"
#include "core/quant/calibrator.h"
#include "core/quant/quant_config.h"
#include "core/util/progress.h"

namespace qs {

/// --remedies: which of the remedies a run applies. None: the flags alone (each remedy's own default);
/// Auto: also the candidate remedies (core/export/remedy_choice.h) that raise the worst output SNR on
/// the calibration data, measured per model and checked on held-out samples.
enum class RemedyMode { None, Auto };

/// "auto" or "none" into `out`; InvalidArgument "--remedies 'x': expected auto or none" otherwise.
Status parseRemedyMode(const std::string& name, RemedyMode& out);

/// Everything one run needs, in one copy each. Built by app/cli.cpp from flags and by ui/ from the
/// calibration dialog or a project file; checked by validateRequest().
struct AnalysisRequest {
  std::string modelPath;
  CalibrationDataOptions data;      // calibration data: path ("" = random), samples, preprocessing
  std::string analysisDataPath;     // analyse on another set ("" = the calibration data)
  QuantConfig config;               // exclusions and restrictions
  CalibrationSettings calibration;  // method, percentile, mode (the only copy of the mode)
  bool methodGiven = false;         // the method was chosen (a PPQ-only config takes it; else max)
  bool layerwise = true;
  bool sensitivity = true;          // the fallback target turns it on
  /// The fast estimate (exact on demand and for the fallback's top candidates), or the cone sweep.
  /// Fast by default: it meets its bar (Spearman >= 0.8, top-10 overlap >= 7) on every model of the
  /// development zoo (docs/performance.md, "Fast sensitivity"); rec's top-10 overlap is 6.
  SensitivityMethod sensitivityMethod = SensitivityMethod::Fast;
  int threads = 0;                  // executor threads (0 = all cores)
  /// --memory-budget: activation bytes the analysis may hold before it streams (AnalysisOptions::
  /// memoryBudgetBytes); 0: defaultMemoryBudgetBytes(), half the machine's available memory.
  uint64_t memoryBudgetBytes = 0;
  /// Keep activations for toggles after the run (AnalysisOptions::cacheBudgetBytes): the workbench
  /// toggles; the CLI clears it, since only its fallback toggles, so that a plain analyze holds no
  /// table beyond the passes' own (issue 16's bound on peak RSS).
  bool keepForToggles = true;
  /// With keepForToggles: the toggle cache within this factor x (weights + every batch's float
  /// activations), less the RSS already held (AnalysisOptions::cacheRssBound); 0: off, the default,
  /// since on small models (cls, 32 samples) it turns 2 ms toggles into 0.3 s ones while saving
  /// little on big ones (gpt32 1,439 -> 1,209 MB against an 817 MB bound; docs/performance.md).
  double cacheRssBound = 0;
  double targetSnrDb = NAN;         // automatic fallback to this output SNR (NaN: none)
  double targetAgreement = NAN;     // ... and/or to this top-1 / sequence agreement, a fraction (NaN: none)
  /// Method auto's refinement on the outputs (core/analysis/clip_refine.h), what the run passes as
  /// ClipSearchOptions::refine: --calibration-refine (passes; 0, the default: off, since one pass costs
  /// 2.8-8x the rest of the calibration, docs/quality.md), --calibration-refine-budget (workCap, in
  /// whole-graph runs over its check samples; 0: no cap), --calibration-refine-tensors /
  /// --calibration-refine-candidates (maxTargets, maxCandidates: only the K noisiest tensors, the first
  /// C candidates of each; 0: all). Its other fields keep RefineOptions' defaults.
  RefineOptions calibrationRefine{.passes = 0};
  int fallbackCandidates = 6;       // --fallback-candidates: nodes re-measured per fallback step (1: old choice)
  int fallbackCurveSteps = 3;       // --fallback-curve: fallback steps measured past the target
  bool fallbackRankByGain = false;  // --fallback-rank gain|sensitivity (FallbackOptions::rankByGain)
  bool fallbackBackward = true;     // --fallback-backward on|off (FallbackOptions::backward)
  bool fallbackPairs = true;        // --fallback-pairs on|off (FallbackOptions::pairs)
  bool fallbackRecalibrate = false; // --fallback-recalibrate on|off (FallbackOptions::recalibrate; calibrated scales only)
  /// --activation-split on: after the analysis (and fallback), each activation point's error split into
  /// clip and rounding noise (core/analysis/activation_split.h), in report.json. Off by default: it
  /// costs a float pass and two runs of every quantizable node per batch.
  bool activationSplit = false;
  /// --realisations N: the output SNR in N realisations of the rounding noise (the analysis, and
  /// N - 1 quantized passes with the activation scales dithered by realisationDither, relative),
  /// reported per output, and the fallback's target checked on their mean (AnalysisOptions::realisations).
  int realisations = 1;
  double realisationDither = 1e-6;
  /// --realisations auto (the CLI's default): `realisations` decided by a probe of a few realisations
  /// at the all-INT8 start (AnalysisOptions::realisationsAuto); `realisations` is then not read.
  bool realisationsAuto = false;
  /// export --scale-dither K (docs/quality.md, "ONNX Runtime's own realisations"): quantized.onnx
  /// written with the activation scales of realisation K of --realisations, every one multiplied by
  /// the same (1 + realisationDither n) as QuantSession::realisationSnrDb's pass K
  /// (ditherActivationScales), so that another runtime can run that realisation. Only quantized.onnx
  /// changes: quant_cfg.json, calibration.cache and report.json keep the analysed scales (report.json's
  /// settings name the seed). 0: the scales as analysed, the file byte for byte as without the flag.
  int scaleDither = 0;
  std::map<std::string, OutputKind> outputKinds;  // --output-kind: graph output -> agreement kind
  // Scales from a file instead of calibrating; at most one of the two.
  std::string loadConfig;           // quant_cfg.json: scales, node states and settings
  std::string calibrationCache;     // TensorRT calibration cache: activation scales
  // What an export writes.
  std::optional<bool> dqOnly;       // unset: a loaded config's choice, else true for int8, false for fp8
  bool externalData = false;        // initializers in quantized.onnx.data
  uint64_t externalDataThresholdBytes = 0;  // above this model size, external data anyway (0: 2 GB - 64 MB)
  std::optional<TrtVersion> trtVersion;  // calibration.cache's header; unset: a loaded config's, else 10
  std::string trtAlgorithm;         // its algorithm ("" = the scales': a loaded cache's, the method's)
  bool writesCache = false;         // an export that writes calibration.cache: warn about its header
  /// Ranges for every float activation tensor in quant_cfg.json and calibration.cache, not only the
  /// Q/DQ points (what TensorRT's implicit INT8 needs); unset: on (every --trt-version reads caches).
  std::optional<bool> allTensorRanges;
  // PTQ remedies (core/export/remedy_run.h); neither combines with scales from a file.
  bool equalize = false;            // cross-layer equalization of the weights before calibration
  bool biasCorrection = false;      // empirical bias correction after calibration
  bool smoothQuant = false;         // SmoothQuant of MatMul/Gemm after a LayerNormalization (core/analysis/smoothquant.h)
  double smoothQuantAlpha = NAN;    // its alpha, fixed (NaN: searched per group)
  bool weightClipSearch = false;    // per-channel weight clip ratio search (core/analysis/weight_clip.h)
  /// Activation equalization of the depthwise Convs' inputs (core/analysis/depthwise_equalization.h),
  /// int8 with calibrated scales only; float-preserving, so not a remedy with a before/after.
  bool depthwiseEqualize = true;
  /// The output head's per-channel weight scales searched (weight_clip.h, headWeightScaleRatios():
  /// each channel's scale x 1 +- k / 256 by the head's own output error on the calibration data),
  /// int8 with calibrated scales only; a loaded config re-applies its saved ratios. On by default:
  /// rec's INT8 decoding put spaces where the float model has none (docs/quality.md, "rec: the
  /// spaces", 2026-11-27). Off where --weight-clip-search searches every weight.
  bool headWeightScale = true;
  /// The output head's bias corrected by the mean of float - quantized logits on the calibration
  /// data, the whole quantized model run (head_bias_correction.h), after the head weight scale
  /// search; int8 with calibrated scales only; a loaded config re-applies its saved shifts. Off by
  /// default: on rec it decodes 14 / 16 / 13 lines alike at seeds 0 / 1 / 2 against 15 / 16 / 13
  /// without (docs/quality.md, "rec: the head's bias corrected", 2026-11-27).
  bool headBiasCorrection = false;
  /// Per-channel smoothing of the other depthwise Convs' inputs through an inserted Mul
  /// (core/analysis/depthwise_smoothing.h), int8 with calibrated scales only; float-preserving.
  /// Off by default: rec's task agreement in ONNX Runtime fell (docs/quality.md, "Depthwise input smoothing").
  bool depthwiseSmooth = false;
  /// Per-channel smoothing of group-1 Convs' inputs through an inserted Mul, chosen by the quantized
  /// Conv's layer-wise output error (core/analysis/pointwise_smoothing.h), after the depthwise one;
  /// int8 with calibrated scales only; float-preserving. Off by default (docs/quality.md,
  /// "Pointwise input smoothing").
  bool pointwiseSmooth = false;
  /// --remedies: None (the default: every run before it existed) or Auto (opt-in; not the default because
  /// rec's task agreement in ONNX Runtime fell, docs/quality.md "Remedies chosen per model"): the candidates (depthwise and pointwise smoothing) tried on the calibration data
  /// and kept where they raise the worst output SNR by `remedyMarginDb` and not on the held-out samples.
  /// int8 with calibrated scales only. A remedy named in `remediesFixed` (an explicit flag: --depthwise-smooth
  /// off) or already on is not a candidate.
  RemedyMode remedies = RemedyMode::None;
  std::vector<std::string> remediesFixed;  // "depthwise_smooth", "pointwise_smooth"
  double remedyMarginDb = 0.2;
  /// --integer-conv: INT8 Convs summed exactly in integers where the CPU has AVX2 or VNNI
  /// (AnalysisOptions::integerConv), or off: FP32 convolutions of fake-quantized tensors.
  bool integerConv = true;
  /// --gram-split: the weight/activation split of MatMuls from Gram matrices where cheaper
  /// (AnalysisOptions::gramSplit), or off: from the products.
  bool gramSplit = true;
  /// --what-if weights-float|activations-per-channel|both (AnalysisOptions::whatIf, quant_state.h):
  /// a bound of what a family of remedies could buy, simulated by the analysis and its fallback;
  /// no engine runs it, so an export refuses it (buildExportBundle). int8 or fp8, calibrated scales,
  /// fp32 high precision only (validateRequest).
  WhatIf whatIf = WhatIf::None;
  /// --what-if-channel-amax capped|scaled: the channels' amax under activations per channel (ChannelAmax).
  ChannelAmax whatIfChannelAmax = ChannelAmax::Capped;
};

/// The calibration method named `name` (auto, max, entropy, percentile, mse). The one parser of method
/// names, and its one message: "--calibration-method 'x': expected auto, max, entropy, percentile or mse".
Status parseCalibrationMethod(const std::string& name, CalibMethod& out);
/// The quantization mode named `name` (int8, fp8), with the same kind of message.
Status parseQuantizeMode(const std::string& name, QuantMode& out);
/// The default method of a mode: auto for int8 (ModelOpt's is entropy), max for fp8 (ModelOpt's).
CalibMethod defaultCalibrationMethod(QuantMode mode);

/// InvalidArgument for combinations no run can do (two sources of scales, a percentile outside
/// [0, 100], a negative thread count, a target that is not finite, an unknown --trt-calibrator).
Status validateRequest(const AnalysisRequest& request);

/// Whether an export in `mode` writes calibration.cache: TensorRT's calibration cache holds INT8
/// scales (amax / 127) for its implicit INT8 only, so an fp8 export writes none.
bool writesCalibrationCache(QuantMode mode);

/// What a run tells its caller while it works. All optional.
struct RunCallbacks {
  ProgressFn progress;
  /// One line each: prepareRun's once it has succeeded (a failed run reports its error alone),
  /// executeRun's as found. `loud`: the scales are meaningless (random calibration data).
  std::function<void(const std::string& warning, bool loud)> warning;
  /// The caller's token; a run without one cannot be cancelled.
  std::shared_ptr<CancelToken> cancel;
  /// false: `progress` gets each stage's own fraction (the CLI shows an ETA per stage). true: one
  /// fraction for the whole of executeRun (calibration to 0.35, analysis to 0.97, fallback after),
  /// for one progress bar.
  bool overallProgress = false;
};

/// A prepared or finished run: the session (for toggles and statistics), the data, and what the
/// report and the exported files say about where everything came from.
struct AnalysisRun {
  AnalysisRequest request;       // as run: mode and method come from a loaded config when given
  std::shared_ptr<const Model> model;
  std::shared_ptr<QuantSession> session;
  std::shared_ptr<const CalibrationData> calibrationData, analysisData;
  std::vector<std::string> warnings;   // every warning given, in order (the report lists them)
  std::vector<FallbackStep> fallback;  // the automatic fallback's exclusions, when a target was set
  std::optional<FallbackCurve> fallbackCurve;  // its whole curve (past the target), when a target was set
  std::optional<ActivationNoiseSplit> activationSplit;  // --activation-split on: at the run's final point
  std::string modelFingerprint;        // fileFingerprint() of the model file
  std::string scaleSource;             // what the scales came from: the data, a config or a cache
  QuantConfig exportedConfig;          // the lists quant_cfg.json records (a loaded config's plus the request's)
  std::optional<SavedQuantConfig> loadedConfig;
  TrtVersion trtVersion;               // calibration.cache's header: the request's, a loaded config's, or 10
  std::string trtAlgorithm;            // and its algorithm, resolved by prepareRun
  // Remedies: what they did and the analysis without them; `model` is then the remedied copy.
  RemedySummary remedies;
  std::shared_ptr<const Model> originalModel;      // the model as loaded
  std::shared_ptr<QuantSession> baselineSession;   // on originalModel, until executeRun analysed it
  QuantConfig sessionConfig;                       // what the session was created with
  /// The head weight scale search (AnalysisRequest::headWeightScale): per head searched, what it
  /// changed, and the ratios applied (also a loaded config's), for quant_cfg.json.
  std::vector<WeightClipNode> headWeightScale;
  std::vector<WeightScaleRatios> headWeightRatios;
  /// The head bias correction (AnalysisRequest::headBiasCorrection): per head, the shifts added to
  /// its bias (measured, or a loaded config's) and, measured, the logits' error before and after.
  std::vector<HeadBiasShift> headBiasShifts;

  /// The latest result (after toggles too); null before executeRun().
  std::shared_ptr<const AnalysisResult> result() const { return session ? session->result() : nullptr; }
};

/// Loads the model (unless `loaded` is given: the workbench's open model, which may have no file)
/// and the data, reads a saved config or cache, creates the session and runs one sample of the
/// calibration data through the model. Every error of the model, the data or the files named in
/// the request comes from here, before any calibration work.
Result<AnalysisRun> prepareRun(const AnalysisRequest& request, const RunCallbacks& callbacks = {},
                               std::shared_ptr<const Model> loaded = nullptr);

/// Calibrates (or applies the loaded scales), analyses, and runs the automatic fallback when the
/// request has a target. Cancelled through callbacks.cancel.
Status executeRun(AnalysisRun& run, const RunCallbacks& callbacks = {});

/// Whether `run` searches its output heads' weight scales (AnalysisRequest::headWeightScale, int8,
/// scales not given by a config or cache, no --weight-clip-search): then the remedies' baseline
/// ("before") gets the same search, so before and after differ by the remedies only.
bool headWeightScaleSearched(const AnalysisRun& run);

/// Whether `run` measures its output heads' bias correction (AnalysisRequest::headBiasCorrection,
/// int8, scales not given by a config or cache): the remedies' baseline gets it too.
bool headBiasCorrected(const AnalysisRun& run);

/// prepareRun() then executeRun().
Result<AnalysisRun> runAnalysis(const AnalysisRequest& request, const RunCallbacks& callbacks = {});

/// The settings report.json records for a run (its "settings" object, beside the figures).
std::map<std::string, std::string> runSettings(const AnalysisRun& run);

}  // namespace qs
