// Blocked regions (issue 13, docs/performance.md "Blocked regions"): after the graph rewrites, a
// connected chain of convolutions that oneDNN runs keeps its activations in oneDNN's blocked
// layout, nChw8c or nChw16c (core/kernels/blocked_layout.h), with reorders only at the chain's
// borders, instead of reordering NCHW -> blocked before every Conv and back after it. In a region:
//  - Conv / FusedConv with constant W, input and output channels multiples of 8, group 1,
//    depthwise, or groups of multiples of 8 channels (DnnlConv::blockedShapeSupported) become
//    BlockedConv; a residual Add right after one (same shapes, no other consumer; with or without
//    a Relu after it) is fused into it (oneDNN's sum and eltwise post-ops);
//  - inference BatchNormalization with constant parameters (and a Relu after it) becomes
//    BlockedBatchNorm, which reads a Concat of the region in place when it is the Concat's only
//    reader (a DenseNet layer's input); 2-D MaxPool / AveragePool behind a blocked value become BlockedMaxPool /
//    BlockedAveragePool (densenet's transitions); GlobalAveragePool becomes
//    BlockedGlobalAveragePool, whose [N, C, 1, 1] output is plain (the same bytes), so the head
//    and squeeze-and-excitation branches leave the region without a reorder; the SE block's Mul
//    of a blocked value by such an [N, C, 1, 1] becomes BlockedChannelScale;
//  - Concat over axis 1 (every input a multiple of 8 channels), Add of two blocked values of one
//    shape, unary activations (Relu, Clip, Sigmoid, HardSigmoid, HardSwish, LeakyRelu), Identity
//    and a Pad of zeros (as Identity) stay as they are, on the 5-D blocked tensors.
// The block of a region: DnnlConv::preferredBlock() (16 where oneDNN runs AVX-512) when every
// member fits it, else 8. Channel counts that are multiples of 8 but not of the block, and over
// one block (mobilenet_v2's 24-channel stage in nChw16c), fit with their tail padded to a whole
// block (blocked_layout.h); a Concat's inputs must be whole blocks; a grouped conv's channels per
// group too, but for 8 per group in blocks of 16 (regnet), run as block-diagonal groups of 16.
// A region is kept only when it holds at least two convolutions with a window larger than 1x1
// (depthwise and grouped ones count where the output's H x W is known: ResNet, DenseNet,
// MobileNetV2, RegNet bodies at 224x224, not PaddleOCR's dynamic sizes) and at most one border
// value per such conv; chains of 1x1 convolutions keep the Conv kernel's own choice of backend.
// A stem (a group-1 Conv of fewer than 8 input channels, the image's RGB, and output channels
// in whole blocks) joins the region its output feeds as a BlockedConv that reads plain NCHW and
// writes the blocked layout (its input is no border); it does not count towards the rule above.
// Channel counts that are not multiples of 8 (shufflenet_v2's 58 and 116-channel branches) and the
// shuffle's Reshape-Transpose-Reshape are borders. Every value that is a graph output or read
// outside the region is given back in NCHW under its own id (a FromNchw8c node), so the rewritten
// graph computes the same outputs. Only for ExecutorOptions::rewrites together with
// libraryKernels, i.e. unobserved inference (see executor.h).
#pragma once

#include <vector>

#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

struct BlockedRegionReport {
  int regions = 0;        // connected regions kept
  int convs = 0;          // convolutions running blocked
  int residualAdds = 0;   // Add (+ Relu) nodes fused into a BlockedConv
  int reorders = 0;       // ToNchw8c + FromNchw8c nodes at the borders
  int block = 8;          // channels per block: 8 (nChw8c) or 16 (nChw16c), DnnlConv::preferredBlock()
  int narrowRegions = 0;  // regions in nChw8c although block is 16 (a member does not fit 16)
  int pools = 0;          // MaxPool / AveragePool / GlobalAveragePool running blocked
  int scales = 0;         // squeeze-and-excitation Muls running blocked
  int stems = 0;          // BlockedConvs reading plain NCHW (a stem on the image: no reorder in)
  int concatsRead = 0;    // Concats read in place by the BlockedBatchNorm after them (DenseNet layers)
  int expandDepthwise = 0;  // 1x1 + depthwise BlockedConv pairs run as one BlockedExpandDepthwise (expand_depthwise_rewrite.h)
};

/// Rewrites `model` (the output of rewriteForInference) in place. `origin` and `absorbed` (one entry
/// per node, see RewriteReport) are updated to the new node list: fused nodes are added to their
/// conv's `absorbed`, a reorder stands for the node it serves. Does nothing when oneDNN is not
/// built in. Fails only on an internal inconsistency of the rewritten graph.
Status rewriteBlockedRegions(Model& model, std::vector<NodeId>& origin, std::vector<std::vector<NodeId>>& absorbed,
                             BlockedRegionReport* report = nullptr);

}  // namespace qs
