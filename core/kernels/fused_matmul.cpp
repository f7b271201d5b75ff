// ai.quantscope FusedMatMul (opset 1), FP32: see fused_matmul.h.
#include "core/kernels/fused_matmul.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "core/exec/parallel.h"
#include "core/kernels/gemm.h"
#include "core/kernels/matmul_dnnl.h"
#include "core/kernels/softmax.h"

namespace qs {

namespace {

bool isPermutation(const std::vector<int64_t>& perm) {
  std::vector<char> seen(perm.size(), 0);
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)perm.size() || seen[(size_t)p]) return false;
    seen[(size_t)p] = 1;
  }
  return true;
}

Shape contiguousStrides(const Shape& s) {
  Shape st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// An operand as the GEMM reads it: shape and element strides after its perm (rank >= 2).
struct OperandView {
  Shape shape, strides;
};

Status viewOperand(const char* which, const Tensor& t, const std::vector<int64_t>& perm, OperandView& v) {
  Shape s = t.shape();
  Shape st = contiguousStrides(s);
  if (!perm.empty()) {
    if (perm.size() != s.size())
      return invalidArgument(std::string("FusedMatMul: perm_") + which + " has " + std::to_string(perm.size()) +
                             " entries for an input of shape " + shapeToString(s));
    Shape ps(s.size()), pst(s.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      ps[i] = s[(size_t)perm[i]];
      pst[i] = st[(size_t)perm[i]];
    }
    s = ps;
    st = pst;
  }
  v.shape = s;
  v.strides = st;
  return Status::ok();
}

// The GEMM's view of the last two dims: (rows x cols) with strides (rs, cs); one of them must be
// 1 (or its dim 1). trans: the matrix is stored transposed, ld its other stride.
bool matrixLayout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool& trans, int64_t& ld) {
  if (cs == 1 || cols == 1) {
    trans = false;
    ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if (rs == 1 || rows == 1) {
    trans = true;
    ld = cs;
    return true;
  }
  return false;
}

class FusedMatMulKernel : public Kernel {
 public:
  FusedMatMulKernel(std::vector<int64_t> permA, std::vector<int64_t> permB, std::vector<int64_t> permY, float alpha,
                    bool gelu, bool softmax)
      : m_permA(std::move(permA)),
        m_permB(std::move(permB)),
        m_permY(std::move(permY)),
        m_alpha(alpha),
        m_gelu(gelu),
        m_softmax(softmax) {}

  // A constant B (the layer's weights) with no batch of its own is packed here once; runs that
  // get that same tensor skip packing it per block.
  void prepack(const Tensor* constB) {
    if (!constB || constB->dtype() != DType::Float || constB->rank() < 2) return;
    OperandView b;
    if (!viewOperand("b", *constB, m_permB, b).isOk()) return;
    const size_t rb = b.shape.size();
    if (numelOf(Shape(b.shape.begin(), b.shape.end() - 2)) != 1) return;
    const int64_t K = b.shape[rb - 2], N = b.shape[rb - 1];
    bool transB = false;
    int64_t ldb = 0;
    if (K == 0 || N == 0 || !matrixLayout(K, N, b.strides[rb - 2], b.strides[rb - 1], transB, ldb)) return;
    m_constB = *constB;
    m_packedB = std::make_shared<const PackedPanels>(constB->data<float>(), ldb, transB, K, N);
    m_ldb = ldb;
    m_transB = transB;
  }

  // With library kernels, on CPUs where oneDNN's matmul runs AVX-512 kernels: the products of
  // rows of A with the prepacked B go to oneDNN (bias and Gelu as its bias and post-op; a bias that
  // is not a constant keeps our path). A transposed by perm_a is copied to rows first (run). The
  // weights are held in one column range per thread of the pool, so that a batch-1 product (more
  // columns than rows) splits its columns across the threads (DnnlMatMul::create); in at least 2
  // even with one thread, so that every pool size gives the same bits (oneDNN rounds a product
  // into a dense Y differently from one into a column range of Y).
  void useLibrary(const Tensor* constBias, int threads) {
    if (!m_packedB || !DnnlMatMul::preferred()) return;
    const int64_t K = m_packedB->rows(), N = m_packedB->cols();
    if (constBias && (constBias->dtype() != DType::Float || constBias->numel() != N)) return;
    m_constBias = constBias ? *constBias : Tensor();
    m_dnnl = DnnlMatMul::create(m_constB.data<float>(), m_ldb, m_transB, K, N,
                                constBias ? constBias->data<float>() : nullptr, m_alpha, m_gelu,
                                std::max(2, threads));
    if (m_dnnl) {
      // oneDNN holds its own copy; the rare products it does not take (batched A, a bias computed at
      // run time) read B in place rather than keep a third copy.
      m_libraryK = K;
      m_libraryN = N;
      m_packedB.reset();
    }
  }

  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() < 2 || !ctx.hasInput(0) || !ctx.hasInput(1))
      return invalidArgument("FusedMatMul needs inputs A and B");
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    if (A.dtype() != DType::Float || B.dtype() != DType::Float)
      return unsupported("FusedMatMul supports float32 only, got A " + dtypeName(A.dtype()) + ", B " +
                         dtypeName(B.dtype()));
    OperandView a, b;
    QS_RETURN_IF_ERROR(viewOperand("a", A, m_permA, a));
    QS_RETURN_IF_ERROR(viewOperand("b", B, m_permB, b));
    // 1-D operands (no perm): numpy matmul's promotion, the added dim dropped from the result.
    const bool aVec = a.shape.size() == 1, bVec = b.shape.size() == 1;
    if (a.shape.empty() || b.shape.empty())
      return invalidArgument("FusedMatMul operands must have rank >= 1, got " + shapeToString(A.shape()) + " and " +
                             shapeToString(B.shape()));
    if (aVec) {
      a.shape.insert(a.shape.begin(), 1);
      a.strides.insert(a.strides.begin(), a.shape[1]);
    }
    if (bVec) {
      b.shape.push_back(1);
      b.strides.push_back(1);
    }
    const size_t ra = a.shape.size(), rb = b.shape.size();
    int64_t M = a.shape[ra - 2];
    const int64_t K = a.shape[ra - 1], Kb = b.shape[rb - 2], N = b.shape[rb - 1];
    if (K != Kb)
      return invalidArgument("FusedMatMul inner dims differ: " + shapeToString(a.shape) + " x " + shapeToString(b.shape));
    bool transA = false, transB = false;
    int64_t lda = 0, ldb = 0;
    if (!matrixLayout(M, K, a.strides[ra - 2], a.strides[ra - 1], transA, lda) ||
        !matrixLayout(K, N, b.strides[rb - 2], b.strides[rb - 1], transB, ldb))
      return invalidArgument("FusedMatMul: a perm moves the operand's last dim out of the matrix dims");
    Shape aBatch(a.shape.begin(), a.shape.end() - 2), bBatch(b.shape.begin(), b.shape.end() - 2), batch;
    if (!broadcastShapes(aBatch, bBatch, batch))
      return invalidArgument("FusedMatMul batch dims do not broadcast: " + shapeToString(a.shape) + " x " +
                             shapeToString(b.shape));
    // The product's shape R = batch + [M, N] and where each of its dims lands in Y.
    Shape R = batch;
    R.push_back(M);
    R.push_back(N);
    const size_t r = R.size();
    Shape yShape = R, rStride = contiguousStrides(R);
    if (!m_permY.empty()) {
      if (aVec || bVec || m_permY.size() != r || m_permY.back() != (int64_t)r - 1)
        return invalidArgument("FusedMatMul: perm_y does not fit a product of shape " + shapeToString(R));
      for (size_t i = 0; i < r; ++i) yShape[i] = R[(size_t)m_permY[i]];
      const Shape yStride = contiguousStrides(yShape);
      for (size_t i = 0; i < r; ++i) rStride[(size_t)m_permY[i]] = yStride[i];
    } else {
      if (aVec) yShape.erase(yShape.end() - 2);
      if (bVec) yShape.pop_back();
    }
    if (m_softmax && (aVec || bVec))
      return invalidArgument("FusedMatMul: softmax needs operands of rank >= 2, got " + shapeToString(A.shape()) +
                             " and " + shapeToString(B.shape()));
    // The addend (input 3, before the Softmax): its strides over R, 0 where it broadcasts. One
    // that grows the product (the rewrite cannot always see shapes) is added after it (grown).
    const float* addend = nullptr;
    Shape dStride(r, 0), zShape;
    bool grows = false;
    if (ctx.hasInput(3)) {
      const Tensor& D = ctx.input(3);
      const Shape& ds = D.shape();
      if (!m_softmax || D.dtype() != DType::Float || !broadcastShapes(R, ds, zShape))
        return invalidArgument("FusedMatMul addend " + shapeToString(ds) + " (" + dtypeName(D.dtype()) +
                               ") does not broadcast with the float product " + shapeToString(R) +
                               (m_softmax ? "" : " (no softmax)"));
      grows = zShape != R;
      const Shape dContig = contiguousStrides(ds);
      for (size_t i = r - std::min(r, ds.size()); i < r && !grows; ++i) {
        const int64_t d = ds[i - (r - ds.size())];
        dStride[i] = d == 1 ? 0 : dContig[i - (r - ds.size())];
      }
      addend = D.data<float>();
    }
    const float* bias = nullptr;
    if (ctx.hasInput(2)) {
      const Tensor& bt = ctx.input(2);
      if (bt.dtype() != DType::Float || bt.numel() != N || (bt.rank() > 0 && bt.shape().back() != N))
        return invalidArgument("FusedMatMul bias " + shapeToString(bt.shape()) + " is not [" + std::to_string(N) + "]");
      bias = bt.data<float>();
    }
    ctx.outputs[0] = Tensor(DType::Float, grows ? zShape : yShape);
    std::vector<float> grown((size_t)(grows ? numelOf(R) : 0));  // the product, when the addend grows it
    float* y = grows ? grown.data() : ctx.outputs[0].data<float>();
    int64_t nb = numelOf(batch);
    if (nb == 0 || M == 0 || N == 0) return Status::ok();
    int64_t ldc = rStride[r - 2];
    // B shared by every batch, A and Y contiguous: one product of nb * M rows (a Linear layer
    // on [N, T, d] or [N, H, W, C]), not nb small ones that each pack B again.
    if (nb > 1 && m_permA.empty() && m_permY.empty() && !m_softmax && numelOf(bBatch) == 1 &&
        numelOf(aBatch) == nb) {
      M *= nb;
      nb = 1;
      aBatch.clear();
      bBatch.clear();
      batch.clear();
      ldc = N;
    }
    // Batch offsets into A, B and Y (broadcast dims have stride 0).
    std::vector<int64_t> aOff((size_t)nb), bOff((size_t)nb), yOff((size_t)nb), dOff((size_t)nb);
    {
      const size_t br = batch.size();
      std::vector<int64_t> idx(br, 0);
      for (int64_t t = 0; t < nb; ++t) {
        int64_t oa = 0, ob = 0, oy = 0, od = 0;
        for (size_t i = 0; i < br; ++i) {
          const size_t ia = i + aBatch.size(), ib = i + bBatch.size();  // right-aligned
          if (ia >= br && aBatch[ia - br] != 1) oa += idx[i] * a.strides[ia - br];
          if (ib >= br && bBatch[ib - br] != 1) ob += idx[i] * b.strides[ib - br];
          oy += idx[i] * rStride[i];
          od += idx[i] * dStride[i];
        }
        aOff[(size_t)t] = oa;
        bOff[(size_t)t] = ob;
        yOff[(size_t)t] = oy;
        dOff[(size_t)t] = od;
        for (size_t i = br; i-- > 0;) {
          if (++idx[i] < batch[i]) break;
          idx[i] = 0;
        }
      }
    }
    const float* pa = A.data<float>();
    const float* pb = B.data<float>();
    // Product t's rows, once complete: + addend, then Softmax over each row (the addition and
    // the row are the Add and Softmax kernels' own, so the bits are theirs).
    auto softmaxRows = [&](int64_t t, int threads) {
      if (!m_softmax || grows) return;
      float* yt = y + yOff[(size_t)t];
      const float* dt = addend ? addend + dOff[(size_t)t] : nullptr;
      const int64_t dRow = dStride[r - 2], dCol = dStride[r - 1];
      auto rows = [&](int64_t s, int64_t e) {
        thread_local std::vector<float> sum;
        sum.resize((size_t)N);
        for (int64_t m = s; m < e; ++m) {
          float* row = yt + m * ldc;
          if (dt) {
            const float* d = dt + m * dRow;
            if (dCol == 1) {
              for (int64_t j = 0; j < N; ++j) sum[(size_t)j] = row[j] + d[j];
            } else {
              for (int64_t j = 0; j < N; ++j) sum[(size_t)j] = row[j] + d[j * dCol];
            }
          } else {
            std::memcpy(sum.data(), row, sizeof(float) * (size_t)N);
          }
          softmaxRowAsKernel(sum.data(), row, N);
        }
      };
      if (threads <= 1 || M < 2) rows(0, M);
      else parallelFor(threads, M, std::max<int64_t>(1, 16384 / N), rows);
    };
    if (K == 0) {
      for (int64_t t = 0; t < nb; ++t) {
        for (int64_t m = 0; m < M; ++m) {
          float* row = y + yOff[(size_t)t] + m * ldc;
          std::memset(row, 0, sizeof(float) * (size_t)N);
          epilogue(row, 1, N, N, bias);
        }
        softmaxRows(t, 1);
      }
      if (grows) addThenSoftmax(grown.data(), R, ctx.input(3), ctx.outputs[0]);
      return Status::ok();
    }
    // One product: its blocks across the threads. Many small ones (attention heads): one
    // product per task, each single-threaded.
    const PackedPanels* packedB = m_packedB && B.sharesBufferWith(m_constB) && B.shape() == m_constB.shape() &&
                                          m_packedB->rows() == K && m_packedB->cols() == N
                                      ? m_packedB.get()
                                      : nullptr;
    const bool constantB = m_dnnl && B.sharesBufferWith(m_constB) && B.shape() == m_constB.shape() &&
                           K == m_libraryK && N == m_libraryN;
    // Every batch of A against the one constant B (B has no batch of its own: prepack took it), so
    // products that keep a batch (perm_y) go to oneDNN too, which holds the only packed copy of B.
    if (constantB && !aVec && !m_softmax &&
        (ctx.hasInput(2) ? m_constBias.numel() == N && ctx.input(2).sharesBufferWith(m_constBias) : m_constBias.numel() == 0)) {
      // A transposed by perm_a (rec's head: [1, 120, 40] read as [1, 40, 120]) is copied to M rows
      // of K first: M * K floats, against the M * N * K multiply-adds oneDNN then takes.
      std::vector<float> rows(transA ? (size_t)(M * K) : 0);
      bool done = true;
      for (int64_t t = 0; t < nb && done; ++t) {
        const float* at = pa + aOff[(size_t)t];
        if (transA) {
          for (int64_t m = 0; m < M; ++m)
            for (int64_t k = 0; k < K; ++k) rows[(size_t)(m * K + k)] = at[k * lda + m];
        }
        done = transA ? m_dnnl->run(rows.data(), K, M, y + yOff[(size_t)t], ldc, ctx.threads).isOk()
                      : m_dnnl->run(at, lda, M, y + yOff[(size_t)t], ldc, ctx.threads).isOk();
      }
      if (done) return Status::ok();
    }
    auto product = [&](int64_t t, int threads) {
      const PackedMatrix pm = PackedMatrix::packScratch(pa + aOff[(size_t)t], lda, M, K, transA, m_alpha);
      // Blocks of equal work, as many per thread, on the pool directly (ctx.parallelFor's
      // grain scaling would hand one thread twice the blocks of the other: 12 blocks as 3 chunks of 4).
      const GemmBlocks blocks = balancedGemmBlocks(M, N, K, threads);
      const float* bt = pb + bOff[(size_t)t];
      float* yt = y + yOff[(size_t)t];
      auto block = [&](int64_t s, int64_t e) {
        for (int64_t q = s; q < e; ++q) {
          int64_t m0, m1, n0, w;
          blocks.block(q, m0, m1, n0, w);
          const float* bb = transB ? bt + n0 * ldb : bt + n0;
          float* c = yt + m0 * ldc + n0;
          if (packedB) gemmBlockPacked(pm, m0, m1, *packedB, n0, w, c, ldc, false);
          else gemmBlock(pm, m0, m1, bb, ldb, transB, w, c, ldc, false);
          epilogue(c, m1 - m0, w, ldc, bias ? bias + n0 : nullptr);
        }
      };
      if (threads <= 1 || blocks.count() == 1) {
        block(0, blocks.count());
      } else {
        parallelFor(threads, blocks.count(), 1, block);
      }
      softmaxRows(t, threads);
    };
    const double flops = 2.0 * (double)M * (double)N * (double)K;
    if (nb > 1 && ctx.threads > 1 && (nb >= 2 * ctx.threads || flops < 4e6)) {
      // ctx.parallelFor's grain (2e5 flops, scaled by 4 there) made even per thread: 12 heads
      // on 2 threads as 6 chunks of 2, not 3 chunks of 4.
      const int64_t grain = balancedGrain(nb, ctx.threads, std::max<int64_t>(1, (int64_t)(8e5 / flops)));
      parallelFor(ctx.threads, nb, grain, [&](int64_t s, int64_t e) {
        for (int64_t t = s; t < e; ++t) product(t, 1);
      });
    } else {
      for (int64_t t = 0; t < nb; ++t) product(t, ctx.threads);
    }
    if (grows) addThenSoftmax(y, R, ctx.input(3), ctx.outputs[0]);
    return Status::ok();
  }

 private:
  // Z = Softmax(P + D) over the last axis where D grows the product P (shape R) to Z's shape: each
  // row of Z from the rows of P and D that broadcast to it. Rare (an addend with more dims or a
  // larger batch than the scores), so one thread.
  static void addThenSoftmax(const float* p, const Shape& R, const Tensor& D, Tensor& Z) {
    const Shape& zs = Z.shape();
    const size_t rz = zs.size();
    auto broadcastStrides = [&](const Shape& s) {
      Shape st(rz, 0);
      const Shape c = contiguousStrides(s);
      for (size_t i = 0; i < s.size(); ++i) {
        const size_t j = i + rz - s.size();
        st[j] = s[i] == 1 && zs[j] != 1 ? 0 : c[i];
      }
      return st;
    };
    const Shape ps = broadcastStrides(R), ds = broadcastStrides(D.shape());
    const int64_t L = zs.empty() ? 1 : zs.back();
    const int64_t rows = L == 0 ? 0 : Z.numel() / L;
    const float* d = D.data<float>();
    float* z = Z.data<float>();
    std::vector<float> sum((size_t)L);
    std::vector<int64_t> idx(rz, 0);
    for (int64_t row = 0; row < rows; ++row) {
      int64_t op = 0, od = 0;
      for (size_t i = 0; i + 1 < rz; ++i) {
        op += idx[i] * ps[i];
        od += idx[i] * ds[i];
      }
      for (int64_t j = 0; j < L; ++j) sum[(size_t)j] = p[op + j * ps[rz - 1]] + d[od + j * ds[rz - 1]];
      softmaxRowAsKernel(sum.data(), z + row * L, L);
      for (size_t i = rz - 1; i-- > 0;) {
        if (++idx[i] < zs[i]) break;
        idx[i] = 0;
      }
    }
  }

  // Bias and activation over rows x w of C (leading dimension ldc), in place.
  void epilogue(float* c, int64_t rows, int64_t w, int64_t ldc, const float* bias) const {
    if (!bias && !m_gelu) return;
    for (int64_t i = 0; i < rows; ++i) {
      float* row = c + i * ldc;
      if (bias)
        for (int64_t j = 0; j < w; ++j) row[j] += bias[j];
      if (m_gelu) {
        Eigen::Map<Eigen::ArrayXf> v(row, w);
        v = 0.5f * v * (1.f + (v * 0.70710678118654752440f).erf());
      }
    }
  }

  std::vector<int64_t> m_permA, m_permB, m_permY;
  float m_alpha;
  bool m_gelu;
  bool m_softmax;  // Softmax over each row of the result, after + input 3 when given
  Tensor m_constB;
  std::shared_ptr<const PackedPanels> m_packedB;
  int64_t m_ldb = 0;
  bool m_transB = false;
  Tensor m_constBias;                  // the bias m_dnnl was made with (empty: none)
  std::unique_ptr<DnnlMatMul> m_dnnl;  // oneDNN's matmul (useLibrary), else null
  int64_t m_libraryK = 0, m_libraryN = 0;
};

}  // namespace

bool matMulOperandPermFoldable(const std::vector<int64_t>& perm) {
  const size_t r = perm.size();
  if (r < 2 || !isPermutation(perm)) return false;
  return perm[r - 1] == (int64_t)r - 1 || perm[r - 2] == (int64_t)r - 1;
}

bool matMulResultPermFoldable(const std::vector<int64_t>& perm) {
  return perm.size() >= 2 && isPermutation(perm) && perm.back() == (int64_t)perm.size() - 1;
}

Result<std::unique_ptr<Kernel>> createFusedMatMul(const KernelInit& init) {
  AttrReader a(init);
  std::vector<int64_t> permA = a.ints("perm_a"), permB = a.ints("perm_b"), permY = a.ints("perm_y");
  const float alpha = a.f("alpha", 1.f);
  const std::string act = a.s("activation", "");
  if ((!permA.empty() && !matMulOperandPermFoldable(permA)) || (!permB.empty() && !matMulOperandPermFoldable(permB)))
    a.fail("perm_a / perm_b must be permutations that keep the operand's last dim in the matrix dims");
  if (!permY.empty() && !matMulResultPermFoldable(permY)) a.fail("perm_y must be a permutation that keeps the last dim last");
  if (!act.empty() && act != "Gelu") a.fail("unsupported activation '" + act + "'");
  const bool softmax = a.i("softmax", 0) != 0;
  if (softmax && (!act.empty() || !permY.empty())) a.fail("softmax does not combine with an activation or perm_y");
  if (!a.ok()) return a.status();
  auto kernel =
      std::make_unique<FusedMatMulKernel>(std::move(permA), std::move(permB), std::move(permY), alpha, act == "Gelu",
                                          softmax);
  kernel->prepack(init.constantInput(1));
  if (init.libraryKernels)
    kernel->useLibrary(init.node.inputs.size() > 2 ? init.constantInput(2) : nullptr, init.threads);
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace qs
