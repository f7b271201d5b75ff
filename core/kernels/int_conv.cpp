#include "core/kernels/int_conv.h"

#include <immintrin.h>

#include <algorithm>

#include "core/exec/kernel.h"

namespace qs {

namespace {

// ConvTranspose output [N, M, H*kh, W*kw] <-> columns [N, M*kh*kw, H, W] of tiling windows:
// col[n][(m*kh + a)*kw + b][i][j] = out[n][m][i*kh + a][j*kw + b]. Row by row: an output row
// (i, a) holds the kw column rows (a, b) interleaved; kw == 2 (det's upsampling) with shuffles.
template <bool kToColumns>
void permuteTiles(const float* src, float* dst, int64_t N, int64_t M, int64_t H, int64_t W, int64_t kh, int64_t kw) {
  const int64_t OW = W * kw, plane = H * W;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t a = 0; a < kh; ++a)
        for (int64_t i = 0; i < H; ++i) {
          // Offsets of the output row (i, a) and of column row (a, b) at (i, 0).
          const int64_t outRow = (n * M + m) * plane * kh * kw + (i * kh + a) * OW;
          auto colRow = [&](int64_t b) { return ((n * M + m) * kh * kw + a * kw + b) * plane + i * W; };
          int64_t j = 0;
          if (kw == 2) {
            const int64_t c0 = colRow(0), c1 = colRow(1);
            for (; j + 8 <= W; j += 8) {
              if constexpr (kToColumns) {  // 16 interleaved -> 8 even, 8 odd
                const __m256 lo = _mm256_loadu_ps(src + outRow + 2 * j), hi = _mm256_loadu_ps(src + outRow + 2 * j + 8);
                const __m256 even = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
                const __m256 odd = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
                _mm256_storeu_ps(dst + c0 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)));
                _mm256_storeu_ps(dst + c1 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xD8)));
              } else {  // 8 + 8 -> 16 interleaved
                const __m256 e = _mm256_loadu_ps(src + c0 + j), o = _mm256_loadu_ps(src + c1 + j);
                const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
                _mm256_storeu_ps(dst + outRow + 2 * j, _mm256_permute2f128_ps(lo, hi, 0x20));
                _mm256_storeu_ps(dst + outRow + 2 * j + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
              }
            }
          }
          for (int64_t b = 0; b < kw; ++b) {
            const int64_t c = colRow(b);
            for (int64_t jj = j; jj < W; ++jj) {
              if constexpr (kToColumns) dst[c + jj] = src[outRow + jj * kw + b];
              else dst[outRow + jj * kw + b] = src[c + jj];
            }
          }
        }
}

bool allAre(const std::vector<int64_t>& v, int64_t x) {
  return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
}

// The tiling ConvTranspose as columns: a 1x1 integer Conv of X, its rows permuted to pixels
// (the output) or the reference permuted to columns (sums only: no output stored at all).
bool runIntConvTranspose(const IntConv& ic, const Tensor& X, float sx, std::span<const Tensor* const> inputs,
                         int threads, const QConvOutputs& out, int64_t referenceElements) {
  const int64_t rows = ic.weights->outChannels(), taps = ic.kh * ic.kw, M = rows / taps;
  if (X.rank() != 4 || X.dim(1) != ic.weights->inChannels() || out.actOnly || out.weightError) return false;
  const int64_t N = X.dim(0), H = X.dim(2), W = X.dim(3);
  std::vector<float> bias;
  if (inputs.size() > 2 && inputs[2]) {
    if (inputs[2]->dtype() != DType::Float || inputs[2]->numel() != M) return false;
    for (int64_t r = 0; r < rows; ++r) bias.push_back(inputs[2]->data<float>()[r / taps]);
  }
  WindowAttrs one;
  WindowGeometry geo;
  if (!resolveWindow(one, {H, W}, {1, 1}, false, geo)) return false;
  QConvOutputs cols = out;
  Tensor full, refCols;
  if (out.reference) {
    if (referenceElements != N * rows * H * W) return false;
    refCols = Tensor(DType::Float, {N, rows, H, W});
    permuteTiles<true>(out.reference, refCols.data<float>(), N, M, H, W, ic.kh, ic.kw);
    cols.reference = refCols.data<float>();
  }
  cols.full = out.full ? &full : nullptr;
  if (!qconv(X, sx, *ic.weights, bias.empty() ? nullptr : bias.data(), geo, threads, cols).isOk()) return false;
  if (out.full) {
    *out.full = Tensor(DType::Float, {N, M, H * ic.kh, W * ic.kw});
    permuteTiles<false>(full.data<float>(), out.full->data<float>(), N, M, H, W, ic.kh, ic.kw);
  }
  return true;
}

}  // namespace

std::shared_ptr<const IntConv> prepareIntConv(const Node& node, const Graph& g, const Tensor& W,
                                              const std::vector<float>& scales) {
  const bool transposed = node.opType == "ConvTranspose";
  auto ic = std::make_shared<IntConv>();
  KernelInit init{node, 0, g};
  AttrReader a(init);
  ic->attrs = readWindowAttrs(a, true);
  if (!a.ok() || ic->attrs.group != 1) return nullptr;
  Tensor columns;  // transposed: W [Cin, M, kh, kw] as [M * kh * kw, Cin, 1, 1]
  std::vector<float> rowScales;
  if (transposed) {
    if (W.rank() != 4 || W.dtype() != DType::Float) return nullptr;
    const int64_t Cin = W.dim(0), M = W.dim(1), kh = W.dim(2), kw = W.dim(3);
    const std::vector<int64_t> kernel = {kh, kw};
    if ((!ic->attrs.kernelShape.empty() && ic->attrs.kernelShape != kernel) || ic->attrs.strides != kernel ||
        !allAre(ic->attrs.dilations, 1) || !allAre(ic->attrs.pads, 0) ||
        (ic->attrs.autoPad != "NOTSET" && ic->attrs.autoPad != "VALID") || node.attr("output_padding") ||
        node.attr("output_shape"))
      return nullptr;
    ic->transposed = true;
    ic->kh = kh;
    ic->kw = kw;
    columns = Tensor(DType::Float, {M * kh * kw, Cin, 1, 1});
    const float* src = W.data<float>();
    float* dst = columns.data<float>();
    for (int64_t c = 0; c < Cin; ++c)
      for (int64_t r = 0; r < M * kh * kw; ++r) dst[r * Cin + c] = src[c * M * kh * kw + r];
    for (int64_t r = 0; r < M * kh * kw; ++r) rowScales.push_back(scales[(size_t)(r / (kh * kw))]);
  }
  auto packed = transposed ? prepareQConvWeights(columns, rowScales) : prepareQConvWeights(W, scales);
  if (!packed) return nullptr;
  ic->weights = std::move(packed).value();
  return ic;
}

bool runIntConv(const IntConv& ic, float sx, std::span<const Tensor* const> inputs, int threads,
                const QConvOutputs& out, int64_t referenceElements) {
  if (inputs.empty() || !inputs[0] || inputs[0]->dtype() != DType::Float) return false;
  const Tensor& X = *inputs[0];
  if (ic.transposed) return runIntConvTranspose(ic, X, sx, inputs, threads, out, referenceElements);
  const Shape& k = ic.weights->kernelShape();
  if (X.rank() != (int64_t)k.size() + 2) return false;
  const float* bias = nullptr;
  if (inputs.size() > 2 && inputs[2]) {
    if (inputs[2]->dtype() != DType::Float || inputs[2]->numel() != ic.weights->outChannels()) return false;
    bias = inputs[2]->data<float>();
  }
  WindowGeometry geo;
  if (!resolveWindow(ic.attrs, std::vector<int64_t>(X.shape().begin() + 2, X.shape().end()),
                     std::vector<int64_t>(k.begin(), k.end()), false, geo))
    return false;
  if (out.reference && referenceElements != X.dim(0) * ic.weights->outChannels() * geo.outSize()) return false;
  // Refused input (NaN or Inf in X, a shape mismatch): the FP32 path computes or reports it.
  return qconv(X, sx, *ic.weights, bias, geo, threads, out).isOk();
}

}  // namespace qs
