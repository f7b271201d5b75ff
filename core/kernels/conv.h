// Conv (ai.onnx opsets 1..21, FP32) and the sliding-window geometry shared by Conv,
// ConvTranspose, MaxPool and AveragePool: attribute parsing, auto_pad / ceil_mode
// resolution, im2col and col2im over 1-D..3-D spatial shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/exec/kernel.h"

namespace qs {

/// Window attributes as written on the node (empty vectors mean "default").
struct WindowAttrs {
  std::vector<int64_t> kernelShape;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;  // [b0, b1, ..., e0, e1, ...]
  std::string autoPad = "NOTSET";  // NOTSET, SAME_UPPER, SAME_LOWER, VALID
  int64_t group = 1;
};

/// Reads kernel_shape, strides, dilations, pads, auto_pad (and group when `withGroup`),
/// recording an error in `a` for invalid values (non-positive strides, unknown auto_pad, ...).
WindowAttrs readWindowAttrs(AttrReader& a, bool withGroup);

/// Resolved geometry of a sliding-window op over 1..3 spatial dims. Arrays are padded to
/// 3 dims with leading unit dims (index 2 is the innermost / W dim) so that one loop nest
/// serves 1-D, 2-D and 3-D.
struct WindowGeometry {
  int nd = 0;  // spatial rank, 1..3
  int64_t in[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1};
  int64_t d[3] = {1, 1, 1};
  int64_t padB[3] = {0, 0, 0};
  int64_t padE[3] = {0, 0, 0};
  int64_t out[3] = {1, 1, 1};

  int64_t inSize() const { return in[0] * in[1] * in[2]; }
  int64_t outSize() const { return out[0] * out[1] * out[2]; }
  int64_t kSize() const { return k[0] * k[1] * k[2]; }
  /// The nd output dims.
  Shape outShape() const;
};

/// Resolves pads and output dims of a forward window op (Conv, MaxPool, AveragePool) for
/// `inSpatial` and `kernel` (both of rank nd, 1..3). ceilMode applies to explicit pads.
Status resolveWindow(const WindowAttrs& attrs, const std::vector<int64_t>& inSpatial,
                     const std::vector<int64_t>& kernel, bool ceilMode, WindowGeometry& g);

/// Positions o in [lo, hi) ⊆ [0, outLen) for which o*stride + off lies in [0, inLen).
void windowValidRange(int64_t off, int64_t stride, int64_t inLen, int64_t outLen, int64_t& lo, int64_t& hi);

/// col[(c*kSize + kidx) * outSize + o] = in[c][pos(o, kidx)] or 0 in padding, for c in [c0, c1).
/// `in` points at channel 0 of one image ([C, in...]); col at row 0 of the full matrix.
void im2col(const float* in, int64_t c0, int64_t c1, const WindowGeometry& g, float* col);
/// Adjoint of im2col: out[c][pos(o, kidx)] += col[...] for c in [c0, c1). `out` is [C, in...].
void col2im(const float* col, int64_t c0, int64_t c1, const WindowGeometry& g, float* out);

/// One plane of a depthwise Conv (group == channels, one filter per channel), 1-D or 2-D:
/// out[oh][ow] = bias + sum w[kh][kw] * in[...], what the Conv kernel computes for each plane of
/// such a Conv (the same products in the same order, so the same bits).
void depthwiseConvPlane(const float* in, const float* w, float bias, const WindowGeometry& g, float* out);
/// Two filters over one plane in one pass (each input load serves both): the same bits as
/// depthwiseConvPlane with w0 into out0 and with w1 into out1.
void depthwiseConvPlane2(const float* in, const float* w0, const float* w1, float bias, const WindowGeometry& g,
                         float* out0, float* out1);

/// Per-thread scratch of at least n floats, uninitialised, reused across run() calls on the same
/// thread (grows only), so that im2col / col2im buffers are not re-allocated (and page-faulted in)
/// on every inference. Valid until the next call on the same thread.
float* windowScratch(size_t n);

/// One elementwise op applied to a convolution's output inside the kernel, while a block of
/// the output is in cache (fused by the executor's graph rewrites, core/exec/graph_rewrites.h).
struct FusedActivation {
  enum class Kind { Relu, Clip, HardSigmoid, HardSwish, Sigmoid, LeakyRelu, Mul, Add };
  Kind kind = Kind::Relu;
  float a = 0, b = 0;  // Clip: min, max; HardSigmoid/HardSwish: alpha, beta; LeakyRelu: alpha; Mul/Add: operand
};
/// Name used in the FusedConv node's "activations" attribute ("Relu", "Clip", ...); parse fails on unknown names.
const char* fusedActivationName(FusedActivation::Kind kind);
bool parseFusedActivation(const std::string& name, FusedActivation::Kind& kind);
/// A FusedConv node's "activations" and "activation_params" attributes (two params per name) read back into
/// `out`; fails naming the unknown activation or the wrong number of params.
Status parseFusedActivations(const std::vector<std::string>& names, const std::vector<float>& params,
                             std::vector<FusedActivation>& out);
/// y[i] = ops(y[i] + bias) in order, for i in [0, n). HardSwish is x * clamp(a*x + b, 0, 1).
void applyFusedActivations(float* y, int64_t n, float bias, const std::vector<FusedActivation>& ops);

/// Domain and op of the fused convolution made by the graph rewrites: a Conv (same attributes and
/// inputs) with attributes "activations" (strings, applied in order) and "activation_params"
/// (floats, two per activation: a, b).
inline constexpr const char* kFusedDomain = "ai.quantscope";
inline constexpr const char* kFusedConvOp = "FusedConv";
/// The ConvTranspose the graph rewrites fuse the same way (core/kernels/conv_transpose.h).
inline constexpr const char* kFusedConvTransposeOp = "FusedConvTranspose";
/// A copy of Conv weights W [M, C/group, k...] (or, `transposed`, ConvTranspose weights [C, M/group, k...])
/// with output channel m's taps times scale[m] (M values): how the graph rewrites fold a BatchNormalization.
Tensor scaledConvWeights(const Tensor& W, bool transposed, int64_t group, const std::vector<float>& scale);
/// Writes `acts` as the node's "activations" and "activation_params" (what createConv reads back).
void setFusedActivations(Node& node, const std::vector<FusedActivation>& acts);

/// Conv, opsets 1..21: X [N, C, spatial...] (1-D..3-D), W [M, C/group, k...], optional B [M].
/// A constant W is packed once here; ai.quantscope FusedConv (opset 1) also applies activations.
Result<std::unique_ptr<Kernel>> createConv(const KernelInit& init);

}  // namespace qs
