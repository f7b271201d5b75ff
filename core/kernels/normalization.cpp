// BatchNormalization, InstanceNormalization, LayerNormalization, LpNormalization (FP32).
#include "core/kernels/normalization.h"

#include "core/kernels/elementwise.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

namespace qs {

namespace {

Status requireFloat(const Tensor& t, const char* op, const char* what) {
  if (t.dtype() != DType::Float)
    return unsupported(std::string(op) + " supports float32 only, input " + what + " is " + dtypeName(t.dtype()));
  return Status::ok();
}

// ---------------------------------------------------------------- BatchNormalization
// Opsets 1..21. Inference: y = (x - mean) / sqrt(var + eps) * scale + B per channel (axis 1).
// training_mode=1 (opset 14+): batch statistics, outputs running_mean / running_var.
class BatchNormKernel : public Kernel {
 public:
  BatchNormKernel(float eps, float momentum, bool training) : m_eps(eps), m_momentum(momentum), m_training(training) {}

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 5) return invalidArgument("BatchNormalization needs 5 inputs, got " + std::to_string(ctx.inputCount()));
    for (size_t i = 0; i < 5; ++i)
      if (!ctx.hasInput(i)) return invalidArgument("BatchNormalization input " + std::to_string(i) + " is missing");
    const Tensor& X = ctx.input(0);
    static const char* names[] = {"X", "scale", "B", "mean", "var"};
    for (size_t i = 0; i < 5; ++i) QS_RETURN_IF_ERROR(requireFloat(ctx.input(i), "BatchNormalization", names[i]));
    if (X.rank() < 1) return invalidArgument("BatchNormalization X must have rank >= 1");
    const int64_t N = X.dim(0), C = X.rank() >= 2 ? X.dim(1) : 1;
    const int64_t S = C == 0 || N == 0 ? 0 : X.numel() / (N * C);
    for (size_t i = 1; i < 5; ++i)
      if (ctx.input(i).numel() != C)
        return invalidArgument(std::string("BatchNormalization ") + names[i] + " has shape " +
                               shapeToString(ctx.input(i).shape()) + ", expected [" + std::to_string(C) + "] for X " +
                               shapeToString(X.shape()));
    const float* x = X.data<float>();
    const float* scale = ctx.input(1).data<float>();
    const float* bias = ctx.input(2).data<float>();
    const float* inMean = ctx.input(3).data<float>();
    const float* inVar = ctx.input(4).data<float>();
    std::vector<float> mean(inMean, inMean + C), var(inVar, inVar + C);
    if (m_training) {
      const double cnt = (double)N * (double)S;
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n) {
          const float* p = x + (n * C + c) * S;
          for (int64_t i = 0; i < S; ++i) s += p[i];
        }
        const double m = cnt > 0 ? s / cnt : 0.0;
        double v = 0;
        for (int64_t n = 0; n < N; ++n) {
          const float* p = x + (n * C + c) * S;
          for (int64_t i = 0; i < S; ++i) v += (p[i] - m) * (p[i] - m);
        }
        mean[(size_t)c] = (float)m;
        var[(size_t)c] = (float)(cnt > 0 ? v / cnt : 0.0);
      }
    }
    std::vector<float> a((size_t)C), b((size_t)C);
    for (int64_t c = 0; c < C; ++c) {
      a[(size_t)c] = scale[c] / std::sqrt(var[(size_t)c] + m_eps);
      b[(size_t)c] = bias[c] - mean[(size_t)c] * a[(size_t)c];
    }
    ctx.outputs[0] = Tensor(DType::Float, X.shape());
    float* y = ctx.outputs[0].data<float>();
    ctx.parallelFor(N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)), [&](int64_t s, int64_t e) {
      for (int64_t p = s; p < e; ++p) {
        const float av = a[(size_t)(p % C)], bv = b[(size_t)(p % C)];
        const float* xp = x + p * S;
        float* yp = y + p * S;
        for (int64_t i = 0; i < S; ++i) yp[i] = xp[i] * av + bv;
      }
    });
    // Optional extra outputs: running statistics (training) or pass-through statistics.
    for (size_t o = 1; o < ctx.outputCount() && o < 5; ++o) {
      Tensor t(DType::Float, {C});
      float* d = t.data<float>();
      for (int64_t c = 0; c < C; ++c) {
        const bool isMean = o == 1 || o == 3;
        const float batchStat = isMean ? mean[(size_t)c] : var[(size_t)c];
        const float running = isMean ? inMean[c] : inVar[c];
        if (o <= 2 && m_training)
          d[c] = running * m_momentum + batchStat * (1.f - m_momentum);
        else
          d[c] = batchStat;
      }
      ctx.outputs[o] = std::move(t);
    }
    return Status::ok();
  }

 private:
  float m_eps, m_momentum;
  bool m_training;
};

// ---------------------------------------------------------------- InstanceNormalization
// Opsets 1..21: per (n, c) statistics over the spatial dims.
class InstanceNormKernel : public Kernel {
 public:
  explicit InstanceNormKernel(float eps) : m_eps(eps) {}

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 3 || !ctx.hasInput(0) || !ctx.hasInput(1) || !ctx.hasInput(2))
      return invalidArgument("InstanceNormalization needs inputs input, scale, B");
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireFloat(X, "InstanceNormalization", "input"));
    QS_RETURN_IF_ERROR(requireFloat(ctx.input(1), "InstanceNormalization", "scale"));
    QS_RETURN_IF_ERROR(requireFloat(ctx.input(2), "InstanceNormalization", "B"));
    if (X.rank() < 2) return invalidArgument("InstanceNormalization input must have rank >= 2, got " + shapeToString(X.shape()));
    const int64_t N = X.dim(0), C = X.dim(1);
    const int64_t S = N * C == 0 ? 0 : X.numel() / (N * C);
    if (ctx.input(1).numel() != C || ctx.input(2).numel() != C)
      return invalidArgument("InstanceNormalization scale/B must have " + std::to_string(C) + " elements, got " +
                             shapeToString(ctx.input(1).shape()) + " and " + shapeToString(ctx.input(2).shape()));
    const float* x = X.data<float>();
    const float* scale = ctx.input(1).data<float>();
    const float* bias = ctx.input(2).data<float>();
    ctx.outputs[0] = Tensor(DType::Float, X.shape());
    float* y = ctx.outputs[0].data<float>();
    ctx.parallelFor(N * C, 1, [&](int64_t s, int64_t e) {
      for (int64_t p = s; p < e; ++p) {
        const float* xp = x + p * S;
        float* yp = y + p * S;
        double sum = 0;
        for (int64_t i = 0; i < S; ++i) sum += xp[i];
        const float m = S > 0 ? (float)(sum / (double)S) : 0.f;
        double sq = 0;
        for (int64_t i = 0; i < S; ++i) {
          const float d = xp[i] - m;
          sq += (double)d * d;
        }
        const float var = S > 0 ? (float)(sq / (double)S) : 0.f;
        const float a = scale[p % C] / std::sqrt(var + m_eps);
        const float b = bias[p % C] - m * a;
        for (int64_t i = 0; i < S; ++i) yp[i] = xp[i] * a + b;
      }
    });
    return Status::ok();
  }

 private:
  float m_eps;
};

// ---------------------------------------------------------------- LayerNormalization
// One row: mean and 1/sqrt(variance + eps) with 8-lane AVX2 sums (two passes: the centred second
// pass keeps the variance accurate where mean^2 >> variance), then y = (x - m) * inv * scale (+ b).
// The scalar loops it replaces summed in one dependency chain, 4 cycles an element: 3% of swin_t.
// Lane sums change the rounding of the statistics (not their accuracy), as in ONNX Runtime's MLAS.
float laneSum(__m256 a, __m256 b) {
  const __m256 v = _mm256_add_ps(a, b);
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

void layerNormRow(const float* xp, float* yp, int64_t n, const float* scale, const float* bias, float eps, float& mean,
                  float& invStd) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(xp + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(xp + i + 8));
  }
  float sum = laneSum(s0, s1);
  for (; i < n; ++i) sum += xp[i];
  const float m = sum / (float)n;
  const __m256 vm = _mm256_set1_ps(m);
  s0 = _mm256_setzero_ps();
  s1 = _mm256_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(xp + i), vm), d1 = _mm256_sub_ps(_mm256_loadu_ps(xp + i + 8), vm);
    s0 = _mm256_fmadd_ps(d0, d0, s0);
    s1 = _mm256_fmadd_ps(d1, d1, s1);
  }
  float sq = laneSum(s0, s1);
  for (; i < n; ++i) sq += (xp[i] - m) * (xp[i] - m);
  const float inv = 1.f / std::sqrt(sq / (float)n + eps);
  const __m256 vi = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 c = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xp + i), vm), vi);
    const __m256 sc = _mm256_loadu_ps(scale + i);
    _mm256_storeu_ps(yp + i, bias ? _mm256_fmadd_ps(c, sc, _mm256_loadu_ps(bias + i)) : _mm256_mul_ps(c, sc));
  }
  for (; i < n; ++i) yp[i] = bias ? (xp[i] - m) * inv * scale[i] + bias[i] : (xp[i] - m) * inv * scale[i];
  mean = m;
  invStd = inv;
}

// Opset 17..21: statistics over dims [axis, rank); Scale and optional B broadcast to those dims.
// Optional outputs Mean and InvStdDev have shape X.shape[:axis] + [1] * (rank - axis).
class LayerNormKernel : public Kernel {
 public:
  LayerNormKernel(int64_t axis, float eps) : m_axis(axis), m_eps(eps) {}

  // Expands a tensor unidirectionally broadcast to `target` into a contiguous vector.
  static Status expandTo(const Tensor& t, const Shape& target, std::vector<float>& out, const char* what) {
    const Shape& s = t.shape();
    if (s.size() > target.size())
      return invalidArgument(std::string("LayerNormalization ") + what + " " + shapeToString(s) +
                             " does not broadcast to " + shapeToString(target));
    const size_t r = target.size(), off = r - s.size();
    std::vector<int64_t> st(r, 0);
    int64_t acc = 1;
    for (size_t i = r; i-- > off;) {
      const int64_t d = s[i - off];
      if (d != 1 && d != target[i])
        return invalidArgument(std::string("LayerNormalization ") + what + " " + shapeToString(s) +
                               " does not broadcast to " + shapeToString(target));
      st[i] = d == 1 ? 0 : acc;
      acc *= d;
    }
    const int64_t n = numelOf(target);
    out.resize((size_t)n);
    const float* src = t.data<float>();
    std::vector<int64_t> idx(r, 0);
    for (int64_t k = 0; k < n; ++k) {
      int64_t o = 0;
      for (size_t i = 0; i < r; ++i) o += idx[i] * st[i];
      out[(size_t)k] = src[o];
      for (size_t i = r; i-- > 0;) {
        if (++idx[i] < target[i]) break;
        idx[i] = 0;
      }
    }
    return Status::ok();
  }

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
      return invalidArgument("LayerNormalization needs inputs X and Scale");
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireFloat(X, "LayerNormalization", "X"));
    QS_RETURN_IF_ERROR(requireFloat(ctx.input(1), "LayerNormalization", "Scale"));
    const bool hasB = ctx.hasInput(2);
    if (hasB) QS_RETURN_IF_ERROR(requireFloat(ctx.input(2), "LayerNormalization", "B"));
    int64_t axis = m_axis;
    if (!normalizeAxis(axis, X.rank()))
      return invalidArgument("LayerNormalization axis " + std::to_string(m_axis) + " out of range for X " +
                             shapeToString(X.shape()));
    const Shape normShape(X.shape().begin() + axis, X.shape().end());
    const int64_t inner = numelOf(normShape);
    const int64_t outer = inner == 0 ? 0 : X.numel() / inner;
    std::vector<float> scaleBuf, biasBuf;
    const float* scale = ctx.input(1).data<float>();
    const float* bias = hasB ? ctx.input(2).data<float>() : nullptr;
    if (ctx.input(1).shape() != normShape) {
      QS_RETURN_IF_ERROR(expandTo(ctx.input(1), normShape, scaleBuf, "Scale"));
      scale = scaleBuf.data();
    }
    if (hasB && ctx.input(2).shape() != normShape) {
      QS_RETURN_IF_ERROR(expandTo(ctx.input(2), normShape, biasBuf, "B"));
      bias = biasBuf.data();
    }
    ctx.outputs[0] = Tensor(DType::Float, X.shape());
    float* y = ctx.outputs[0].data<float>();
    Shape statShape(X.shape().begin(), X.shape().begin() + axis);
    statShape.resize((size_t)X.rank(), 1);
    float* meanOut = nullptr;
    float* invOut = nullptr;
    if (ctx.outputCount() > 1) {
      ctx.outputs[1] = Tensor(DType::Float, statShape);
      meanOut = ctx.outputs[1].data<float>();
    }
    if (ctx.outputCount() > 2) {
      ctx.outputs[2] = Tensor(DType::Float, statShape);
      invOut = ctx.outputs[2].data<float>();
    }
    const float* x = X.data<float>();
    ctx.parallelFor(outer, std::max<int64_t>(1, 8192 / std::max<int64_t>(inner, 1)), [&](int64_t s, int64_t e) {
      for (int64_t r = s; r < e; ++r) {
        float m, inv;
        layerNormRow(x + r * inner, y + r * inner, inner, scale, bias, m_eps, m, inv);
        if (meanOut) meanOut[r] = m;
        if (invOut) invOut[r] = inv;
      }
    });
    return Status::ok();
  }

 private:
  int64_t m_axis;
  float m_eps;
};

// ---------------------------------------------------------------- SkipLayerNormalization
// ai.quantscope 1 (made by the graph rewrites from a residual Add feeding a last-axis
// LayerNormalization, as ONNX Runtime's SkipLayerNormalization): S = X + Skip, Y = LayerNorm(S)
// over the last axis with Scale and optional B; output 1 (optional) is S, where the sum has other
// readers (pre-LN blocks). Row by row while the sum is in cache: the Add's and LayerNormalization's
// own arithmetic, so their bits.
class SkipLayerNormKernel : public Kernel {
 public:
  explicit SkipLayerNormKernel(float eps) : m_eps(eps) {}

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 3 || !ctx.hasInput(0) || !ctx.hasInput(1) || !ctx.hasInput(2))
      return invalidArgument("SkipLayerNormalization needs inputs X, Skip and Scale");
    const Tensor &X = ctx.input(0), &K = ctx.input(1);
    QS_RETURN_IF_ERROR(requireFloat(X, "SkipLayerNormalization", "X"));
    QS_RETURN_IF_ERROR(requireFloat(K, "SkipLayerNormalization", "Skip"));
    QS_RETURN_IF_ERROR(requireFloat(ctx.input(2), "SkipLayerNormalization", "Scale"));
    const bool hasB = ctx.hasInput(3);
    if (hasB) QS_RETURN_IF_ERROR(requireFloat(ctx.input(3), "SkipLayerNormalization", "B"));
    ew::BroadcastPlan plan;
    if (!ew::planBroadcast({&X.shape(), &K.shape()}, plan) || plan.outShape.empty())
      return invalidArgument("SkipLayerNormalization: X " + shapeToString(X.shape()) + " and Skip " +
                             shapeToString(K.shape()) + " do not broadcast to a tensor of rank >= 1");
    const Shape& sShape = plan.outShape;
    const int64_t L = sShape.back();
    const int64_t rows = L == 0 ? 0 : numelOf(sShape) / L;
    const Shape normShape{L};
    std::vector<float> scaleBuf, biasBuf;
    const float* scale = ctx.input(2).data<float>();
    const float* bias = hasB ? ctx.input(3).data<float>() : nullptr;
    if (ctx.input(2).shape() != normShape) {
      QS_RETURN_IF_ERROR(LayerNormKernel::expandTo(ctx.input(2), normShape, scaleBuf, "Scale"));
      scale = scaleBuf.data();
    }
    if (hasB && ctx.input(3).shape() != normShape) {
      QS_RETURN_IF_ERROR(LayerNormKernel::expandTo(ctx.input(3), normShape, biasBuf, "B"));
      bias = biasBuf.data();
    }
    ctx.outputs[0] = Tensor(DType::Float, sShape);
    float* y = ctx.outputs[0].data<float>();
    float* sum = nullptr;
    if (ctx.outputCount() > 1) {
      ctx.outputs[1] = Tensor(DType::Float, sShape);
      sum = ctx.outputs[1].data<float>();
    }
    const float* x = X.data<float>();
    const float* k = K.data<float>();
    Tensor broadcastSum;
    if (X.shape() != K.shape()) {
      // Rare: the residual broadcasts. The sum is made first (as the Add would), then normalised.
      broadcastSum = Tensor(DType::Float, sShape);
      ew::binaryBroadcast(plan, X.data<float>(), K.data<float>(), broadcastSum.data<float>(), std::plus<float>(), ctx);
      if (sum) std::memcpy(sum, broadcastSum.data<float>(), sizeof(float) * (size_t)broadcastSum.numel());
    }
    const float* whole = broadcastSum.numel() > 0 ? broadcastSum.data<float>() : nullptr;
    ctx.parallelFor(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(L, 1)), [&](int64_t s, int64_t e) {
      thread_local std::vector<float> tmp;
      if (!sum && !whole) tmp.resize((size_t)L);
      float m, inv;
      for (int64_t r = s; r < e; ++r) {
        const float* sr;
        if (whole) {
          sr = whole + r * L;
        } else {
          float* dst = sum ? sum + r * L : tmp.data();
          const float *xr = x + r * L, *kr = k + r * L;
          for (int64_t i = 0; i < L; ++i) dst[i] = xr[i] + kr[i];
          sr = dst;
        }
        layerNormRow(sr, y + r * L, L, scale, bias, m_eps, m, inv);
      }
    });
    return Status::ok();
  }

 private:
  float m_eps;
};

// ---------------------------------------------------------------- LpNormalization
// Opsets 1..21: x / ||x||_p along axis (p = 1 or 2); a zero norm gives 0.
class LpNormKernel : public Kernel {
 public:
  LpNormKernel(int64_t axis, int64_t p) : m_axis(axis), m_p(p) {}

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 1 || !ctx.hasInput(0)) return invalidArgument("LpNormalization needs an input");
    const Tensor& X = ctx.input(0);
    QS_RETURN_IF_ERROR(requireFloat(X, "LpNormalization", "input"));
    int64_t axis = m_axis;
    if (!normalizeAxis(axis, X.rank()))
      return invalidArgument("LpNormalization axis " + std::to_string(m_axis) + " out of range for " +
                             shapeToString(X.shape()));
    const int64_t len = X.dim((int)axis);
    int64_t inner = 1;
    for (int i = (int)axis + 1; i < X.rank(); ++i) inner *= X.dim(i);
    const int64_t outer = len * inner == 0 ? 0 : X.numel() / (len * inner);
    ctx.outputs[0] = Tensor(DType::Float, X.shape());
    const float* x = X.data<float>();
    float* y = ctx.outputs[0].data<float>();
    ctx.parallelFor(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(len, 1)), [&](int64_t s, int64_t e) {
      for (int64_t q = s; q < e; ++q) {
        const int64_t o = q / inner, i = q % inner;
        const float* xp = x + o * len * inner + i;
        float* yp = y + o * len * inner + i;
        float norm = 0.f;
        if (m_p == 1) {
          for (int64_t k = 0; k < len; ++k) norm += std::fabs(xp[k * inner]);
        } else {
          for (int64_t k = 0; k < len; ++k) norm += xp[k * inner] * xp[k * inner];
          norm = std::sqrt(norm);
        }
        const float inv = norm != 0.f ? 1.f / norm : 0.f;
        for (int64_t k = 0; k < len; ++k) yp[k * inner] = xp[k * inner] * inv;
      }
    });
    return Status::ok();
  }

 private:
  int64_t m_axis, m_p;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createBatchNormalization(const KernelInit& init) {
  AttrReader a(init);
  const float eps = a.f("epsilon", 1e-5f);
  const float momentum = a.f("momentum", 0.9f);
  const int64_t training = init.opset >= 14 ? a.i("training_mode", 0) : 0;
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<BatchNormKernel>(eps, momentum, training != 0));
}

Result<std::unique_ptr<Kernel>> createInstanceNormalization(const KernelInit& init) {
  AttrReader a(init);
  const float eps = a.f("epsilon", 1e-5f);
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<InstanceNormKernel>(eps));
}

Result<std::unique_ptr<Kernel>> createLayerNormalization(const KernelInit& init) {
  AttrReader a(init);
  const int64_t axis = a.i("axis", -1);
  const float eps = a.f("epsilon", 1e-5f);
  const int64_t stash = a.i("stash_type", 1);
  if (!a.ok()) return a.status();
  if (stash != 1)
    return kernelError(StatusCode::Unsupported,
                     "stash_type " + std::to_string(stash) + " is not supported (float32 statistics only)");
  return std::unique_ptr<Kernel>(std::make_unique<LayerNormKernel>(axis, eps));
}

Result<std::unique_ptr<Kernel>> createSkipLayerNormalization(const KernelInit& init) {
  AttrReader a(init);
  const float eps = a.f("epsilon", 1e-5f);
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<SkipLayerNormKernel>(eps));
}

Result<std::unique_ptr<Kernel>> createLpNormalization(const KernelInit& init) {
  AttrReader a(init);
  const int64_t axis = a.i("axis", -1);
  const int64_t p = a.i("p", 2);
  if (!a.ok()) return a.status();
  if (p != 1 && p != 2) return kernelError(StatusCode::InvalidModel, "p must be 1 or 2, got " + std::to_string(p));
  return std::unique_ptr<Kernel>(std::make_unique<LpNormKernel>(axis, p));
}

}  // namespace qs
