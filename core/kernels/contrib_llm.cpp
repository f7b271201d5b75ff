// com.microsoft contrib ops of LLM graphs (opset 1), FP32: see contrib_llm.h.
#include "core/kernels/contrib_llm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/exec/kernel_registry.h"
#include "core/kernels/gemm.h"

namespace qs {

namespace {

// Largest tensor (elements) a kernel here allocates from shapes and attributes: keeps hostile
// values from asking for terabytes.
constexpr int64_t kMaxElements = int64_t(1) << 31;

std::string str(int64_t v) { return std::to_string(v); }

Status needFloat(const KernelContext& ctx, size_t i, const char* op, const char* name) {
  if (!ctx.hasInput(i)) return invalidArgument(std::string(op) + ": input '" + name + "' is missing");
  if (ctx.input(i).dtype() != DType::Float)
    return unsupported(std::string(op) + " supports float32 only, input '" + name + "' is " +
                       dtypeName(ctx.input(i).dtype()));
  return Status::ok();
}

bool presentNonEmpty(const KernelContext& ctx, size_t i) { return ctx.hasInput(i) && ctx.input(i).numel() > 0; }

// ---------------------------------------------------------------- RMS normalisation
// y = x / sqrt(mean(x^2) + eps) * gamma over rows of `n` values; invStd (may be null) per row.
void rmsNormRows(const KernelContext& ctx, const float* x, const float* gamma, float* y, float* invStd, int64_t rows,
                 int64_t n, float eps) {
  ctx.parallelFor(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += (double)xr[i] * xr[i];
      const float inv = (float)(1.0 / std::sqrt(ss / (double)std::max<int64_t>(n, 1) + (double)eps));
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * gamma[i];
      if (invStd) invStd[r] = inv;
    }
  });
}

// SimplifiedLayerNormalization (ORT: default domain opset 1+, and com.microsoft here).
class SimplifiedLayerNormKernel : public Kernel {
 public:
  SimplifiedLayerNormKernel(int64_t axis, float eps) : m_axis(axis), m_eps(eps) {}
  Status run(KernelContext& ctx) const override {
    static const char* op = "SimplifiedLayerNormalization";
    QS_RETURN_IF_ERROR(needFloat(ctx, 0, op, "X"));
    QS_RETURN_IF_ERROR(needFloat(ctx, 1, op, "scale"));
    const Tensor& X = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    int64_t axis = m_axis;
    if (!normalizeAxis(axis, X.rank()))
      return invalidArgument("axis " + str(m_axis) + " is out of range for X of shape " + shapeToString(X.shape()));
    int64_t n = 1;
    for (int d = (int)axis; d < X.rank(); ++d) n *= X.dim(d);
    if (scale.numel() != n)
      return invalidArgument("scale has shape " + shapeToString(scale.shape()) + ", expected " + str(n) +
                             " values for X " + shapeToString(X.shape()) + " normalised from axis " + str(axis));
    const int64_t rows = n == 0 ? 0 : X.numel() / n;
    Tensor Y(DType::Float, X.shape());
    Tensor inv;
    if (ctx.outputCount() > 1) {
      Shape s = X.shape();
      for (size_t d = (size_t)axis; d < s.size(); ++d) s[d] = 1;
      inv = Tensor(DType::Float, s);
    }
    rmsNormRows(ctx, X.data<float>(), scale.data<float>(), Y.data<float>(), inv.empty() ? nullptr : inv.data<float>(),
                rows, n, m_eps);
    ctx.outputs[0] = std::move(Y);
    if (ctx.outputCount() > 1) ctx.outputs[1] = std::move(inv);
    return Status::ok();
  }

 private:
  int64_t m_axis;
  float m_eps;
};

// SkipSimplifiedLayerNormalization (com.microsoft 1): s = input + skip (+ bias), y = RMSNorm(s) * gamma.
class SkipSimplifiedLayerNormKernel : public Kernel {
 public:
  explicit SkipSimplifiedLayerNormKernel(float eps) : m_eps(eps) {}
  Status run(KernelContext& ctx) const override {
    static const char* op = "SkipSimplifiedLayerNormalization";
    QS_RETURN_IF_ERROR(needFloat(ctx, 0, op, "input"));
    QS_RETURN_IF_ERROR(needFloat(ctx, 1, op, "skip"));
    QS_RETURN_IF_ERROR(needFloat(ctx, 2, op, "gamma"));
    const bool hasBias = ctx.hasInput(3);
    if (hasBias) QS_RETURN_IF_ERROR(needFloat(ctx, 3, op, "bias"));
    const Tensor& X = ctx.input(0);
    const Tensor& skip = ctx.input(1);
    const Tensor& gamma = ctx.input(2);
    if (X.rank() != 2 && X.rank() != 3)
      return invalidArgument("input must be 2-D or 3-D, got shape " + shapeToString(X.shape()));
    const int64_t H = X.dim(X.rank() - 1);
    // skip: the input's shape, or (3-D input) [1,S,H] or [S,H], broadcast over the batch.
    const bool sameShape = skip.shape() == X.shape();
    const bool perBatch = X.rank() == 3 && skip.numel() == X.dim(1) * H && skip.rank() >= 2 &&
                          skip.dim(skip.rank() - 1) == H && skip.dim(skip.rank() - 2) == X.dim(1) &&
                          (skip.rank() == 2 || (skip.rank() == 3 && skip.dim(0) == 1));
    if (!sameShape && !perBatch)
      return invalidArgument("skip has shape " + shapeToString(skip.shape()) + ", expected the input's " +
                             shapeToString(X.shape()) + " or [1,S,H]");
    if (gamma.numel() != H)
      return invalidArgument("gamma has shape " + shapeToString(gamma.shape()) + ", expected [" + str(H) + "]");
    if (hasBias && ctx.input(3).numel() != H)
      return invalidArgument("bias has shape " + shapeToString(ctx.input(3).shape()) + ", expected [" + str(H) + "]");
    const int64_t rows = H == 0 ? 0 : X.numel() / H;
    const int64_t skipRows = H == 0 ? 0 : skip.numel() / H;
    Tensor sum(DType::Float, X.shape());
    const float* x = X.data<float>();
    const float* sk = skip.data<float>();
    const float* bias = hasBias ? ctx.input(3).data<float>() : nullptr;
    float* s = sum.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* skr = sk + (r % std::max<int64_t>(skipRows, 1)) * H;
      for (int64_t i = 0; i < H; ++i) s[r * H + i] = x[r * H + i] + skr[i] + (bias ? bias[i] : 0.f);
    }
    Shape statShape = X.shape();
    statShape.back() = 1;
    Tensor Y(DType::Float, X.shape());
    Tensor inv(DType::Float, statShape);
    rmsNormRows(ctx, s, gamma.data<float>(), Y.data<float>(), inv.data<float>(), rows, H, m_eps);
    ctx.outputs[0] = std::move(Y);
    if (ctx.outputCount() > 1) ctx.outputs[1] = Tensor::zeros(DType::Float, statShape);
    if (ctx.outputCount() > 2) ctx.outputs[2] = std::move(inv);
    if (ctx.outputCount() > 3) ctx.outputs[3] = std::move(sum);
    return Status::ok();
  }

 private:
  float m_eps;
};

// ---------------------------------------------------------------- rotary embedding
// Rotates the first `rotDim` values of one head vector by the angles of one cache row (cos, sin
// hold rotDim/2 values); values past rotDim are copied. Non-interleaved pairs (i, i + rotDim/2),
// interleaved pairs (2i, 2i+1).
void rotateHead(const float* in, float* out, int64_t headSize, int64_t rotDim, const float* cosRow,
                const float* sinRow, bool interleaved) {
  const int64_t half = rotDim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const float x1 = in[a], x2 = in[b], c = cosRow[i], s = sinRow[i];
    out[a] = x1 * c - x2 * s;
    out[b] = x2 * c + x1 * s;
  }
  if (out != in)
    for (int64_t i = rotDim; i < headSize; ++i) out[i] = in[i];
}

Status checkCaches(const Tensor& cosT, const Tensor& sinT, const char* op) {
  if (cosT.dtype() != DType::Float || sinT.dtype() != DType::Float)
    return unsupported(std::string(op) + ": cos_cache and sin_cache must be float32");
  if (cosT.rank() != 2 || cosT.shape() != sinT.shape())
    return invalidArgument("cos_cache " + shapeToString(cosT.shape()) + " and sin_cache " +
                           shapeToString(sinT.shape()) + " must be 2-D of one shape [max_position, rotary_dim/2]");
  return Status::ok();
}

class RotaryEmbeddingKernel : public Kernel {
 public:
  RotaryEmbeddingKernel(bool interleaved, int64_t numHeads, int64_t rotaryDim)
      : m_interleaved(interleaved), m_numHeads(numHeads), m_rotaryDim(rotaryDim) {}
  Status run(KernelContext& ctx) const override {
    static const char* op = "RotaryEmbedding";
    QS_RETURN_IF_ERROR(needFloat(ctx, 0, op, "input"));
    QS_RETURN_IF_ERROR(needFloat(ctx, 2, op, "cos_cache"));
    QS_RETURN_IF_ERROR(needFloat(ctx, 3, op, "sin_cache"));
    if (!ctx.hasInput(1)) return invalidArgument("input 'position_ids' is missing");
    const Tensor& X = ctx.input(0);
    const Tensor& pos = ctx.input(1);
    const Tensor& cosT = ctx.input(2);
    const Tensor& sinT = ctx.input(3);
    QS_RETURN_IF_ERROR(checkCaches(cosT, sinT, op));
    if (pos.dtype() != DType::Int64) return invalidArgument("position_ids must be int64, got " + dtypeName(pos.dtype()));
    if (X.rank() != 3 && X.rank() != 4)
      return invalidArgument("input must be [B,S,hidden] or [B,N,S,head], got " + shapeToString(X.shape()));
    const bool bnsh = X.rank() == 4;
    const int64_t B = X.dim(0), S = bnsh ? X.dim(2) : X.dim(1);
    const int64_t hidden = bnsh ? X.dim(1) * X.dim(3) : X.dim(2);
    const int64_t maxPos = cosT.dim(0), halfCache = cosT.dim(1);
    int64_t headSize = 0, heads = 0;
    if (bnsh) {
      heads = X.dim(1);
      headSize = X.dim(3);
    } else if (m_numHeads > 0) {
      if (hidden % m_numHeads != 0)
        return invalidArgument("hidden size " + str(hidden) + " is not divisible by num_heads " + str(m_numHeads));
      heads = m_numHeads;
      headSize = hidden / m_numHeads;
    } else {
      headSize = 2 * halfCache;
      if (headSize == 0 || hidden % headSize != 0)
        return invalidArgument("hidden size " + str(hidden) + " is not a multiple of the head size " + str(headSize) +
                               " implied by cos_cache " + shapeToString(cosT.shape()) + " (set num_heads)");
      heads = hidden / headSize;
    }
    const int64_t rotDim = m_rotaryDim > 0 ? m_rotaryDim : headSize;
    if (rotDim > headSize || rotDim % 2 != 0)
      return invalidArgument("rotary_embedding_dim " + str(rotDim) + " must be even and at most the head size " +
                             str(headSize));
    if (halfCache != rotDim / 2)
      return invalidArgument("cos_cache has shape " + shapeToString(cosT.shape()) + ", expected [max_position, " +
                             str(rotDim / 2) + "] for rotary dim " + str(rotDim));
    const bool offsetFormat = pos.numel() == 1 && pos.rank() <= 1;
    if (!offsetFormat && (pos.rank() != 2 || pos.dim(0) != B || pos.dim(1) != S))
      return invalidArgument("position_ids has shape " + shapeToString(pos.shape()) + ", expected [1] or [" + str(B) +
                             "," + str(S) + "]");
    const int64_t* p = pos.data<int64_t>();
    auto position = [&](int64_t b, int64_t s) { return offsetFormat ? p[0] + s : p[b * S + s]; };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t q = position(b, s);
        if (q < 0 || q >= maxPos)
          return invalidArgument("position " + str(q) + " is outside the cos/sin cache of " + str(maxPos) +
                                 " positions (cache too short)");
      }
    Tensor Y(DType::Float, X.shape());
    const float* x = X.data<float>();
    float* y = Y.data<float>();
    const float* cs = cosT.data<float>();
    const float* sn = sinT.data<float>();
    const int64_t headStride = bnsh ? S * headSize : headSize;
    const int64_t seqStride = bnsh ? headSize : heads * headSize;
    const int64_t batchStride = S * heads * headSize;
    ctx.parallelFor(B * S * heads, 64, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t b = i / (S * heads), s = (i / heads) % S, n = i % heads;
        const int64_t off = b * batchStride + s * seqStride + n * headStride;
        const int64_t row = position(b, s) * halfCache;
        rotateHead(x + off, y + off, headSize, rotDim, cs + row, sn + row, m_interleaved);
      }
    });
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  bool m_interleaved;
  int64_t m_numHeads, m_rotaryDim;
};

// ---------------------------------------------------------------- scaled dot-product attention
// One attention problem in BNSH buffers: q [B,N,S,h], k [B,Nkv,T,h], v [B,Nkv,T,hv]; head n reads
// kv head n / (N / Nkv). `rowMask(b, n, s, row)` adjusts the T scores of query row s after
// scaling (adds biases, sets -inf where masked). Writes out [B,S,N*hv].
struct AttentionProblem {
  int64_t B, N, Nkv, S, T, h, hv;
  float scale;
  float softcap = 0.f;
};

void attend(const KernelContext& ctx, const AttentionProblem& p, const float* q, const float* k, const float* v,
            float* out, const std::function<void(int64_t, int64_t, int64_t, float*)>& rowMask) {
  const int64_t group = p.N / p.Nkv;
  ctx.parallelFor(p.B * p.N, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores((size_t)(p.S * p.T)), o((size_t)(p.S * p.hv));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / p.N, n = i % p.N, kvn = n / group;
      const float* qh = q + (b * p.N + n) * p.S * p.h;
      const float* kh = k + (b * p.Nkv + kvn) * p.T * p.h;
      const float* vh = v + (b * p.Nkv + kvn) * p.T * p.hv;
      if (p.T > 0 && p.h > 0)
        sgemm(false, true, p.S, p.T, p.h, p.scale, qh, p.h, kh, p.h, 0.f, scores.data(), p.T, 1);
      else
        std::fill(scores.begin(), scores.end(), 0.f);
      for (int64_t s = 0; s < p.S; ++s) {
        float* row = scores.data() + s * p.T;
        if (p.softcap > 0)
          for (int64_t t = 0; t < p.T; ++t) row[t] = p.softcap * std::tanh(row[t] / p.softcap);
        rowMask(b, n, s, row);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < p.T; ++t) mx = std::max(mx, row[t]);
        if (mx == -std::numeric_limits<float>::infinity()) {  // every key masked: no weight at all
          std::fill(row, row + p.T, 0.f);
          continue;
        }
        double sum = 0;
        for (int64_t t = 0; t < p.T; ++t) {
          row[t] = std::exp(row[t] - mx);
          sum += row[t];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t t = 0; t < p.T; ++t) row[t] *= inv;
      }
      if (p.T > 0 && p.hv > 0)
        sgemm(false, false, p.S, p.hv, p.T, 1.f, scores.data(), p.T, vh, p.hv, 0.f, o.data(), p.hv, 1);
      else
        std::fill(o.begin(), o.end(), 0.f);
      for (int64_t s = 0; s < p.S; ++s)
        std::memcpy(out + ((b * p.S + s) * p.N + n) * p.hv, o.data() + s * p.hv, (size_t)p.hv * sizeof(float));
    }
  });
}

// src [B,S,heads*h] read at row stride `rowStride` (elements per (b,s) row) from column offset
// `col` -> dst [B,heads,S,h], adding bias[heads*h] when given.
void toBnsh(const float* src, int64_t rowStride, int64_t col, const float* bias, float* dst, int64_t B, int64_t S,
            int64_t heads, int64_t h) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t n = 0; n < heads; ++n) {
        const float* from = src + (b * S + s) * rowStride + col + n * h;
        float* to = dst + ((b * heads + n) * S + s) * h;
        for (int64_t i = 0; i < h; ++i) to[i] = from[i] + (bias ? bias[n * h + i] : 0.f);
      }
}

Status checkNoPast(const KernelContext& ctx, size_t i, const char* name) {
  if (presentNonEmpty(ctx, i))
    return unsupported(std::string(name) + " " + shapeToString(ctx.input(i).shape()) +
                       " is not empty: decoding with a KV cache is not supported (prompt processing only)");
  return Status::ok();
}

Status checkAllocation(const Shape& s, const char* what) {
  if (checkedNumel(s, kMaxElements) < 0)
    return invalidArgument(std::string(what) + " of shape " + shapeToString(s) + " is too large");
  return Status::ok();
}

// MultiHeadAttention (com.microsoft 1).
class MultiHeadAttentionKernel : public Kernel {
 public:
  MultiHeadAttentionKernel(int64_t heads, float scale, bool causal, float maskFilter)
      : m_heads(heads), m_scale(scale), m_causal(causal), m_maskFilter(maskFilter) {}
  Status run(KernelContext& ctx) const override {
    static const char* op = "MultiHeadAttention";
    QS_RETURN_IF_ERROR(needFloat(ctx, 0, op, "query"));
    if (!ctx.hasInput(1) || !ctx.hasInput(2))
      return unsupported("MultiHeadAttention needs separate key and value inputs (packed QKV is not supported)");
    QS_RETURN_IF_ERROR(needFloat(ctx, 1, op, "key"));
    QS_RETURN_IF_ERROR(needFloat(ctx, 2, op, "value"));
    QS_RETURN_IF_ERROR(checkNoPast(ctx, 6, "past_key"));
    QS_RETURN_IF_ERROR(checkNoPast(ctx, 7, "past_value"));
    for (size_t i = 8; i < ctx.inputCount(); ++i)
      if (ctx.hasInput(i)) return unsupported("MultiHeadAttention input " + str((int64_t)i) + " is not supported");
    const Tensor& Q = ctx.input(0);
    const Tensor& K = ctx.input(1);
    const Tensor& V = ctx.input(2);
    if (Q.rank() != 3 || K.rank() != 3 || V.rank() != 3)
      return invalidArgument("query " + shapeToString(Q.shape()) + ", key " + shapeToString(K.shape()) + " and value " +
                             shapeToString(V.shape()) + " must be 3-D [B,S,D] (BNSH key/value are not supported)");
    const int64_t B = Q.dim(0), S = Q.dim(1), D = Q.dim(2), T = K.dim(1), Dv = V.dim(2);
    if (K.dim(0) != B || V.dim(0) != B || K.dim(2) != D || V.dim(1) != T)
      return invalidArgument("key " + shapeToString(K.shape()) + " and value " + shapeToString(V.shape()) +
                             " do not match query " + shapeToString(Q.shape()));
    if (D % m_heads != 0 || Dv % m_heads != 0)
      return invalidArgument("hidden sizes " + str(D) + " and " + str(Dv) + " are not divisible by num_heads " +
                             str(m_heads));
    const int64_t h = D / m_heads, hv = Dv / m_heads;
    const float* bias = nullptr;
    if (ctx.hasInput(3)) {
      QS_RETURN_IF_ERROR(needFloat(ctx, 3, op, "bias"));
      if (ctx.input(3).numel() != 2 * D + Dv)
        return invalidArgument("bias has shape " + shapeToString(ctx.input(3).shape()) + ", expected [" +
                               str(2 * D + Dv) + "]");
      bias = ctx.input(3).data<float>();
    }
    // key_padding_mask: [B] key lengths (right padding) or [B,T] 1 = attend, 0 = masked.
    const int32_t* mask = nullptr;
    bool maskLengths = false;
    if (ctx.hasInput(4)) {
      const Tensor& m = ctx.input(4);
      if (m.dtype() != DType::Int32) return invalidArgument("key_padding_mask must be int32, got " + dtypeName(m.dtype()));
      if (m.rank() == 1 && m.dim(0) == B)
        maskLengths = true;
      else if (!(m.rank() == 2 && m.dim(0) == B && m.dim(1) == T))
        return invalidArgument("key_padding_mask has shape " + shapeToString(m.shape()) + ", expected [" + str(B) +
                               "] or [" + str(B) + "," + str(T) + "]");
      mask = m.data<int32_t>();
    }
    const float* attnBias = nullptr;
    int64_t biasB = 0, biasN = 0;
    if (ctx.hasInput(5)) {
      QS_RETURN_IF_ERROR(needFloat(ctx, 5, op, "attention_bias"));
      const Tensor& ab = ctx.input(5);
      if (ab.rank() != 4 || (ab.dim(0) != 1 && ab.dim(0) != B) || (ab.dim(1) != 1 && ab.dim(1) != m_heads) ||
          ab.dim(2) != S || ab.dim(3) != T)
        return invalidArgument("attention_bias has shape " + shapeToString(ab.shape()) + ", expected [" + str(B) +
                               " or 1," + str(m_heads) + " or 1," + str(S) + "," + str(T) + "]");
      attnBias = ab.data<float>();
      biasB = ab.dim(0);
      biasN = ab.dim(1);
    }
    QS_RETURN_IF_ERROR(checkAllocation({B, m_heads, std::max(S, T), std::max(h, hv)}, "attention buffer"));
    QS_RETURN_IF_ERROR(checkAllocation({S, T}, "score matrix"));
    Tensor q(DType::Float, {B, m_heads, S, h}), k(DType::Float, {B, m_heads, T, h}), v(DType::Float, {B, m_heads, T, hv});
    toBnsh(Q.data<float>(), D, 0, bias, q.data<float>(), B, S, m_heads, h);
    toBnsh(K.data<float>(), D, 0, bias ? bias + D : nullptr, k.data<float>(), B, T, m_heads, h);
    toBnsh(V.data<float>(), Dv, 0, bias ? bias + 2 * D : nullptr, v.data<float>(), B, T, m_heads, hv);
    AttentionProblem p{B, m_heads, m_heads, S, T, h, hv, m_scale > 0 ? m_scale : 1.f / std::sqrt((float)h)};
    Tensor out(DType::Float, {B, S, Dv});
    const float ninf = -std::numeric_limits<float>::infinity();
    attend(ctx, p, q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
           [&](int64_t b, int64_t n, int64_t s, float* row) {
             if (mask)
               for (int64_t t = 0; t < T; ++t) {
                 const bool keep = maskLengths ? t < mask[b] : mask[b * T + t] > 0;
                 if (!keep) row[t] += m_maskFilter;
               }
             if (attnBias) {
               const float* ab = attnBias + (((biasB == 1 ? 0 : b) * biasN + (biasN == 1 ? 0 : n)) * S + s) * T;
               for (int64_t t = 0; t < T; ++t) row[t] += ab[t];
             }
             if (m_causal)
               for (int64_t t = s + 1; t < T; ++t) row[t] = ninf;
           });
    ctx.outputs[0] = std::move(out);
    if (ctx.outputCount() > 1) ctx.outputs[1] = std::move(k);
    if (ctx.outputCount() > 2) ctx.outputs[2] = std::move(v);
    return Status::ok();
  }

 private:
  int64_t m_heads;
  float m_scale;
  bool m_causal;
  float m_maskFilter;
};

// GroupQueryAttention (com.microsoft 1), first prompt only: causal attention over the S new keys.
class GroupQueryAttentionKernel : public Kernel {
 public:
  GroupQueryAttentionKernel(int64_t heads, int64_t kvHeads, float scale, int64_t window, bool rotary,
                            bool interleaved, float softcap)
      : m_heads(heads), m_kvHeads(kvHeads), m_scale(scale), m_window(window), m_rotary(rotary),
        m_interleaved(interleaved), m_softcap(softcap) {}
  Status run(KernelContext& ctx) const override {
    static const char* op = "GroupQueryAttention";
    QS_RETURN_IF_ERROR(needFloat(ctx, 0, op, "query"));
    const bool packed = !ctx.hasInput(1);
    if (!packed) {
      QS_RETURN_IF_ERROR(needFloat(ctx, 1, op, "key"));
      QS_RETURN_IF_ERROR(needFloat(ctx, 2, op, "value"));
    } else if (ctx.hasInput(2)) {
      return invalidArgument("value is given without key");
    }
    QS_RETURN_IF_ERROR(checkNoPast(ctx, 3, "past_key"));
    QS_RETURN_IF_ERROR(checkNoPast(ctx, 4, "past_value"));
    for (size_t i = 9; i < ctx.inputCount(); ++i)
      if (ctx.hasInput(i))
        return unsupported("GroupQueryAttention input " + str((int64_t)i) +
                           " (position_ids, attention_bias or head_sink) is not supported");
    const Tensor& Q = ctx.input(0);
    if (Q.rank() != 3) return invalidArgument("query must be 3-D [B,S,D], got " + shapeToString(Q.shape()));
    const int64_t B = Q.dim(0), S = Q.dim(1), Dq = Q.dim(2);
    const int64_t slots = packed ? m_heads + 2 * m_kvHeads : m_heads;
    if (Dq % slots != 0)
      return invalidArgument("query width " + str(Dq) + " is not divisible by " + str(slots) +
                             (packed ? " (num_heads + 2 * kv_num_heads, packed QKV)" : " (num_heads)"));
    const int64_t h = Dq / slots, Dkv = m_kvHeads * h;
    if (!packed) {
      const Tensor& K = ctx.input(1);
      const Tensor& V = ctx.input(2);
      const Shape want{B, S, Dkv};
      if (K.shape() != want || V.shape() != want)
        return invalidArgument("key " + shapeToString(K.shape()) + " and value " + shapeToString(V.shape()) +
                               " must be " + shapeToString(want) + " (kv_num_heads " + str(m_kvHeads) + ", head size " +
                               str(h) + ")");
    }
    if (!ctx.hasInput(5) || !ctx.hasInput(6)) return invalidArgument("inputs seqlens_k and total_sequence_length are required");
    const Tensor& seqlens = ctx.input(5);
    const Tensor& total = ctx.input(6);
    if (seqlens.dtype() != DType::Int32 || seqlens.numel() != B)
      return invalidArgument("seqlens_k must be int32 [" + str(B) + "], got " + dtypeName(seqlens.dtype()) + " " +
                             shapeToString(seqlens.shape()));
    if (total.dtype() != DType::Int32 || total.numel() != 1)
      return invalidArgument("total_sequence_length must be an int32 scalar");
    const int64_t totalLen = total.data<int32_t>()[0];
    if (totalLen != S)
      return unsupported("total_sequence_length " + str(totalLen) + " differs from the query's sequence length " +
                         str(S) + ": decoding with a KV cache is not supported (prompt processing only)");
    for (int64_t b = 0; b < B; ++b) {
      const int64_t L = seqlens.data<int32_t>()[b];
      if (L < 0 || L >= S)
        return invalidArgument("seqlens_k[" + str(b) + "] is " + str(L) + ", expected 0.." + str(S - 1));
    }
    const float* cs = nullptr;
    const float* sn = nullptr;
    int64_t rotDim = 0;
    if (m_rotary) {
      if (!ctx.hasInput(7) || !ctx.hasInput(8)) return invalidArgument("do_rotary is 1 but cos_cache/sin_cache are missing");
      const Tensor& cosT = ctx.input(7);
      const Tensor& sinT = ctx.input(8);
      QS_RETURN_IF_ERROR(checkCaches(cosT, sinT, op));
      rotDim = 2 * cosT.dim(1);
      if (rotDim == 0 || rotDim > h)
        return invalidArgument("cos_cache " + shapeToString(cosT.shape()) + " implies rotary dim " + str(rotDim) +
                               ", expected 2..head size " + str(h));
      if (cosT.dim(0) < S)
        return invalidArgument("cos_cache has " + str(cosT.dim(0)) + " positions, fewer than the sequence length " +
                               str(S) + " (cache too short)");
      cs = cosT.data<float>();
      sn = sinT.data<float>();
    }
    QS_RETURN_IF_ERROR(checkAllocation({B, m_heads, S, std::max(S, h)}, "attention buffer"));
    QS_RETURN_IF_ERROR(checkAllocation({S, S}, "score matrix"));
    const float* qsrc = Q.data<float>();
    const float* ksrc = packed ? qsrc : ctx.input(1).data<float>();
    const float* vsrc = packed ? qsrc : ctx.input(2).data<float>();
    const int64_t kStride = packed ? Dq : Dkv;
    Tensor q(DType::Float, {B, m_heads, S, h}), k(DType::Float, {B, m_kvHeads, S, h}),
        v(DType::Float, {B, m_kvHeads, S, h});
    toBnsh(qsrc, Dq, 0, nullptr, q.data<float>(), B, S, m_heads, h);
    toBnsh(ksrc, kStride, packed ? m_heads * h : 0, nullptr, k.data<float>(), B, S, m_kvHeads, h);
    toBnsh(vsrc, kStride, packed ? (m_heads + m_kvHeads) * h : 0, nullptr, v.data<float>(), B, S, m_kvHeads, h);
    if (m_rotary) {
      // First prompt: token s sits at position s.
      const int64_t half = rotDim / 2;
      auto rotate = [&](Tensor& t, int64_t heads) {
        float* d = t.data<float>();
        for (int64_t bn = 0; bn < B * heads; ++bn)
          for (int64_t s = 0; s < S; ++s) {
            float* x = d + (bn * S + s) * h;
            rotateHead(x, x, h, rotDim, cs + s * half, sn + s * half, m_interleaved);
          }
      };
      rotate(q, m_heads);
      rotate(k, m_kvHeads);
    }
    AttentionProblem p{B, m_heads, m_kvHeads, S, S, h, h, m_scale > 0 ? m_scale : 1.f / std::sqrt((float)h), m_softcap};
    Tensor out(DType::Float, {B, S, m_heads * h});
    const float ninf = -std::numeric_limits<float>::infinity();
    attend(ctx, p, q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
           [&](int64_t, int64_t, int64_t s, float* row) {
             // Keys 0..s; with a local window only the last local_window_size of them (self
             // included), as ONNX Runtime 1.30 counts it.
             const int64_t start = m_window > 0 && s + 1 > m_window ? s + 1 - m_window : 0;
             for (int64_t t = 0; t < start; ++t) row[t] = ninf;
             for (int64_t t = s + 1; t < S; ++t) row[t] = ninf;
           });
    ctx.outputs[0] = std::move(out);
    if (ctx.outputCount() > 1) ctx.outputs[1] = std::move(k);
    if (ctx.outputCount() > 2) ctx.outputs[2] = std::move(v);
    return Status::ok();
  }

 private:
  int64_t m_heads, m_kvHeads;
  float m_scale;
  int64_t m_window;
  bool m_rotary, m_interleaved;
  float m_softcap;
};

// ---------------------------------------------------------------- MatMulNBits
class MatMulNBitsKernel : public Kernel {
 public:
  MatMulNBitsKernel(int64_t K, int64_t N, int64_t bits, int64_t blockSize, std::shared_ptr<const std::vector<float>> w)
      : m_K(K), m_N(N), m_bits(bits), m_blockSize(blockSize), m_weight(std::move(w)) {}
  Status run(KernelContext& ctx) const override {
    QS_RETURN_IF_ERROR(needFloat(ctx, 0, "MatMulNBits", "A"));
    const Tensor& A = ctx.input(0);
    if (A.rank() < 1 || A.dim(A.rank() - 1) != m_K)
      return invalidArgument("A has shape " + shapeToString(A.shape()) + ", its last dim must be K=" + str(m_K));
    if (presentNonEmpty(ctx, 4)) return unsupported("MatMulNBits: g_idx (act_order) is not supported");
    std::shared_ptr<const std::vector<float>> w = m_weight;
    if (!w) {
      if (!ctx.hasInput(1) || !ctx.hasInput(2)) return invalidArgument("inputs B and scales are required");
      auto r = dequantizeNBits(ctx.input(1), ctx.input(2), ctx.hasInput(3) ? &ctx.input(3) : nullptr, m_K, m_N, m_bits,
                               m_blockSize);
      if (!r) return r.status();
      w = std::make_shared<const std::vector<float>>(std::move(*r));
    }
    const float* bias = nullptr;
    if (ctx.hasInput(5)) {
      QS_RETURN_IF_ERROR(needFloat(ctx, 5, "MatMulNBits", "bias"));
      if (ctx.input(5).numel() != m_N)
        return invalidArgument("bias has shape " + shapeToString(ctx.input(5).shape()) + ", expected [" + str(m_N) + "]");
      bias = ctx.input(5).data<float>();
    }
    Shape ys = A.shape();
    ys.back() = m_N;
    QS_RETURN_IF_ERROR(checkAllocation(ys, "output"));
    const int64_t M = m_K == 0 ? 0 : A.numel() / m_K;
    Tensor Y(DType::Float, ys);
    float* y = Y.data<float>();
    if (M > 0 && m_N > 0) {
      if (m_K > 0)
        sgemm(false, true, M, m_N, m_K, 1.f, A.data<float>(), m_K, w->data(), m_K, 0.f, y, m_N, ctx.threads);
      else
        std::fill(y, y + M * m_N, 0.f);
      if (bias)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < m_N; ++n) y[m * m_N + n] += bias[n];
    }
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  int64_t m_K, m_N, m_bits, m_blockSize;
  std::shared_ptr<const std::vector<float>> m_weight;  // null: B/scales/zero points computed at run time
};

}  // namespace

Result<std::vector<float>> dequantizeNBits(const Tensor& B, const Tensor& scales, const Tensor* zeroPoints, int64_t K,
                                           int64_t N, int64_t bits, int64_t blockSize) {
  const int64_t kBlocks = (K + blockSize - 1) / blockSize, blob = blockSize * bits / 8;
  const std::string params = " for K=" + str(K) + " N=" + str(N) + " bits=" + str(bits) + " block_size=" + str(blockSize);
  if (B.dtype() != DType::UInt8) return invalidArgument("B must be uint8, got " + dtypeName(B.dtype()));
  const Shape want{N, kBlocks, blob};
  if (B.shape() != want) {
    std::string why = B.rank() == 3 && B.dim(0) != N    ? "dim 0 is not N"
                      : B.rank() == 3 && B.dim(1) != kBlocks ? "dim 1 is not ceil(K / block_size)"
                      : B.rank() == 3 && B.dim(2) != blob    ? "blob size is not block_size * bits / 8"
                                                             : "wrong rank";
    return invalidArgument("B has shape " + shapeToString(B.shape()) + ", expected " + shapeToString(want) + params +
                           " (" + why + ")");
  }
  if (scales.dtype() != DType::Float) return unsupported("scales must be float32, got " + dtypeName(scales.dtype()));
  if (scales.numel() != N * kBlocks)
    return invalidArgument("scales has shape " + shapeToString(scales.shape()) + ", expected " + str(N * kBlocks) +
                           " values (N * k_blocks)" + params);
  const int64_t zpRow = (kBlocks * bits + 7) / 8;
  const uint8_t* zpPacked = nullptr;
  const float* zpFloat = nullptr;
  if (zeroPoints && zeroPoints->numel() > 0) {
    if (zeroPoints->dtype() == DType::UInt8) {
      if (zeroPoints->numel() != N * zpRow)
        return invalidArgument("zero_points has shape " + shapeToString(zeroPoints->shape()) + ", expected " +
                               str(N * zpRow) + " packed uint8 values (N * ceil(k_blocks * bits / 8))" + params);
      zpPacked = zeroPoints->data<uint8_t>();
    } else if (zeroPoints->dtype() == DType::Float) {
      if (zeroPoints->numel() != N * kBlocks)
        return invalidArgument("zero_points has shape " + shapeToString(zeroPoints->shape()) + ", expected " +
                               str(N * kBlocks) + " float values (N * k_blocks)" + params);
      zpFloat = zeroPoints->data<float>();
    } else {
      return unsupported("zero_points must be uint8 or float32, got " + dtypeName(zeroPoints->dtype()));
    }
  }
  std::vector<float> w((size_t)(N * K));
  const uint8_t* q = B.data<uint8_t>();
  const float* sc = scales.data<float>();
  const float defaultZp = (float)(1 << (bits - 1));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t blk = 0; blk < kBlocks; ++blk) {
      float zp = defaultZp;
      if (zpFloat)
        zp = zpFloat[n * kBlocks + blk];
      else if (zpPacked && bits == 4)
        zp = (float)((zpPacked[n * zpRow + blk / 2] >> ((blk % 2) * 4)) & 0xF);
      else if (zpPacked)
        zp = (float)zpPacked[n * zpRow + blk];
      const float s = sc[n * kBlocks + blk];
      const uint8_t* blob8 = q + (n * kBlocks + blk) * blob;
      const int64_t k0 = blk * blockSize, k1 = std::min(K, k0 + blockSize);
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t i = k - k0;
        const int v = bits == 4 ? (blob8[i / 2] >> ((i % 2) * 4)) & 0xF : blob8[i];
        w[(size_t)(n * K + k)] = ((float)v - zp) * s;
      }
    }
  return w;
}

Result<std::unique_ptr<Kernel>> createSimplifiedLayerNorm(const KernelInit& init) {
  AttrReader a(init);
  const int64_t axis = a.i("axis", -1);
  const float eps = a.f("epsilon", 1e-5f);
  const int64_t stash = a.i("stash_type", 1);
  if (a.ok() && stash != 1) a.fail("stash_type " + str(stash) + " is not supported (float32 statistics only)");
  if (a.ok() && !(eps >= 0)) a.fail("epsilon " + std::to_string(eps) + " must be >= 0");
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<SimplifiedLayerNormKernel>(axis, eps));
}

Result<std::unique_ptr<Kernel>> createSkipSimplifiedLayerNorm(const KernelInit& init) {
  AttrReader a(init);
  const float eps = a.f("epsilon", 1e-12f);
  if (a.ok() && !(eps >= 0)) a.fail("epsilon " + std::to_string(eps) + " must be >= 0");
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<SkipSimplifiedLayerNormKernel>(eps));
}

Result<std::unique_ptr<Kernel>> createRotaryEmbedding(const KernelInit& init) {
  AttrReader a(init);
  const int64_t interleaved = a.i("interleaved", 0);
  const int64_t heads = a.i("num_heads", 0);
  const int64_t rotDim = a.i("rotary_embedding_dim", 0);
  const int64_t packedBatching = a.i("is_packed_batching", 0);
  a.f("scale", 1.f);  // ORT's CPU kernel reads and ignores it too
  if (a.ok() && interleaved != 0 && interleaved != 1) a.fail("interleaved is " + str(interleaved) + ", expected 0 or 1");
  if (a.ok() && (heads < 0 || heads > (1 << 20))) a.fail("num_heads " + str(heads) + " is out of range");
  if (a.ok() && (rotDim < 0 || rotDim % 2 != 0 || rotDim > (1 << 20)))
    a.fail("rotary_embedding_dim " + str(rotDim) + " must be even and >= 0");
  if (a.ok() && rotDim > 0 && heads == 0) a.fail("num_heads must be given when rotary_embedding_dim is");
  if (a.ok() && packedBatching != 0) a.fail("is_packed_batching=1 is not supported");
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<RotaryEmbeddingKernel>(interleaved == 1, heads, rotDim));
}

Result<std::unique_ptr<Kernel>> createMultiHeadAttention(const KernelInit& init) {
  AttrReader a(init);
  const int64_t heads = a.i("num_heads", 0);
  const float scale = a.f("scale", 0.f);
  const int64_t uni = a.i("unidirectional", 0);
  const float maskFilter = a.f("mask_filter_value", -10000.f);
  if (a.ok() && (heads <= 0 || heads > (1 << 20))) a.fail("num_heads " + str(heads) + " must be positive");
  if (a.ok() && uni != 0 && uni != 1) a.fail("unidirectional is " + str(uni) + ", expected 0 or 1");
  if (a.ok() && !(scale >= 0)) a.fail("scale must be >= 0 (0: 1/sqrt(head size))");
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<MultiHeadAttentionKernel>(heads, scale, uni == 1, maskFilter));
}

Result<std::unique_ptr<Kernel>> createGroupQueryAttention(const KernelInit& init) {
  AttrReader a(init);
  const int64_t heads = a.i("num_heads", 0);
  const int64_t kvHeads = a.i("kv_num_heads", 0);
  const float scale = a.f("scale", 0.f);
  const int64_t window = a.i("local_window_size", -1);
  const int64_t rotary = a.i("do_rotary", 0);
  const int64_t interleaved = a.i("rotary_interleaved", 0);
  const float softcap = a.f("softcap", 0.f);
  const int64_t smooth = a.i("smooth_softmax", 0);
  if (a.ok() && (heads <= 0 || heads > (1 << 20))) a.fail("num_heads " + str(heads) + " must be positive");
  if (a.ok() && (kvHeads <= 0 || kvHeads > heads))
    a.fail("kv_num_heads " + str(kvHeads) + " must be in 1..num_heads (" + str(heads) + ")");
  if (a.ok() && heads % kvHeads != 0)
    a.fail("num_heads " + str(heads) + " is not divisible by kv_num_heads " + str(kvHeads));
  if (a.ok() && (rotary < 0 || rotary > 1 || interleaved < 0 || interleaved > 1))
    a.fail("do_rotary and rotary_interleaved must be 0 or 1");
  if (a.ok() && !(scale >= 0 && softcap >= 0)) a.fail("scale and softcap must be >= 0");
  if (a.ok() && smooth != 0) a.fail("smooth_softmax=1 is not supported");
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<GroupQueryAttentionKernel>(heads, kvHeads, scale, window, rotary == 1,
                                                                             interleaved == 1, softcap));
}

Result<std::unique_ptr<Kernel>> createMatMulNBits(const KernelInit& init) {
  AttrReader a(init);
  const int64_t K = a.i("K", 0), N = a.i("N", 0);
  const int64_t bits = a.i("bits", 4), blockSize = a.i("block_size", 0);
  a.i("accuracy_level", 0);  // a speed hint: this kernel always computes in float32
  if (a.ok() && (K <= 0 || N <= 0)) a.fail("K=" + str(K) + " and N=" + str(N) + " must be positive");
  if (a.ok() && bits != 4 && bits != 8) a.fail("bits=" + str(bits) + " is not supported (4 or 8)");
  if (a.ok() && (blockSize < 16 || blockSize > 65536 || (blockSize & (blockSize - 1)) != 0))
    a.fail("block_size=" + str(blockSize) + " must be a power of two >= 16");
  if (a.ok() && checkedNumel({K, N}, kMaxElements) < 0)
    a.fail("K=" + str(K) + " x N=" + str(N) + " is too large a weight");
  if (!a.ok()) return a.status();
  std::shared_ptr<const std::vector<float>> w;
  const Tensor* B = init.constantInput(1);
  const Tensor* scales = init.constantInput(2);
  const bool zpAbsent = init.node.inputs.size() <= 3 || init.node.inputs[3] == kNoValue;
  const Tensor* zp = init.constantInput(3);
  if (B && scales && (zpAbsent || zp)) {
    auto r = dequantizeNBits(*B, *scales, zp, K, N, bits, blockSize);
    if (!r) return r.status();
    w = std::make_shared<const std::vector<float>>(std::move(*r));
  }
  return std::unique_ptr<Kernel>(std::make_unique<MatMulNBitsKernel>(K, N, bits, blockSize, std::move(w)));
}

std::vector<KernelEntry> contribKernels() {
  return {
      // ORT serves SimplifiedLayerNormalization in the default domain (since opset 1); exporters
      // also write it under com.microsoft.
      {"SimplifiedLayerNormalization", "", 1, 1000, createSimplifiedLayerNorm},
      {"SimplifiedLayerNormalization", kMicrosoftDomain, 1, 1, createSimplifiedLayerNorm},
      {"SkipSimplifiedLayerNormalization", kMicrosoftDomain, 1, 1, createSkipSimplifiedLayerNorm},
      {"RotaryEmbedding", kMicrosoftDomain, 1, 1, createRotaryEmbedding},
      {"MultiHeadAttention", kMicrosoftDomain, 1, 1, createMultiHeadAttention},
      {"GroupQueryAttention", kMicrosoftDomain, 1, 1, createGroupQueryAttention},
      {"MatMulNBits", kMicrosoftDomain, 1, 1, createMatMulNBits},
  };
}

}  // namespace qs
