// Weight clip search (--weight-clip-search; issue #14 item 2, an AdaRound-lite): per output
// channel of every quantized Conv, Gemm and MatMul weight, the ratio r in {1, 0.975, ..., 0.5}
// of the channel's abs max that its per-channel scale is computed from (scale = r * amax / 127),
// chosen to minimise the layer-wise error of that output channel: the node run alone on the float
// model's inputs, its input activations fake-quantized with the session's calibrated scales, its
// weight with the candidate scales, against its float output, summed over the calibration
// batches (at most `maxBatches`). A node's output channel c reads weight channel c only, so one
// run per ratio gives every channel's error at once. r = 1 is a candidate and wins ties, so the
// layer-wise error on the searched data never grows.
//
// The float model is not changed: the ratios go to AnalysisOptions::weightClip, and from the
// session's weight scales to quantized.onnx's weight Q/DQ scales.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/analysis/quant_session.h"

namespace qs {

struct WeightClipNode {
  NodeId node = -1;
  ValueId weight = kNoValue;
  int channels = 0;
  int clipped = 0;          // channels with a ratio below 1
  double meanRatio = 1;     // over channels
  double errorBefore = 0;   // layer-wise squared error summed over the searched data, r = 1
  double errorAfter = 0;    // with the chosen ratios (<= errorBefore)
};

struct WeightClipResult {
  std::map<ValueId, std::vector<float>> ratios;  // per weight value, one ratio per channel
  std::vector<WeightClipNode> nodes;             // in topological order
};

struct WeightClipOptions {
  double minRatio = 0.5;
  int steps = 20;       // ratios 1 - k (1 - minRatio) / steps, k = 0..steps
  int maxBatches = 8;   // calibration batches searched (the first ones)
  /// When non-empty, the candidate ratios instead of the grid above; ratios above 1 widen a
  /// channel's step without clipping (another rounding of the same weights). 1 is always tried
  /// first and wins ties.
  std::vector<float> ratios;
  /// When non-empty, only these nodes are searched (the others keep ratio 1).
  std::vector<NodeId> nodes;
};

/// Searches the clip ratios of `session`'s quantized Conv/Gemm/MatMul weights (the session must be
/// calibrated). Fails Cancelled through the session's token or `progress`, or as the executor fails.
Result<WeightClipResult> searchWeightClip(const QuantSession& session, const CalibrationData& data,
                                          const WeightClipOptions& options = {}, const ProgressFn& progress = {});

/// The output heads of `session`'s plan: each quantized MatMul or Gemm with a constant weight whose
/// output reaches a graph output through nothing but an Add of a constant (its bias), Softmax,
/// LogSoftmax and copy ops (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Identity), each the
/// only reader of the previous value: a classifier's last layer, whose outputs are the class scores.
std::vector<NodeId> outputHeads(const QuantSession& session);

/// The candidates of the default head weight scale search (AnalysisRequest::headWeightScale):
/// 1, then 1 +- k / 256 for k = 1..16 (each channel's step widened or narrowed by up to 6 %).
std::vector<float> headWeightScaleRatios();

/// The default head weight scale search on `session` (calibrated): searchWeightClip over
/// outputHeads() with headWeightScaleRatios(), the ratios found merged into the session's weight
/// clip ratios (its weights quantized again). Empty result where the plan has no output head.
Result<WeightClipResult> applyHeadWeightScale(QuantSession& session, const CalibrationData& data,
                                              const ProgressFn& progress = {});

}  // namespace qs
