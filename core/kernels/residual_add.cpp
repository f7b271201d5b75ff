// ai.quantscope ResidualAdd (opset 1): see residual_add.h.
#include "core/kernels/residual_add.h"

#include <immintrin.h>

#include "core/kernels/elementwise.h"

namespace qs {

namespace {

// The product rounded on its own, as the Mul kernel's pass rounds it: GCC contracts x + x * s into one
// FMA otherwise (a different rounding: det's output moved by up to 9e-8).
inline __m256 rounded(__m256 v) {
  asm("" : "+x"(v));
  return v;
}
inline float rounded(float v) {
  asm("" : "+x"(v));
  return v;
}

class ResidualAddKernel : public Kernel {
 public:
  ResidualAddKernel(int64_t fh, int64_t fw) : m_fh(fh), m_fw(fw) {}

  Status run(KernelContext& ctx) const override {
    if (!ctx.hasInput(0)) return invalidArgument("ResidualAdd needs input X");
    const Tensor& X = ctx.input(0);
    const Tensor* S = ctx.hasInput(1) ? &ctx.input(1) : nullptr;
    const Tensor* U = ctx.inputCount() > 2 && ctx.hasInput(2) ? &ctx.input(2) : nullptr;
    for (const Tensor* t : {&X, S, U})
      if (t && t->dtype() != DType::Float)
        return unsupported("ResidualAdd supports float32 only, got " + dtypeName(t->dtype()));
    if (U && (U->rank() < 2 || m_fh < 1 || m_fw < 1))
      return invalidArgument("ResidualAdd: U " + shapeToString(U->shape()) + " with upsample factors " +
                             std::to_string(m_fh) + "x" + std::to_string(m_fw));
    if (fastShapes(X, S, U)) return runFast(ctx, X, S, U);
    return runGeneral(ctx, X, S, U);
  }

 private:
  // Rank-4 X [N, C, H, W], S [1|N, 1|C, 1, 1], U [N, C, H / fh, W / fw]: one pass.
  bool fastShapes(const Tensor& X, const Tensor* S, const Tensor* U) const {
    if (X.rank() != 4) return false;
    const int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), W = X.dim(3);
    if (S && (S->rank() != 4 || (S->dim(0) != 1 && S->dim(0) != N) || (S->dim(1) != 1 && S->dim(1) != C) ||
              S->dim(2) != 1 || S->dim(3) != 1))
      return false;
    if (U && (U->rank() != 4 || U->dim(0) != N || U->dim(1) != C || U->dim(2) * m_fh != H || U->dim(3) * m_fw != W))
      return false;
    return true;
  }

  Status runFast(KernelContext& ctx, const Tensor& X, const Tensor* S, const Tensor* U) const {
    const int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), W = X.dim(3);
    ctx.outputs[0] = Tensor(DType::Float, X.shape());
    const float* x = X.data<float>();
    float* y = ctx.outputs[0].data<float>();
    const float* s = S ? S->data<float>() : nullptr;
    const int64_t Sn = S ? S->dim(0) : 1, Sc = S ? S->dim(1) : 1;
    const float* u = U ? U->data<float>() : nullptr;
    const int64_t UH = U ? U->dim(2) : 0, UW = U ? U->dim(3) : 0, fh = m_fh, fw = m_fw;
    const __m256i pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    ctx.parallelFor(N * C * H, std::max<int64_t>(1, 8192 / std::max<int64_t>(W, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t plane = r / H, h = r % H, n = plane / C, c = plane % C;
        const float* xr = x + r * W;
        float* yr = y + r * W;
        const float sv = s ? s[(n % Sn) * Sc + c % Sc] : 0.f;
        const float* ur = u ? u + (plane * UH + h / fh) * UW : nullptr;
        const __m256 vs = _mm256_set1_ps(sv);
        int64_t w = 0;
        if (!u || fw <= 2) {
          for (; w + 8 <= W; w += 8) {
            const __m256 xv = _mm256_loadu_ps(xr + w);
            __m256 v = s ? _mm256_add_ps(xv, rounded(_mm256_mul_ps(xv, vs))) : xv;
            if (u) {
              const __m256 uv = fw == 1 ? _mm256_loadu_ps(ur + w)
                                        : _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(ur + w / 2)), pairs);
              v = _mm256_add_ps(v, uv);
            }
            _mm256_storeu_ps(yr + w, v);
          }
        }
        for (; w < W; ++w) {
          float v = s ? xr[w] + rounded(xr[w] * sv) : xr[w];
          if (u) v = v + ur[w / fw];
          yr[w] = v;
        }
      }
    });
    return Status::ok();
  }

  // Any other shapes: the original nodes' broadcasts one after the other.
  Status runGeneral(KernelContext& ctx, const Tensor& X, const Tensor* S, const Tensor* U) const {
    Tensor cur = X;
    auto binary = [&](const Tensor& a, const Tensor& b, auto op, const char* what, Tensor& out) -> Status {
      ew::BroadcastPlan plan;
      if (!ew::planBroadcast({&a.shape(), &b.shape()}, plan))
        return invalidArgument(std::string("ResidualAdd: ") + what + " cannot broadcast " + shapeToString(a.shape()) +
                               " and " + shapeToString(b.shape()));
      out = Tensor(DType::Float, plan.outShape);
      ew::binaryBroadcast(plan, a.data<float>(), b.data<float>(), out.data<float>(), op, ctx);
      return Status::ok();
    };
    if (S) {
      Tensor t, sum;
      QS_RETURN_IF_ERROR(binary(X, *S, ew::MulOp{}, "X * S", t));
      QS_RETURN_IF_ERROR(binary(X, t, ew::AddOp{}, "X + X * S", sum));
      cur = sum;
    }
    if (U) {
      Shape up = U->shape();
      const int64_t UH = up[up.size() - 2], UW = up.back();
      up[up.size() - 2] *= m_fh;
      up.back() *= m_fw;
      Tensor R(DType::Float, up);
      const int64_t planes = U->numel() / std::max<int64_t>(1, UH * UW), OW = UW * m_fw;
      for (int64_t p = 0; p < planes; ++p)
        for (int64_t oh = 0; oh < UH * m_fh; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow)
            R.data<float>()[(p * UH * m_fh + oh) * OW + ow] = U->data<float>()[(p * UH + oh / m_fh) * UW + ow / m_fw];
      Tensor sum;
      QS_RETURN_IF_ERROR(binary(cur, R, ew::AddOp{}, "+ upsampled U", sum));
      cur = sum;
    }
    if (cur.sharesBufferWith(X)) cur = X.clone();
    ctx.outputs[0] = std::move(cur);
    return Status::ok();
  }

  int64_t m_fh, m_fw;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createResidualAdd(const KernelInit& init) {
  AttrReader a(init);
  std::vector<int64_t> up = a.ints("upsample");
  if (!a.ok()) return a.status();
  if (!up.empty() && up.size() != 2)
    return kernelError(StatusCode::InvalidModel, "ResidualAdd upsample needs 2 factors, got " + std::to_string(up.size()));
  return std::unique_ptr<Kernel>(std::make_unique<ResidualAddKernel>(up.empty() ? 1 : up[0], up.empty() ? 1 : up[1]));
}

}  // namespace qs
