// QuantizeLinear 10..21 and DequantizeLinear 10..21 (per-tensor and per-axis; float8e4m3fn).
#include "core/kernels/quantize_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/kernels/cast.h"
#include "core/kernels/elementwise.h"

namespace qs {
namespace {

using namespace ew;

/// Layout of a (de)quantization: x viewed as [outer, channels, inner]; one scale per channel.
struct QLayout {
  int64_t outer = 1, channels = 1, inner = 1;
};

Status layoutFor(const char* name, const Tensor& x, const Tensor& scale, const Tensor* zp, int64_t axisAttr,
                 QLayout& lay) {
  const Shape& s = x.shape();
  if (zp && zp->numel() != scale.numel())
    return invalidArgument(std::string(name) + ": zero_point shape " + shapeToString(zp->shape()) +
                           " differs from scale shape " + shapeToString(scale.shape()));
  if (scale.numel() == 1 && scale.rank() <= 1) {
    lay.inner = x.numel();
    return Status::ok();
  }
  if (scale.rank() != 1)
    return invalidArgument(std::string(name) + ": scale must be a scalar or 1-D, got shape " +
                           shapeToString(scale.shape()) + " (blocked quantization is not supported)");
  int64_t axis = axisAttr;
  if (!normalizeAxis(axis, x.rank()))
    return invalidArgument(std::string(name) + ": axis " + std::to_string(axisAttr) + " is out of range for shape " +
                           shapeToString(s));
  if (s[(size_t)axis] != scale.numel())
    return invalidArgument(std::string(name) + ": scale has " + std::to_string(scale.numel()) +
                           " elements but input dim " + std::to_string(axis) + " of shape " + shapeToString(s) +
                           " is " + std::to_string(s[(size_t)axis]));
  lay.channels = scale.numel();
  lay.outer = 1;
  lay.inner = 1;
  for (int64_t d = 0; d < axis; ++d) lay.outer *= s[(size_t)d];
  for (int64_t d = axis + 1; d < x.rank(); ++d) lay.inner *= s[(size_t)d];
  return Status::ok();
}

/// Runs fn(offset, len, channel) over every contiguous run of one channel, in parallel.
template <class Fn>
void forEachChannelRun(const QLayout& lay, const KernelContext& ctx, const Fn& fn) {
  if (lay.channels == 1 && lay.outer == 1) {
    parallelBlocks(ctx, lay.inner, [&](int64_t b, int64_t e) { fn(b, e - b, 0); });
    return;
  }
  const int64_t rows = lay.outer * lay.channels;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(lay.inner, 1));
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) fn(r * lay.inner, lay.inner, r % lay.channels);
  };
  if (rows < 2 * grain || ctx.threads <= 1) {
    body(0, rows);
  } else {
    ctx.parallelFor(rows, grain, body);
  }
}

template <class Q>
void quantizeRun(const float* __restrict x, Q* __restrict y, int64_t n, float scale, float zp) {
  constexpr float lo = (float)std::numeric_limits<Q>::lowest();
  constexpr float hi = (float)std::numeric_limits<Q>::max();
  for (int64_t i = 0; i < n; ++i) {
    float v = std::rint(x[i] / scale) + zp;  // default rounding mode: half to even
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    v = v != v ? 0.0f : v;
    y[i] = (Q)(int32_t)v;
  }
}

Status runQuantize(int64_t axisAttr, bool saturate, DType outputDtypeAttr, KernelContext& ctx) {
  if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
    return invalidArgument("QuantizeLinear needs inputs x and y_scale");
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  const Tensor* Z = ctx.hasInput(2) ? &ctx.input(2) : nullptr;
  const DType xt = X.dtype();
  if (xt != DType::Float && xt != DType::Float16 && xt != DType::BFloat16 && xt != DType::Int32 &&
      xt != DType::Double)
    return unsupported("QuantizeLinear: input dtype " + dtypeName(xt) + " is not supported");
  if (S.dtype() != DType::Float && S.dtype() != DType::Float16 && S.dtype() != DType::BFloat16 &&
      S.dtype() != DType::Double)
    return unsupported("QuantizeLinear: scale dtype " + dtypeName(S.dtype()) + " is not supported");
  const DType yt = Z ? Z->dtype() : (outputDtypeAttr != DType::Undefined ? outputDtypeAttr : DType::UInt8);
  QLayout lay;
  QS_RETURN_IF_ERROR(layoutFor("QuantizeLinear", X, S, Z, axisAttr, lay));
  auto xf = castTensor(X, DType::Float, true, &ctx);
  auto sf = castTensor(S, DType::Float, true, &ctx);
  if (!xf) return xf.status();
  if (!sf) return sf.status();
  const float* x = xf->data<float>();
  const float* sc = sf->data<float>();
  Tensor out(yt, X.shape());
  if (yt == DType::Float8E4M3FN) {
    const uint8_t* zb = Z ? Z->data<uint8_t>() : nullptr;
    uint8_t* y = out.data<uint8_t>();
    forEachChannelRun(lay, ctx, [&](int64_t off, int64_t len, int64_t c) {
      const float s = sc[c];
      const float z = zb ? float8e4m3fnToFloat(zb[c]) : 0.0f;
      for (int64_t i = off; i < off + len; ++i) y[i] = floatToFloat8e4m3fn(x[i] / s + z, saturate);
    });
    ctx.outputs[0] = std::move(out);
    return Status::ok();
  }
  auto runInt = [&](auto tag) {
    using Q = typename decltype(tag)::type;
    const Q* zq = Z ? Z->data<Q>() : nullptr;
    Q* y = out.data<Q>();
    forEachChannelRun(lay, ctx, [&](int64_t off, int64_t len, int64_t c) {
      quantizeRun<Q>(x + off, y + off, len, sc[c], zq ? (float)zq[c] : 0.0f);
    });
  };
  switch (yt) {
    case DType::UInt8: runInt(Tag<uint8_t>{}); break;
    case DType::Int8: runInt(Tag<int8_t>{}); break;
    case DType::UInt16: runInt(Tag<uint16_t>{}); break;
    case DType::Int16: runInt(Tag<int16_t>{}); break;
    default: return unsupported("QuantizeLinear: output dtype " + dtypeName(yt) + " is not supported");
  }
  ctx.outputs[0] = std::move(out);
  return Status::ok();
}

template <class Q>
void dequantizeRun(const Q* __restrict x, float* __restrict y, int64_t n, float scale, Q zp) {
  using W = std::conditional_t<(sizeof(Q) < 4), int32_t, int64_t>;
  const W z = (W)zp;
  for (int64_t i = 0; i < n; ++i) y[i] = (float)((W)x[i] - z) * scale;
}

Status runDequantize(int64_t axisAttr, KernelContext& ctx) {
  if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
    return invalidArgument("DequantizeLinear needs inputs x and x_scale");
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  const Tensor* Z = ctx.hasInput(2) ? &ctx.input(2) : nullptr;
  if (Z && Z->dtype() != X.dtype())
    return invalidArgument("DequantizeLinear: zero_point dtype " + dtypeName(Z->dtype()) + " differs from input " +
                           dtypeName(X.dtype()));
  const DType st = S.dtype();
  if (st != DType::Float && st != DType::Float16 && st != DType::BFloat16)
    return unsupported("DequantizeLinear: scale dtype " + dtypeName(st) + " is not supported");
  QLayout lay;
  QS_RETURN_IF_ERROR(layoutFor("DequantizeLinear", X, S, Z, axisAttr, lay));
  auto sf = castTensor(S, DType::Float, true, &ctx);
  if (!sf) return sf.status();
  const float* sc = sf->data<float>();
  Tensor out(DType::Float, X.shape());
  float* y = out.data<float>();
  if (X.dtype() == DType::Float8E4M3FN) {
    const uint8_t* x = X.data<uint8_t>();
    const uint8_t* zb = Z ? Z->data<uint8_t>() : nullptr;
    forEachChannelRun(lay, ctx, [&](int64_t off, int64_t len, int64_t c) {
      const float s = sc[c];
      const float z = zb ? float8e4m3fnToFloat(zb[c]) : 0.0f;
      for (int64_t i = off; i < off + len; ++i) y[i] = (float8e4m3fnToFloat(x[i]) - z) * s;
    });
  } else {
    auto runInt = [&](auto tag) {
      using Q = typename decltype(tag)::type;
      const Q* x = X.data<Q>();
      const Q* zq = Z ? Z->data<Q>() : nullptr;
      forEachChannelRun(lay, ctx, [&](int64_t off, int64_t len, int64_t c) {
        dequantizeRun<Q>(x + off, y + off, len, sc[c], zq ? zq[c] : Q(0));
      });
    };
    switch (X.dtype()) {
      case DType::UInt8: runInt(Tag<uint8_t>{}); break;
      case DType::Int8: runInt(Tag<int8_t>{}); break;
      case DType::UInt16: runInt(Tag<uint16_t>{}); break;
      case DType::Int16: runInt(Tag<int16_t>{}); break;
      case DType::Int32: runInt(Tag<int32_t>{}); break;
      default: return unsupported("DequantizeLinear: input dtype " + dtypeName(X.dtype()) + " is not supported");
    }
  }
  ctx.outputs[0] = demoteHalf(out, st, &ctx);
  return Status::ok();
}

Status runDynamicQuantize(KernelContext& ctx) {
  if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument("DynamicQuantizeLinear needs 1 input");
  const Tensor& X = ctx.input(0);
  if (X.dtype() != DType::Float)
    return unsupported("DynamicQuantizeLinear: input dtype " + dtypeName(X.dtype()) + " is not supported");
  const float* x = X.data<float>();
  const int64_t n = X.numel();
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  const float scale = (hi - lo) / 255.0f;
  float zpf = scale == 0.0f ? 0.0f : std::rint(0.0f - lo / scale);
  zpf = zpf < 0.0f ? 0.0f : (zpf > 255.0f ? 255.0f : zpf);
  Tensor y(DType::UInt8, X.shape());
  if (scale == 0.0f) {
    std::fill(y.data<uint8_t>(), y.data<uint8_t>() + n, uint8_t(0));
  } else {
    uint8_t* py = y.data<uint8_t>();
    parallelBlocks(ctx, n, [&](int64_t b, int64_t e) { quantizeRun<uint8_t>(x + b, py + b, e - b, scale, zpf); });
  }
  ctx.outputs[0] = std::move(y);
  if (ctx.outputCount() > 1) ctx.outputs[1] = Tensor::scalar<float>(scale);
  if (ctx.outputCount() > 2) ctx.outputs[2] = Tensor::scalar<uint8_t>((uint8_t)zpf);
  return Status::ok();
}

Status checkBlockSize(const KernelInit& init, AttrReader& a) {
  const int64_t block = a.i("block_size", 0);
  if (!a.ok()) return a.status();
  if (block != 0)
    return kernelError(StatusCode::Unsupported,
                     "blocked quantization (block_size=" + std::to_string(block) + ") is not supported");
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Kernel>> createQuantizeLinear(const KernelInit& init) {
  AttrReader a(init);
  const int64_t axis = a.i("axis", 1);
  const bool saturate = a.i("saturate", 1) != 0;
  const int64_t outDt = a.i("output_dtype", 0);
  if (!a.ok()) return a.status();
  QS_RETURN_IF_ERROR(checkBlockSize(init, a));
  const DType od = (DType)outDt;
  if (outDt != 0 && od != DType::UInt8 && od != DType::Int8 && od != DType::UInt16 && od != DType::Int16 &&
      od != DType::Float8E4M3FN)
    return kernelError(StatusCode::Unsupported, "output_dtype " + dtypeName(od) + " is not supported");
  // A constant zero point fixes the output dtype: check it at load time.
  if (const Tensor* z = init.constantInput(2)) {
    const DType zt = z->dtype();
    if (zt != DType::UInt8 && zt != DType::Int8 && zt != DType::UInt16 && zt != DType::Int16 &&
        zt != DType::Float8E4M3FN)
      return kernelError(StatusCode::Unsupported, "zero_point dtype " + dtypeName(zt) + " is not supported");
  }
  return makeKernel([axis, saturate, od](KernelContext& ctx) { return runQuantize(axis, saturate, od, ctx); });
}

Result<std::unique_ptr<Kernel>> createDynamicQuantizeLinear(const KernelInit& init) {
  return makeKernel([](KernelContext& ctx) { return runDynamicQuantize(ctx); });
}

Result<std::unique_ptr<Kernel>> createDequantizeLinear(const KernelInit& init) {
  AttrReader a(init);
  const int64_t axis = a.i("axis", 1);
  if (!a.ok()) return a.status();
  QS_RETURN_IF_ERROR(checkBlockSize(init, a));
  return makeKernel([axis](KernelContext& ctx) { return runDequantize(axis, ctx); });
}

}  // namespace qs
