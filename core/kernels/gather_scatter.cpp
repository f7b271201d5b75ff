// Gather, GatherElements, GatherND, ScatterND, ScatterElements/Scatter. Index inputs are int32 or
// int64; negative indices count from the end; out-of-range indices fail naming the value.
// Gathers move bytes (any fixed-size dtype); scatters with a reduction need arithmetic.
#include "core/kernels/gather_scatter.h"

#include <algorithm>
#include <cstring>

#include "core/ir/half.h"
#include "core/kernels/shape_ops.h"

namespace qs {

using namespace tensorops;

namespace {

// Normalises every index of `idx` against `dim`; fails naming the first bad one.
Status normalizedIndices(const Node& node, const Tensor& idx, int64_t dim, const std::string& what,
                         std::vector<int64_t>& out) {
  if (!isIndexType(idx.dtype()))
    return runError(node, StatusCode::InvalidArgument, "indices must be int32 or int64, got " + dtypeName(idx.dtype()));
  int64_t n = idx.numel();
  out.resize((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = indexAt(idx, i);
    if (v < -dim || v >= dim)
      return runError(node, StatusCode::InvalidArgument,
                       "index " + std::to_string(v) + " at position " + std::to_string(i) + " is out of range for " +
                           what + " of size " + std::to_string(dim));
    out[(size_t)i] = v < 0 ? v + dim : v;
  }
  return Status::ok();
}

enum class Reduction { None, Add, Mul, Max, Min };

Result<Reduction> parseReduction(const KernelInit& init) {
  AttrReader a(init);
  std::string s = a.s("reduction", "none");
  if (!a.ok()) return a.status();
  if (s == "none") return Reduction::None;
  if (init.opset >= 16 && s == "add") return Reduction::Add;
  if (init.opset >= 16 && s == "mul") return Reduction::Mul;
  if (init.opset >= 18 && s == "max") return Reduction::Max;
  if (init.opset >= 18 && s == "min") return Reduction::Min;
  return kernelError(StatusCode::Unsupported,
                   "reduction '" + s + "' is not supported at opset " + std::to_string(init.opset));
}

template <class T>
inline T combine(T d, T s, Reduction r) {
  switch (r) {
    case Reduction::Add: return (T)(d + s);
    case Reduction::Mul: return (T)(d * s);
    case Reduction::Max: return std::max(d, s);
    case Reduction::Min: return std::min(d, s);
    default: return s;
  }
}

template <class T>
void reduceTyped(void* dst, const void* src, int64_t n, Reduction r) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i) d[i] = combine<T>(d[i], s[i], r);
}

template <bool IsBf16>
void reduceHalf(void* dst, const void* src, int64_t n, Reduction r) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    float a = IsBf16 ? bf16ToFloat(d[i]) : halfToFloat(d[i]);
    float b = IsBf16 ? bf16ToFloat(s[i]) : halfToFloat(s[i]);
    float c = combine<float>(a, b, r);
    d[i] = IsBf16 ? floatToBf16(c) : floatToHalf(c);
  }
}

using ReduceFn = void (*)(void*, const void*, int64_t, Reduction);

ReduceFn reduceFnFor(DType t) {
  switch (t) {
    case DType::Float: return &reduceTyped<float>;
    case DType::Double: return &reduceTyped<double>;
    case DType::Int64: return &reduceTyped<int64_t>;
    case DType::Int32: return &reduceTyped<int32_t>;
    case DType::Int16: return &reduceTyped<int16_t>;
    case DType::Int8: return &reduceTyped<int8_t>;
    case DType::UInt8: return &reduceTyped<uint8_t>;
    case DType::UInt16: return &reduceTyped<uint16_t>;
    case DType::UInt32: return &reduceTyped<uint32_t>;
    case DType::UInt64: return &reduceTyped<uint64_t>;
    case DType::Float16: return &reduceHalf<false>;
    case DType::BFloat16: return &reduceHalf<true>;
    default: return nullptr;
  }
}

const char* reductionName(Reduction r) {
  switch (r) {
    case Reduction::Add: return "add";
    case Reduction::Mul: return "mul";
    case Reduction::Max: return "max";
    case Reduction::Min: return "min";
    default: return "none";
  }
}

}  // namespace

// ---------------------------------------------------------------- Gather (1..21)
Result<std::unique_ptr<Kernel>> createGather(const KernelInit& init) {
  AttrReader a(init);
  int64_t axisAttr = a.i("axis", 0);
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), axisAttr](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 2));
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    int64_t axis = axisAttr;
    if (!normalizeAxis(axis, x.rank()))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(axisAttr) + " out of range for data " + shapeToString(x.shape()));
    int64_t dim = x.dim((int)axis);
    std::vector<int64_t> idx;
    QS_RETURN_IF_ERROR(normalizedIndices(node, ind, dim, "axis " + std::to_string(axis), idx));
    Shape out;
    for (int64_t d = 0; d < axis; ++d) out.push_back(x.dim((int)d));
    for (int64_t d : ind.shape()) out.push_back(d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) out.push_back(x.dim((int)d));
    Tensor y(x.dtype(), out);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim((int)d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim((int)d);
    int64_t n = (int64_t)idx.size();
    size_t esz = dtypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    int64_t total = outer * n;
    if (total == 0 || inner == 0) {
      ctx.outputs[0] = std::move(y);
      return Status::ok();
    }
    int64_t grain = std::max<int64_t>(1, 16384 / inner);
    if (inner == 1) {
      dispatchBySize(esz, [&]<class U>() {
        const U* s = reinterpret_cast<const U*>(src);
        U* d = reinterpret_cast<U*>(dst);
        ctx.parallelFor(total, 4096, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) d[t] = s[(t / n) * dim + idx[(size_t)(t % n)]];
        });
      });
    } else {
      size_t bytes = (size_t)inner * esz;
      ctx.parallelFor(total, grain, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t o = t / n, i = t % n;
          std::memcpy(dst + (size_t)t * bytes, src + (size_t)(o * dim + idx[(size_t)i]) * bytes, bytes);
        }
      });
    }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- GatherElements (11..21)
Result<std::unique_ptr<Kernel>> createGatherElements(const KernelInit& init) {
  AttrReader a(init);
  int64_t axisAttr = a.i("axis", 0);
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), axisAttr](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 2));
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    int64_t r = x.rank();
    int64_t axis = axisAttr;
    if (!normalizeAxis(axis, r))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(axisAttr) + " out of range for data " + shapeToString(x.shape()));
    bool ok = ind.rank() == r;
    for (int64_t d = 0; ok && d < r; ++d)
      if (d != axis && ind.dim((int)d) > x.dim((int)d)) ok = false;
    if (!ok)
      return runError(node, StatusCode::InvalidArgument,
                       "indices shape " + shapeToString(ind.shape()) + " does not fit data " + shapeToString(x.shape()));
    std::vector<int64_t> idx;
    QS_RETURN_IF_ERROR(normalizedIndices(node, ind, x.dim((int)axis), "axis " + std::to_string(axis), idx));
    Tensor y(x.dtype(), ind.shape());
    if (y.numel() == 0) {
      ctx.outputs[0] = std::move(y);
      return Status::ok();
    }
    std::vector<int64_t> xs = stridesOf(x.shape());
    const Shape& os = ind.shape();
    int64_t last = os[(size_t)r - 1];
    int64_t rows = y.numel() / last;
    int64_t axStride = xs[(size_t)axis];
    bool axisLast = axis == r - 1;
    bool done = dispatchBySize(dtypeSize(x.dtype()), [&]<class U>() {
      const U* s = x.data<U>();
      U* d = y.data<U>();
      ctx.parallelFor(rows, std::max<int64_t>(1, 4096 / last), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          int64_t rem = row, base = 0;
          for (int64_t k = r - 2; k >= 0; --k) {
            int64_t c = rem % os[(size_t)k];
            rem /= os[(size_t)k];
            if (k != axis) base += c * xs[(size_t)k];
          }
          const int64_t* ip = idx.data() + row * last;
          U* dp = d + row * last;
          if (axisLast) {
            for (int64_t j = 0; j < last; ++j) dp[j] = s[base + ip[j]];
          } else {
            for (int64_t j = 0; j < last; ++j) dp[j] = s[base + j + ip[j] * axStride];
          }
        }
      });
    });
    if (!done) return runError(node, StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- GatherND (11..21; batch_dims from 12)
Result<std::unique_ptr<Kernel>> createGatherND(const KernelInit& init) {
  AttrReader a(init);
  int64_t batchDims = init.opset >= 12 ? a.i("batch_dims", 0) : 0;
  if (!a.ok()) return a.status();
  if (batchDims < 0) return kernelError(StatusCode::InvalidModel, "batch_dims must be >= 0");
  return makeKernel([node = nodeTag(init.node), batchDims](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 2));
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    if (!isIndexType(ind.dtype()))
      return runError(node, StatusCode::InvalidArgument, "indices must be int32 or int64, got " + dtypeName(ind.dtype()));
    int64_t r = x.rank(), q = ind.rank(), b = batchDims;
    if (q < 1 || b >= std::min(r, q))
      return runError(node, StatusCode::InvalidArgument,
                       "batch_dims " + std::to_string(b) + " too large for data " + shapeToString(x.shape()) +
                           " and indices " + shapeToString(ind.shape()));
    int64_t k = ind.dim((int)q - 1);
    if (k < 1 || k > r - b)
      return runError(node, StatusCode::InvalidArgument,
                       "indices last dim " + std::to_string(k) + " out of range for data " + shapeToString(x.shape()) +
                           " with batch_dims " + std::to_string(b));
    for (int64_t d = 0; d < b; ++d)
      if (ind.dim((int)d) != x.dim((int)d))
        return runError(node, StatusCode::InvalidArgument,
                         "batch dims of indices " + shapeToString(ind.shape()) + " differ from data " +
                             shapeToString(x.shape()));
    Shape out(ind.shape().begin(), ind.shape().end() - 1);
    for (int64_t d = b + k; d < r; ++d) out.push_back(x.dim((int)d));
    Tensor y(x.dtype(), out);
    int64_t B = 1, M = 1, slice = 1, batchStride = 1;
    for (int64_t d = 0; d < b; ++d) B *= x.dim((int)d);
    for (int64_t d = b; d < q - 1; ++d) M *= ind.dim((int)d);
    for (int64_t d = b + k; d < r; ++d) slice *= x.dim((int)d);
    for (int64_t d = b; d < r; ++d) batchStride *= x.dim((int)d);
    std::vector<int64_t> xs = stridesOf(x.shape());
    // Resolve every tuple to an element offset first (validates all indices).
    std::vector<int64_t> offs((size_t)(B * M));
    for (int64_t t = 0; t < B * M; ++t) {
      int64_t off = (t / std::max<int64_t>(M, 1)) * batchStride;
      for (int64_t j = 0; j < k; ++j) {
        int64_t dim = x.dim((int)(b + j));
        int64_t v = indexAt(ind, t * k + j);
        if (v < -dim || v >= dim)
          return runError(node, StatusCode::InvalidArgument,
                           "index " + std::to_string(v) + " out of range for axis " + std::to_string(b + j) +
                               " of size " + std::to_string(dim));
        if (v < 0) v += dim;
        off += v * xs[(size_t)(b + j)];
      }
      offs[(size_t)t] = off;
    }
    size_t esz = dtypeSize(x.dtype());
    size_t bytes = (size_t)slice * esz;
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    if (bytes)
      ctx.parallelFor(B * M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, slice)), [&](int64_t bb, int64_t e) {
        for (int64_t t = bb; t < e; ++t)
          std::memcpy(dst + (size_t)t * bytes, src + (size_t)offs[(size_t)t] * esz, bytes);
      });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- ScatterND (11..21)
Result<std::unique_ptr<Kernel>> createScatterND(const KernelInit& init) {
  auto red = parseReduction(init);
  if (!red) return red.status();
  return makeKernel([node = nodeTag(init.node), red = *red](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 3));
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    if (!isIndexType(ind.dtype()))
      return runError(node, StatusCode::InvalidArgument, "indices must be int32 or int64, got " + dtypeName(ind.dtype()));
    if (upd.dtype() != x.dtype())
      return runError(node, StatusCode::InvalidArgument,
                       "updates dtype " + dtypeName(upd.dtype()) + " differs from data dtype " + dtypeName(x.dtype()));
    int64_t r = x.rank(), q = ind.rank();
    if (q < 1) return runError(node, StatusCode::InvalidArgument, "indices must have rank >= 1");
    int64_t k = ind.dim((int)q - 1);
    if (k < 0 || k > r)
      return runError(node, StatusCode::InvalidArgument,
                       "indices last dim " + std::to_string(k) + " exceeds data rank " + std::to_string(r));
    Shape want(ind.shape().begin(), ind.shape().end() - 1);
    for (int64_t d = k; d < r; ++d) want.push_back(x.dim((int)d));
    if (upd.shape() != want)
      return runError(node, StatusCode::InvalidArgument,
                       "updates shape " + shapeToString(upd.shape()) + " should be " + shapeToString(want));
    ReduceFn fn = nullptr;
    if (red != Reduction::None) {
      fn = reduceFnFor(x.dtype());
      if (!fn)
        return runError(node, StatusCode::Unsupported,
                         std::string("reduction '") + reductionName(red) + "' on dtype " + dtypeName(x.dtype()));
    }
    Tensor y = x.clone();
    int64_t slice = 1;
    for (int64_t d = k; d < r; ++d) slice *= x.dim((int)d);
    int64_t M = numelOf(Shape(ind.shape().begin(), ind.shape().end() - 1));
    std::vector<int64_t> xs = stridesOf(x.shape());
    size_t esz = dtypeSize(x.dtype());
    size_t bytes = (size_t)slice * esz;
    char* dst = static_cast<char*>(y.raw());
    const char* src = static_cast<const char*>(upd.raw());
    for (int64_t t = 0; t < M; ++t) {
      int64_t off = 0;
      for (int64_t j = 0; j < k; ++j) {
        int64_t dim = x.dim((int)j);
        int64_t v = indexAt(ind, t * k + j);
        if (v < -dim || v >= dim)
          return runError(node, StatusCode::InvalidArgument,
                           "index " + std::to_string(v) + " out of range for axis " + std::to_string(j) + " of size " +
                               std::to_string(dim));
        if (v < 0) v += dim;
        off += v * xs[(size_t)j];
      }
      if (!bytes) continue;
      if (fn) {
        fn(dst + (size_t)off * esz, src + (size_t)t * bytes, slice, red);
      } else {
        std::memcpy(dst + (size_t)off * esz, src + (size_t)t * bytes, bytes);
      }
    }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- ScatterElements (11..21) / Scatter (9..10)
Result<std::unique_ptr<Kernel>> createScatterElements(const KernelInit& init) {
  AttrReader a(init);
  int64_t axisAttr = a.i("axis", 0);
  if (!a.ok()) return a.status();
  Reduction red = Reduction::None;
  if (init.node.opType == "ScatterElements") {
    auto rr = parseReduction(init);
    if (!rr) return rr.status();
    red = *rr;
  }
  return makeKernel([node = nodeTag(init.node), axisAttr, red](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 3));
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    int64_t r = x.rank();
    int64_t axis = axisAttr;
    if (!normalizeAxis(axis, r))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(axisAttr) + " out of range for data " + shapeToString(x.shape()));
    if (upd.dtype() != x.dtype())
      return runError(node, StatusCode::InvalidArgument,
                       "updates dtype " + dtypeName(upd.dtype()) + " differs from data dtype " + dtypeName(x.dtype()));
    if (upd.shape() != ind.shape())
      return runError(node, StatusCode::InvalidArgument,
                       "updates shape " + shapeToString(upd.shape()) + " differs from indices shape " +
                           shapeToString(ind.shape()));
    bool ok = ind.rank() == r;
    for (int64_t d = 0; ok && d < r; ++d)
      if (d != axis && ind.dim((int)d) > x.dim((int)d)) ok = false;
    if (!ok)
      return runError(node, StatusCode::InvalidArgument,
                       "indices shape " + shapeToString(ind.shape()) + " does not fit data " + shapeToString(x.shape()));
    std::vector<int64_t> idx;
    QS_RETURN_IF_ERROR(normalizedIndices(node, ind, x.dim((int)axis), "axis " + std::to_string(axis), idx));
    ReduceFn fn = nullptr;
    if (red != Reduction::None) {
      fn = reduceFnFor(x.dtype());
      if (!fn)
        return runError(node, StatusCode::Unsupported,
                         std::string("reduction '") + reductionName(red) + "' on dtype " + dtypeName(x.dtype()));
    }
    Tensor y = x.clone();
    std::vector<int64_t> xs = stridesOf(x.shape());
    const Shape& is = ind.shape();
    size_t esz = dtypeSize(x.dtype());
    char* dst = static_cast<char*>(y.raw());
    const char* src = static_cast<const char*>(upd.raw());
    int64_t n = ind.numel();
    std::vector<int64_t> c((size_t)r, 0);
    for (int64_t t = 0; t < n; ++t) {
      int64_t off = 0;
      for (int64_t d = 0; d < r; ++d) off += (d == axis ? idx[(size_t)t] : c[(size_t)d]) * xs[(size_t)d];
      if (fn) {
        fn(dst + (size_t)off * esz, src + (size_t)t * esz, 1, red);
      } else {
        std::memcpy(dst + (size_t)off * esz, src + (size_t)t * esz, esz);
      }
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++c[(size_t)d] < is[(size_t)d]) break;
        c[(size_t)d] = 0;
      }
    }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

}  // namespace qs
