#include "core/export/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "core/export/remedy_choice.h"
#include "core/export/remedy_run.h"
#include "core/onnx/loader.h"
#include "core/quant/high_precision.h"
#include "core/util/memory_budget.h"

namespace qs {

Status parseCalibrationMethod(const std::string& name, CalibMethod& out) {
  if (parseCalibMethod(name, out)) return Status::ok();
  return invalidArgument("--calibration-method '" + name + "': expected auto, max, entropy, percentile or mse");
}

Status parseQuantizeMode(const std::string& name, QuantMode& out) {
  if (parseQuantMode(name, out)) return Status::ok();
  return invalidArgument("--quantize-mode '" + name + "': expected int8 or fp8");
}

Status parseRemedyMode(const std::string& name, RemedyMode& out) {
  if (name == "auto" || name == "none") {
    out = name == "auto" ? RemedyMode::Auto : RemedyMode::None;
    return Status::ok();
  }
  return invalidArgument("--remedies '" + name + "': expected auto or none");
}

CalibMethod defaultCalibrationMethod(QuantMode mode) {
  return mode == QuantMode::Fp8 ? CalibMethod::Max : CalibMethod::Auto;
}

bool writesCalibrationCache(QuantMode mode) { return mode == QuantMode::Int8; }

Status validateRequest(const AnalysisRequest& r) {
  if (!r.loadConfig.empty() && !r.calibrationCache.empty()) {
    return invalidArgument("--load-config and --calibration-cache-path both give the scales; use one");
  }
  if (!(r.calibration.percentile >= 0 && r.calibration.percentile <= 100)) {
    return invalidArgument("--percentile " + std::to_string(r.calibration.percentile) + ": expected a value in [0, 100]");
  }
  if (r.threads < 0) return invalidArgument("--threads " + std::to_string(r.threads) + ": expected 0 (all cores) or more");
  if (std::isinf(r.targetSnrDb)) return invalidArgument("--target-snr: expected a finite number of dB");
  const RefineOptions& refine = r.calibrationRefine;
  if (refine.passes < 0 || refine.passes > 16)
    return invalidArgument("--calibration-refine " + std::to_string(refine.passes) + ": expected 0 to 16 passes");
  if (!(refine.workCap >= 0 && refine.workCap <= 1e6))
    return invalidArgument("--calibration-refine-budget " + std::to_string(refine.workCap) +
                           ": expected 0 (no cap) or a positive number of whole-graph runs");
  if (refine.realisations < 0 || refine.realisations > 64)
    return invalidArgument("--calibration-refine-realisations " + std::to_string(refine.realisations) +
                           ": expected 0 (the session's --realisations) to 64");
  if (refine.maxTargets < 0 || refine.maxCandidates < 0)
    return invalidArgument("--calibration-refine-tensors / --calibration-refine-candidates: expected 0 (all) or more");
  if (r.fallbackCandidates < 1)
    return invalidArgument("--fallback-candidates " + std::to_string(r.fallbackCandidates) + ": expected at least 1");
  if (r.realisations < 1 || r.realisations > 64)
    return invalidArgument("--realisations " + std::to_string(r.realisations) + ": expected 1 to 64");
  if (!(r.realisationDither > 0 && r.realisationDither <= 1e-2))
    return invalidArgument("--realisation-dither " + std::to_string(r.realisationDither) +
                           ": expected a relative dither in (0, 0.01]");
  if (r.scaleDither < 0)
    return invalidArgument("--scale-dither " + std::to_string(r.scaleDither) + ": expected a realisation number, 0 or more");
  if (r.fallbackCurveSteps < 0)
    return invalidArgument("--fallback-curve " + std::to_string(r.fallbackCurveSteps) + ": expected 0 or more steps");
  if (!std::isnan(r.targetAgreement) && !(r.targetAgreement >= 0 && r.targetAgreement <= 1)) {
    return invalidArgument("--target-agreement " + std::to_string(r.targetAgreement) + ": expected a fraction in [0, 1]");
  }
  if (!r.trtAlgorithm.empty() && !isTrtCalibrationAlgorithm(r.trtAlgorithm)) {
    return invalidArgument("--trt-calibrator '" + r.trtAlgorithm +
                           "': expected EntropyCalibration2, MinMaxCalibration, EntropyCalibration or LegacyCalibration");
  }
  if (!std::isnan(r.smoothQuantAlpha) && !(r.smoothQuantAlpha >= 0 && r.smoothQuantAlpha <= 1)) {
    return invalidArgument("--smoothquant-alpha " + std::to_string(r.smoothQuantAlpha) + ": expected a number in [0, 1]");
  }
  if ((r.smoothQuant || r.weightClipSearch) && (!r.loadConfig.empty() || !r.calibrationCache.empty())) {
    return invalidArgument(std::string(r.smoothQuant ? "--smoothquant" : "--weight-clip-search") +
                           " changes the weights or their scales: it needs calibration, not " +
                           (r.loadConfig.empty() ? "--calibration-cache-path" : "--load-config"));
  }
  if (r.whatIf != WhatIf::None) {
    const std::string w = std::string("--what-if ") + whatIfName(r.whatIf);
    if (!r.loadConfig.empty() || !r.calibrationCache.empty())
      return invalidArgument(w + " needs calibration (the channels' ranges), not " +
                             (r.loadConfig.empty() ? "--calibration-cache-path" : "--load-config"));
    if (r.calibration.highPrecision != HighPrecision::Fp32)
      return invalidArgument(w + " simulates with the float part in fp32 only, not --high-precision-dtype " +
                             highPrecisionName(r.calibration.highPrecision));
    if (r.activationSplit && activationsPerChannel(r.whatIf))
      return invalidArgument(w + ": --activation-split splits per-tensor scales only");
  }
  if ((r.equalize || r.biasCorrection) && (!r.loadConfig.empty() || !r.calibrationCache.empty())) {
    return invalidArgument(std::string(r.equalize ? "--equalize" : "--bias-correction") +
                           " changes the weights the scales are calibrated for: it needs calibration, not " +
                           (r.loadConfig.empty() ? "--calibration-cache-path" : "--load-config"));
  }
  return Status::ok();
}

namespace {

// Collects a run's warnings. prepareRun hands them to the caller only once it has succeeded, so
// that a model or data error is the one line a failed run prints.
// Loud: the random-data warning, given only when no scales come from a file (they would replace
// the scales that the random data makes meaningless).
bool isLoud(const std::string& w) { return w == kRandomCalibrationWarning; }

struct Warner {
  AnalysisRun& run;
  bool buffered;  // prepareRun: handed over when it succeeds; executeRun: passed on at once
  const RunCallbacks& cb;
  void operator()(const std::string& w) const {
    run.warnings.push_back(w);
    if (!buffered && cb.warning) cb.warning(w, isLoud(w));
  }
};

// The first sample of a batch, where every input's batch dim is dynamic (else the batch itself).
std::vector<NamedTensor> firstSample(const Graph& g, std::vector<NamedTensor> feeds) {
  for (ValueId in : g.inputs) {
    const Value& v = g.value(in);
    if (!v.shape || v.shape->empty() || (*v.shape)[0].isFixed()) return feeds;
  }
  for (NamedTensor& f : feeds) {
    if (f.tensor.rank() == 0 || f.tensor.dim(0) <= 1) continue;
    Shape one = f.tensor.shape();
    one[0] = 1;
    Tensor t(f.tensor.dtype(), one);
    std::memcpy(t.raw(), f.tensor.raw(), t.byteSize());
    f.tensor = std::move(t);
  }
  return feeds;
}

// The activation amax of a TensorRT cache, by tensor name, for the tensors `model` has.
Result<std::map<std::string, float>> cacheAmax(const CalibrationCache& cache, const std::string& path, const Model& model,
                                               const Warner& warn) {
  std::map<std::string, float> amax;
  std::vector<std::string> unknown;
  for (const auto& [name, scale] : cache.scales) {
    if (model.graph.findValue(name) == kNoValue) unknown.push_back(name);
    else amax[name] = amaxForScale(scale, QuantMode::Int8);
  }
  if (amax.empty() && !cache.scales.empty()) {
    return invalidArgument(path + ": none of its " + std::to_string(cache.scales.size()) + " tensors (first '" +
                           cache.scales.begin()->first + "') is in " + model.path + ": the cache was made for another model");
  }
  if (!unknown.empty()) {
    warn(path + ": " + std::to_string(unknown.size()) + " tensor(s) not in the model are ignored (first '" + unknown.front() +
         "')");
  }
  return amax;
}

// "a, b, c and 5 more": the first `limit` items of a warning's list.
std::string listed(const std::vector<std::string>& items, size_t limit = 8) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < limit; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > limit) s += " and " + std::to_string(items.size() - limit) + " more";
  return s;
}

// Says which of the given ranges are read but not used, and why (TensorRT's caches and PPQ's
// act_quant_info list every tensor, Conv outputs included). With all tensor ranges on, a range of a
// tensor that is not a quantization point is used: it is written back for TensorRT's implicit INT8,
// unless a node left out of quantization reads or writes it.
void warnUnusedRanges(const std::map<std::string, float>& amax, const Graph& g, const QuantPlan& plan,
                      bool allTensorRanges, const std::string& path, const char* what, const Warner& warn) {
  std::set<std::string> points;
  for (const ActivationPoint& a : plan.activations)
    if (isNodeQuantized(plan, a.node)) points.insert(g.value(a.value).name);
  std::vector<std::string> notPoints, ofLeftOut;
  for (const auto& [name, a] : amax) {
    const ValueId id = g.findValue(name);
    if (points.count(name) || id == kNoValue) continue;
    if (!allTensorRanges) notPoints.push_back("'" + name + "'");
    else if (!keepsImplicitRange(g, plan, id)) ofLeftOut.push_back("'" + name + "'");
  }
  if (!notPoints.empty()) {
    warn(path + ": " + std::to_string(notPoints.size()) + " " + what + " not used: not quantization points, and " +
         "--all-tensor-ranges is off (" + listed(notPoints) + ")");
  }
  if (!ofLeftOut.empty()) {
    warn(path + ": " + std::to_string(ofLeftOut.size()) + " " + what +
         " not used: read or written by nodes left out of quantization, which TensorRT keeps in float only without "
         "them (" + listed(ofLeftOut) + ")");
  }
}

void appendLists(QuantConfig& to, const QuantConfig& from) {
  auto add = [](std::vector<std::string>& a, const std::vector<std::string>& b) { a.insert(a.end(), b.begin(), b.end()); };
  add(to.nodesToExclude, from.nodesToExclude);
  add(to.nodesToQuantize, from.nodesToQuantize);
  add(to.opTypesToExclude, from.opTypesToExclude);
  add(to.opTypesToQuantize, from.opTypesToQuantize);
}

bool hasLists(const QuantConfig& c) {
  return !c.nodesToExclude.empty() || !c.nodesToQuantize.empty() || !c.opTypesToExclude.empty() ||
         !c.opTypesToQuantize.empty();
}

}  // namespace

Result<AnalysisRun> prepareRun(const AnalysisRequest& request, const RunCallbacks& callbacks,
                               std::shared_ptr<const Model> loaded) {
  QS_RETURN_IF_ERROR(validateRequest(request));
  AnalysisRun run;
  run.request = request;
  Warner warn{run, /*buffered=*/true, callbacks};

  // Scales, states and settings of a saved config: read before anything else is loaded.
  if (!request.loadConfig.empty()) {
    auto saved = readQuantConfig(request.loadConfig);
    if (!saved) return saved.status();
    run.loadedConfig = std::move(saved).value();
    run.request.calibration = run.loadedConfig->calibration;
    run.request.calibration.highPrecision = request.calibration.highPrecision;  // not in the saved file
    // PPQ's file records no method: the one asked for, else max (PPQ's amax is an observed range).
    if (!run.loadedConfig->hasQuantscope) run.request.calibration.method = request.methodGiven ? request.calibration.method : CalibMethod::Max;
    if (!run.request.trtVersion) run.request.trtVersion = run.loadedConfig->trtVersion;
    if (run.request.trtAlgorithm.empty()) run.request.trtAlgorithm = run.loadedConfig->trtAlgorithm;
    if (!run.request.dqOnly) run.request.dqOnly = run.loadedConfig->dqOnly;
    run.request.externalData = request.externalData || run.loadedConfig->externalData;
  }
  // Weights: int8 initializers + DequantizeLinear; fp8 as ModelOpt writes it, the float weight with
  // a Q/DQ pair (--dq-only gives FLOAT8E4M3FN initializers + DequantizeLinear).
  if (!run.request.dqOnly) run.request.dqOnly = run.request.calibration.mode != QuantMode::Fp8;
  // A TensorRT cache: read before anything else is loaded too; its header's algorithm names the
  // method its scales came from, unless the request names one.
  std::optional<CalibrationCache> cache;
  if (!request.calibrationCache.empty()) {
    auto c = readCalibrationCache(request.calibrationCache);
    if (!c) return c.status();
    cache = std::move(c).value();
    const std::string algorithm = headerAlgorithm(cache->header);
    if (isTrtCalibrationAlgorithm(algorithm)) {
      if (run.request.trtAlgorithm.empty()) run.request.trtAlgorithm = algorithm;
      if (!request.methodGiven && algorithm == "MinMaxCalibration") run.request.calibration.method = CalibMethod::Max;
      if (!request.methodGiven && algorithm.rfind("EntropyCalibration", 0) == 0)
        run.request.calibration.method = CalibMethod::Entropy;
    }
  }
  if (!run.request.trtVersion) run.request.trtVersion = TrtVersion{};
  run.trtVersion = *run.request.trtVersion;
  run.trtAlgorithm = run.request.trtAlgorithm.empty() ? trtCalibrationAlgorithm(run.request.calibration.method)
                                                      : run.request.trtAlgorithm;
  const AnalysisRequest& rq = run.request;

  if (loaded) {
    run.model = std::move(loaded);
  } else {
    auto model = loadModel(rq.modelPath);
    if (!model) return model.status();
    run.model = std::move(model).value();
  }
  QS_RETURN_IF_ERROR(equalizeRunModel(run));
  // A model built in code has no file: no fingerprint (exporting it fails, naming the path).
  if (auto fingerprint = fileFingerprint(rq.modelPath)) run.modelFingerprint = *fingerprint;
  else if (!loaded) return fingerprint.status();
  const SavedQuantConfig* saved = run.loadedConfig ? &*run.loadedConfig : nullptr;
  if (saved && !saved->modelFingerprint.empty() && saved->modelFingerprint != run.modelFingerprint) {
    warn(rq.loadConfig + ": made for a model file with another fingerprint (" + saved->modelFingerprint + ", this one " +
         run.modelFingerprint + "); its names and weights match, so it is used");
  }

  // The data: calibration (random when no path) and, when given, a separate analysis set.
  auto calib = CalibrationData::open(*run.model, rq.data);
  if (!calib) return calib.status();
  run.calibrationData = std::shared_ptr<const CalibrationData>(std::move(calib).value());
  const bool scalesGiven = saved || !rq.calibrationCache.empty();
  for (const std::string& w : run.calibrationData->warnings()) {
    if (w != kRandomCalibrationWarning || !scalesGiven)
      warn(w);
    else
      warn("no --calibration-data: report.json's predicted SNR is computed on random inputs (the scales come from " +
           (saved ? rq.loadConfig : rq.calibrationCache) + ")");
  }
  run.analysisData = run.calibrationData;
  if (!rq.analysisDataPath.empty()) {
    CalibrationDataOptions ado = rq.data;
    ado.path = rq.analysisDataPath;
    auto ad = CalibrationData::open(*run.model, ado);
    if (!ad) return ad.status();
    run.analysisData = std::shared_ptr<const CalibrationData>(std::move(ad).value());
  }

  if (rq.depthwiseEqualize && !scalesGiven && rq.calibration.mode == QuantMode::Int8)
    QS_RETURN_IF_ERROR(equalizeRunDepthwise(run));
  if (saved && !saved->depthwiseEqualize.empty())
    QS_RETURN_IF_ERROR(equalizeRunDepthwise(run, saved->depthwiseEqualize, rq.loadConfig));
  if (rq.depthwiseSmooth && !scalesGiven && rq.calibration.mode == QuantMode::Int8)
    QS_RETURN_IF_ERROR(smoothRunDepthwise(run));
  if (saved && !saved->depthwiseSmooth.empty()) QS_RETURN_IF_ERROR(smoothRunDepthwise(run, saved->depthwiseSmooth, rq.loadConfig));
  if (rq.pointwiseSmooth && !scalesGiven && rq.calibration.mode == QuantMode::Int8)
    QS_RETURN_IF_ERROR(smoothRunPointwise(run));
  if (saved && !saved->pointwiseSmooth.empty()) QS_RETURN_IF_ERROR(smoothRunPointwise(run, saved->pointwiseSmooth, rq.loadConfig));
  if (saved && !saved->remedyMode.empty()) {  // the saved run's choice, re-applied through its scales above
    run.remedies.choice.mode = saved->remedyMode;
    run.remedies.choice.fromConfig = true;
    run.remedies.choice.kept = saved->remediesKept;
  }

  // The session: the request's lists, or a saved config's node states plus the request's lists.
  QuantConfig config = rq.config;
  run.exportedConfig = rq.config;
  if (saved) {
    auto c = configForSavedStates(*saved, *run.model, rq.config, rq.loadConfig);
    if (!c) return c.status();
    config = std::move(c).value();
    run.exportedConfig = saved->config;
    appendLists(run.exportedConfig, rq.config);  // command-line additions are part of what this run did
  }
  AnalysisOptions ao;
  ao.threads = rq.threads;
  ao.memoryBudgetBytes = rq.memoryBudgetBytes > 0 ? rq.memoryBudgetBytes : defaultMemoryBudgetBytes();
  if (!rq.keepForToggles && std::isnan(rq.targetSnrDb) && std::isnan(rq.targetAgreement)) ao.cacheBudgetBytes = 0;
  // The workbench's toggle cache within issue 16's bound on peak RSS (the rest recomputed on toggle).
  if (rq.keepForToggles) ao.cacheRssBound = rq.cacheRssBound;
  ao.layerwise = rq.layerwise;
  ao.sensitivity = rq.sensitivity || !std::isnan(rq.targetSnrDb) || !std::isnan(rq.targetAgreement);
  ao.outputKinds = rq.outputKinds;
  ao.sensitivityMethod = rq.sensitivityMethod;
  ao.calibration = rq.calibration;
  ao.clipSearch.refine = rq.calibrationRefine;
  ao.allTensorRanges = rq.allTensorRanges.value_or(true);  // every TensorRT that reads caches (8.5-10.x) needs them
  ao.integerConv = rq.integerConv;
  ao.gramSplit = rq.gramSplit;
  ao.realisations = std::max(1, rq.realisations);
  ao.realisationDither = rq.realisationDither;
  ao.realisationsAuto = rq.realisationsAuto;
  ao.whatIf = rq.whatIf;
  ao.whatIfChannelAmax = rq.whatIfChannelAmax;
  if (saved) {  // the saved head weight scale search's ratios
    for (const WeightScaleRatios& w : saved->headWeightScale) {
      const ValueId v = run.model->graph.findValue(w.tensor);
      if (v == kNoValue || !run.model->graph.value(v).constant) {
        return invalidArgument(rq.loadConfig + ": quantscope.head_weight_scale: weight '" + w.tensor +
                               "' is not in the model " + rq.modelPath);
      }
      ao.weightClip[v] = w.ratio;
      run.headWeightRatios.push_back(w);
    }
  }
  std::vector<std::string> configWarnings;
  auto session = QuantSession::create(run.model, config, ao, &configWarnings);
  if (!session) return session.status();
  run.session = std::shared_ptr<QuantSession>(std::move(session).value());
  if (callbacks.cancel) run.session->setCancelToken(callbacks.cancel);
  for (const auto& w : configWarnings) warn(w);
  QS_RETURN_IF_ERROR(createBaselineSession(run, config, ao, callbacks.cancel));
  if (saved) QS_RETURN_IF_ERROR(checkSavedStates(*saved, *run.model, run.session->plan(), hasLists(rq.config), rq.loadConfig));

  if (saved) {
    run.scaleSource = saved->calibrationData.empty() ? rq.loadConfig : saved->calibrationData;
  } else if (!rq.calibrationCache.empty()) {
    run.scaleSource = rq.calibrationCache;
    auto amax = cacheAmax(*cache, rq.calibrationCache, *run.model, warn);
    if (!amax) return amax.status();
    QS_RETURN_IF_ERROR(run.session->setActivationAmax(*amax).withContext(rq.calibrationCache));
    warnUnusedRanges(*amax, run.model->graph, run.session->plan(), ao.allTensorRanges, rq.calibrationCache, "scales",
                     warn);
  } else {
    run.scaleSource = run.calibrationData->description();
  }
  if (saved) {
    QS_RETURN_IF_ERROR(run.session->setActivationAmax(saved->actAmax).withContext(rq.loadConfig));
    warnUnusedRanges(saved->actAmax, run.model->graph, run.session->plan(), ao.allTensorRanges, rq.loadConfig, "ranges",
                     warn);
  }
  const CalibMethod method = rq.calibration.method;
  if (rq.writesCache && rq.trtAlgorithm.empty() && (method == CalibMethod::Percentile || method == CalibMethod::Mse)) {
    warn(std::string("TensorRT has no ") + calibMethodName(method) + " calibrator: calibration.cache's header names " +
         run.trtAlgorithm + ", the calibrator TensorRT reads it with (the scales are ours either way); "
         "--trt-calibrator names another");
  }

  // One sample through the model: what only execution finds (a weight that does not fit its
  // input, data whose values a kernel refuses) fails here, before any progress.
  auto feeds = run.calibrationData->batch(0);
  if (!feeds) return feeds.status();
  auto dry = run.session->executor().run(firstSample(run.model->graph, std::move(feeds).value()));
  if (!dry) return dry.status();

  if (callbacks.warning)
    for (const std::string& w : run.warnings) callbacks.warning(w, isLoud(w));
  return run;
}

namespace {

// AnalysisRequest::headWeightScale: the output heads' per-channel weight scales searched by their
// own output error on the calibration data (weight_clip.h), after calibration and the remedies;
// the ratios go into the session (the weights quantized again) and into quant_cfg.json.
Status searchHeadWeightScale(AnalysisRun& run, const ProgressFn& progress) {
  auto found = applyHeadWeightScale(*run.session, *run.calibrationData, progress);
  if (!found) return found.status();
  run.headWeightScale = found->nodes;
  const Graph& g = run.model->graph;
  for (const WeightClipNode& n : found->nodes) {
    auto it = found->ratios.find(n.weight);
    if (it == found->ratios.end()) continue;
    run.headWeightRatios.push_back({g.nodes[(size_t)n.node].name, g.value(n.weight).name, it->second});
  }
  return Status::ok();
}

// AnalysisRequest::headBiasCorrection: the heads' bias shifts measured with the whole quantized
// model on the calibration data (head_bias_correction.h), after the head weight scale search.
Status correctHeadBias(AnalysisRun& run, const ProgressFn& progress) {
  auto shifts = applyHeadBiasCorrection(*run.session, *run.calibrationData, progress);
  if (!shifts) return shifts.status();
  run.headBiasShifts = std::move(shifts).value();
  return Status::ok();
}

// A loaded quant_cfg.json's quantscope.head_bias_correction, re-applied as saved (no measurement).
Status applySavedHeadBias(AnalysisRun& run) {
  const std::string& where = run.request.loadConfig;
  const Graph& g = run.model->graph;
  const std::vector<HeadBias> heads = headBiases(*run.session);
  std::vector<HeadBiasShift> shifts;
  for (const HeadBiasSaved& b : run.loadedConfig->headBiasCorrection) {
    auto it = std::find_if(heads.begin(), heads.end(), [&](const HeadBias& h) { return g.nodes[(size_t)h.head].name == b.node; });
    if (it == heads.end() || g.value(it->bias).name != b.tensor) {
      return invalidArgument(where + ": quantscope.head_bias_correction: node '" + b.node + "' with bias '" + b.tensor +
                             "' is not a quantized output head with that bias in " + run.request.modelPath);
    }
    if ((int64_t)b.shift.size() != it->classes) {
      return invalidArgument(where + ": quantscope.head_bias_correction '" + b.tensor + "' has " +
                             std::to_string(b.shift.size()) + " shifts, the bias " + std::to_string(it->classes) +
                             " classes");
    }
    HeadBiasShift s;
    s.where = *it;
    s.shift = b.shift;
    for (float x : s.shift) {
      s.meanAbsShift += std::fabs(x);
      s.maxAbsShift = std::max(s.maxAbsShift, (double)std::fabs(x));
    }
    s.meanAbsShift /= (double)std::max<size_t>(1, s.shift.size());
    shifts.push_back(std::move(s));
  }
  QS_RETURN_IF_ERROR(applyHeadBiasShifts(*run.session, shifts));
  run.headBiasShifts = std::move(shifts);
  return Status::ok();
}

}  // namespace

bool headBiasCorrected(const AnalysisRun& run) {
  const AnalysisRequest& rq = run.request;
  const bool scalesGiven = run.loadedConfig || !rq.calibrationCache.empty();
  return !scalesGiven && rq.headBiasCorrection && rq.calibration.mode == QuantMode::Int8;
}

bool headWeightScaleSearched(const AnalysisRun& run) {
  const AnalysisRequest& rq = run.request;
  const bool scalesGiven = run.loadedConfig || !rq.calibrationCache.empty();
  return !scalesGiven && rq.headWeightScale && !rq.weightClipSearch && rq.calibration.mode == QuantMode::Int8;
}

Status executeRun(AnalysisRun& run, const RunCallbacks& callbacks) {
  const AnalysisRequest& rq = run.request;
  const bool scalesGiven = run.loadedConfig || !rq.calibrationCache.empty();
  // Each step's progress, or its share of one bar (after the remedy choice's `lead`, when it runs).
  double lead = 0;
  auto phase = [&](double lo, double hi) -> ProgressFn {
    if (!callbacks.progress || !callbacks.overallProgress) return callbacks.progress;
    const double a = lead + (1 - lead) * lo, b = lead + (1 - lead) * hi;
    return [&callbacks, a, b](double f, const std::string& stage) { return callbacks.progress(a + (b - a) * f, stage); };
  };
  if (!scalesGiven && rq.remedies == RemedyMode::Auto && rq.calibration.mode == QuantMode::Int8) {
    QS_RETURN_IF_ERROR(chooseRunRemedies(run, phase(0, 0.5), callbacks.cancel));
    lead = 0.5;
    if (const std::vector<std::string>& kept = run.remedies.choice.kept; !kept.empty()) {
      Warner{run, /*buffered=*/false, callbacks}(
          "--remedies auto kept " + listed(kept) + ": quantized.onnx and quant_cfg.json carry them (--load-config "
          "re-applies them), calibration.cache does not (an export from it with --calibration_cache_path is the model "
          "without them)");
    }
  }
  const bool remedies = run.baselineSession != nullptr;
  if (!scalesGiven) {
    QS_RETURN_IF_ERROR(run.session->calibrate(*run.calibrationData, phase(0.02, remedies ? 0.15 : 0.35)));
    const Warner warn{run, /*buffered=*/false, callbacks};
    for (const std::string& w : run.session->calibrationWarnings()) warn(w);
  }
  if (remedies) QS_RETURN_IF_ERROR(runRemedies(run, phase(0.15, 0.35), callbacks.cancel));
  if (headWeightScaleSearched(run)) QS_RETURN_IF_ERROR(searchHeadWeightScale(run, phase(0.34, 0.345)));
  if (headBiasCorrected(run)) {
    QS_RETURN_IF_ERROR(correctHeadBias(run, phase(0.345, 0.35)));
  } else if (run.loadedConfig && !run.loadedConfig->headBiasCorrection.empty()) {
    QS_RETURN_IF_ERROR(applySavedHeadBias(run));
  }
  auto result = run.session->analyze(run.analysisData, phase(0.35, 0.97));
  if (!result) return result.status();
  if (!std::isnan(rq.targetSnrDb) || !std::isnan(rq.targetAgreement)) {
    FallbackOptions fo;
    fo.targetSnrDb = rq.targetSnrDb;
    fo.targetAgreement = rq.targetAgreement;
    fo.candidates = rq.fallbackCandidates;
    fo.extraSteps = rq.fallbackCurveSteps;
    fo.rankByGain = rq.fallbackRankByGain;
    fo.backward = rq.fallbackBackward;
    fo.pairs = rq.fallbackPairs;
    fo.recalibrate = rq.fallbackRecalibrate && !scalesGiven && run.calibrationData;
    auto curve = fo.recalibrate ? fallbackCurveRecalibrated(*run.session, *run.calibrationData, run.analysisData, fo,
                                                            phase(0.97, 1.0))
                                : fallbackCurve(*run.session, fo, phase(0.97, 1.0));
    if (!curve) return curve.status();
    run.fallback = curve->chosenSteps();
    run.fallbackCurve = std::move(curve).value();
  }
  if (rq.activationSplit) {
    auto split = activationNoiseSplit(*run.session, *run.analysisData, callbacks.progress);
    if (!split) return split.status();
    run.activationSplit = std::move(split).value();
  }
  // Layers that TensorRT's implicit INT8 would run outside INT8 from the written ranges.
  {
    const AnalysisResult& r = *run.result();
    const Graph& g = run.model->graph;
    std::vector<Int8Gap> outside, inside;
    for (const Int8Gap& gap : implicitInt8Gaps(g, r)) (gap.leftOutInInt8 ? inside : outside).push_back(gap);
    auto names = [&](const std::vector<Int8Gap>& v) {
      std::vector<std::string> items;
      for (const Int8Gap& gap : v)
        items.push_back("'" + g.nodes[(size_t)gap.node].name + "'" +
                        (gap.tensor != kNoValue ? " ('" + g.value(gap.tensor).name + "')" : std::string()));
      return listed(items);
    };
    const Warner warn{run, /*buffered=*/false, callbacks};
    if (!outside.empty()) {
      warn("TensorRT implicit INT8 (quant_cfg.json, calibration.cache): " + std::to_string(outside.size()) +
           " quantized layer(s) would run outside INT8, a tensor they read or write having no range: " + names(outside) +
           (rq.allTensorRanges.value_or(true) ? "" : "; --all-tensor-ranges on writes them") +
           " (quantized.onnx's explicit Q/DQ is not affected)");
    }
    if (!inside.empty()) {
      warn("TensorRT implicit INT8 (quant_cfg.json, calibration.cache): " + std::to_string(inside.size()) +
           " layer(s) left out of quantization may still run in INT8, every tensor they read or write having a range "
           "for a quantized neighbour: " + names(inside) + " (quantized.onnx's explicit Q/DQ keeps them in float)");
    }
  }
  // Quantized nodes whose activation tensor got no scale (a cache or config without it) keep that
  // input in float, in the simulation and in the export alike: say so.
  if (scalesGiven) {
    const AnalysisResult& r = *run.result();
    const Graph& g = run.model->graph;
    std::set<std::string> missing;
    for (const ActivationPoint& a : r.plan.activations)
      if (isNodeQuantized(r.plan, a.node) && !r.activations.count(a.value)) missing.insert(g.value(a.value).name);
    if (!missing.empty()) {
      Warner{run, /*buffered=*/false, callbacks}(std::to_string(missing.size()) + " quantized tensor(s) have no scale in " +
                             (run.loadedConfig ? rq.loadConfig : rq.calibrationCache) + " and stay float (first '" +
                             *missing.begin() + "')");
    }
  }
  return Status::ok();
}

Result<AnalysisRun> runAnalysis(const AnalysisRequest& request, const RunCallbacks& callbacks) {
  auto run = prepareRun(request, callbacks);
  if (!run) return run.status();
  QS_RETURN_IF_ERROR(executeRun(*run, callbacks));
  return run;
}

std::map<std::string, std::string> runSettings(const AnalysisRun& run) {
  const AnalysisRequest& rq = run.request;
  std::map<std::string, std::string> s;
  auto list = [&](const char* key, const std::vector<std::string>& v) {
    if (v.empty()) return;
    std::string joined;
    for (const auto& x : v) joined += (joined.empty() ? "" : ",") + x;
    s[key] = joined;
  };
  s["calibration_data"] = run.scaleSource;
  if (!rq.analysisDataPath.empty()) s["analysis_data"] = rq.analysisDataPath;
  list("nodes_to_exclude", run.exportedConfig.nodesToExclude);
  list("nodes_to_quantize", run.exportedConfig.nodesToQuantize);
  list("op_types_to_exclude", run.exportedConfig.opTypesToExclude);
  list("op_types_to_quantize", run.exportedConfig.opTypesToQuantize);
  if (!std::isnan(rq.targetSnrDb)) s["target_snr_db"] = std::to_string(rq.targetSnrDb);
  if (!std::isnan(rq.targetAgreement)) s["target_agreement"] = std::to_string(rq.targetAgreement);
  if (rq.fallbackCandidates != AnalysisRequest{}.fallbackCandidates)
    s["fallback_candidates"] = std::to_string(rq.fallbackCandidates);
  const RefineOptions& refine = rq.calibrationRefine;
  const RefineOptions refineDefaults = AnalysisRequest{}.calibrationRefine;
  if (refine.passes != refineDefaults.passes) s["calibration_refine"] = std::to_string(refine.passes);
  if (refine.workCap != refineDefaults.workCap) s["calibration_refine_budget"] = std::to_string(refine.workCap);
  if (refine.realisations != refineDefaults.realisations)
    s["calibration_refine_realisations"] = std::to_string(refine.realisations);
  if (refine.marginSe != refineDefaults.marginSe) s["calibration_refine_margin"] = std::to_string(refine.marginSe);
  if (refine.maxTargets != refineDefaults.maxTargets) s["calibration_refine_tensors"] = std::to_string(refine.maxTargets);
  if (refine.maxCandidates != refineDefaults.maxCandidates)
    s["calibration_refine_candidates"] = std::to_string(refine.maxCandidates);
  if (rq.fallbackCurveSteps != AnalysisRequest{}.fallbackCurveSteps) s["fallback_curve"] = std::to_string(rq.fallbackCurveSteps);
  if (rq.fallbackRankByGain != AnalysisRequest{}.fallbackRankByGain)
    s["fallback_rank"] = rq.fallbackRankByGain ? "gain" : "sensitivity";
  if (rq.fallbackBackward != AnalysisRequest{}.fallbackBackward)
    s["fallback_backward"] = rq.fallbackBackward ? "on" : "off";
  if (rq.fallbackPairs != AnalysisRequest{}.fallbackPairs) s["fallback_pairs"] = rq.fallbackPairs ? "on" : "off";
  if (rq.fallbackRecalibrate) s["fallback_recalibrate"] = "on";
  if (rq.activationSplit) s["activation_split"] = "on";
  if (rq.realisations > 1 || rq.realisationsAuto)
    s["realisations"] = rq.realisationsAuto ? std::string("auto") : std::to_string(rq.realisations);
  if (rq.scaleDither > 0) s["scale_dither"] = std::to_string(rq.scaleDither);
  if (rq.realisations > 1 || rq.realisationsAuto || rq.scaleDither > 0) {
    std::ostringstream eps;
    eps << rq.realisationDither;
    s["realisation_dither"] = eps.str();
  }
  if (!rq.outputKinds.empty()) {
    std::string kinds;
    for (const auto& [name, kind] : rq.outputKinds) kinds += (kinds.empty() ? "" : ",") + name + "=" + outputKindName(kind);
    s["output_kind"] = kinds;
  }
  if (!rq.layerwise) s["layerwise"] = "off";
  if (!rq.sensitivity && std::isnan(rq.targetSnrDb)) s["sensitivity"] = "off";
  else s["sensitivity"] = rq.sensitivityMethod == SensitivityMethod::Fast ? "fast" : "exact";
  if (!rq.loadConfig.empty()) s["load_config"] = rq.loadConfig;
  if (!rq.calibrationCache.empty()) s["calibration_cache"] = rq.calibrationCache;
  s["trt_version"] = trtVersionName(run.trtVersion);
  s["trt_calibrator"] = run.trtAlgorithm;
  s["all_tensor_ranges"] = rq.allTensorRanges.value_or(true) ? "on" : "off";
  if (rq.equalize) s["equalize"] = "on";
  if (rq.biasCorrection) s["bias_correction"] = "on";
  if (rq.smoothQuant) s["smoothquant"] = std::isnan(rq.smoothQuantAlpha) ? "search" : "alpha " + std::to_string(rq.smoothQuantAlpha);
  if (rq.weightClipSearch) s["weight_clip_search"] = "on";
  if (!rq.headWeightScale) {
    s["head_weight_scale"] = "off";
  } else if (!run.headWeightRatios.empty()) {  // absent where no head was changed: earlier reports stay as they were
    std::string heads;
    for (const WeightScaleRatios& w : run.headWeightRatios) {
      size_t n = 0;
      for (float r : w.ratio) n += r != 1.f;
      heads += (heads.empty() ? "" : ", ") + w.node + " (" + std::to_string(n) + " of " + std::to_string(w.ratio.size()) +
               " channels)";
    }
    s["head_weight_scale"] = heads;
  }
  if (!run.headBiasShifts.empty()) {
    std::string heads;
    for (const HeadBiasShift& h : run.headBiasShifts) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " (%lld classes, mean |shift| %.4f, max %.4f)", (long long)h.shift.size(),
                    h.meanAbsShift, h.maxAbsShift);
      heads += (heads.empty() ? "" : ", ") + run.model->graph.nodes[(size_t)h.where.head].name + buf;
    }
    s["head_bias_correction"] = heads;
  }  // absent when off (the default), so that the reports of earlier runs stay as they were
  if (!rq.depthwiseEqualize) {
    s["depthwise_equalize"] = "off";
  } else if (const size_t n = run.remedies.depthwisePairs.size(); n > 0) {
    s["depthwise_equalize"] = std::to_string(n) + (n == 1 ? " pair" : " pairs");
  }
  if (!rq.depthwiseSmooth) {
    s["depthwise_smooth"] = "off";
  } else if (const size_t n = run.remedies.depthwiseSmoothed.size(); n > 0) {
    s["depthwise_smooth"] = std::to_string(n) + (n == 1 ? " input" : " inputs");
  }
  if (rq.pointwiseSmooth) {  // absent at the default (off), so that the reports of earlier runs stay as they were
    const size_t n = run.remedies.pointwiseSmoothed.size();
    s["pointwise_smooth"] = std::to_string(n) + (n == 1 ? " input" : " inputs");
  }
  if (!run.remedies.choice.empty()) {  // absent at --remedies none, so that the reports of earlier runs stay as they were
    std::string kept;
    for (const std::string& k : run.remedies.choice.kept) kept += (kept.empty() ? "" : ",") + k;
    s["remedies"] = run.remedies.choice.mode + ": " + (kept.empty() ? "none kept" : kept);
  }
  if (!rq.integerConv) s["integer_conv"] = "off";
  if (!rq.gramSplit) s["gram_split"] = "off";
  if (rq.whatIf != WhatIf::None) s["what_if"] = whatIfName(rq.whatIf);  // absent without: earlier reports unchanged
  if (activationsPerChannel(rq.whatIf)) s["what_if_channel_amax"] = channelAmaxName(rq.whatIfChannelAmax);
  return s;
}

}  // namespace qs
