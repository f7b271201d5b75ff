// Graph rewrites for inference, done once when an Executor is created with
// ExecutorOptions::rewrites. They never change results beyond float rounding:
//  - constant folding: a node whose inputs are all constants (not overridable initializers) is
//    run once and its outputs become constants;
//  - Conv epilogue fusion: BatchNormalization and per-channel / scalar Mul, Add, Sub, Div by a
//    constant that directly follow a Conv are folded into its weights and bias; the activations
//    after them (Relu, Clip, HardSigmoid, HardSwish, Sigmoid, LeakyRelu, the decomposed
//    x * Clip(x + 3, 0, 6) / 6 and x * HardSigmoid(x) forms of HardSwish) and scalar Mul/Add
//    after an activation become the epilogue of one ai.quantscope FusedConv node; the same after a
//    ConvTranspose (a bias Add, BatchNormalization, Relu: det's head), FusedConvTranspose (but for Sigmoid,
//    which its epilogue would run scalar);
//  - transformer forms: the ReduceMean, Sub, Pow, ReduceMean, Add(epsilon), Sqrt, Div, Mul, Add
//    chain of older exporters' LayerNorm becomes one (ai.quantscope) LayerNormalization; a MatMul
//    absorbs the Transposes feeding it (into the GEMM's transpose flags and leading dimensions),
//    a Div / Mul by a scalar after it, a bias Add, the Erf form of Gelu
//    (x * 0.5 * (1 + erf(x / sqrt 2))) and a Transpose of its result that keeps the last dim:
//    one ai.quantscope FusedMatMul (core/kernels/fused_matmul.h);
//  - a residual Add feeding a last-axis LayerNormalization becomes one ai.quantscope
//    SkipLayerNormalization (which also outputs the sum where it has other readers);
//  - det's neck: a squeeze-excitation residual Add(X, Mul(X, S)) and an FPN Add(A, Resize(U)) (nearest, whole
//    factors), and the first feeding the second, become one ai.quantscope ResidualAdd (core/kernels/residual_add.h);
//    its Concat of maps upsampled that way becomes one ai.quantscope UpsampleConcat (core/kernels/upsample_concat.h);
//  - ShuffleNet's channel shuffle: Concat(axis 1), Reshape to 5-D, Transpose(0, 2, 1, 3, 4),
//    Reshape, and the one-axis Slices reading it, become one ai.quantscope ChannelShuffle that
//    writes the slices straight from the Concat's inputs (core/kernels/channel_shuffle.h); the Shape
//    nodes of the chain read ConcatShape instead.
// A chain is only absorbed where every intermediate value has no other consumer and is not a
// graph output, so the rewritten graph computes the same graph outputs. The intermediates are
// not materialised: the executor runs the original graph whenever an observer or an input
// transform is attached (see executor.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/exec/kernel_registry.h"
#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

struct RewriteReport {
  int foldedConstantNodes = 0;  // nodes evaluated at load
  int foldedIntoConv = 0;       // BatchNormalization / Mul / Add / Sub / Div nodes folded into (transposed) Conv weights
  int fusedActivations = 0;     // activation nodes (decomposed HardSwish counts its 4 nodes) fused into (transposed) Conv
  int fusedConvs = 0;           // Conv / ConvTranspose nodes that became FusedConv / FusedConvTranspose
  int fusedMatMuls = 0;         // MatMul nodes that became FusedMatMul
  int foldedIntoMatMul = 0;     // Transpose / scale / bias / Gelu nodes absorbed by them
  int fusedLayerNorms = 0;      // decomposed LayerNorm chains that became one LayerNormalization
  int fusedSkipLayerNorms = 0;  // residual Add + LayerNormalization pairs that became one SkipLayerNormalization
  int fusedShuffles = 0;        // Concat-Reshape-Transpose-Reshape(-Slice) chains that became one ChannelShuffle
  int fusedResidualAdds = 0;    // Add(X, X * S) / Add(A, Resize(U)) (and the two chained) that became one ResidualAdd
  int fusedUpsampleConcats = 0;  // Concats of nearest-upsampled maps that became one UpsampleConcat
  /// For each node of the rewritten graph, the original node it stands for (the Conv of a fused
  /// chain), and the original nodes it absorbed (empty for untouched nodes).
  std::vector<NodeId> origin;
  std::vector<std::vector<NodeId>> absorbed;
};

/// Returns a rewritten copy of `model` (value ids of the original are kept; node ids are not:
/// see RewriteReport::origin). Kernels come from `registry`; constant folding runs them with
/// `threads`. Fails only on an internal inconsistency of the rewritten graph.
Result<std::shared_ptr<Model>> rewriteForInference(const Model& model, const KernelRegistry& registry, int threads,
                                                   RewriteReport* report);

}  // namespace qs
