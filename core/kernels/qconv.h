// Integer Conv for the analysis: a Conv whose input and weights are INT8-quantized, evaluated in
// u8 x s8 -> int32 arithmetic (AVX-512 VNNI vpdpbusd where the CPU has it, AVX2 vpmaddwd on
// bytes widened to 16 bits where it has AVX2 only, portable integer loops otherwise) instead of an FP32 convolution of fake-quantized tensors. The integer sums
// are exact, so the "full" output is the fake-quantized Conv up to one float rounding, and the
// same GEMM also yields the activation-only and weight-only quantization effects.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/numeric/metrics.h"
#include "core/ir/tensor.h"
#include "core/kernels/conv.h"
#include "core/numeric/fake_quant.h"
#include "core/util/status.h"

namespace qs {

/// Weights of one Conv with group == 1, quantized per output channel m with scale sw[m] > 0:
///   Wq[m,k] = clamp(nearbyint(W[m,k] / sw[m]), qmin, qmax)         (fakeQuantInt8's integers)
///   r[m,k]  = W[m,k] / sw[m] - Wq[m,k]                             (rounding residual)
///   r8[m,k] = clamp(nearbyint(r[m,k] * rs[m]), -127, 127)
/// rs[m] is kResidualScale (254) whenever |r| <= 0.5 on the row, i.e. whenever nothing clips; a
/// row whose weights clip gets rs[m] = 127 / max|r| instead, so that the residual of a clipped
/// weight (which can be far beyond 0.5) is represented rather than saturated.
/// Immutable once made; share it between calls and threads.
class QConvWeights {
 public:
  static constexpr float kResidualScale = 254.f;
  /// Rows per packed panel (the micro-kernel's tile height).
  static constexpr int64_t kRowsPerPanel = 8;

  int64_t outChannels() const { return m_M; }
  int64_t inChannels() const { return m_C; }
  /// Spatial kernel dims as in W (1 to 3 of them).
  const Shape& kernelShape() const { return m_kernel; }
  /// Reduction length C * prod(kernel).
  int64_t depth() const { return m_K; }
  const std::vector<float>& scales() const { return m_sw; }
  /// Wq and r8, row-major [M, K] in W's element order.
  const std::vector<int8_t>& quantized() const { return m_wq; }
  const std::vector<int8_t>& residual() const { return m_r8; }
  /// rs[m] per row.
  const std::vector<float>& residualScales() const { return m_rs; }

  /// One int8 matrix packed for the GEMM: panels of kRowsPerPanel rows; in a panel, for each
  /// group of 4 consecutive reduction indices, 4 values per row (rows past `rows` are zero).
  /// The reduction order is (input channel / 4, kernel position, channel % 4), channels padded
  /// to a multiple of 4 with zero weights, to match the im2col of 4-channel-interleaved input.
  /// One format per GEMM, chosen when the weights are prepared (qconvKernelName() then): bytes
  /// in `data` (VNNI, generic), or the same values widened to int16 in `data16` (AVX2, whose
  /// vpmaddwd multiplies 16-bit pairs; `data` is then empty).
  struct Packed {
    int64_t rows = 0, panels = 0, groups = 0;
    std::vector<int8_t> data;
    std::vector<int16_t> data16;
    std::vector<int32_t> rowSum;  // per row, over the real weights
    bool wide() const { return !data16.empty(); }
    const int8_t* panel(int64_t p) const { return data.data() + p * groups * kRowsPerPanel * 4; }
    const int16_t* panel16(int64_t p) const { return data16.data() + p * groups * kRowsPerPanel * 4; }
  };
  /// [Wq], [Wq; r8] (2M rows: full, actOnly and weightError's integer part in one pass), [r8].
  const Packed& packedQ() const { return m_q; }
  const Packed& packedQR() const { return m_qr; }
  const Packed& packedR() const { return m_r; }

 private:
  friend Result<std::shared_ptr<const QConvWeights>> prepareQConvWeights(const Tensor&, const std::vector<float>&, int,
                                                                         int);
  int64_t m_M = 0, m_C = 0, m_K = 0;
  Shape m_kernel;
  std::vector<float> m_sw, m_rs;
  std::vector<int8_t> m_wq, m_r8;
  Packed m_q, m_qr, m_r;
};

/// Quantizes and packs W (float [M, C, k...], 1 to 3 spatial dims) with per-output-channel
/// scales sw (M values, or one for the whole tensor). [qmin, qmax] is the weight range: the
/// project's kWeightQmin..kWeightQmax (-127..127, what QuantSession fake-quantizes weights with)
/// by default; pass -128, 127 for the full int8 range. Errors (never a crash): W not float or of
/// rank < 3 or empty, sw of the wrong size or not finite and > 0, a bad range, and reductions
/// longer than 65536 (the int32 accumulators could overflow), the latter as Unsupported.
Result<std::shared_ptr<const QConvWeights>> prepareQConvWeights(const Tensor& W, const std::vector<float>& sw,
                                                                int qmin = kWeightQmin, int qmax = kWeightQmax);

/// What qconv computes; null pointers are skipped (distinct tensors, please). Each requested
/// tensor is replaced by a new float tensor [N, M, out...] (a buffer the caller shares elsewhere
/// is never written).
struct QConvOutputs {
  /// conv(fq(X, sx), fq(W)) + B: exact int32 sums, then float(acc * sx * sw[m] + B[m]) (the
  /// product and sum in double, so one rounding).
  Tensor* full = nullptr;
  /// conv(fq(X, sx), W) + B with W represented as sw[m] * (Wq + r8 / rs[m]). W's residual kept
  /// to 8 bits bounds how well the activation-quantization effect actOnly - conv(X, W) is known:
  /// ~48 dB SNR for uniform X and W where nothing clips (the ratio of X's step to its spread,
  /// times W's spread to its step, times 254), more where X clips. As an error on a layer SNR
  /// that is ~1e-5 of the noise power: invisible at the precision SNRs are shown.
  Tensor* actOnly = nullptr;
  /// conv(X, fq(W)) - conv(X, W) = -conv(X, sw * r), no bias, with r as r8 / rs[m] and X split
  /// as sx * q + ex: q the integers of fq(X, sx) (their sums over r8 come with actOnly's, from the
  /// same GEMM, exact) and ex = X - sx * q the quantization residual, kept at 8 bits on one scale
  /// for the whole tensor, exMax / 127 with exMax a bound on |ex| from X's min and max (sx / 2
  /// where nothing clips, the largest clipped excess beyond 127 sx or -128 sx otherwise). r8
  /// bounds the estimate at ~48 dB SNR; ex's 8 bits cost nothing where X does not clip, ~1 dB
  /// where a few values clip to 1.25x the clip, ~2 dB where 20% clip to up to 5x (the residual of
  /// the unclipped values, below half of ex's step there, is then lost). An all-zero X gives 0.
  Tensor* weightError = nullptr;

  /// Error sums against a reference, accumulated while each block of outputs is in cache (the
  /// layer-wise analysis compares every output with the float Conv's and needs nothing else).
  /// `reference`: float [N, M, out...], e.g. conv(X, W) + B. Each non-null accumulator gets
  /// fullSums.add(ref, full), actSums.add(ref, actOnly), weightSums.addError(ref, weightError)
  /// over every output, summed per block and merged in block order (independent of threads); an
  /// output with sums but no tensor above is computed without being stored.
  const float* reference = nullptr;
  ErrorAccumulator* fullSums = nullptr;
  ErrorAccumulator* actSums = nullptr;
  ErrorAccumulator* weightSums = nullptr;
};

/// X float [N, C, spatial...] with C == w.inChannels(); fq(X, sx) = clamp(nearbyint(X / sx),
/// -128, 127) * sx exactly as fakeQuantInt8 (same division, same integers). g is resolveWindow's
/// geometry for the Conv's attributes (its in and k must match X and w). bias: M floats or null.
/// Errors: shape mismatches and sx not finite and > 0 (InvalidArgument); NaN or Inf anywhere in X
/// (InvalidArgument: the results would not mean anything; the outputs are then unspecified).
/// `threads` bounds the parallelism (parallelFor); the results do not depend on it. The calling
/// thread keeps its buffers of quantized X for the next call: one byte per element of X padded
/// (X's integers), one more for ex at 8 bits (weightError). weightError also reads X once more
/// beforehand, for its range.
Status qconv(const Tensor& X, float sx, const QConvWeights& w, const float* bias, const WindowGeometry& g, int threads,
             const QConvOutputs& out);

/// "avx512vnni", "avx2" or "generic": the GEMM qconv uses on this machine now (VNNI where the
/// CPU has AVX-512 VNNI, else AVX2 where it has AVX2). All give identical results; the generic
/// one is portable integer code, about 10x slower than VNNI and 2x slower than the FP32 Conv, so
/// a caller should prefer float where it is the one in use. Weights prepared under one kernel
/// and run under another (only after a forced switch) take the generic loops over their format.
const char* qconvKernelName();
/// Forces one GEMM by its qconvKernelName() ("avx512vnni", "avx2", "generic": tests, benchmarks); "auto" restores
/// the automatic choice. False, changing nothing, for an unknown name or a GEMM the CPU lacks.
bool setQconvKernel(const std::string& name);

}  // namespace qs
