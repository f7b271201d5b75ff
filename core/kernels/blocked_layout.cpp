// Kernels of the blocked layout: see blocked_layout.h.
#include "core/kernels/blocked_layout.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <string>

#include "core/exec/parallel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/expand_depthwise_blocked.h"

namespace qs {

namespace {

// Grain of the reorders and the affine, in channel blocks of a plane: a chunk handed to another
// core should move at least ~64 K floats.
int64_t blockGrain(int64_t HW, int64_t block) {
  return std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(HW * block, 1));
}

int64_t blocksOf(int64_t C, int64_t block) { return (C + block - 1) / block; }

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
    if (X.dtype() != DType::Float || X.rank() != 4)
      return invalidArgument("ToNchw8c needs a float [N, C, H, W] tensor, got " + shapeToString(X.shape()));
    const int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), W = X.dim(3);
    Tensor Y(DType::Float, {N, blocksOf(C, m_block), H, W, m_block});
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

// The attribute channels of a node whose blocked input may carry a padded channel tail: the
// logical channel count C (0, the default: whole blocks, C = C/b * b).
Result<int64_t> readChannels(AttrReader& a) {
  const int64_t channels = a.i("channels", 0);
  if (!a.ok()) return a.status();
  if (channels < 0) return kernelError(StatusCode::InvalidModel, "channels is " + std::to_string(channels));
  return channels;
}

// The logical channels of blocked X: `channels`, or all lanes when 0; fails unless X's blocks
// hold exactly that many (a tail of fewer than b).
Result<int64_t> logicalChannels(const Tensor& X, int64_t channels, const char* what) {
  const int64_t B = X.dim(4), CB = X.dim(1);
  if (channels == 0) return CB * B;
  if (blocksOf(channels, B) != CB)
    return invalidArgument(std::string(what) + " has shape " + shapeToString(X.shape()) + ", which does not hold " +
                           std::to_string(channels) + " channels in blocks of " + std::to_string(B));
  return channels;
}

class FromBlockedKernel : public Kernel {
 public:
  explicit FromBlockedKernel(int64_t channels) : m_channels(channels) {}
  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireBlocked(X, "FromNchw8c input"));
    auto C = logicalChannels(X, m_channels, "FromNchw8c input");
    if (!C) return C.status();
    const int64_t B = X.dim(4), N = X.dim(0), H = X.dim(2), W = X.dim(3);
    Tensor Y(DType::Float, {N, *C, H, W});
    fromNchw8c(X.data<float>(), N, *C, H * W, Y.data<float>(), ctx.threads, (int)B);
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  int64_t m_channels;
};

Result<std::unique_ptr<Kernel>> createFromBlocked(const KernelInit& init) {
  AttrReader a(init);
  auto channels = readChannels(a);
  if (!channels) return channels.status();
  return std::unique_ptr<Kernel>(std::make_unique<FromBlockedKernel>(*channels));
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

// Over the concatenation of its `inputs` blocked X (one X: a plain BatchNormalization; several: a
// densenet layer's Concat read in place, its output never written).
class BlockedBatchNormKernel : public Kernel {
 public:
  BlockedBatchNormKernel(bool relu, int inputs) : m_relu(relu), m_inputs(inputs) {}
  Status run(KernelContext& ctx) const override {
    const int k = m_inputs;
    bool present = (int)ctx.inputCount() == k + 2;
    for (int i = 0; present && i < k + 2; ++i) present = ctx.hasInput((size_t)i);
    if (!present)
      return invalidArgument("BlockedBatchNorm needs " + std::to_string(k) + " X, scale and shift, got " +
                             std::to_string(ctx.inputCount()) + " inputs");
    std::vector<const float*> xs((size_t)k);
    std::vector<int64_t> firstBlock((size_t)k + 1, 0);  // input i holds blocks [firstBlock[i], firstBlock[i + 1])
    const Tensor& X0 = ctx.input(0);
    for (int i = 0; i < k; ++i) {
      const Tensor& X = ctx.input(i);
      QS_RETURN_IF_ERROR(requireBlocked(X, "BlockedBatchNorm X"));
      if (X.dim(0) != X0.dim(0) || X.dim(2) != X0.dim(2) || X.dim(3) != X0.dim(3) || X.dim(4) != X0.dim(4))
        return invalidArgument("BlockedBatchNorm X " + std::to_string(i) + " has shape " + shapeToString(X.shape()) +
                               ", X 0 " + shapeToString(X0.shape()) +
                               ": the concatenated inputs differ beyond channels");
      xs[(size_t)i] = X.data<float>();
      firstBlock[(size_t)i + 1] = firstBlock[(size_t)i] + X.dim(1);
    }
    const int64_t N = X0.dim(0), CB = firstBlock[(size_t)k], HW = X0.dim(2) * X0.dim(3), B = X0.dim(4);
    const Tensor &S = ctx.input(k), &H = ctx.input(k + 1);
    if (S.numel() != CB * B || H.numel() != CB * B || S.dtype() != DType::Float || H.dtype() != DType::Float)
      return invalidArgument("BlockedBatchNorm needs float scale and shift of " + std::to_string(CB * B) + " values");
    const float* scale = S.data<float>();
    const float* shift = H.data<float>();
    Tensor Y(DType::Float, {N, CB, X0.dim(2), X0.dim(3), B});
    float* y = Y.data<float>();
    parallelFor(ctx.threads, N * CB, blockGrain(HW, B), [&](int64_t b, int64_t e) {
      size_t i = 0;
      for (int64_t t = b; t < e; ++t) {
        const int64_t n = t / CB, cb = t % CB;
        if (cb < firstBlock[i]) i = 0;
        while (cb >= firstBlock[i + 1]) ++i;
        const int64_t cbi = firstBlock[i + 1] - firstBlock[i];
        const float* in = xs[i] + (n * cbi + cb - firstBlock[i]) * HW * B;
        float* out = y + t * HW * B;
        if (m_relu) affine<true>(in, scale + cb * B, shift + cb * B, HW, B, out);
        else affine<false>(in, scale + cb * B, shift + cb * B, HW, B, out);
      }
    });
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  bool m_relu;
  int m_inputs;
};

class BlockedConvKernel : public Kernel {
 public:
  BlockedConvKernel(WindowAttrs attrs, std::unique_ptr<DnnlConv> conv, int64_t M, int64_t C, int64_t kH, int64_t kW,
                    int block, bool plainInput)
      : m_attrs(std::move(attrs)), m_conv(std::move(conv)), m_M(M), m_C(C), m_kH(kH), m_kW(kW), m_block(block),
        m_plainInput(plainInput) {}

  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    int64_t N = 0, B = m_block, blocks = 0;
    if (m_plainInput) {  // a stem: X plain [N, C, H, W]
      if (X.dtype() != DType::Float || X.rank() != 4)
        return invalidArgument("BlockedConv X has shape " + shapeToString(X.shape()) +
                               ", expected a float [N, C, H, W] tensor (plain_input)");
      if (X.dim(1) != m_C)
        return invalidArgument("BlockedConv X has " + std::to_string(X.dim(1)) + " channels, W expects " +
                               std::to_string(m_C));
      N = X.dim(0);
    } else {
      QS_RETURN_IF_ERROR(requireBlocked(X, "BlockedConv X"));
      N = X.dim(0);
      B = X.dim(4);
      blocks = X.dim(1);
    }
    if (B != m_block)
      return invalidArgument("BlockedConv X has blocks of " + std::to_string(B) + " channels, made for " +
                             std::to_string(m_block));
    // (A channel tail padded to a whole block: the pad lanes meet W's zero pad.)
    if (!m_plainInput && blocks != blocksOf(m_C, B))
      return invalidArgument("BlockedConv X has " + std::to_string(blocks) + " blocks of " + std::to_string(B) +
                             " channels, W expects " + std::to_string(m_C) + " channels");
    WindowGeometry g;
    QS_RETURN_IF_ERROR(resolveWindow(m_attrs, {X.dim(2), X.dim(3)}, {m_kH, m_kW}, false, g));
    Tensor Y(DType::Float, {N, blocksOf(m_M, B), g.out[1], g.out[2], B});
    const float* residual = nullptr;
    if (ctx.hasInput(3)) {
      const Tensor& R = ctx.input(3);
      if (R.dtype() != DType::Float || R.shape() != Y.shape())
        return invalidArgument("BlockedConv residual has shape " + shapeToString(R.shape()) + ", expected " +
                               shapeToString(Y.shape()));
      residual = R.data<float>();
    }
    if (N > 0)
      QS_RETURN_IF_ERROR(m_conv->runBlocked(X.data<float>(), N, m_C, g, Y.data<float>(), residual, ctx.threads));
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  WindowAttrs m_attrs;
  std::unique_ptr<DnnlConv> m_conv;
  int64_t m_M, m_C, m_kH, m_kW;
  int m_block;
  bool m_plainInput;
};

Result<std::unique_ptr<Kernel>> createBlockedConv(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, true);
  std::vector<std::string> names = a.strings("activations");
  std::vector<float> params = a.floats("activation_params");
  const bool residualRelu = a.i("residual_relu", 0) != 0;
  const bool plainInput = a.i("plain_input", 0) != 0;
  auto block = readBlock(a);
  if (!block) return block.status();
  std::vector<FusedActivation> acts;
  if (Status st = parseFusedActivations(names, params, acts); !st) return st;
  const Tensor* W = init.constantInput(1);
  const Tensor* B = init.constantInput(2);
  if (!W || W->dtype() != DType::Float || W->rank() != 4)
    return kernelError(StatusCode::InvalidModel, "BlockedConv needs a constant float W [M, C, kH, kW]");
  if (plainInput && !DnnlConv::plainInputSupported(W->dim(1) * attrs.group, W->dim(0), attrs.group, *block))
    return kernelError(StatusCode::Unsupported, "BlockedConv: W " + shapeToString(W->shape()) + " in " +
                                                    std::to_string(attrs.group) + " groups with plain_input needs " +
                                                    "group 1, fewer than 8 input channels and output channels in " +
                                                    "whole blocks of " + std::to_string(*block));
  if (!plainInput && !DnnlConv::blockedShapeSupported(W->dim(1) * attrs.group, W->dim(0), attrs.group, *block))
    return kernelError(StatusCode::Unsupported, "BlockedConv: W " + shapeToString(W->shape()) + " in " +
                                                    std::to_string(attrs.group) + " groups is no form of block " +
                                                    std::to_string(*block) +
                                                    " (group 1 or depthwise in channels of multiples of 8, or"
                                                    " whole blocks per group)");
  if (init.node.inputs.size() > 2 && init.node.inputs[2] != kNoValue && !B)
    return kernelError(StatusCode::InvalidModel, "BlockedConv needs a constant B");
  const bool residual = init.node.inputs.size() > 3 && init.node.inputs[3] != kNoValue;
  auto conv = DnnlConv::createBlocked(*W, B, attrs.group, std::move(acts), residual, residualRelu, *block, plainInput);
  if (!conv)
    return kernelError(StatusCode::Unsupported, "BlockedConv: oneDNN is not available or refuses W " +
                                                    shapeToString(W->shape()) + " with these activations");
  return std::unique_ptr<Kernel>(std::make_unique<BlockedConvKernel>(
      attrs, std::move(conv), W->dim(0), W->dim(1) * attrs.group, W->dim(2), W->dim(3), *block, plainInput));
}

// One pixel of a channel block, kB floats, as kB / 8 AVX2 vectors (the kernels here are built for
// x86-64-v3; nChw16c is two vectors per pixel).
template <int kB>
struct BlockVec {
  static constexpr int kVecs = kB / 8;
  __m256 v[kVecs];
  static BlockVec load(const float* p) {
    BlockVec r;
    for (int i = 0; i < kVecs; ++i) r.v[i] = _mm256_loadu_ps(p + 8 * i);
    return r;
  }
  static BlockVec splat(float f) {
    BlockVec r;
    for (int i = 0; i < kVecs; ++i) r.v[i] = _mm256_set1_ps(f);
    return r;
  }
  void store(float* p) const {
    for (int i = 0; i < kVecs; ++i) _mm256_storeu_ps(p + 8 * i, v[i]);
  }
};

// Valid tap range [lo, hi) of a window starting at `start` with `k` taps spaced `d` in [0, len).
inline void tapRange(int64_t start, int64_t k, int64_t d, int64_t len, int64_t& lo, int64_t& hi) {
  lo = start >= 0 ? 0 : (-start + d - 1) / d;
  const int64_t last = len - 1 - start;
  hi = last < 0 ? 0 : std::min(k, last / d + 1);
  lo = std::min(lo, hi);
}

// MaxPool / AveragePool (2-D) on [N, C/b, H, W, b]: each output pixel one b-lane block over its
// valid taps in (kh, kw) order, the comparisons and sums of the plain kernels (core/kernels/pool.cpp)
// lane by lane: max = the first valid tap, then v > best (false for NaN); average = 0 + the taps
// in order, divided by the count (with or without the padding). The same bits in either block.
class BlockedPoolKernel : public Kernel {
 public:
  BlockedPoolKernel(WindowAttrs attrs, bool isMax, bool ceilMode, bool includePad)
      : m_attrs(std::move(attrs)), m_max(isMax), m_ceil(ceilMode), m_includePad(includePad) {}

  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireBlocked(X, m_max ? "BlockedMaxPool X" : "BlockedAveragePool X"));
    return X.dim(4) == 16 ? pool<16>(ctx) : pool<8>(ctx);
  }

 private:
  // P output pixels of one row at once, ow .. ow + P - 1, whose windows share the tap ranges
  // [hlo, hhi) x [wlo, whi) (P > 1: the columns where no window is clipped): their P x kB / 8
  // accumulators are independent chains, so the taps' compare latency overlaps. For max,
  // _mm256_max_ps(v, best) is v > best ? v : best, the plain kernel's comparison in one instruction
  // (the blend it replaced took a compare and a blend per tap: resnet50's stem MaxPool took twice
  // ONNX Runtime's time, latency-bound; docs/performance.md, "resnet50 outside its 1x1 and 3x3
  // bodies (wt-r50rest)").
  template <int kB, int P>
  void pixels(const float* xp, int64_t IW, int64_t sh, int64_t hlo, int64_t hhi, int64_t sw, int64_t wlo, int64_t whi,
              const WindowGeometry& g, float div, float* out) const {
    using V = BlockVec<kB>;
    V acc[P];
    for (int j = 0; j < P; ++j) acc[j] = V::splat(0.f);
    bool first = true;
    for (int64_t a = hlo; a < hhi; ++a) {
      const float* row = xp + ((sh + a * g.d[1]) * IW + sw) * kB;
      for (int64_t c = wlo; c < whi; ++c) {
        for (int j = 0; j < P; ++j) {
          const V v = V::load(row + (j * g.s[2] + c * g.d[2]) * kB);
          for (int i = 0; i < V::kVecs; ++i)
            acc[j].v[i] = m_max ? (first ? v.v[i] : _mm256_max_ps(v.v[i], acc[j].v[i])) : _mm256_add_ps(acc[j].v[i], v.v[i]);
        }
        first = false;
      }
    }
    for (int j = 0; j < P; ++j) {
      if (m_max) {
        if (first) acc[j] = V::splat(std::numeric_limits<float>::lowest());  // no valid tap: the plain kernel's start
      } else {
        const __m256 d = _mm256_set1_ps(div);
        for (int i = 0; i < V::kVecs; ++i) acc[j].v[i] = div > 0.f ? _mm256_div_ps(acc[j].v[i], d) : _mm256_setzero_ps();
      }
      acc[j].store(out + j * kB);
    }
  }

  template <int kB>
  Status pool(KernelContext& ctx) const {
    constexpr int kP = 4;  // output pixels at once where the window is not clipped
    const Tensor& X = ctx.input(0);
    WindowGeometry g;
    QS_RETURN_IF_ERROR(resolveWindow(m_attrs, {X.dim(2), X.dim(3)}, m_attrs.kernelShape, m_ceil, g));
    const int64_t N = X.dim(0), CB = X.dim(1), IH = g.in[1], IW = g.in[2], OH = g.out[1], OW = g.out[2];
    Tensor Y(DType::Float, {N, CB, OH, OW, kB});
    const float* x = X.data<float>();
    float* y = Y.data<float>();
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(OW * kB * g.kSize(), 1));
    // The output columns whose window lies inside [0, IW): [owLo, owHi).
    const int64_t span = (g.k[2] - 1) * g.d[2];
    const int64_t owLo = std::min(OW, (g.padB[2] + g.s[2] - 1) / g.s[2]);
    const int64_t owHi = std::max(owLo, std::min(OW, IW - 1 - span + g.padB[2] >= 0
                                                          ? (IW - 1 - span + g.padB[2]) / g.s[2] + 1 : 0));
    parallelFor(ctx.threads, N * CB * OH, grain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t oh = t % OH, plane = t / OH;
        const float* xp = x + plane * IH * IW * kB;
        float* yp = y + (plane * OH + oh) * OW * kB;
        const int64_t sh = oh * g.s[1] - g.padB[1];
        int64_t hlo, hhi, hplo, hphi;
        tapRange(sh, g.k[1], g.d[1], IH, hlo, hhi);
        tapRange(sh + g.padB[1], g.k[1], g.d[1], IH + g.padB[1] + g.padE[1], hplo, hphi);
        for (int64_t ow = 0; ow < OW;) {
          const int64_t sw = ow * g.s[2] - g.padB[2];
          int64_t wlo, whi, wplo, wphi;
          tapRange(sw, g.k[2], g.d[2], IW, wlo, whi);
          tapRange(sw + g.padB[2], g.k[2], g.d[2], IW + g.padB[2] + g.padE[2], wplo, wphi);
          const int64_t cnt = m_includePad ? (hphi - hplo) * (wphi - wplo) : (hhi - hlo) * (whi - wlo);
          if (ow >= owLo && ow + kP <= owHi) {
            // (Not clipped: each of the kP windows has all kW taps, and the same count.)
            pixels<kB, kP>(xp, IW, sh, hlo, hhi, sw, wlo, whi, g, (float)cnt, yp + ow * kB);
            ow += kP;
          } else {
            pixels<kB, 1>(xp, IW, sh, hlo, hhi, sw, wlo, whi, g, (float)cnt, yp + ow * kB);
            ++ow;
          }
        }
      }
    });
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

  WindowAttrs m_attrs;
  bool m_max, m_ceil, m_includePad;
};

// GlobalAveragePool of [N, C/b, H, W, b] -> plain [N, C, 1, 1] (at 1x1 the two layouts are the same
// bytes, so a region ends here without a reorder): four partial sums per lane over the pixels
// (p mod 4), so a channel's sum is the same in either block.
// With C not a whole number of blocks, each image's pad lanes are dropped: y holds C per image.
template <int kB>
void globalAverageBlocks(const float* x, int64_t NCB, int64_t CB, int64_t C, int64_t HW, float* y, int threads) {
  using V = BlockVec<kB>;
  parallelFor(threads, NCB, blockGrain(HW, kB), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* in = x + t * HW * kB;
      V a[4] = {V::splat(0.f), V::splat(0.f), V::splat(0.f), V::splat(0.f)};
      int64_t p = 0;
      for (; p + 4 <= HW; p += 4)
        for (int q = 0; q < 4; ++q) {
          const V v = V::load(in + (p + q) * kB);
          for (int i = 0; i < V::kVecs; ++i) a[q].v[i] = _mm256_add_ps(a[q].v[i], v.v[i]);
        }
      for (; p < HW; ++p) {
        const V v = V::load(in + p * kB);
        for (int i = 0; i < V::kVecs; ++i) a[0].v[i] = _mm256_add_ps(a[0].v[i], v.v[i]);
      }
      const __m256 d = _mm256_set1_ps((float)HW);
      V out;
      for (int i = 0; i < V::kVecs; ++i) {
        const __m256 sum = _mm256_add_ps(_mm256_add_ps(a[0].v[i], a[1].v[i]), _mm256_add_ps(a[2].v[i], a[3].v[i]));
        out.v[i] = HW > 0 ? _mm256_div_ps(sum, d) : _mm256_setzero_ps();
      }
      const int64_t n = t / CB, cb = t % CB, lanes = std::min<int64_t>(kB, C - cb * kB);
      if (lanes == kB) {
        out.store(y + n * C + cb * kB);
      } else {
        float tail[kB];
        out.store(tail);
        std::copy(tail, tail + lanes, y + n * C + cb * kB);
      }
    }
  });
}

class BlockedGlobalAveragePoolKernel : public Kernel {
 public:
  explicit BlockedGlobalAveragePoolKernel(int64_t channels) : m_channels(channels) {}
  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireBlocked(X, "BlockedGlobalAveragePool X"));
    auto C = logicalChannels(X, m_channels, "BlockedGlobalAveragePool X");
    if (!C) return C.status();
    const int64_t N = X.dim(0), CB = X.dim(1), HW = X.dim(2) * X.dim(3), B = X.dim(4);
    Tensor Y(DType::Float, {N, *C, 1, 1});
    if (B == 16) globalAverageBlocks<16>(X.data<float>(), N * CB, CB, *C, HW, Y.data<float>(), ctx.threads);
    else globalAverageBlocks<8>(X.data<float>(), N * CB, CB, *C, HW, Y.data<float>(), ctx.threads);
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  int64_t m_channels;
};

Result<std::unique_ptr<Kernel>> createBlockedGlobalAveragePool(const KernelInit& init) {
  AttrReader a(init);
  auto channels = readChannels(a);
  if (!channels) return channels.status();
  return std::unique_ptr<Kernel>(std::make_unique<BlockedGlobalAveragePoolKernel>(*channels));
}

// s holds sC values per image (sC >= C/b * b, or a padded tail: the lanes past sC scale by 0).
template <int kB>
void scaleBlocks(const float* x, const float* s, int64_t NCB, int64_t CB, int64_t sC, int64_t HW, float* y,
                 int threads) {
  using V = BlockVec<kB>;
  parallelFor(threads, NCB, blockGrain(HW, kB), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / CB, cb = t % CB, lanes = std::min<int64_t>(kB, sC - cb * kB);
      float tail[kB] = {};
      const float* sp = s + n * sC + cb * kB;
      if (lanes < kB) sp = std::copy(sp, sp + lanes, tail) - lanes;
      const V sv = V::load(sp);
      const float* in = x + t * HW * kB;
      float* out = y + t * HW * kB;
      for (int64_t p = 0; p < HW; ++p) {
        V v = V::load(in + p * kB);
        for (int i = 0; i < V::kVecs; ++i) v.v[i] = _mm256_mul_ps(v.v[i], sv.v[i]);
        v.store(out + p * kB);
      }
    }
  });
}

// y = x * s, x [N, C/b, H, W, b] and s one value per image and channel ([N, C, 1, 1] plain or
// [N, C/b', 1, 1, b'], a blocked value of either block: the same bytes but for a padded tail): a
// squeeze-and-excitation block's Mul. With a padded channel tail, C is S's: the pad lanes of x
// are scaled by 0 (plain S) or by S's own pad lanes (blocked S).
Status runBlockedChannelScale(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  QS_RETURN_IF_ERROR(requireBlocked(X, "BlockedChannelScale X"));
  const int64_t N = X.dim(0), CB = X.dim(1), HW = X.dim(2) * X.dim(3), B = X.dim(4);
  if (!ctx.hasInput(1)) return invalidArgument("BlockedChannelScale needs a scale input");
  const Tensor& S = ctx.input(1);
  // S's channels per image as laid out; X's blocks must hold them, up to a tail of less than a block.
  const int64_t sC = S.rank() == 4 ? S.dim(1) : S.rank() == 5 ? S.dim(1) * S.dim(4) : -1;
  const bool fits = sC > (CB - 1) * B && (S.rank() == 4 ? sC <= CB * B : sC - CB * B < S.dim(4));
  const bool plain = S.rank() == 4 && S.dim(0) == N && fits && S.dim(2) == 1 && S.dim(3) == 1;
  // (A blocked S may come from a region of the other block: at 1x1 the bytes are the same, but
  // for a padded tail.)
  const bool blocked = S.rank() == 5 && S.dim(0) == N && fits && S.dim(2) == 1 && S.dim(3) == 1;
  if (S.dtype() != DType::Float || !(plain || blocked))
    return invalidArgument("BlockedChannelScale scale has shape " + shapeToString(S.shape()) + ", expected [" +
                           std::to_string(N) + ", " + std::to_string(CB * B) + ", 1, 1] for X " +
                           shapeToString(X.shape()));
  Tensor Y(DType::Float, X.shape());
  if (B == 16) scaleBlocks<16>(X.data<float>(), S.data<float>(), N * CB, CB, sC, HW, Y.data<float>(), ctx.threads);
  else scaleBlocks<8>(X.data<float>(), S.data<float>(), N * CB, CB, sC, HW, Y.data<float>(), ctx.threads);
  ctx.outputs[0] = std::move(Y);
  return Status::ok();
}

Result<std::unique_ptr<Kernel>> createBlockedPool(const KernelInit& init, bool isMax) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, false);
  const bool ceilMode = a.i("ceil_mode", 0) != 0;
  const bool includePad = !isMax && a.i("count_include_pad", 0) != 0;
  if (!a.ok()) return a.status();
  if (attrs.kernelShape.size() != 2)
    return kernelError(StatusCode::Unsupported,
                       "blocked pooling is 2-D only, kernel_shape " + shapeToString(attrs.kernelShape));
  if (init.node.outputs.size() > 1 && init.node.outputs[1] != kNoValue)
    return kernelError(StatusCode::Unsupported, "BlockedMaxPool has no Indices output");
  return std::unique_ptr<Kernel>(std::make_unique<BlockedPoolKernel>(std::move(attrs), isMax, ceilMode, includePad));
}

Result<std::unique_ptr<Kernel>> createBlockedBatchNorm(const KernelInit& init) {
  AttrReader a(init);
  const bool relu = a.i("relu", 0) != 0;
  const int64_t inputs = a.i("concat", 1);
  if (!a.ok()) return a.status();
  if (inputs < 1 || inputs + 2 != (int64_t)init.node.inputs.size())
    return kernelError(StatusCode::InvalidModel, "BlockedBatchNorm: concat is " + std::to_string(inputs) + " with " +
                                                     std::to_string(init.node.inputs.size()) +
                                                     " inputs, expected concat X inputs, then scale and shift");
  return std::unique_ptr<Kernel>(std::make_unique<BlockedBatchNormKernel>(relu, (int)inputs));
}

}  // namespace

void toNchw8c(const float* x, int64_t N, int64_t C, int64_t HW, float* y, int threads, int block) {
  const int64_t CB = blocksOf(C, block);
  parallelFor(threads, N * CB, blockGrain(HW, block), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / CB, cb = t % CB;
      // channels block*cb .. block*cb+block-1 of image n: contiguous planes
      const float* in = x + (n * C + cb * block) * HW;
      float* out = y + t * block * HW;
      const int lanes = (int)std::min<int64_t>(block, C - cb * block);
      if (lanes == block) {
        for (int64_t p = 0; p < HW; ++p)
          for (int c = 0; c < block; ++c) out[p * block + c] = in[c * HW + p];
      } else {  // the padded tail: zero pad lanes
        for (int64_t p = 0; p < HW; ++p) {
          for (int c = 0; c < lanes; ++c) out[p * block + c] = in[c * HW + p];
          for (int c = lanes; c < block; ++c) out[p * block + c] = 0.f;
        }
      }
    }
  });
}

void fromNchw8c(const float* x, int64_t N, int64_t C, int64_t HW, float* y, int threads, int block) {
  const int64_t CB = blocksOf(C, block);
  parallelFor(threads, N * CB, blockGrain(HW, block), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / CB, cb = t % CB;
      const float* in = x + t * block * HW;
      float* out = y + (n * C + cb * block) * HW;
      const int lanes = (int)std::min<int64_t>(block, C - cb * block);
      for (int c = 0; c < lanes; ++c)
        for (int64_t p = 0; p < HW; ++p) out[c * HW + p] = in[p * block + c];
    }
  });
}

std::vector<KernelEntry> blockedLayoutKernels() {
  return {
      {kToBlockedOp, kFusedDomain, 1, 1, createToBlocked},
      {kFromBlockedOp, kFusedDomain, 1, 1, createFromBlocked},
      {kBlockedConvOp, kFusedDomain, 1, 1, createBlockedConv},
      {kBlockedExpandDepthwiseOp, kFusedDomain, 1, 1, createBlockedExpandDepthwise},
      {kBlockedBatchNormOp, kFusedDomain, 1, 1, createBlockedBatchNorm},
      {kBlockedMaxPoolOp, kFusedDomain, 1, 1, [](const KernelInit& init) { return createBlockedPool(init, true); }},
      {kBlockedAveragePoolOp, kFusedDomain, 1, 1,
       [](const KernelInit& init) { return createBlockedPool(init, false); }},
      {kBlockedGlobalAveragePoolOp, kFusedDomain, 1, 1, createBlockedGlobalAveragePool},
      {kBlockedChannelScaleOp, kFusedDomain, 1, 1, [](const KernelInit&) -> Result<std::unique_ptr<Kernel>> {
         return std::unique_ptr<Kernel>(makeKernel(runBlockedChannelScale));
       }},
  };
}

}  // namespace qs
