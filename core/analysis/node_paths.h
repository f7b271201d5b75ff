// Which node takes which path in the analysis (docs/design.md, "Analysis"): the error sums of
// an a x + b op derived from its input's, elementwise chains in one pass, depthwise Convs plane by
// plane, INT8 Convs in integer arithmetic. Chosen once per plan from the points and the options;
// the arithmetic of each path is engine code (core/kernels: elementwise_chain.h,
// depthwise_planes.h, int_conv.h) that knows nothing of the analysis.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/analysis/quant_state.h"
#include "core/kernels/elementwise_chain.h"
#include "core/kernels/gemm.h"
#include "core/kernels/int_conv.h"
#include "core/kernels/matmul_dnnl.h"

namespace qs {

/// An elementwise op with a constant, y = a x + b on its activation input `input` (-1: the node
/// is not one): its error sums follow from its input's (ErrorAccumulator::affine).
struct AffineOp {
  int input = -1;
  double a = 1, b = 0;
};

/// A run of elementwise ops over one activation and each other's outputs (Add, Sub, Mul, Div,
/// Clip with scalar constants and no points of their own; det's Mul, Add, Add, Clip, Mul, Div,
/// Mul, Add after each Conv) that the quantized pass computes in one pass over the tensor.
struct ElementwiseChain {
  ValueId input = kNoValue;
  std::vector<ChainOp> ops;  // in an order that respects their dependences
  std::vector<NodeId> nodes;  // per op: its node
  std::vector<char> stored;  // per op: its output is read outside the chain (or is a graph output)
};

/// A group-1 Conv (or tiling ConvTranspose) whose input X and weights W both carry INT8 points:
/// run as u8 x s8 -> int32.
struct IntConvNode {
  ValueId act = kNoValue;  // X's activation point
  std::shared_ptr<const IntConv> conv;
};

/// A depthwise Conv (one filter per channel) whose input X and weights W both carry points.
struct DepthwiseNode {
  WindowAttrs attrs;
  ValueId act = kNoValue;  // X's activation point
  int weight = -1;         // index into QuantState::weights / fakeWeights
};

/// A MatMul whose B is a 2-D weight with a weight point: the fake-quantized weight packed once
/// per analysis into the GEMM's 16-column panels, as the MatMul kernel packs its float weight at
/// load. Without it the quantized pass, the layer-wise Xq * Wq and the exact-sensitivity cones
/// pack Wq again on every run (per row block of every product). The products over the panels are
/// the bits of the kernel's (the same micro-kernel calls over the same K slices).
///
/// Where oneDNN runs AVX-512 matmul kernels (DnnlMatMul::preferred(), AnalysisOptions::dnnlMatMul)
/// and the weight is not tiny (dnnlPays), Wq is also held in oneDNN's layout, for the layer-wise
/// products Xq * Wq and X * Wq only (about twice the kernel's speed on such a CPU). Their sums come
/// in oneDNN's order: each element moves by float rounding (~1e-7 relative), a layer-wise SNR by
/// ~1e-5 dB. The quantized pass and the sensitivity cones keep the panels: there every quantized
/// node downstream would re-round what moved, and a rounding moved across a tie at one point
/// moves the figures of everything after it (measured on bert_encoder: graph-wise figures by up
/// to 0.04 dB inside the encoder, 0.3 dB on the 768 pooled outputs), so they keep the kernel's bits.
struct PackedMatMulWeight {
  int weight = -1;  // index into QuantState::weights / fakeWeights
  Tensor source;    // the fakeWeights entry that was packed (shares its buffer)
  PackedPanels panels;
  std::shared_ptr<const DnnlMatMul> dnnl;  // Wq in oneDNN's layout as well (layer-wise products), or null
  /// Whether `wq` is the tensor packed (a weight clip search may have replaced the entry since).
  bool packs(const Tensor& wq) const { return wq.sharesBufferWith(source) && wq.shape() == source.shape(); }
  /// Whether a weight of K x N goes to oneDNN (with it enabled): below 64 rows or columns the
  /// call's fixed cost outweighs the gain (cls's 200 x 2 classifier keeps the kernel).
  static bool dnnlPays(int64_t K, int64_t N) { return K >= 64 && N >= 64; }
};

/// The paths, per node (null or -1: the plain one).
struct NodePaths {
  std::vector<AffineOp> affine;
  std::vector<std::shared_ptr<const ElementwiseChain>> chainAt;  // the chain the node heads
  std::vector<std::shared_ptr<const DepthwiseNode>> dwConv;
  std::vector<std::shared_ptr<const IntConvNode>> intConv;  // null: FP32 on fake-quantized inputs
  std::vector<std::shared_ptr<const PackedMatMulWeight>> packedWq;  // null (or absent): Wq packed per run
  /// Add, Sub, Mul, Div of activations (not a x + b): where a pass compares the node's output,
  /// computed in pieces and compared while each piece is in cache (FakeQuantTransform::runNode,
  /// runComparedBinary); the ChainOp::Kind + 1 per node, 0 (or absent): the kernel, then the observer.
  std::vector<signed char> binary;
  /// MatMuls with a weight point on a 2-D B take their weight/activation split from Gram matrices
  /// where that pays (core/analysis/split_gram.h; AnalysisOptions::gramSplit).
  bool gramSplit = false;
};

/// Every one of `nodes` nodes on the plain path: fake-quantized inputs, FP32 kernel.
inline NodePaths plainPaths(size_t nodes) {
  NodePaths p;
  p.affine.resize(nodes);
  p.chainAt.resize(nodes);
  p.dwConv.resize(nodes);
  p.intConv.resize(nodes);
  p.packedWq.resize(nodes);
  return p;
}

/// Elementwise ops with a scalar constant and no point of their own: y = a x + b.
std::vector<AffineOp> findAffineOps(const Graph& g, const QuantState& s);
/// Elementwise chains: from an activation, every op over it and the chain's values (earliest in
/// topological order first) that has no point of its own and only scalar constants besides, up
/// to kMaxChainOps (a longer run of such ops makes several chains). Chains of one op are dropped.
std::vector<std::shared_ptr<const ElementwiseChain>> findElementwiseChains(const Graph& g, const QuantState& s);
/// Add, Sub, Mul, Div nodes of the default domain with two inputs, not a x + b (`affine`): the
/// ChainOp::Kind + 1 of each such node, 0 for the others (NodePaths::binary).
std::vector<signed char> findBinaryOps(const Graph& g, const std::vector<AffineOp>& affine);
/// Depthwise Convs with points on X and W: their layer-wise runs go plane by plane (any CPU,
/// any mode).
std::vector<std::shared_ptr<const DepthwiseNode>> findDepthwiseConvs(const Graph& g, const QuantPlan& plan,
                                                                      const QuantState& s);
/// Convs with INT8 points on X and W that run as integer Convs. Only where the AVX-512 VNNI or
/// AVX2 GEMM makes them faster than FP32 (the portable integer path is not): all null elsewhere
/// and in FP8 mode.
std::vector<std::shared_ptr<const IntConvNode>> findIntConvs(const Graph& g, const QuantPlan& plan,
                                                             const QuantState& s);

/// MatMuls (ai.onnx) with a weight point on a 2-D float B: their fake-quantized weights packed
/// (one PackedMatMulWeight per node, null elsewhere), and also into oneDNN's layout where `dnnl`
/// and DnnlMatMul::preferred() and the weight is large enough (PackedMatMulWeight::dnnlPays).
/// Costs one more copy of those weights (two with oneDNN's).
std::vector<std::shared_ptr<const PackedMatMulWeight>> findPackedMatMulWeights(const Graph& g, const QuantState& s,
                                                                               bool dnnl = false);

/// Y = A * Wq as the MatMul kernel computes it, over `pw`'s panels: `a` the (already
/// fake-quantized) A [..., M, K], float. False, touching nothing, where the kernel would take
/// another route (A not float or of rank below 2, K not Wq's, two rows or fewer).
bool runPackedMatMul(const PackedMatMulWeight& pw, const Tensor& a, int threads, Tensor& y);

/// The node on its untransformed `inputs` as an integer Conv (what to compute as in
/// QConvOutputs; a reference must hold the Conv's output element count); false where it does
/// not apply (no activation scale, an input qconv refuses, ...): the caller then runs the FP32
/// kernel on fake-quantized inputs.
bool runIntConvNode(const QuantState& s, const IntConvNode& ic, std::span<const Tensor* const> inputs,
                    const QConvOutputs& out, int64_t referenceElements = 0);
/// A depthwise Conv plane by plane, X fake-quantized per plane (depthwisePlanes: with `y`, the
/// quantized node; without, the layer-wise runs into sums[0..2]). False where it does not apply
/// (no activation scale, shapes the Conv kernel would refuse): the caller then runs the node.
bool runDepthwiseNode(const QuantState& s, const DepthwiseNode& dw, std::span<const Tensor* const> inputs, Tensor* y,
                      const Tensor* ref, ErrorAccumulator* const sums[3]);

}  // namespace qs
