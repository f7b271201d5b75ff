// Integer depthwise Conv for the analysis's quantized pass: a Conv with one filter per channel
// whose input and weights are INT8-quantized, evaluated as u8 x s8 -> int32 sums (AVX-512 VNNI
// vpdpbusd, four taps of a kernel row per instruction) instead of an FP32 depthwise convolution of
// the fake-quantized input. The sums are exact, so the output is conv(fq(X), fq(W)) + B up to one
// float rounding, as qconv's (qconv.h) for group-1 Convs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/ir/tensor.h"
#include "core/kernels/conv.h"
#include "core/numeric/fake_quant.h"
#include "core/numeric/metrics.h"
#include "core/util/status.h"

namespace qs {

/// The weights of a 2-D depthwise Conv, W float [C, 1, KH, KW], quantized per channel c with
/// scale sw[c] > 0 as fakeQuantInt8 does (Wq = clamp(nearbyint(W / sw), qmin, qmax)) and laid out
/// for the kernel: per channel and kernel row, the row's taps in groups of 4 bytes (one int32 word
/// per group, zero past KW). Immutable once made; share it between calls and threads.
class QDepthwiseWeights {
 public:
  int64_t channels() const { return m_C; }
  int64_t kernelHeight() const { return m_KH; }
  int64_t kernelWidth() const { return m_KW; }
  /// Words of 4 taps per kernel row: (KW + 3) / 4.
  int64_t groups() const { return m_G; }
  const std::vector<float>& scales() const { return m_sw; }
  /// Wq row-major [C, KH, KW], W's element order.
  const std::vector<int8_t>& quantized() const { return m_wq; }
  /// [C][KH][groups] words, byte t of word g holding tap 4 g + t of the row.
  const std::vector<int32_t>& words() const { return m_words; }
  /// Per channel: 128 * the sum of its Wq (the input's bytes are q + 128).
  const std::vector<int32_t>& offsetCorrection() const { return m_corr; }

 private:
  friend Result<std::shared_ptr<const QDepthwiseWeights>> prepareQDepthwiseWeights(const Tensor&, const std::vector<float>&,
                                                                                  int, int);
  int64_t m_C = 0, m_KH = 0, m_KW = 0, m_G = 0;
  std::vector<float> m_sw;
  std::vector<int8_t> m_wq;
  std::vector<int32_t> m_words, m_corr;
};

/// Quantizes W (float [C, 1, KH, KW]) with per-channel scales sw (C values, or one for all) on
/// [qmin, qmax] (the project's weight range by default). Errors (never a crash): W not float or
/// not of that shape, a kernel wider than 16 (Unsupported), sw of the wrong size or not finite
/// and > 0, a weight not finite or whose quotient by its scale overflows, a range outside int8.
Result<std::shared_ptr<const QDepthwiseWeights>> prepareQDepthwiseWeights(const Tensor& W, const std::vector<float>& sw,
                                                                         int qmin = kWeightQmin,
                                                                         int qmax = kWeightQmax);

/// Whether `g` (resolveWindow's geometry of a 2-D Conv) is one qconvDepthwise computes: W stride
/// 1 or 2 and W dilation 1 (any H stride, H dilation and padding).
bool qconvDepthwiseSupports(const WindowGeometry& g);

/// Whether qconvDepthwise runs its vector kernel here (AVX-512 VNNI and VBMI, and qconv's GEMM
/// not forced off them: setQconvKernel). Otherwise it runs portable scalar loops (the same bits,
/// far slower than the FP32 depthwise Conv, so the analysis keeps FP32 there).
bool qconvDepthwiseFast();

/// y = conv(fq(X, sx), fq(W)) + bias, X float [N, C, H, W] with C == w.channels(), fq(X, sx) =
/// clamp(nearbyint(X / sx), -128, 127) * sx as fakeQuantInt8: exact int32 sums, then each output
/// float(sum * sx * sw[c] + bias[c]) (a double FMA, then the rounding to float). bias: C floats
/// or null. *y becomes a new float tensor [N, C, OH, OW]. With `reference` (float [N, C, OH, OW])
/// and `sums`, sums gets add(reference, y) over every output, per plane, merged in plane order
/// (independent of `threads`). Errors: shapes that do not match, a geometry qconvDepthwiseSupports
/// refuses (Unsupported), sx not finite and > 0, NaN or Inf in X (InvalidArgument; *y and *sums
/// are then unspecified and the caller should run the FP32 Conv, which computes or reports it).
Status qconvDepthwise(const Tensor& X, float sx, const QDepthwiseWeights& w, const float* bias, const WindowGeometry& g,
                      int threads, Tensor* y, const float* reference = nullptr, ErrorAccumulator* sums = nullptr);

}  // namespace qs
