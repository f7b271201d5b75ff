// Conv (ai.onnx opsets 1..21, FP32) and the shared sliding-window machinery.
#include "core/kernels/conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "core/exec/parallel.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/conv_gemv.h"
#include "core/kernels/conv_pointwise.h"
#include "core/kernels/depthwise_c8.h"
#include "core/kernels/gemm.h"

namespace qs {

namespace {

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Shape WindowGeometry::outShape() const {
  Shape s;
  for (int i = 3 - nd; i < 3; ++i) s.push_back(out[i]);
  return s;
}

WindowAttrs readWindowAttrs(AttrReader& a, bool withGroup) {
  WindowAttrs w;
  w.kernelShape = a.ints("kernel_shape");
  w.strides = a.ints("strides");
  w.dilations = a.ints("dilations");
  w.pads = a.ints("pads");
  w.autoPad = a.s("auto_pad", "NOTSET");
  if (withGroup) w.group = a.i("group", 1);
  if (!a.ok()) return w;
  if (w.autoPad.empty()) w.autoPad = "NOTSET";
  if (w.autoPad != "NOTSET" && w.autoPad != "SAME_UPPER" && w.autoPad != "SAME_LOWER" && w.autoPad != "VALID")
    a.fail("unsupported auto_pad '" + w.autoPad + "'");
  for (int64_t v : w.kernelShape)
    if (v <= 0) a.fail("kernel_shape values must be positive");
  for (int64_t v : w.strides)
    if (v <= 0) a.fail("strides must be positive");
  for (int64_t v : w.dilations)
    if (v <= 0) a.fail("dilations must be positive");
  for (int64_t v : w.pads)
    if (v < 0) a.fail("pads must be non-negative");
  if (w.pads.size() % 2 != 0) a.fail("pads must have an even number of values");
  if (withGroup && w.group <= 0) a.fail("group must be positive, got " + std::to_string(w.group));
  return w;
}

Status resolveWindow(const WindowAttrs& attrs, const std::vector<int64_t>& inSpatial,
                     const std::vector<int64_t>& kernel, bool ceilMode, WindowGeometry& g) {
  const size_t nd = inSpatial.size();
  if (nd < 1 || nd > 3) return unsupported("only 1-D, 2-D and 3-D spatial shapes are supported, got " + std::to_string(nd) + "-D");
  if (kernel.size() != nd) return invalidArgument("kernel rank " + std::to_string(kernel.size()) + " does not match spatial rank " + std::to_string(nd));
  auto check = [&](const std::vector<int64_t>& v, size_t want, const char* what) -> Status {
    if (!v.empty() && v.size() != want)
      return invalidArgument(std::string(what) + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(want));
    return Status::ok();
  };
  QS_RETURN_IF_ERROR(check(attrs.strides, nd, "strides"));
  QS_RETURN_IF_ERROR(check(attrs.dilations, nd, "dilations"));
  QS_RETURN_IF_ERROR(check(attrs.pads, 2 * nd, "pads"));
  g = WindowGeometry();
  g.nd = (int)nd;
  const int off = 3 - (int)nd;
  for (size_t i = 0; i < nd; ++i) {
    int j = off + (int)i;
    g.in[j] = inSpatial[i];
    g.k[j] = kernel[i];
    g.s[j] = attrs.strides.empty() ? 1 : attrs.strides[i];
    g.d[j] = attrs.dilations.empty() ? 1 : attrs.dilations[i];
    if (g.k[j] <= 0) return invalidArgument("kernel dim " + std::to_string(i) + " is " + std::to_string(g.k[j]));
    const int64_t dk = (g.k[j] - 1) * g.d[j] + 1;
    const int64_t in = g.in[j];
    if (attrs.autoPad == "SAME_UPPER" || attrs.autoPad == "SAME_LOWER") {
      int64_t out = (in + g.s[j] - 1) / g.s[j];
      int64_t total = std::max<int64_t>(0, (out - 1) * g.s[j] + dk - in);
      int64_t small = total / 2;
      if (attrs.autoPad == "SAME_UPPER") {
        g.padB[j] = small;
        g.padE[j] = total - small;
      } else {
        g.padB[j] = total - small;
        g.padE[j] = small;
      }
      g.out[j] = out;
    } else {
      if (attrs.autoPad == "VALID") {
        g.padB[j] = g.padE[j] = 0;
      } else if (!attrs.pads.empty()) {
        g.padB[j] = attrs.pads[i];
        g.padE[j] = attrs.pads[i + nd];
      }
      int64_t span = in + g.padB[j] + g.padE[j] - dk;
      if (span < 0)
        return invalidArgument("window of extent " + std::to_string(dk) + " does not fit spatial dim " + std::to_string(i) +
                               " of size " + std::to_string(in) + " with pads " + std::to_string(g.padB[j]) + "," +
                               std::to_string(g.padE[j]));
      int64_t out;
      if (ceilMode) {
        out = (span + g.s[j] - 1) / g.s[j] + 1;
        // The last window must start inside the input or the begin padding.
        if ((out - 1) * g.s[j] >= in + g.padB[j]) --out;
      } else {
        out = span / g.s[j] + 1;
      }
      g.out[j] = out;
    }
  }
  return Status::ok();
}

void windowValidRange(int64_t off, int64_t stride, int64_t inLen, int64_t outLen, int64_t& lo, int64_t& hi) {
  // o*stride + off >= 0  <=>  o >= ceil(-off / stride)
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  // o*stride + off <= inLen - 1
  int64_t last = inLen - 1 - off;
  hi = last < 0 ? 0 : floorDiv(last, stride) + 1;
  hi = std::min(hi, outLen);
  lo = std::min(lo, hi);
}

float* windowScratch(size_t n) {
  thread_local std::unique_ptr<float[]> buf;
  thread_local size_t capacity = 0;
  if (n > capacity || !buf) {
    buf.reset();
    buf.reset(new float[std::max<size_t>(n, 16)]);
    capacity = std::max<size_t>(n, 16);
  }
  return buf.get();
}

void im2col(const float* in, int64_t c0, int64_t c1, const WindowGeometry& g, float* col) {
  const int64_t inSize = g.inSize(), outSize = g.outSize(), kSize = g.kSize();
  const int64_t OW = g.out[2], IW = g.in[2];
  for (int64_t c = c0; c < c1; ++c) {
    const float* src = in + c * inSize;
    float* row = col + c * kSize * outSize;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, row += outSize) {
          const int64_t offW = kw * g.d[2] - g.padB[2];
          int64_t lo, hi;
          windowValidRange(offW, g.s[2], IW, OW, lo, hi);
          for (int64_t od = 0; od < g.out[0]; ++od) {
            const int64_t id = od * g.s[0] - g.padB[0] + kd * g.d[0];
            for (int64_t oh = 0; oh < g.out[1]; ++oh) {
              float* dst = row + (od * g.out[1] + oh) * OW;
              const int64_t ih = oh * g.s[1] - g.padB[1] + kh * g.d[1];
              if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
                std::memset(dst, 0, sizeof(float) * (size_t)OW);
                continue;
              }
              const float* srow = src + (id * g.in[1] + ih) * IW;
              for (int64_t o = 0; o < lo; ++o) dst[o] = 0.f;
              if (g.s[2] == 1) {
                if (hi > lo) std::memcpy(dst + lo, srow + lo + offW, sizeof(float) * (size_t)(hi - lo));
              } else {
                const int64_t st = g.s[2];
                for (int64_t o = lo; o < hi; ++o) dst[o] = srow[o * st + offW];
              }
              for (int64_t o = hi; o < OW; ++o) dst[o] = 0.f;
            }
          }
        }
  }
}

void col2im(const float* col, int64_t c0, int64_t c1, const WindowGeometry& g, float* out) {
  const int64_t inSize = g.inSize(), outSize = g.outSize(), kSize = g.kSize();
  const int64_t OW = g.out[2], IW = g.in[2];
  for (int64_t c = c0; c < c1; ++c) {
    float* dstPlane = out + c * inSize;
    const float* row = col + c * kSize * outSize;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, row += outSize) {
          const int64_t offW = kw * g.d[2] - g.padB[2];
          int64_t lo, hi;
          windowValidRange(offW, g.s[2], IW, OW, lo, hi);
          if (hi <= lo) continue;
          for (int64_t od = 0; od < g.out[0]; ++od) {
            const int64_t id = od * g.s[0] - g.padB[0] + kd * g.d[0];
            if (id < 0 || id >= g.in[0]) continue;
            for (int64_t oh = 0; oh < g.out[1]; ++oh) {
              const int64_t ih = oh * g.s[1] - g.padB[1] + kh * g.d[1];
              if (ih < 0 || ih >= g.in[1]) continue;
              const float* s = row + (od * g.out[1] + oh) * OW;
              float* drow = dstPlane + (id * g.in[1] + ih) * IW;
              const int64_t st = g.s[2];
              if (st == 1) {
                for (int64_t o = lo; o < hi; ++o) drow[o + offW] += s[o];
              } else {
                for (int64_t o = lo; o < hi; ++o) drow[o * st + offW] += s[o];
              }
            }
          }
        }
  }
}

const char* fusedActivationName(FusedActivation::Kind kind) {
  using K = FusedActivation::Kind;
  switch (kind) {
    case K::Relu: return "Relu";
    case K::Clip: return "Clip";
    case K::HardSigmoid: return "HardSigmoid";
    case K::HardSwish: return "HardSwish";
    case K::Sigmoid: return "Sigmoid";
    case K::LeakyRelu: return "LeakyRelu";
    case K::Mul: return "Mul";
    case K::Add: return "Add";
  }
  return "?";
}

void setFusedActivations(Node& node, const std::vector<FusedActivation>& acts) {
  Attribute names, params;
  names.type = Attribute::Type::Strings;
  params.type = Attribute::Type::Floats;
  for (const FusedActivation& f : acts) {
    names.strings.push_back(fusedActivationName(f.kind));
    params.floats.push_back(f.a);
    params.floats.push_back(f.b);
  }
  node.attributes["activations"] = std::move(names);
  node.attributes["activation_params"] = std::move(params);
}

bool parseFusedActivation(const std::string& name, FusedActivation::Kind& kind) {
  using K = FusedActivation::Kind;
  for (K k : {K::Relu, K::Clip, K::HardSigmoid, K::HardSwish, K::Sigmoid, K::LeakyRelu, K::Mul, K::Add}) {
    if (name == fusedActivationName(k)) {
      kind = k;
      return true;
    }
  }
  return false;
}

Status parseFusedActivations(const std::vector<std::string>& names, const std::vector<float>& params,
                             std::vector<FusedActivation>& out) {
  if (params.size() != 2 * names.size())
    return kernelError(StatusCode::InvalidModel, "activation_params has " + std::to_string(params.size()) +
                                                     " values, expected " + std::to_string(2 * names.size()));
  out.clear();
  for (size_t i = 0; i < names.size(); ++i) {
    FusedActivation f;
    if (!parseFusedActivation(names[i], f.kind))
      return kernelError(StatusCode::Unsupported, "unknown fused activation '" + names[i] + "'");
    f.a = params[2 * i];
    f.b = params[2 * i + 1];
    out.push_back(f);
  }
  return Status::ok();
}

namespace {

// y[i] = f(y[i]) over [0, n): 8 lanes at a time with AVX2, the tail scalar, same formulas.
template <class Vec, class Scalar>
inline void mapRow(float* y, int64_t n, const Vec& vf, const Scalar& sf) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, vf(_mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = sf(y[i]);
}

}  // namespace

void applyFusedActivations(float* y, int64_t n, float bias, const std::vector<FusedActivation>& ops) {
  using K = FusedActivation::Kind;
  if (bias != 0.f) {
    const __m256 vb = _mm256_set1_ps(bias);
    mapRow(y, n, [&](__m256 v) { return _mm256_add_ps(v, vb); }, [&](float v) { return v + bias; });
  }
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.f);
  for (const FusedActivation& op : ops) {
    const float a = op.a, b = op.b;
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    // Scalar forms use the same operation order as the vector ones; max/min keep the operand
    // order of vmaxps/vminps (second operand returned for NaN) so both agree.
    switch (op.kind) {
      case K::Relu:
        mapRow(y, n, [&](__m256 v) { return _mm256_max_ps(v, zero); }, [](float v) { return v > 0.f ? v : 0.f; });
        break;
      case K::Clip:
        mapRow(y, n, [&](__m256 v) { return _mm256_min_ps(_mm256_max_ps(v, va), vb); },
               [&](float v) { return std::min(std::max(v, a), b); });
        break;
      case K::HardSigmoid:
        mapRow(y, n, [&](__m256 v) { return _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(va, v, vb), zero), one); },
               [&](float v) { return std::min(std::max(std::fma(a, v, b), 0.f), 1.f); });
        break;
      case K::HardSwish:
        mapRow(y, n,
               [&](__m256 v) { return _mm256_mul_ps(v, _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(va, v, vb), zero), one)); },
               [&](float v) { return v * std::min(std::max(std::fma(a, v, b), 0.f), 1.f); });
        break;
      case K::Sigmoid:
        for (int64_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + std::exp(-y[i]));
        break;
      case K::LeakyRelu:
        mapRow(y, n,
               [&](__m256 v) { return _mm256_blendv_ps(_mm256_mul_ps(v, va), v, _mm256_cmp_ps(v, zero, _CMP_GE_OQ)); },
               [&](float v) { return v >= 0.f ? v : a * v; });
        break;
      case K::Mul:
        mapRow(y, n, [&](__m256 v) { return _mm256_mul_ps(v, va); }, [&](float v) { return v * a; });
        break;
      case K::Add:
        mapRow(y, n, [&](__m256 v) { return _mm256_add_ps(v, va); }, [&](float v) { return v + a; });
        break;
    }
  }
}

namespace {

// Eight outputs' inputs for one tap: consecutive floats (W stride 1), or every other one of 16
// (W stride 2: even lanes of two loads, put back in order).
template <int S>
inline __m256 loadTap(const float* p) {
  if constexpr (S == 1) {
    return _mm256_loadu_ps(p);
  } else {
    const __m256 even = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
  }
}

// V vectors of 8 consecutive outputs of one row of a zero-padded plane (row stride PW), for NW
// filters over the same input (each load then serves NW FMAs): V * NW independent accumulator
// chains, each output summed as bias + taps in (kh, kw) order.
template <int S, int V, int NW>
inline void depthwiseVectors(const float* rows, const float* const* w, const __m256* vb, int64_t KH, int64_t dh,
                             int64_t PW, int64_t KW, int64_t dw, float* const* out, int64_t at) {
  __m256 a[NW][V];
  for (int f = 0; f < NW; ++f)
    for (int v = 0; v < V; ++v) a[f][v] = vb[f];
  for (int64_t kh = 0; kh < KH; ++kh) {
    const float* ip = rows + kh * dh * PW;
    for (int64_t kw = 0; kw < KW; ++kw) {
      __m256 wv[NW];
      for (int f = 0; f < NW; ++f) wv[f] = _mm256_broadcast_ss(w[f] + kh * KW + kw);
      for (int v = 0; v < V; ++v) {
        const __m256 x = loadTap<S>(ip + kw * dw + 8 * S * v);
        for (int f = 0; f < NW; ++f) a[f][v] = _mm256_fmadd_ps(wv[f], x, a[f][v]);
      }
    }
  }
  for (int f = 0; f < NW; ++f)
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(out[f] + at + 8 * v, a[f][v]);
}

// Depthwise, W stride S (1 or 2), NW filters over one plane: the plane is copied once into
// zero-padded scratch, so that every output, borders included, goes through the vector code,
// 64 / NW, then down to 8 outputs at a time with independent chains (det's 5x5 planes ran at ~6
// GFMA/s with two chains and scalar borders, each border tap checked). A padding tap adds w * 0:
// the same sums as skipping it.
template <int S, int NW>
void depthwisePlaneVector(const float* in, const float* const* w, const float* bias, const WindowGeometry& g,
                          float* const* out) {
  const int64_t OH = g.out[1], OW = g.out[2], IH = g.in[1], IW = g.in[2];
  const int64_t KH = g.k[1], KW = g.k[2], sh = g.s[1], dh = g.d[1], dw = g.d[2];
  const int64_t padT = g.padB[1], padL = g.padB[2];
  const int64_t OWv = (OW + 7) / 8 * 8;
  // Rows and columns every output reads (with the float past the last even lane for S == 2).
  const int64_t PH = (OH - 1) * sh + (KH - 1) * dh + 1, PW = (OWv - 1) * S + (KW - 1) * dw + S;
  thread_local std::vector<float> padded;
  if (padded.size() < (size_t)(PH * PW)) padded.resize((size_t)(PH * PW));
  float* pp = padded.data();
  for (int64_t r = 0; r < PH; ++r) {
    float* prow = pp + r * PW;
    const int64_t ir = r - padT;
    const int64_t body = ir >= 0 && ir < IH ? std::max<int64_t>(0, std::min(IW, PW - padL)) : 0;
    const int64_t lead = std::min(padL, PW);
    std::fill(prow, prow + lead, 0.f);
    if (body > 0) std::memcpy(prow + lead, in + ir * IW, sizeof(float) * (size_t)body);
    std::fill(prow + lead + body, prow + PW, 0.f);
  }
  __m256 vb[NW];
  for (int f = 0; f < NW; ++f) vb[f] = _mm256_set1_ps(bias[f]);
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* rows = pp + oh * sh * PW;
    float* orow[NW];
    for (int f = 0; f < NW; ++f) orow[f] = out[f] + oh * OW;
    int64_t ow = 0;
    auto vectors = [&](auto v) {
      constexpr int V = decltype(v)::value;
      for (; ow + 8 * V <= OW; ow += 8 * V) depthwiseVectors<S, V, NW>(rows + ow * S, w, vb, KH, dh, PW, KW, dw, orow, ow);
    };
    if constexpr (NW == 1) vectors(std::integral_constant<int, 8>{});
    vectors(std::integral_constant<int, 4>{});
    vectors(std::integral_constant<int, 2>{});
    vectors(std::integral_constant<int, 1>{});
    if (ow < OW) {  // the last few outputs: one vector into a buffer
      alignas(32) float last[NW][8];
      float* lastRows[NW];
      for (int f = 0; f < NW; ++f) lastRows[f] = last[f];
      depthwiseVectors<S, 1, NW>(rows + ow * S, w, vb, KH, dh, PW, KW, dw, lastRows, 0);
      for (int f = 0; f < NW; ++f) std::memcpy(orow[f] + ow, last[f], sizeof(float) * (size_t)(OW - ow));
    }
  }
}

// Depthwise 2-D (and 1-D) convolution of one plane: out[oh][ow] = b + sum w[kh][kw] * in[...].
void depthwisePlaneImpl(const float* in, const float* w, float bias, const WindowGeometry& g, float* out) {
  const int64_t OH = g.out[1], OW = g.out[2], IH = g.in[1], IW = g.in[2];
  const int64_t KH = g.k[1], KW = g.k[2], sh = g.s[1], sw = g.s[2];
  if (sw == 1 || sw == 2) {
    const float* const ws[1] = {w};
    float* const outs[1] = {out};
    if (sw == 1) depthwisePlaneVector<1, 1>(in, ws, &bias, g, outs);
    else depthwisePlaneVector<2, 1>(in, ws, &bias, g, outs);
    return;
  }
  // Valid ow range per kw, computed once per plane.
  int64_t loBuf[64], hiBuf[64], offBuf[64];
  std::vector<int64_t> heap;
  int64_t *lo = loBuf, *hi = hiBuf, *offs = offBuf;
  if (KW > 64) {
    heap.resize((size_t)KW * 3);
    lo = heap.data();
    hi = lo + KW;
    offs = hi + KW;
  }
  for (int64_t kw = 0; kw < KW; ++kw) {
    offs[kw] = kw * g.d[2] - g.padB[2];
    windowValidRange(offs[kw], sw, IW, OW, lo[kw], hi[kw]);
  }
  for (int64_t oh = 0; oh < OH; ++oh) {
    float* orow = out + oh * OW;
    for (int64_t o = 0; o < OW; ++o) orow[o] = bias;
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t ih = oh * sh - g.padB[1] + kh * g.d[1];
      if (ih < 0 || ih >= IH) continue;
      const float* irow = in + ih * IW;
      const float* wr = w + kh * KW;
      for (int64_t kw = 0; kw < KW; ++kw) {
        const float wv = wr[kw];
        const int64_t a = lo[kw], b = hi[kw];
        if (sw == 1) {
          const float* ip = irow + offs[kw];
          for (int64_t o = a; o < b; ++o) orow[o] += wv * ip[o];
        } else if (sw == 2) {
          const float* ip = irow + offs[kw];
          for (int64_t o = a; o < b; ++o) orow[o] += wv * ip[2 * o];
        } else {
          const float* ip = irow + offs[kw];
          for (int64_t o = a; o < b; ++o) orow[o] += wv * ip[o * sw];
        }
      }
    }
  }
}

// Columns [o0, o1) of the im2col matrix of channels [0, C) of one image (group), written row-major
// with leading dimension ld: col[(c*kSize + kidx) * ld + (o - o0)].
void im2colBlock(const float* in, int64_t C, const WindowGeometry& g, int64_t o0, int64_t o1, float* col, int64_t ld) {
  const int64_t inSize = g.inSize();
  const int64_t OW = g.out[2], OH = g.out[1], IW = g.in[2], sw = g.s[2];
  for (int64_t c = 0; c < C; ++c) {
    const float* src = in + c * inSize;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, col += ld) {
          const int64_t offW = kw * g.d[2] - g.padB[2];
          int64_t lo, hi;
          windowValidRange(offW, sw, IW, OW, lo, hi);
          float* dst = col;
          int64_t o = o0;
          while (o < o1) {
            const int64_t od = o / (OH * OW), rem = o % (OH * OW), oh = rem / OW, ow0 = rem % OW;
            const int64_t len = std::min(OW - ow0, o1 - o);
            const int64_t id = od * g.s[0] - g.padB[0] + kd * g.d[0];
            const int64_t ih = oh * g.s[1] - g.padB[1] + kh * g.d[1];
            if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
              std::memset(dst, 0, sizeof(float) * (size_t)len);
            } else {
              const float* srow = src + (id * g.in[1] + ih) * IW;
              const int64_t a = std::min(std::max(ow0, lo), ow0 + len), b = std::max(std::min(ow0 + len, hi), a);
              int64_t ow = ow0;
              for (; ow < a; ++ow) dst[ow - ow0] = 0.f;
              if (sw == 1) {
                if (b > a) std::memcpy(dst + (a - ow0), srow + a + offW, sizeof(float) * (size_t)(b - a));
                ow = b;
              } else if (sw == 2) {
                // Stride 2 (stems, downsampling convs): the even lanes of 16 consecutive values, 8
                // outputs a step while the 16 stay inside the row; the gather was scalar and took
                // most of a first layer's time (3 input channels, few outputs sharing a column).
                for (; ow + 8 <= b && (ow + 7) * 2 + offW + 1 < IW; ow += 8) {
                  const float* p = srow + ow * 2 + offW;
                  const __m256 lo8 = _mm256_loadu_ps(p), hi8 = _mm256_loadu_ps(p + 8);
                  const __m256 even = _mm256_shuffle_ps(lo8, hi8, _MM_SHUFFLE(2, 0, 2, 0));
                  _mm256_storeu_ps(dst + (ow - ow0), _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even),
                                                                                            _MM_SHUFFLE(3, 1, 2, 0))));
                }
                for (; ow < b; ++ow) dst[ow - ow0] = srow[ow * 2 + offW];
              } else {
                for (; ow < b; ++ow) dst[ow - ow0] = srow[ow * sw + offW];
              }
              for (ow = b; ow < ow0 + len; ++ow) dst[ow - ow0] = 0.f;
            }
            dst += len;
            o += len;
          }
        }
  }
}

class ConvKernel : public Kernel {
 public:
  ConvKernel(WindowAttrs attrs, std::vector<FusedActivation> activations, const Tensor* constW, const Tensor* constB,
             bool library)
      : m_attrs(std::move(attrs)), m_activations(std::move(activations)) {
    if (constW && constW->dtype() == DType::Float && constW->rank() >= 3) {
      m_constW = *constW;
      m_packed = packWeights(*constW);
      if (constB) m_constB = *constB;
      if (library) m_dnnl = DnnlConv::create(*constW, constB, m_attrs.group, m_activations);
    }
  }

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1)) return invalidArgument("Conv needs inputs X and W");
    const Tensor& X = ctx.input(0);
    const Tensor& W = ctx.input(1);
    if (X.dtype() != DType::Float || W.dtype() != DType::Float)
      return unsupported("Conv supports float32 only, got X " + dtypeName(X.dtype()) + ", W " + dtypeName(W.dtype()));
    if (X.rank() < 3) return invalidArgument("Conv input X must have rank >= 3, got shape " + shapeToString(X.shape()));
    if (W.rank() != X.rank())
      return invalidArgument("Conv W shape " + shapeToString(W.shape()) + " does not match X shape " + shapeToString(X.shape()));
    const int64_t N = X.dim(0), C = X.dim(1), M = W.dim(0), Cg = W.dim(1), G = m_attrs.group;
    if (Cg * G != C || M % G != 0)
      return invalidArgument("Conv channels mismatch: X " + shapeToString(X.shape()) + ", W " + shapeToString(W.shape()) +
                             ", group " + std::to_string(G));
    std::vector<int64_t> inSp(X.shape().begin() + 2, X.shape().end());
    std::vector<int64_t> kSp(W.shape().begin() + 2, W.shape().end());
    if (!m_attrs.kernelShape.empty() && m_attrs.kernelShape != kSp)
      return invalidArgument("Conv kernel_shape " + shapeToString(m_attrs.kernelShape) + " does not match W " +
                             shapeToString(W.shape()));
    const float* bias = nullptr;
    if (ctx.hasInput(2)) {
      const Tensor& B = ctx.input(2);
      if (B.dtype() != DType::Float || B.numel() != M)
        return invalidArgument("Conv bias must be float [" + std::to_string(M) + "], got " + dtypeName(B.dtype()) + " " +
                               shapeToString(B.shape()));
      bias = B.data<float>();
    }
    WindowGeometry g;
    QS_RETURN_IF_ERROR(resolveWindow(m_attrs, inSp, kSp, false, g));
    Shape yShape = {N, M};
    for (int64_t v : g.outShape()) yShape.push_back(v);
    ctx.outputs[0] = Tensor(DType::Float, yShape);
    float* y = ctx.outputs[0].data<float>();
    const float* x = X.data<float>();
    const float* w = W.data<float>();
    const int64_t inSize = g.inSize(), outSize = g.outSize(), kSize = g.kSize();
    const int64_t Mg = M / G;
    if (N == 0 || M == 0 || outSize == 0) return Status::ok();
    // A 1x1 image through a 1x1 filter (SE blocks): a matrix-vector product (conv_gemv.h), while W
    // is the constant it was packed from; at batch > 1 only while W stays in L2 (it is read once
    // per image). Packed on the first such run, so that 1x1 convs over larger images hold no copy.
    if (inSize == 1 && outSize == 1 && G == 1 && g.padB[0] + g.padB[1] + g.padB[2] == 0 && m_constW.numel() > 0 &&
        W.sharesBufferWith(m_constW) && W.shape() == m_constW.shape() && (N == 1 || M * C <= (1 << 18))) {
      std::call_once(m_gemvOnce, [&] {
        auto gemv = std::make_unique<PointwiseGemv>(m_constW);
        if (gemv->valid()) m_gemv = std::move(gemv);
      });
      if (m_gemv) {
        m_gemv->run(x, N, bias, m_activations, y);
        return Status::ok();
      }
    }
    // 1x1, stride 1, unpadded, group 1, W the constant packed at load: read in place, bias and
    // activations in registers (conv_pointwise.h), where it measured ahead of the GEMM path and
    // of oneDNN (pointwiseDirectPreferred, pointwiseDirectBeatsOneDnn).
    const bool unitWindow = kSize == 1 && g.s[0] * g.s[1] * g.s[2] == 1 &&
                            g.padB[0] + g.padB[1] + g.padB[2] + g.padE[0] + g.padE[1] + g.padE[2] == 0;
    if (G == 1 && unitWindow && outSize > 1 && m_packed && W.sharesBufferWith(m_constW) &&
        W.shape() == m_constW.shape() && pointwiseDirectPreferred(C, M, outSize) &&
        (!m_dnnl || !DnnlConv::preferred(C, M, G, g) || pointwiseDirectBeatsOneDnn(C, outSize))) {
      pointwiseConvDirect((*m_packed)[0], x, N, outSize, bias, m_activations, y, ctx.threads);
      return Status::ok();
    }
    // oneDNN where it measured faster (conv_dnnl.h), while W and B are the constants it was
    // prepared with; ours computes y if it refuses.
    // Depthwise planes the eight-channel kernel takes (depthwise_c8.h) stay ours: it measured ahead
    // of oneDNN's there (docs/performance.md, "Small CNNs").
    const bool depthwise = G == C && M == C && Cg == 1 && g.nd <= 2;
    const bool dw8 = depthwise && depthwise8Preferred(C, g);
    // A 3x3 stride-2 first layer (1-4 input channels, group 1): our im2col (8-column stride-2
    // gather) and GEMM, which took half of oneDNN's time on det's 3 -> 16 channel conv at 640x640
    // (1.3 against 2.7 ms, 2 threads; oneDNN reorders the NCHW input for a direct kernel).
    const bool stem3x3 = G == 1 && C <= 4 && g.nd == 2 && g.k[1] == 3 && g.k[2] == 3 && g.s[1] == 2 && g.s[2] == 2;
    if (m_dnnl && !dw8 && !stem3x3 && W.sharesBufferWith(m_constW) && W.shape() == m_constW.shape() &&
        (ctx.hasInput(2) ? ctx.input(2).sharesBufferWith(m_constB) : m_constB.numel() == 0) &&
        DnnlConv::preferred(C, M, G, g) && m_dnnl->run(x, N, C, g, y, ctx.threads))
      return Status::ok();
    auto epilogue = [&](float* row, int64_t n, int64_t channel) {
      const float bv = bias ? bias[channel] : 0.f;
      if (m_activations.empty()) {
        if (bv != 0.f)
          for (int64_t i = 0; i < n; ++i) row[i] += bv;
      } else {
        applyFusedActivations(row, n, bv, m_activations);
      }
    };

    // Depthwise: one input channel per group, one output channel per group, 1-D or 2-D.
    if (depthwise) {
      // Work units per image: blocks of eight channels (dw8) and then single planes. Chunks of at
      // least ~1M multiply-adds (tens of microseconds), ~256K for the eight-channel kernel (it
      // runs them 2-3x faster; mobilenet_v2's 1M-multiply-add depthwise convs then use 2 threads).
      const int64_t blocks = dw8 ? C / 8 : 0, units = blocks + (C - 8 * blocks);
      const int64_t unitMacs = std::max<int64_t>(1, outSize * kSize * (dw8 ? 8 : 1));
      parallelFor(ctx.threads, N * units, std::max<int64_t>(1, (dw8 ? (1 << 18) : (1 << 20)) / unitMacs), [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t n = t / units, u = t % units;
          if (u < blocks) {
            depthwiseConv8(x + n * C * inSize, w, bias, 8 * u, g, m_activations, y + n * C * outSize);
            continue;
          }
          const int64_t c = 8 * blocks + (u - blocks), p = n * C + c;
          depthwiseConvPlane(x + p * inSize, w + c * kSize, bias ? bias[c] : 0.f, g, y + p * outSize);
          if (!m_activations.empty()) applyFusedActivations(y + p * outSize, outSize, 0.f, m_activations);
        }
      });
      return Status::ok();
    }

    // The packed weights made at load serve while W is the constant they were made from (an
    // input transform, e.g. fake quantization, hands a different tensor: pack that one).
    std::shared_ptr<const std::vector<PackedMatrix>> packed = m_packed;
    if (!packed || !W.sharesBufferWith(m_constW) || W.shape() != m_constW.shape()) packed = packWeights(W);

    bool pointwise = kSize == 1;
    for (int i = 0; i < 3; ++i) pointwise = pointwise && g.s[i] == 1 && g.padB[i] == 0 && g.padE[i] == 0;
    const int64_t Kdim = Cg * kSize;
    int64_t mb, nb;
    gemmBlocking(Mg, outSize, Kdim, ctx.threads, mb, nb);
    const int64_t rowBlocks = (Mg + mb - 1) / mb, colBlocks = (outSize + nb - 1) / nb;
    const int64_t perImage = G * rowBlocks * colBlocks;
    // Tasks: (image, group, row block, column block). Each builds its im2col block in per-thread
    // scratch, multiplies, and applies bias and activations while the block is in cache.
    parallelFor(ctx.threads, N * perImage, 1, [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        const int64_t n = t / perImage, r = t % perImage;
        const int64_t grp = r / (rowBlocks * colBlocks), rb = (r / colBlocks) % rowBlocks, cb = r % colBlocks;
        const int64_t m0 = rb * mb, m1 = std::min(Mg, m0 + mb), o0 = cb * nb, o1 = std::min(outSize, o0 + nb);
        const float* xg = x + (n * C + grp * Cg) * inSize;
        const float* B;
        int64_t ldb;
        if (pointwise) {
          B = xg + o0;
          ldb = inSize;
        } else {
          // Built straight in the layout the micro-kernel reads (no packing copy): rows padded to
          // a multiple of 16 columns plus 16, the padding zeroed.
          const int64_t width = o1 - o0, padded = (width + 15) / 16 * 16;
          ldb = padded + 16;
          float* col = gemmScratch(1, (size_t)(Kdim * ldb));
          im2colBlock(xg, Cg, g, o0, o1, col, ldb);
          if (padded > width)
            for (int64_t k = 0; k < Kdim; ++k) std::memset(col + k * ldb + width, 0, sizeof(float) * (size_t)(padded - width));
          B = col;
        }
        float* yb = y + (n * M + grp * Mg + m0) * outSize + o0;
        if (pointwise) gemmBlock((*packed)[(size_t)grp], m0, m1, B, ldb, false, o1 - o0, yb, outSize, false);
        else gemmBlockRows((*packed)[(size_t)grp], m0, m1, B, ldb, o1 - o0, yb, outSize, false);
        for (int64_t m = m0; m < m1; ++m) epilogue(yb + (m - m0) * outSize, o1 - o0, grp * Mg + m);
      }
    });
    return Status::ok();
  }

 private:
  std::shared_ptr<const std::vector<PackedMatrix>> packWeights(const Tensor& W) const {
    const int64_t M = W.dim(0), G = std::max<int64_t>(1, m_attrs.group);
    if (M % G != 0) return nullptr;
    const int64_t Mg = M / G, Kdim = W.numel() / std::max<int64_t>(1, M);
    auto v = std::make_shared<std::vector<PackedMatrix>>();
    for (int64_t grp = 0; grp < G; ++grp) v->emplace_back(W.data<float>() + grp * Mg * Kdim, Kdim, Mg, Kdim);
    return v;
  }

  WindowAttrs m_attrs;
  std::vector<FusedActivation> m_activations;
  Tensor m_constW, m_constB;
  std::shared_ptr<const std::vector<PackedMatrix>> m_packed;
  std::unique_ptr<DnnlConv> m_dnnl;  // null without oneDNN
  mutable std::once_flag m_gemvOnce;
  mutable std::unique_ptr<PointwiseGemv> m_gemv;  // the path for 1x1 images, made on first use
};

}  // namespace

void depthwiseConvPlane(const float* in, const float* w, float bias, const WindowGeometry& g, float* out) {
  depthwisePlaneImpl(in, w, bias, g, out);
}

void depthwiseConvPlane2(const float* in, const float* w0, const float* w1, float bias, const WindowGeometry& g,
                         float* out0, float* out1) {
  const float* const ws[2] = {w0, w1};
  const float biases[2] = {bias, bias};
  float* const outs[2] = {out0, out1};
  if (g.s[2] == 1) {
    depthwisePlaneVector<1, 2>(in, ws, biases, g, outs);
  } else if (g.s[2] == 2) {
    depthwisePlaneVector<2, 2>(in, ws, biases, g, outs);
  } else {
    depthwisePlaneImpl(in, w0, bias, g, out0);
    depthwisePlaneImpl(in, w1, bias, g, out1);
  }
}

Result<std::unique_ptr<Kernel>> createConv(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, true);
  std::vector<FusedActivation> acts;
  if (init.node.opType == kFusedConvOp) {
    std::vector<std::string> names = a.strings("activations");
    std::vector<float> params = a.floats("activation_params");
    if (!a.ok()) return a.status();
    if (Status st = parseFusedActivations(names, params, acts); !st) return st;
  }
  if (!a.ok()) return a.status();
  if (!attrs.kernelShape.empty() && (attrs.kernelShape.size() < 1 || attrs.kernelShape.size() > 3))
    return kernelError(StatusCode::Unsupported,
                     "only 1-D..3-D convolutions are supported, kernel_shape has " + std::to_string(attrs.kernelShape.size()) +
                         " dims");
  return std::unique_ptr<Kernel>(std::make_unique<ConvKernel>(std::move(attrs), std::move(acts), init.constantInput(1),
                                                                init.constantInput(2), init.libraryKernels));
}

}  // namespace qs
