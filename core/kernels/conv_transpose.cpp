// ConvTranspose (ai.onnx opsets 1..21, FP32) and ai.quantscope FusedConvTranspose (opset 1).
#include "core/kernels/conv_transpose.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/kernels/conv.h"
#include "core/kernels/gemm.h"

namespace qs {

namespace {

int64_t floorDiv2(int64_t a) { return a >= 0 ? a / 2 : -((-a + 1) / 2); }

// col2im where the windows tile the output (kernel == stride, dilation 1, every output position
// inside exactly one window, padding only cropping): out = col + bias, each element written once.
void col2imTiled(const float* col, int64_t c0, int64_t c1, const WindowGeometry& g, const float* bias, float* out) {
  const int64_t inSize = g.inSize(), outSize = g.outSize(), kSize = g.kSize();
  const int64_t OW = g.out[2], IW = g.in[2], S = g.s[2];
  for (int64_t c = c0; c < c1; ++c) {
    float* dstPlane = out + c * inSize;
    const float* row = col + c * kSize * outSize;
    const float bv = bias ? bias[c] : 0.f;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, row += outSize) {
          const int64_t offW = kw - g.padB[2];
          int64_t lo, hi;
          windowValidRange(offW, S, IW, OW, lo, hi);
          for (int64_t od = 0; od < g.out[0]; ++od) {
            const int64_t id = od * g.s[0] - g.padB[0] + kd;
            if (id < 0 || id >= g.in[0]) continue;
            for (int64_t oh = 0; oh < g.out[1]; ++oh) {
              const int64_t ih = oh * g.s[1] - g.padB[1] + kh;
              if (ih < 0 || ih >= g.in[1]) continue;
              const float* src = row + (od * g.out[1] + oh) * OW;
              float* drow = dstPlane + (id * g.in[1] + ih) * IW + offW;
              for (int64_t o = lo; o < hi; ++o) drow[o * S] = src[o] + bv;
            }
          }
        }
  }
}

// The 2x2 stride-2 ConvTranspose of upsampling heads (det's two 24-channel ones) computed directly: each
// input pixel gives a 2x2 block of every output channel, so output rows 2h and 2h + 1 of channel m are
// sums over the C input channels of row h, the kw = 0 and kw = 1 sums interleaved. No column buffer and
// no strided scatter (the GEMM + col2im path wrote the 4 M columns, then read them back to write every
// other float). Each output is the FMA chain over c = 0..C-1 from zero, as the GEMM's micro-kernel sums a
// K slice of at most 256, then + bias, so the bits are the GEMM path's (C <= 256 only).

// W [C, M, 2, 2] repacked as [M][C][4] (kh * 2 + kw): the four weights of (c, m) side by side.
std::vector<float> pack2x2(const float* w, int64_t C, int64_t M) {
  std::vector<float> p((size_t)(M * C * 4));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < 4; ++j) p[(size_t)((m * C + c) * 4 + j)] = w[(c * M + m) * 4 + j];
  return p;
}

// The kw = 0 and kw = 1 sums of 8 pixels, + bias, interleaved into 16 consecutive outputs at r.
inline void storeInterleaved(__m256 k0, __m256 k1, __m256 vb, float* r) {
  k0 = _mm256_add_ps(k0, vb);
  k1 = _mm256_add_ps(k1, vb);
  // [k0_0 k1_0 k0_1 k1_1 | k0_4 k1_4 k0_5 k1_5] and [k0_2 k1_2 k0_3 k1_3 | k0_6 ...]: lanes back in order.
  const __m256 lo = _mm256_unpacklo_ps(k0, k1), hi = _mm256_unpackhi_ps(k0, k1);
  _mm256_storeu_ps(r, _mm256_permute2f128_ps(lo, hi, 0x20));
  _mm256_storeu_ps(r + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

// 24 pixels of row h (xr: channel 0's, channels inSize apart) into output rows r0 (kh 0) and r1 (kh 1),
// 48 values each, for the channel whose packed weights are wq: 12 accumulators, 3 loads and 4
// broadcasts per input channel (named, not an array: GCC kept an array's copy on the stack).
inline void upsample2x2Tile24(const float* xr, int64_t inSize, int64_t C, const float* wq, float bv, float* r0,
                              float* r1) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  __m256 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
  for (int64_t c = 0; c < C; ++c) {
    const float* xc = xr + c * inSize;
    const __m256 x0 = _mm256_loadu_ps(xc), x1 = _mm256_loadu_ps(xc + 8), x2 = _mm256_loadu_ps(xc + 16);
    __m256 w = _mm256_broadcast_ss(wq + 4 * c);
    a00 = _mm256_fmadd_ps(w, x0, a00);
    a10 = _mm256_fmadd_ps(w, x1, a10);
    a20 = _mm256_fmadd_ps(w, x2, a20);
    w = _mm256_broadcast_ss(wq + 4 * c + 1);
    a01 = _mm256_fmadd_ps(w, x0, a01);
    a11 = _mm256_fmadd_ps(w, x1, a11);
    a21 = _mm256_fmadd_ps(w, x2, a21);
    w = _mm256_broadcast_ss(wq + 4 * c + 2);
    a02 = _mm256_fmadd_ps(w, x0, a02);
    a12 = _mm256_fmadd_ps(w, x1, a12);
    a22 = _mm256_fmadd_ps(w, x2, a22);
    w = _mm256_broadcast_ss(wq + 4 * c + 3);
    a03 = _mm256_fmadd_ps(w, x0, a03);
    a13 = _mm256_fmadd_ps(w, x1, a13);
    a23 = _mm256_fmadd_ps(w, x2, a23);
  }
  const __m256 vb = _mm256_set1_ps(bv);
  storeInterleaved(a00, a01, vb, r0);
  storeInterleaved(a02, a03, vb, r1);
  storeInterleaved(a10, a11, vb, r0 + 16);
  storeInterleaved(a12, a13, vb, r1 + 16);
  storeInterleaved(a20, a21, vb, r0 + 32);
  storeInterleaved(a22, a23, vb, r1 + 32);
}

// The same for 8 pixels.
inline void upsample2x2Tile8(const float* xr, int64_t inSize, int64_t C, const float* wq, float bv, float* r0,
                             float* r1) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t c = 0; c < C; ++c) {
    const __m256 x0 = _mm256_loadu_ps(xr + c * inSize);
    a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(wq + 4 * c), x0, a0);
    a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(wq + 4 * c + 1), x0, a1);
    a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(wq + 4 * c + 2), x0, a2);
    a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(wq + 4 * c + 3), x0, a3);
  }
  const __m256 vb = _mm256_set1_ps(bv);
  storeInterleaved(a0, a1, vb, r0);
  storeInterleaved(a2, a3, vb, r1);
}

// Output rows 2h, 2h + 1 of every channel for input rows [h0, h1) of one image x [C, H, W] into y
// [M, 2H, 2W]; then the activations over each row while it is in cache.
void upsample2x2Rows(const float* x, int64_t C, int64_t H, int64_t W, const float* wp, int64_t M, const float* bias,
                     const std::vector<FusedActivation>& acts, int64_t h0, int64_t h1, float* y) {
  const int64_t inSize = H * W, OW = 2 * W, outSize = 4 * inSize;
  for (int64_t h = h0; h < h1; ++h) {
    const float* xr = x + h * W;
    for (int64_t m = 0; m < M; ++m) {
      const float* wq = wp + m * C * 4;
      const float bv = bias ? bias[m] : 0.f;
      float* r0 = y + m * outSize + 2 * h * OW;
      float* r1 = r0 + OW;
      int64_t w = 0;
      for (; w + 24 <= W; w += 24) upsample2x2Tile24(xr + w, inSize, C, wq, bv, r0 + 2 * w, r1 + 2 * w);
      for (; w + 8 <= W; w += 8) upsample2x2Tile8(xr + w, inSize, C, wq, bv, r0 + 2 * w, r1 + 2 * w);
      for (; w < W; ++w) {
        float s[4] = {0.f, 0.f, 0.f, 0.f};
        for (int64_t c = 0; c < C; ++c)
          for (int j = 0; j < 4; ++j) s[j] = std::fma(wq[4 * c + j], xr[c * inSize + w], s[j]);
        r0[2 * w] = s[0] + bv;
        r0[2 * w + 1] = s[1] + bv;
        r1[2 * w] = s[2] + bv;
        r1[2 * w + 1] = s[3] + bv;
      }
      if (!acts.empty()) {
        applyFusedActivations(r0, OW, 0.f, acts);
        applyFusedActivations(r1, OW, 0.f, acts);
      }
    }
  }
}

class ConvTransposeKernel : public Kernel {
 public:
  ConvTransposeKernel(WindowAttrs attrs, std::vector<int64_t> outputPadding, std::vector<int64_t> outputShape,
                      std::vector<FusedActivation> activations, const Tensor* constW)
      : m_attrs(std::move(attrs)),
        m_outputPadding(std::move(outputPadding)),
        m_outputShape(std::move(outputShape)),
        m_activations(std::move(activations)) {
    if (constW && constW->dtype() == DType::Float && constW->rank() == 4 && constW->dim(2) == 2 &&
        constW->dim(3) == 2 && m_attrs.group == 1) {
      m_constW = *constW;
      m_packed2x2 = pack2x2(constW->data<float>(), constW->dim(0), constW->dim(1));
    }
  }

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
      return invalidArgument("ConvTranspose needs inputs X and W");
    const Tensor& X = ctx.input(0);
    const Tensor& W = ctx.input(1);
    if (X.dtype() != DType::Float || W.dtype() != DType::Float)
      return unsupported("ConvTranspose supports float32 only, got X " + dtypeName(X.dtype()) + ", W " + dtypeName(W.dtype()));
    if (X.rank() < 3 || X.rank() > 5 || W.rank() != X.rank())
      return invalidArgument("ConvTranspose expects X [N,C,d1..dn] (n = 1..3) and W of the same rank, got X " +
                             shapeToString(X.shape()) + ", W " + shapeToString(W.shape()));
    const int64_t N = X.dim(0), C = X.dim(1), G = m_attrs.group;
    const int64_t Mg = W.dim(1), M = Mg * G;
    if (W.dim(0) != C || C % G != 0)
      return invalidArgument("ConvTranspose channels mismatch: X " + shapeToString(X.shape()) + ", W " +
                             shapeToString(W.shape()) + ", group " + std::to_string(G));
    const int64_t Cg = C / G;
    const size_t nd = (size_t)X.rank() - 2;
    std::vector<int64_t> inSp(X.shape().begin() + 2, X.shape().end());
    std::vector<int64_t> kSp(W.shape().begin() + 2, W.shape().end());
    if (!m_attrs.kernelShape.empty() && m_attrs.kernelShape != kSp)
      return invalidArgument("ConvTranspose kernel_shape " + shapeToString(m_attrs.kernelShape) + " does not match W " +
                             shapeToString(W.shape()));
    auto sized = [&](const std::vector<int64_t>& v, size_t n, const char* what) -> Status {
      if (!v.empty() && v.size() != n)
        return invalidArgument(std::string("ConvTranspose ") + what + " has " + std::to_string(v.size()) +
                               " values, expected " + std::to_string(n));
      return Status::ok();
    };
    QS_RETURN_IF_ERROR(sized(m_attrs.strides, nd, "strides"));
    QS_RETURN_IF_ERROR(sized(m_attrs.dilations, nd, "dilations"));
    QS_RETURN_IF_ERROR(sized(m_attrs.pads, 2 * nd, "pads"));
    QS_RETURN_IF_ERROR(sized(m_outputPadding, nd, "output_padding"));
    std::vector<int64_t> outShapeAttr = m_outputShape;
    if (outShapeAttr.size() == nd + 2) outShapeAttr.erase(outShapeAttr.begin(), outShapeAttr.begin() + 2);
    QS_RETURN_IF_ERROR(sized(outShapeAttr, nd, "output_shape"));

    // Geometry of the adjoint forward conv: "in" = Y spatial, "out" = X spatial.
    WindowGeometry g;
    g.nd = (int)nd;
    const int off = 3 - (int)nd;
    Shape yShape = {N, M};
    const bool same = m_attrs.autoPad == "SAME_UPPER" || m_attrs.autoPad == "SAME_LOWER";
    for (size_t i = 0; i < nd; ++i) {
      const int j = off + (int)i;
      const int64_t s = m_attrs.strides.empty() ? 1 : m_attrs.strides[i];
      const int64_t d = m_attrs.dilations.empty() ? 1 : m_attrs.dilations[i];
      const int64_t op = m_outputPadding.empty() ? 0 : m_outputPadding[i];
      const int64_t dk = (kSp[i] - 1) * d + 1;
      const int64_t full = s * (inSp[i] - 1) + op + dk;
      int64_t pb = 0, pe = 0, out;
      if (!outShapeAttr.empty() || same) {
        out = !outShapeAttr.empty() ? outShapeAttr[i] : inSp[i] * s;
        const int64_t total = full - out;
        if (m_attrs.autoPad == "SAME_UPPER") {
          pb = floorDiv2(total);
          pe = total - pb;
        } else {
          pe = floorDiv2(total);
          pb = total - pe;
        }
      } else {
        if (m_attrs.autoPad != "VALID" && !m_attrs.pads.empty()) {
          pb = m_attrs.pads[i];
          pe = m_attrs.pads[i + nd];
        }
        out = full - pb - pe;
      }
      if (out < 0) return invalidArgument("ConvTranspose computed a negative output dim " + std::to_string(out));
      g.in[j] = out;
      g.out[j] = inSp[i];
      g.k[j] = kSp[i];
      g.s[j] = s;
      g.d[j] = d;
      g.padB[j] = pb;
      g.padE[j] = pe;
      yShape.push_back(out);
    }
    const float* bias = nullptr;
    if (ctx.hasInput(2)) {
      const Tensor& B = ctx.input(2);
      if (B.dtype() != DType::Float || B.numel() != M)
        return invalidArgument("ConvTranspose bias must be float [" + std::to_string(M) + "], got " +
                               dtypeName(B.dtype()) + " " + shapeToString(B.shape()));
      bias = B.data<float>();
    }
    ctx.outputs[0] = Tensor(DType::Float, yShape);
    float* y = ctx.outputs[0].data<float>();
    const int64_t ySize = g.inSize(), xSize = g.outSize(), kSize = g.kSize();
    const int64_t yTotal = N * M * ySize;
    if (yTotal == 0) return Status::ok();
    // Windows that tile the output (kernel == stride, no dilation, nothing past the last window):
    // every output element receives exactly one product sum, so the columns are written in place
    // with the bias (no zeroing pass, no accumulation, no bias pass).
    bool tiled = true;
    for (int i = 0; i < 3; ++i)
      tiled = tiled && g.k[i] == g.s[i] && g.d[i] == 1 && g.padB[i] >= 0 && g.padE[i] >= 0 &&
              g.in[i] + g.padB[i] + g.padE[i] == g.s[i] * g.out[i];
    const float* x = X.data<float>();
    // 2-D, 2x2 windows of stride 2 that tile the output exactly, group 1: the direct kernel.
    const bool direct2x2 = tiled && nd == 2 && G == 1 && C <= kDirectMaxChannels && g.k[1] == 2 && g.k[2] == 2 &&
                           g.padB[1] == 0 && g.padB[2] == 0 && g.in[1] == 2 * g.out[1] && g.in[2] == 2 * g.out[2];
    if (direct2x2) {
      std::vector<float> packedHere;
      const float* wp = m_packed2x2.data();
      if (m_packed2x2.empty() || !W.sharesBufferWith(m_constW) || W.shape() != m_constW.shape()) {
        packedHere = pack2x2(W.data<float>(), C, M);
        wp = packedHere.data();
      }
      const int64_t H = g.out[1], Wd = g.out[2];
      const int64_t rowMacs = std::max<int64_t>(1, 4 * M * C * Wd);
      ctx.parallelFor(N * H, std::max<int64_t>(1, (1 << 18) / rowMacs), [&](int64_t b, int64_t e) {
        while (b < e) {
          const int64_t n = b / H, h0 = b % H, h1 = std::min(H, h0 + (e - b));
          upsample2x2Rows(x + n * C * xSize, C, H, Wd, wp, M, bias, m_activations, h0, h1, y + n * M * ySize);
          b += h1 - h0;
        }
      });
      return Status::ok();
    }
    if (!tiled) std::memset(y, 0, sizeof(float) * (size_t)yTotal);
    const float* w = W.data<float>();
    const int64_t rows = Mg * kSize;  // col rows per group
    float* col = windowScratch((size_t)(G * rows * xSize));
    const bool parallelGroups = G > 1 && ctx.threads > 1;
    for (int64_t n = 0; n < N; ++n) {
      const float* xi = x + n * C * xSize;
      auto one = [&](int64_t grp, int threads) {
        // col[Mg*k, xSize] = W_g^T [Mg*k, Cg] * X_g [Cg, xSize]
        sgemm(true, false, rows, xSize, Cg, 1.f, w + grp * Cg * rows, rows, xi + grp * Cg * xSize, xSize, 0.f,
              col + grp * rows * xSize, xSize, threads);
      };
      if (parallelGroups) {
        ctx.parallelFor(G, 1, [&](int64_t b, int64_t e) {
          for (int64_t grp = b; grp < e; ++grp) one(grp, 1);
        });
      } else {
        for (int64_t grp = 0; grp < G; ++grp) one(grp, ctx.threads);
      }
      float* yi = y + n * M * ySize;
      ctx.parallelFor(M, 1, [&](int64_t b, int64_t e) {
        if (tiled) {
          col2imTiled(col, b, e, g, bias, yi);
        } else {
          col2im(col, b, e, g, yi);
          if (bias)
            for (int64_t m = b; m < e; ++m) {
              float* p = yi + m * ySize;
              const float bv = bias[m];
              for (int64_t o = 0; o < ySize; ++o) p[o] += bv;
            }
        }
        if (!m_activations.empty())
          for (int64_t m = b; m < e; ++m) applyFusedActivations(yi + m * ySize, ySize, 0.f, m_activations);
      });
    }
    return Status::ok();
  }

 private:
  // The direct kernel sums all input channels in one FMA chain: the GEMM's bits up to its K slice.
  static constexpr int64_t kDirectMaxChannels = 256;
  WindowAttrs m_attrs;
  std::vector<int64_t> m_outputPadding;
  std::vector<int64_t> m_outputShape;
  std::vector<FusedActivation> m_activations;
  Tensor m_constW;                  // the constant W m_packed2x2 was made from (empty: none)
  std::vector<float> m_packed2x2;  // W [C, M, 2, 2] as pack2x2 lays it out
};

}  // namespace

Tensor scaledConvWeights(const Tensor& W, bool transposed, int64_t group, const std::vector<float>& scale) {
  Tensor w = W.clone();
  if (!transposed) {
    const int64_t M = W.dim(0), per = W.numel() / M;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < per; ++i) w.data<float>()[m * per + i] *= scale[(size_t)m];
    return w;
  }
  // Row c of group c / Cg holds output channels (c / Cg) * Mg + j.
  const int64_t C = W.dim(0), Cg = C / group, Mg = W.dim(1), per = W.numel() / (C * Mg);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < Mg; ++j)
      for (int64_t i = 0; i < per; ++i) w.data<float>()[(c * Mg + j) * per + i] *= scale[(size_t)(c / Cg * Mg + j)];
  return w;
}

Result<std::unique_ptr<Kernel>> createConvTranspose(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, true);
  std::vector<int64_t> outputPadding = a.ints("output_padding");
  std::vector<int64_t> outputShape = a.ints("output_shape");
  std::vector<FusedActivation> acts;
  if (init.node.opType == kFusedConvTransposeOp) {
    std::vector<std::string> names = a.strings("activations");
    std::vector<float> params = a.floats("activation_params");
    if (!a.ok()) return a.status();
    if (Status st = parseFusedActivations(names, params, acts); !st) return st;
  }
  if (!a.ok()) return a.status();
  for (int64_t v : outputPadding)
    if (v < 0) return kernelError(StatusCode::InvalidModel, "output_padding must be non-negative");
  return std::unique_ptr<Kernel>(
      std::make_unique<ConvTransposeKernel>(std::move(attrs), std::move(outputPadding), std::move(outputShape),
                                            std::move(acts), init.constantInput(1)));
}

}  // namespace qs
