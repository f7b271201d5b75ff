// Trilu, EyeLike, Compress, ReverseSequence, Unique, MaxUnpool, LRN, MeanVarianceNormalization.
// Data-moving ops copy raw elements (by element size), so they serve every dtype alike; output
// sizes are bounded by the inputs (Compress, Unique, EyeLike) or checked (MaxUnpool).
#include "core/kernels/misc_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "core/ir/half.h"
#include "core/kernels/dtype_dispatch.h"
#include "core/kernels/shape_ops.h"

namespace qs {

using namespace tensorops;

namespace {

Status missingInputs(const KernelContext& ctx, size_t n, const char* names) {
  for (size_t i = 0; i < n; ++i)
    if (!ctx.hasInput(i)) return kernelError(StatusCode::InvalidArgument, std::string("inputs ") + names + " are required");
  return Status::ok();
}

// Copies `count` elements of `esz` bytes from src[srcIdx] to dst[dstIdx].
inline void copyElems(char* dst, int64_t dstIdx, const char* src, int64_t srcIdx, int64_t count, size_t esz) {
  std::memcpy(dst + (size_t)dstIdx * esz, src + (size_t)srcIdx * esz, (size_t)count * esz);
}

// ---------------------------------------------------------------- Trilu (14..21)
class TriluKernel : public Kernel {
 public:
  explicit TriluKernel(bool upper) : m_upper(upper) {}

  Status run(KernelContext& ctx) const override {
    QS_RETURN_IF_ERROR(missingInputs(ctx, 1, "input"));
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2)
      return kernelError(StatusCode::InvalidArgument, "input " + shapeToString(x.shape()) + " must have rank >= 2");
    int64_t k = 0;
    if (ctx.hasInput(1)) {
      const Tensor& kt = ctx.input(1);
      if (kt.dtype() != DType::Int64 || kt.numel() != 1)
        return kernelError(StatusCode::InvalidArgument, "k must be a one-element int64 tensor, got " +
                                                            dtypeName(kt.dtype()) + " " + shapeToString(kt.shape()));
      k = kt.data<int64_t>()[0];
    }
    if (dtypeSize(x.dtype()) == 0) return kernelError(StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
    const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
    // Beyond +-(rows + cols) every k acts the same; clamping keeps i + k from overflowing.
    k = std::clamp<int64_t>(k, -(rows + cols + 1), rows + cols + 1);
    Tensor y = x.clone();
    const size_t esz = dtypeSize(x.dtype());
    char* p = static_cast<char*>(y.raw());
    const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
    // Zero bytes are zero in every dtype here (IEEE +0, integer 0, false).
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i) {
        char* row = p + (size_t)((m * rows + i) * cols) * esz;
        if (m_upper) {  // keep j - i >= k
          const int64_t end = std::clamp<int64_t>(i + k, 0, cols);
          std::memset(row, 0, (size_t)end * esz);
        } else {  // keep j - i <= k
          const int64_t begin = std::clamp<int64_t>(i + k + 1, 0, cols);
          std::memset(row + (size_t)begin * esz, 0, (size_t)(cols - begin) * esz);
        }
      }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

 private:
  bool m_upper;
};

// ---------------------------------------------------------------- EyeLike (9..21)
bool eyeLikeDType(DType t) {
  switch (t) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16: case DType::Int8:
    case DType::Int16: case DType::Int32: case DType::Int64: case DType::UInt8: case DType::UInt16:
    case DType::UInt32: case DType::UInt64: case DType::Bool: return true;
    default: return false;
  }
}

// ---------------------------------------------------------------- Unique (11..21)
// Strict weak order over element values with NaN above everything (and all NaNs equal), so
// that sorting never sees an inconsistent comparison.
template <class K>
inline bool keyLess(K a, K b) {
  if constexpr (std::is_floating_point_v<K>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

struct UniqueResult {
  std::vector<int64_t> first;    // per output item: index of its first occurrence
  std::vector<int64_t> inverse;  // per input item: its output position
  std::vector<int64_t> counts;   // per output item
};

// n items of `len` values each; load(item, e) gives value e of item.
template <class K, class Load>
UniqueResult uniqueItems(int64_t n, int64_t len, bool sorted, Load load) {
  auto less = [&](int64_t a, int64_t b) {
    for (int64_t e = 0; e < len; ++e) {
      const K va = load(a, e), vb = load(b, e);
      if (keyLess(va, vb)) return true;
      if (keyLess(vb, va)) return false;
    }
    return false;
  };
  std::vector<int64_t> order((size_t)n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), less);
  // Groups of equal items in sorted order; the stable sort puts each group's first occurrence first.
  std::vector<int64_t> groupOf((size_t)n), groupFirst, groupCount;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t item = order[(size_t)s];
    if (s == 0 || less(order[(size_t)s - 1], item)) {
      groupFirst.push_back(item);
      groupCount.push_back(0);
    }
    groupOf[(size_t)item] = (int64_t)groupFirst.size() - 1;
    ++groupCount.back();
  }
  const int64_t U = (int64_t)groupFirst.size();
  std::vector<int64_t> pos((size_t)U);  // group -> output position
  std::iota(pos.begin(), pos.end(), 0);
  if (!sorted) {
    // Output in order of first occurrence.
    std::vector<int64_t> g((size_t)U);
    std::iota(g.begin(), g.end(), 0);
    std::sort(g.begin(), g.end(), [&](int64_t a, int64_t b) { return groupFirst[(size_t)a] < groupFirst[(size_t)b]; });
    for (int64_t i = 0; i < U; ++i) pos[(size_t)g[(size_t)i]] = i;
  }
  UniqueResult r;
  r.first.resize((size_t)U);
  r.counts.resize((size_t)U);
  r.inverse.resize((size_t)n);
  for (int64_t gi = 0; gi < U; ++gi) {
    r.first[(size_t)pos[(size_t)gi]] = groupFirst[(size_t)gi];
    r.counts[(size_t)pos[(size_t)gi]] = groupCount[(size_t)gi];
  }
  for (int64_t i = 0; i < n; ++i) r.inverse[(size_t)i] = pos[(size_t)groupOf[(size_t)i]];
  return r;
}

Tensor int64Vector(const std::vector<int64_t>& v) {
  Tensor t(DType::Int64, {(int64_t)v.size()});
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

// ---------------------------------------------------------------- MaxUnpool (9..21)
class MaxUnpoolKernel : public Kernel {
 public:
  MaxUnpoolKernel(std::vector<int64_t> kernel, std::vector<int64_t> strides, std::vector<int64_t> pads)
      : m_kernel(std::move(kernel)), m_strides(std::move(strides)), m_pads(std::move(pads)) {}

  Status run(KernelContext& ctx) const override {
    QS_RETURN_IF_ERROR(missingInputs(ctx, 2, "X and I"));
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const size_t nd = m_kernel.size();
    if ((size_t)x.rank() != nd + 2)
      return kernelError(StatusCode::InvalidArgument, "X " + shapeToString(x.shape()) + " must have rank " +
                                                          std::to_string(nd + 2) + " for kernel_shape " +
                                                          shapeToString(m_kernel));
    if (ind.dtype() != DType::Int64 || ind.shape() != x.shape())
      return kernelError(StatusCode::InvalidArgument, "I must be int64 of X's shape " + shapeToString(x.shape()) +
                                                          ", got " + dtypeName(ind.dtype()) + " " +
                                                          shapeToString(ind.shape()));
    if (dtypeSize(x.dtype()) == 0) return kernelError(StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
    Shape out{x.dim(0), x.dim(1)};
    for (size_t d = 0; d < nd; ++d) {
      const int64_t def = (x.dim((int)d + 2) - 1) * m_strides[d] - m_pads[d] - m_pads[d + nd] + m_kernel[d];
      out.push_back(std::max<int64_t>(def, 0));
    }
    // Indices address the whole unpooled tensor of the default shape, as MaxPool's Indices output
    // does. A larger output_shape (what the pooling's rounding lost) pads that tensor at the end
    // of each spatial dim: the ONNX reference and the node tests do so (ONNX Runtime instead
    // re-reads the indices in the larger shape).
    const Shape unpooled = out;
    if (ctx.hasInput(2)) {
      std::vector<int64_t> os;
      QS_RETURN_IF_ERROR(readShapeInput(Node{}, ctx.input(2), "output_shape", os));
      if (os.size() != nd + 2 || os[0] != x.dim(0) || os[1] != x.dim(1))
        return kernelError(StatusCode::InvalidArgument, "output_shape " + shapeToString(os) + " must be [" +
                                                            std::to_string(x.dim(0)) + ", " + std::to_string(x.dim(1)) +
                                                            ", " + std::to_string(nd) + " spatial dims]");
      for (size_t d = 0; d < nd; ++d)
        if (os[d + 2] < out[d + 2] || os[d + 2] > out[d + 2] + m_strides[d])
          return kernelError(StatusCode::InvalidArgument, "output_shape " + shapeToString(os) +
                                                              " must be within a stride above the unpooled shape " +
                                                              shapeToString(out));
      out = os;
    }
    if (checkedNumel(out, int64_t(1) << 32) < 0)
      return kernelError(StatusCode::InvalidArgument, "output shape " + shapeToString(out) + " has too many elements");
    Tensor y = Tensor::zeros(x.dtype(), out);
    const size_t esz = dtypeSize(x.dtype());
    const int64_t* ip = ind.data<int64_t>();
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    const int64_t limit = numelOf(unpooled);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (ip[i] < 0 || ip[i] >= limit)
        return kernelError(StatusCode::InvalidArgument, "I[" + std::to_string(i) + "] = " + std::to_string(ip[i]) +
                                                            " is out of range for the unpooled shape " +
                                                            shapeToString(unpooled));
      // Re-address from the unpooled shape into the (possibly larger) output shape.
      int64_t rem = ip[i], off = 0, stride = 1;
      for (size_t d = out.size(); d-- > 0;) {
        off += (rem % unpooled[d]) * stride;
        rem /= unpooled[d];
        stride *= out[d];
      }
      copyElems(dst, off, src, i, 1, esz);
    }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

 private:
  std::vector<int64_t> m_kernel, m_strides, m_pads;
};

// Reduction bookkeeping of MeanVarianceNormalization: for every element, the index of its group
// (the coordinates of the kept axes).
std::vector<int64_t> groupIndex(const Shape& s, const std::vector<char>& reduced, int64_t& groups) {
  groups = 1;
  for (size_t d = 0; d < s.size(); ++d)
    if (!reduced[d]) groups *= s[d];
  const int64_t n = numelOf(s);
  std::vector<int64_t> g((size_t)n);
  std::vector<int64_t> c(s.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t gi = 0;
    for (size_t d = 0; d < s.size(); ++d)
      if (!reduced[d]) gi = gi * s[d] + c[d];
    g[(size_t)i] = gi;
    for (size_t d = s.size(); d-- > 0;) {
      if (++c[d] < s[d]) break;
      c[d] = 0;
    }
  }
  return g;
}

}  // namespace

// ---------------------------------------------------------------- factories and simple kernels
Result<std::unique_ptr<Kernel>> createTrilu(const KernelInit& init) {
  AttrReader a(init);
  const int64_t upper = a.i("upper", 1);
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<TriluKernel>(upper != 0));
}

Result<std::unique_ptr<Kernel>> createEyeLike(const KernelInit& init) {
  AttrReader a(init);
  const bool haveDType = a.has("dtype");
  const int64_t dt = a.i("dtype", 0);
  const int64_t kAttr = a.i("k", 0);
  if (!a.ok()) return a.status();
  if (haveDType && !eyeLikeDType((DType)dt))
    return kernelError(StatusCode::Unsupported, "dtype " + std::to_string(dt) + " is not a numeric or bool type");
  return makeKernel([haveDType, dt, kAttr](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(missingInputs(ctx, 1, "input"));
    const Tensor& x = ctx.input(0);
    if (x.rank() != 2) return kernelError(StatusCode::InvalidArgument, "input " + shapeToString(x.shape()) + " must be 2-D");
    const DType outType = haveDType ? (DType)dt : x.dtype();
    if (!eyeLikeDType(outType)) return kernelError(StatusCode::Unsupported, "dtype " + dtypeName(outType));
    Tensor y = Tensor::zeros(outType, x.shape());
    const int64_t rows = x.dim(0), cols = x.dim(1);
    const size_t esz = dtypeSize(outType);
    char one[8];
    (void)writeScalar(outType, 1.0, one);
    // Rows whose diagonal column i + k lies in [0, cols); k clamped so i + k cannot overflow.
    const int64_t k = std::clamp<int64_t>(kAttr, -rows - 1, cols + 1);
    for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i)
      std::memcpy(static_cast<char*>(y.raw()) + (size_t)(i * cols + i + k) * esz, one, esz);
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

Result<std::unique_ptr<Kernel>> createCompress(const KernelInit& init) {
  AttrReader a(init);
  const bool haveAxis = a.has("axis");
  const int64_t axisAttr = a.i("axis", 0);
  if (!a.ok()) return a.status();
  return makeKernel([haveAxis, axisAttr](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(missingInputs(ctx, 2, "input and condition"));
    const Tensor& x = ctx.input(0);
    const Tensor& cond = ctx.input(1);
    if (cond.dtype() != DType::Bool || cond.rank() != 1)
      return kernelError(StatusCode::InvalidArgument, "condition must be a 1-D bool tensor, got " +
                                                          dtypeName(cond.dtype()) + " " + shapeToString(cond.shape()));
    if (dtypeSize(x.dtype()) == 0) return kernelError(StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
    int64_t axis = axisAttr;
    if (haveAxis && !normalizeAxis(axis, x.rank()))
      return kernelError(StatusCode::InvalidArgument,
                         "axis " + std::to_string(axisAttr) + " is out of range for input " + shapeToString(x.shape()));
    // Without an axis the input is taken flat.
    const int64_t len = haveAxis ? x.dim((int)axis) : x.numel();
    if (cond.numel() > len)
      return kernelError(StatusCode::InvalidArgument,
                         "condition has " + std::to_string(cond.numel()) + " entries, more than the " +
                             std::to_string(len) + (haveAxis ? " of axis " + std::to_string(axis) : std::string(" elements")) +
                             " of input " + shapeToString(x.shape()));
    const uint8_t* cp = cond.data<uint8_t>();
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < cond.numel(); ++i)
      if (cp[i]) keep.push_back(i);
    const size_t esz = dtypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw());
    if (!haveAxis) {
      Tensor y(x.dtype(), {(int64_t)keep.size()});
      for (size_t j = 0; j < keep.size(); ++j) copyElems(static_cast<char*>(y.raw()), (int64_t)j, src, keep[j], 1, esz);
      ctx.outputs[0] = std::move(y);
      return Status::ok();
    }
    Shape os = x.shape();
    os[(size_t)axis] = (int64_t)keep.size();
    Tensor y(x.dtype(), os);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim((int)d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim((int)d);
    const int64_t K = (int64_t)keep.size();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < K; ++j)
        copyElems(static_cast<char*>(y.raw()), (o * K + j) * inner, src, (o * len + keep[(size_t)j]) * inner, inner, esz);
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

Result<std::unique_ptr<Kernel>> createReverseSequence(const KernelInit& init) {
  AttrReader a(init);
  const int64_t batchAxis = a.i("batch_axis", 1), timeAxis = a.i("time_axis", 0);
  if (!a.ok()) return a.status();
  if ((batchAxis != 0 && batchAxis != 1) || (timeAxis != 0 && timeAxis != 1) || batchAxis == timeAxis)
    return kernelError(StatusCode::InvalidModel, "batch_axis " + std::to_string(batchAxis) + " and time_axis " +
                                                     std::to_string(timeAxis) + " must be 0 and 1 in some order");
  return makeKernel([batchAxis](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(missingInputs(ctx, 2, "input and sequence_lens"));
    const Tensor& x = ctx.input(0);
    const Tensor& lens = ctx.input(1);
    if (x.rank() < 2)
      return kernelError(StatusCode::InvalidArgument, "input " + shapeToString(x.shape()) + " must have rank >= 2");
    if (dtypeSize(x.dtype()) == 0) return kernelError(StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
    const int64_t B = x.dim((int)batchAxis), T = x.dim(1 - (int)batchAxis);
    if (!isIndexType(lens.dtype()) || lens.rank() != 1 || lens.dim(0) != B)
      return kernelError(StatusCode::InvalidArgument, "sequence_lens must be int64 [" + std::to_string(B) + "], got " +
                                                          dtypeName(lens.dtype()) + " " + shapeToString(lens.shape()));
    for (int64_t b = 0; b < B; ++b)
      if (indexAt(lens, b) < 0 || indexAt(lens, b) > T)
        return kernelError(StatusCode::InvalidArgument, "sequence_lens[" + std::to_string(b) + "] = " +
                                                            std::to_string(indexAt(lens, b)) + " is outside [0, " +
                                                            std::to_string(T) + "]");
    const int64_t inner = B * T == 0 ? 0 : x.numel() / (B * T);
    Tensor y(x.dtype(), x.shape());
    const size_t esz = dtypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    auto at = [&](int64_t b, int64_t t) { return (batchAxis == 0 ? b * T + t : t * B + b) * inner; };
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = indexAt(lens, b);
      for (int64_t t = 0; t < T; ++t) copyElems(dst, at(b, t), src, at(b, t < len ? len - 1 - t : t), inner, esz);
    }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

Result<std::unique_ptr<Kernel>> createUnique(const KernelInit& init) {
  AttrReader a(init);
  const bool haveAxis = a.has("axis");
  const int64_t axisAttr = a.i("axis", 0);
  const bool sorted = a.i("sorted", 1) != 0;
  if (!a.ok()) return a.status();
  return makeKernel([haveAxis, axisAttr, sorted](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(missingInputs(ctx, 1, "X"));
    const Tensor& x = ctx.input(0);
    int64_t axis = axisAttr;
    if (haveAxis && !normalizeAxis(axis, x.rank()))
      return kernelError(StatusCode::InvalidArgument,
                         "axis " + std::to_string(axisAttr) + " is out of range for input " + shapeToString(x.shape()));
    // Items: elements of the flat input, or slices along the axis (compared as rows, numpy's order).
    int64_t n = x.numel(), outer = 1, inner = 1;
    if (haveAxis) {
      n = x.dim((int)axis);
      for (int64_t d = 0; d < axis; ++d) outer *= x.dim((int)d);
      for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim((int)d);
    }
    const int64_t len = outer * inner;
    auto srcIndex = [=](int64_t item, int64_t e) { return ((e / inner) * n + item) * inner + e % inner; };
    UniqueResult r;
    bool ok = true;
    const DType t = x.dtype();
    if (t == DType::Float16 || t == DType::BFloat16) {
      const uint16_t* p = x.data<uint16_t>();
      const bool bf = t == DType::BFloat16;
      r = uniqueItems<float>(n, len, sorted, [&](int64_t i, int64_t e) {
        const uint16_t v = p[srcIndex(i, e)];
        return bf ? bf16ToFloat(v) : halfToFloat(v);
      });
    } else {
      auto run = [&]<class T>() {
        const T* p = x.data<T>();
        r = uniqueItems<T>(n, len, sorted, [&](int64_t i, int64_t e) { return p[srcIndex(i, e)]; });
      };
      switch (t) {
        case DType::Float: run.template operator()<float>(); break;
        case DType::Double: run.template operator()<double>(); break;
        case DType::Int64: run.template operator()<int64_t>(); break;
        case DType::Int32: run.template operator()<int32_t>(); break;
        case DType::Int16: run.template operator()<int16_t>(); break;
        case DType::Int8: run.template operator()<int8_t>(); break;
        case DType::UInt8: case DType::Bool: run.template operator()<uint8_t>(); break;
        case DType::UInt16: run.template operator()<uint16_t>(); break;
        case DType::UInt32: run.template operator()<uint32_t>(); break;
        case DType::UInt64: run.template operator()<uint64_t>(); break;
        default: ok = false;
      }
    }
    if (!ok) return kernelError(StatusCode::Unsupported, "dtype " + dtypeName(t));
    const int64_t U = (int64_t)r.first.size();
    Shape ys = haveAxis ? x.shape() : Shape{U};
    if (haveAxis) ys[(size_t)axis] = U;
    Tensor y(t, ys);
    const size_t esz = dtypeSize(t);
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t u = 0; u < U; ++u)
        copyElems(dst, (o * U + u) * inner, src, (o * n + r.first[(size_t)u]) * inner, inner, esz);
    ctx.outputs[0] = std::move(y);
    if (ctx.outputCount() > 1) ctx.outputs[1] = int64Vector(r.first);
    if (ctx.outputCount() > 2) ctx.outputs[2] = int64Vector(r.inverse);
    if (ctx.outputCount() > 3) ctx.outputs[3] = int64Vector(r.counts);
    return Status::ok();
  });
}

Result<std::unique_ptr<Kernel>> createMaxUnpool(const KernelInit& init) {
  AttrReader a(init);
  if (!a.has("kernel_shape")) return kernelError(StatusCode::InvalidModel, "attribute 'kernel_shape' is required");
  std::vector<int64_t> kernel = a.ints("kernel_shape");
  std::vector<int64_t> strides = a.ints("strides", std::vector<int64_t>(kernel.size(), 1));
  std::vector<int64_t> pads = a.ints("pads", std::vector<int64_t>(kernel.size() * 2, 0));
  if (!a.ok()) return a.status();
  if (kernel.empty() || strides.size() != kernel.size() || pads.size() != 2 * kernel.size())
    return kernelError(StatusCode::InvalidModel, "kernel_shape " + shapeToString(kernel) + ", strides " +
                                                     shapeToString(strides) + " and pads " + shapeToString(pads) +
                                                     " have inconsistent lengths");
  // Bounded so that the output size arithmetic cannot overflow.
  constexpr int64_t kMax = int64_t(1) << 20;
  for (size_t d = 0; d < kernel.size(); ++d)
    if (kernel[d] < 1 || kernel[d] > kMax || strides[d] < 1 || strides[d] > kMax || pads[d] < 0 || pads[d] > kMax ||
        pads[d + kernel.size()] < 0 || pads[d + kernel.size()] > kMax)
      return kernelError(StatusCode::InvalidModel, "kernel_shape " + shapeToString(kernel) + ", strides " +
                                                       shapeToString(strides) + " or pads " + shapeToString(pads) +
                                                       " out of range");
  return std::unique_ptr<Kernel>(std::make_unique<MaxUnpoolKernel>(kernel, strides, pads));
}

Result<std::unique_ptr<Kernel>> createLrn(const KernelInit& init) {
  AttrReader a(init);
  if (!a.has("size")) return kernelError(StatusCode::InvalidModel, "attribute 'size' is required");
  const int64_t size = a.i("size", 1);
  const float alpha = a.f("alpha", 1e-4f), beta = a.f("beta", 0.75f), bias = a.f("bias", 1.f);
  if (!a.ok()) return a.status();
  if (size < 1 || size > 65536)
    return kernelError(StatusCode::InvalidModel, "size " + std::to_string(size) + " must be in [1, 65536]");
  return makeKernel([size, alpha, beta, bias](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(missingInputs(ctx, 1, "X"));
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2) return kernelError(StatusCode::InvalidArgument, "X " + shapeToString(x.shape()) + " must have rank >= 2");
    Tensor y(x.dtype(), x.shape());
    const int64_t N = x.dim(0), C = x.dim(1), S = N * C == 0 ? 0 : x.numel() / (N * C);
    // Channel window [c - floor((size-1)/2), c + ceil((size-1)/2)], as the spec's formula.
    const int64_t before = (size - 1) / 2, after = size - 1 - before;
    bool ok = dispatchReal(x.dtype(), [&]<class T>() {
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      ctx.parallelFor(N * S, 1024, [&](int64_t b0, int64_t b1) {
        for (int64_t t = b0; t < b1; ++t) {
          const int64_t n = t / S, s = t % S;
          for (int64_t c = 0; c < C; ++c) {
            T sum = 0;
            for (int64_t j = std::max<int64_t>(0, c - before); j <= std::min<int64_t>(C - 1, c + after); ++j) {
              const T v = xp[(n * C + j) * S + s];
              sum += v * v;
            }
            const int64_t i = (n * C + c) * S + s;
            yp[i] = xp[i] / std::pow((T)bias + (T)alpha / (T)size * sum, (T)beta);
          }
        }
      });
    });
    if (!ok) return kernelError(StatusCode::Unsupported, "X dtype " + dtypeName(x.dtype()) + " (float or double)");
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

Result<std::unique_ptr<Kernel>> createMeanVarianceNormalization(const KernelInit& init) {
  AttrReader a(init);
  const std::vector<int64_t> axesAttr = a.ints("axes", {0, 2, 3});
  if (!a.ok()) return a.status();
  return makeKernel([axesAttr](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(missingInputs(ctx, 1, "X"));
    const Tensor& x = ctx.input(0);
    std::vector<char> reduced((size_t)x.rank(), 0);
    for (int64_t ax : axesAttr) {
      int64_t axis = ax;
      if (!normalizeAxis(axis, x.rank()) || reduced[(size_t)axis])
        return kernelError(StatusCode::InvalidArgument, "axes " + shapeToString(axesAttr) +
                                                            " must be distinct axes of X " + shapeToString(x.shape()));
      reduced[(size_t)axis] = 1;
    }
    Tensor y(x.dtype(), x.shape());
    int64_t groups = 0;
    const std::vector<int64_t> g = groupIndex(x.shape(), reduced, groups);
    bool ok = dispatchReal(x.dtype(), [&]<class T>() {
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      std::vector<double> sum((size_t)groups, 0.0), sq((size_t)groups, 0.0);
      std::vector<int64_t> cnt((size_t)groups, 0);
      for (int64_t i = 0; i < x.numel(); ++i) {
        sum[(size_t)g[(size_t)i]] += xp[i];
        ++cnt[(size_t)g[(size_t)i]];
      }
      for (int64_t k = 0; k < groups; ++k) sum[(size_t)k] /= (double)std::max<int64_t>(cnt[(size_t)k], 1);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double d = xp[i] - sum[(size_t)g[(size_t)i]];
        sq[(size_t)g[(size_t)i]] += d * d;
      }
      // The spec's function: (X - mean) / (sqrt(E[X^2] - mean^2) + 1e-9).
      for (int64_t k = 0; k < groups; ++k)
        sq[(size_t)k] = std::sqrt(sq[(size_t)k] / (double)std::max<int64_t>(cnt[(size_t)k], 1)) + 1e-9;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const size_t k = (size_t)g[(size_t)i];
        yp[i] = (T)((xp[i] - sum[k]) / sq[k]);
      }
    });
    if (!ok) return kernelError(StatusCode::Unsupported, "X dtype " + dtypeName(x.dtype()) + " (float or double)");
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

}  // namespace qs
