// Slice (1..21). Starts/ends are clamped as the ONNX spec says (negative values count from the end;
// positive steps clamp to [0, dim], negative steps clamp starts to [0, dim-1] and ends to [-1, dim-1]).
// Trailing full axes and a step-1 axis become one contiguous run copied with memcpy.
#include "core/kernels/slice.h"

#include <algorithm>
#include <cstring>

#include "core/kernels/shape_ops.h"

namespace qs {

using namespace tensorops;

namespace {

struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
  bool hasAxes = false, hasSteps = false;
};

Status runSlice(const Node& node, KernelContext& ctx, const SliceArgs& args) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  const Shape& in = x.shape();
  size_t n = args.starts.size();
  if (args.ends.size() != n || (args.hasAxes && args.axes.size() != n) || (args.hasSteps && args.steps.size() != n))
    return runError(node, StatusCode::InvalidArgument,
                     "starts " + shapeToString(args.starts) + ", ends " + shapeToString(args.ends) + ", axes " +
                         shapeToString(args.axes) + " and steps " + shapeToString(args.steps) +
                         " must have the same length");
  std::vector<int64_t> start((size_t)r, 0), step((size_t)r, 1), count(in.begin(), in.end());
  std::vector<bool> seen((size_t)r, false);
  for (size_t i = 0; i < n; ++i) {
    int64_t ax = args.hasAxes ? args.axes[i] : (int64_t)i;
    if (!normalizeAxis(ax, r))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(args.hasAxes ? args.axes[i] : (int64_t)i) +
                           " out of range for input " + shapeToString(in));
    if (seen[(size_t)ax])
      return runError(node, StatusCode::InvalidArgument, "axes " + shapeToString(args.axes) + " repeat an axis");
    seen[(size_t)ax] = true;
    int64_t dim = in[(size_t)ax];
    int64_t st = args.hasSteps ? args.steps[i] : 1;
    if (st == 0) return runError(node, StatusCode::InvalidArgument, "steps " + shapeToString(args.steps) + " contain 0");
    int64_t s = args.starts[i], e = args.ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t c;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      c = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      c = s > e ? (s - e + (-st) - 1) / (-st) : 0;
    }
    start[(size_t)ax] = c > 0 ? s : 0;
    step[(size_t)ax] = st;
    count[(size_t)ax] = c;
  }
  Shape outShape(count.begin(), count.end());
  Tensor y(x.dtype(), outShape);
  if (y.numel() == 0) {
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }
  size_t esz = dtypeSize(x.dtype());
  std::vector<int64_t> inStride = stridesOf(in);
  int64_t base = 0;
  for (int64_t d = 0; d < r; ++d) base += start[(size_t)d] * inStride[(size_t)d];
  // Contiguous run: trailing full axes, plus one step-1 axis before them.
  int64_t k = r, block = 1;
  while (k > 0 && start[(size_t)k - 1] == 0 && step[(size_t)k - 1] == 1 && count[(size_t)k - 1] == in[(size_t)k - 1]) {
    block *= in[(size_t)k - 1];
    --k;
  }
  if (k > 0 && step[(size_t)k - 1] == 1) {
    block *= count[(size_t)k - 1];
    --k;
  }
  if (k == 0) {
    std::memcpy(y.raw(), static_cast<const char*>(x.raw()) + (size_t)base * esz, (size_t)block * esz);
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }
  // Inner loop over axis k-1 (strided), chunks of `block` elements; outer loop over axes [0, k-1).
  int64_t ia = k - 1;
  int64_t innerN = count[(size_t)ia];
  int64_t innerStride = step[(size_t)ia] * inStride[(size_t)ia];
  int64_t rows = 1;
  for (int64_t d = 0; d < ia; ++d) rows *= count[(size_t)d];
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  size_t blockBytes = (size_t)block * esz;
  int64_t rowElems = innerN * block;
  auto rowOffset = [&](int64_t row) {
    int64_t off = base;
    for (int64_t d = ia - 1; d >= 0; --d) {
      int64_t c = row % count[(size_t)d];
      row /= count[(size_t)d];
      off += c * step[(size_t)d] * inStride[(size_t)d];
    }
    return off;
  };
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rowElems));
  if (block == 1) {
    bool ok = dispatchBySize(esz, [&]<class U>() {
      const U* s = reinterpret_cast<const U*>(src);
      U* d = reinterpret_cast<U*>(dst);
      ctx.parallelFor(rows, grain, [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          const U* sp = s + rowOffset(row);
          U* dp = d + row * rowElems;
          for (int64_t j = 0; j < innerN; ++j) dp[j] = sp[j * innerStride];
        }
      });
    });
    if (!ok) return runError(node, StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
  } else {
    ctx.parallelFor(rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const char* sp = src + (size_t)rowOffset(row) * esz;
        char* dp = dst + (size_t)(row * rowElems) * esz;
        for (int64_t j = 0; j < innerN; ++j)
          std::memcpy(dp + (size_t)j * blockBytes, sp + (ptrdiff_t)(j * innerStride) * (ptrdiff_t)esz, blockBytes);
      }
    });
  }
  ctx.outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Kernel>> createSlice(const KernelInit& init) {
  if (init.opset < 10) {
    AttrReader a(init);
    SliceArgs args;
    if (!a.has("starts") || !a.has("ends"))
      return kernelError(StatusCode::InvalidModel, "attributes 'starts' and 'ends' are required");
    args.starts = a.ints("starts");
    args.ends = a.ints("ends");
    args.hasAxes = a.has("axes");
    args.axes = a.ints("axes");
    if (!a.ok()) return a.status();
    return makeKernel([node = nodeTag(init.node), args](KernelContext& ctx) -> Status {
      QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
      return runSlice(node, ctx, args);
    });
  }
  return makeKernel([node = nodeTag(init.node)](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 3));
    SliceArgs args;
    QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(1), "starts", args.starts));
    QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(2), "ends", args.ends));
    if (ctx.hasInput(3)) {
      QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(3), "axes", args.axes));
      args.hasAxes = true;
    }
    if (ctx.hasInput(4)) {
      QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(4), "steps", args.steps));
      args.hasSteps = true;
    }
    return runSlice(node, ctx, args);
  });
}

}  // namespace qs
