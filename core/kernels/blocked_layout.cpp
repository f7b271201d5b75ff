// Kernels of the blocked layout: see blocked_layout.h.
#include "core/kernels/blocked_layout.h"

#include <algorithm>
#include <string>

#include "core/exec/parallel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"

namespace qs {

namespace {

// Grain of the reorders and the affine, in channel blocks of a plane: a chunk handed to another
// core should move at least ~64 K floats.
int64_t blockGrain(int64_t HW, int64_t block) {
  return std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(HW * block, 1));
}

Status requireBlocked(const Tensor& X, const char* what) {
  if (X.dtype() != DType::Float) return invalidArgument(std::string(what) + " must be float");
  if (X.rank() != 5 || (X.dim(4) != 8 && X.dim(4) != 16))
    return invalidArgument(std::string(what) + " has shape " + shapeToString(X.shape()) +
                           ", expected the blocked layout [N, C/b, H, W, b], b 8 or 16");
  return Status::ok();
}

class ToBlockedKernel : public Kernel {
 public:
  explicit ToBlockedKernel(int block) : m_block(block) {}
  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    if (X.dtype() != DType::Float || X.rank() != 4 || X.dim(1) % m_block != 0)
      return invalidArgument("ToNchw8c needs a float [N, C, H, W] tensor with C a multiple of " +
                             std::to_string(m_block) + ", got " + shapeToString(X.shape()));
    const int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), W = X.dim(3);
    Tensor Y(DType::Float, {N, C / m_block, H, W, m_block});
    toNchw8c(X.data<float>(), N, C, H * W, Y.data<float>(), ctx.threads, m_block);
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  int m_block;
};

// The attribute block of a blocked-layout node: 8 (the default) or 16.
Result<int> readBlock(AttrReader& a) {
  const int64_t block = a.i("block", 8);
  if (!a.ok()) return a.status();
  if (block != 8 && block != 16)
    return kernelError(StatusCode::InvalidModel, "block is " + std::to_string(block) + ", expected 8 or 16");
  return (int)block;
}

Result<std::unique_ptr<Kernel>> createToBlocked(const KernelInit& init) {
  AttrReader a(init);
  auto block = readBlock(a);
  if (!block) return block.status();
  return std::unique_ptr<Kernel>(std::make_unique<ToBlockedKernel>(*block));
}

Status runFromBlocked(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  QS_RETURN_IF_ERROR(requireBlocked(X, "FromNchw8c input"));
  const int64_t B = X.dim(4), N = X.dim(0), C = X.dim(1) * B, H = X.dim(2), W = X.dim(3);
  Tensor Y(DType::Float, {N, C, H, W});
  fromNchw8c(X.data<float>(), N, C, H * W, Y.data<float>(), ctx.threads, (int)B);
  ctx.outputs[0] = std::move(Y);
  return Status::ok();
}

// out[p][c] = in[p][c] * s[c] + h[c] (then max with 0) over HW pixels of one kBlock-channel block.
template <bool kRelu, int kBlock>
void affineBlock(const float* in, const float* s, const float* h, int64_t HW, float* out) {
  float sv[kBlock], hv[kBlock];
  for (int c = 0; c < kBlock; ++c) {
    sv[c] = s[c];
    hv[c] = h[c];
  }
  for (int64_t p = 0; p < HW; ++p) {
#pragma GCC unroll 16
    for (int c = 0; c < kBlock; ++c) {
      const float v = in[p * kBlock + c] * sv[c] + hv[c];
      out[p * kBlock + c] = kRelu ? (v > 0.f ? v : 0.f) : v;
    }
  }
}

template <bool kRelu>
void affine(const float* in, const float* s, const float* h, int64_t HW, int64_t block, float* out) {
  if (block == 16) affineBlock<kRelu, 16>(in, s, h, HW, out);
  else affineBlock<kRelu, 8>(in, s, h, HW, out);
}

class BlockedBatchNormKernel : public Kernel {
 public:
  explicit BlockedBatchNormKernel(bool relu) : m_relu(relu) {}
  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireBlocked(X, "BlockedBatchNorm X"));
    const int64_t N = X.dim(0), CB = X.dim(1), HW = X.dim(2) * X.dim(3), B = X.dim(4);
    if (!ctx.hasInput(1) || !ctx.hasInput(2) || ctx.input(1).numel() != CB * B || ctx.input(2).numel() != CB * B ||
        ctx.input(1).dtype() != DType::Float || ctx.input(2).dtype() != DType::Float)
      return invalidArgument("BlockedBatchNorm needs float scale and shift of " + std::to_string(CB * B) + " values");
    const float* x = X.data<float>();
    const float* scale = ctx.input(1).data<float>();
    const float* shift = ctx.input(2).data<float>();
    Tensor Y(DType::Float, X.shape());
    float* y = Y.data<float>();
    parallelFor(ctx.threads, N * CB, blockGrain(HW, B), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const float* in = x + t * HW * B;
        float* out = y + t * HW * B;
        if (m_relu) affine<true>(in, scale + (t % CB) * B, shift + (t % CB) * B, HW, B, out);
        else affine<false>(in, scale + (t % CB) * B, shift + (t % CB) * B, HW, B, out);
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
  BlockedConvKernel(WindowAttrs attrs, std::unique_ptr<DnnlConv> conv, int64_t M, int64_t C, int64_t kH, int64_t kW,
                    int block)
      : m_attrs(std::move(attrs)), m_conv(std::move(conv)), m_M(M), m_C(C), m_kH(kH), m_kW(kW), m_block(block) {}

  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireBlocked(X, "BlockedConv X"));
    const int64_t N = X.dim(0), B = X.dim(4), C = X.dim(1) * B;
    if (B != m_block)
      return invalidArgument("BlockedConv X has blocks of " + std::to_string(B) + " channels, made for " +
                             std::to_string(m_block));
    if (C != m_C)
      return invalidArgument("BlockedConv X has " + std::to_string(C) + " channels, W expects " + std::to_string(m_C));
    WindowGeometry g;
    QS_RETURN_IF_ERROR(resolveWindow(m_attrs, {X.dim(2), X.dim(3)}, {m_kH, m_kW}, false, g));
    Tensor Y(DType::Float, {N, m_M / B, g.out[1], g.out[2], B});
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
  int m_block;
};

Result<std::unique_ptr<Kernel>> createBlockedConv(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, true);
  std::vector<std::string> names = a.strings("activations");
  std::vector<float> params = a.floats("activation_params");
  const bool residualRelu = a.i("residual_relu", 0) != 0;
  auto block = readBlock(a);
  if (!block) return block.status();
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
  auto conv = DnnlConv::createBlocked(*W, B, std::move(acts), residual, residualRelu, *block);
  if (!conv)
    return kernelError(StatusCode::Unsupported, "BlockedConv: oneDNN is not available or refuses W " +
                                                    shapeToString(W->shape()) + " with these activations");
  return std::unique_ptr<Kernel>(
      std::make_unique<BlockedConvKernel>(std::move(attrs), std::move(conv), W->dim(0), W->dim(1), W->dim(2), W->dim(3),
                                          *block));
}

Result<std::unique_ptr<Kernel>> createBlockedBatchNorm(const KernelInit& init) {
  AttrReader a(init);
  const bool relu = a.i("relu", 0) != 0;
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<BlockedBatchNormKernel>(relu));
}

}  // namespace

void toNchw8c(const float* x, int64_t N, int64_t C, int64_t HW, float* y, int threads, int block) {
  const int64_t CB = C / block;
  parallelFor(threads, N * CB, blockGrain(HW, block), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* in = x + t * block * HW;  // channels block*cb .. block*cb+block-1 of image n: contiguous planes
      float* out = y + t * block * HW;
      for (int64_t p = 0; p < HW; ++p)
        for (int c = 0; c < block; ++c) out[p * block + c] = in[c * HW + p];
    }
  });
}

void fromNchw8c(const float* x, int64_t N, int64_t C, int64_t HW, float* y, int threads, int block) {
  const int64_t CB = C / block;
  parallelFor(threads, N * CB, blockGrain(HW, block), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* in = x + t * block * HW;
      float* out = y + t * block * HW;
      for (int c = 0; c < block; ++c)
        for (int64_t p = 0; p < HW; ++p) out[c * HW + p] = in[p * block + c];
    }
  });
}

std::vector<KernelEntry> blockedLayoutKernels() {
  return {
      {kToBlockedOp, kFusedDomain, 1, 1, createToBlocked},
      {kFromBlockedOp, kFusedDomain, 1, 1, [](const KernelInit&) -> Result<std::unique_ptr<Kernel>> {
         return std::unique_ptr<Kernel>(makeKernel(runFromBlocked));
       }},
      {kBlockedConvOp, kFusedDomain, 1, 1, createBlockedConv},
      {kBlockedBatchNormOp, kFusedDomain, 1, 1, createBlockedBatchNorm},
  };
}

}  // namespace qs
