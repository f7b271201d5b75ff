// Gemm (ai.onnx opsets 1..21) and MatMul (opsets 1..21), FP32.
#include "core/kernels/gemm_op.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/kernels/gemm.h"

#ifdef __FMA__
#include <immintrin.h>
#endif

namespace qs {

namespace {

// Rows of A up to which a Gemm with transB streams B as it lies (smallRowsGemm). One thread,
// 8 x 2048 by 1000 x 2048 (resnet50's head at batch 8), B cold: see docs/performance.md,
// "resnet50 outside its 1x1 and 3x3 bodies (wt-r50rest)".
constexpr int64_t kSmallRowsTransB = 8;

// beta * y + alpha * (the 8 lane sums acc of a dot product of a and b over K, their tree, then the
// tail past K / 8 * 8 in order). Out of line so that GCC makes one choice of contracting
// multiply-adds here, whichever loop calls it: inlined at two call sites, it fused them at one and
// not the other, and the same output differed by the thread count.
[[gnu::noinline]] float finishDot(const float* acc, const float* a, const float* b, int64_t K, float alpha, float beta,
                                  float y) {
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (int64_t k = K / 8 * 8; k < K; ++k) sum += a[k] * b[k];
  return (beta != 0.f ? beta * y : 0.f) + alpha * sum;
}

// y[m][n] = beta * y[m][n] + alpha * sum_k A[m][k] * B(k, n) for a few rows of A (a classifier's
// Gemm at batch 1 to 8): reading B once is all the work, so B is streamed as it lies instead of being
// packed for the micro-kernel (packing a 1000x2048 B cost 10x the product). Columns are split
// across threads; each output is one dot product (transB: B's row n) or a sum of B's rows scaled
// by A (no transB), in k order.
void smallRowsGemm(bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B, float beta,
                   float* y, KernelContext& ctx) {
  ctx.parallelFor(N, 64, [&](int64_t n0, int64_t n1) {
    if (transB) {
      // Four rows of B at a time: four independent chains of 8-lane sums instead of one, whose
      // add latency bounded the stream of B (resnet50's 1000x2048 head; docs/performance.md,
      // "resnet50 and densenet121 (wt-resnet)"), each four rows dotted with every row of A while
      // they are in L1 (up to 8 rows of A: a batch of 8 images streams B once, not once per image;
      // docs/performance.md, "resnet50 outside its 1x1 and 3x3 bodies (wt-r50rest)"). Each output's
      // sum is formed exactly as the one-row loop this replaced formed it (GCC made it one fused
      // multiply-add per lane, k in order; lanes by k mod 8; the same tree), whatever M: an image's
      // logits are the same bits at any batch. The lanes are written as FMA intrinsics because
      // GCC contracts the four-row form only in part.
      const auto finish = [&](int64_t m, int64_t n, const float* acc, const float* b) {
        y[m * N + n] = finishDot(acc, A + m * K, b, K, alpha, beta, y[m * N + n]);
      };
      int64_t n = n0;
#ifdef __FMA__
      for (; n + 4 <= n1; n += 4) {
        const float *b0 = B + n * K, *b1 = b0 + K, *b2 = b1 + K, *b3 = b2 + K;
        for (int64_t m = 0; m < M; ++m) {
          const float* a = A + m * K;
          __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
          for (int64_t k = 0; k + 8 <= K; k += 8) {
            const __m256 av = _mm256_loadu_ps(a + k);
            s0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b0 + k), s0);
            s1 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b1 + k), s1);
            s2 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b2 + k), s2);
            s3 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b3 + k), s3);
          }
          alignas(32) float acc[4][8];
          _mm256_store_ps(acc[0], s0);
          _mm256_store_ps(acc[1], s1);
          _mm256_store_ps(acc[2], s2);
          _mm256_store_ps(acc[3], s3);
          finish(m, n, acc[0], b0);
          finish(m, n + 1, acc[1], b1);
          finish(m, n + 2, acc[2], b2);
          finish(m, n + 3, acc[3], b3);
        }
      }
      for (; n < n1; ++n) {
        const float* b = B + n * K;
        for (int64_t m = 0; m < M; ++m) {
          const float* a = A + m * K;
          __m256 s0 = _mm256_setzero_ps();
          for (int64_t k = 0; k + 8 <= K; k += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
          alignas(32) float acc[8];
          _mm256_store_ps(acc, s0);
          finish(m, n, acc, b);
        }
      }
#else
      for (; n < n1; ++n) {
        const float* b = B + n * K;
        for (int64_t m = 0; m < M; ++m) {
          const float* a = A + m * K;
          float acc[8] = {};
          for (int64_t k = 0; k + 8 <= K; k += 8)
            for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
          finish(m, n, acc, b);
        }
      }
#endif
      return;
    }
    for (int64_t m = 0; m < M; ++m) {
      const float* a = A + m * K;
      float* yr = y + m * N;
      std::vector<float> acc((size_t)(n1 - n0), 0.f);
      for (int64_t k = 0; k < K; ++k) {
        const float ak = a[k];
        const float* b = B + k * N + n0;
        for (int64_t n = 0; n < n1 - n0; ++n) acc[(size_t)n] += ak * b[n];
      }
      for (int64_t n = n0; n < n1; ++n) yr[n] = (beta != 0.f ? beta * yr[n] : 0.f) + alpha * acc[(size_t)(n - n0)];
    }
  });
}

class GemmKernel : public Kernel {
 public:
  GemmKernel(bool transA, bool transB, float alpha, float beta, const Tensor* constB)
      : m_transA(transA), m_transB(transB), m_alpha(alpha), m_beta(beta) {
    // Constant weights packed once for the micro-kernel (see PackedPanels).
    if (constB && constB->dtype() == DType::Float && constB->rank() == 2 && constB->numel() > 0) {
      m_constB = *constB;
      const int64_t K = transB ? constB->dim(1) : constB->dim(0), N = transB ? constB->dim(0) : constB->dim(1);
      m_packedB = std::make_shared<const PackedPanels>(constB->data<float>(), constB->dim(1), transB, K, N);
    }
  }

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1)) return invalidArgument("Gemm needs inputs A and B");
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    if (A.dtype() != DType::Float || B.dtype() != DType::Float)
      return unsupported("Gemm supports float32 only, got A " + dtypeName(A.dtype()) + ", B " + dtypeName(B.dtype()));
    if (A.rank() != 2 || B.rank() != 2)
      return invalidArgument("Gemm expects 2-D A and B, got " + shapeToString(A.shape()) + " and " + shapeToString(B.shape()));
    const int64_t M = m_transA ? A.dim(1) : A.dim(0);
    const int64_t K = m_transA ? A.dim(0) : A.dim(1);
    const int64_t Kb = m_transB ? B.dim(1) : B.dim(0);
    const int64_t N = m_transB ? B.dim(0) : B.dim(1);
    if (K != Kb)
      return invalidArgument("Gemm inner dims differ: A " + shapeToString(A.shape()) + (m_transA ? " (transposed)" : "") +
                             ", B " + shapeToString(B.shape()) + (m_transB ? " (transposed)" : ""));
    ctx.outputs[0] = Tensor(DType::Float, {M, N});
    float* y = ctx.outputs[0].data<float>();
    float beta = 0.f;
    if (ctx.hasInput(2) && m_beta != 0.f) {
      const Tensor& Ct = ctx.input(2);
      if (Ct.dtype() != DType::Float) return unsupported("Gemm C must be float32, got " + dtypeName(Ct.dtype()));
      const Shape& cs = Ct.shape();
      if (cs.size() > 2) return invalidArgument("Gemm C must have rank <= 2, got " + shapeToString(cs));
      const int64_t cm = cs.size() == 2 ? cs[0] : 1;
      const int64_t cn = cs.empty() ? 1 : cs.back();
      if ((cm != 1 && cm != M) || (cn != 1 && cn != N))
        return invalidArgument("Gemm C " + shapeToString(cs) + " does not broadcast to [" + std::to_string(M) + "," +
                               std::to_string(N) + "]");
      const float* c = Ct.data<float>();
      for (int64_t i = 0; i < M; ++i) {
        const float* crow = c + (cm == 1 ? 0 : i * cn);
        float* yrow = y + i * N;
        if (cn == 1) {
          for (int64_t j = 0; j < N; ++j) yrow[j] = crow[0];
        } else {
          std::memcpy(yrow, crow, sizeof(float) * (size_t)N);
        }
      }
      beta = m_beta;
    }
    if (M == 0 || N == 0) return Status::ok();
    // (transB, a classifier's head: rows of B in place up to a batch of 8; else the packed B from 3 rows.)
    if ((M <= 2 || (M <= kSmallRowsTransB && m_transB)) && !m_transA && K > 0) {
      smallRowsGemm(m_transB, M, N, K, m_alpha, A.data<float>(), B.data<float>(), beta, y, ctx);
      return Status::ok();
    }
    if (m_packedB && B.sharesBufferWith(m_constB) && B.shape() == m_constB.shape()) {
      if (beta != 0.f && beta != 1.f)
        for (int64_t i = 0; i < M * N; ++i) y[i] *= beta;
      sgemmPacked(m_transA, M, m_alpha, A.data<float>(), A.dim(1), *m_packedB, beta != 0.f, y, N, ctx.threads);
      return Status::ok();
    }
    sgemm(m_transA, m_transB, M, N, K, m_alpha, A.data<float>(), A.dim(1), B.data<float>(), B.dim(1), beta, y, N,
          ctx.threads);
    return Status::ok();
  }

 private:
  bool m_transA, m_transB;
  float m_alpha, m_beta;
  Tensor m_constB;
  std::shared_ptr<const PackedPanels> m_packedB;
};

class MatMulKernel : public Kernel {
 public:
  explicit MatMulKernel(const Tensor* constB) {
    if (constB && constB->dtype() == DType::Float && constB->rank() == 2 && constB->numel() > 0) {
      m_constB = *constB;
      m_packedB = std::make_shared<const PackedPanels>(constB->data<float>(), constB->dim(1), false, constB->dim(0),
                                                       constB->dim(1));
    }
  }

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1)) return invalidArgument("MatMul needs inputs A and B");
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    if (A.dtype() != DType::Float || B.dtype() != DType::Float)
      return unsupported("MatMul supports float32 only, got A " + dtypeName(A.dtype()) + ", B " + dtypeName(B.dtype()));
    if (A.rank() < 1 || B.rank() < 1)
      return invalidArgument("MatMul operands must have rank >= 1, got " + shapeToString(A.shape()) + " and " +
                             shapeToString(B.shape()));
    Shape as = A.shape(), bs = B.shape();
    const bool aVec = as.size() == 1, bVec = bs.size() == 1;
    if (aVec) as.insert(as.begin(), 1);
    if (bVec) bs.push_back(1);
    const int64_t M = as[as.size() - 2], K = as.back(), Kb = bs[bs.size() - 2], N = bs.back();
    if (K != Kb)
      return invalidArgument("MatMul inner dims differ: " + shapeToString(A.shape()) + " x " + shapeToString(B.shape()));
    Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2), batch;
    if (!broadcastShapes(aBatch, bBatch, batch))
      return invalidArgument("MatMul batch dims do not broadcast: " + shapeToString(A.shape()) + " x " +
                             shapeToString(B.shape()));
    Shape yShape = batch;
    if (!aVec) yShape.push_back(M);
    if (!bVec) yShape.push_back(N);
    ctx.outputs[0] = Tensor(DType::Float, yShape);
    float* y = ctx.outputs[0].data<float>();
    const int64_t nb = numelOf(batch);
    if (nb == 0 || M == 0 || N == 0) return Status::ok();
    const float* a = A.data<float>();
    const float* b = B.data<float>();
    if (K == 0) {
      std::memset(y, 0, sizeof(float) * (size_t)(nb * M * N));
      return Status::ok();
    }
    const int64_t aNb = numelOf(aBatch), bNb = numelOf(bBatch);
    // B shared by every batch and A's batches laid out like the output: one big GEMM.
    if (bNb == 1 && aNb == nb) {
      if (nb * M <= 2) smallRowsGemm(false, nb * M, N, K, 1.f, a, b, 0.f, y, ctx);
      else if (m_packedB && B.sharesBufferWith(m_constB) && B.shape() == m_constB.shape())
        sgemmPacked(false, nb * M, 1.f, a, K, *m_packedB, false, y, N, ctx.threads);
      else sgemm(false, false, nb * M, N, K, 1.f, a, K, b, N, 0.f, y, N, ctx.threads);
      return Status::ok();
    }
    // Offsets of each output batch into A and B (broadcast batch dims).
    const size_t r = batch.size();
    std::vector<int64_t> aOff((size_t)nb), bOff((size_t)nb);
    {
      std::vector<int64_t> aStride(r, 0), bStride(r, 0);
      int64_t sa = M * K, sb = K * N;
      for (size_t i = r; i-- > 0;) {
        const size_t ia = i + aBatch.size(), ib = i + bBatch.size();  // index into padded shapes
        if (ia >= r) {
          int64_t d = aBatch[ia - r];
          aStride[i] = d == 1 ? 0 : sa;
          sa *= d;
        }
        if (ib >= r) {
          int64_t d = bBatch[ib - r];
          bStride[i] = d == 1 ? 0 : sb;
          sb *= d;
        }
      }
      std::vector<int64_t> idx(r, 0);
      for (int64_t t = 0; t < nb; ++t) {
        int64_t oa = 0, ob = 0;
        for (size_t i = 0; i < r; ++i) {
          oa += idx[i] * aStride[i];
          ob += idx[i] * bStride[i];
        }
        aOff[(size_t)t] = oa;
        bOff[(size_t)t] = ob;
        for (size_t i = r; i-- > 0;) {
          if (++idx[i] < batch[i]) break;
          idx[i] = 0;
        }
      }
    }
    if (nb >= ctx.threads && ctx.threads > 1) {
      ctx.parallelFor(nb, 1, [&](int64_t s, int64_t e) {
        for (int64_t t = s; t < e; ++t)
          sgemm(false, false, M, N, K, 1.f, a + aOff[(size_t)t], K, b + bOff[(size_t)t], N, 0.f, y + t * M * N, N, 1);
      });
    } else {
      for (int64_t t = 0; t < nb; ++t)
        sgemm(false, false, M, N, K, 1.f, a + aOff[(size_t)t], K, b + bOff[(size_t)t], N, 0.f, y + t * M * N, N,
              ctx.threads);
    }
    return Status::ok();
  }

 private:
  Tensor m_constB;
  std::shared_ptr<const PackedPanels> m_packedB;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createGemm(const KernelInit& init) {
  AttrReader a(init);
  const int64_t transA = a.i("transA", 0);
  const int64_t transB = a.i("transB", 0);
  const float alpha = a.f("alpha", 1.f);
  const float beta = a.f("beta", 1.f);
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<GemmKernel>(transA != 0, transB != 0, alpha, beta, init.constantInput(1)));
}

Result<std::unique_ptr<Kernel>> createMatMul(const KernelInit& init) {
  return std::unique_ptr<Kernel>(std::make_unique<MatMulKernel>(init.constantInput(1)));
}

}  // namespace qs
