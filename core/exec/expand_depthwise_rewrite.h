// After the blocked regions (blocked_rewrite.h): a BlockedConv that is a 1x1 of stride 1 without pads or residual,
// whose output only a depthwise BlockedConv reads (no residual, dilation 1), both in nChw16c with the post-ops our
// AVX-512 kernels take, become one BlockedExpandDepthwise (core/kernels/expand_depthwise_blocked.h), which computes
// the expansion by bands of rows that stay in L2. The same bits as the two apart (the kernels DnnlConv runs for
// them), so no figure changes. Not where the 1x1 runs on oneDNN's jit_1x1 (QS_CONV1X1=dnnl, other bits) or the
// depthwise conv on jit_dw (QS_DW=dnnl: that path stays checked), nor with QS_EXPAND_DW=0 (A/B runs).
#pragma once

#include <vector>

#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

/// Rewrites `model` in place; `origin` and `absorbed` as rewriteBlockedRegions keeps them (the fused node stands
/// for the 1x1 and has absorbed the depthwise conv). `fused` (optional) counts the pairs. Fails only on an internal
/// inconsistency of the rewritten graph.
Status fuseExpandDepthwise(Model& model, std::vector<NodeId>& origin, std::vector<std::vector<NodeId>>& absorbed,
                           int* fused = nullptr);

}  // namespace qs
