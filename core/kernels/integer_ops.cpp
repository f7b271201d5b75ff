// ConvInteger, QLinearConv, MatMulInteger and QLinearMatMul (10..21).
#include "core/kernels/integer_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/kernels/conv.h"
#include "core/kernels/elementwise.h"

namespace qs {

namespace {

using ew::Tag;

Status invalid(std::string m) { return kernelError(StatusCode::InvalidArgument, std::move(m)); }

/// Most elements an integer op may produce (2^28: 1 GiB of int32). Quantized layers stay far
/// below it; fuzzed pads or dims beyond it are refused rather than allocated.
constexpr int64_t kMaxIntegerOutput = int64_t(1) << 28;

Status checkOutput(const char* op, const Shape& s) {
  if (checkedNumel(s, kMaxIntegerOutput) < 0)
    return invalid(std::string(op) + ": output shape " + shapeToString(s) + " has more than " +
                   std::to_string(kMaxIntegerOutput) + " elements");
  return Status::ok();
}

/// x_scale * w_scale / y_scale (or a's and b's) must stay finite: an infinite multiplier times a
/// zero sum is NaN, which has no integer to saturate to.
Status checkMultiplier(const char* op, float k) {
  if (!std::isfinite(k))
    return invalid(std::string(op) + ": the requantization multiplier (input scales / y_scale) is " + std::to_string(k));
  return Status::ok();
}

/// fn(Tag<T>{}) for uint8 and int8; false for other dtypes.
template <class Fn>
bool dispatchInt8(DType t, Fn&& fn) {
  if (t == DType::UInt8) return fn(Tag<uint8_t>{}), true;
  if (t == DType::Int8) return fn(Tag<int8_t>{}), true;
  return false;
}

Status needInt8(const Tensor& t, const char* op, const char* what) {
  if (t.dtype() != DType::UInt8 && t.dtype() != DType::Int8)
    return kernelError(StatusCode::Unsupported,
                       std::string(op) + ": " + what + " must be uint8 or int8, got " + dtypeName(t.dtype()));
  return Status::ok();
}

/// A zero point: absent (0), one value, or one per channel (1-D of `channels` values). Its
/// dtype must be the quantized operand's.
Status readZeroPoints(const Tensor* zp, DType operand, int64_t channels, const char* what, std::vector<int32_t>& out) {
  out.assign(1, 0);
  if (!zp) return Status::ok();
  if (zp->dtype() != operand)
    return invalid(std::string(what) + " is " + dtypeName(zp->dtype()) + " but its operand is " + dtypeName(operand));
  const bool scalar = zp->numel() == 1 && zp->rank() <= 1;
  if (!scalar && !(zp->rank() == 1 && zp->numel() == channels))
    return invalid(std::string(what) + " has shape " + shapeToString(zp->shape()) + ", expected a scalar or [" +
                   std::to_string(channels) + "]");
  out.resize((size_t)zp->numel());
  for (int64_t i = 0; i < zp->numel(); ++i)
    out[(size_t)i] = zp->dtype() == DType::UInt8 ? (int32_t)zp->data<uint8_t>()[i] : (int32_t)zp->data<int8_t>()[i];
  return Status::ok();
}

/// A scale: one value or one per channel, each finite and > 0 (requantization divides by y_scale
/// and would turn a zero or NaN scale into undefined integer conversions).
Status readScales(const Tensor* s, int64_t channels, const char* what, std::vector<float>& out) {
  if (!s) return invalid(std::string(what) + " is missing");
  if (s->dtype() != DType::Float && s->dtype() != DType::Double && s->dtype() != DType::Float16 &&
      s->dtype() != DType::BFloat16)
    return invalid(std::string(what) + " must be a float tensor, got " + dtypeName(s->dtype()));
  const bool scalar = s->numel() == 1 && s->rank() <= 1;
  if (!scalar && !(s->rank() == 1 && s->numel() == channels))
    return invalid(std::string(what) + " has shape " + shapeToString(s->shape()) + ", expected a scalar or [" +
                   std::to_string(channels) + "]");
  out.resize((size_t)s->numel());
  for (int64_t i = 0; i < s->numel(); ++i) {
    const double v = s->valueAsDouble(i);
    if (!(v > 0) || !std::isfinite(v)) return invalid(std::string(what) + " must be positive and finite, got " + std::to_string(v));
    out[(size_t)i] = (float)v;
  }
  return Status::ok();
}

inline int32_t at(const std::vector<int32_t>& v, int64_t i) { return v.size() == 1 ? v[0] : v[(size_t)i]; }
inline float at(const std::vector<float>& v, int64_t i) { return v.size() == 1 ? v[0] : v[(size_t)i]; }

/// round_half_even(acc * multiplier) + zp saturated to Q: ONNX Runtime's requantization (a float
/// product, so that its outputs and ours agree bit for bit).
template <class Q>
inline Q requantize(int64_t acc, float multiplier, int32_t zp) {
  constexpr float lo = (float)std::numeric_limits<Q>::lowest(), hi = (float)std::numeric_limits<Q>::max();
  float v = std::nearbyint((float)acc * multiplier) + (float)zp;
  v = std::min(std::max(v, lo), hi);
  return (Q)(int32_t)v;
}

// ---------------------------------------------------------------- integer Conv
/// Geometry and per-channel offsets of one integer convolution, checked against the inputs.
struct IntConvShape {
  int64_t N = 0, C = 0, M = 0, group = 1;
  WindowGeometry g;
  Shape out;
};

Status resolveIntConv(const char* op, const WindowAttrs& attrs, const Tensor& x, const Tensor& w, IntConvShape& s) {
  if (x.rank() < 3 || x.rank() > 5)
    return invalid(std::string(op) + ": x must be [N, C, spatial...] with 1 to 3 spatial dims, got shape " +
                   shapeToString(x.shape()));
  if (w.rank() != x.rank())
    return invalid(std::string(op) + ": w shape " + shapeToString(w.shape()) + " does not match x shape " +
                   shapeToString(x.shape()));
  s.N = x.dim(0);
  s.C = x.dim(1);
  s.M = w.dim(0);
  s.group = attrs.group;
  if (s.C % s.group != 0 || w.dim(1) * s.group != s.C || s.M % s.group != 0)
    return invalid(std::string(op) + ": x " + shapeToString(x.shape()) + " and w " + shapeToString(w.shape()) +
                   " do not fit group " + std::to_string(s.group));
  std::vector<int64_t> inSp(x.shape().begin() + 2, x.shape().end()), kSp(w.shape().begin() + 2, w.shape().end());
  if (!attrs.kernelShape.empty() && attrs.kernelShape != kSp)
    return invalid(std::string(op) + ": kernel_shape " + shapeToString(attrs.kernelShape) + " differs from w's " +
                   shapeToString(kSp));
  QS_RETURN_IF_ERROR(resolveWindow(attrs, inSp, kSp, false, s.g));
  s.out = {s.N, s.M};
  for (int64_t d : s.g.outShape()) s.out.push_back(d);
  return checkOutput(op, s.out);
}

/// For each image n and output channel m, emit(n, m, acc) with acc[o] = the sum over the group's
/// input channels and the window of (x - xzp) * (w - wzp[m]), in int64 (exact for any reduction
/// an int32 output can hold). Padding contributes nothing: a padded x equals its zero point.
template <class TX, class TW, class Emit>
void integerConv(const KernelContext& ctx, const IntConvShape& s, const TX* x, int32_t xzp, const TW* w,
                 const std::vector<int32_t>& wzp, const Emit& emit) {
  const WindowGeometry& g = s.g;
  const int64_t Cg = s.C / s.group, Mg = s.M / s.group;
  const int64_t inSize = g.inSize(), outSize = g.outSize(), kSize = g.kSize();
  const int64_t OW = g.out[2], IW = g.in[2];
  ctx.parallelFor(s.N * s.M, 1, [&](int64_t b, int64_t e) {
    std::vector<int64_t> acc((size_t)outSize);
    for (int64_t job = b; job < e; ++job) {
      const int64_t n = job / s.M, m = job % s.M, grp = m / Mg;
      std::fill(acc.begin(), acc.end(), 0);
      const int32_t wz = at(wzp, m);
      for (int64_t cg = 0; cg < Cg; ++cg) {
        const TX* plane = x + (n * s.C + grp * Cg + cg) * inSize;
        const TW* wk = w + (m * Cg + cg) * kSize;
        for (int64_t kd = 0; kd < g.k[0]; ++kd)
          for (int64_t kh = 0; kh < g.k[1]; ++kh)
            for (int64_t kw = 0; kw < g.k[2]; ++kw) {
              const int64_t wv = (int64_t)wk[(kd * g.k[1] + kh) * g.k[2] + kw] - wz;
              if (wv == 0) continue;
              const int64_t offW = kw * g.d[2] - g.padB[2];
              int64_t lo, hi;
              windowValidRange(offW, g.s[2], IW, OW, lo, hi);
              for (int64_t od = 0; od < g.out[0]; ++od) {
                const int64_t id = od * g.s[0] - g.padB[0] + kd * g.d[0];
                if (id < 0 || id >= g.in[0]) continue;
                for (int64_t oh = 0; oh < g.out[1]; ++oh) {
                  const int64_t ih = oh * g.s[1] - g.padB[1] + kh * g.d[1];
                  if (ih < 0 || ih >= g.in[1]) continue;
                  const TX* row = plane + (id * g.in[1] + ih) * IW;
                  int64_t* dst = acc.data() + (od * g.out[1] + oh) * OW;
                  for (int64_t o = lo; o < hi; ++o) dst[o] += wv * ((int64_t)row[o * g.s[2] + offW] - xzp);
                }
              }
            }
      }
      emit(n, m, acc.data());
    }
  });
}

class ConvIntegerKernel : public Kernel {
 public:
  ConvIntegerKernel(WindowAttrs attrs, bool qlinear) : m_attrs(std::move(attrs)), m_qlinear(qlinear) {}

  Status run(KernelContext& ctx) const override { return m_qlinear ? runQLinear(ctx) : runInteger(ctx); }

 private:
  Status runInteger(KernelContext& ctx) const {
    if (!ctx.hasInput(0) || !ctx.hasInput(1)) return invalid("ConvInteger needs inputs x and w");
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    QS_RETURN_IF_ERROR(needInt8(x, "ConvInteger", "x"));
    QS_RETURN_IF_ERROR(needInt8(w, "ConvInteger", "w"));
    IntConvShape s;
    QS_RETURN_IF_ERROR(resolveIntConv("ConvInteger", m_attrs, x, w, s));
    std::vector<int32_t> xzp, wzp;
    QS_RETURN_IF_ERROR(readZeroPoints(ctx.hasInput(2) ? &ctx.input(2) : nullptr, x.dtype(), 1, "x_zero_point", xzp));
    QS_RETURN_IF_ERROR(readZeroPoints(ctx.hasInput(3) ? &ctx.input(3) : nullptr, w.dtype(), s.M, "w_zero_point", wzp));
    Tensor y(DType::Int32, s.out);
    int32_t* yp = y.data<int32_t>();
    const int64_t outSize = s.g.outSize();
    dispatchInt8(x.dtype(), [&](auto tx) {
      dispatchInt8(w.dtype(), [&](auto tw) {
        using TX = typename decltype(tx)::type;
        using TW = typename decltype(tw)::type;
        integerConv(ctx, s, x.data<TX>(), xzp[0], w.data<TW>(), wzp, [&](int64_t n, int64_t m, const int64_t* acc) {
          int32_t* dst = yp + (n * s.M + m) * outSize;
          for (int64_t o = 0; o < outSize; ++o) dst[o] = (int32_t)acc[o];
        });
      });
    });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

  Status runQLinear(KernelContext& ctx) const {
    for (size_t i = 0; i < 8; ++i)
      if (!ctx.hasInput(i) && i != 7) return invalid("QLinearConv input " + std::to_string(i) + " is missing");
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(3);
    QS_RETURN_IF_ERROR(needInt8(x, "QLinearConv", "x"));
    QS_RETURN_IF_ERROR(needInt8(w, "QLinearConv", "w"));
    IntConvShape s;
    QS_RETURN_IF_ERROR(resolveIntConv("QLinearConv", m_attrs, x, w, s));
    std::vector<float> xs, ws, ys;
    std::vector<int32_t> xzp, wzp, yzp;
    QS_RETURN_IF_ERROR(readScales(&ctx.input(1), 1, "x_scale", xs));
    QS_RETURN_IF_ERROR(readZeroPoints(&ctx.input(2), x.dtype(), 1, "x_zero_point", xzp));
    QS_RETURN_IF_ERROR(readScales(&ctx.input(4), s.M, "w_scale", ws));
    QS_RETURN_IF_ERROR(readZeroPoints(&ctx.input(5), w.dtype(), s.M, "w_zero_point", wzp));
    QS_RETURN_IF_ERROR(readScales(&ctx.input(6), 1, "y_scale", ys));
    const DType yt = ctx.hasInput(7) ? ctx.input(7).dtype() : x.dtype();
    if (yt != DType::UInt8 && yt != DType::Int8)
      return kernelError(StatusCode::Unsupported, "QLinearConv: y_zero_point must be uint8 or int8, got " + dtypeName(yt));
    QS_RETURN_IF_ERROR(readZeroPoints(ctx.hasInput(7) ? &ctx.input(7) : nullptr, yt, 1, "y_zero_point", yzp));
    const int32_t* bias = nullptr;
    if (ctx.hasInput(8)) {
      const Tensor& B = ctx.input(8);
      if (B.dtype() != DType::Int32 || B.rank() != 1 || B.numel() != s.M)
        return invalid("QLinearConv bias must be int32 [" + std::to_string(s.M) + "], got " + dtypeName(B.dtype()) + " " +
                       shapeToString(B.shape()));
      bias = B.data<int32_t>();
    }
    // ONNX Runtime's multiplier: x_scale * w_scale / y_scale, in float.
    std::vector<float> mult((size_t)s.M);
    for (int64_t m = 0; m < s.M; ++m) {
      mult[(size_t)m] = xs[0] * at(ws, m) / ys[0];
      QS_RETURN_IF_ERROR(checkMultiplier("QLinearConv", mult[(size_t)m]));
    }
    Tensor y(yt, s.out);
    const int64_t outSize = s.g.outSize();
    dispatchInt8(yt, [&](auto ty) {
      using TY = typename decltype(ty)::type;
      TY* yp = y.data<TY>();
      dispatchInt8(x.dtype(), [&](auto tx) {
        dispatchInt8(w.dtype(), [&](auto tw) {
          using TX = typename decltype(tx)::type;
          using TW = typename decltype(tw)::type;
          integerConv(ctx, s, x.data<TX>(), xzp[0], w.data<TW>(), wzp, [&](int64_t n, int64_t m, const int64_t* acc) {
            TY* dst = yp + (n * s.M + m) * outSize;
            const int64_t b = bias ? bias[m] : 0;
            const float k = mult[(size_t)m];
            for (int64_t o = 0; o < outSize; ++o) dst[o] = requantize<TY>(acc[o] + b, k, yzp[0]);
          });
        });
      });
    });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

  WindowAttrs m_attrs;
  bool m_qlinear;
};

Result<std::unique_ptr<Kernel>> createIntConv(const KernelInit& init, bool qlinear) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, true);
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<ConvIntegerKernel>(std::move(attrs), qlinear));
}

// ---------------------------------------------------------------- integer MatMul
/// numpy matmul shapes: A [..., M, K] (1-D: [K]), B [..., K, N] (1-D: [K]); batch dims broadcast.
struct MatMulShape {
  int64_t M = 0, K = 0, N = 0;
  Shape out;
  std::vector<int64_t> aOff, bOff;  // element offset of each output batch's matrix in A and B
};

Status resolveMatMul(const char* op, const Tensor& A, const Tensor& B, MatMulShape& s) {
  if (A.rank() < 1 || B.rank() < 1)
    return invalid(std::string(op) + " operands must have rank >= 1, got " + shapeToString(A.shape()) + " and " +
                   shapeToString(B.shape()));
  Shape as = A.shape(), bs = B.shape();
  const bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if (aVec) as.insert(as.begin(), 1);
  if (bVec) bs.push_back(1);
  s.M = as[as.size() - 2];
  s.K = as.back();
  s.N = bs.back();
  if (bs[bs.size() - 2] != s.K)
    return invalid(std::string(op) + " inner dims differ: " + shapeToString(A.shape()) + " x " + shapeToString(B.shape()));
  const Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  Shape batch;
  if (!broadcastShapes(aBatch, bBatch, batch))
    return invalid(std::string(op) + " batch dims do not broadcast: " + shapeToString(A.shape()) + " x " +
                   shapeToString(B.shape()));
  s.out = batch;
  if (!aVec) s.out.push_back(s.M);
  if (!bVec) s.out.push_back(s.N);
  QS_RETURN_IF_ERROR(checkOutput(op, s.out));
  const int64_t nb = numelOf(batch);
  const size_t r = batch.size();
  std::vector<int64_t> aStride(r, 0), bStride(r, 0), idx(r, 0);
  int64_t sa = s.M * s.K, sb = s.K * s.N;
  for (size_t i = r; i-- > 0;) {
    // Batch dims are right-aligned; a missing or unit dim broadcasts (stride 0).
    const size_t fromEnd = r - 1 - i;
    if (fromEnd < aBatch.size()) {
      const int64_t d = aBatch[aBatch.size() - 1 - fromEnd];
      aStride[i] = d == 1 ? 0 : sa;
      sa *= d;
    }
    if (fromEnd < bBatch.size()) {
      const int64_t d = bBatch[bBatch.size() - 1 - fromEnd];
      bStride[i] = d == 1 ? 0 : sb;
      sb *= d;
    }
  }
  s.aOff.resize((size_t)nb);
  s.bOff.resize((size_t)nb);
  for (int64_t t = 0; t < nb; ++t) {
    int64_t oa = 0, ob = 0;
    for (size_t i = 0; i < r; ++i) {
      oa += idx[i] * aStride[i];
      ob += idx[i] * bStride[i];
    }
    s.aOff[(size_t)t] = oa;
    s.bOff[(size_t)t] = ob;
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < batch[i]) break;
      idx[i] = 0;
    }
  }
  return Status::ok();
}

/// emit(t, i, j, acc) for each output batch t, row i and column j, with acc the exact sum over k
/// of (A[i,k] - azp[i]) * (B[k,j] - bzp[j]).
template <class TA, class TB, class Emit>
void integerMatMul(const KernelContext& ctx, const MatMulShape& s, const TA* a, const std::vector<int32_t>& azp,
                   const TB* b, const std::vector<int32_t>& bzp, const Emit& emit) {
  const int64_t nb = (int64_t)s.aOff.size();
  ctx.parallelFor(nb * s.M, std::max<int64_t>(1, 4096 / std::max<int64_t>(s.N * s.K, 1)), [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> acc((size_t)s.N);
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t t = row / s.M, i = row % s.M;
      const TA* ar = a + s.aOff[(size_t)t] + i * s.K;
      const TB* bm = b + s.bOff[(size_t)t];
      std::fill(acc.begin(), acc.end(), 0);
      const int32_t az = at(azp, i);
      for (int64_t k = 0; k < s.K; ++k) {
        const int64_t av = (int64_t)ar[k] - az;
        if (av == 0) continue;
        const TB* br = bm + k * s.N;
        for (int64_t j = 0; j < s.N; ++j) acc[(size_t)j] += av * ((int64_t)br[j] - at(bzp, j));
      }
      for (int64_t j = 0; j < s.N; ++j) emit(t, i, j, acc[(size_t)j]);
    }
  });
}

Result<std::unique_ptr<Kernel>> createMatMulIntegerKernel() {
  return std::unique_ptr<Kernel>(makeKernel([](KernelContext& ctx) -> Status {
    if (!ctx.hasInput(0) || !ctx.hasInput(1)) return invalid("MatMulInteger needs inputs A and B");
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    QS_RETURN_IF_ERROR(needInt8(A, "MatMulInteger", "A"));
    QS_RETURN_IF_ERROR(needInt8(B, "MatMulInteger", "B"));
    MatMulShape s;
    QS_RETURN_IF_ERROR(resolveMatMul("MatMulInteger", A, B, s));
    std::vector<int32_t> azp, bzp;
    QS_RETURN_IF_ERROR(readZeroPoints(ctx.hasInput(2) ? &ctx.input(2) : nullptr, A.dtype(), s.M, "a_zero_point", azp));
    QS_RETURN_IF_ERROR(readZeroPoints(ctx.hasInput(3) ? &ctx.input(3) : nullptr, B.dtype(), s.N, "b_zero_point", bzp));
    Tensor y(DType::Int32, s.out);
    int32_t* yp = y.data<int32_t>();
    const int64_t M = s.M, N = s.N;
    dispatchInt8(A.dtype(), [&](auto ta) {
      dispatchInt8(B.dtype(), [&](auto tb) {
        using TA = typename decltype(ta)::type;
        using TB = typename decltype(tb)::type;
        integerMatMul(ctx, s, A.data<TA>(), azp, B.data<TB>(), bzp, [&](int64_t t, int64_t i, int64_t j, int64_t acc) {
          yp[(t * M + i) * N + j] = (int32_t)acc;
        });
      });
    });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }));
}

Result<std::unique_ptr<Kernel>> createQLinearMatMulKernel() {
  return std::unique_ptr<Kernel>(makeKernel([](KernelContext& ctx) -> Status {
    for (size_t i = 0; i < 8; ++i)
      if (!ctx.hasInput(i)) return invalid("QLinearMatMul input " + std::to_string(i) + " is missing");
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(3);
    QS_RETURN_IF_ERROR(needInt8(A, "QLinearMatMul", "a"));
    QS_RETURN_IF_ERROR(needInt8(B, "QLinearMatMul", "b"));
    MatMulShape s;
    QS_RETURN_IF_ERROR(resolveMatMul("QLinearMatMul", A, B, s));
    std::vector<float> as, bs, ys;
    std::vector<int32_t> azp, bzp, yzp;
    QS_RETURN_IF_ERROR(readScales(&ctx.input(1), s.M, "a_scale", as));
    QS_RETURN_IF_ERROR(readZeroPoints(&ctx.input(2), A.dtype(), s.M, "a_zero_point", azp));
    QS_RETURN_IF_ERROR(readScales(&ctx.input(4), s.N, "b_scale", bs));
    QS_RETURN_IF_ERROR(readZeroPoints(&ctx.input(5), B.dtype(), s.N, "b_zero_point", bzp));
    QS_RETURN_IF_ERROR(readScales(&ctx.input(6), s.M, "y_scale", ys));
    const DType yt = ctx.input(7).dtype();
    if (yt != DType::UInt8 && yt != DType::Int8)
      return kernelError(StatusCode::Unsupported, "QLinearMatMul: y_zero_point must be uint8 or int8, got " + dtypeName(yt));
    QS_RETURN_IF_ERROR(readZeroPoints(&ctx.input(7), yt, s.M, "y_zero_point", yzp));
    // Checked up front: the sums run in parallel and cannot return an error.
    for (int64_t i = 0; i < (int64_t)std::max(as.size(), ys.size()); ++i)
      for (int64_t j = 0; j < (int64_t)bs.size(); ++j)
        QS_RETURN_IF_ERROR(checkMultiplier("QLinearMatMul", at(as, i) * at(bs, j) / at(ys, i)));
    Tensor y(yt, s.out);
    const int64_t M = s.M, N = s.N;
    dispatchInt8(yt, [&](auto ty) {
      using TY = typename decltype(ty)::type;
      TY* yp = y.data<TY>();
      dispatchInt8(A.dtype(), [&](auto ta) {
        dispatchInt8(B.dtype(), [&](auto tb) {
          using TA = typename decltype(ta)::type;
          using TB = typename decltype(tb)::type;
          integerMatMul(ctx, s, A.data<TA>(), azp, B.data<TB>(), bzp, [&](int64_t t, int64_t i, int64_t j, int64_t acc) {
            const float k = at(as, i) * at(bs, j) / at(ys, i);
            yp[(t * M + i) * N + j] = requantize<TY>(acc, k, at(yzp, i));
          });
        });
      });
    });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }));
}

}  // namespace

Result<std::unique_ptr<Kernel>> createConvInteger(const KernelInit& init) { return createIntConv(init, false); }
Result<std::unique_ptr<Kernel>> createQLinearConv(const KernelInit& init) { return createIntConv(init, true); }
Result<std::unique_ptr<Kernel>> createMatMulInteger(const KernelInit&) { return createMatMulIntegerKernel(); }
Result<std::unique_ptr<Kernel>> createQLinearMatMul(const KernelInit&) { return createQLinearMatMulKernel(); }

}  // namespace qs
