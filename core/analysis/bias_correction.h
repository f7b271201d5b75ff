// Empirical bias correction (Nagel et al. 2019, section 4.2; AIMET's bias_correction.py): the
// quantization error of a layer's weights and input shifts the mean of its output per channel,
// E[y_q - y] != 0, and every layer after it sees the shift. Measured on the calibration data
// (the float model's activations, each quantized node run alone on its float inputs with its
// points on, as the layer-wise analysis does), the mean shift per output channel is subtracted
// from the node's bias, so that the quantized node's output has the float output's mean.
//
// The correction belongs to the quantized node only (it is meant to hold in the quantized model;
// in the float model it would shift the output): the session applies it where its node is
// quantized (QuantSession::setConstantCorrections), and quantized.onnx writes it for the nodes it
// quantizes, the original bias for the others (core/export/bundle.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/analysis/quant_session.h"

namespace qs {

/// One corrected node: the mean error E[y_q - y] per output channel that was subtracted.
struct BiasShift {
  NodeId node = -1;
  std::vector<float> shift;
  double meanAbsShift = 0;  // mean over channels of |shift|
};

struct BiasCorrectionResult {
  std::vector<ConstantCorrection> corrections;   // the corrected biases (BN means), for setConstantCorrections
  std::vector<BiasShift> nodes;                  // in topological order
  std::vector<std::string> changedInitializers;  // sorted names of the biases (BN means) changed
  std::vector<std::string> skipped;              // quantized Conv/Gemm/MatMul without a correctable bias, by name
};

/// Measures the bias correction of every quantized Conv and Gemm with a constant bias
/// of its own (one value per output channel), or, for a Conv without bias whose output only a
/// BatchNormalization reads, into that BatchNormalization's running mean, in `session`'s plan, with `session`'s weight scales
/// and the activation scales its calibration gives (the session must be calibrated; scales loaded
/// with setActivationAmax are not seen). Runs the float model over every batch of `data` once.
/// Fails Cancelled through the session's token or `progress`, or as the executor fails.
Result<BiasCorrectionResult> correctBias(const QuantSession& session, const CalibrationData& data,
                                         const ProgressFn& progress = {});

}  // namespace qs
