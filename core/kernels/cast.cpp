// Cast (ai.onnx 6..21), CastLike (15..21) and the dtype conversion helpers.
#include "core/kernels/cast.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/ir/half.h"

namespace qs {

namespace {

struct F8E4M3 {
  uint8_t bits = 0;
};

template <class T>
struct Tag {
  using type = T;
};

template <class Fn>
bool visitCastType(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float: fn(Tag<float>{}); return true;
    case DType::Double: fn(Tag<double>{}); return true;
    case DType::Float16: fn(Tag<Half>{}); return true;
    case DType::BFloat16: fn(Tag<BFloat16>{}); return true;
    case DType::Float8E4M3FN: fn(Tag<F8E4M3>{}); return true;
    case DType::Int8: fn(Tag<int8_t>{}); return true;
    case DType::UInt8: fn(Tag<uint8_t>{}); return true;
    case DType::Int16: fn(Tag<int16_t>{}); return true;
    case DType::UInt16: fn(Tag<uint16_t>{}); return true;
    case DType::Int32: fn(Tag<int32_t>{}); return true;
    case DType::UInt32: fn(Tag<uint32_t>{}); return true;
    case DType::Int64: fn(Tag<int64_t>{}); return true;
    case DType::UInt64: fn(Tag<uint64_t>{}); return true;
    case DType::Bool: fn(Tag<bool>{}); return true;
    default: return false;
  }
}

template <class T>
constexpr bool kIsFloatLike = std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                              std::is_same_v<T, BFloat16> || std::is_same_v<T, F8E4M3>;

struct F8Table {
  float v[256];
  F8Table() {
    for (int b = 0; b < 256; ++b) {
      int e = (b >> 3) & 15, m = b & 7;
      float x;
      if (e == 15 && m == 7) {
        x = std::numeric_limits<float>::quiet_NaN();
      } else if (e == 0) {
        x = (float)m / 512.0f;
      } else {
        x = std::ldexp(1.0f + (float)m / 8.0f, e - 7);
      }
      v[b] = (b & 0x80) ? -x : x;
    }
  }
};
const F8Table& f8Table() {
  static const F8Table t;
  return t;
}

/// Floating value -> integer type D, mimicking numpy's astype on x86 (cvtt* semantics:
/// out-of-range and NaN give the "integer indefinite" value, narrower types wrap).
template <class D>
D floatToInt(double v) {
  if constexpr (sizeof(D) <= 4) {
    int64_t i;
    if (v > -2147483649.0 && v < 2147483648.0) {
      i = (int64_t)v;
    } else if (std::is_unsigned_v<D> && sizeof(D) == 4 && v > -9223372036854775808.0 &&
               v < 9223372036854775808.0) {
      i = (int64_t)v;  // uint32 converts through int64
    } else {
      i = std::is_unsigned_v<D> && sizeof(D) == 4 ? INT64_MIN : (int64_t)INT32_MIN;
    }
    return (D)i;
  } else if constexpr (std::is_signed_v<D>) {
    if (v >= -9223372036854775808.0 && v < 9223372036854775808.0) return (D)(int64_t)v;
    return (D)INT64_MIN;
  } else {
    if (v >= 0 && v < 18446744073709551616.0) return (D)v;
    if (v < 0 && v >= -9223372036854775808.0) return (D)(int64_t)v;
    return (D)0x8000000000000000ull;
  }
}

template <class D>
D fromFloating(double v, bool sat) {
  if constexpr (std::is_same_v<D, float>) {
    return (float)v;
  } else if constexpr (std::is_same_v<D, double>) {
    return v;
  } else if constexpr (std::is_same_v<D, Half>) {
    return Half{floatToHalf((float)v)};
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return BFloat16{floatToBf16((float)v)};
  } else if constexpr (std::is_same_v<D, F8E4M3>) {
    return F8E4M3{floatToFloat8e4m3fn((float)v, sat)};
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != 0;
  } else {
    return floatToInt<D>(v);
  }
}

template <class D, class I>
D fromInteger(I v, bool sat) {
  if constexpr (std::is_same_v<D, float> || std::is_same_v<D, double>) {
    return (D)v;
  } else if constexpr (kIsFloatLike<D>) {
    return fromFloating<D>((double)v, sat);
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != 0;
  } else {
    return (D)v;  // modular, as numpy
  }
}

template <class S>
double toDouble(S s) {
  if constexpr (std::is_same_v<S, Half>) {
    return halfToFloat(s.bits);
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    return bf16ToFloat(s.bits);
  } else if constexpr (std::is_same_v<S, F8E4M3>) {
    return f8Table().v[s.bits];
  } else {
    return (double)s;
  }
}

template <class S, class D>
void castLoop(const S* __restrict in, D* __restrict out, int64_t n, bool sat) {
  if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Half>) {
    for (int64_t i = 0; i < n; ++i) out[i].bits = floatToHalf(in[i]);
  } else if constexpr (std::is_same_v<S, Half> && std::is_same_v<D, float>) {
    for (int64_t i = 0; i < n; ++i) out[i] = halfToFloat(in[i].bits);
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BFloat16>) {
    for (int64_t i = 0; i < n; ++i) out[i].bits = floatToBf16(in[i]);
  } else if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<D, float>) {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16ToFloat(in[i].bits);
  } else if constexpr (std::is_same_v<S, F8E4M3>) {
    const float* t = f8Table().v;
    for (int64_t i = 0; i < n; ++i) out[i] = fromFloating<D>(t[in[i].bits], sat);
  } else if constexpr (kIsFloatLike<S>) {
    for (int64_t i = 0; i < n; ++i) out[i] = fromFloating<D>(toDouble(in[i]), sat);
  } else if constexpr (std::is_same_v<S, bool>) {
    for (int64_t i = 0; i < n; ++i) out[i] = fromInteger<D>((int)in[i], sat);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = fromInteger<D>(in[i], sat);
  }
}

}  // namespace

float float8e4m3fnToFloat(uint8_t b) { return f8Table().v[b]; }

uint8_t floatToFloat8e4m3fn(float v, bool saturate) {
  uint32_t f;
  std::memcpy(&f, &v, 4);
  const uint8_t sign = (uint8_t)((f >> 24) & 0x80);
  const uint32_t a = f & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;                             // NaN
  if (a > 0x43E80000u) return saturate ? (sign | 0x7e) : (sign | 0x7f);  // beyond 464 (incl. inf)
  if (a >= 0x3C800000u) {                                               // normal (>= 2^-6)
    uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
    return (uint8_t)(sign | (r - (120u << 3)));
  }
  float av;
  std::memcpy(&av, &a, 4);
  return (uint8_t)(sign | (uint8_t)std::nearbyint(av * 512.0f));  // subnormal, 0..8
}

bool castSupported(DType t) {
  return visitCastType(t, [](auto) {});
}

Result<Tensor> castTensor(const Tensor& in, DType to, bool saturate, const KernelContext* ctx) {
  if (in.dtype() == to) return in;
  if (!castSupported(in.dtype()) || !castSupported(to))
    return unsupported("Cast from " + dtypeName(in.dtype()) + " to " + dtypeName(to) + " is not supported");
  Tensor out(to, in.shape());
  const int64_t n = in.numel();
  visitCastType(in.dtype(), [&](auto stag) {
    using S = typename decltype(stag)::type;
    visitCastType(to, [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      const S* src = static_cast<const S*>(in.raw());
      D* dst = static_cast<D*>(out.raw());
      auto body = [&](int64_t b, int64_t e) { castLoop<S, D>(src + b, dst + b, e - b, saturate); };
      if (ctx && n >= 65536) {
        ctx->parallelFor(n, 32768, body);
      } else {
        body(0, n);
      }
    });
  });
  return out;
}

Result<std::unique_ptr<Kernel>> createCast(const KernelInit& init) {
  AttrReader a(init);
  if (!a.has("to")) return kernelError(StatusCode::InvalidModel, "missing required attribute 'to'");
  const int64_t to = a.i("to", 0);
  const bool saturate = a.i("saturate", 1) != 0;
  if (!a.ok()) return a.status();
  const DType dt = (DType)to;
  if (!castSupported(dt))
    return kernelError(StatusCode::Unsupported,
                     "Cast to " + dtypeName(dt) + " (to=" + std::to_string(to) + ") is not supported");
  return makeKernel([dt, saturate](KernelContext& ctx) -> Status {
    if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument("Cast needs 1 input");
    auto r = castTensor(ctx.input(0), dt, saturate, &ctx);
    if (!r) return r.status();
    ctx.outputs[0] = std::move(r).value();
    return Status::ok();
  });
}

Result<std::unique_ptr<Kernel>> createCastLike(const KernelInit& init) {
  AttrReader a(init);
  const bool saturate = a.i("saturate", 1) != 0;
  if (!a.ok()) return a.status();
  return makeKernel([saturate](KernelContext& ctx) -> Status {
    if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
      return invalidArgument("CastLike needs 2 inputs");
    auto r = castTensor(ctx.input(0), ctx.input(1).dtype(), saturate, &ctx);
    if (!r) return r.status();
    ctx.outputs[0] = std::move(r).value();
    return Status::ok();
  });
}

}  // namespace qs
