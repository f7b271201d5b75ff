// Resize and Upsample; see resize.h for the operators, opsets, modes and dtypes served.
//
// Planning (per run, cheap): each axis gets an output length, a scale and, unless it is the
// identity, a 1-D map from output coordinate to `taps` clamped source indices and weights.
// Nearest mode is one gather over the output (rows whose source row repeats are memcpy'd; a
// dedicated loop serves the very common 2x repeat of the last axis). Linear and cubic run as
// separable passes, one per non-identity axis, downsampling axes first; 2-tap passes
// (bilinear) have their own loops. tf_crop_and_resize's extrapolation is applied last.
#include "core/kernels/resize.h"

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

enum class RMode { Nearest, Linear, Cubic };
enum class Ctm { HalfPixel, HalfPixelSymmetric, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNN, TfCropAndResize };
enum class NMode { RoundPreferFloor, RoundPreferCeil, Floor, Ceil, Simple };
enum class Keep { Stretch, NotLarger, NotSmaller };
enum class Form { UpsampleAttr, XScales, Full };  // Upsample-7 / Upsample-9, Resize-10 / Resize-11+

struct Params {
  std::string op;  // "Resize" or "Upsample", for messages
  Form form = Form::Full;
  RMode mode = RMode::Nearest;
  Ctm ctm = Ctm::HalfPixel;
  NMode nmode = NMode::RoundPreferFloor;
  double cubicA = -0.75;
  bool excludeOutside = false;
  float extrapolation = 0.f;
  bool antialias = false;
  bool hasAxes = false;
  std::vector<int64_t> axes;
  Keep keep = Keep::Stretch;
  std::vector<float> attrScales;  // Upsample-7
};

struct AxisMap {
  int64_t inLen = 0, outLen = 0;
  int taps = 1;
  std::vector<int64_t> idx;       // outLen * taps, clamped to [0, inLen)
  std::vector<double> w;          // outLen * taps
  std::vector<uint8_t> outside;   // tf_crop_and_resize: 1 where the coordinate extrapolates
  bool anyOutside = false;
  bool identity = true;
};

// The per-axis geometry decided from scales or sizes.
struct AxisGeom {
  int64_t inLen;
  int64_t outLen;
  double scale;   // as the reference uses it (float scales widened, or out/in in double)
  double outW;    // "output_width" = scale * inLen, in the reference's precision
  double roiStart = 0, roiEnd = 1;
  float roiStartF = 0, roiEndF = 1;
};

double originalCoord(Ctm ctm, double x, const AxisGeom& g) {
  const double in = (double)g.inLen;
  switch (ctm) {
    case Ctm::HalfPixel: return (x + 0.5) / g.scale - 0.5;
    case Ctm::HalfPixelSymmetric: {
      double adjustment = (double)g.outLen / g.outW;
      double center = in / 2;
      double offset = center * (1 - adjustment);
      return offset + (x + 0.5) / g.scale - 0.5;
    }
    case Ctm::PytorchHalfPixel: return g.outW == 1 ? -0.5 : (x + 0.5) / g.scale - 0.5;
    case Ctm::AlignCorners: return g.outW == 1 ? 0.0 : x * (in - 1) / (g.outW - 1);
    case Ctm::Asymmetric: return x / g.scale;
    case Ctm::TfHalfPixelForNN: return (x + 0.5) / g.scale;
    case Ctm::TfCropAndResize: {
      // The reference subtracts the float32 roi values in float32, the rest in double.
      double diff = (double)(float)(g.roiEndF - g.roiStartF);
      double v = g.outW == 1 ? diff * (in - 1) / 2 : x * diff * (in - 1) / (g.outW - 1);
      return v + (double)(float)(g.roiStartF * (float)(g.inLen - 1));
    }
  }
  return x;
}

double cubicKernel(double x, double A) {
  x = std::fabs(x);
  double x2 = x * x, x3 = x2 * x;
  if (x <= 1) return (A + 2) * x3 - (A + 3) * x2 + 1;
  if (x < 2) return A * x3 - 5 * A * x2 + 8 * A * x - 4 * A;
  return 0.0;
}

AxisMap buildAxisMap(const Params& p, const AxisGeom& g) {
  AxisMap m;
  m.inLen = g.inLen;
  m.outLen = g.outLen;
  const int64_t L = g.inLen;
  const bool crop = p.ctm == Ctm::TfCropAndResize;
  if (crop) m.outside.assign((size_t)g.outLen, 0);
  auto clampIdx = [L](int64_t i) { return std::min<int64_t>(std::max<int64_t>(i, 0), L - 1); };

  if (p.mode == RMode::Nearest) {
    m.taps = 1;
    m.idx.resize((size_t)g.outLen);
    m.w.assign((size_t)g.outLen, 1.0);
    for (int64_t x = 0; x < g.outLen; ++x) {
      double xo;
      if (p.nmode == NMode::Simple) {
        xo = (double)((float)x / (float)g.scale);  // onnxruntime's opset-10 arithmetic (float)
      } else {
        xo = originalCoord(p.ctm, (double)x, g);
      }
      if (crop && (xo < 0 || xo > (double)(L - 1))) {
        m.outside[(size_t)x] = 1;
        m.anyOutside = true;
      }
      double f = std::floor(xo);
      double ratio = xo - f;
      int64_t i;
      if (ratio == 0) {
        i = (int64_t)f;
      } else {
        switch (p.nmode) {
          case NMode::RoundPreferFloor: i = (int64_t)f + (ratio > 0.5 ? 1 : 0); break;
          case NMode::RoundPreferCeil: i = (int64_t)f + (ratio >= 0.5 ? 1 : 0); break;
          case NMode::Floor: i = (int64_t)f; break;
          case NMode::Ceil: i = (int64_t)f + 1; break;
          case NMode::Simple: i = g.scale < 1 ? (int64_t)f + 1 : (int64_t)f; break;
          default: i = (int64_t)f; break;
        }
      }
      i = clampIdx(i);
      m.idx[(size_t)x] = i;
      if (i != x) m.identity = false;
    }
    if (g.outLen != g.inLen || m.anyOutside) m.identity = false;
    return m;
  }

  // Linear / cubic: neighbour i of coordinate xo is g0 + i with g0 = xo - ratio, ratio in (0, 1].
  const double s = std::min(g.scale, 1.0);
  int start;
  if (p.mode == RMode::Linear) {
    start = p.antialias ? (int)(std::floor(-1 / s) + 1) : 0;
  } else {
    start = p.antialias ? (int)(std::floor(-2 / s) + 1) : -1;
  }
  const int taps = 2 - 2 * start;
  m.taps = taps;
  m.idx.resize((size_t)(g.outLen * taps));
  m.w.resize((size_t)(g.outLen * taps));
  std::vector<double> c((size_t)taps);
  for (int64_t x = 0; x < g.outLen; ++x) {
    double xo = p.nmode == NMode::Simple && p.ctm == Ctm::Asymmetric ? (double)((float)x / (float)g.scale)
                                                                     : originalCoord(p.ctm, (double)x, g);
    if (crop && (xo < 0 || xo > (double)(L - 1))) {
      m.outside[(size_t)x] = 1;
      m.anyOutside = true;
    }
    double f = std::floor(xo);
    double ratio = xo - f;
    if (ratio == 0) ratio = 1;
    const int64_t g0 = (int64_t)std::llround(xo - ratio);
    double sum = 0;
    for (int k = 0; k < taps; ++k) {
      int i = start + k;
      double cv;
      if (p.mode == RMode::Linear) {
        cv = p.antialias ? std::clamp(1 - std::fabs((i - ratio) * s), 0.0, 1.0) : (k == 0 ? 1 - ratio : ratio);
      } else if (p.antialias) {
        cv = cubicKernel(s * (i - ratio), p.cubicA);
      } else {
        const double A = p.cubicA;
        switch (k) {
          case 0: cv = ((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A; break;
          case 1: cv = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1; break;
          case 2: cv = ((A + 2) * (1 - ratio) - (A + 3)) * (1 - ratio) * (1 - ratio) + 1; break;
          default: cv = ((A * ((1 - ratio) + 1) - 5 * A) * ((1 - ratio) + 1) + 8 * A) * ((1 - ratio) + 1) - 4 * A; break;
        }
      }
      c[(size_t)k] = cv;
      sum += cv;
    }
    if (p.antialias && sum != 0) {
      for (double& v : c) v /= sum;
    }
    if (p.excludeOutside) {
      double s2 = 0;
      for (int k = 0; k < taps; ++k) {
        int64_t i = g0 + start + k;
        if (i < 0 || i >= L) c[(size_t)k] = 0;
        s2 += c[(size_t)k];
      }
      if (s2 != 0) {
        for (double& v : c) v /= s2;
      }
    }
    double self = 0;
    bool other = false;
    for (int k = 0; k < taps; ++k) {
      int64_t i = clampIdx(g0 + start + k);
      m.idx[(size_t)(x * taps + k)] = i;
      m.w[(size_t)(x * taps + k)] = c[(size_t)k];
      if (i == x) {
        self += c[(size_t)k];
      } else if (c[(size_t)k] != 0) {
        other = true;
      }
    }
    if (other || self != 1) m.identity = false;
  }
  if (g.outLen != g.inLen || m.anyOutside) m.identity = false;
  return m;
}

std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int d = (int)s.size() - 2; d >= 0; --d) st[(size_t)d] = st[(size_t)d + 1] * s[(size_t)d + 1];
  return st;
}

// Nearest: out[..] = in[idx_0[x0], idx_1[x1], ...], by element size.
template <class E>
void nearestGather(const KernelContext& ctx, const E* in, E* out, const Shape& inShape, const Shape& outShape,
                   const std::vector<AxisMap>& maps) {
  const int r = (int)outShape.size();
  if (r == 0) {
    out[0] = in[0];
    return;
  }
  const std::vector<int64_t> inStr = stridesOf(inShape);
  std::vector<std::vector<int64_t>> off((size_t)r);
  for (int d = 0; d < r; ++d) {
    off[(size_t)d].resize((size_t)outShape[(size_t)d]);
    for (int64_t x = 0; x < outShape[(size_t)d]; ++x) off[(size_t)d][(size_t)x] = maps[(size_t)d].idx[(size_t)x] * inStr[(size_t)d];
  }
  const int64_t lastLen = outShape[(size_t)r - 1];
  const int64_t inLast = inShape[(size_t)r - 1];
  const int64_t rows = numelOf(outShape) / std::max<int64_t>(lastLen, 1);
  if (rows == 0 || lastLen == 0) return;
  const int64_t* lastIdx = maps[(size_t)r - 1].idx.data();
  bool repeat2 = lastLen == 2 * inLast;
  for (int64_t j = 0; repeat2 && j < lastLen; ++j) repeat2 = lastIdx[j] == j / 2;
  bool identityLast = lastLen == inLast;
  for (int64_t j = 0; identityLast && j < lastLen; ++j) identityLast = lastIdx[j] == j;
  int64_t grain = std::max<int64_t>(1, 16384 / lastLen);
  ctx.parallelFor(rows, grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> mi((size_t)std::max(r - 1, 0));
    int64_t rem = b;
    for (int d = r - 2; d >= 0; --d) {
      mi[(size_t)d] = rem % outShape[(size_t)d];
      rem /= outShape[(size_t)d];
    }
    int64_t prevBase = -1;
    const E* prevOut = nullptr;
    for (int64_t row = b; row < e; ++row) {
      int64_t base = 0;
      for (int d = 0; d < r - 1; ++d) base += off[(size_t)d][(size_t)mi[(size_t)d]];
      E* o = out + row * lastLen;
      const E* src = in + base;
      if (base == prevBase) {
        std::memcpy(o, prevOut, sizeof(E) * (size_t)lastLen);
      } else if (identityLast) {
        std::memcpy(o, src, sizeof(E) * (size_t)lastLen);
      } else if (repeat2) {
        for (int64_t j = 0; j < inLast; ++j) {
          E v = src[j];
          o[2 * j] = v;
          o[2 * j + 1] = v;
        }
      } else {
        for (int64_t j = 0; j < lastLen; ++j) o[j] = src[lastIdx[j]];
      }
      prevBase = base;
      prevOut = o;
      for (int d = r - 2; d >= 0; --d) {
        if (++mi[(size_t)d] < outShape[(size_t)d]) break;
        mi[(size_t)d] = 0;
      }
    }
  });
}

// One separable pass along an axis: in [O, Lin, I] -> out [O, Lout, I].
template <class C>
void interpPass(const KernelContext& ctx, const C* in, C* out, int64_t O, int64_t I, const AxisMap& m) {
  const int64_t Lin = m.inLen, Lout = m.outLen;
  const int taps = m.taps;
  std::vector<C> wv(m.w.size());
  for (size_t k = 0; k < m.w.size(); ++k) wv[k] = (C)m.w[k];
  const C* w = wv.data();
  const int64_t* idx = m.idx.data();
  if (I == 1) {
    int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(Lout * taps, 1));
    ctx.parallelFor(O, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const C* src = in + o * Lin;
        C* dst = out + o * Lout;
        if (taps == 2) {
          for (int64_t x = 0; x < Lout; ++x) dst[x] = w[2 * x] * src[idx[2 * x]] + w[2 * x + 1] * src[idx[2 * x + 1]];
        } else {
          for (int64_t x = 0; x < Lout; ++x) {
            C acc = 0;
            for (int k = 0; k < taps; ++k) acc += w[x * taps + k] * src[idx[x * taps + k]];
            dst[x] = acc;
          }
        }
      }
    });
    return;
  }
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(I * taps, 1));
  ctx.parallelFor(O * Lout, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / Lout, x = t % Lout;
      const C* base = in + o * Lin * I;
      C* dst = out + t * I;
      const C* wx = w + x * taps;
      const int64_t* ix = idx + x * taps;
      if (taps == 2) {
        const C* a = base + ix[0] * I;
        const C* c = base + ix[1] * I;
        const C w0 = wx[0], w1 = wx[1];
        if (w1 == 0) {
          for (int64_t i = 0; i < I; ++i) dst[i] = w0 * a[i];
        } else {
          for (int64_t i = 0; i < I; ++i) dst[i] = w0 * a[i] + w1 * c[i];
        }
      } else {
        const C* a = base + ix[0] * I;
        const C w0 = wx[0];
        for (int64_t i = 0; i < I; ++i) dst[i] = w0 * a[i];
        for (int k = 1; k < taps; ++k) {
          const C wk = wx[k];
          if (wk == 0) continue;
          const C* ck = base + ix[k] * I;
          for (int64_t i = 0; i < I; ++i) dst[i] += wk * ck[i];
        }
      }
    }
  });
}

// Runs the separable passes from `in` (shape inShape); the last pass writes `out` (outShape).
template <class C>
void interpolate(const KernelContext& ctx, const C* in, const Shape& inShape, C* out, const std::vector<AxisMap>& maps) {
  const int r = (int)inShape.size();
  // Pass order: the cheapest total (output size x taps per pass, gathers along the contiguous
  // last axis counted double), over all orders of the non-identity axes. Downsampling passes
  // tend to go first; a 2x bilinear upsample runs the gathering W pass on the smaller tensor.
  std::vector<int> order, perm;
  for (int d = 0; d < r; ++d) {
    if (!maps[(size_t)d].identity) perm.push_back(d);
  }
  double bestCost = -1;
  do {
    Shape s = inShape;
    double cost = 0;
    for (int d : perm) {
      double outN = (double)numelOf(s) / (double)s[(size_t)d] * (double)maps[(size_t)d].outLen;
      cost += outN * maps[(size_t)d].taps * (d == r - 1 ? 2.0 : 1.0);
      s[(size_t)d] = maps[(size_t)d].outLen;
    }
    if (bestCost < 0 || cost < bestCost) {
      bestCost = cost;
      order = perm;
    }
  } while (perm.size() <= 6 && std::next_permutation(perm.begin(), perm.end()));
  Shape cur = inShape;
  if (order.empty()) {
    std::memcpy(out, in, sizeof(C) * (size_t)numelOf(inShape));
    return;
  }
  std::unique_ptr<C[]> buf;  // intermediates, uninitialised
  const C* src = in;
  for (size_t n = 0; n < order.size(); ++n) {
    const int d = order[n];
    int64_t O = 1, I = 1;
    for (int k = 0; k < d; ++k) O *= cur[(size_t)k];
    for (int k = d + 1; k < r; ++k) I *= cur[(size_t)k];
    if (n + 1 == order.size()) {
      interpPass<C>(ctx, src, out, O, I, maps[(size_t)d]);
    } else {
      std::unique_ptr<C[]> next(new C[(size_t)(O * maps[(size_t)d].outLen * I)]);
      interpPass<C>(ctx, src, next.get(), O, I, maps[(size_t)d]);
      buf = std::move(next);  // the previous intermediate (src) is no longer needed
      src = buf.get();
    }
    cur[(size_t)d] = maps[(size_t)d].outLen;
  }
}

// Writes extrapolation_value wherever some axis's coordinate lies outside the input.
template <class T>
void applyExtrapolation(T* out, const Shape& outShape, const std::vector<AxisMap>& maps, T value) {
  const int r = (int)outShape.size();
  const int64_t lastLen = outShape[(size_t)r - 1];
  const int64_t rows = numelOf(outShape) / std::max<int64_t>(lastLen, 1);
  std::vector<int64_t> mi((size_t)r, 0);
  const std::vector<uint8_t>& lastOut = maps[(size_t)r - 1].outside;
  for (int64_t row = 0; row < rows; ++row) {
    bool rowOut = false;
    for (int d = 0; d < r - 1; ++d) {
      const auto& o = maps[(size_t)d].outside;
      if (!o.empty() && o[(size_t)mi[(size_t)d]]) rowOut = true;
    }
    T* p = out + row * lastLen;
    if (rowOut) {
      std::fill(p, p + lastLen, value);
    } else if (!lastOut.empty()) {
      for (int64_t j = 0; j < lastLen; ++j) {
        if (lastOut[(size_t)j]) p[j] = value;
      }
    }
    for (int d = r - 2; d >= 0; --d) {
      if (++mi[(size_t)d] < outShape[(size_t)d]) break;
      mi[(size_t)d] = 0;
    }
  }
}

template <class T, class C>
T fromCompute(C v) {
  if constexpr (std::is_same_v<T, C>) {
    return v;
  } else if constexpr (std::is_floating_point_v<T>) {
    return (T)v;
  } else {
    if (v != v) return T(0);
    if (v >= (C)std::numeric_limits<T>::max()) return std::numeric_limits<T>::max();
    if (v <= (C)std::numeric_limits<T>::lowest()) return std::numeric_limits<T>::lowest();
    return (T)v;  // truncation, like numpy's astype
  }
}

template <class T, class C>
void interpolateTyped(const KernelContext& ctx, const Tensor& x, Tensor& y, const std::vector<AxisMap>& maps) {
  const T* in = x.data<T>();
  T* out = y.data<T>();
  if constexpr (std::is_same_v<T, C>) {
    interpolate<C>(ctx, in, x.shape(), out, maps);
  } else {
    std::vector<C> tmp((size_t)x.numel()), r((size_t)y.numel());
    for (int64_t i = 0; i < x.numel(); ++i) tmp[(size_t)i] = (C)in[i];
    interpolate<C>(ctx, tmp.data(), x.shape(), r.data(), maps);
    for (size_t i = 0; i < r.size(); ++i) out[i] = fromCompute<T, C>(r[i]);
  }
}

template <class T>
T extrapolationAs(float v) {
  if constexpr (std::is_floating_point_v<T>) {
    return (T)v;
  } else {
    return fromCompute<T, double>((double)v);
  }
}

class ResizeKernel : public Kernel {
 public:
  explicit ResizeKernel(Params p) : m_p(std::move(p)) {}

  Status run(KernelContext& ctx) const override {
    const std::string& op = m_p.op;
    if (!ctx.hasInput(0)) return invalidArgument(op + ": missing input 'X'");
    const Tensor& x = ctx.input(0);
    const int64_t rank = x.rank();

    // Axes the scales / sizes refer to.
    std::vector<int64_t> axes;
    if (m_p.hasAxes) {
      std::vector<bool> seen((size_t)rank, false);
      for (int64_t a0 : m_p.axes) {
        int64_t a = a0;
        if (!normalizeAxis(a, rank) || seen[(size_t)a]) {
          return invalidArgument(op + ": axes attribute entry " + std::to_string(a0) +
                                 " is out of range or repeated for input of shape " + shapeToString(x.shape()));
        }
        seen[(size_t)a] = true;
        axes.push_back(a);
      }
    } else {
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    const size_t na = axes.size();

    // Scales or sizes.
    std::vector<float> scales;
    std::vector<int64_t> sizes;
    const Tensor* roiT = nullptr;
    if (m_p.form == Form::UpsampleAttr) {
      scales = m_p.attrScales;
    } else {
      const size_t si = m_p.form == Form::XScales ? 1 : 2;
      if (ctx.hasInput(si) && ctx.input(si).numel() > 0) {
        const Tensor& s = ctx.input(si);
        if (s.dtype() != DType::Float && s.dtype() != DType::Double && s.dtype() != DType::Float16) {
          return invalidArgument(op + ": 'scales' must be a float tensor, got " + dtypeName(s.dtype()));
        }
        for (int64_t i = 0; i < s.numel(); ++i) scales.push_back((float)s.valueAsDouble(i));
      }
      if (m_p.form == Form::Full) {
        if (ctx.hasInput(3) && ctx.input(3).numel() > 0) {
          const Tensor& s = ctx.input(3);
          if (s.dtype() != DType::Int64 && s.dtype() != DType::Int32) {
            return invalidArgument(op + ": 'sizes' must be an int64 tensor, got " + dtypeName(s.dtype()));
          }
          sizes = s.toInt64Vector();
        }
        if (ctx.hasInput(1) && ctx.input(1).numel() > 0) roiT = &ctx.input(1);
      }
    }
    if (!scales.empty() && !sizes.empty()) {
      return invalidArgument(op + ": only one of 'scales' and 'sizes' may be given");
    }
    if (scales.empty() && sizes.empty()) {
      return invalidArgument(op + ": one of 'scales' and 'sizes' must be given (non-empty)");
    }
    if (!scales.empty() && scales.size() != na) {
      return invalidArgument(op + ": 'scales' has " + std::to_string(scales.size()) + " values, expected " +
                             std::to_string(na) + " for input of shape " + shapeToString(x.shape()));
    }
    if (!sizes.empty() && sizes.size() != na) {
      return invalidArgument(op + ": 'sizes' has " + std::to_string(sizes.size()) + " values, expected " +
                             std::to_string(na) + " for input of shape " + shapeToString(x.shape()));
    }

    std::vector<AxisGeom> geom((size_t)rank);
    for (int64_t d = 0; d < rank; ++d) {
      AxisGeom& g = geom[(size_t)d];
      g.inLen = x.dim((int)d);
      g.outLen = g.inLen;
      g.scale = 1.0;
      g.outW = (double)g.inLen;
    }
    if (!scales.empty()) {
      for (size_t k = 0; k < na; ++k) {
        float s = scales[k];
        if (!(s > 0) || !std::isfinite(s)) {
          return invalidArgument(op + ": scale " + std::to_string(s) + " for axis " + std::to_string(axes[k]) +
                                 " must be positive and finite");
        }
        AxisGeom& g = geom[(size_t)axes[k]];
        g.scale = (double)s;
        g.outW = (double)(s * (float)g.inLen);  // float32 in the reference
        double o = std::floor((double)s * (double)g.inLen);
        if (o > 9.0e15) return invalidArgument(op + ": scale " + std::to_string(s) + " gives a too large output");
        g.outLen = (int64_t)o;
      }
    } else {
      for (size_t k = 0; k < na; ++k) {
        if (sizes[k] < 0) {
          return invalidArgument(op + ": negative size " + std::to_string(sizes[k]) + " for axis " +
                                 std::to_string(axes[k]));
        }
      }
      if (m_p.keep == Keep::Stretch) {
        for (size_t k = 0; k < na; ++k) {
          AxisGeom& g = geom[(size_t)axes[k]];
          g.outLen = sizes[k];
          g.scale = g.inLen > 0 ? (double)sizes[k] / (double)g.inLen : 1.0;
          g.outW = g.scale * (double)g.inLen;
        }
      } else {
        double s = m_p.keep == Keep::NotLarger ? std::numeric_limits<double>::infinity() : 0.0;
        for (size_t k = 0; k < na; ++k) {
          const AxisGeom& g = geom[(size_t)axes[k]];
          double sk = g.inLen > 0 ? (double)sizes[k] / (double)g.inLen : 1.0;
          s = m_p.keep == Keep::NotLarger ? std::min(s, sk) : std::max(s, sk);
        }
        for (size_t k = 0; k < na; ++k) {
          AxisGeom& g = geom[(size_t)axes[k]];
          g.scale = s;
          g.outLen = (int64_t)(s * (double)g.inLen + 0.5);
          g.outW = s * (double)g.inLen;
        }
      }
    }
    if (roiT) {
      if (roiT->numel() != (int64_t)(2 * na) && roiT->numel() != 2 * rank) {
        return invalidArgument(op + ": 'roi' has " + std::to_string(roiT->numel()) + " values, expected " +
                               std::to_string(2 * na));
      }
      const bool perAxis = roiT->numel() == (int64_t)(2 * na);
      const size_t n = perAxis ? na : (size_t)rank;
      for (size_t k = 0; k < n; ++k) {
        AxisGeom& g = geom[perAxis ? (size_t)axes[k] : k];
        g.roiStart = roiT->valueAsDouble((int64_t)k);
        g.roiEnd = roiT->valueAsDouble((int64_t)(k + n));
        g.roiStartF = (float)g.roiStart;
        g.roiEndF = (float)g.roiEnd;
      }
    } else if (m_p.ctm == Ctm::TfCropAndResize) {
      return invalidArgument(op + ": coordinate_transformation_mode tf_crop_and_resize needs a non-empty 'roi' input");
    }

    Shape outShape((size_t)rank);
    for (int64_t d = 0; d < rank; ++d) outShape[(size_t)d] = geom[(size_t)d].outLen;
    if (checkedNumel(outShape, (int64_t)1 << 40) < 0) {
      return invalidArgument(op + ": output shape " + shapeToString(outShape) + " is too large");
    }
    Tensor y(x.dtype(), outShape);
    if (y.numel() == 0) {
      if (ctx.outputCount() > 0) ctx.outputs[0] = std::move(y);
      return Status::ok();
    }
    if (x.numel() == 0) {
      return invalidArgument(op + ": cannot resize empty input of shape " + shapeToString(x.shape()) +
                             " to non-empty " + shapeToString(outShape));
    }

    std::vector<AxisMap> maps((size_t)rank);
    bool allIdentity = true, anyOutside = false;
    for (int64_t d = 0; d < rank; ++d) {
      maps[(size_t)d] = buildAxisMap(m_p, geom[(size_t)d]);
      allIdentity = allIdentity && maps[(size_t)d].identity;
      anyOutside = anyOutside || maps[(size_t)d].anyOutside;
    }
    if (allIdentity) {
      if (ctx.outputCount() > 0) ctx.outputs[0] = x;
      return Status::ok();
    }

    const DType dt = x.dtype();
    if (m_p.mode == RMode::Nearest) {
      switch (dtypeSize(dt)) {
        case 1: nearestGather<uint8_t>(ctx, x.data<uint8_t>(), y.data<uint8_t>(), x.shape(), outShape, maps); break;
        case 2: nearestGather<uint16_t>(ctx, x.data<uint16_t>(), y.data<uint16_t>(), x.shape(), outShape, maps); break;
        case 4: nearestGather<uint32_t>(ctx, x.data<uint32_t>(), y.data<uint32_t>(), x.shape(), outShape, maps); break;
        case 8: nearestGather<uint64_t>(ctx, x.data<uint64_t>(), y.data<uint64_t>(), x.shape(), outShape, maps); break;
        default: return unsupported(op + ": input dtype " + dtypeName(dt) + " is not supported");
      }
    } else {
      switch (dt) {
        case DType::Float: interpolateTyped<float, float>(ctx, x, y, maps); break;
        case DType::Double: interpolateTyped<double, double>(ctx, x, y, maps); break;
        case DType::Int8: interpolateTyped<int8_t, float>(ctx, x, y, maps); break;
        case DType::UInt8: interpolateTyped<uint8_t, float>(ctx, x, y, maps); break;
        case DType::Int32: interpolateTyped<int32_t, double>(ctx, x, y, maps); break;
        case DType::Int64: interpolateTyped<int64_t, double>(ctx, x, y, maps); break;
        default:
          return unsupported(op + ": input dtype " + dtypeName(dt) + " is not supported in " +
                             (m_p.mode == RMode::Linear ? "linear" : "cubic") + " mode");
      }
    }
    if (anyOutside) {
      const float e = m_p.extrapolation;
      switch (dt) {
        case DType::Float: applyExtrapolation<float>(y.data<float>(), outShape, maps, e); break;
        case DType::Double: applyExtrapolation<double>(y.data<double>(), outShape, maps, (double)e); break;
        case DType::Int8: applyExtrapolation<int8_t>(y.data<int8_t>(), outShape, maps, extrapolationAs<int8_t>(e)); break;
        case DType::UInt8: applyExtrapolation<uint8_t>(y.data<uint8_t>(), outShape, maps, extrapolationAs<uint8_t>(e)); break;
        case DType::Int32: applyExtrapolation<int32_t>(y.data<int32_t>(), outShape, maps, extrapolationAs<int32_t>(e)); break;
        case DType::Int64: applyExtrapolation<int64_t>(y.data<int64_t>(), outShape, maps, extrapolationAs<int64_t>(e)); break;
        default:
          return unsupported(op + ": extrapolation for dtype " + dtypeName(dt) + " is not supported");
      }
    }
    if (ctx.outputCount() > 0) ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

 private:
  Params m_p;
};

bool parseMode(AttrReader& a, const std::string& v, bool allowCubic, RMode& out) {
  if (v == "nearest") {
    out = RMode::Nearest;
  } else if (v == "linear" || v == "bilinear") {
    out = RMode::Linear;
  } else if (v == "cubic" && allowCubic) {
    out = RMode::Cubic;
  } else {
    a.fail("unsupported mode '" + v + "'");
    return false;
  }
  return true;
}

}  // namespace

// Resize, ai.onnx opsets 10..21: opset 10 takes (X, scales), 11+ (X, roi, scales, sizes).
Result<std::unique_ptr<Kernel>> createResize(const KernelInit& init) {
  AttrReader a(init);
  Params p;
  p.op = "Resize";
  const std::string mode = a.s("mode", "nearest");
  if (init.opset < 11) {
    p.form = Form::XScales;
    p.ctm = Ctm::Asymmetric;
    p.nmode = NMode::Simple;
    parseMode(a, mode, false, p.mode);
  } else {
    p.form = Form::Full;
    parseMode(a, mode, true, p.mode);
    const std::string ctm = a.s("coordinate_transformation_mode", "half_pixel");
    if (ctm == "half_pixel") {
      p.ctm = Ctm::HalfPixel;
    } else if (ctm == "half_pixel_symmetric") {
      p.ctm = Ctm::HalfPixelSymmetric;
    } else if (ctm == "pytorch_half_pixel") {
      p.ctm = Ctm::PytorchHalfPixel;
    } else if (ctm == "align_corners") {
      p.ctm = Ctm::AlignCorners;
    } else if (ctm == "asymmetric") {
      p.ctm = Ctm::Asymmetric;
    } else if (ctm == "tf_half_pixel_for_nn") {
      p.ctm = Ctm::TfHalfPixelForNN;
    } else if (ctm == "tf_crop_and_resize") {
      p.ctm = Ctm::TfCropAndResize;
    } else {
      a.fail("unsupported coordinate_transformation_mode '" + ctm + "'");
    }
    const std::string nm = a.s("nearest_mode", "round_prefer_floor");
    if (nm == "round_prefer_floor") {
      p.nmode = NMode::RoundPreferFloor;
    } else if (nm == "round_prefer_ceil") {
      p.nmode = NMode::RoundPreferCeil;
    } else if (nm == "floor") {
      p.nmode = NMode::Floor;
    } else if (nm == "ceil") {
      p.nmode = NMode::Ceil;
    } else {
      a.fail("unsupported nearest_mode '" + nm + "'");
    }
    p.cubicA = a.f("cubic_coeff_a", -0.75f);
    p.excludeOutside = a.i("exclude_outside", 0) != 0;
    p.extrapolation = a.f("extrapolation_value", 0.f);
    // Opset-18 attributes (accepted at any opset >= 11; absent means the defaults).
    p.antialias = a.i("antialias", 0) != 0 && p.mode != RMode::Nearest;
    p.hasAxes = a.has("axes");
    p.axes = a.ints("axes");
    const std::string keep = a.s("keep_aspect_ratio_policy", "stretch");
    if (keep == "stretch") {
      p.keep = Keep::Stretch;
    } else if (keep == "not_larger") {
      p.keep = Keep::NotLarger;
    } else if (keep == "not_smaller") {
      p.keep = Keep::NotSmaller;
    } else {
      a.fail("unsupported keep_aspect_ratio_policy '" + keep + "'");
    }
  }
  if (!a.ok()) return a.status();
  std::unique_ptr<Kernel> k = std::make_unique<ResizeKernel>(std::move(p));
  return k;
}

// Upsample, ai.onnx opsets 7..9: opset 7/8 take the 'scales' attribute, 9 the 'scales' input.
Result<std::unique_ptr<Kernel>> createUpsample(const KernelInit& init) {
  AttrReader a(init);
  Params p;
  p.op = "Upsample";
  p.ctm = Ctm::Asymmetric;
  p.nmode = NMode::Simple;
  parseMode(a, a.s("mode", "nearest"), false, p.mode);
  if (init.opset < 9) {
    p.form = Form::UpsampleAttr;
    if (!a.has("scales")) a.fail("missing required attribute 'scales'");
    p.attrScales = a.floats("scales");
  } else {
    p.form = Form::XScales;
  }
  if (!a.ok()) return a.status();
  std::unique_ptr<Kernel> k = std::make_unique<ResizeKernel>(std::move(p));
  return k;
}

}  // namespace qs
