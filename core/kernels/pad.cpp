// Pad (2..21). Each output coordinate maps to an input coordinate per axis (or to "constant");
// negative pads crop. Rows (all axes but the last) are copied with memcpy for their in-range middle
// part; padded elements of the last axis use the per-axis index map.
#include "core/kernels/pad.h"

#include <algorithm>
#include <cstring>

#include "core/kernels/shape_ops.h"

namespace qs {

using namespace tensorops;

namespace {

enum class PadMode { Constant, Reflect, Edge, Wrap };

struct PadConfig {
  PadMode mode = PadMode::Constant;
  bool attrForm = false;  // opset < 11
  std::vector<int64_t> pads;
  float value = 0;
};

// Maps output coordinate o of an axis (input size n, begin pad b) to an input coordinate, or -1.
int64_t mapCoord(int64_t o, int64_t n, int64_t b, PadMode mode) {
  int64_t i = o - b;
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::Constant: return -1;
    case PadMode::Edge: return i < 0 ? 0 : n - 1;
    case PadMode::Wrap: return ((i % n) + n) % n;
    case PadMode::Reflect: {
      if (n == 1) return 0;
      int64_t period = 2 * (n - 1);
      int64_t m = ((i % period) + period) % period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

const char* modeName(PadMode m) {
  switch (m) {
    case PadMode::Constant: return "constant";
    case PadMode::Reflect: return "reflect";
    case PadMode::Edge: return "edge";
    default: return "wrap";
  }
}

Status runPad(const Node& node, KernelContext& ctx, const PadConfig& cfg) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  size_t esz = dtypeSize(x.dtype());
  std::vector<int64_t> pads;
  std::vector<int64_t> axes;
  bool hasAxes = false;
  alignas(16) char value[16] = {};
  if (cfg.attrForm) {
    pads = cfg.pads;
    if (!writeScalar(x.dtype(), cfg.value, value))
      return runError(node, StatusCode::Unsupported, "constant value for dtype " + dtypeName(x.dtype()));
  } else {
    QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(1), "pads", pads));
    if (ctx.hasInput(2) && ctx.input(2).numel() > 0) {
      const Tensor& cv = ctx.input(2);
      if (cv.dtype() != x.dtype())
        return runError(node, StatusCode::InvalidArgument,
                         "constant_value dtype " + dtypeName(cv.dtype()) + " differs from data dtype " +
                             dtypeName(x.dtype()));
      std::memcpy(value, cv.raw(), esz);
    }
    if (ctx.hasInput(3)) {
      QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(3), "axes", axes));
      hasAxes = true;
    }
  }
  std::vector<int64_t> begin((size_t)r, 0), end((size_t)r, 0);
  if (hasAxes) {
    if (pads.size() != 2 * axes.size())
      return runError(node, StatusCode::InvalidArgument,
                       "pads " + shapeToString(pads) + " should have 2 x " + std::to_string(axes.size()) + " entries");
    std::vector<bool> seen((size_t)r, false);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t ax = axes[i];
      if (!normalizeAxis(ax, r) || seen[(size_t)ax])
        return runError(node, StatusCode::InvalidArgument,
                         "axes " + shapeToString(axes) + " invalid for input " + shapeToString(x.shape()));
      seen[(size_t)ax] = true;
      begin[(size_t)ax] = pads[i];
      end[(size_t)ax] = pads[i + axes.size()];
    }
  } else {
    if ((int64_t)pads.size() != 2 * r)
      return runError(node, StatusCode::InvalidArgument,
                       "pads " + shapeToString(pads) + " should have " + std::to_string(2 * r) + " entries for input " +
                           shapeToString(x.shape()));
    for (int64_t d = 0; d < r; ++d) {
      begin[(size_t)d] = pads[(size_t)d];
      end[(size_t)d] = pads[(size_t)(d + r)];
    }
  }
  Shape out((size_t)r);
  for (int64_t d = 0; d < r; ++d) {
    out[(size_t)d] = x.dim((int)d) + begin[(size_t)d] + end[(size_t)d];
    if (out[(size_t)d] < 0)
      return runError(node, StatusCode::InvalidArgument,
                       "pads " + shapeToString(pads) + " crop more than input " + shapeToString(x.shape()) + " holds");
    if (cfg.mode != PadMode::Constant && x.dim((int)d) == 0 && out[(size_t)d] > 0)
      return runError(node, StatusCode::InvalidArgument,
                       std::string("mode '") + modeName(cfg.mode) + "' cannot pad empty axis " + std::to_string(d) +
                           " of input " + shapeToString(x.shape()));
  }
  QS_RETURN_IF_ERROR(checkOutputShape(out, "output shape"));
  Tensor y(x.dtype(), out);
  if (y.numel() == 0) {
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }
  if (r == 0) {
    std::memcpy(y.raw(), x.raw(), esz);
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }
  std::vector<std::vector<int64_t>> maps((size_t)r);
  for (int64_t d = 0; d < r; ++d) {
    auto& m = maps[(size_t)d];
    m.resize((size_t)out[(size_t)d]);
    for (int64_t o = 0; o < out[(size_t)d]; ++o)
      m[(size_t)o] = mapCoord(o, x.dim((int)d), begin[(size_t)d], cfg.mode);
  }
  std::vector<int64_t> xs = stridesOf(x.shape());
  int64_t last = out[(size_t)r - 1];
  int64_t rows = y.numel() / last;
  // The in-range run of the last axis: output [lo, hi) maps to input lo - b ...
  int64_t nIn = x.dim((int)r - 1), bL = begin[(size_t)r - 1];
  int64_t lo = std::max<int64_t>(0, bL), hi = std::min<int64_t>(last, bL + nIn);
  const auto& lastMap = maps[(size_t)r - 1];
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  ctx.parallelFor(rows, std::max<int64_t>(1, 16384 / last), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      char* dp = dst + (size_t)(row * last) * esz;
      int64_t rem = row, off = 0;
      bool constantRow = false;
      for (int64_t d = r - 2; d >= 0; --d) {
        int64_t c = rem % out[(size_t)d];
        rem /= out[(size_t)d];
        int64_t i = maps[(size_t)d][(size_t)c];
        if (i < 0) {
          constantRow = true;
          break;
        }
        off += i * xs[(size_t)d];
      }
      if (constantRow) {
        fillElements(dp, last, value, esz);
        continue;
      }
      const char* sp = src + (size_t)off * esz;
      if (hi > lo) std::memcpy(dp + (size_t)lo * esz, sp + (size_t)(lo - bL) * esz, (size_t)(hi - lo) * esz);
      for (int64_t o = 0; o < last; ++o) {
        if (o == lo && hi > lo) {
          o = hi - 1;
          continue;
        }
        int64_t i = lastMap[(size_t)o];
        std::memcpy(dp + (size_t)o * esz, i < 0 ? value : sp + (size_t)i * esz, esz);
      }
    }
  });
  ctx.outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Kernel>> createPad(const KernelInit& init) {
  AttrReader a(init);
  PadConfig cfg;
  std::string mode = a.s("mode", "constant");
  if (init.opset < 11) {
    cfg.attrForm = true;
    if (!a.has("pads")) return kernelError(StatusCode::InvalidModel, "attribute 'pads' is required");
    cfg.pads = a.ints("pads");
    cfg.value = a.f("value", 0.0f);
  }
  if (!a.ok()) return a.status();
  if (mode == "constant") {
    cfg.mode = PadMode::Constant;
  } else if (mode == "reflect") {
    cfg.mode = PadMode::Reflect;
  } else if (mode == "edge") {
    cfg.mode = PadMode::Edge;
  } else if (mode == "wrap") {
    cfg.mode = PadMode::Wrap;
  } else {
    return kernelError(StatusCode::Unsupported, "mode '" + mode + "' is not supported");
  }
  return makeKernel([node = nodeTag(init.node), cfg](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, cfg.attrForm ? 1 : 2));
    return runPad(node, ctx, cfg);
  });
}

}  // namespace qs
