// ShuffleNet's channel shuffle as one pass (issue 13, docs/performance.md "shufflenet_v2_x1_0: the
// channel shuffle in one pass"). Both ops are in the ai.quantscope domain, opset 1, and are made only
// by the executor's graph rewrites (core/exec/graph_rewrites.h) from
//   Concat(axis 1) of X1..Xk -> Reshape(s1) to 5-D -> Transpose(perm 0,2,1,3,4) -> Reshape(s2) -> S
// and the Slices that read S (ShuffleNetV2's chunk of the next unit into two halves):
//  - ChannelShuffle: inputs X1..Xk (attribute inputs = k), s1, s2, then per slice (attribute
//    slices = m) starts, ends, axes (optional), steps (optional), as Slice's inputs (opset >= 10).
//    m = 0: one output, S. m > 0: the m Slices of S, each of one axis with step 1, and S is never
//    written. The semantics are those of the replaced nodes for any inputs (the 5-D reshape of the
//    flat concatenation, its dims 1 and 2 swapped, reshaped by s2; ONNX's clamping of starts and
//    ends); with the attribute same_shape = 1 (the rewrite gave S's Shape readers the Concat's
//    shape), S's shape must equal the Concat's, else the run fails naming both shapes. Bits equal
//    to the replaced nodes' (a permutation of copies).
//  - ConcatShape: inputs X1..Xk -> int64 [rank]: the shape of their Concat over the attribute axis,
//    i.e. Shape(Concat(X1..Xk)) without the concatenation (what the shuffle's Shape nodes read).
#pragma once

#include <vector>

#include "core/exec/kernel.h"

namespace qs {

inline constexpr const char* kChannelShuffleOp = "ChannelShuffle";
inline constexpr const char* kConcatShapeOp = "ConcatShape";

/// The table rows of these ops (appended to the nn group's table).
std::vector<KernelEntry> channelShuffleKernels();

}  // namespace qs
