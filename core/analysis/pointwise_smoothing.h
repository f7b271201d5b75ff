// Per-channel input smoothing of group-1 Convs (pointwise 1x1 and k x k; issue #14, SmoothQuant for
// Convs with a per-layer alpha search). The sibling of depthwise_smoothing.h, with the same
// construction: a Mul on the Conv's input edge and the weights scaled, so that the float function is
// unchanged up to rounding and the Mul is part of the exported quantized model:
//
//     x -> Mul(1 / s) -> [per-tensor input quantizer] -> Conv(W[o, c, ...] * s_c)
//
// PP-LCNetV3 (PaddleOCR's rec and det backbones) feeds its pointwise Convs with `a * hardswish(x) + b`
// (scalar a, b) whose channels' ranges differ by decades, so the per-tensor INT8 step of the input is
// set by the widest channel. Unlike a depthwise Conv, a group-1 Conv's weights are quantized per
// output channel, so s is not free for them: input channel c's weights grow by s_c and may set the
// step of an output channel. Hence the choice by the quantized Conv's own output error, activation
// AND weight quantization together:
//
//   error(s) = || Q_w(W * s) Q_x(X / s) - W X ||^2 over sampled output positions of the calibration
//   data (X: the input patches there, im2col), Q_w per output channel at its max, Q_x per tensor at
//   the clip of 0.2 to 1 times the tensor's max that minimises the same error (the calibrator's
//   `auto` also chooses the clip by the consumer's output error).
//
// Candidates: s_c = r_c^alpha (r_c: channel c's largest |x|) and SmoothQuant's r_c^alpha / w_c^(1-alpha)
// (w_c: the largest |W[:, c]|), alpha in {0.25, 0.5, 0.75, 1}, s normalised to a largest of 1 and at
// least 1/1024. A Conv is smoothed only where the best candidate's error is at most `maxErrorRatio`
// of the unsmoothed Conv's (s = 1, same clip search).
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

struct PointwiseSmoothingOptions {
  int maxBatches = 0;         // calibration batches read (all when <= 0)
  int samples = 256;          // output positions (input patches) kept per Conv over all batches
  double maxErrorRatio = 0.9;  // smooth only where the error falls to this fraction or below
  std::vector<NodeId> skip;   // Convs left alone
};

/// The input channel count of `n` when it is a 2-D group-1 Conv (default domain) whose weight is
/// its own float constant and whose input is computed, else -1.
int64_t pointwiseChannels(const Graph& g, const Node& n);

/// Measures each candidate group-1 Conv's input on `data` in float, chooses s per input channel and
/// inserts the Mul where it pays (DepthwiseSmoothedInput::pointwise set; names "<conv>_pwsmooth").
/// The input model is not changed. Fails when the model does not run on `data`, Cancelled through
/// `progress`.
Result<DepthwiseSmoothingResult> smoothPointwiseInputs(std::shared_ptr<const Model> model, const CalibrationData& data,
                                                       int threads, const PointwiseSmoothingOptions& options = {},
                                                       const ProgressFn& progress = {});

/// Re-applies saved smoothings (quant_cfg.json's "pointwise_smooth") to `model`: the same Mul nodes,
/// names and weights as the run that chose `scales`, bit for bit, when applied to the same model
/// (after the same depthwise smoothing). InvalidArgument naming `where` when a consumer is not a
/// group-1 Conv of `model`, its input channel count differs or a scale is not a positive number.
Result<DepthwiseSmoothingResult> applyPointwiseSmoothing(std::shared_ptr<const Model> model,
                                                         const std::vector<DepthwiseSmoothingScale>& scales,
                                                         const std::string& where);

}  // namespace qs
