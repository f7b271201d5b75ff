// Kernels of the blocked layout (issue 13, docs/performance.md "Blocked regions"): inside a chain
// of convolutions that oneDNN runs, activations stay in oneDNN's nChw8c layout (nChw16c on CPUs
// where oneDNN runs AVX-512: DnnlConv::preferredBlock), held as a 5-D tensor [N, C/b, H, W, b]
// with b the block, instead of being reordered from and to NCHW around every Conv. A channel count
// C that is not a whole number of blocks (mobilenet_v2's 24 in nChw16c) is padded to ceil(C/b)
// blocks, as oneDNN's padded dims: the tensor is [N, ceil(C/b), H, W, b], the nodes carry the
// logical C (BlockedConv's W, the channels attribute of the exits), the pad lanes enter as zeros
// and stay finite (zero through our kernels; a Sigmoid makes them 0.5), which oneDNN's convs
// multiply by the zero pad of their weights. The
// nodes are made only by the executor's blocked-region rewrite (core/exec/blocked_rewrite.h), in
// unobserved inference with library kernels on; every value an observer or a graph output could
// see is plain NCHW. All ops are in the ai.quantscope domain, opset 1:
//  - ToNchw8c: X [N, C, H, W] -> [N, ceil(C/b), H, W, b], b the attribute block (8 or 16; 8 when
//    absent), pad lanes zero;
//  - FromNchw8c: the inverse (b from X's last dimension; C the attribute channels, or all lanes
//    when absent or 0);
//  - BlockedConv: a Conv (FusedConv attributes: activations, activation_params, group; block as
//    above) on blocked X and Y, with constant W [M, C/group, kH, kW] (group 1 or depthwise, C and M
//    multiples of 8, padded to b; or multiples of b channels per group: DnnlConv::blockedShapeSupported),
//    optional constant B and an optional 4th input R (blocked, Y's shape) added after the bias,
//    then Relu when the attribute residual_relu is 1 (the residual Add and Relu of a ResNet block);
//    with the attribute plain_input 1, X is plain [N, C, H, W] with C 1..7 and group 1 (a stem on
//    the image: DnnlConv::plainInputSupported), only Y blocked;
//  - BlockedBatchNorm: y = x * scale[c] + shift[c] (then Relu when the attribute relu is 1), scale
//    and shift of ceil(C/b) * b values (an inference BatchNormalization folded at rewrite time,
//    zeros on the pad lanes);
//    with the attribute concat = k > 1, the inputs are X1..Xk, scale, shift and x is their
//    concatenation over the channels (a densenet layer's Concat, read in place instead of written first);
//  - BlockedMaxPool / BlockedAveragePool: 2-D MaxPool (no Indices) / AveragePool with the ONNX
//    attributes (kernel_shape, strides, pads, auto_pad, dilations, ceil_mode, count_include_pad),
//    blocked X and Y (b from X's last dimension), the bits of the plain kernels;
//  - BlockedGlobalAveragePool: blocked X -> plain [N, C, 1, 1] (the same bytes as [N, C/b, 1, 1, b]
//    but for the pad lanes, dropped; C as FromNchw8c's), where a region ends (the classifier head, a
//    squeeze-and-excitation branch);
//  - BlockedChannelScale: blocked X times S, one value per image and channel ([N, C, 1, 1], or
//    blocked): the Mul of a squeeze-and-excitation block.
// Concat over axis 1, Add of two blocked tensors of one shape, a zero Pad (as Identity) and the
// unary activations (Relu, Clip, Sigmoid, HardSigmoid, HardSwish, LeakyRelu) run on blocked
// tensors as they are (their kernels see a 5-D tensor).
#pragma once

#include <vector>

#include "core/exec/kernel.h"

namespace qs {

inline constexpr const char* kToBlockedOp = "ToNchw8c";
inline constexpr const char* kFromBlockedOp = "FromNchw8c";
inline constexpr const char* kBlockedConvOp = "BlockedConv";
inline constexpr const char* kBlockedBatchNormOp = "BlockedBatchNorm";
inline constexpr const char* kBlockedMaxPoolOp = "BlockedMaxPool";
inline constexpr const char* kBlockedAveragePoolOp = "BlockedAveragePool";
inline constexpr const char* kBlockedGlobalAveragePoolOp = "BlockedGlobalAveragePool";
inline constexpr const char* kBlockedChannelScaleOp = "BlockedChannelScale";

/// The table rows of these ops (appended to the nn group's table).
std::vector<KernelEntry> blockedLayoutKernels();

/// x [N, C, HW] -> y [N, ceil(C/block), HW, block] (pad lanes zero) and back (pad lanes dropped),
/// block 8 or 16 (exposed for tests).
void toNchw8c(const float* x, int64_t N, int64_t C, int64_t HW, float* y, int threads, int block = 8);
void fromNchw8c(const float* x, int64_t N, int64_t C, int64_t HW, float* y, int threads, int block = 8);

}  // namespace qs
