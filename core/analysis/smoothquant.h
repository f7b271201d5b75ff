// SmoothQuant (Xiao et al. 2023, "SmoothQuant: Accurate and Efficient Post-Training Quantization
// for Large Language Models", eq. 4; ModelOpt's smoothquant and AWQ's auto_scale are the
// reference): for a MatMul/Gemm y = X W with constant W, per input channel j,
// s_j = max|X_j|^a / max|W_j|^(1-a), and y = (X / s)(s W): the activation's outlier channels
// move into the weights, which are quantized per output channel.
//
// The 1/s is folded into the producer of X, so the float function is unchanged up to rounding:
// a LayerNormalization (scale and bias divided by s) whose output only MatMul/Gemm consumers
// with constant weights of their own read (Shape nodes aside), all smoothed with one s (q/k/v
// and fused qkv projections share their LayerNormalization). A scale or bias shared with other
// nodes through an Identity (what torch.onnx writes for equal initializers) becomes a Constant
// node of its own. Other producers are not smoothed (no Mul is inserted): listed as skipped.
//
// alpha: fixed, or per group the value of {0, 0.1, ..., 1} that minimises the layer-wise error of
// the consumers (X/s fake-quantized per tensor with its max, s W per output channel, against the
// float X W) on rows sampled from the calibration data; in the search a group is smoothed only
// where some alpha lowers that error below the unsmoothed one.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/analysis/quant_session.h"

namespace qs {

struct SmoothedGroup {
  NodeId producer = -1;             // the LayerNormalization
  std::vector<NodeId> consumers;    // the smoothed MatMul/Gemm nodes
  int channels = 0;
  double alpha = NAN;
  double maxLogScale = 0;           // max_j |log s_j|
  double errorBefore = 0, errorAfter = 0;  // layer-wise squared error on the sampled rows, s = 1 and chosen s
};

struct SmoothQuantResult {
  std::shared_ptr<const Model> model;            // a copy of the session's model, smoothed
  std::vector<SmoothedGroup> groups;             // in topological order
  std::vector<std::string> changedInitializers;  // sorted
  std::vector<std::string> skipped;              // "node: reason" for quantized MatMul/Gemm not smoothed
};

struct SmoothQuantOptions {
  double alpha = NAN;   // NaN: search per group
  int maxBatches = 8;   // calibration batches read (the first ones)
  int maxRows = 512;    // rows of X kept per group for the alpha search
};

/// Smooths the quantized MatMul/Gemm nodes of `session`'s model that read a LayerNormalization
/// (the session must be calibrated for its plan; its scales are not used). Fails Cancelled
/// through the session's token or `progress`, or as the executor fails.
Result<SmoothQuantResult> smoothQuant(const QuantSession& session, const CalibrationData& data,
                                      const SmoothQuantOptions& options = {}, const ProgressFn& progress = {});

}  // namespace qs
