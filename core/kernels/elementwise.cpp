// Broadcasting binary ops (Add, Sub, Mul, Div 7..21, Pow 7..21, Mod 10..21), comparisons
// (Equal, Less, Greater 7..21, LessOrEqual, GreaterOrEqual 12..21), logical ops (And, Or, Xor 7..21),
// variadic Max, Min, Sum, Mean (6..21), Where (9..21) and PRelu (7..21).
#include "core/kernels/elementwise.h"

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/kernels/cast.h"

namespace qs {
namespace ew {

bool planBroadcast(std::initializer_list<const Shape*> shapes, BroadcastPlan& p, const Shape* target) {
  p = BroadcastPlan();
  p.nIn = (int)shapes.size();
  if (p.nIn > kMaxInputs) return false;
  Shape out = target ? *target : Shape{};
  Shape tmp;
  for (const Shape* s : shapes) {
    if (!broadcastShapes(out, *s, tmp)) return false;
    out = tmp;
  }
  p.outShape = out;
  p.numel = numelOf(out);
  const size_t R = out.size();
  std::array<std::vector<int64_t>, kMaxInputs> collapsed;  // per input, collapsed input dims
  std::array<bool, kMaxInputs> bcast{};
  // Collapse.
  std::vector<std::vector<int64_t>> aligned(shapes.size(), std::vector<int64_t>(R, 1));
  size_t k = 0;
  for (const Shape* s : shapes) {
    const size_t lead = R - s->size();
    for (size_t d = lead; d < R; ++d) aligned[k][d] = (*s)[d - lead];
    ++k;
  }
  for (size_t d = 0; d < R; ++d) {
    if (out[d] == 1) continue;
    bool merge = !p.dims.empty();
    for (size_t j = 0; merge && j < aligned.size(); ++j) {
      const bool b = aligned[j][d] == 1;
      if (b != bcast[j]) merge = false;
    }
    if (merge) {
      p.dims.back() *= out[d];
      for (size_t j = 0; j < aligned.size(); ++j) collapsed[j].back() *= aligned[j][d];
    } else {
      p.dims.push_back(out[d]);
      for (size_t j = 0; j < aligned.size(); ++j) {
        collapsed[j].push_back(aligned[j][d]);
        bcast[j] = aligned[j][d] == 1;
      }
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    for (size_t j = 0; j < aligned.size(); ++j) collapsed[j].push_back(1);
  }
  const size_t r = p.dims.size();
  for (size_t j = 0; j < aligned.size(); ++j) {
    p.strides[j].assign(r, 0);
    int64_t running = 1;
    for (size_t d = r; d-- > 0;) {
      const bool broadcast = collapsed[j][d] == 1;
      p.strides[j][d] = broadcast ? 0 : running;
      running *= collapsed[j][d];
    }
  }
  return true;
}

Tensor promoteHalf(const Tensor& t, const KernelContext* ctx) {
  if (!isHalfType(t.dtype())) return t;
  return castTensor(t, DType::Float, true, ctx).value();
}

Tensor demoteHalf(const Tensor& t, DType dtype, const KernelContext* ctx) {
  if (!isHalfType(dtype) || t.dtype() != DType::Float) return t;
  return castTensor(t, dtype, true, ctx).value();
}

}  // namespace ew

namespace {

using namespace ew;

Status shapeError(const char* op, const Tensor& a, const Tensor& b) {
  return invalidArgument(std::string(op) + ": shapes " + shapeToString(a.shape()) + " and " +
                         shapeToString(b.shape()) + " cannot be broadcast");
}

Status dtypeError(const char* op, DType t) {
  return unsupported(std::string(op) + ": dtype " + dtypeName(t) + " is not supported");
}

// ---- element functors -------------------------------------------------------------------------
// (AddOp, SubOp, MulOp, DivOp: elementwise.h, shared with the analysis's elementwise chains.)

struct PowOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (b < 0) {
          if (a == 0) return T(0);
          return T(std::pow((double)a, (double)b));
        }
      }
      using U = std::make_unsigned_t<T>;
      U r = 1, x = U(a);
      std::make_unsigned_t<T> e = U(b);
      while (e) {
        if (e & 1) r = U(r * x);
        x = U(x * x);
        e >>= 1;
      }
      return T(r);
    } else {
      return std::pow(a, b);
    }
  }
};
struct SquareOp {
  template <class T>
  T operator()(T a, T) const { return a * a; }
};
// Mod with fmod=0: the result has the divisor's sign (numpy mod / Python %).
struct ModOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
        T r = T(a % b);
        if (r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
        return r;
      } else {
        return T(a % b);
      }
    } else {
      T r = std::fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
  }
};
// Mod with fmod=1: the result has the dividend's sign (C fmod / %).
struct FModOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
      }
      return T(a % b);
    } else {
      return std::fmod(a, b);
    }
  }
};
struct MaxOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return (a != a) ? a : (a > b ? a : b);  // NaN propagates
    } else {
      return a > b ? a : b;
    }
  }
};
struct MinOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return (a != a) ? a : (a < b ? a : b);
    } else {
      return a < b ? a : b;
    }
  }
};
struct EqOp {
  template <class T>
  bool operator()(T a, T b) const { return a == b; }
};
struct LtOp {
  template <class T>
  bool operator()(T a, T b) const { return a < b; }
};
struct LeOp {
  template <class T>
  bool operator()(T a, T b) const { return a <= b; }
};
struct GtOp {
  template <class T>
  bool operator()(T a, T b) const { return a > b; }
};
struct GeOp {
  template <class T>
  bool operator()(T a, T b) const { return a >= b; }
};
struct AndOp {
  bool operator()(bool a, bool b) const { return a & b; }
};
struct OrOp {
  bool operator()(bool a, bool b) const { return a | b; }
};
struct XorOp {
  bool operator()(bool a, bool b) const { return a != b; }
};
struct ShlOp {
  template <class T>
  T operator()(T a, T b) const { return b >= T(sizeof(T) * 8) ? T(0) : T(a << b); }
};
struct ShrOp {
  template <class T>
  T operator()(T a, T b) const { return b >= T(sizeof(T) * 8) ? T(0) : T(a >> b); }
};
struct PReluOp {
  template <class T>
  T operator()(T x, T s) const {
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return x < T(0) ? T(x * s) : x;
    }
  }
};

/// out = op(a, b) for same-dtype a, b, output dtype TO(T); planned and dispatched.
template <class Op>
Status runSameType(const char* name, const Tensor& a, const Tensor& b, Tensor& out, const Op& op,
                   const KernelContext& ctx) {
  BroadcastPlan plan;
  if (!planBroadcast({&a.shape(), &b.shape()}, plan)) return shapeError(name, a, b);
  out = Tensor(a.dtype(), plan.outShape);
  bool ok = visitNumeric(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    binaryBroadcast<T, T, T>(plan, a.data<T>(), b.data<T>(), out.data<T>(), op, ctx);
  });
  return ok ? Status::ok() : dtypeError(name, a.dtype());
}

// ---- arithmetic --------------------------------------------------------------------------------

enum class Arith { Add, Sub, Mul, Div, Pow, Mod, FMod };

Status runArithNumeric(Arith kind, const char* name, const Tensor& a, const Tensor& b, Tensor& out,
                       const KernelContext& ctx) {
  switch (kind) {
    case Arith::Add: return runSameType(name, a, b, out, AddOp{}, ctx);
    case Arith::Sub: return runSameType(name, a, b, out, SubOp{}, ctx);
    case Arith::Mul: return runSameType(name, a, b, out, MulOp{}, ctx);
    case Arith::Div: return runSameType(name, a, b, out, DivOp{}, ctx);
    case Arith::Pow:
      if (b.numel() == 1 && (a.dtype() == DType::Float || a.dtype() == DType::Double) &&
          b.valueAsDouble(0) == 2.0)
        return runSameType(name, a, b, out, SquareOp{}, ctx);
      return runSameType(name, a, b, out, PowOp{}, ctx);
    case Arith::Mod: return runSameType(name, a, b, out, ModOp{}, ctx);
    case Arith::FMod: return runSameType(name, a, b, out, FModOp{}, ctx);
  }
  return Status::ok();
}

bool isIntegerType(DType t) {
  switch (t) {
    case DType::Int8: case DType::UInt8: case DType::Int16: case DType::UInt16: case DType::Int32:
    case DType::UInt32: case DType::Int64: case DType::UInt64: return true;
    default: return false;
  }
}

Status runArith(Arith kind, const char* name, KernelContext& ctx) {
  if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
    return invalidArgument(std::string(name) + " needs 2 inputs");
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  if (kind != Arith::Pow) {
    if (A.dtype() != B.dtype())
      return invalidArgument(std::string(name) + ": input dtypes differ (" + dtypeName(A.dtype()) + " vs " +
                             dtypeName(B.dtype()) + ")");
    if (isHalfType(A.dtype())) {
      Tensor r;
      QS_RETURN_IF_ERROR(runArithNumeric(kind, name, promoteHalf(A, &ctx), promoteHalf(B, &ctx), r, ctx));
      ctx.outputs[0] = demoteHalf(r, A.dtype(), &ctx);
      return Status::ok();
    }
    return runArithNumeric(kind, name, A, B, ctx.outputs[0], ctx);
  }
  // Pow: the output has the base's dtype; the exponent may be of another numeric type.
  const DType bt = A.dtype(), et = B.dtype();
  if (!castSupported(bt) || !castSupported(et) || bt == DType::Bool || et == DType::Bool)
    return invalidArgument(std::string("Pow: unsupported dtypes ") + dtypeName(bt) + " ^ " + dtypeName(et));
  if (isHalfType(bt)) {
    Tensor base = promoteHalf(A, &ctx);
    auto e = castTensor(B, DType::Float, true, &ctx);
    if (!e) return e.status();
    Tensor r;
    QS_RETURN_IF_ERROR(runArithNumeric(kind, name, base, e.value(), r, ctx));
    ctx.outputs[0] = demoteHalf(r, bt, &ctx);
    return Status::ok();
  }
  if (bt == DType::Float || bt == DType::Double || isIntegerType(et)) {
    if (!(bt == DType::Float || bt == DType::Double || isIntegerType(bt))) return dtypeError(name, bt);
    auto e = castTensor(B, bt, true, &ctx);
    if (!e) return e.status();
    return runArithNumeric(kind, name, A, e.value(), ctx.outputs[0], ctx);
  }
  // Integer base, floating exponent: computed in double, truncated to the base's type (numpy).
  if (!isIntegerType(bt)) return dtypeError(name, bt);
  auto base = castTensor(A, DType::Double, true, &ctx);
  auto e = castTensor(B, DType::Double, true, &ctx);
  if (!base) return base.status();
  if (!e) return e.status();
  Tensor r;
  QS_RETURN_IF_ERROR(runArithNumeric(kind, name, base.value(), e.value(), r, ctx));
  auto back = castTensor(r, bt, true, &ctx);
  if (!back) return back.status();
  ctx.outputs[0] = std::move(back).value();
  return Status::ok();
}

Status runBitShift(bool left, KernelContext& ctx) {
  if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1)) return invalidArgument("BitShift needs 2 inputs");
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != b.dtype())
    return invalidArgument("BitShift: input dtypes differ (" + dtypeName(a.dtype()) + " vs " + dtypeName(b.dtype()) + ")");
  BroadcastPlan plan;
  if (!planBroadcast({&a.shape(), &b.shape()}, plan)) return shapeError("BitShift", a, b);
  Tensor out(a.dtype(), plan.outShape);
  bool ok = visitNumeric(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_unsigned_v<T>) {
      if (left) {
        binaryBroadcast<T, T, T>(plan, a.data<T>(), b.data<T>(), out.data<T>(), ShlOp{}, ctx);
      } else {
        binaryBroadcast<T, T, T>(plan, a.data<T>(), b.data<T>(), out.data<T>(), ShrOp{}, ctx);
      }
    }
  });
  if (!ok || !(a.dtype() == DType::UInt8 || a.dtype() == DType::UInt16 || a.dtype() == DType::UInt32 ||
               a.dtype() == DType::UInt64))
    return dtypeError("BitShift", a.dtype());
  ctx.outputs[0] = std::move(out);
  return Status::ok();
}

// ---- comparisons and logic -----------------------------------------------------------------------

enum class Cmp { Eq, Lt, Le, Gt, Ge };

template <class Op>
Status runCompareOp(const char* name, const Tensor& a, const Tensor& b, Tensor& out, const Op& op,
                    const KernelContext& ctx) {
  BroadcastPlan plan;
  if (!planBroadcast({&a.shape(), &b.shape()}, plan)) return shapeError(name, a, b);
  out = Tensor(DType::Bool, plan.outShape);
  bool* o = out.data<bool>();
  if (a.dtype() == DType::Bool) {
    binaryBroadcast<bool, bool, bool>(plan, a.data<bool>(), b.data<bool>(), o, op, ctx);
    return Status::ok();
  }
  bool ok = visitNumeric(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    binaryBroadcast<T, T, bool>(plan, a.data<T>(), b.data<T>(), o, op, ctx);
  });
  return ok ? Status::ok() : dtypeError(name, a.dtype());
}

Status runCompare(Cmp kind, const char* name, KernelContext& ctx) {
  if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
    return invalidArgument(std::string(name) + " needs 2 inputs");
  if (ctx.input(0).dtype() != ctx.input(1).dtype())
    return invalidArgument(std::string(name) + ": input dtypes differ (" + dtypeName(ctx.input(0).dtype()) +
                           " vs " + dtypeName(ctx.input(1).dtype()) + ")");
  Tensor a = promoteHalf(ctx.input(0), &ctx);
  Tensor b = promoteHalf(ctx.input(1), &ctx);
  Tensor& out = ctx.outputs[0];
  switch (kind) {
    case Cmp::Eq: return runCompareOp(name, a, b, out, EqOp{}, ctx);
    case Cmp::Lt: return runCompareOp(name, a, b, out, LtOp{}, ctx);
    case Cmp::Le: return runCompareOp(name, a, b, out, LeOp{}, ctx);
    case Cmp::Gt: return runCompareOp(name, a, b, out, GtOp{}, ctx);
    case Cmp::Ge: return runCompareOp(name, a, b, out, GeOp{}, ctx);
  }
  return Status::ok();
}

template <class Op>
Status runLogical(const char* name, KernelContext& ctx, const Op& op) {
  if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
    return invalidArgument(std::string(name) + " needs 2 inputs");
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != DType::Bool || b.dtype() != DType::Bool)
    return invalidArgument(std::string(name) + ": inputs must be bool, got " + dtypeName(a.dtype()) + " and " +
                           dtypeName(b.dtype()));
  BroadcastPlan plan;
  if (!planBroadcast({&a.shape(), &b.shape()}, plan)) return shapeError(name, a, b);
  Tensor out(DType::Bool, plan.outShape);
  binaryBroadcast<bool, bool, bool>(plan, a.data<bool>(), b.data<bool>(), out.data<bool>(), op, ctx);
  ctx.outputs[0] = std::move(out);
  return Status::ok();
}

// ---- variadic ----------------------------------------------------------------------------------

enum class Var { Max, Min, Sum, Mean };

template <class Op>
Status foldVariadic(const char* name, const std::vector<Tensor>& ins, Tensor& out, const Op& op,
                    const KernelContext& ctx) {
  Shape target;
  Shape tmp;
  for (const Tensor& t : ins) {
    if (!broadcastShapes(target, t.shape(), tmp))
      return invalidArgument(std::string(name) + ": input shapes " + shapeToString(target) + " and " +
                             shapeToString(t.shape()) + " cannot be broadcast");
    target = tmp;
  }
  const DType dt = ins[0].dtype();
  out = Tensor(dt, target);
  bool ok = visitNumeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    BroadcastPlan plan;
    planBroadcast({&ins[0].shape(), &ins[1].shape()}, plan, &target);
    binaryBroadcast<T, T, T>(plan, ins[0].data<T>(), ins[1].data<T>(), o, op, ctx);
    for (size_t i = 2; i < ins.size(); ++i) {
      planBroadcast({&target, &ins[i].shape()}, plan, &target);
      binaryBroadcast<T, T, T>(plan, o, ins[i].data<T>(), o, op, ctx);  // in place: input 0 has out's shape
    }
  });
  return ok ? Status::ok() : dtypeError(name, dt);
}

Status runVariadic(Var kind, const char* name, KernelContext& ctx) {
  std::vector<Tensor> ins;
  for (size_t i = 0; i < ctx.inputCount(); ++i) {
    if (!ctx.hasInput(i)) continue;
    ins.push_back(ctx.input(i));
  }
  if (ins.empty()) return invalidArgument(std::string(name) + " needs at least 1 input");
  const DType dt = ins[0].dtype();
  for (const Tensor& t : ins)
    if (t.dtype() != dt)
      return invalidArgument(std::string(name) + ": input dtypes differ (" + dtypeName(dt) + " vs " +
                             dtypeName(t.dtype()) + ")");
  if (ins.size() == 1) {
    ctx.outputs[0] = ins[0];  // shares the buffer: nothing to compute
    return Status::ok();
  }
  for (Tensor& t : ins) t = promoteHalf(t, &ctx);
  Tensor out;
  switch (kind) {
    case Var::Max: QS_RETURN_IF_ERROR(foldVariadic(name, ins, out, MaxOp{}, ctx)); break;
    case Var::Min: QS_RETURN_IF_ERROR(foldVariadic(name, ins, out, MinOp{}, ctx)); break;
    case Var::Sum:
    case Var::Mean: QS_RETURN_IF_ERROR(foldVariadic(name, ins, out, AddOp{}, ctx)); break;
  }
  if (kind == Var::Mean) {
    const int64_t n = (int64_t)ins.size();
    bool ok = visitNumeric(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = out.data<T>();
      parallelBlocks(ctx, out.numel(), [&](int64_t b, int64_t e) {
        if constexpr (std::is_floating_point_v<T>) {
          const T inv = T(1) / T(n);
          for (int64_t i = b; i < e; ++i) o[i] = o[i] * inv;
        } else {
          for (int64_t i = b; i < e; ++i) o[i] = T(o[i] / T(n));
        }
      });
    });
    if (!ok) return dtypeError(name, out.dtype());
  }
  ctx.outputs[0] = demoteHalf(out, dt, &ctx);
  return Status::ok();
}

// ---- Where -------------------------------------------------------------------------------------

Status runWhere(KernelContext& ctx) {
  if (ctx.inputCount() < 3 || !ctx.hasInput(0) || !ctx.hasInput(1) || !ctx.hasInput(2))
    return invalidArgument("Where needs 3 inputs");
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  if (c.dtype() != DType::Bool) return invalidArgument("Where: condition must be bool, got " + dtypeName(c.dtype()));
  if (x.dtype() != y.dtype())
    return invalidArgument("Where: X and Y dtypes differ (" + dtypeName(x.dtype()) + " vs " + dtypeName(y.dtype()) + ")");
  BroadcastPlan plan;
  if (!planBroadcast({&c.shape(), &x.shape(), &y.shape()}, plan))
    return invalidArgument("Where: shapes " + shapeToString(c.shape()) + ", " + shapeToString(x.shape()) + " and " +
                           shapeToString(y.shape()) + " cannot be broadcast");
  Tensor out(x.dtype(), plan.outShape);
  auto run = [&](auto tag) {
    using U = typename decltype(tag)::type;  // moved as raw bits
    const uint8_t* pc = static_cast<const uint8_t*>(c.raw());
    const U* px = static_cast<const U*>(x.raw());
    const U* py = static_cast<const U*>(y.raw());
    U* po = static_cast<U*>(out.raw());
    const int64_t sc = plan.innerContig(0), sx = plan.innerContig(1), sy = plan.innerContig(2);
    forEachRow(plan, ctx, [&](int64_t o, const int64_t* off, int64_t len) {
      const uint8_t* cc = pc + off[0];
      const U* xx = px + off[1];
      const U* yy = py + off[2];
      U* oo = po + o;
      if (sc && sx && sy) {
        for (int64_t i = 0; i < len; ++i) oo[i] = cc[i] ? xx[i] : yy[i];
      } else {
        for (int64_t i = 0; i < len; ++i) oo[i] = cc[i * sc] ? xx[i * sx] : yy[i * sy];
      }
    });
  };
  switch (dtypeSize(x.dtype())) {
    case 1: run(Tag<uint8_t>{}); break;
    case 2: run(Tag<uint16_t>{}); break;
    case 4: run(Tag<uint32_t>{}); break;
    case 8: run(Tag<uint64_t>{}); break;
    default: return dtypeError("Where", x.dtype());
  }
  ctx.outputs[0] = std::move(out);
  return Status::ok();
}

Status runPRelu(KernelContext& ctx) {
  if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1)) return invalidArgument("PRelu needs 2 inputs");
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  if (X.dtype() != S.dtype())
    return invalidArgument("PRelu: X and slope dtypes differ (" + dtypeName(X.dtype()) + " vs " + dtypeName(S.dtype()) + ")");
  Tensor x = promoteHalf(X, &ctx), s = promoteHalf(S, &ctx);
  BroadcastPlan plan;
  if (!planBroadcast({&x.shape(), &s.shape()}, plan) || plan.outShape != x.shape())
    return invalidArgument("PRelu: slope shape " + shapeToString(s.shape()) + " does not broadcast to X shape " +
                           shapeToString(x.shape()));
  Tensor out(x.dtype(), plan.outShape);
  bool ok = visitNumeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    binaryBroadcast<T, T, T>(plan, x.data<T>(), s.data<T>(), out.data<T>(), PReluOp{}, ctx);
  });
  if (!ok) return dtypeError("PRelu", X.dtype());
  ctx.outputs[0] = demoteHalf(out, X.dtype(), &ctx);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Kernel>> createArithmetic(const KernelInit& init) {
  const std::string& op = init.node.opType;
  Arith kind;
  if (op == "Add") {
    kind = Arith::Add;
  } else if (op == "Sub") {
    kind = Arith::Sub;
  } else if (op == "Mul") {
    kind = Arith::Mul;
  } else if (op == "Div") {
    kind = Arith::Div;
  } else if (op == "Pow") {
    kind = Arith::Pow;
  } else if (op == "Mod") {
    AttrReader a(init);
    const int64_t fmod = a.i("fmod", 0);
    if (!a.ok()) return a.status();
    if (fmod != 0 && fmod != 1)
      return kernelError(StatusCode::InvalidModel, "attribute fmod must be 0 or 1, got " + std::to_string(fmod));
    kind = fmod ? Arith::FMod : Arith::Mod;
  } else {
    return kernelError(StatusCode::Unsupported, "not an arithmetic op");
  }
  if (init.opset < 7 && init.node.attr("broadcast"))
    return kernelError(StatusCode::Unsupported, "legacy 'broadcast' attribute (opset < 7) is not supported");
  static const char* const kNames[] = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Mod"};
  const char* name = kNames[(int)kind];
  return makeKernel([kind, name](KernelContext& ctx) { return runArith(kind, name, ctx); });
}

// The index of `op` in `names` (listed in the order of the op family's enum), or -1.
template <size_t N>
int opIndex(const std::string& op, const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (op == names[i]) return (int)i;
  return -1;
}

// The kernel of an op family whose members are listed by name in the order of its enum Kind:
// run(kind, name, ctx).
template <class Kind, size_t N, class Run>
Result<std::unique_ptr<Kernel>> createNamed(const KernelInit& init, const char* const (&names)[N], const char* family, Run run) {
  const int i = opIndex(init.node.opType, names);
  if (i < 0) return kernelError(StatusCode::Unsupported, std::string("not a ") + family + " op");
  const Kind kind = (Kind)i;
  const char* name = names[i];
  return makeKernel([kind, name, run](KernelContext& ctx) { return run(kind, name, ctx); });
}

Result<std::unique_ptr<Kernel>> createComparison(const KernelInit& init) {
  static const char* const kNames[] = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};  // Cmp's order
  return createNamed<Cmp>(init, kNames, "comparison",
                          [](Cmp kind, const char* name, KernelContext& ctx) { return runCompare(kind, name, ctx); });
}

Result<std::unique_ptr<Kernel>> createLogical(const KernelInit& init) {
  const std::string& op = init.node.opType;
  if (op == "And") return makeKernel([](KernelContext& ctx) { return runLogical("And", ctx, AndOp{}); });
  if (op == "Or") return makeKernel([](KernelContext& ctx) { return runLogical("Or", ctx, OrOp{}); });
  if (op == "Xor") return makeKernel([](KernelContext& ctx) { return runLogical("Xor", ctx, XorOp{}); });
  return kernelError(StatusCode::Unsupported, "not a logical op");
}

Result<std::unique_ptr<Kernel>> createVariadic(const KernelInit& init) {
  static const char* const kNames[] = {"Max", "Min", "Sum", "Mean"};  // Var's order
  return createNamed<Var>(init, kNames, "variadic",
                          [](Var kind, const char* name, KernelContext& ctx) { return runVariadic(kind, name, ctx); });
}

Result<std::unique_ptr<Kernel>> createWhere(const KernelInit& init) {
  return makeKernel([](KernelContext& ctx) { return runWhere(ctx); });
}

Result<std::unique_ptr<Kernel>> createBitShift(const KernelInit& init) {
  AttrReader a(init);
  const std::string dir = a.s("direction", "");
  if (!a.ok()) return a.status();
  if (dir != "LEFT" && dir != "RIGHT")
    return kernelError(StatusCode::InvalidModel, "attribute direction must be LEFT or RIGHT, got '" + dir + "'");
  const bool left = dir == "LEFT";
  return makeKernel([left](KernelContext& ctx) { return runBitShift(left, ctx); });
}

Result<std::unique_ptr<Kernel>> createPRelu(const KernelInit& init) {
  return makeKernel([](KernelContext& ctx) { return runPRelu(ctx); });
}

}  // namespace qs
