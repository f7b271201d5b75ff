// Tile, Range, TopK, CumSum, NonZero, OneHot, DepthToSpace, SpaceToDepth.
#include "core/kernels/misc_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/ir/half.h"
#include "core/kernels/dtype_dispatch.h"
#include "core/kernels/shape_ops.h"
#include "core/kernels/transpose.h"

namespace qs {

using namespace tensorops;

namespace {

Status scalarInput(const Node& node, const Tensor& t, const char* what) {
  if (t.numel() != 1)
    return runError(node, StatusCode::InvalidArgument,
                     std::string(what) + " must hold one element, got shape " + shapeToString(t.shape()));
  return Status::ok();
}

}  // namespace

// ---------------------------------------------------------------- Tile (6..21)
Result<std::unique_ptr<Kernel>> createTile(const KernelInit& init) {
  return makeKernel([node = nodeTag(init.node)](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 2));
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> rep;
    QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(1), "repeats", rep));
    int64_t r = x.rank();
    if ((int64_t)rep.size() != r)
      return runError(node, StatusCode::InvalidArgument,
                       "repeats " + shapeToString(rep) + " must have one entry per axis of input " +
                           shapeToString(x.shape()));
    Shape out((size_t)r);
    for (int64_t d = 0; d < r; ++d) {
      if (rep[(size_t)d] < 0)
        return runError(node, StatusCode::InvalidArgument, "repeats " + shapeToString(rep) + " has a negative value");
      out[(size_t)d] = x.dim((int)d) * rep[(size_t)d];
    }
    QS_RETURN_IF_ERROR(checkOutputShape(out, "output shape"));
    Tensor y(x.dtype(), out);
    if (y.numel() == 0 || r == 0) {
      if (r == 0) std::memcpy(y.raw(), x.raw(), x.byteSize());
      ctx.outputs[0] = std::move(y);
      return Status::ok();
    }
    size_t esz = dtypeSize(x.dtype());
    std::vector<int64_t> xs = stridesOf(x.shape());
    int64_t nIn = x.dim((int)r - 1), last = out[(size_t)r - 1];
    int64_t rows = y.numel() / last;
    size_t inRowBytes = (size_t)nIn * esz;
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    ctx.parallelFor(rows, std::max<int64_t>(1, 16384 / last), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t rem = row, off = 0;
        for (int64_t d = r - 2; d >= 0; --d) {
          int64_t c = rem % out[(size_t)d];
          rem /= out[(size_t)d];
          off += (c % x.dim((int)d)) * xs[(size_t)d];
        }
        const char* sp = src + (size_t)off * esz;
        char* dp = dst + (size_t)(row * last) * esz;
        if (nIn == 1) {
          fillElements(dp, last, sp, esz);
        } else {
          for (int64_t k = 0; k < rep[(size_t)r - 1]; ++k) std::memcpy(dp + (size_t)k * inRowBytes, sp, inRowBytes);
        }
      }
    });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Range (11..21)
Result<std::unique_ptr<Kernel>> createRange(const KernelInit& init) {
  return makeKernel([node = nodeTag(init.node)](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 3));
    const Tensor& ts = ctx.input(0);
    const Tensor& tl = ctx.input(1);
    const Tensor& td = ctx.input(2);
    QS_RETURN_IF_ERROR(scalarInput(node, ts, "start"));
    QS_RETURN_IF_ERROR(scalarInput(node, tl, "limit"));
    QS_RETURN_IF_ERROR(scalarInput(node, td, "delta"));
    if (tl.dtype() != ts.dtype() || td.dtype() != ts.dtype())
      return runError(node, StatusCode::InvalidArgument,
                       "start, limit and delta dtypes differ: " + dtypeName(ts.dtype()) + ", " + dtypeName(tl.dtype()) +
                           ", " + dtypeName(td.dtype()));
    Status st = Status::ok();
    bool ok = dispatchArith(ts.dtype(), [&]<class T>() {
      T s = ts.data<T>()[0], l = tl.data<T>()[0], d = td.data<T>()[0];
      if (d == T(0)) {
        st = runError(node, StatusCode::InvalidArgument, "delta is 0");
        return;
      }
      int64_t n;
      if constexpr (std::is_floating_point_v<T>) {
        double v = std::ceil(((double)l - (double)s) / (double)d);
        if (!(v < 1e12)) {
          st = runError(node, StatusCode::InvalidArgument,
                         "range [" + std::to_string(s) + ", " + std::to_string(l) + ") step " + std::to_string(d) +
                             " has too many elements");
          return;
        }
        n = v > 0 ? (int64_t)v : 0;
      } else {
        // Exact integer ceil division in a wide type.
        __int128 diff = (__int128)l - (__int128)s, dd = (__int128)d;
        __int128 q = 0;
        if (dd > 0 && diff > 0) q = (diff + dd - 1) / dd;
        if (dd < 0 && diff < 0) q = (-diff + (-dd) - 1) / (-dd);
        if (q > (__int128)((int64_t)1 << 40)) {
          st = runError(node, StatusCode::InvalidArgument, "range has too many elements");
          return;
        }
        n = (int64_t)q;
      }
      Tensor y(ts.dtype(), {n});
      T* p = y.data<T>();
      for (int64_t i = 0; i < n; ++i) p[i] = (T)(s + (T)i * d);
      ctx.outputs[0] = std::move(y);
    });
    if (!ok) return runError(node, StatusCode::Unsupported, "dtype " + dtypeName(ts.dtype()));
    return st;
  });
}

// ---------------------------------------------------------------- TopK (1..21)
namespace {

template <class K>
inline bool isNan(K v) {
  if constexpr (std::is_floating_point_v<K>) return std::isnan(v);
  return false;
}

// Sorts lanes of keys; writes values by copying raw elements (so float16 values stay exact).
template <class K, class LoadKey>
void topKLanes(const KernelContext& ctx, const Tensor& x, Tensor& vals, Tensor& inds, int64_t outer, int64_t n,
               int64_t inner, int64_t k, bool largest, LoadKey load) {
  size_t esz = dtypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* vdst = static_cast<char*>(vals.raw());
  int64_t* idst = inds.data<int64_t>();
  ctx.parallelFor(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    std::vector<std::pair<K, int64_t>> lane((size_t)n);
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / inner, i = t % inner;
      int64_t base = o * n * inner + i;
      for (int64_t j = 0; j < n; ++j) lane[(size_t)j] = {load(base + j * inner), j};
      auto cmp = [largest](const std::pair<K, int64_t>& a, const std::pair<K, int64_t>& c) {
        bool an = isNan(a.first), cn = isNan(c.first);
        if (an || cn) {
          if (an && cn) return a.second < c.second;
          return largest ? an : cn;  // NaN counts as the largest value
        }
        if (a.first != c.first) return largest ? a.first > c.first : a.first < c.first;
        return a.second < c.second;
      };
      if (k < n) {
        std::partial_sort(lane.begin(), lane.begin() + k, lane.end(), cmp);
      } else {
        std::sort(lane.begin(), lane.end(), cmp);
      }
      int64_t obase = o * k * inner + i;
      for (int64_t j = 0; j < k; ++j) {
        int64_t srcIdx = base + lane[(size_t)j].second * inner;
        int64_t dstIdx = obase + j * inner;
        std::memcpy(vdst + (size_t)dstIdx * esz, src + (size_t)srcIdx * esz, esz);
        idst[dstIdx] = lane[(size_t)j].second;
      }
    }
  });
}

}  // namespace

Result<std::unique_ptr<Kernel>> createTopK(const KernelInit& init) {
  AttrReader a(init);
  int64_t axisAttr = a.i("axis", -1);
  int64_t kAttr = -1;
  if (init.opset < 10) {
    if (!a.has("k")) return kernelError(StatusCode::InvalidModel, "attribute 'k' is required");
    kAttr = a.i("k", 0);
  }
  bool largest = true;
  if (init.opset >= 11) {
    largest = a.i("largest", 1) != 0;
    (void)a.i("sorted", 1);  // unsorted output may be in any order: sorted order is valid
  }
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), axisAttr, kAttr, largest](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, kAttr < 0 ? 2 : 1));
    const Tensor& x = ctx.input(0);
    int64_t k = kAttr;
    if (k < 0) {
      const Tensor& kt = ctx.input(1);
      if (!isIndexType(kt.dtype()) || kt.numel() != 1)
        return runError(node, StatusCode::InvalidArgument,
                         "K must be a one-element int64 tensor, got " + dtypeName(kt.dtype()) + " " +
                             shapeToString(kt.shape()));
      k = indexAt(kt, 0);
    }
    int64_t axis = axisAttr;
    if (!normalizeAxis(axis, x.rank()))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(axisAttr) + " out of range for input " + shapeToString(x.shape()));
    int64_t n = x.dim((int)axis);
    if (k < 0 || k > n)
      return runError(node, StatusCode::InvalidArgument,
                       "k " + std::to_string(k) + " out of range for axis " + std::to_string(axis) + " of input " +
                           shapeToString(x.shape()));
    Shape os = x.shape();
    os[(size_t)axis] = k;
    Tensor vals(x.dtype(), os), inds(DType::Int64, os);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim((int)d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim((int)d);
    if (vals.numel() > 0) {
      if (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16) {
        const uint16_t* p = x.data<uint16_t>();
        bool bf = x.dtype() == DType::BFloat16;
        topKLanes<float>(ctx, x, vals, inds, outer, n, inner, k, largest,
                         [p, bf](int64_t i) { return bf ? bf16ToFloat(p[i]) : halfToFloat(p[i]); });
      } else {
        bool ok = dispatchArith(x.dtype(), [&]<class T>() {
          const T* p = x.data<T>();
          topKLanes<T>(ctx, x, vals, inds, outer, n, inner, k, largest, [p](int64_t i) { return p[i]; });
        });
        if (!ok) return runError(node, StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
      }
    }
    ctx.outputs[0] = std::move(vals);
    if (ctx.outputCount() > 1) ctx.outputs[1] = std::move(inds);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- CumSum (11..21)
namespace {
template <class T, class Acc, class Load, class Store>
void cumsumLanes(const KernelContext& ctx, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse,
                 Load load, Store store) {
  ctx.parallelFor(outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * inner)), [&](int64_t b, int64_t e) {
    std::vector<Acc> acc((size_t)inner);
    for (int64_t o = b; o < e; ++o) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t jj = 0; jj < n; ++jj) {
        int64_t j = reverse ? n - 1 - jj : jj;
        int64_t base = (o * n + j) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          Acc v = load(base + i);
          if (exclusive) {
            store(base + i, acc[(size_t)i]);
            acc[(size_t)i] = (Acc)(acc[(size_t)i] + v);
          } else {
            acc[(size_t)i] = (Acc)(acc[(size_t)i] + v);
            store(base + i, acc[(size_t)i]);
          }
        }
      }
    }
  });
}
}  // namespace

Result<std::unique_ptr<Kernel>> createCumSum(const KernelInit& init) {
  AttrReader a(init);
  bool exclusive = a.i("exclusive", 0) != 0;
  bool reverse = a.i("reverse", 0) != 0;
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), exclusive, reverse](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 2));
    const Tensor& x = ctx.input(0);
    const Tensor& at = ctx.input(1);
    if (!isIndexType(at.dtype()) || at.numel() != 1)
      return runError(node, StatusCode::InvalidArgument,
                       "axis must be a one-element int32/int64 tensor, got " + dtypeName(at.dtype()) + " " +
                           shapeToString(at.shape()));
    int64_t axis = indexAt(at, 0);
    int64_t r = std::max(x.rank(), 1);
    if (!normalizeAxis(axis, r))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(indexAt(at, 0)) + " out of range for input " + shapeToString(x.shape()));
    int64_t outer = 1, inner = 1, n = x.rank() == 0 ? 1 : x.dim((int)axis);
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim((int)d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim((int)d);
    Tensor y(x.dtype(), x.shape());
    if (y.numel() > 0) {
      if (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16) {
        const uint16_t* p = x.data<uint16_t>();
        uint16_t* q = y.data<uint16_t>();
        bool bf = x.dtype() == DType::BFloat16;
        cumsumLanes<uint16_t, float>(
            ctx, outer, n, inner, exclusive, reverse,
            [p, bf](int64_t i) { return bf ? bf16ToFloat(p[i]) : halfToFloat(p[i]); },
            [q, bf](int64_t i, float v) { q[i] = bf ? floatToBf16(v) : floatToHalf(v); });
      } else {
        bool ok = dispatchArith(x.dtype(), [&]<class T>() {
          const T* p = x.data<T>();
          T* q = y.data<T>();
          cumsumLanes<T, T>(ctx, outer, n, inner, exclusive, reverse, [p](int64_t i) { return p[i]; },
                            [q](int64_t i, T v) { q[i] = v; });
        });
        if (!ok) return runError(node, StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
      }
    }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- NonZero (9..21)
Result<std::unique_ptr<Kernel>> createNonZero(const KernelInit& init) {
  return makeKernel([node = nodeTag(init.node)](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    int64_t total = x.numel();
    std::vector<uint8_t> nz((size_t)total);
    DType t = x.dtype();
    if (t == DType::Float16 || t == DType::BFloat16) {
      const uint16_t* p = x.data<uint16_t>();
      for (int64_t i = 0; i < total; ++i) nz[(size_t)i] = (p[i] & 0x7fff) != 0;
    } else if (t == DType::Bool) {
      const uint8_t* p = x.data<uint8_t>();
      for (int64_t i = 0; i < total; ++i) nz[(size_t)i] = p[i] != 0;
    } else {
      bool ok = dispatchArith(t, [&]<class T>() {
        const T* p = x.data<T>();
        for (int64_t i = 0; i < total; ++i) nz[(size_t)i] = p[i] != T(0);
      });
      if (!ok) return runError(node, StatusCode::Unsupported, "dtype " + dtypeName(t));
    }
    int64_t count = 0;
    for (uint8_t v : nz) count += v;
    int64_t r = x.rank() == 0 ? 1 : x.rank();
    Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
    Tensor y(DType::Int64, {r, count});
    int64_t* out = y.data<int64_t>();
    int64_t col = 0;
    std::vector<int64_t> c((size_t)r, 0);
    for (int64_t i = 0; i < total; ++i) {
      if (nz[(size_t)i]) {
        for (int64_t d = 0; d < r; ++d) out[d * count + col] = c[(size_t)d];
        ++col;
      }
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++c[(size_t)d] < shape[(size_t)d]) break;
        c[(size_t)d] = 0;
      }
    }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- OneHot (9..21)
Result<std::unique_ptr<Kernel>> createOneHot(const KernelInit& init) {
  AttrReader a(init);
  int64_t axisAttr = a.i("axis", -1);
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), axisAttr](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 3));
    const Tensor& ind = ctx.input(0);
    const Tensor& dt = ctx.input(1);
    const Tensor& vals = ctx.input(2);
    QS_RETURN_IF_ERROR(scalarInput(node, dt, "depth"));
    if (vals.numel() != 2)
      return runError(node, StatusCode::InvalidArgument,
                       "values must hold [off, on], got shape " + shapeToString(vals.shape()));
    if (!dtypeSupported(ind.dtype()) || !dtypeSupported(dt.dtype()))
      return runError(node, StatusCode::Unsupported, "indices/depth dtype");
    int64_t depth = (int64_t)dt.valueAsDouble(0);
    if (depth < 1) return runError(node, StatusCode::InvalidArgument, "depth " + std::to_string(depth) + " must be >= 1");
    int64_t r = ind.rank();
    int64_t axis = axisAttr;
    if (!normalizeAxis(axis, r + 1))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(axisAttr) + " out of range for output rank " + std::to_string(r + 1));
    Shape out;
    for (int64_t d = 0; d < axis; ++d) out.push_back(ind.dim((int)d));
    out.push_back(depth);
    for (int64_t d = axis; d < r; ++d) out.push_back(ind.dim((int)d));
    QS_RETURN_IF_ERROR(checkOutputShape(out, "output shape"));
    Tensor y(vals.dtype(), out);
    size_t esz = dtypeSize(vals.dtype());
    const char* off = static_cast<const char*>(vals.raw());
    const char* on = off + esz;
    fillElements(y.raw(), y.numel(), off, esz);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= ind.dim((int)d);
    for (int64_t d = axis; d < r; ++d) inner *= ind.dim((int)d);
    char* dst = static_cast<char*>(y.raw());
    bool intIdx = isIndexType(ind.dtype());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t t = o * inner + i;
        int64_t v = intIdx ? indexAt(ind, t) : (int64_t)ind.valueAsDouble(t);
        if (v < 0) v += depth;
        if (v < 0 || v >= depth) continue;
        std::memcpy(dst + (size_t)((o * depth + v) * inner + i) * esz, on, esz);
      }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- DepthToSpace / SpaceToDepth (1..21)
Result<std::unique_ptr<Kernel>> createDepthToSpace(const KernelInit& init) {
  AttrReader a(init);
  int64_t bs = a.i("blocksize", 0);
  std::string mode = init.opset >= 11 ? a.s("mode", "DCR") : "DCR";
  if (!a.ok()) return a.status();
  if (bs < 1) return kernelError(StatusCode::InvalidModel, "blocksize must be >= 1, got " + std::to_string(bs));
  if (mode != "DCR" && mode != "CRD")
    return kernelError(StatusCode::Unsupported, "mode '" + mode + "' is not supported");
  bool crd = mode == "CRD";
  return makeKernel([node = nodeTag(init.node), bs, crd](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    if (x.rank() != 4 || x.dim(1) % (bs * bs) != 0)
      return runError(node, StatusCode::InvalidArgument,
                       "input " + shapeToString(x.shape()) + " must be NCHW with C divisible by blocksize^2 = " +
                           std::to_string(bs * bs));
    int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), c = C / (bs * bs);
    Tensor t;
    if (crd) {
      t = transposeTensor(x.reshaped({N, c, bs, bs, H, W}), {0, 1, 4, 2, 5, 3}, &ctx);
    } else {
      t = transposeTensor(x.reshaped({N, bs, bs, c, H, W}), {0, 3, 4, 1, 5, 2}, &ctx);
    }
    ctx.outputs[0] = t.reshaped({N, c, H * bs, W * bs});
    return Status::ok();
  });
}

Result<std::unique_ptr<Kernel>> createSpaceToDepth(const KernelInit& init) {
  AttrReader a(init);
  int64_t bs = a.i("blocksize", 0);
  if (!a.ok()) return a.status();
  if (bs < 1) return kernelError(StatusCode::InvalidModel, "blocksize must be >= 1, got " + std::to_string(bs));
  return makeKernel([node = nodeTag(init.node), bs](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    if (x.rank() != 4 || x.dim(2) % bs != 0 || x.dim(3) % bs != 0)
      return runError(node, StatusCode::InvalidArgument,
                       "input " + shapeToString(x.shape()) + " must be NCHW with H and W divisible by blocksize " +
                           std::to_string(bs));
    int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
    Tensor t = transposeTensor(x.reshaped({N, C, H / bs, bs, W / bs, bs}), {0, 3, 5, 1, 2, 4}, &ctx);
    ctx.outputs[0] = t.reshaped({N, C * bs * bs, H / bs, W / bs});
    return Status::ok();
  });
}

}  // namespace qs
