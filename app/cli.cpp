#include "app/cli.h"

#include "qs_version.h"

#include <CLI/CLI.hpp>
#include "core/util/memory_budget.h"
#include <cstdio>
#include <array>
#include <cstring>

namespace qs::cli {

bool isSubcommand(int argc, char** argv) {
  if (argc < 2) return false;
  for (const char* s : {"info", "run", "analyze", "export", "--help", "-h", "--version"})
    if (std::strcmp(argv[1], s) == 0) return true;
  return false;
}

int reportError(const Status& status) {
  std::fprintf(stderr, "quantscope: error: %s\n", status.message().c_str());
  switch (status.code()) {
    case StatusCode::Ok: return kExitOk;
    case StatusCode::RuntimeError: case StatusCode::Cancelled: return kExitRuntime;
    default: return kExitBadInput;
  }
}

namespace {

// Parses "a,b,c" into three floats.
bool parseTriple(const std::string& s, std::array<float, 3>& out) {
  float a, b, c;
  char tail;
  if (std::sscanf(s.c_str(), "%f,%f,%f%c", &a, &b, &c, &tail) != 3) return false;
  out = {a, b, c};
  return true;
}

// What CLI11 keeps as text until finishAnalysisOptions() converts it.
struct TextFlags {
  std::string size, mean, stdev, method, mode = "int8", trtVersion, allTensorRanges, sensitivity, integerConv;
  std::string gramSplit, fallbackRank, fallbackBackward, fallbackPairs, activationSplit, fallbackRecalibrate;
  std::vector<std::string> shapes;
  bool dqOnly = true;
  CLI::Option* dqOnlyOption = nullptr;
  int64_t blockSize = 128;
  CLI::Option* blockSizeOption = nullptr;
  std::vector<std::string> outputKinds;  // NAME=classes|sequence|dense
  std::string highPrecision = "fp32";
  std::string depthwiseEqualize;  // on|off
  std::string headWeightScale;    // on|off
  std::string headBiasCorrection; // on|off
  std::string depthwiseSmooth;    // on|off
  std::string pointwiseSmooth;    // on|off
  std::string remedies = "none";  // auto|none
  std::string memoryBudget;  // --memory-budget SIZE
  std::string whatIf;        // --what-if weights-float|activations-per-channel|both|none
  std::string whatIfChannelAmax;  // --what-if-channel-amax capped|scaled
  std::string realisations = "1";  // --realisations auto|N
  std::string refineRealisations;  // --calibration-refine-realisations R
  std::string refineMargin;        // --calibration-refine-margin SE
};
TextFlags g_text;
Int4Args g_int4;

}  // namespace

void addAnalysisOptions(CLI::App& cmd, AnalysisRequest& a) {
  cmd.add_option("model", a.modelPath, "ONNX model")->required();
  cmd.add_option("--calibration-data,--calibration_data_path,--calibration_data", a.data.path,
                 ".npz keyed by input names, .npy (one input) or a folder of images; none: random (meaningless scales)");
  cmd.add_option("--calibration-size,--calibration_size", a.data.maxSamples, "Use at most N samples");
  cmd.add_option("--calibration-batch-size,--calibration_batch_size", a.data.batchSize,
                 "Samples per batch when the batch dim is dynamic");
  cmd.add_option("--analysis-data", a.analysisDataPath, "Analyse on this data instead of the calibration data");
  cmd.add_option("--image-size", g_text.size, "WxH to resize images to (default: the model's input size)");
  cmd.add_option("--image-scale", a.data.image.scale, "Pixel scale before mean/std (default 1/255)");
  cmd.add_option("--mean", g_text.mean, "Per-channel mean, e.g. 0.485,0.456,0.406");
  cmd.add_option("--std", g_text.stdev, "Per-channel std, e.g. 0.229,0.224,0.225");
  cmd.add_flag("--bgr", a.data.image.bgr, "Feed channels as BGR");
  cmd.add_flag("--nhwc", a.data.image.nhwc, "The image input is NHWC");
  cmd.add_option("--seed", a.data.seed, "Seed of random calibration inputs");
  cmd.add_option("--shape", g_text.shapes,
                 "NAME=1x3x640x640: shape of an input with symbolic dims, for random calibration inputs");
  cmd.add_option("--nodes-to-exclude,--nodes_to_exclude", a.config.nodesToExclude,
                 "Regexes matched from the start of node names")->delimiter(',');
  cmd.add_option("--nodes-to-quantize,--nodes_to_quantize", a.config.nodesToQuantize, "Quantize only these")
      ->delimiter(',');
  cmd.add_option("--op-types-to-exclude,--op_types_to_exclude", a.config.opTypesToExclude, "Op types left in float")
      ->delimiter(',');
  cmd.add_option("--op-types-to-quantize,--op_types_to_quantize", a.config.opTypesToQuantize, "Quantize only these op types")
      ->delimiter(',');
  cmd.add_option("--calibration-method,--calibration_method", g_text.method,
                 "auto, max, entropy, percentile or mse (default: auto for int8, max for fp8; auto: per tensor, the "
                 "candidate clip whose consumer's output error is least)");
  cmd.add_option("--percentile", a.calibration.percentile, "Percentile of the percentile method")->check(CLI::Range(0.0, 100.0));
  cmd.add_option("--quantize-mode,--quantize_mode", g_text.mode, "int8, fp8 or int4 (weight-only MatMul/Gemm)");
  g_text.blockSizeOption = cmd.add_option("--block-size,--block_size", g_text.blockSize,
                                          "int4: block along K, a power of two >= 16 (default 128)");
  cmd.add_option("--target-snr", a.targetSnrDb, "Exclude the most sensitive nodes until every output reaches this SNR (dB)");
  cmd.add_option("--target-agreement", a.targetAgreement,
                 "Exclude the most sensitive nodes until every output with a class axis agrees with the float model "
                 "on this fraction of top-1 classes (decoded sequences for a sequence output), in [0, 1]");
  cmd.add_option("--calibration-refine", a.calibrationRefine.passes,
                 "Method auto: passes of the refinement of the clip ranges on the graph outputs, tensor by tensor "
                 "(default 0: off; a whole pass costs about 3-8x the rest of the calibration, "
                 "--calibration-refine-budget caps it)")
      ->check(CLI::Range(0, 16));
  cmd.add_option("--calibration-refine-budget", a.calibrationRefine.workCap,
                 "Method auto: the refinement's cap on cone work per run, in whole-graph runs over its check "
                 "samples (default 0: no cap, every tensor and candidate; 12 costs 1.2-2x the calibration without "
                 "the refinement)")
      ->check(CLI::Range(0.0, 1e6));
  cmd.add_option("--calibration-refine-realisations", g_text.refineRealisations,
                 "Method auto: score each refinement candidate on the mean of R realisations of the rounding "
                 "noise (the activation scales dithered as --realisations does), kept only when the mean rises by "
                 "more than 2 standard errors; costs R cone runs a candidate and R times the memory of the check "
                 "samples' tables (default 1; 0: the session's --realisations)");
  cmd.add_option("--calibration-refine-margin", g_text.refineMargin,
                 "Method auto, with --calibration-refine-realisations above 1: keep a candidate only when its mean "
                 "gain exceeds this many standard errors of the paired gain (default 2; 0: any mean gain)");
  cmd.add_option("--calibration-refine-tensors", a.calibrationRefine.maxTargets,
                 "Method auto: refine only the K tensors with the lowest layer-wise SNR (0: all)")
      ->check(CLI::Range(0, 1000000));
  cmd.add_option("--calibration-refine-candidates", a.calibrationRefine.maxCandidates,
                 "Method auto: try only the first C candidates of each tensor (amax x 2^(-1/4), x 2^(1/4), the "
                 "layer-wise winner, x 2^(-1/2), x 2^(1/2), the histogram methods; 0: all)")
      ->check(CLI::Range(0, 64));
  cmd.add_option("--fallback-candidates", a.fallbackCandidates,
                 "Fallback: nodes re-measured per step, the most sensitive first, the one whose exclusion helps "
                 "most excluded (default 6; 1: the most sensitive, unmeasured)")
      ->check(CLI::Range(1, 64));
  cmd.add_option("--fallback-curve", a.fallbackCurveSteps,
                 "Fallback: steps measured past the target for the curve of output SNR against exclusions "
                 "(default 3; the exported model stays at the first point reaching the target)")
      ->check(CLI::Range(0, 1000));
  cmd.add_option("--fallback-rank", g_text.fallbackRank,
                 "sensitivity|gain: the fallback's candidates per step, the most sensitive (default), or by the "
                 "noise their exclusion removed at an earlier step, else their sensitivity's");
  cmd.add_option("--fallback-backward", g_text.fallbackBackward,
                 "on|off: once the target is reached, re-include each excluded node, the least useful first, and keep "
                 "it quantized when the target still holds (default on)");
  cmd.add_option("--fallback-pairs", g_text.fallbackPairs,
                 "on|off: where no single candidate gains 1 dB, also measure the pairs of the candidates, both "
                 "excluded at once, and take the best pair when it helps more than twice the best single (default on)");
  cmd.add_option("--fallback-recalibrate", g_text.fallbackRecalibrate,
                 "on|off: once the target is reached, calibrate again with the chosen exclusions (method auto's "
                 "selection then sees them) and run the backward pass again (default off)");
  cmd.add_option("--realisations", g_text.realisations,
                 "auto|N: measure the output SNR in N realisations of the rounding noise: the analysis and N - 1 "
                 "quantized passes with every activation scale multiplied by (1 + 1e-6 n), n ~ N(0,1), which moves "
                 "values at a rounding tie as another runtime's float sums do; reported as mean and sd, and the "
                 "fallback's target checked on the mean (default 1). auto: 4 realisations at the all-INT8 start; 8 "
                 "(and method auto's tables scored on the mean of 4) when their worst output's SNR has an sd above "
                 "0.25 dB, else 1");
  cmd.add_option("--realisation-dither", a.realisationDither,
                 "The relative dither of the scales for --realisations (default 1e-6)")
      ->check(CLI::Range(1e-9, 1e-2));
  cmd.add_option("--activation-split", g_text.activationSplit,
                 "on|off: split each activation point's error into clip noise and rounding noise, at the tensor and "
                 "at each quantizable consumer, into report.json (a float pass more; default off)");
  cmd.add_option("--what-if", g_text.whatIf,
                 "weights-float|activations-per-channel|both|none: analysis only, a bound no engine runs: every "
                 "weight left in float, or each Conv/MatMul/Gemm input channel its own INT8 scale (the calibrated "
                 "clip carried over), or both; the fallback works under it; export refuses it (default none)");
  cmd.add_option("--what-if-channel-amax", g_text.whatIfChannelAmax,
                 "capped|scaled|searched: with --what-if activations-per-channel, each channel's amax: min(tensor "
                 "amax, channel max) (default), or the tensor amax x channel max / tensor max (the clip fraction on "
                 "every channel), or the clip of least MSE on the channel's calibration values (capped's among them)");
  cmd.add_option("--output-kind", g_text.outputKinds,
                 "NAME=classes|sequence|dense: how an output's agreement is measured (default: from its producer)")
      ->delimiter(',');
  cmd.add_flag("!--no-layerwise", a.layerwise, "Skip the layer-wise analysis");
  cmd.add_flag("!--no-sensitivity", a.sensitivity, "Skip the sensitivity sweep");
  cmd.add_option("--sensitivity", g_text.sensitivity,
                 "exact|fast|off: output sensitivity per node by re-running each node's downstream cone, "
                 "by the first-order estimate (default; the fallback re-runs its top candidates exactly), or not at all");
  cmd.add_option("--threads", a.threads, "Intra-op threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd.add_option("--memory-budget", g_text.memoryBudget,
                 "SIZE (e.g. 4G, 512M): activations the analysis may hold; above it, it keeps no whole activation "
                 "table and recomputes instead, with the same figures (default: half the available memory)");
  cmd.add_option("--all-tensor-ranges", g_text.allTensorRanges,
                 "on|off: ranges for every activation tensor in quant_cfg.json and calibration.cache, as TensorRT's "
                 "implicit INT8 needs (default on), or for the Q/DQ points only");
  cmd.add_flag("--equalize", a.equalize,
               "Cross-layer equalization of Conv/Gemm pairs (through Relu or nothing) before calibration");
  cmd.add_flag("--bias-correction,--bias_correction", a.biasCorrection,
               "Empirical bias correction of quantized Conv/Gemm after calibration");
  cmd.add_flag("--smoothquant", a.smoothQuant,
               "SmoothQuant of MatMul/Gemm that read a LayerNormalization (its scale and bias take the 1/s), "
               "alpha searched per layer unless --smoothquant-alpha");
  cmd.add_option("--smoothquant-alpha,--smoothquant_alpha", a.smoothQuantAlpha,
                 "Fixed SmoothQuant alpha in [0, 1] (default: searched per layer over 0, 0.1, ..., 1)");
  cmd.add_flag("--weight-clip-search,--weight_clip_search", a.weightClipSearch,
               "Per output channel, the clip ratio (1 down to 0.5) of the weight scale with the least layer-wise error");
  cmd.add_option("--depthwise-equalize", g_text.depthwiseEqualize,
                 "on|off: int8, rescale the input channels of depthwise Convs (at their BatchNormalization or Conv "
                 "producer) to one range, measured on the calibration data; the float model is unchanged (default on)");
  cmd.add_option("--head-weight-scale", g_text.headWeightScale,
                 "on|off: int8, per output channel of the output head (the last MatMul/Gemm before a graph output), "
                 "the weight scale x 1 +- k/256 (k <= 16) with the least error of the head's output on the calibration "
                 "data; saved in quant_cfg.json (default on)");
  cmd.add_option("--head-bias-correction", g_text.headBiasCorrection,
                 "on|off: int8, the output head's bias shifted per class by the mean of float - quantized logits on "
                 "the calibration data (the whole quantized model run); written in quantized.onnx, saved in "
                 "quant_cfg.json (default off)");
  cmd.add_option("--depthwise-smooth", g_text.depthwiseSmooth,
                 "on|off: int8, per-channel scale (an inserted Mul, folded back into the weights) on the inputs of the "
                 "other depthwise Convs where it lowers their layer-wise error; the float model is unchanged (default off)");
  cmd.add_option("--pointwise-smooth", g_text.pointwiseSmooth,
                 "on|off: int8, per-channel scale (an inserted Mul, its inverse in the weights' input channels) on the "
                 "inputs of group-1 Convs, alpha per Conv by the quantized Conv's output error, applied where it lowers "
                 "it; the float model is unchanged (default off)");
  cmd.add_option("--remedies", g_text.remedies,
                 "auto|none: int8, try depthwise and pointwise input smoothing on half of the calibration data and keep "
                 "each where it raises the worst output SNR by 0.2 dB and does not lower it on the other half (costs a "
                 "calibration and an analysis per candidate), or none: the flags alone (default). --depthwise-smooth "
                 "and --pointwise-smooth given explicitly fix that remedy");
  cmd.add_option("--high-precision-dtype,--high_precision_dtype", g_text.highPrecision,
                 "fp32, fp16 or bf16: the precision of the nodes left out of quantization (default fp32)");
  cmd.add_option("--integer-conv", g_text.integerConv,
                 "on|off: INT8 Convs summed exactly in integers where the CPU has AVX2 or AVX-512 VNNI, as TensorRT "
                 "(default on), or FP32 convolutions of the fake-quantized tensors, as ONNX Runtime runs the Q/DQ file");
  cmd.add_option("--gram-split", g_text.gramSplit,
                 "on|off: the weight/activation split of MatMuls with a 2-D weight from Gram matrices where that is "
                 "cheaper (default on; the same SNRs to float rounding), or from the products X*Wq and Xq*W");
}

// An on|off flag's text into `out` (left as it is when the flag was not given).
Status parseOnOff(const char* flag, const std::string& text, bool& out) {
  if (text.empty()) return Status::ok();
  if (text != "on" && text != "off")
    return invalidArgument(std::string(flag) + " '" + text + "': expected on or off");
  out = text == "on";
  return Status::ok();
}

Status parseRealisations(const std::string& text, AnalysisRequest& a) {
  a.realisationsAuto = text == "auto";
  if (a.realisationsAuto) return Status::ok();
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || n < 1 || n > 64)
    return invalidArgument("--realisations '" + text + "': expected auto or a count from 1 to 64");
  a.realisations = n;
  return Status::ok();
}

Status finishAnalysisOptions(CLI::App& cmd, AnalysisRequest& a) {
  if (!std::isnan(a.smoothQuantAlpha)) a.smoothQuant = true;  // --smoothquant-alpha alone asks for it
  if (!g_text.size.empty()) {
    int w = 0, h = 0;
    char tail;
    if (std::sscanf(g_text.size.c_str(), "%dx%d%c", &w, &h, &tail) != 2 || w <= 0 || h <= 0) {
      return invalidArgument("--image-size '" + g_text.size + "': expected WxH, e.g. 640x640");
    }
    a.data.image.width = w;
    a.data.image.height = h;
  }
  if (!g_text.mean.empty() && !parseTriple(g_text.mean, a.data.image.mean)) {
    return invalidArgument("--mean '" + g_text.mean + "': expected three numbers, e.g. 0.485,0.456,0.406");
  }
  if (!g_text.stdev.empty() && !parseTriple(g_text.stdev, a.data.image.std)) {
    return invalidArgument("--std '" + g_text.stdev + "': expected three numbers, e.g. 0.229,0.224,0.225");
  }
  for (const std::string& spec : g_text.shapes) {
    std::string name;
    Shape shape;
    QS_RETURN_IF_ERROR(parseShapeSpec(spec, name, shape));
    a.data.shapes[name] = shape;
  }
  for (const std::string& spec : g_text.outputKinds) {
    const size_t eq = spec.rfind('=');
    OutputKind kind = OutputKind::Auto;
    if (eq == std::string::npos || eq == 0 || !parseOutputKind(spec.substr(eq + 1), kind) || kind == OutputKind::Auto)
      return invalidArgument("--output-kind '" + spec + "': expected NAME=classes, NAME=sequence or NAME=dense");
    a.outputKinds[spec.substr(0, eq)] = kind;
  }
  QS_RETURN_IF_ERROR(parseHighPrecision(g_text.highPrecision, a.calibration.highPrecision));
  if (g_text.mode == "int4" && a.calibration.highPrecision != HighPrecision::Fp32) {
    return invalidArgument("--high-precision-dtype " + g_text.highPrecision + " does not apply to --quantize-mode int4");
  }
  if (!g_text.whatIf.empty() && !parseWhatIf(g_text.whatIf, a.whatIf))
    return invalidArgument("--what-if '" + g_text.whatIf + "': expected weights-float, activations-per-channel, both or none");
  if (!g_text.whatIfChannelAmax.empty() && !parseChannelAmax(g_text.whatIfChannelAmax, a.whatIfChannelAmax))
    return invalidArgument("--what-if-channel-amax '" + g_text.whatIfChannelAmax + "': expected capped, scaled or searched");
  if (g_text.mode == "int4" && a.whatIf != WhatIf::None)
    return invalidArgument(std::string("--what-if ") + whatIfName(a.whatIf) + " does not apply to --quantize-mode int4");
  if (g_text.mode == "int4") return finishInt4Options(a, g_text.method, g_text.blockSize, g_int4);
  if (g_text.blockSizeOption && g_text.blockSizeOption->count() > 0) return invalidArgument("--block-size needs --quantize-mode int4");
  QS_RETURN_IF_ERROR(parseQuantizeMode(g_text.mode, a.calibration.mode));
  a.calibration.method = defaultCalibrationMethod(a.calibration.mode);
  if (!g_text.method.empty()) QS_RETURN_IF_ERROR(parseCalibrationMethod(g_text.method, a.calibration.method));
  a.methodGiven = !g_text.method.empty();
  if (!g_text.trtVersion.empty()) {
    TrtVersion v;
    QS_RETURN_IF_ERROR(parseTrtVersion(g_text.trtVersion, v));
    a.trtVersion = v;
  }
  if (!g_text.allTensorRanges.empty()) {
    bool on = false;
    QS_RETURN_IF_ERROR(parseOnOff("--all-tensor-ranges", g_text.allTensorRanges, on));
    a.allTensorRanges = on;
  }
  QS_RETURN_IF_ERROR(parseOnOff("--depthwise-equalize", g_text.depthwiseEqualize, a.depthwiseEqualize));
  QS_RETURN_IF_ERROR(parseOnOff("--head-weight-scale", g_text.headWeightScale, a.headWeightScale));
  QS_RETURN_IF_ERROR(parseOnOff("--head-bias-correction", g_text.headBiasCorrection, a.headBiasCorrection));
  QS_RETURN_IF_ERROR(parseOnOff("--depthwise-smooth", g_text.depthwiseSmooth, a.depthwiseSmooth));
  QS_RETURN_IF_ERROR(parseOnOff("--pointwise-smooth", g_text.pointwiseSmooth, a.pointwiseSmooth));
  QS_RETURN_IF_ERROR(parseRemedyMode(g_text.remedies, a.remedies));
  if (!g_text.depthwiseSmooth.empty()) a.remediesFixed.push_back("depthwise_smooth");
  if (!g_text.pointwiseSmooth.empty()) a.remediesFixed.push_back("pointwise_smooth");
  if (!g_text.memoryBudget.empty()) QS_RETURN_IF_ERROR(parseByteSize(g_text.memoryBudget, a.memoryBudgetBytes));
  a.keepForToggles = false;  // nothing toggles after a CLI run but its fallback, which keeps them anyway
  if (!g_text.sensitivity.empty()) {
    if (g_text.sensitivity == "off") a.sensitivity = false;
    else if (g_text.sensitivity == "fast") a.sensitivityMethod = SensitivityMethod::Fast;
    else if (g_text.sensitivity == "exact") a.sensitivityMethod = SensitivityMethod::Exact;
    else return invalidArgument("--sensitivity '" + g_text.sensitivity + "': expected exact, fast or off");
  }
  QS_RETURN_IF_ERROR(parseOnOff("--integer-conv", g_text.integerConv, a.integerConv));
  QS_RETURN_IF_ERROR(parseOnOff("--gram-split", g_text.gramSplit, a.gramSplit));
  if (!g_text.fallbackRank.empty()) {
    if (g_text.fallbackRank != "gain" && g_text.fallbackRank != "sensitivity")
      return invalidArgument("--fallback-rank '" + g_text.fallbackRank + "': expected gain or sensitivity");
    a.fallbackRankByGain = g_text.fallbackRank == "gain";
  }
  QS_RETURN_IF_ERROR(parseOnOff("--fallback-backward", g_text.fallbackBackward, a.fallbackBackward));
  QS_RETURN_IF_ERROR(parseOnOff("--fallback-pairs", g_text.fallbackPairs, a.fallbackPairs));
  QS_RETURN_IF_ERROR(parseOnOff("--activation-split", g_text.activationSplit, a.activationSplit));
  QS_RETURN_IF_ERROR(parseOnOff("--fallback-recalibrate", g_text.fallbackRecalibrate, a.fallbackRecalibrate));
  QS_RETURN_IF_ERROR(parseRealisations(g_text.realisations, a));
  if (!g_text.refineRealisations.empty()) {
    const std::string& text = g_text.refineRealisations;
    size_t used = 0;
    int n = -1;
    try {
      n = std::stoi(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() || n < 0 || n > 64)
      return invalidArgument("--calibration-refine-realisations '" + text +
                             "': expected 0 (the session's --realisations) or a count from 1 to 64");
    a.calibrationRefine.realisations = n;
  }
  if (!g_text.refineMargin.empty()) {
    const std::string& text = g_text.refineMargin;
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() || !(v >= 0 && v <= 100))
      return invalidArgument("--calibration-refine-margin '" + text + "': expected a number of standard errors from 0 to 100");
    a.calibrationRefine.marginSe = v;
  }
  return validateRequest(a);
}

int runCli(int argc, char** argv) {
  CLI::App app{"Quantscope: INT8 quantization error analysis for ONNX models"};
  app.set_version_flag("--version", std::string("quantscope ") + kVersion);
  app.require_subcommand(1);

  InfoArgs info;
  auto* infoCmd = app.add_subcommand("info", "Describe a model: opsets, inputs, outputs, ops, parameters, unsupported ops");
  infoCmd->add_option("model", info.model, "ONNX model")->required();
  infoCmd->add_flag("--json", info.json, "Print JSON instead of text");

  RunArgs run;
  auto* runCmd = app.add_subcommand("run", "Run a model in FP32 on the CPU");
  runCmd->add_option("model", run.model, "ONNX model")->required();
  runCmd->add_option("--input,-i", run.input, ".npz keyed by the model's input names (or .npy for one input)");
  runCmd->add_option("--output,-o", run.output, ".npz to write, keyed by the model's output names");
  runCmd->add_flag("--random-input", run.randomInput, "Feed seeded inputs instead of --input: floats uniform in [0,1), token ids over their embedding table, other integers 1");
  runCmd->add_option("--seed", run.seed, "Seed of --random-input");
  runCmd->add_option("--shape", run.shapes, "NAME=1x3x640x640: shape of an input with symbolic dims (--random-input)");
  runCmd->add_option("--threads", run.threads, "Intra-op threads (default: all cores)")->check(CLI::Range(0, 1024));
  runCmd->add_option("--repeat", run.repeat, "Run R more times and print {\"ms_median\", \"ms_min\"} as JSON")
      ->check(CLI::Range(0, 1000000));
  runCmd->add_option("--profile", run.profile, "Write per-node time, FLOPs, bytes and peak memory as JSON");

  AnalyzeArgs an;
  auto* anCmd = app.add_subcommand("analyze", "Calibrate, simulate INT8/FP8 and report per-node error");
  addAnalysisOptions(*anCmd, an.request);
  anCmd->add_option("--report", an.report, "Write report.json");
  anCmd->add_flag("--progress", an.progress, "Progress on stderr even when it is not a terminal");
  anCmd->add_option("--html", an.html, "Write a self-contained HTML report");
  anCmd->add_option("--csv", an.csv, "Write the per-layer table as CSV");
  anCmd->add_option("--model-explorer", an.modelExplorer,
                    "Write per-node SNR overlays for Google Model Explorer (FILE.json: graph-wise; FILE-layerwise.json, "
                    "FILE-sensitivity.json)");

  ExportArgs ex;
  auto* exCmd = app.add_subcommand("export", "Write quantized.onnx, quant_cfg.json, calibration.cache (int8) and report.json");
  addAnalysisOptions(*exCmd, ex.request);
  exCmd->add_option("--output-dir,--output_dir", ex.target.outputDir, "Folder for the four files (created if needed)");
  exCmd->add_flag("--progress", ex.progress, "Progress on stderr even when it is not a terminal");
  exCmd->add_option("--output-path,--output_path", ex.target.outputPath, "Write the quantized model alone to this file");
  exCmd->add_option("--load-config", ex.request.loadConfig,
                    "Reuse a quant_cfg.json (scales and node states) instead of calibrating");
  exCmd->add_option("--scale-dither", ex.request.scaleDither,
                    "Measurement aid: write quantized.onnx with the activation scales of realisation K of "
                    "--realisations (each x (1 + D n), D = --realisation-dither), to run that realisation in another "
                    "runtime; only quantized.onnx changes (default 0: the scales as analysed)")
      ->check(CLI::Range(0, 1000000));
  exCmd->add_option("--scale-dither-files", ex.scaleDitherFiles,
                    "Measurement aid: also write quantized.dither<k>.onnx for k = 1..N (realisation k's activation "
                    "scales, as --scale-dither k) and dither_realisations.json (our output SNR in realisations 0..N at "
                    "the exported point) into --output-dir, from this one run (default 0)")
      ->check(CLI::Range(0, 63));
  exCmd->add_option("--calibration-cache-path,--calibration_cache_path", ex.request.calibrationCache,
                    "Take activation scales from a TensorRT calibration cache instead of calibrating");
  g_text.dqOnlyOption = exCmd->add_flag("--dq-only,!--no-dq-only", g_text.dqOnly,
                                        "Weights as int8/fp8 initializers + DequantizeLinear (default for int8) or float + Q/DQ "
                                        "(default for fp8, as ModelOpt writes it)");
  exCmd->add_flag("--use-external-data-format,--use_external_data_format", ex.request.externalData,
                  "Write the initializers to quantized.onnx.data");
  exCmd->add_option("--external-data-threshold", ex.request.externalDataThresholdBytes,
                    "Write the initializers to quantized.onnx.data when the model would pass this many bytes "
                    "(default: 2 GB - 64 MB, protobuf's limit)")
      ->check(CLI::PositiveNumber);
  exCmd->add_option("--trt-version,--trt_version", g_text.trtVersion,
                    "TensorRT release calibration.cache is for: 8.5, 8.6, 8.6.1, 10, 10.x, 10.x.y (default 10; "
                    "11 reads quantized.onnx only)");
  exCmd->add_option("--trt-calibrator", ex.request.trtAlgorithm,
                    "Algorithm in calibration.cache's header: EntropyCalibration2, MinMaxCalibration, EntropyCalibration, "
                    "LegacyCalibration (default: the method's; EntropyCalibration2 for percentile and mse)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitBadInput;
  }
  if (*infoCmd) return runInfo(info);
  if (*anCmd) {
    Status st = finishAnalysisOptions(*anCmd, an.request);
    if (!st) return reportError(st);
    if (g_int4.on) return runAnalyzeInt4(an, g_int4.options);
    return runAnalyze(an);
  }
  if (*exCmd) {
    Status st = finishAnalysisOptions(*exCmd, ex.request);
    if (!st) return reportError(st);
    if (g_int4.on) return runExportInt4(ex, g_int4.options);
    if (g_text.dqOnlyOption->count() > 0) ex.request.dqOnly = g_text.dqOnly;
    ex.request.writesCache = !ex.target.outputDir.empty();
    return runExport(ex);
  }
  if (*runCmd) {
    if (run.input.empty() && !run.randomInput) {
      return reportError(invalidArgument("run: give --input IN.npz or --random-input"));
    }
    return runRun(run);
  }
  return kExitBadInput;
}

}  // namespace qs::cli
