// Kernels of the blocked layout: see blocked_layout.h.
#include "core/kernels/blocked_layout.h"

#include <algorithm>
#include <string>

#include "core/exec/parallel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"

namespace qs {

namespace {

// Grain of the reorders and the affine, in 8-channel blocks of a plane: a chunk handed to
// another core should move at least ~64 K floats.
int64_t blockGrain(int64_t HW) { return std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(HW * 8, 1)); }

Status requireBlocked(const Tensor& X, const char* what) {
  if (X.dtype() != DType::Float) return invalidArgument(std::string(what) + " must be float");
  if (X.rank() != 5 || X.dim(4) != 8)
    return invalidArgument(std::string(what) + " has shape " + shapeToString(X.shape()) +
                           ", expected the blocked layout [N, C/8, H, W, 8]");
  return Status::ok();
}

Status runToBlocked(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  if (X.dtype() != DType::Float || X.rank() != 4 || X.dim(1) % 8 != 0)
    return invalidArgument("ToNchw8c needs a float [N, C, H, W] tensor with C a multiple of 8, got " +
                           shapeToString(X.shape()));
  const int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), W = X.dim(3);
  Tensor Y(DType::Float, {N, C / 8, H, W, 8});
  toNchw8c(X.data<float>(), N, C, H * W, Y.data<float>(), ctx.threads);
  ctx.outputs[0] = std::move(Y);
  return Status::ok();
}

Status runFromBlocked(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  QS_RETURN_IF_ERROR(requireBlocked(X, "FromNchw8c input"));
  const int64_t N = X.dim(0), C = X.dim(1) * 8, H = X.dim(2), W = X.dim(3);
  Tensor Y(DType::Float, {N, C, H, W});
  fromNchw8c(X.data<float>(), N, C, H * W, Y.data<float>(), ctx.threads);
  ctx.outputs[0] = std::move(Y);
  return Status::ok();
}

// out[p][c] = in[p][c] * s[c] + h[c] (then max with 0) over HW pixels of one 8-channel block.
template <bool kRelu>
void affine8(const float* in, const float* s, const float* h, int64_t HW, float* out) {
  float sv[8], hv[8];
  for (int c = 0; c < 8; ++c) {
    sv[c] = s[c];
    hv[c] = h[c];
  }
  for (int64_t p = 0; p < HW; ++p) {
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const float v = in[p * 8 + c] * sv[c] + hv[c];
      out[p * 8 + c] = kRelu ? (v > 0.f ? v : 0.f) : v;
    }
  }
}

class BlockedBatchNormKernel : public Kernel {
 public:
  explicit BlockedBatchNormKernel(bool relu) : m_relu(relu) {}
  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireBlocked(X, "BlockedBatchNorm X"));
    const int64_t N = X.dim(0), CB = X.dim(1), HW = X.dim(2) * X.dim(3);
    if (!ctx.hasInput(1) || !ctx.hasInput(2) || ctx.input(1).numel() != CB * 8 || ctx.input(2).numel() != CB * 8 ||
        ctx.input(1).dtype() != DType::Float || ctx.input(2).dtype() != DType::Float)
      return invalidArgument("BlockedBatchNorm needs float scale and shift of " + std::to_string(CB * 8) + " values");
    const float* x = X.data<float>();
    const float* scale = ctx.input(1).data<float>();
    const float* shift = ctx.input(2).data<float>();
    Tensor Y(DType::Float, X.shape());
    float* y = Y.data<float>();
    parallelFor(ctx.threads, N * CB, blockGrain(HW), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const float* in = x + t * HW * 8;
        float* out = y + t * HW * 8;
        if (m_relu) affine8<true>(in, scale + (t % CB) * 8, shift + (t % CB) * 8, HW, out);
        else affine8<false>(in, scale + (t % CB) * 8, shift + (t % CB) * 8, HW, out);
      }
    });
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  bool m_relu;
};

class BlockedConvKernel : public Kernel {
 public:
  BlockedConvKernel(WindowAttrs attrs, std::unique_ptr<DnnlConv> conv, int64_t M, int64_t C, int64_t kH, int64_t kW)
      : m_attrs(std::move(attrs)), m_conv(std::move(conv)), m_M(M), m_C(C), m_kH(kH), m_kW(kW) {}

  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireBlocked(X, "BlockedConv X"));
    const int64_t N = X.dim(0), C = X.dim(1) * 8;
    if (C != m_C)
      return invalidArgument("BlockedConv X has " + std::to_string(C) + " channels, W expects " + std::to_string(m_C));
    WindowGeometry g;
    QS_RETURN_IF_ERROR(resolveWindow(m_attrs, {X.dim(2), X.dim(3)}, {m_kH, m_kW}, false, g));
    Tensor Y(DType::Float, {N, m_M / 8, g.out[1], g.out[2], 8});
    const float* residual = nullptr;
    if (ctx.hasInput(3)) {
      const Tensor& R = ctx.input(3);
      if (R.dtype() != DType::Float || R.shape() != Y.shape())
        return invalidArgument("BlockedConv residual has shape " + shapeToString(R.shape()) + ", expected " +
                               shapeToString(Y.shape()));
      residual = R.data<float>();
    }
    if (N > 0) QS_RETURN_IF_ERROR(m_conv->runBlocked(X.data<float>(), N, C, g, Y.data<float>(), residual, ctx.threads));
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  WindowAttrs m_attrs;
  std::unique_ptr<DnnlConv> m_conv;
  int64_t m_M, m_C, m_kH, m_kW;
};

Result<std::unique_ptr<Kernel>> createBlockedConv(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, true);
  std::vector<std::string> names = a.strings("activations");
  std::vector<float> params = a.floats("activation_params");
  const bool residualRelu = a.i("residual_relu", 0) != 0;
  if (!a.ok()) return a.status();
  std::vector<FusedActivation> acts;
  if (Status st = parseFusedActivations(names, params, acts); !st) return st;
  const Tensor* W = init.constantInput(1);
  const Tensor* B = init.constantInput(2);
  if (!W || W->dtype() != DType::Float || W->rank() != 4)
    return kernelError(StatusCode::InvalidModel, "BlockedConv needs a constant float W [M, C, kH, kW]");
  if (attrs.group != 1) return kernelError(StatusCode::Unsupported, "BlockedConv runs group 1 only");
  if (init.node.inputs.size() > 2 && init.node.inputs[2] != kNoValue && !B)
    return kernelError(StatusCode::InvalidModel, "BlockedConv needs a constant B");
  const bool residual = init.node.inputs.size() > 3 && init.node.inputs[3] != kNoValue;
  auto conv = DnnlConv::createBlocked(*W, B, std::move(acts), residual, residualRelu);
  if (!conv)
    return kernelError(StatusCode::Unsupported, "BlockedConv: oneDNN is not available or refuses W " +
                                                    shapeToString(W->shape()) + " with these activations");
  return std::unique_ptr<Kernel>(
      std::make_unique<BlockedConvKernel>(std::move(attrs), std::move(conv), W->dim(0), W->dim(1), W->dim(2), W->dim(3)));
}

Result<std::unique_ptr<Kernel>> createBlockedBatchNorm(const KernelInit& init) {
  AttrReader a(init);
  const bool relu = a.i("relu", 0) != 0;
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<BlockedBatchNormKernel>(relu));
}

}  // namespace

void toNchw8c(const float* x, int64_t N, int64_t C, int64_t HW, float* y, int threads) {
  const int64_t CB = C / 8;
  parallelFor(threads, N * CB, blockGrain(HW), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* in = x + t * 8 * HW;  // channels 8*cb .. 8*cb+7 of image n are contiguous planes
      float* out = y + t * 8 * HW;
      for (int64_t p = 0; p < HW; ++p)
        for (int c = 0; c < 8; ++c) out[p * 8 + c] = in[c * HW + p];
    }
  });
}

void fromNchw8c(const float* x, int64_t N, int64_t C, int64_t HW, float* y, int threads) {
  const int64_t CB = C / 8;
  parallelFor(threads, N * CB, blockGrain(HW), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* in = x + t * 8 * HW;
      float* out = y + t * 8 * HW;
      for (int c = 0; c < 8; ++c)
        for (int64_t p = 0; p < HW; ++p) out[c * HW + p] = in[p * 8 + c];
    }
  });
}

std::vector<KernelEntry> blockedLayoutKernels() {
  return {
      {kToBlockedOp, kFusedDomain, 1, 1, [](const KernelInit&) -> Result<std::unique_ptr<Kernel>> {
         return std::unique_ptr<Kernel>(makeKernel(runToBlocked));
       }},
      {kFromBlockedOp, kFusedDomain, 1, 1, [](const KernelInit&) -> Result<std::unique_ptr<Kernel>> {
         return std::unique_ptr<Kernel>(makeKernel(runFromBlocked));
       }},
      {kBlockedConvOp, kFusedDomain, 1, 1, createBlockedConv},
      {kBlockedBatchNormOp, kFusedDomain, 1, 1, createBlockedBatchNorm},
  };
}

}  // namespace qs
