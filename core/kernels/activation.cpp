// Unary elementwise ops, activations and Clip. Transcendentals use Eigen's vectorised array
// functions (exp, log, tanh, logistic, erf) over contiguous blocks.
#include "core/kernels/activation.h"

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "core/kernels/elementwise.h"

namespace qs {
namespace {

using namespace ew;

enum class U {
  Relu, LeakyRelu, Elu, Selu, Sigmoid, HardSigmoid, HardSwish, Tanh, Softplus, Softsign, Erf, Gelu, GeluTanh,
  Exp, Log, Sqrt, Reciprocal, Neg, Abs, Floor, Ceil, Round, Sign, Not,
  Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, ThresholdedRelu, Celu, Shrink, Mish,
  IsNaN, IsInf
};

struct Params {
  float alpha = 0, beta = 0, gamma = 0;
};

/// Ops defined for integer types too (others are float-only).
bool acceptsIntegers(U k) { return k == U::Relu || k == U::Neg || k == U::Abs || k == U::Sign; }

template <class T>
using EArr = Eigen::Array<T, Eigen::Dynamic, 1>;

template <class T>
void floatBlock(U kind, const Params& p, const T* __restrict x, T* __restrict y, int64_t n) {
  Eigen::Map<const EArr<T>> X(x, n);
  Eigen::Map<EArr<T>> Y(y, n);
  const T alpha = (T)p.alpha, beta = (T)p.beta, gamma = (T)p.gamma;
  switch (kind) {
    case U::Relu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
      break;
    case U::LeakyRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? alpha * x[i] : x[i];
      break;
    case U::Elu:
    case U::Selu: {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? T(0) : x[i];
      Y = Y.exp();
      const T g = kind == U::Selu ? gamma : T(1);
      for (int64_t i = 0; i < n; ++i) y[i] = g * (x[i] > T(0) ? x[i] : alpha * (y[i] - T(1)));
      break;
    }
    case U::Sigmoid: Y = X.logistic(); break;
    case U::HardSigmoid:
      for (int64_t i = 0; i < n; ++i) {
        T v = alpha * x[i] + beta;
        v = v < T(0) ? T(0) : v;
        y[i] = v > T(1) ? T(1) : v;
      }
      break;
    case U::HardSwish:
      for (int64_t i = 0; i < n; ++i) {
        T v = x[i] * T(1.0 / 6.0) + T(0.5);
        v = v < T(0) ? T(0) : v;
        y[i] = x[i] * (v > T(1) ? T(1) : v);
      }
      break;
    case U::Tanh: Y = X.tanh(); break;
    case U::Softplus:
      // log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), stable for large |x|.
      Y = (-X.abs()).exp();
      Y = Y.log1p();
      for (int64_t i = 0; i < n; ++i) y[i] += x[i] > T(0) ? x[i] : T(0);
      break;
    case U::Softsign:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (T(1) + std::abs(x[i]));
      break;
    case U::Erf: Y = X.erf(); break;
    case U::Gelu:
      Y = (X * T(0.70710678118654752440)).erf();
      for (int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + y[i]);
      break;
    case U::GeluTanh:
      Y = (T(0.79788456080286535588) * (X + T(0.044715) * X * X * X)).tanh();
      for (int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + y[i]);
      break;
    case U::Exp: Y = X.exp(); break;
    case U::Log: Y = X.log(); break;
    case U::Sqrt: Y = X.sqrt(); break;
    case U::Reciprocal:
      for (int64_t i = 0; i < n; ++i) y[i] = T(1) / x[i];
      break;
    case U::Neg:
      for (int64_t i = 0; i < n; ++i) y[i] = -x[i];
      break;
    case U::Abs:
      for (int64_t i = 0; i < n; ++i) y[i] = std::abs(x[i]);
      break;
    case U::Floor:
      for (int64_t i = 0; i < n; ++i) y[i] = std::floor(x[i]);
      break;
    case U::Ceil:
      for (int64_t i = 0; i < n; ++i) y[i] = std::ceil(x[i]);
      break;
    case U::Round:
      for (int64_t i = 0; i < n; ++i) y[i] = std::nearbyint(x[i]);  // default mode: half to even
      break;
    case U::Sign:
      for (int64_t i = 0; i < n; ++i) {
        const T v = x[i];
        y[i] = v > T(0) ? T(1) : (v < T(0) ? T(-1) : v);  // keeps 0 and NaN
      }
      break;
    case U::Sin: for (int64_t i = 0; i < n; ++i) y[i] = std::sin(x[i]); break;
    case U::Cos: for (int64_t i = 0; i < n; ++i) y[i] = std::cos(x[i]); break;
    case U::Tan: for (int64_t i = 0; i < n; ++i) y[i] = std::tan(x[i]); break;
    case U::Asin: for (int64_t i = 0; i < n; ++i) y[i] = std::asin(x[i]); break;
    case U::Acos: for (int64_t i = 0; i < n; ++i) y[i] = std::acos(x[i]); break;
    case U::Atan: for (int64_t i = 0; i < n; ++i) y[i] = std::atan(x[i]); break;
    case U::Sinh: for (int64_t i = 0; i < n; ++i) y[i] = std::sinh(x[i]); break;
    case U::Cosh: for (int64_t i = 0; i < n; ++i) y[i] = std::cosh(x[i]); break;
    case U::Asinh: for (int64_t i = 0; i < n; ++i) y[i] = std::asinh(x[i]); break;
    case U::Acosh: for (int64_t i = 0; i < n; ++i) y[i] = std::acosh(x[i]); break;
    case U::Atanh: for (int64_t i = 0; i < n; ++i) y[i] = std::atanh(x[i]); break;
    case U::ThresholdedRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > alpha ? x[i] : T(0);
      break;
    case U::Celu:
      // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? T(0) : x[i] / alpha;
      Y = Y.exp();
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : alpha * (y[i] - T(1));
      break;
    case U::Shrink:  // alpha = lambd, beta = bias
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] < -alpha ? x[i] + beta : (x[i] > alpha ? x[i] - beta : T(0));
      break;
    case U::Mish:
      // x * tanh(softplus(x))
      Y = (-X.abs()).exp();
      Y = Y.log1p();
      for (int64_t i = 0; i < n; ++i) y[i] += x[i] > T(0) ? x[i] : T(0);
      Y = X * Y.tanh();
      break;
    case U::Not:
    case U::IsNaN:
    case U::IsInf: break;
  }
}

template <class T>
void intBlock(U kind, const T* __restrict x, T* __restrict y, int64_t n) {
  using UT = std::make_unsigned_t<T>;
  switch (kind) {
    case U::Relu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
      break;
    case U::Neg:
      for (int64_t i = 0; i < n; ++i) y[i] = T(UT(0) - UT(x[i]));
      break;
    case U::Abs:
      if constexpr (std::is_signed_v<T>) {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? T(UT(0) - UT(x[i])) : x[i];
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i];
      }
      break;
    case U::Sign:
      for (int64_t i = 0; i < n; ++i) y[i] = T((x[i] > T(0)) - (x[i] < T(0)));
      break;
    default: break;
  }
}

Status runUnary(U kind, const Params& p, const char* name, KernelContext& ctx) {
  if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument(std::string(name) + " needs 1 input");
  const Tensor& X = ctx.input(0);
  const int64_t n = X.numel();
  if (kind == U::Not) {
    if (X.dtype() != DType::Bool) return invalidArgument("Not: input must be bool, got " + dtypeName(X.dtype()));
    Tensor out(DType::Bool, X.shape());
    const bool* x = X.data<bool>();
    bool* y = out.data<bool>();
    parallelBlocks(ctx, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = !x[i];
    });
    ctx.outputs[0] = std::move(out);
    return Status::ok();
  }
  if (kind == U::IsNaN || kind == U::IsInf) {
    Tensor x = promoteHalf(X, &ctx);
    Tensor out(DType::Bool, x.shape());
    bool* y = out.data<bool>();
    const bool neg = p.alpha != 0, pos = p.beta != 0;  // IsInf detect_negative / detect_positive
    bool ok = visitFloat(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xi = x.data<T>();
      parallelBlocks(ctx, n, [&](int64_t b, int64_t e) {
        if (kind == U::IsNaN) {
          for (int64_t i = b; i < e; ++i) y[i] = xi[i] != xi[i];
        } else {
          const T inf = std::numeric_limits<T>::infinity();
          for (int64_t i = b; i < e; ++i) y[i] = (pos && xi[i] == inf) || (neg && xi[i] == -inf);
        }
      });
    });
    if (!ok) return unsupported(std::string(name) + ": dtype " + dtypeName(X.dtype()) + " is not supported");
    ctx.outputs[0] = std::move(out);
    return Status::ok();
  }
  Tensor x = promoteHalf(X, &ctx);
  Tensor out(x.dtype(), x.shape());
  bool ok = false;
  if (x.dtype() == DType::Float || x.dtype() == DType::Double) {
    ok = visitFloat(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xi = x.data<T>();
      T* yo = out.data<T>();
      parallelBlocks(ctx, n, [&](int64_t b, int64_t e) { floatBlock<T>(kind, p, xi + b, yo + b, e - b); }, 8192);
    });
  } else if (acceptsIntegers(kind)) {
    ok = visitNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) {
        const T* xi = x.data<T>();
        T* yo = out.data<T>();
        parallelBlocks(ctx, n, [&](int64_t b, int64_t e) { intBlock<T>(kind, xi + b, yo + b, e - b); });
      }
    });
  }
  if (!ok) return unsupported(std::string(name) + ": dtype " + dtypeName(X.dtype()) + " is not supported");
  ctx.outputs[0] = demoteHalf(out, X.dtype(), &ctx);
  return Status::ok();
}

// ---- Clip ----------------------------------------------------------------------------------------

template <class T>
Status clipTyped(const Tensor& x, Tensor& out, const Tensor* lo, const Tensor* hi, bool fromAttrs, float alo,
                 float ahi, const KernelContext& ctx) {
  T vlo = std::numeric_limits<T>::lowest(), vhi = std::numeric_limits<T>::max();
  if (fromAttrs) {
    vlo = (T)alo;
    vhi = (T)ahi;
  }
  for (int which = 0; which < 2; ++which) {
    const Tensor* t = which ? hi : lo;
    if (!t) continue;
    if (t->dtype() != x.dtype())
      return invalidArgument(std::string("Clip: ") + (which ? "max" : "min") + " has dtype " + dtypeName(t->dtype()) +
                             ", input has " + dtypeName(x.dtype()));
    if (t->numel() != 1)
      return invalidArgument(std::string("Clip: ") + (which ? "max" : "min") + " must be a scalar, got shape " +
                             shapeToString(t->shape()));
    (which ? vhi : vlo) = t->data<T>()[0];
  }
  const T* xi = x.data<T>();
  T* yo = out.data<T>();
  parallelBlocks(ctx, x.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) yo[i] = clipValue(xi[i], vlo, vhi);
  });
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Kernel>> createUnary(const KernelInit& init) {
  static const struct {
    const char* name;
    U kind;
  } kOps[] = {{"Relu", U::Relu},         {"LeakyRelu", U::LeakyRelu}, {"Elu", U::Elu},
              {"Selu", U::Selu},         {"Sigmoid", U::Sigmoid},     {"HardSigmoid", U::HardSigmoid},
              {"HardSwish", U::HardSwish}, {"Tanh", U::Tanh},         {"Softplus", U::Softplus},
              {"Softsign", U::Softsign}, {"Erf", U::Erf},             {"Gelu", U::Gelu},
              {"Exp", U::Exp},           {"Log", U::Log},             {"Sqrt", U::Sqrt},
              {"Reciprocal", U::Reciprocal}, {"Neg", U::Neg},         {"Abs", U::Abs},
              {"Floor", U::Floor},       {"Ceil", U::Ceil},           {"Round", U::Round},
              {"Sign", U::Sign},         {"Not", U::Not},             {"Sin", U::Sin},
              {"Cos", U::Cos},           {"Tan", U::Tan},             {"Asin", U::Asin},
              {"Acos", U::Acos},         {"Atan", U::Atan},           {"Sinh", U::Sinh},
              {"Cosh", U::Cosh},         {"Asinh", U::Asinh},         {"Acosh", U::Acosh},
              {"Atanh", U::Atanh},       {"ThresholdedRelu", U::ThresholdedRelu}, {"Celu", U::Celu},
              {"Shrink", U::Shrink},     {"Mish", U::Mish},           {"IsNaN", U::IsNaN},
              {"IsInf", U::IsInf}};
  const char* name = nullptr;
  U kind = U::Relu;
  for (const auto& o : kOps)
    if (init.node.opType == o.name) {
      name = o.name;
      kind = o.kind;
    }
  if (!name) return kernelError(StatusCode::Unsupported, "not a unary op");
  AttrReader a(init);
  Params p;
  switch (kind) {
    case U::LeakyRelu: p.alpha = a.f("alpha", 0.01f); break;
    case U::Elu: p.alpha = a.f("alpha", 1.0f); break;
    case U::Selu:
      p.alpha = a.f("alpha", 1.67326319217681884765625f);
      p.gamma = a.f("gamma", 1.05070102214813232421875f);
      break;
    case U::HardSigmoid:
      p.alpha = a.f("alpha", 0.2f);
      p.beta = a.f("beta", 0.5f);
      break;
    case U::ThresholdedRelu: p.alpha = a.f("alpha", 1.0f); break;
    case U::Celu:
      p.alpha = a.f("alpha", 1.0f);
      if (a.ok() && p.alpha == 0) a.fail("attribute alpha must not be 0");
      break;
    case U::Shrink:
      p.alpha = a.f("lambd", 0.5f);
      p.beta = a.f("bias", 0.0f);
      break;
    case U::IsInf:
      p.alpha = (float)a.i("detect_negative", 1);
      p.beta = (float)a.i("detect_positive", 1);
      break;
    case U::Gelu: {
      const std::string approx = a.s("approximate", "none");
      if (approx == "tanh") {
        kind = U::GeluTanh;
      } else if (approx != "none") {
        a.fail("attribute approximate must be 'none' or 'tanh', got '" + approx + "'");
      }
      break;
    }
    default: break;
  }
  if (!a.ok()) return a.status();
  return makeKernel([kind, p, name](KernelContext& ctx) { return runUnary(kind, p, name, ctx); });
}

Result<std::unique_ptr<Kernel>> createClip(const KernelInit& init) {
  const bool fromAttrs = init.opset < 11;
  float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
  if (fromAttrs) {
    AttrReader a(init);
    lo = a.f("min", lo);
    hi = a.f("max", hi);
    if (!a.ok()) return a.status();
  }
  return makeKernel([fromAttrs, lo, hi](KernelContext& ctx) -> Status {
    if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument("Clip needs an input");
    const Tensor& X = ctx.input(0);
    const Tensor* tlo = !fromAttrs && ctx.hasInput(1) ? &ctx.input(1) : nullptr;
    const Tensor* thi = !fromAttrs && ctx.hasInput(2) ? &ctx.input(2) : nullptr;
    Tensor x = promoteHalf(X, &ctx);
    Tensor plo, phi;
    if (tlo) tlo = &(plo = promoteHalf(*tlo, &ctx));
    if (thi) thi = &(phi = promoteHalf(*thi, &ctx));
    Tensor out(x.dtype(), x.shape());
    Status st = Status::ok();
    bool ok = visitNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      st = clipTyped<T>(x, out, tlo, thi, fromAttrs, lo, hi, ctx);
    });
    if (!ok) return unsupported("Clip: dtype " + dtypeName(X.dtype()) + " is not supported");
    QS_RETURN_IF_ERROR(st);
    ctx.outputs[0] = demoteHalf(out, X.dtype(), &ctx);
    return Status::ok();
  });
}

}  // namespace qs
