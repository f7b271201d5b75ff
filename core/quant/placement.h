// Q/DQ placement: where TensorRT's explicit INT8 quantization puts QuantizeLinear ->
// DequantizeLinear pairs, following NVIDIA ModelOpt's default placement (reference section 2).
//
// Rules, per op:
//  - Conv: input 0 per-tensor + the constant weight (input 1) per channel, axis 0. ConvTranspose:
//    input 0 + weight axis 1. A Conv whose weight is not a constant (weight computed at run time)
//    gets its activation point only: there is no fixed tensor to quantize per channel. Bias float.
//  - Gemm: input A + constant B per channel (axis 0 when transB=1, else 1); a non-constant B is
//    quantized per-tensor as an activation; C stays float.
//  - MatMul: constant B -> A per-tensor + B per channel on its last axis (axis 1 for [K, N]);
//    two activations -> both per-tensor; a constant A is never an activation point (and is not a
//    weight in the table: it stays float). A matrix-vector product (M == 1 or N == 1 where the
//    shapes say so; a rank-1 operand counts as 1) stays float, as ModelOpt's GEMV detection does.
//  - Add / Mul: a residual when one non-constant input is the output of a fusible Conv group
//    (a Conv, or Conv -> BatchNormalization, whose output has this Add as its only consumer).
//    Only the other input (the skip) is quantized; the fused branch gets none. When both inputs
//    are fusible, the branch on the longer path (greater longest-path depth from the graph
//    inputs, ModelOpt's "longer path to the common ancestor") is the fused one and the other is
//    the skip; on a tie input 1 is fused. An Add/Mul with a constant input, or with no fusible
//    Conv-group input, is not a residual and is not quantized.
//  - MaxPool / AveragePool / GlobalAveragePool: input 0 when a neighbour is quantized: the anchor
//    that produces its input (looking back through fused activations, BatchNormalization and copy
//    ops to a Conv group head, Gemm, MatMul or residual Add) or an anchor among its consumers
//    (looking forward through copy ops). Anchors are Conv, ConvTranspose, Gemm, MatMul and
//    residual Add/Mul; pools and Resize are never anchors for each other, so the answer does not
//    depend on visiting order.
//  - Resize: input 0 when it directly follows a quantized Conv group (Conv [-> BatchNormalization]
//    [-> fused activation], each link the only consumer of the previous output).
//  - Concat: never itself. The activation points on values that are inputs or the output of a
//    Concat (transitively through chained Concats) share one ActivationPoint::scaleGroup so that
//    the calibrator gives them one amax and TensorRT can eliminate the Concat.
//  - Never quantized, with the reason recorded in NodeQuantState: activations that fuse into the
//    producing Conv (Relu, LeakyRelu, Sigmoid, Clip, HardSigmoid, HardSwish), Softmax, copy ops
//    (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Split, Slice, Gather, Pad, Expand, Tile,
//    Identity, Cast), LayerNormalization, Gelu, InstanceNormalization, ArgMax, Where, the members of
//    a Conv -> BatchNormalization -> activation group other than the Conv, and every op type the
//    table does not name ("op type X has no INT8 implementation in TensorRT's rules").
//
// Output-node rule ("no Q/DQ right before a network output"): points sit on node *inputs* only,
// so a Q/DQ is never placed on a graph output edge. When a point's value is itself a graph output
// (a tensor that is both returned and consumed), the Q/DQ belongs to the consumer's edge only and
// the graph output keeps the float tensor: the exporter must insert it on that edge, not on the
// value. A node whose output is a graph output is still quantized when it computes (Conv, Gemm,
// MatMul) or is a residual Add/Mul: its Q/DQs are on its inputs and its output is float. Any
// other node whose output is a graph output (pools, Resize, ConvTranspose, as ModelOpt's
// get_skipped_output_layers) would have TensorRT propagate its input Q/DQ to the network output,
// so it is not quantizable, with the reason "output node".
//
// Fp8 mode (ModelOpt's fp8.py, "GEMM only"): the same rules restricted to Conv, Gemm, MatMul and
// residual Add. Pools, Resize, ConvTranspose and residual Mul are not quantizable in fp8 (reason
// names fp8), and a Conv TensorRT has no FP8 kernel for (non-constant weight, Cout or Cin/group
// below 16, Cout % 16 != Cin/group % 16, kernel area above 32) stays float with its shape in the
// reason. Scale groups and the output-node rule are unchanged.
//
// Every walk is iterative and linear in the graph size (100k-node chains are fine).
#pragma once

#include <string>

#include "core/ir/graph.h"
#include "core/quant/quant_types.h"

namespace qs {

/// The reason given to a neighbour-dependent node (pool, Resize, residual Add/Mul) whose
/// quantized neighbour is missing or turned off.
inline constexpr const char* kNoQuantizedNeighbour = "no quantized neighbour";
/// The reason of the output-node rule.
inline constexpr const char* kOutputNode = "output node";
/// The reason of every node inside a subgraph (If branches, Loop and Scan bodies): the analysis
/// observes and quantizes main-graph values only, so these run in float.
inline constexpr const char* kInsideSubgraph = "inside a subgraph, kept in float";

/// The quantization points of `g` (finalized: producers, consumers and topoOrder filled) under the
/// TensorRT rules above, before any user configuration: `nodes` has one entry per node, every
/// quantizable node starts quantized, the others carry their reason. Points are listed in
/// topological order of their node. Never fails; unknown ops are simply not quantized.
QuantPlan planQuantization(const Graph& g, QuantMode mode);

/// Re-evaluates the nodes whose quantization depends on a neighbour (pools, Resize, residual
/// Add/Mul) after the quantized flags of other nodes changed: such a node is on exactly when it is
/// quantizable, not turned off by the user, and a neighbour it depends on is quantized; otherwise
/// it gets kNoQuantizedNeighbour. Nodes switched off for another reason (user exclusions) are left
/// alone. `plan` must come from planQuantization(g, ...). Linear in the graph size.
void refreshNeighbourDependentNodes(QuantPlan& plan, const Graph& g);

}  // namespace qs
