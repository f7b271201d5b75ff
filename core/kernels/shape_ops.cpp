// Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Identity, Dropout, Expand, ConstantOfShape, Constant.
// Reshape/Flatten/Squeeze/Unsqueeze/Identity and inference Dropout return zero-copy views.
#include "core/kernels/shape_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/ir/half.h"

namespace qs {
namespace tensorops {

bool writeScalar(DType dtype, double v, void* dst) {
  switch (dtype) {
    case DType::Float: *static_cast<float*>(dst) = (float)v; return true;
    case DType::Double: *static_cast<double*>(dst) = v; return true;
    case DType::Int64: *static_cast<int64_t*>(dst) = (int64_t)v; return true;
    case DType::Int32: *static_cast<int32_t*>(dst) = (int32_t)v; return true;
    case DType::Int16: *static_cast<int16_t*>(dst) = (int16_t)v; return true;
    case DType::Int8: *static_cast<int8_t*>(dst) = (int8_t)v; return true;
    case DType::UInt8: *static_cast<uint8_t*>(dst) = (uint8_t)v; return true;
    case DType::UInt16: *static_cast<uint16_t*>(dst) = (uint16_t)v; return true;
    case DType::UInt32: *static_cast<uint32_t*>(dst) = (uint32_t)v; return true;
    case DType::UInt64: *static_cast<uint64_t*>(dst) = (uint64_t)v; return true;
    case DType::Bool: *static_cast<bool*>(dst) = v != 0; return true;
    case DType::Float16: *static_cast<uint16_t*>(dst) = floatToHalf((float)v); return true;
    case DType::BFloat16: *static_cast<uint16_t*>(dst) = floatToBf16((float)v); return true;
    default: return false;
  }
}

Status checkOutputShape(const Shape& shape, const std::string& what) {
  if (checkedNumel(shape, (int64_t)1 << 40) < 0)
    return invalidArgument(what + " " + shapeToString(shape) + " is invalid (negative dim or too many elements)");
  return Status::ok();
}

void fillElements(void* dst, int64_t count, const void* value, size_t elemSize) {
  if (count <= 0) return;
  char* d = static_cast<char*>(dst);
  bool done = dispatchBySize(elemSize, [&]<class U>() {
    U v;
    std::memcpy(&v, value, sizeof(U));
    U* p = reinterpret_cast<U*>(d);
    for (int64_t i = 0; i < count; ++i) p[i] = v;
  });
  if (!done) {
    for (int64_t i = 0; i < count; ++i) std::memcpy(d + (size_t)i * elemSize, value, elemSize);
  }
}

Status needInputs(const Node& node, const KernelContext& ctx, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!ctx.hasInput(i))
      return runError(node, StatusCode::InvalidArgument, "required input " + std::to_string(i) + " is missing");
  return Status::ok();
}

Status readShapeInput(const Node& node, const Tensor& t, const char* what, std::vector<int64_t>& out) {
  if (!isIndexType(t.dtype()))
    return runError(node, StatusCode::InvalidArgument,
                     std::string(what) + " must be int64 or int32, got " + dtypeName(t.dtype()));
  if (t.rank() > 1)
    return runError(node, StatusCode::InvalidArgument,
                     std::string(what) + " must be 1-D, got shape " + shapeToString(t.shape()));
  out.clear();
  if (t.numel() > 0) out = t.toInt64Vector();  // (toInt64Vector memcpy's into a null pointer when empty)
  return Status::ok();
}

}  // namespace tensorops

using namespace tensorops;

namespace {

// Axes for Squeeze/Unsqueeze: from the attribute (< 13) or the optional input 1 (>= 13).
struct AxesSource {
  bool fromInput = false;
  bool haveAttr = false;
  std::vector<int64_t> attr;
};

Result<AxesSource> readAxesSource(const KernelInit& init) {
  AxesSource src;
  AttrReader a(init);
  if (init.opset < 13) {
    src.haveAttr = a.has("axes");
    src.attr = a.ints("axes");
  } else {
    src.fromInput = true;
  }
  if (!a.ok()) return a.status();
  return src;
}

Status resolveAxes(const Node& node, const AxesSource& src, const KernelContext& ctx, bool& have,
                   std::vector<int64_t>& axes) {
  if (src.fromInput) {
    have = ctx.hasInput(1);
    if (have) QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(1), "axes", axes));
  } else {
    have = src.haveAttr;
    axes = src.attr;
  }
  return Status::ok();
}

}  // namespace

// ---------------------------------------------------------------- Reshape (5..21; allowzero from 14)
Result<std::unique_ptr<Kernel>> createReshape(const KernelInit& init) {
  AttrReader a(init);
  bool allowZero = init.opset >= 14 && a.i("allowzero", 0) != 0;
  if (!a.ok()) return a.status();
  if (init.opset < 5) return kernelError(StatusCode::Unsupported, "Reshape before opset 5 is not supported");
  return makeKernel([node = nodeTag(init.node), allowZero](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 2));
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> req;
    QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(1), "shape", req));
    Shape out(req.size());
    int inferAt = -1;
    int64_t known = 1;
    for (size_t i = 0; i < req.size(); ++i) {
      int64_t d = req[i];
      if (d == -1) {
        if (inferAt >= 0)
          return runError(node, StatusCode::InvalidArgument, "shape " + shapeToString(req) + " has more than one -1");
        inferAt = (int)i;
        out[i] = 1;
        continue;
      }
      if (d == 0 && !allowZero) {
        if (i >= (size_t)x.rank())
          return runError(node, StatusCode::InvalidArgument,
                           "shape " + shapeToString(req) + " copies dim " + std::to_string(i) + " of input " +
                               shapeToString(x.shape()) + " which has no such dim");
        d = x.dim((int)i);
      }
      if (d < 0)
        return runError(node, StatusCode::InvalidArgument, "shape " + shapeToString(req) + " has a negative dim");
      out[i] = d;
      if (d != 0 && known > ((int64_t)1 << 62) / d)
        return runError(node, StatusCode::InvalidArgument, "shape " + shapeToString(req) + " is too large");
      known *= d;
    }
    if (inferAt >= 0) {
      if (known == 0 || x.numel() % known != 0)
        return runError(node, StatusCode::InvalidArgument,
                         "cannot infer -1 in shape " + shapeToString(req) + " for input " + shapeToString(x.shape()));
      out[(size_t)inferAt] = x.numel() / known;
    } else if (known != x.numel()) {
      return runError(node, StatusCode::InvalidArgument,
                       "cannot reshape input " + shapeToString(x.shape()) + " (" + std::to_string(x.numel()) +
                           " elements) to " + shapeToString(out));
    }
    ctx.outputs[0] = x.reshaped(std::move(out));
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Flatten (1..21)
Result<std::unique_ptr<Kernel>> createFlatten(const KernelInit& init) {
  AttrReader a(init);
  int64_t axisAttr = a.i("axis", 1);
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), axisAttr](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    int64_t axis = axisAttr;
    int64_t r = x.rank();
    if (axis < 0) axis += r;
    if (axis < 0 || axis > r)
      return runError(node, StatusCode::InvalidArgument,
                       "axis " + std::to_string(axisAttr) + " out of range for input " + shapeToString(x.shape()));
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x.dim((int)i);
    int64_t inner = 1;
    for (int64_t i = axis; i < r; ++i) inner *= x.dim((int)i);
    ctx.outputs[0] = x.reshaped({outer, inner});
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Squeeze (1..21)
Result<std::unique_ptr<Kernel>> createSqueeze(const KernelInit& init) {
  auto src = readAxesSource(init);
  if (!src) return src.status();
  return makeKernel([node = nodeTag(init.node), s = *src](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    bool have = false;
    std::vector<int64_t> axes;
    QS_RETURN_IF_ERROR(resolveAxes(node, s, ctx, have, axes));
    std::vector<bool> drop((size_t)x.rank(), false);
    if (!have) {
      for (int i = 0; i < x.rank(); ++i) drop[(size_t)i] = x.dim(i) == 1;
    } else {
      for (int64_t ax : axes) {
        int64_t a = ax;
        if (!normalizeAxis(a, x.rank()))
          return runError(node, StatusCode::InvalidArgument,
                           "axis " + std::to_string(ax) + " out of range for input " + shapeToString(x.shape()));
        if (x.dim((int)a) != 1)
          return runError(node, StatusCode::InvalidArgument,
                           "cannot squeeze axis " + std::to_string(ax) + " of input " + shapeToString(x.shape()) +
                               ": dim is not 1");
        drop[(size_t)a] = true;
      }
    }
    Shape out;
    for (int i = 0; i < x.rank(); ++i)
      if (!drop[(size_t)i]) out.push_back(x.dim(i));
    ctx.outputs[0] = x.reshaped(std::move(out));
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Unsqueeze (1..21)
Result<std::unique_ptr<Kernel>> createUnsqueeze(const KernelInit& init) {
  auto src = readAxesSource(init);
  if (!src) return src.status();
  if (!src->fromInput && !src->haveAttr)
    return kernelError(StatusCode::InvalidModel, "attribute 'axes' is required");
  return makeKernel([node = nodeTag(init.node), s = *src](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    bool have = false;
    std::vector<int64_t> axes;
    QS_RETURN_IF_ERROR(resolveAxes(node, s, ctx, have, axes));
    if (!have) return runError(node, StatusCode::InvalidArgument, "input 'axes' is required");
    int64_t outRank = x.rank() + (int64_t)axes.size();
    std::vector<bool> ins((size_t)outRank, false);
    for (int64_t ax : axes) {
      int64_t a = ax;
      if (!normalizeAxis(a, outRank))
        return runError(node, StatusCode::InvalidArgument,
                         "axis " + std::to_string(ax) + " out of range for output rank " + std::to_string(outRank));
      if (ins[(size_t)a])
        return runError(node, StatusCode::InvalidArgument, "axes " + shapeToString(axes) + " repeat an axis");
      ins[(size_t)a] = true;
    }
    Shape out((size_t)outRank);
    int j = 0;
    for (int64_t i = 0; i < outRank; ++i) out[(size_t)i] = ins[(size_t)i] ? 1 : x.dim(j++);
    ctx.outputs[0] = x.reshaped(std::move(out));
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Shape (1..21; start/end from 15)
Result<std::unique_ptr<Kernel>> createShape(const KernelInit& init) {
  AttrReader a(init);
  int64_t start = 0;
  int64_t end = INT64_MAX;
  bool hasEnd = false;
  if (init.opset >= 15) {
    start = a.i("start", 0);
    hasEnd = a.has("end");
    end = a.i("end", INT64_MAX);
  }
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), start, end, hasEnd](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    int64_t r = x.rank();
    auto clampIdx = [r](int64_t v) {
      if (v < 0) v += r;
      return std::clamp<int64_t>(v, 0, r);
    };
    int64_t s = clampIdx(start);
    int64_t e = hasEnd ? clampIdx(end) : r;
    int64_t n = std::max<int64_t>(0, e - s);
    Tensor out(DType::Int64, {n});
    for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = x.dim((int)(s + i));
    ctx.outputs[0] = std::move(out);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Size (1..21)
Result<std::unique_ptr<Kernel>> createSize(const KernelInit& init) {
  return makeKernel([node = nodeTag(init.node)](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    ctx.outputs[0] = Tensor::scalar<int64_t>(ctx.input(0).numel());
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Identity (1..21)
Result<std::unique_ptr<Kernel>> createIdentity(const KernelInit& init) {
  return makeKernel([node = nodeTag(init.node)](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    ctx.outputs[0] = ctx.input(0);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Dropout (1..21)
// 1..9: mask has the input's dtype; 10..11: bool mask; 12..21: ratio and training_mode inputs.
// Inference (the usual case) returns the input itself and an all-true mask. Training mode with a
// non-zero ratio follows the ONNX reference: numpy's legacy RandomState(seed).uniform(0, 1) draws
// (MT19937 seeded like std::mt19937, 53-bit doubles), keep = u >= ratio, y = x * keep / (1 - ratio);
// it is deterministic for a given `seed` attribute (default 0).
namespace {
template <class Load, class Store>
void dropoutTrain(int64_t n, double ratio, uint32_t seed, uint8_t* keep, Load load, Store store) {
  std::mt19937 rng(seed);
  float scale = (float)(1.0 / (1.0 - ratio));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t hi = rng() >> 5, lo = rng() >> 6;
    double u = (hi * 67108864.0 + lo) / 9007199254740992.0;
    keep[i] = u >= ratio;
    store(i, keep[i] ? load(i) * scale : 0.0f);
  }
}
}  // namespace

Result<std::unique_ptr<Kernel>> createDropout(const KernelInit& init) {
  AttrReader a(init);
  float ratioAttr = init.opset < 12 ? a.f("ratio", 0.5f) : 0.5f;
  if (init.opset < 7) (void)a.i("is_test", 0);
  int64_t seed = init.opset >= 12 ? a.i("seed", 0) : 0;
  if (!a.ok()) return a.status();
  (void)ratioAttr;  // before opset 12 Dropout is always inference here
  bool maskIsBool = init.opset >= 10;
  bool inputForm = init.opset >= 12;
  return makeKernel([node = nodeTag(init.node), maskIsBool, inputForm, seed](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    bool training = false;
    double ratio = 0.5;
    if (inputForm && ctx.hasInput(2)) {
      const Tensor& tm = ctx.input(2);
      if (tm.numel() != 1)
        return runError(node, StatusCode::InvalidArgument,
                        "training_mode must be a scalar, got shape " + shapeToString(tm.shape()));
      training = tm.valueAsDouble(0) != 0;
      if (ctx.hasInput(1)) {
        if (ctx.input(1).numel() != 1)
          return runError(node, StatusCode::InvalidArgument,
                          "ratio must be a scalar, got shape " + shapeToString(ctx.input(1).shape()));
        ratio = ctx.input(1).valueAsDouble(0);
      }
      if (training && (ratio < 0 || ratio >= 1))
        return runError(node, StatusCode::InvalidArgument, "ratio " + std::to_string(ratio) + " must be in [0, 1)");
    }
    if (training && ratio > 0) {
      DType t = x.dtype();
      if (t != DType::Float && t != DType::Double && t != DType::Float16 && t != DType::BFloat16)
        return runError(node, StatusCode::Unsupported, "training-mode Dropout on dtype " + dtypeName(t));
      Tensor y(t, x.shape());
      Tensor m(DType::Bool, x.shape());
      uint8_t* keep = m.data<uint8_t>();
      int64_t n = x.numel();
      uint32_t sd = (uint32_t)seed;
      if (t == DType::Float) {
        const float* p = x.data<float>();
        float* q = y.data<float>();
        dropoutTrain(n, ratio, sd, keep, [p](int64_t i) { return p[i]; }, [q](int64_t i, float v) { q[i] = v; });
      } else if (t == DType::Double) {
        const double* p = x.data<double>();
        double* q = y.data<double>();
        double scale = 1.0 / (1.0 - ratio);
        std::mt19937 rng(sd);
        for (int64_t i = 0; i < n; ++i) {
          uint32_t hi = rng() >> 5, lo = rng() >> 6;
          double u = (hi * 67108864.0 + lo) / 9007199254740992.0;
          keep[i] = u >= ratio;
          q[i] = keep[i] ? p[i] * scale : 0.0;
        }
      } else {
        const uint16_t* p = x.data<uint16_t>();
        uint16_t* q = y.data<uint16_t>();
        bool bf = t == DType::BFloat16;
        dropoutTrain(
            n, ratio, sd, keep, [p, bf](int64_t i) { return bf ? bf16ToFloat(p[i]) : halfToFloat(p[i]); },
            [q, bf](int64_t i, float v) { q[i] = bf ? floatToBf16(v) : floatToHalf(v); });
      }
      ctx.outputs[0] = std::move(y);
      if (ctx.outputCount() > 1) ctx.outputs[1] = std::move(m);
      return Status::ok();
    }
    ctx.outputs[0] = x;
    if (ctx.outputCount() > 1) {
      if (maskIsBool) {
        Tensor m(DType::Bool, x.shape());
        std::memset(m.raw(), 1, m.byteSize());
        ctx.outputs[1] = std::move(m);
      } else {
        Tensor m(x.dtype(), x.shape());
        char one[16] = {};
        if (!writeScalar(x.dtype(), 1.0, one))
          return runError(node, StatusCode::Unsupported, "mask of dtype " + dtypeName(x.dtype()));
        fillElements(m.raw(), m.numel(), one, dtypeSize(x.dtype()));
        ctx.outputs[1] = std::move(m);
      }
    }
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Expand (8..21)
namespace {
// Copies `x` broadcast to `outShape` (numpy rules; caller checked compatibility).
Tensor broadcastCopy(const KernelContext& ctx, const Tensor& x, const Shape& outShape) {
  size_t esz = dtypeSize(x.dtype());
  Tensor out(x.dtype(), outShape);
  int64_t total = out.numel();
  if (total == 0) return out;
  size_t R = outShape.size();
  Shape inShape(R, 1);
  for (size_t i = 0; i < (size_t)x.rank(); ++i) inShape[R - x.rank() + i] = x.dim((int)i);
  // Contiguous suffix where input dims equal output dims.
  size_t k = R;
  int64_t block = 1;
  while (k > 0 && inShape[k - 1] == outShape[k - 1]) {
    block *= outShape[k - 1];
    --k;
  }
  // Broadcast run before it (input dim 1).
  size_t m = k;
  int64_t rep = 1;
  while (m > 0 && inShape[m - 1] == 1) {
    rep *= outShape[m - 1];
    --m;
  }
  // Outer dims [0, m).
  int64_t outer = 1;
  for (size_t i = 0; i < m; ++i) outer *= outShape[i];
  std::vector<int64_t> inStrides = stridesOf(inShape);
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  size_t blockBytes = (size_t)block * esz;
  ctx.parallelFor(outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, block * rep)), [&](int64_t b, int64_t e) {
    std::vector<int64_t> coord(m, 0);
    for (int64_t o = b; o < e; ++o) {
      int64_t rem = o, inOff = 0;
      for (size_t d = m; d-- > 0;) {
        int64_t c = rem % outShape[d];
        rem /= outShape[d];
        if (inShape[d] != 1) inOff += c * inStrides[d];
      }
      const char* s = src + (size_t)inOff * esz;
      char* dp = dst + (size_t)(o * rep * block) * esz;
      if (block == 1) {
        fillElements(dp, rep, s, esz);
      } else {
        for (int64_t r = 0; r < rep; ++r) std::memcpy(dp + (size_t)r * blockBytes, s, blockBytes);
      }
    }
  });
  return out;
}
}  // namespace

Result<std::unique_ptr<Kernel>> createExpand(const KernelInit& init) {
  return makeKernel([node = nodeTag(init.node)](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 2));
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> req;
    QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(1), "shape", req));
    Shape out;
    if (!broadcastShapes(x.shape(), req, out))
      return runError(node, StatusCode::InvalidArgument,
                       "cannot expand input " + shapeToString(x.shape()) + " to shape " + shapeToString(req));
    QS_RETURN_IF_ERROR(checkOutputShape(out, "output shape"));
    if (out == x.shape()) {
      ctx.outputs[0] = x;
      return Status::ok();
    }
    ctx.outputs[0] = broadcastCopy(ctx, x, out);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- ConstantOfShape (9..21)
Result<std::unique_ptr<Kernel>> createConstantOfShape(const KernelInit& init) {
  AttrReader a(init);
  const Tensor* v = a.tensor("value");
  if (!a.ok()) return a.status();
  Tensor value;
  if (v) {
    if (v->numel() != 1)
      return kernelError(StatusCode::InvalidModel,
                       "attribute 'value' must hold one element, got shape " + shapeToString(v->shape()));
    if (!dtypeSupported(v->dtype()))
      return kernelError(StatusCode::Unsupported, "value of dtype " + dtypeName(v->dtype()));
    value = *v;
  } else {
    value = Tensor::scalar<float>(0.0f);
  }
  return makeKernel([node = nodeTag(init.node), value](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    std::vector<int64_t> shape;
    QS_RETURN_IF_ERROR(readShapeInput(node, ctx.input(0), "shape", shape));
    QS_RETURN_IF_ERROR(checkOutputShape(shape, "output shape"));
    Tensor out(value.dtype(), shape);
    fillElements(out.raw(), out.numel(), value.raw(), dtypeSize(value.dtype()));
    ctx.outputs[0] = std::move(out);
    return Status::ok();
  });
}

// ---------------------------------------------------------------- Constant (1..21)
Result<std::unique_ptr<Kernel>> createConstant(const KernelInit& init) {
  const Node& node = init.node;
  AttrReader a(init);
  Tensor value;
  int found = 0;
  if (a.has("value")) {
    const Tensor* t = a.tensor("value");
    if (t) value = *t;
    ++found;
  }
  if (a.has("value_float")) {
    value = Tensor::scalar<float>(a.f("value_float", 0));
    ++found;
  }
  if (a.has("value_floats")) {
    auto v = a.floats("value_floats");
    value = Tensor::fromVector<float>(v, {(int64_t)v.size()});
    ++found;
  }
  if (a.has("value_int")) {
    value = Tensor::scalar<int64_t>(a.i("value_int", 0));
    ++found;
  }
  if (a.has("value_ints")) {
    auto v = a.ints("value_ints");
    value = Tensor::fromVector<int64_t>(v, {(int64_t)v.size()});
    ++found;
  }
  if (!a.ok()) return a.status();
  for (const char* k : {"sparse_value", "value_string", "value_strings"})
    if (a.has(k))
      return runError(node, StatusCode::Unsupported, std::string("attribute '") + k + "' is not supported");
  if (found != 1)
    return runError(node, StatusCode::InvalidModel, "exactly one value attribute is required, got " +
                                                         std::to_string(found));
  if (!dtypeSupported(value.dtype()))
    return runError(node, StatusCode::Unsupported, "value of dtype " + dtypeName(value.dtype()));
  return makeKernel([value](KernelContext& ctx) -> Status {
    ctx.outputs[0] = value;
    return Status::ok();
  });
}

}  // namespace qs
