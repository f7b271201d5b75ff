// Per-channel input smoothing of depthwise Convs whose producer cannot take a per-channel scale
// (issue #14; the complement of depthwise_equalization.h, which folds the scale into a
// BatchNormalization or Conv producer). PP-LCNetV3 (PaddleOCR's rec and det backbones) feeds 13 of
// its 14 depthwise Convs with `a * hardswish(x) + b` (scalar a, b): no producer constant takes
// 1/s_c, so a Mul node is inserted on the depthwise Conv's input edge, SmoothQuant's construction
// (ModelOpt inserts such a Mul for the inputs it cannot fold):
//
//     x -> Mul(1 / s) -> [per-tensor input quantizer] -> depthwise Conv(w_c * s_c)
//
// The Mul runs in float before the QuantizeLinear in quantized.onnx (the exporter writes the node:
// ExportOptions::insertedNodes), so it is part of the exported model and the float function is
// unchanged up to rounding. The depthwise weights of channel c are one output channel, quantized
// per channel, so s_c costs the weights nothing.
//
// s_c = (r_c / max_r)^alpha (r_c: channel c's largest |x| on the calibration data; at least
// 1/1024), alpha from {0.25, 0.5, 0.75, 1} by the consumer's layer-wise output error on the
// calibration data: per channel, the energy of the (scaled) depthwise filter times the squared
// INT8 error of the sampled input values x_c / s_c, under the per-tensor step that minimises it
// over clip values of 0.2 to 1 times the tensor's max (the calibrator's clip is not known here). A
// Conv is smoothed only where the best alpha lowers that error to at most `maxErrorRatio` of the
// unsmoothed input's; a white-noise proxy (the filter's energy times the input's error) stands for
// the Conv's output error, exact up to the correlation of the error over the filter's window.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/analysis/batch_schedule.h"
#include "core/exec/executor.h"
#include "core/io/calibration_data.h"
#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

struct DepthwiseSmoothedInput {
  NodeId consumer = -1;  // the depthwise Conv (in the smoothed model)
  NodeId mul = -1;       // the inserted Mul (in the smoothed model)
  int channels = 0;
  double alpha = 0;
  double rangeRatio = 0;                   // largest over smallest channel range (dead channels left out)
  double errorBefore = 0, errorAfter = 0;  // the layer-wise proxy, s = 1 and the chosen s
  std::vector<double> scale;               // s per channel (the Mul multiplies by 1 / s)
  bool pointwise = false;   // a group-1 Conv's input (pointwise_smoothing.h): s scales the weights' axis 1
  bool weightTerm = false;  // pointwise: s_c = r_c^alpha / w_c^(1 - alpha), SmoothQuant's form (else r_c^alpha)
};

/// A smoothing to re-apply (quant_cfg.json's "depthwise_smooth"): the depthwise Conv by name and s.
struct DepthwiseSmoothingScale {
  std::string consumer;
  std::vector<double> scale;
};

struct DepthwiseSmoothingOptions {
  int maxBatches = 0;           // calibration batches read (all when <= 0)
  int samplesPerChannel = 4096;  // input values kept per channel for the error
  double maxErrorRatio = 0.9;   // smooth only where the error falls to this fraction or below
  /// Depthwise Convs left alone (the consumers of depthwise input equalization's pairs).
  std::vector<NodeId> skip;
};

struct DepthwiseSmoothingResult {
  std::shared_ptr<const Model> model;            // a copy with the Mul nodes and scaled weights (the input when none)
  std::vector<DepthwiseSmoothedInput> inputs;    // in topological order of the consumer
  std::vector<std::string> changedInitializers;  // sorted: the scaled depthwise weights
  std::vector<std::string> insertedNodes;        // the Mul nodes' names, in topological order
  std::vector<std::string> skipped;              // "node: reason" for depthwise Convs not smoothed
};

/// Measures each candidate depthwise Conv's input on `data` in float, chooses s per channel and
/// inserts the Mul where it pays. The input model is not changed. Fails when the model does not
/// run on `data`, Cancelled through `progress`.
Result<DepthwiseSmoothingResult> smoothDepthwiseInputs(std::shared_ptr<const Model> model, const CalibrationData& data,
                                                       int threads, const DepthwiseSmoothingOptions& options = {},
                                                       const ProgressFn& progress = {});

/// Re-applies saved smoothings to `model` (the same Mul nodes, names and weights as the run that
/// chose `scales`, bit for bit). InvalidArgument naming `where` when a consumer is not a depthwise
/// Conv of `model` or its channel count differs.
Result<DepthwiseSmoothingResult> applyDepthwiseSmoothing(std::shared_ptr<const Model> model,
                                                         const std::vector<DepthwiseSmoothingScale>& scales,
                                                         const std::string& where);

/// How applySavedSmoothing() re-applies one kind of saved smoothing: its quant_cfg.json key and the
/// consumer it expects (for the error), the consumer's channel count (-1 for another node), the
/// weight axis s scales and the Mul's name suffix.
struct SavedSmoothingForm {
  std::string key;       // "depthwise_smooth"
  std::string consumer;  // "depthwise Conv"
  std::string channels;  // "channels"
  int64_t (*channelsOf)(const Graph& g, const Node& n) = nullptr;
  int weightAxis = 0;
  std::string suffix;  // "_dwsmooth"
};

/// Re-applies saved smoothings of `form` to `model` (the same Mul nodes, names and weights as the
/// run that chose `scales`, bit for bit); the shared body of applyDepthwiseSmoothing() and
/// applyPointwiseSmoothing(). InvalidArgument naming `where` when a consumer is not a node of
/// `form` with as many channels as its scale, or a scale is not a positive number.
Result<DepthwiseSmoothingResult> applySavedSmoothing(std::shared_ptr<const Model> model,
                                                     const std::vector<DepthwiseSmoothingScale>& scales,
                                                     const std::string& where, const SavedSmoothingForm& form);

/// Inserts Mul(x, 1/s) on Conv `conv`'s input edge of `g` (node and values named after the Conv
/// and x with `suffix`, unique in `nodeNames`, which gains the node) and multiplies axis
/// `weightAxis` of its weights by s: 0 for a depthwise Conv, 1 for a group-1 Conv. Not finalized;
/// records the node and the weight in `res`. The shared construction of depthwise and pointwise smoothing.
void insertSmoothingMul(Graph& g, NodeId conv, const std::vector<double>& s, int weightAxis, const std::string& suffix,
                        std::set<std::string>& nodeNames, DepthwiseSmoothingResult& res);

}  // namespace qs
