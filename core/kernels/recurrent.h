// Recurrent layers, FP32: LSTM, GRU and RNN (ai.onnx opsets 7..21; the layout attribute from 14).
// Every direction, the activations / activation_alpha / activation_beta attributes (Sigmoid, Tanh,
// Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus),
// clip, sequence_lens, initial_h / initial_c, peepholes and input_forget (LSTM),
// linear_before_reset (GRU), optional B and optional outputs.
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

/// LSTM: inputs X, W, R, [B, sequence_lens, initial_h, initial_c, P]; outputs [Y, Y_h, Y_c].
/// Attributes are checked here (errors name the attribute and value); shapes at run time.
Result<std::unique_ptr<Kernel>> createLstm(const KernelInit& init);

/// GRU: inputs X, W, R, [B, sequence_lens, initial_h]; outputs [Y, Y_h]; linear_before_reset.
Result<std::unique_ptr<Kernel>> createGru(const KernelInit& init);

/// RNN (simple recurrence Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)): inputs X, W, R, [B,
/// sequence_lens, initial_h]; outputs [Y, Y_h].
Result<std::unique_ptr<Kernel>> createRnn(const KernelInit& init);

}  // namespace qs
