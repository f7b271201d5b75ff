// Head bias correction (--head-bias-correction; issue #14, rec's spaces): the quantized model's
// class scores are shifted per class, systematically: on rec's rendered lines the INT8 export
// raised the space's log-probability by 0.25 nats on average and the blank's by 0.02, so the
// space-vs-blank near-ties of the float model tip one way (docs/quality.md, "rec: the spaces").
// Part of it is the head's own weight rounding, the rest comes from upstream. The correction
// measures, on the calibration data, the mean per class of (float logits - quantized logits) at the
// output head's logits (the head's bias Add, or a Gemm's C) with the whole quantized model, not the
// head alone, so the upstream part is removed too, and adds it to the head's bias. Off by default:
// on rec it did not bring the decoding nearer the float model's in ONNX Runtime (docs/quality.md,
// "rec: the head's bias corrected", 2026-11-27): the spaces that differ need shifts of 0.4 to 1.6
// nats at single steps, not a mean shift.
//
// As --bias-correction's, the corrected bias belongs to the quantized model only: the session
// applies it where the head is quantized (QuantSession::setConstantCorrections, merged with any
// correction already there), and quantized.onnx writes it as the bias constant's value
// (ExportOptions::constantValues). The float model keeps its bias. Mean shifts in logit space and
// in log-probability space (after a Softmax or LogSoftmax) differ by a constant per row, the same
// for every class, so correcting the logits also corrects the log-probabilities' mean shifts.
#pragma once

#include <vector>

#include "core/analysis/quant_session.h"

namespace qs {

/// Where an output head's bias is: the constant input `input` of node `reader` (the head's bias
/// Add, or the Gemm itself with its C), whose output `logits` holds the class scores, the classes
/// on the last axis.
struct HeadBias {
  NodeId head = -1;       // the quantized MatMul/Gemm (outputHeads())
  NodeId reader = -1;     // the node that reads the bias
  size_t input = 0;       // which of its inputs is the bias
  ValueId bias = kNoValue;
  ValueId logits = kNoValue;
  int64_t classes = 0;
};

/// One corrected head: what was added to its bias, and the logits' squared error on the measured
/// data before and after (the same data: after = before less each class's squared mean shift).
struct HeadBiasShift {
  HeadBias where;
  std::vector<float> shift;   // per class, added to the bias (the mean of float - quantized logits)
  double meanAbsShift = 0;    // mean over classes of |shift|
  double maxAbsShift = 0;
  double errorBefore = 0;     // mean over logits of (quantized - float)^2
  double errorAfter = 0;
};

/// The biases of `session`'s output heads (outputHeads() of weight_clip.h) that can be corrected:
/// a float constant read by nothing else, one value per class (shape [C], or 1s then C), in the
/// head's bias Add right after it or as a Gemm's C. Heads without one are left out.
std::vector<HeadBias> headBiases(const QuantSession& session);

/// Measures the correction of each of headBiases(session) over every batch of `data`: the float
/// model, and the quantized model with the session's state (its plan's quantized nodes, scales,
/// weight ratios and constant corrections), each run whole; per class the mean over the batch's
/// rows of float - quantized logits. Nothing is changed in the session. Fails Cancelled through
/// the session's token or `progress`, or as the executor fails.
Result<std::vector<HeadBiasShift>> measureHeadBiasCorrection(const QuantSession& session, const CalibrationData& data,
                                                             const ProgressFn& progress = {});

/// Sets `shifts` in the session as constant corrections of the heads' biases, added to the value
/// the session already reads there (a --bias-correction of a Gemm's C included), the session's
/// other corrections kept. InvalidArgument, naming the node, where a shift does not fit its bias.
Status applyHeadBiasShifts(QuantSession& session, const std::vector<HeadBiasShift>& shifts);

/// measureHeadBiasCorrection() then applyHeadBiasShifts(): the default head bias correction
/// (AnalysisRequest::headBiasCorrection). Empty where the plan has no head with a bias.
Result<std::vector<HeadBiasShift>> applyHeadBiasCorrection(QuantSession& session, const CalibrationData& data,
                                                           const ProgressFn& progress = {});

}  // namespace qs
