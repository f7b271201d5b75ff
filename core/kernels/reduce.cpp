// Reductions and ArgMax/ArgMin; see reduce.h for the operators, opsets and dtypes served.
//
// Every reduction is planned the same way: size-1 dims are dropped and neighbouring dims that
// are both kept or both reduced are merged. The common layouts [O, R] and [O, R, I] then run as
// contiguous row reductions (I == 1) or blocked column reductions (I > 1), parallel over O (and
// column blocks); anything else (e.g. reducing axes 0 and 2 of a rank-4 tensor) gathers the
// reduced elements of each output into a scratch row and reduces that.
#include "core/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace qs {
namespace {

enum class ROp { Sum, Mean, Max, Min, Prod, L1, L2, SumSquare, LogSumExp, LogSum };

const char* ropName(ROp op) {
  switch (op) {
    case ROp::Sum: return "ReduceSum";
    case ROp::Mean: return "ReduceMean";
    case ROp::Max: return "ReduceMax";
    case ROp::Min: return "ReduceMin";
    case ROp::Prod: return "ReduceProd";
    case ROp::L1: return "ReduceL1";
    case ROp::L2: return "ReduceL2";
    case ROp::SumSquare: return "ReduceSumSquare";
    case ROp::LogSumExp: return "ReduceLogSumExp";
    case ROp::LogSum: return "ReduceLogSum";
  }
  return "Reduce";
}

template <class A>
inline bool isNan(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

// Reduction policy: T is the element type, A the accumulator type.
template <ROp OP, class T, class A>
struct Pol {
  static A init() {
    if constexpr (OP == ROp::Max) {
      if constexpr (std::is_floating_point_v<T>) {
        return -std::numeric_limits<A>::infinity();
      } else {
        return (A)std::numeric_limits<T>::lowest();
      }
    } else if constexpr (OP == ROp::Min) {
      if constexpr (std::is_floating_point_v<T>) {
        return std::numeric_limits<A>::infinity();
      } else {
        return (A)std::numeric_limits<T>::max();
      }
    } else if constexpr (OP == ROp::Prod) {
      return A(1);
    } else {
      return A(0);
    }
  }
  static A map(A v, [[maybe_unused]] A shift) {
    if constexpr (OP == ROp::L1) {
      return v < A(0) ? A(-v) : v;
    } else if constexpr (OP == ROp::L2 || OP == ROp::SumSquare) {
      if constexpr (std::is_integral_v<A>) {
        return (A)((uint64_t)v * (uint64_t)v);
      } else {
        return v * v;
      }
    } else if constexpr (OP == ROp::LogSumExp) {
      return std::exp(v - shift);
    } else {
      return v;
    }
  }
  static A comb(A a, A b) {
    if constexpr (OP == ROp::Max) {
      return (b > a || isNan(b)) ? b : a;
    } else if constexpr (OP == ROp::Min) {
      return (b < a || isNan(b)) ? b : a;
    } else if constexpr (OP == ROp::Prod) {
      if constexpr (std::is_integral_v<A>) {
        return (A)((uint64_t)a * (uint64_t)b);
      } else {
        return a * b;
      }
    } else {
      if constexpr (std::is_integral_v<A>) {
        return (A)((uint64_t)a + (uint64_t)b);
      } else {
        return a + b;
      }
    }
  }
  static A fin(A acc, [[maybe_unused]] int64_t n) {
    if constexpr (OP == ROp::Mean) {
      if constexpr (std::is_integral_v<A>) {
        return n ? acc / (A)n : A(0);
      } else {
        return acc / (A)n;
      }
    } else if constexpr (OP == ROp::L2) {
      return std::sqrt(acc);
    } else if constexpr (OP == ROp::LogSum) {
      return std::log(acc);
    } else {
      return acc;
    }
  }
};

template <class T, class A>
inline T castOut(A v) {
  if constexpr (std::is_integral_v<T> && std::is_floating_point_v<A>) {
    // Truncation like numpy's astype, saturated so that inf/NaN do not invoke UB.
    if (v != v) return T(0);
    if (v >= (A)std::numeric_limits<T>::max()) return std::numeric_limits<T>::max();
    if (v <= (A)std::numeric_limits<T>::lowest()) return std::numeric_limits<T>::lowest();
    return (T)v;
  } else {
    return (T)v;
  }
}

// Accumulates a contiguous row with 8 independent lanes (lets the compiler vectorise sums).
template <ROp OP, class T, class A>
A accRow(const T* x, int64_t n, A shift) {
  using P = Pol<OP, T, A>;
  constexpr int L = 8;
  A acc[L];
  for (int k = 0; k < L; ++k) acc[k] = P::init();
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    for (int k = 0; k < L; ++k) acc[k] = P::comb(acc[k], P::map((A)x[i + k], shift));
  }
  A r = acc[0];
  for (int k = 1; k < L; ++k) r = P::comb(r, acc[k]);
  for (; i < n; ++i) r = P::comb(r, P::map((A)x[i], shift));
  return r;
}

// Final (finished) value of reducing a contiguous row of n elements.
template <ROp OP, class T, class A>
A rowReduce(const T* x, int64_t n) {
  if constexpr (OP == ROp::LogSumExp) {
    A m = accRow<ROp::Max, T, A>(x, n, A(0));
    if (!std::isfinite(m)) return m;  // empty / all -inf -> -inf; +inf -> +inf; NaN -> NaN
    A s = accRow<ROp::LogSumExp, T, A>(x, n, m);
    return m + std::log(s);
  } else {
    return Pol<OP, T, A>::fin(accRow<OP, T, A>(x, n, A(0)), n);
  }
}

constexpr int64_t kBlk = 256;

// Reduces R rows (separated by `stride` elements) of a block of `len` <= kBlk columns.
template <ROp OP, class T, class A>
void colReduce(const T* x, int64_t R, int64_t stride, int64_t len, T* out) {
  using P = Pol<OP, T, A>;
  A acc[kBlk];
  if constexpr (OP == ROp::LogSumExp) {
    using PM = Pol<ROp::Max, T, A>;
    A mx[kBlk];
    for (int64_t j = 0; j < len; ++j) mx[j] = PM::init();
    for (int64_t r = 0; r < R; ++r) {
      const T* row = x + r * stride;
      for (int64_t j = 0; j < len; ++j) mx[j] = PM::comb(mx[j], (A)row[j]);
    }
    for (int64_t j = 0; j < len; ++j) acc[j] = A(0);
    for (int64_t r = 0; r < R; ++r) {
      const T* row = x + r * stride;
      for (int64_t j = 0; j < len; ++j) acc[j] += std::exp((A)row[j] - mx[j]);
    }
    for (int64_t j = 0; j < len; ++j) {
      out[j] = castOut<T, A>(std::isfinite(mx[j]) ? mx[j] + std::log(acc[j]) : mx[j]);
    }
  } else {
    for (int64_t j = 0; j < len; ++j) acc[j] = P::init();
    for (int64_t r = 0; r < R; ++r) {
      const T* row = x + r * stride;
      for (int64_t j = 0; j < len; ++j) acc[j] = P::comb(acc[j], P::map((A)row[j], A(0)));
    }
    for (int64_t j = 0; j < len; ++j) out[j] = castOut<T, A>(P::fin(acc[j], R));
  }
}

struct Group {
  int64_t size;
  int64_t stride;
  bool reduced;
};

// The reduction's layout after dropping size-1 dims and merging neighbours.
struct Plan {
  bool simple = true;  // [O, R, I] form
  int64_t O = 1, R = 1, I = 1;
  std::vector<Group> kept, red;  // general form (outer to inner)
};

Plan makePlan(const Shape& shape, const std::vector<bool>& reduceMask) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = (int)shape.size() - 2; d >= 0; --d) strides[(size_t)d] = strides[(size_t)d + 1] * shape[(size_t)d + 1];
  std::vector<Group> groups;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduceMask[d]) {
      groups.back().size *= shape[d];
      groups.back().stride = strides[d];
    } else {
      groups.push_back({shape[d], strides[d], (bool)reduceMask[d]});
    }
  }
  Plan p;
  size_t nRed = 0;
  for (const Group& g : groups) nRed += g.reduced ? 1 : 0;
  if (nRed == 0) {
    p.O = numelOf(shape);
    return p;
  }
  if (nRed == 1 && groups.size() <= 3) {
    size_t ri = 0;
    while (!groups[ri].reduced) ++ri;
    p.R = groups[ri].size;
    if (ri == 1) p.O = groups[0].size;
    if (ri + 1 < groups.size()) p.I = groups[ri + 1].size;
    return p;
  }
  p.simple = false;
  for (const Group& g : groups) (g.reduced ? p.red : p.kept).push_back(g);
  return p;
}

template <ROp OP, class T, class A>
void reduceTyped(const KernelContext& ctx, const Tensor& xT, const std::vector<bool>& mask, Tensor& yT) {
  const T* x = xT.data<T>();
  T* y = yT.data<T>();
  const int64_t outN = yT.numel();
  if (outN == 0) return;
  if (xT.numel() == 0) {  // some reduced dim is 0: every output reduces an empty set
    T v = castOut<T, A>(rowReduce<OP, T, A>(x, 0));
    std::fill(y, y + outN, v);
    return;
  }
  Plan p = makePlan(xT.shape(), mask);
  if (p.simple) {
    const int64_t O = p.O, R = p.R, I = p.I;
    if (I == 1) {
      int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(R, 1));
      ctx.parallelFor(O, grain, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) y[o] = castOut<T, A>(rowReduce<OP, T, A>(x + o * R, R));
      });
    } else {
      const int64_t nb = (I + kBlk - 1) / kBlk;
      int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(R * std::min(I, kBlk), 1));
      ctx.parallelFor(O * nb, grain, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t o = t / nb, c0 = (t % nb) * kBlk;
          int64_t len = std::min(kBlk, I - c0);
          colReduce<OP, T, A>(x + o * R * I + c0, R, I, len, y + o * I + c0);
        }
      });
    }
    return;
  }
  // General layout: gather each output's elements into a scratch row.
  int64_t R = 1;
  for (const Group& g : p.red) R *= g.size;
  const std::vector<Group> kept = p.kept, red = p.red;
  const Group inner = red.back();
  const int64_t innerRuns = R / inner.size;
  int64_t grain = std::max<int64_t>(1, 32768 / R);
  ctx.parallelFor(outN, grain, [&](int64_t b, int64_t e) {
    std::unique_ptr<T[]> buf(new T[(size_t)R]);  // not vector: vector<bool> has no data()
    std::vector<int64_t> kIdx(kept.size()), rIdx(red.size());
    for (int64_t o = b; o < e; ++o) {
      int64_t rem = o, base = 0;
      for (int k = (int)kept.size() - 1; k >= 0; --k) {
        int64_t i = rem % kept[(size_t)k].size;
        rem /= kept[(size_t)k].size;
        base += i * kept[(size_t)k].stride;
      }
      std::fill(rIdx.begin(), rIdx.end(), 0);
      T* dst = buf.get();
      for (int64_t run = 0; run < innerRuns; ++run) {
        int64_t off = base;
        for (size_t k = 0; k + 1 < red.size(); ++k) off += rIdx[k] * red[k].stride;
        if (inner.stride == 1) {
          std::memcpy(dst, x + off, sizeof(T) * (size_t)inner.size);
        } else {
          for (int64_t i = 0; i < inner.size; ++i) dst[i] = x[off + i * inner.stride];
        }
        dst += inner.size;
        for (int k = (int)red.size() - 2; k >= 0; --k) {
          if (++rIdx[(size_t)k] < red[(size_t)k].size) break;
          rIdx[(size_t)k] = 0;
        }
      }
      y[o] = castOut<T, A>(rowReduce<OP, T, A>(buf.get(), R));
    }
  });
}

template <ROp OP>
Status reduceDispatch(const KernelContext& ctx, const Tensor& x, const std::vector<bool>& mask, Tensor& y) {
  constexpr bool kFloatAcc = OP == ROp::L2 || OP == ROp::LogSum || OP == ROp::LogSumExp;
  using IntAcc = std::conditional_t<kFloatAcc, double, int64_t>;
  switch (x.dtype()) {
    case DType::Float: reduceTyped<OP, float, float>(ctx, x, mask, y); return Status::ok();
    case DType::Double: reduceTyped<OP, double, double>(ctx, x, mask, y); return Status::ok();
    case DType::Int32: reduceTyped<OP, int32_t, IntAcc>(ctx, x, mask, y); return Status::ok();
    case DType::Int64: reduceTyped<OP, int64_t, IntAcc>(ctx, x, mask, y); return Status::ok();
    default: break;
  }
  if constexpr (OP == ROp::Max || OP == ROp::Min) {
    switch (x.dtype()) {
      case DType::Int8: reduceTyped<OP, int8_t, int64_t>(ctx, x, mask, y); return Status::ok();
      case DType::UInt8: reduceTyped<OP, uint8_t, int64_t>(ctx, x, mask, y); return Status::ok();
      case DType::Bool: reduceTyped<OP, bool, int64_t>(ctx, x, mask, y); return Status::ok();
      default: break;
    }
  }
  return unsupported(std::string(ropName(OP)) + ": input dtype " + dtypeName(x.dtype()) + " is not supported");
}

class ReduceKernel : public Kernel {
 public:
  ReduceKernel(ROp op, bool keepdims, bool noop, std::vector<int64_t> axes)
      : m_op(op), m_keepdims(keepdims), m_noop(noop), m_attrAxes(std::move(axes)) {}

  Status run(KernelContext& ctx) const override {
    if (!ctx.hasInput(0)) return invalidArgument(std::string(ropName(m_op)) + ": missing input 'data'");
    const Tensor& x = ctx.input(0);
    const int64_t rank = x.rank();
    std::vector<int64_t> axes = m_attrAxes;
    if (ctx.hasInput(1)) {
      const Tensor& a = ctx.input(1);
      if (a.dtype() != DType::Int64 && a.dtype() != DType::Int32) {
        return invalidArgument(std::string(ropName(m_op)) + ": 'axes' input must be int64, got " + dtypeName(a.dtype()));
      }
      if (a.rank() > 1) {
        return invalidArgument(std::string(ropName(m_op)) + ": 'axes' input must be 1-D, got shape " +
                               shapeToString(a.shape()));
      }
      axes.clear();
      if (a.numel() > 0) axes = a.toInt64Vector();  // (toInt64Vector memcpy's from null when empty)
    }
    std::vector<bool> mask((size_t)rank, false);
    if (axes.empty()) {
      if (!m_noop) std::fill(mask.begin(), mask.end(), true);
    } else {
      for (int64_t ax : axes) {
        int64_t a = ax;
        if (!normalizeAxis(a, rank)) {
          return invalidArgument(std::string(ropName(m_op)) + ": axis " + std::to_string(ax) +
                                 " is out of range for input of shape " + shapeToString(x.shape()));
        }
        mask[(size_t)a] = true;
      }
    }
    Shape outShape;
    for (int64_t d = 0; d < rank; ++d) {
      if (!mask[(size_t)d]) {
        outShape.push_back(x.dim((int)d));
      } else if (m_keepdims) {
        outShape.push_back(1);
      }
    }
    Tensor y(x.dtype(), outShape);
    switch (m_op) {
      case ROp::Sum: QS_RETURN_IF_ERROR(reduceDispatch<ROp::Sum>(ctx, x, mask, y)); break;
      case ROp::Mean: QS_RETURN_IF_ERROR(reduceDispatch<ROp::Mean>(ctx, x, mask, y)); break;
      case ROp::Max: QS_RETURN_IF_ERROR(reduceDispatch<ROp::Max>(ctx, x, mask, y)); break;
      case ROp::Min: QS_RETURN_IF_ERROR(reduceDispatch<ROp::Min>(ctx, x, mask, y)); break;
      case ROp::Prod: QS_RETURN_IF_ERROR(reduceDispatch<ROp::Prod>(ctx, x, mask, y)); break;
      case ROp::L1: QS_RETURN_IF_ERROR(reduceDispatch<ROp::L1>(ctx, x, mask, y)); break;
      case ROp::L2: QS_RETURN_IF_ERROR(reduceDispatch<ROp::L2>(ctx, x, mask, y)); break;
      case ROp::SumSquare: QS_RETURN_IF_ERROR(reduceDispatch<ROp::SumSquare>(ctx, x, mask, y)); break;
      case ROp::LogSumExp: QS_RETURN_IF_ERROR(reduceDispatch<ROp::LogSumExp>(ctx, x, mask, y)); break;
      case ROp::LogSum: QS_RETURN_IF_ERROR(reduceDispatch<ROp::LogSum>(ctx, x, mask, y)); break;
    }
    if (ctx.outputCount() > 0) ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

 private:
  ROp m_op;
  bool m_keepdims;
  bool m_noop;
  std::vector<int64_t> m_attrAxes;
};

Result<std::unique_ptr<Kernel>> createReduceOp(const KernelInit& init, ROp op) {
  AttrReader a(init);
  int64_t keepdims = a.i("keepdims", 1);
  int64_t noop = a.i("noop_with_empty_axes", 0);
  std::vector<int64_t> axes = a.ints("axes");
  if (!a.ok()) return a.status();
  if (keepdims != 0 && keepdims != 1) a.fail("keepdims must be 0 or 1, got " + std::to_string(keepdims));
  if (noop != 0 && noop != 1) a.fail("noop_with_empty_axes must be 0 or 1, got " + std::to_string(noop));
  if (!a.ok()) return a.status();
  std::unique_ptr<Kernel> k = std::make_unique<ReduceKernel>(op, keepdims != 0, noop != 0, std::move(axes));
  return k;
}

// ---------------------------------------------------------------------------------------------
// ArgMax / ArgMin

template <class T, bool MAX, bool LAST>
inline bool better(T v, T best) {
  if constexpr (MAX) {
    if constexpr (LAST) {
      return v >= best || isNan(v);
    } else {
      return v > best || (isNan(v) && !isNan(best));
    }
  } else {
    if constexpr (LAST) {
      return v <= best || isNan(v);
    } else {
      return v < best || (isNan(v) && !isNan(best));
    }
  }
}

template <class T, bool MAX, bool LAST>
void argTyped(const KernelContext& ctx, const T* x, int64_t O, int64_t R, int64_t I, int64_t* y) {
  if (I == 1) {
    int64_t grain = std::max<int64_t>(1, 32768 / R);
    ctx.parallelFor(O, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = x + o * R;
        T best = row[0];
        int64_t bi = 0;
        for (int64_t r = 1; r < R; ++r) {
          if (better<T, MAX, LAST>(row[r], best)) {
            best = row[r];
            bi = r;
          }
        }
        y[o] = bi;
      }
    });
    return;
  }
  const int64_t nb = (I + kBlk - 1) / kBlk;
  int64_t grain = std::max<int64_t>(1, 32768 / (R * std::min(I, kBlk)));
  ctx.parallelFor(O * nb, grain, [&](int64_t b, int64_t e) {
    T best[kBlk];
    int64_t bi[kBlk];
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / nb, c0 = (t % nb) * kBlk;
      int64_t len = std::min(kBlk, I - c0);
      const T* base = x + o * R * I + c0;
      for (int64_t j = 0; j < len; ++j) {
        best[j] = base[j];
        bi[j] = 0;
      }
      for (int64_t r = 1; r < R; ++r) {
        const T* row = base + r * I;
        for (int64_t j = 0; j < len; ++j) {
          if (better<T, MAX, LAST>(row[j], best[j])) {
            best[j] = row[j];
            bi[j] = r;
          }
        }
      }
      std::memcpy(y + o * I + c0, bi, sizeof(int64_t) * (size_t)len);
    }
  });
}

template <class T>
void argDispatchLast(const KernelContext& ctx, bool isMax, bool last, const Tensor& x, int64_t O, int64_t R,
                     int64_t I, int64_t* y) {
  const T* p = x.data<T>();
  if (isMax) {
    last ? argTyped<T, true, true>(ctx, p, O, R, I, y) : argTyped<T, true, false>(ctx, p, O, R, I, y);
  } else {
    last ? argTyped<T, false, true>(ctx, p, O, R, I, y) : argTyped<T, false, false>(ctx, p, O, R, I, y);
  }
}

class ArgKernel : public Kernel {
 public:
  ArgKernel(bool isMax, int64_t axis, bool keepdims, bool last)
      : m_max(isMax), m_axis(axis), m_keepdims(keepdims), m_last(last) {}

  Status run(KernelContext& ctx) const override {
    const char* name = m_max ? "ArgMax" : "ArgMin";
    if (!ctx.hasInput(0)) return invalidArgument(std::string(name) + ": missing input 'data'");
    const Tensor& x = ctx.input(0);
    const int64_t rank = x.rank();
    int64_t axis = m_axis;
    if (rank == 0) {
      if (axis != 0 && axis != -1) {
        return invalidArgument(std::string(name) + ": axis " + std::to_string(m_axis) + " is out of range for a scalar");
      }
      Tensor y(DType::Int64, {});
      y.data<int64_t>()[0] = 0;
      if (ctx.outputCount() > 0) ctx.outputs[0] = std::move(y);
      return Status::ok();
    }
    if (!normalizeAxis(axis, rank)) {
      return invalidArgument(std::string(name) + ": axis " + std::to_string(m_axis) +
                             " is out of range for input of shape " + shapeToString(x.shape()));
    }
    int64_t O = 1, I = 1, R = x.dim((int)axis);
    for (int64_t d = 0; d < axis; ++d) O *= x.dim((int)d);
    for (int64_t d = axis + 1; d < rank; ++d) I *= x.dim((int)d);
    Shape outShape;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis) {
        outShape.push_back(x.dim((int)d));
      } else if (m_keepdims) {
        outShape.push_back(1);
      }
    }
    Tensor y(DType::Int64, outShape);
    if (y.numel() > 0) {
      if (R == 0) {
        return invalidArgument(std::string(name) + ": cannot reduce over axis " + std::to_string(axis) +
                               " of size 0 (input shape " + shapeToString(x.shape()) + ")");
      }
      int64_t* py = y.data<int64_t>();
      switch (x.dtype()) {
        case DType::Float: argDispatchLast<float>(ctx, m_max, m_last, x, O, R, I, py); break;
        case DType::Double: argDispatchLast<double>(ctx, m_max, m_last, x, O, R, I, py); break;
        case DType::Int32: argDispatchLast<int32_t>(ctx, m_max, m_last, x, O, R, I, py); break;
        case DType::Int64: argDispatchLast<int64_t>(ctx, m_max, m_last, x, O, R, I, py); break;
        case DType::Int8: argDispatchLast<int8_t>(ctx, m_max, m_last, x, O, R, I, py); break;
        case DType::UInt8: argDispatchLast<uint8_t>(ctx, m_max, m_last, x, O, R, I, py); break;
        default:
          return unsupported(std::string(name) + ": input dtype " + dtypeName(x.dtype()) + " is not supported");
      }
    }
    if (ctx.outputCount() > 0) ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

 private:
  bool m_max;
  int64_t m_axis;
  bool m_keepdims;
  bool m_last;
};

Result<std::unique_ptr<Kernel>> createArg(const KernelInit& init, bool isMax) {
  AttrReader a(init);
  int64_t axis = a.i("axis", 0);
  int64_t keepdims = a.i("keepdims", 1);
  int64_t last = a.i("select_last_index", 0);
  if (!a.ok()) return a.status();
  if (keepdims != 0 && keepdims != 1) a.fail("keepdims must be 0 or 1, got " + std::to_string(keepdims));
  if (last != 0 && last != 1) a.fail("select_last_index must be 0 or 1, got " + std::to_string(last));
  if (!a.ok()) return a.status();
  std::unique_ptr<Kernel> k = std::make_unique<ArgKernel>(isMax, axis, keepdims != 0, last != 0);
  return k;
}

}  // namespace

// ReduceMean, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18).
Result<std::unique_ptr<Kernel>> createReduceMean(const KernelInit& init) { return createReduceOp(init, ROp::Mean); }
// ReduceSum, ai.onnx opsets 1..21 (axes attribute < 13, input >= 13).
Result<std::unique_ptr<Kernel>> createReduceSum(const KernelInit& init) { return createReduceOp(init, ROp::Sum); }
// ReduceMax, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18).
Result<std::unique_ptr<Kernel>> createReduceMax(const KernelInit& init) { return createReduceOp(init, ROp::Max); }
// ReduceMin, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18).
Result<std::unique_ptr<Kernel>> createReduceMin(const KernelInit& init) { return createReduceOp(init, ROp::Min); }
// ReduceProd, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18).
Result<std::unique_ptr<Kernel>> createReduceProd(const KernelInit& init) { return createReduceOp(init, ROp::Prod); }
// ReduceL1, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18).
Result<std::unique_ptr<Kernel>> createReduceL1(const KernelInit& init) { return createReduceOp(init, ROp::L1); }
// ReduceL2, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18).
Result<std::unique_ptr<Kernel>> createReduceL2(const KernelInit& init) { return createReduceOp(init, ROp::L2); }
// ReduceSumSquare, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18).
Result<std::unique_ptr<Kernel>> createReduceSumSquare(const KernelInit& init) {
  return createReduceOp(init, ROp::SumSquare);
}
// ReduceLogSumExp, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18); computed as
// max + log(sum(exp(x - max))) so large inputs do not overflow.
Result<std::unique_ptr<Kernel>> createReduceLogSumExp(const KernelInit& init) {
  return createReduceOp(init, ROp::LogSumExp);
}
// ReduceLogSum, ai.onnx opsets 1..21 (axes attribute < 18, input >= 18).
Result<std::unique_ptr<Kernel>> createReduceLogSum(const KernelInit& init) { return createReduceOp(init, ROp::LogSum); }

// ArgMax, ai.onnx opsets 1..21 (select_last_index from 12; default 0 before).
Result<std::unique_ptr<Kernel>> createArgMax(const KernelInit& init) { return createArg(init, true); }
// ArgMin, ai.onnx opsets 1..21 (select_last_index from 12; default 0 before).
Result<std::unique_ptr<Kernel>> createArgMin(const KernelInit& init) { return createArg(init, false); }

}  // namespace qs
