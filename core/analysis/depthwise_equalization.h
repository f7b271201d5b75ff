// Activation equalization of depthwise Convs' inputs (issue #14, the default calibration's first
// step for int8): a depthwise Conv (group == input channels == output channels, weight
// [C, 1, k...]) reads a per-tensor quantized activation whose channels can differ in range by
// orders of magnitude (PP-OCRv4's stem: Conv -> BatchNormalization -> depthwise Conv, channel
// ranges 0.3 to 37). Dividing channel c of that activation by s_c at its producer and multiplying
// the depthwise weights of channel c by s_c leaves the float function unchanged, and with
// s_c = r_c / max_r (r_c: the channel's largest |x| on the calibration data) every channel spans
// the tensor's range, so the per-tensor INT8 step costs each channel what a per-channel step
// would. It is free for the weights: the depthwise weights of channel c are one output channel,
// quantized per channel, and the producer's scaled channels are its output channels (per channel
// too), so no weight's relative quantization error changes.
//
// Pairs: producer P -> depthwise Conv D, or with `throughRelu` P -> Relu | Clip(min 0, no max) -> D,
// where P is a BatchNormalization (its scale and bias take 1/s) or a Conv with a constant weight
// (its weight rows and bias take 1/s), every intermediate tensor read by the next node only and no
// graph output; P's and D's constants are read by them only. Nothing else commutes with a
// per-channel scale exactly (Hardswish, Clip at 6, a scalar Add), so nothing else is paired.
// The pipeline's default pairs direct ones only: through Relu, PaddleOCR cls lost 0.4 dB with
// percentile and 0.95 dB with auto (its 3 pairs; docs/quality.md, "Depthwise input equalization").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/depthwise_smoothing.h"
#include "core/io/calibration_data.h"
#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

struct DepthwiseEqualizedPair {
  NodeId producer = -1, consumer = -1;  // P (BatchNormalization or Conv) and the depthwise Conv
  int channels = 0;
  double rangeRatio = 0;  // largest over smallest channel range before (dead channels left out)
  std::vector<double> scale;  // s_c: the producer's channel c divided by it, the depthwise weights multiplied
};

struct DepthwiseEqualizationResult {
  std::shared_ptr<const Model> model;            // a copy with the changed constants (the input when no pair)
  std::vector<DepthwiseEqualizedPair> pairs;     // in topological order of the consumer
  std::vector<std::string> changedInitializers;  // sorted names
};

/// The channel count C of a depthwise Conv (weight [C, 1, k...] a float constant of its own,
/// group == C >= 2, a non-constant input), -1 for any other node.
int64_t depthwiseChannels(const Graph& g, const Node& n);

/// range[c] = max(range[c], max |x|) over channel c of `value`, an [N, C, ...] float tensor with
/// C == range.size(). False (range unchanged) for another dtype, rank < 2 or channel count.
bool accumulateChannelAbsMax(const Tensor& value, std::vector<double>& range);

/// The pairs of `model` (without data; rangeRatio 0).
std::vector<DepthwiseEqualizedPair> findDepthwiseEqualizablePairs(const Model& model, bool throughRelu = false);

/// Measures the channel ranges of each pair's depthwise input on the first `maxBatches` batches of
/// `data` (all when <= 0) in float and equalizes them. The input model is not changed; a model
/// without pairs comes back as is, with no pairs. Fails when the model does not run on `data`.
Result<DepthwiseEqualizationResult> equalizeDepthwiseInputs(std::shared_ptr<const Model> model,
                                                            const CalibrationData& data, int threads,
                                                            bool throughRelu = false, int maxBatches = 0,
                                                            const ProgressFn& progress = {});

/// The pairs' scales a quant_cfg.json saved (quantscope.depthwise_equalize, --load-config): each
/// saved consumer's pair (direct or through Relu) rescaled by its saved s_c, so the weights are those
/// of the run that saved them, bit for bit. Fails, naming `where` and the node, where a saved node is
/// not a depthwise Conv with a producer to pair or its scale count or values do not fit.
Result<DepthwiseEqualizationResult> applyDepthwiseEqualization(std::shared_ptr<const Model> model,
                                                               const std::vector<DepthwiseSmoothingScale>& saved,
                                                               const std::string& where);

}  // namespace qs
