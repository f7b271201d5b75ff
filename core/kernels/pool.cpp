// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool (ai.onnx opsets 1..21).
#include "core/kernels/pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/kernels/conv.h"

namespace qs {

namespace {

Status poolGeometry(const WindowAttrs& attrs, bool ceilMode, const Tensor& X, const char* op, WindowGeometry& g) {
  if (X.rank() < 3 || X.rank() > 5)
    return unsupported(std::string(op) + " supports 1-D..3-D pooling, got X " + shapeToString(X.shape()));
  const size_t nd = (size_t)X.rank() - 2;
  if (attrs.kernelShape.size() != nd)
    return invalidArgument(std::string(op) + " kernel_shape " + shapeToString(attrs.kernelShape) + " does not match X " +
                           shapeToString(X.shape()));
  std::vector<int64_t> inSp(X.shape().begin() + 2, X.shape().end());
  return resolveWindow(attrs, inSp, attrs.kernelShape, ceilMode, g);
}

Shape outputShape(const Tensor& X, const WindowGeometry& g) {
  Shape s = {X.dim(0), X.dim(1)};
  for (int64_t v : g.outShape()) s.push_back(v);
  return s;
}

// Valid tap range [lo, hi) of a window starting at `start` with `k` taps spaced `d` in [0, len).
inline void tapRange(int64_t start, int64_t k, int64_t d, int64_t len, int64_t& lo, int64_t& hi) {
  lo = start >= 0 ? 0 : (-start + d - 1) / d;
  const int64_t last = len - 1 - start;
  hi = last < 0 ? 0 : std::min(k, last / d + 1);
  lo = std::min(lo, hi);
}

// 1-D / 2-D max pooling without indices or dilation: the same comparisons as maxPoolPlanes
// (first valid tap, then v > best) without the index bookkeeping, with 2-tap rows unrolled.
// Eight consecutive outputs' inputs for one tap at W stride S (1, or 2: even lanes of 16 floats).
template <int S>
inline __m256 poolTap(const float* p) {
  if constexpr (S == 1) {
    return _mm256_loadu_ps(p);
  } else {
    const __m256 even = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
  }
}

// Outputs [ow, owEnd) of one row, eight at a time, every W tap of each inside the row: the scalar
// loop's comparisons (first valid tap, then v > best, false for NaN) lane by lane. Returns where
// it stopped.
template <int S>
int64_t maxPoolRowVector(const float* xp, int64_t sh, int64_t hlo, int64_t hhi, int64_t IW, int64_t KW, int64_t padL,
                         int64_t ow, int64_t owEnd, float* yp) {
  for (; ow + 8 <= owEnd; ow += 8) {
    const int64_t sw = ow * S - padL;
    // The stride-2 loads read one float past the last even lane: it must lie in the row.
    if (sw + 8 * S + KW - 1 > IW) break;
    __m256 best = _mm256_setzero_ps();
    bool first = true;
    for (int64_t a = hlo; a < hhi; ++a) {
      const float* row = xp + (sh + a) * IW + sw;
      for (int64_t c = 0; c < KW; ++c) {
        const __m256 v = poolTap<S>(row + c);
        best = first ? v : _mm256_blendv_ps(best, v, _mm256_cmp_ps(v, best, _CMP_GT_OQ));
        first = false;
      }
    }
    _mm256_storeu_ps(yp + ow, best);
  }
  return ow;
}

template <class T>
void maxPoolPlanes2d(const T* x, T* y, int64_t p0, int64_t p1, const WindowGeometry& g, const std::vector<int64_t>& wRange) {
  const int64_t inSize = g.inSize(), outSize = g.outSize(), IW = g.in[2], OW = g.out[2];
  // Columns whose windows lie inside the row (no W padding): vector code for float (densenet's and
  // shufflenet's 3x3 stride-2 MaxPool after the stem ran at ~0.2 G outputs/s scalar).
  int64_t owLo = 0, owHi = 0;
  while (owLo < OW && !(wRange[(size_t)owLo * 2] == 0 && wRange[(size_t)owLo * 2 + 1] == g.k[2])) ++owLo;
  owHi = owLo;
  while (owHi < OW && wRange[(size_t)owHi * 2] == 0 && wRange[(size_t)owHi * 2 + 1] == g.k[2]) ++owHi;
  for (int64_t p = p0; p < p1; ++p) {
    const T* xp = x + p * inSize;
    T* yp = y + p * outSize;
    for (int64_t oh = 0; oh < g.out[1]; ++oh, yp += OW) {
      const int64_t sh = oh * g.s[1] - g.padB[1];
      int64_t hlo, hhi;
      tapRange(sh, g.k[1], 1, g.in[1], hlo, hhi);
      int64_t vecFrom = OW, vecTo = OW;  // outputs the vector code wrote
      if constexpr (std::is_same_v<T, float>) {
        if (hhi > hlo && (g.s[2] == 1 || g.s[2] == 2)) {
          vecFrom = owLo;
          vecTo = g.s[2] == 1 ? maxPoolRowVector<1>(xp, sh, hlo, hhi, IW, g.k[2], g.padB[2], owLo, owHi, yp)
                              : maxPoolRowVector<2>(xp, sh, hlo, hhi, IW, g.k[2], g.padB[2], owLo, owHi, yp);
        }
      }
      for (int64_t ow = 0; ow < OW; ++ow) {
        if (ow == vecFrom) ow = vecTo;
        if (ow >= OW) break;
        const int64_t sw = ow * g.s[2] - g.padB[2];
        const int64_t wlo = wRange[(size_t)ow * 2], whi = wRange[(size_t)ow * 2 + 1];
        T best = std::numeric_limits<T>::lowest();
        bool first = true;
        for (int64_t a = hlo; a < hhi; ++a) {
          const T* row = xp + (sh + a) * IW + sw;
          for (int64_t c = wlo; c < whi; ++c) {
            const T v = row[c];
            if (first || v > best) {
              best = v;
              first = false;
            }
          }
        }
        yp[ow] = best;
      }
    }
  }
}

template <class T>
void maxPoolPlanes(const T* x, T* y, int64_t* ind, int64_t p0, int64_t p1, const WindowGeometry& g, bool colMajor) {
  const int64_t inSize = g.inSize(), outSize = g.outSize();
  // The W tap range of each output column, computed once for all planes and rows.
  std::vector<int64_t> wRange((size_t)g.out[2] * 2);
  for (int64_t ow = 0; ow < g.out[2]; ++ow)
    tapRange(ow * g.s[2] - g.padB[2], g.k[2], g.d[2], g.in[2], wRange[(size_t)ow * 2], wRange[(size_t)ow * 2 + 1]);
  if (!ind && g.k[0] == 1 && g.out[0] == 1 && g.in[0] == 1 && g.padB[0] == 0 && g.d[1] == 1 && g.d[2] == 1) {
    maxPoolPlanes2d<T>(x, y, p0, p1, g, wRange);
    return;
  }
  for (int64_t p = p0; p < p1; ++p) {
    const T* xp = x + p * inSize;
    T* yp = y + p * outSize;
    int64_t* ip = ind ? ind + p * outSize : nullptr;
    int64_t o = 0;
    for (int64_t od = 0; od < g.out[0]; ++od) {
      const int64_t sd = od * g.s[0] - g.padB[0];
      int64_t dlo, dhi;
      tapRange(sd, g.k[0], g.d[0], g.in[0], dlo, dhi);
      for (int64_t oh = 0; oh < g.out[1]; ++oh) {
        const int64_t sh = oh * g.s[1] - g.padB[1];
        int64_t hlo, hhi;
        tapRange(sh, g.k[1], g.d[1], g.in[1], hlo, hhi);
        for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
          const int64_t sw = ow * g.s[2] - g.padB[2];
          const int64_t wlo = wRange[(size_t)ow * 2], whi = wRange[(size_t)ow * 2 + 1];
          T best = std::numeric_limits<T>::lowest();
          int64_t bestIdx = -1;
          for (int64_t a = dlo; a < dhi; ++a) {
            const int64_t id = sd + a * g.d[0];
            for (int64_t b = hlo; b < hhi; ++b) {
              const int64_t ih = sh + b * g.d[1];
              const T* row = xp + (id * g.in[1] + ih) * g.in[2];
              for (int64_t c = wlo; c < whi; ++c) {
                const int64_t iw = sw + c * g.d[2];
                const T v = row[iw];
                if (v > best || bestIdx < 0) {
                  best = v;
                  bestIdx = (id * g.in[1] + ih) * g.in[2] + iw;
                }
              }
            }
          }
          yp[o] = best;
          if (ip) {
            int64_t idx = bestIdx < 0 ? 0 : bestIdx;
            if (colMajor && bestIdx >= 0) {
              const int64_t iw = bestIdx % g.in[2], ih = (bestIdx / g.in[2]) % g.in[1], id = bestIdx / (g.in[2] * g.in[1]);
              idx = (iw * g.in[1] + ih) * g.in[0] + id;
            }
            ip[o] = p * inSize + idx;
          }
        }
      }
    }
  }
}

template <class T>
void avgPoolPlanes(const T* x, T* y, int64_t p0, int64_t p1, const WindowGeometry& g, bool includePad) {
  const int64_t inSize = g.inSize(), outSize = g.outSize();
  // Each axis's valid tap range and divisor term per output index, worked out once per call rather
  // than per output (tapRange divides, four calls an output), then eight outputs at a time where
  // their taps allow: rec's 3x2 pool (19200 outputs) went from 0.14 to 0.06 ms. The sums run in
  // the same order as before.
  struct Taps {
    int64_t start, lo, hi, count;  // first input index (may be negative), valid taps [lo, hi), divisor term
  };
  std::vector<Taps> axes[3];
  for (int i = 0; i < 3; ++i) {
    axes[i].resize((size_t)g.out[i]);
    for (int64_t o = 0; o < g.out[i]; ++o) {
      Taps& t = axes[i][(size_t)o];
      t.start = o * g.s[i] - g.padB[i];
      int64_t plo, phi;
      tapRange(t.start, g.k[i], g.d[i], g.in[i], t.lo, t.hi);
      tapRange(t.start + g.padB[i], g.k[i], g.d[i], g.in[i] + g.padB[i] + g.padE[i], plo, phi);
      t.count = includePad ? phi - plo : t.hi - t.lo;
    }
  }
  for (int64_t p = p0; p < p1; ++p) {
    const T* xp = x + p * inSize;
    T* yp = y + p * outSize;
    int64_t o = 0;
    for (const Taps& td : axes[0]) {
      for (const Taps& th : axes[1]) {
        int64_t ow = 0;
        if constexpr (std::is_same_v<T, float>) {
          // W stride 1 or 2, no W dilation: eight outputs at a time while all their W taps lie in
          // the row (and their 16-float reads too), each lane summing the same taps in the same
          // order as the scalar loop below, so the same bits.
          if (g.d[2] == 1 && (g.s[2] == 1 || g.s[2] == 2))
            for (; ow + 8 <= g.out[2]; ow += 8) {
              const Taps& first = axes[2][(size_t)ow];
              const Taps& last = axes[2][(size_t)ow + 7];
              if (first.lo != 0 || last.hi != g.k[2] || last.start + g.k[2] + 8 > g.in[2]) break;
              __m256 sum = _mm256_setzero_ps();
              for (int64_t a = td.lo; a < td.hi; ++a) {
                const int64_t id = td.start + a * g.d[0];
                for (int64_t b = th.lo; b < th.hi; ++b) {
                  const float* row = xp + (id * g.in[1] + th.start + b * g.d[1]) * g.in[2] + first.start;
                  for (int64_t c = 0; c < g.k[2]; ++c)
                    sum = _mm256_add_ps(sum, g.s[2] == 1 ? poolTap<1>(row + c) : poolTap<2>(row + c));
                }
              }
              alignas(32) float cnt[8];
              for (int j = 0; j < 8; ++j) cnt[j] = (float)(td.count * th.count * axes[2][(size_t)(ow + j)].count);
              // Every lane's count is positive here (its taps are all valid).
              _mm256_storeu_ps(yp + o, _mm256_div_ps(sum, _mm256_load_ps(cnt)));
              o += 8;
            }
        }
        for (; ow < g.out[2]; ++ow) {
          const Taps& tw = axes[2][(size_t)ow];
          T sum = 0;
          for (int64_t a = td.lo; a < td.hi; ++a) {
            const int64_t id = td.start + a * g.d[0];
            for (int64_t b = th.lo; b < th.hi; ++b) {
              const int64_t ih = th.start + b * g.d[1];
              const T* row = xp + (id * g.in[1] + ih) * g.in[2] + tw.start;
              for (int64_t c = tw.lo; c < tw.hi; ++c) sum += row[c * g.d[2]];
            }
          }
          const int64_t cnt = td.count * th.count * tw.count;
          yp[o++] = cnt > 0 ? sum / (T)cnt : T(0);
        }
      }
    }
  }
}

class MaxPoolKernel : public Kernel {
 public:
  MaxPoolKernel(WindowAttrs attrs, bool ceilMode, bool colMajor)
      : m_attrs(std::move(attrs)), m_ceil(ceilMode), m_colMajor(colMajor) {}

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument("MaxPool needs an input");
    const Tensor& X = ctx.input(0);
    switch (X.dtype()) {
      case DType::Float: return runT<float>(ctx, X);
      case DType::Double: return runT<double>(ctx, X);
      case DType::Int8: return runT<int8_t>(ctx, X);
      case DType::UInt8: return runT<uint8_t>(ctx, X);
      default: return unsupported("MaxPool does not support dtype " + dtypeName(X.dtype()));
    }
  }

 private:
  template <class T>
  Status runT(KernelContext& ctx, const Tensor& X) const {
    WindowGeometry g;
    QS_RETURN_IF_ERROR(poolGeometry(m_attrs, m_ceil, X, "MaxPool", g));
    const Shape ys = outputShape(X, g);
    ctx.outputs[0] = Tensor(X.dtype(), ys);
    int64_t* ind = nullptr;
    if (ctx.outputCount() > 1) {
      ctx.outputs[1] = Tensor(DType::Int64, ys);
      ind = ctx.outputs[1].data<int64_t>();
    }
    const int64_t planes = X.dim(0) * X.dim(1);
    const T* x = X.data<T>();
    T* y = ctx.outputs[0].data<T>();
    const int64_t work = std::max<int64_t>(1, g.outSize() * g.kSize());
    ctx.parallelFor(planes, std::max<int64_t>(1, 32768 / work),
                    [&](int64_t b, int64_t e) { maxPoolPlanes<T>(x, y, ind, b, e, g, m_colMajor); });
    return Status::ok();
  }

  WindowAttrs m_attrs;
  bool m_ceil, m_colMajor;
};

class AvgPoolKernel : public Kernel {
 public:
  AvgPoolKernel(WindowAttrs attrs, bool ceilMode, bool includePad)
      : m_attrs(std::move(attrs)), m_ceil(ceilMode), m_includePad(includePad) {}

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument("AveragePool needs an input");
    const Tensor& X = ctx.input(0);
    switch (X.dtype()) {
      case DType::Float: return runT<float>(ctx, X);
      case DType::Double: return runT<double>(ctx, X);
      default: return unsupported("AveragePool does not support dtype " + dtypeName(X.dtype()));
    }
  }

 private:
  template <class T>
  Status runT(KernelContext& ctx, const Tensor& X) const {
    WindowGeometry g;
    QS_RETURN_IF_ERROR(poolGeometry(m_attrs, m_ceil, X, "AveragePool", g));
    ctx.outputs[0] = Tensor(X.dtype(), outputShape(X, g));
    const int64_t planes = X.dim(0) * X.dim(1);
    const T* x = X.data<T>();
    T* y = ctx.outputs[0].data<T>();
    const int64_t work = std::max<int64_t>(1, g.outSize() * g.kSize());
    ctx.parallelFor(planes, std::max<int64_t>(1, 32768 / work),
                    [&](int64_t b, int64_t e) { avgPoolPlanes<T>(x, y, b, e, g, m_includePad); });
    return Status::ok();
  }

  WindowAttrs m_attrs;
  bool m_ceil, m_includePad;
};

template <bool IsMax>
class GlobalPoolKernel : public Kernel {
 public:
  Status run(KernelContext& ctx) const override {
    const char* op = IsMax ? "GlobalMaxPool" : "GlobalAveragePool";
    if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument(std::string(op) + " needs an input");
    const Tensor& X = ctx.input(0);
    if (X.rank() < 2) return invalidArgument(std::string(op) + " input must have rank >= 2, got " + shapeToString(X.shape()));
    switch (X.dtype()) {
      case DType::Float: return runT<float>(ctx, X);
      case DType::Double: return runT<double>(ctx, X);
      default: return unsupported(std::string(op) + " does not support dtype " + dtypeName(X.dtype()));
    }
  }

 private:
  template <class T>
  Status runT(KernelContext& ctx, const Tensor& X) const {
    Shape ys = {X.dim(0), X.dim(1)};
    ys.resize((size_t)X.rank(), 1);
    ctx.outputs[0] = Tensor(X.dtype(), ys);
    const int64_t planes = X.dim(0) * X.dim(1);
    const int64_t S = planes == 0 ? 0 : X.numel() / planes;
    const T* x = X.data<T>();
    T* y = ctx.outputs[0].data<T>();
    ctx.parallelFor(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* xp = x + p * S;
        if constexpr (IsMax) {
          T m = S > 0 ? xp[0] : T(0);
          for (int64_t i = 1; i < S; ++i) m = xp[i] > m ? xp[i] : m;
          y[p] = m;
        } else if constexpr (std::is_same_v<T, float>) {
          // Two 8-lane partial sums: a sequential float sum is latency-bound (and less accurate).
          __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
          int64_t i = 0;
          for (; i + 16 <= S; i += 16) {
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(xp + i));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(xp + i + 8));
          }
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
          float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
          for (; i < S; ++i) s += xp[i];
          y[p] = S > 0 ? s / (float)S : 0.f;
        } else {
          T s = 0;
          for (int64_t i = 0; i < S; ++i) s += xp[i];
          y[p] = S > 0 ? s / (T)S : T(0);
        }
      }
    });
    return Status::ok();
  }
};

Status checkKernelShape(const KernelInit& init, const WindowAttrs& attrs) {
  if (attrs.kernelShape.empty()) return kernelError(StatusCode::InvalidModel, "missing attribute 'kernel_shape'");
  if (attrs.kernelShape.size() > 3)
    return kernelError(StatusCode::Unsupported,
                     "only 1-D..3-D pooling is supported, kernel_shape has " + std::to_string(attrs.kernelShape.size()) +
                         " dims");
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Kernel>> createMaxPool(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, false);
  const int64_t ceilMode = a.i("ceil_mode", 0);
  const int64_t storageOrder = a.i("storage_order", 0);
  if (!a.ok()) return a.status();
  QS_RETURN_IF_ERROR(checkKernelShape(init, attrs));
  if (storageOrder != 0 && storageOrder != 1)
    return kernelError(StatusCode::InvalidModel, "storage_order must be 0 or 1, got " + std::to_string(storageOrder));
  return std::unique_ptr<Kernel>(std::make_unique<MaxPoolKernel>(std::move(attrs), ceilMode != 0, storageOrder == 1));
}

Result<std::unique_ptr<Kernel>> createAveragePool(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, false);
  const int64_t ceilMode = a.i("ceil_mode", 0);
  const int64_t includePad = a.i("count_include_pad", 0);
  if (!a.ok()) return a.status();
  QS_RETURN_IF_ERROR(checkKernelShape(init, attrs));
  return std::unique_ptr<Kernel>(std::make_unique<AvgPoolKernel>(std::move(attrs), ceilMode != 0, includePad != 0));
}

Result<std::unique_ptr<Kernel>> createGlobalAveragePool(const KernelInit&) {
  return std::unique_ptr<Kernel>(std::make_unique<GlobalPoolKernel<false>>());
}

Result<std::unique_ptr<Kernel>> createGlobalMaxPool(const KernelInit&) {
  return std::unique_ptr<Kernel>(std::make_unique<GlobalPoolKernel<true>>());
}

}  // namespace qs
