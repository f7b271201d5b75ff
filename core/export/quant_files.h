// The two text files an export writes beside quantized.onnx (reference section 5), read back
// for --load-config and --calibration-cache-path:
//
//  - quant_cfg.json: PPQ's TensorRT exporter format, {"act_quant_info": {"<tensor>": amax}}
//    (amax = scale * 127, read by PPQ's engine-build script for setDynamicRange), plus a
//    "quantscope" object with what PPQ leaves out: the weights with their per-channel axis and amax,
//    every node's state and reason, mode, calibration method and settings, the user's
//    configuration, export flags, the model's fingerprint and the tool's version. A saved config
//    reproduces the export without calibrating.
//  - calibration.cache: TensorRT's text format, a `TRT-<version>-<Algorithm>` header (the
//    version of the TensorRT release it is written for, --trt-version) then one
//    `<tensor>: <8 hex digits>` line per tensor, the big-endian IEEE-754 float32 of the scale.
//
// Both list the same tensors: exportedActivationTensors(), the values the exporter gives a
// QuantizeLinear/DequantizeLinear pair, then, when the analysis calibrated every tensor
// (AnalysisOptions::allTensorRanges), implicitRangeTensors(): the other ranges TensorRT's implicit
// INT8 (TensorRT 8.x-10.x, PPQ's engine script, trtexec --calib) needs. TensorRT runs a layer
// outside INT8 when a tensor it reads or writes has no range ("Missing scale and zero-point for
// tensor ..., expect fall back to non-int8 implementation"); implicitInt8Gaps() names those layers.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/depthwise_smoothing.h"
#include "core/analysis/results.h"
#include "core/quant/quant_config.h"
#include "core/quant/quant_types.h"
#include "core/util/status.h"
#include "qs_version.h"

namespace qs {

/// The activation tensors that get a Q/DQ pair in the export, in plan (topological) order, each
/// once: values of activation points whose node is quantized, that have a scale in `r`, and whose
/// dtype is float (or unknown: the simulation only quantizes float tensors).
std::vector<ValueId> exportedActivationTensors(const Graph& g, const AnalysisResult& r);

/// The ranges written beside the Q/DQ points for TensorRT's implicit INT8: every tensor of
/// AnalysisResult::tensorRanges that is not a Q/DQ point, except those that a node left out of
/// quantization (quantizable, not quantized) reads or writes and no quantized node does, so that
/// TensorRT keeps that node in float as the analysis did.
std::vector<std::pair<ValueId, float>> implicitRangeTensors(const Graph& g, const AnalysisResult& r);
/// The rule of implicitRangeTensors() for one tensor: false when a node left out of quantization
/// reads or writes `v` and no quantized node does.
bool keepsImplicitRange(const Graph& g, const QuantPlan& plan, ValueId v);

/// Where TensorRT's implicit INT8, given the written ranges, would differ from the analysis: a
/// quantized node that it runs outside INT8 because `tensor` (an activation it reads or writes) has
/// no range, or (leftOutInInt8) a node left out of quantization whose every tensor has a range
/// (its inputs and outputs are shared with quantized nodes), which TensorRT may run in INT8.
struct Int8Gap {
  NodeId node = -1;
  ValueId tensor = kNoValue;
  bool leftOutInInt8 = false;
};
std::vector<Int8Gap> implicitInt8Gaps(const Graph& g, const AnalysisResult& r);

/// The amax written for a tensor: one whose scaleFromAmax() gives back exactly `q.scale` (the
/// calibrated amax, or scale * qmax for tensors whose amax was replaced by the scale floor).
float exportedAmax(const ActivationQuant& q, QuantMode mode);

/// The float amax whose scaleFromAmax(amax, mode) is bit-identical to `scale` when one exists
/// (always for scales written by this tool); otherwise the nearest. `scale` must be > 0.
float amaxForScale(float scale, QuantMode mode);

/// FNV-1a 64 of the file's bytes as 16 hex digits: identifies the model a config was made for.
Result<std::string> fileFingerprint(const std::string& path);

// ---- calibration.cache -----------------------------------------------------------------------

/// A TensorRT release that reads calibration caches (8.5, 8.6, 10.x): the version a cache's header
/// carries. TensorRT skips a cache whose header version it finds incompatible (NVIDIA/TensorRT#1378).
struct TrtVersion {
  int major = 10, minor = 0, patch = 0;
  bool operator==(const TrtVersion&) const = default;
};

/// Parses a --trt-version: 8.5, 8.6, 8.x.y (x 5 or 6), 10, 10.x, 10.x.y. A missing patch is 1 for
/// 8.5 and 8.6 (8.5.1, 8.6.1: the releases people have) and 0 for 10.x. InvalidArgument naming
/// `flag` and the text otherwise; TensorRT 9 and 11 or newer are refused with the reason (11 has
/// no calibrators: it builds quantized.onnx's explicit Q/DQ).
Status parseTrtVersion(const std::string& text, TrtVersion& out, const std::string& flag = "--trt-version");
/// "10.3.0".
std::string trtVersionName(const TrtVersion& v);
/// The release's NV_TENSORRT_VERSION, the number in the header TensorRT writes: 8.x.y ->
/// 8000 + 100x + y (8.6.1 -> 8601, NvInferVersion.h of TensorRT 8); 10.x.y -> 100000 + 100x + y
/// (10.3.0 -> 100300, NV_TENSORRT_VERSION_INT in NvInferRuntimeBase.h of TensorRT 10).
int trtVersionNumber(const TrtVersion& v);

/// Whether `name` is an algorithm TensorRT writes in a cache header: EntropyCalibration2,
/// EntropyCalibration, MinMaxCalibration, LegacyCalibration.
bool isTrtCalibrationAlgorithm(const std::string& name);

/// The algorithm a cache of `method`'s scales is named after: MinMaxCalibration (max),
/// EntropyCalibration2 (entropy), and EntropyCalibration2 for percentile and mse, which TensorRT has
/// no calibrator for: the header only decides which calibrator TensorRT reads the cache with
/// (trtexec --calib uses an IInt8EntropyCalibrator2), the scales are ours either way.
std::string trtCalibrationAlgorithm(CalibMethod method);

/// The algorithm of a header "TRT-<version>-<Algorithm>" ("" when it has none).
std::string headerAlgorithm(const std::string& header);

/// TensorRT's header "TRT-<trtVersionNumber(version)>-<algorithm>"; `algorithm` "" means
/// trtCalibrationAlgorithm(method). Default: "TRT-100000-EntropyCalibration2" for entropy.
std::string calibrationCacheHeader(CalibMethod method, const TrtVersion& version = {}, const std::string& algorithm = "");

/// The cache text for the exported activation tensors of `r` (INT8 scales) under `header` (""
/// means calibrationCacheHeader(r.calibration.method)).
std::string calibrationCacheText(const Model& model, const AnalysisResult& r, const std::string& header = "");

/// A parsed cache: tensor name -> scale, plus the header.
struct CalibrationCache {
  std::string header;
  std::map<std::string, float> scales;
};

/// Parses cache text. InvalidArgument naming `where` and the line number for a missing or
/// malformed header, a line that is not `<name>: <8 hex digits>`, a tensor given twice, or a
/// scale that is not a positive finite float.
Result<CalibrationCache> parseCalibrationCache(const std::string& text, const std::string& where);
/// Reads and parses a cache file (IoError when unreadable).
Result<CalibrationCache> readCalibrationCache(const std::string& path);

// ---- quant_cfg.json --------------------------------------------------------------------------

/// quantscope.head_weight_scale: a weight whose per-channel scales are its abs max x `ratio` / 127
/// (the head weight scale search); `amax` in quantscope.weights is already the product.
struct WeightScaleRatios {
  std::string node, tensor;
  std::vector<float> ratio;
};

/// quantscope.head_bias_correction: per output head (`node`), the shift per class added to its bias
/// constant `tensor` in the quantized model (the head bias correction, head_bias_correction.h).
struct HeadBiasSaved {
  std::string node, tensor;
  std::vector<float> shift;
};

/// What a quant_cfg.json holds besides act_quant_info.
struct SavedQuantConfig {
  std::string toolVersion;
  std::string modelFile, modelFingerprint;
  CalibrationSettings calibration;     // method, percentile, mode (the one copy of the mode)
  int64_t samples = 0;
  std::string calibrationData;          // where the data came from ("random", a path, a cache)
  QuantConfig config;                   // the user's lists as given
  bool dqOnly = true, externalData = false;
  std::optional<TrtVersion> trtVersion; // export.trt_version, when saved
  std::string trtAlgorithm;             // export.trt_calibrator: the cache header's algorithm, when saved
  bool hasQuantscope = false;           // false: PPQ's file, act_quant_info alone
  std::map<std::string, float> actAmax; // act_quant_info
  struct Weight {
    std::string node, tensor;
    size_t input = 0;
    int axis = 0;
    std::vector<float> amax;
  };
  std::vector<Weight> weights;          // quantized weights only
  struct NodeState {
    std::string name, opType, reason;
    bool quantizable = false, quantized = false;
  };
  std::vector<NodeState> nodes;         // every node, graph order
  std::vector<DepthwiseSmoothingScale> depthwiseEqualize;  // quantscope.depthwise_equalize: re-applied on load, first
  std::vector<DepthwiseSmoothingScale> depthwiseSmooth;  // quantscope.depthwise_smooth: re-applied on load
  std::vector<DepthwiseSmoothingScale> pointwiseSmooth;  // quantscope.pointwise_smooth: re-applied after it
  std::vector<WeightScaleRatios> headWeightScale;        // quantscope.head_weight_scale: re-applied on load
  std::vector<HeadBiasSaved> headBiasCorrection;         // quantscope.head_bias_correction: re-applied on load
  std::string remedyMode;                  // quantscope.remedy_choice.mode ("auto"; "" when absent)
  std::vector<std::string> remediesKept;   // quantscope.remedy_choice.kept: what the saved run's choice kept
};

/// Context of a config written by an export.
struct QuantConfigContext {
  std::string toolVersion = kVersion;
  std::string modelPath, modelFingerprint;
  std::string calibrationData;
  QuantConfig config;
  bool dqOnly = true, externalData = false;
  TrtVersion trtVersion;                // the calibration.cache written beside it
  std::string trtAlgorithm;             // its header's algorithm
  std::vector<DepthwiseSmoothingScale> depthwiseEqualize;  // the run's depthwise input equalization (pairs' s_c)
  std::vector<DepthwiseSmoothingScale> depthwiseSmooth;  // the run's depthwise input smoothing (its Mul nodes)
  std::vector<DepthwiseSmoothingScale> pointwiseSmooth;  // the run's group-1 Conv input smoothing (its Mul nodes)
  std::vector<WeightScaleRatios> headWeightScale;        // the run's head weight scale ratios
  std::vector<HeadBiasSaved> headBiasCorrection;         // the run's head bias shifts
  std::string remedyMode;                 // --remedies auto's choice ("" when none was made): written as
  std::vector<std::string> remediesKept;  // quantscope.remedy_choice, a record (the scales above re-apply it)
};

/// quant_cfg.json of an analysed session: act_quant_info (exported tensors, amax as float), then
/// the "quantscope" object. Deterministic for equal inputs.
std::string quantConfigJson(const Model& model, const AnalysisResult& r, const QuantConfigContext& ctx);

/// Parses quant_cfg.json. A file with act_quant_info alone (PPQ's) is accepted: its amax values are
/// used and everything else keeps its default. InvalidArgument naming `where` and the key for
/// malformed JSON, a non-numeric or non-positive amax, or fields of the wrong type.
Result<SavedQuantConfig> parseQuantConfig(const std::string& text, const std::string& where);
Result<SavedQuantConfig> readQuantConfig(const std::string& path);

/// The configuration that reproduces a saved config's node states on `model`: the saved lists,
/// then `extra` (command-line additions), then an exact-name exclusion for every node the config
/// saved as not quantized that the lists would leave quantized (automatic fallback, GUI toggles).
/// InvalidArgument "... was made for another model" when a node, tensor or weight of the config is
/// not in `model`, or a saved weight's per-channel amax differs from the model's weight.
Result<QuantConfig> configForSavedStates(const SavedQuantConfig& saved, const Model& model, const QuantConfig& extra,
                                         const std::string& where);

/// After a session was created with configForSavedStates(): InvalidArgument when a node the config
/// saved as quantized is not quantized in `plan` and `extraGiven` is false (the model differs).
Status checkSavedStates(const SavedQuantConfig& saved, const Model& model, const QuantPlan& plan, bool extraGiven,
                        const std::string& where);

}  // namespace qs
