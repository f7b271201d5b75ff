// ConvTranspose (ai.onnx opsets 1..21, FP32).
#include "core/kernels/conv_transpose.h"

#include <algorithm>
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

class ConvTransposeKernel : public Kernel {
 public:
  ConvTransposeKernel(WindowAttrs attrs, std::vector<int64_t> outputPadding, std::vector<int64_t> outputShape)
      : m_attrs(std::move(attrs)), m_outputPadding(std::move(outputPadding)), m_outputShape(std::move(outputShape)) {}

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
    if (!tiled) std::memset(y, 0, sizeof(float) * (size_t)yTotal);
    const float* x = X.data<float>();
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
          return;
        }
        col2im(col, b, e, g, yi);
        if (bias)
          for (int64_t m = b; m < e; ++m) {
            float* p = yi + m * ySize;
            const float bv = bias[m];
            for (int64_t o = 0; o < ySize; ++o) p[o] += bv;
          }
      });
    }
    return Status::ok();
  }

 private:
  WindowAttrs m_attrs;
  std::vector<int64_t> m_outputPadding;
  std::vector<int64_t> m_outputShape;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createConvTranspose(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, true);
  std::vector<int64_t> outputPadding = a.ints("output_padding");
  std::vector<int64_t> outputShape = a.ints("output_shape");
  if (!a.ok()) return a.status();
  for (int64_t v : outputPadding)
    if (v < 0) return kernelError(StatusCode::InvalidModel, "output_padding must be non-negative");
  return std::unique_ptr<Kernel>(
      std::make_unique<ConvTransposeKernel>(std::move(attrs), std::move(outputPadding), std::move(outputShape)));
}

}  // namespace qs
