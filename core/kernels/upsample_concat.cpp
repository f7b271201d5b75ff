// ai.quantscope UpsampleConcat (opset 1): see upsample_concat.h.
#include "core/kernels/upsample_concat.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace qs {

namespace {

class UpsampleConcatKernel : public Kernel {
 public:
  explicit UpsampleConcatKernel(std::vector<int64_t> factors) : m_factors(std::move(factors)) {}

  Status run(KernelContext& ctx) const override {
    const size_t k = m_factors.size() / 2;
    if (ctx.inputCount() != k || k == 0)
      return invalidArgument("UpsampleConcat: " + std::to_string(ctx.inputCount()) + " inputs for " +
                             std::to_string(k) + " pairs of upsample factors");
    int64_t N = -1, H = -1, W = -1, C = 0;
    std::vector<int64_t> first(k);  // each input's first output channel
    for (size_t i = 0; i < k; ++i) {
      if (!ctx.hasInput(i)) return invalidArgument("UpsampleConcat: input " + std::to_string(i) + " is missing");
      const Tensor& x = ctx.input(i);
      if (x.dtype() != DType::Float) return unsupported("UpsampleConcat supports float32 only, got " + dtypeName(x.dtype()));
      if (x.rank() != 4) return invalidArgument("UpsampleConcat: input " + std::to_string(i) + " " + shapeToString(x.shape()) + " is not rank 4");
      const int64_t h = x.dim(2) * m_factors[2 * i], w = x.dim(3) * m_factors[2 * i + 1];
      if (N < 0) {
        N = x.dim(0);
        H = h;
        W = w;
      } else if (x.dim(0) != N || h != H || w != W) {
        return invalidArgument("UpsampleConcat: input " + std::to_string(i) + " " + shapeToString(x.shape()) +
                               " upsampled " + std::to_string(m_factors[2 * i]) + "x" +
                               std::to_string(m_factors[2 * i + 1]) + " does not match input 0 " +
                               shapeToString(ctx.input(0).shape()) + " upsampled " + std::to_string(m_factors[0]) +
                               "x" + std::to_string(m_factors[1]));
      }
      first[i] = C;
      C += x.dim(1);
    }
    ctx.outputs[0] = Tensor(DType::Float, {N, C, H, W});
    float* y = ctx.outputs[0].data<float>();
    if (N * C * H * W == 0) return Status::ok();
    // One output row per item: its input, channel and source row found from the row's index.
    ctx.parallelFor(N * C * H, std::max<int64_t>(1, 8192 / W), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t h = r % H, plane = r / H, n = plane / C, c = plane % C;
        const size_t i = (size_t)(std::upper_bound(first.begin(), first.end(), c) - first.begin() - 1);
        const Tensor& x = ctx.input(i);
        const int64_t fh = m_factors[2 * i], fw = m_factors[2 * i + 1], Ci = x.dim(1), IW = x.dim(3);
        const float* xr = x.data<float>() + ((n * Ci + c - first[i]) * x.dim(2) + h / fh) * IW;
        float* yr = y + r * W;
        if (fw == 1) {
          std::memcpy(yr, xr, sizeof(float) * (size_t)W);
          continue;
        }
        int64_t w = 0;
#ifdef __AVX2__
        if (fw == 2) {
          const __m256i pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
          for (; w + 8 <= W; w += 8)
            _mm256_storeu_ps(yr + w, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(xr + w / 2)), pairs));
        } else if (fw >= 8 && fw % 8 == 0) {
          for (int64_t s = 0; s < IW; ++s) {
            const __m256 v = _mm256_set1_ps(xr[s]);
            for (int64_t j = 0; j < fw; j += 8) _mm256_storeu_ps(yr + s * fw + j, v);
          }
          w = W;
        } else if (fw == 4) {
          // (Two source values for 8 outputs: loaded as one double, not reading past the row.)
          const __m256i quads = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
          for (; w + 8 <= W; w += 8)
            _mm256_storeu_ps(yr + w, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_castpd_ps(_mm_load_sd((const double*)(xr + w / 4)))), quads));
        }
#endif
        for (; w < W; ++w) yr[w] = xr[w / fw];
      }
    });
    return Status::ok();
  }

 private:
  std::vector<int64_t> m_factors;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createUpsampleConcat(const KernelInit& init) {
  AttrReader a(init);
  std::vector<int64_t> up = a.ints("upsample");
  if (!a.ok()) return a.status();
  if (up.empty() || up.size() % 2 != 0)
    return kernelError(StatusCode::InvalidModel,
                       "UpsampleConcat upsample needs two factors per input, got " + std::to_string(up.size()));
  for (int64_t f : up)
    if (f < 1) return kernelError(StatusCode::InvalidModel, "UpsampleConcat upsample factor " + std::to_string(f) + " < 1");
  return std::unique_ptr<Kernel>(std::make_unique<UpsampleConcatKernel>(std::move(up)));
}

}  // namespace qs
