// Concat (1..21) and Split (2..21). Both move contiguous blocks: for each index over the axes before
// `axis`, each input (or output) owns one contiguous run of dim(axis) * inner elements.
#include "core/kernels/concat_split.h"

#include <algorithm>
#include <cstring>

#include "core/kernels/shape_ops.h"

namespace qs {

using namespace tensorops;

// ---------------------------------------------------------------- Concat (1..21)
Result<std::unique_ptr<Kernel>> createConcat(const KernelInit& init) {
  AttrReader a(init);
  // Concat-1 defaulted axis to 1; from opset 4 it is required.
  if (init.opset >= 4 && !a.has("axis"))
    return kernelError(StatusCode::InvalidModel, "attribute 'axis' is required");
  int64_t axisAttr = a.i("axis", 1);
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), axisAttr](KernelContext& ctx) -> Status {
    size_t n = ctx.inputCount();
    if (n == 0) return runError(node, StatusCode::InvalidArgument, "no inputs");
    QS_RETURN_IF_ERROR(needInputs(node, ctx, n));
    const Tensor& first = ctx.input(0);
    int64_t r = first.rank();
    int64_t axis = axisAttr;
    if (!normalizeAxis(axis, r))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(axisAttr) + " out of range for input " + shapeToString(first.shape()));
    Shape out = first.shape();
    out[(size_t)axis] = 0;
    for (size_t i = 0; i < n; ++i) {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != first.dtype())
        return runError(node, StatusCode::InvalidArgument,
                         "input " + std::to_string(i) + " has dtype " + dtypeName(t.dtype()) + ", input 0 has " +
                             dtypeName(first.dtype()));
      bool ok = t.rank() == r;
      for (int64_t d = 0; ok && d < r; ++d)
        if (d != axis && t.dim((int)d) != first.dim((int)d)) ok = false;
      if (!ok)
        return runError(node, StatusCode::InvalidArgument,
                         "input " + std::to_string(i) + " shape " + shapeToString(t.shape()) +
                             " does not match input 0 shape " + shapeToString(first.shape()) + " outside axis " +
                             std::to_string(axis));
      out[(size_t)axis] += t.dim((int)axis);
    }
    if (n == 1) {
      ctx.outputs[0] = first;
      return Status::ok();
    }
    size_t esz = dtypeSize(first.dtype());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= out[(size_t)d];
    for (int64_t d = axis + 1; d < r; ++d) inner *= out[(size_t)d];
    Tensor y(first.dtype(), out);
    std::vector<size_t> bytes(n), dstOff(n);
    size_t rowBytes = 0;
    for (size_t i = 0; i < n; ++i) {
      bytes[i] = (size_t)(ctx.input(i).dim((int)axis) * inner) * esz;
      dstOff[i] = rowBytes;
      rowBytes += bytes[i];
    }
    char* dst = static_cast<char*>(y.raw());
    ctx.parallelFor(outer, std::max<int64_t>(1, (int64_t)(65536 / std::max<size_t>(rowBytes, 1))),
                    [&](int64_t b, int64_t e) {
                      for (int64_t o = b; o < e; ++o) {
                        char* d = dst + (size_t)o * rowBytes;
                        for (size_t i = 0; i < n; ++i)
                          if (bytes[i])
                            std::memcpy(d + dstOff[i],
                                        static_cast<const char*>(ctx.input(i).raw()) + (size_t)o * bytes[i], bytes[i]);
                      }
                    });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Split (2..21)
Result<std::unique_ptr<Kernel>> createSplit(const KernelInit& init) {
  AttrReader a(init);
  int64_t axisAttr = a.i("axis", 0);
  bool splitFromInput = init.opset >= 13;
  std::vector<int64_t> splitAttr;
  bool hasSplitAttr = false;
  if (!splitFromInput) {
    hasSplitAttr = a.has("split");
    splitAttr = a.ints("split");
  }
  int64_t numOutputs = 0;
  if (init.opset >= 18 && a.has("num_outputs")) {
    numOutputs = a.i("num_outputs", 0);
    if (numOutputs < 1) a.fail("num_outputs must be >= 1, got " + std::to_string(numOutputs));
  }
  if (!a.ok()) return a.status();
  if (numOutputs > 0 && (int64_t)init.node.outputs.size() != numOutputs)
    return kernelError(StatusCode::InvalidModel,
                     "num_outputs " + std::to_string(numOutputs) + " differs from the node's " +
                         std::to_string(init.node.outputs.size()) + " outputs");
  bool opset18 = init.opset >= 18;
  return makeKernel([node = nodeTag(init.node), axisAttr, splitFromInput, splitAttr, hasSplitAttr,
                     opset18](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    int64_t r = x.rank();
    int64_t axis = axisAttr;
    if (!normalizeAxis(axis, r))
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(axisAttr) + " out of range for input " + shapeToString(x.shape()));
    int64_t dimA = x.dim((int)axis);
    size_t nOut = ctx.outputCount();
    if (nOut == 0) return Status::ok();
    std::vector<int64_t> split;
    bool have = false;
    if (splitFromInput) {
      if (ctx.hasInput(1)) {
        QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(1), "split", split));
        have = true;
      }
    } else if (hasSplitAttr) {
      split = splitAttr;
      have = true;
    }
    if (have) {
      if (split.size() != nOut)
        return runError(node, StatusCode::InvalidArgument,
                         "split " + shapeToString(split) + " has " + std::to_string(split.size()) +
                             " entries for " + std::to_string(nOut) + " outputs");
      int64_t sum = 0;
      for (int64_t v : split) {
        if (v < 0) return runError(node, StatusCode::InvalidArgument, "split " + shapeToString(split) + " is negative");
        sum += v;
      }
      if (sum != dimA)
        return runError(node, StatusCode::InvalidArgument,
                         "split " + shapeToString(split) + " sums to " + std::to_string(sum) + ", axis " +
                             std::to_string(axis) + " of input " + shapeToString(x.shape()) + " has " +
                             std::to_string(dimA));
    } else {
      int64_t n = (int64_t)nOut;
      if (opset18) {
        int64_t chunk = (dimA + n - 1) / n;
        for (int64_t i = 0; i < n; ++i) split.push_back(std::max<int64_t>(0, std::min(chunk, dimA - chunk * i)));
      } else {
        if (dimA % n != 0)
          return runError(node, StatusCode::InvalidArgument,
                           "axis " + std::to_string(axis) + " of input " + shapeToString(x.shape()) +
                               " cannot be split evenly into " + std::to_string(n) + " outputs");
        split.assign(nOut, dimA / n);
      }
    }
    size_t esz = dtypeSize(x.dtype());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim((int)d);
    for (int64_t d = axis + 1; d < r; ++d) inner *= x.dim((int)d);
    size_t rowBytes = (size_t)(dimA * inner) * esz;
    const char* src = static_cast<const char*>(x.raw());
    size_t off = 0;
    for (size_t i = 0; i < nOut; ++i) {
      Shape s = x.shape();
      s[(size_t)axis] = split[i];
      Tensor y(x.dtype(), s);
      size_t bytes = (size_t)(split[i] * inner) * esz;
      char* dst = static_cast<char*>(y.raw());
      if (bytes)
        ctx.parallelFor(outer, std::max<int64_t>(1, (int64_t)(65536 / std::max<size_t>(bytes, 1))),
                        [&](int64_t b, int64_t e) {
                          for (int64_t o = b; o < e; ++o)
                            std::memcpy(dst + (size_t)o * bytes, src + (size_t)o * rowBytes + off, bytes);
                        });
      off += bytes;
      ctx.outputs[i] = std::move(y);
    }
    return Status::ok();
  });
}

}  // namespace qs
