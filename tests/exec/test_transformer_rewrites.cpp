// The transformer rewrites of issue 13 (core/exec/graph_rewrites.h): Transposes, scale, bias and
// the Erf form of Gelu absorbed into FusedMatMul, and the decomposed LayerNorm of older exporters
// recognised as one LayerNormalization. Each on small generated models: rewrites on equal to
// rewrites off within float rounding, the counts of what was fused, and near-misses that must be
// left alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/exec/executor.h"
#include "core/exec/graph_rewrites.h"
#include "core/exec/kernel_registry.h"
#include "core/kernels/conv.h"
#include "core/kernels/fused_matmul.h"
#include "core/kernels/matmul_dnnl.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;
using qs::test::builtModel;
using qs::test::randomTensor;
using qs::test::randomValues;
using qs::test::relativeError;

namespace {

RewriteReport rewriteReport(const Model& m) {
  RewriteReport r;
  auto out = rewriteForInference(m, KernelRegistry::builtin(), 1, &r);
  EXPECT_TRUE(out) << out.status().message();
  return r;
}

// Runs the model with rewrites off and on (and on with 1 thread): the outputs must agree. With
// `library`, the rewritten runs use library kernels (oneDNN), as the CLI's do.
void expectSameResults(const std::shared_ptr<Model>& m, const std::vector<NamedTensor>& feeds, double tol = 2e-6,
                       bool library = false) {
  ExecutorOptions off, on, on1;
  off.threads = on.threads = 2;
  on.rewrites = on1.rewrites = true;
  on.libraryKernels = on1.libraryKernels = library;
  on1.threads = 1;
  auto a = Executor::create(m, off), b = Executor::create(m, on), c = Executor::create(m, on1);
  ASSERT_TRUE(a && b && c);
  ASSERT_TRUE((*b)->rewritesActive());
  auto ra = (*a)->run(feeds), rb = (*b)->run(feeds), rc = (*c)->run(feeds);
  ASSERT_TRUE(ra) << ra.status().message();
  ASSERT_TRUE(rb) << rb.status().message();
  ASSERT_TRUE(rc) << rc.status().message();
  ASSERT_EQ(ra->size(), rb->size());
  for (size_t i = 0; i < ra->size(); ++i) {
    EXPECT_LE(relativeError((*rb)[i], (*ra)[i]), tol) << "output " << i;
    ASSERT_EQ((*rb)[i].numel(), (*rc)[i].numel());
    for (int64_t k = 0; k < (*rb)[i].numel(); ++k)
      ASSERT_EQ((*rb)[i].data<float>()[k], (*rc)[i].data<float>()[k]) << "1 vs 2 threads, output " << i;
  }
}

// Attention as torch exports it: q, k, v [N, T, h, dh] transposed to heads, q @ k^T / s + mask,
// Softmax over the last axis, @ v, transposed back. qkBatch: the batch of q and k (v and the mask
// keep 2; 1 makes the mask grow the scores [1, 3, 5, 5] to [2, 3, 5, 5]).
OnnxBuilder attentionModel(const std::vector<int64_t>& permK = {0, 2, 3, 1}, int64_t qkBatch = 2) {
  OnnxBuilder b(13);
  b.input("q", {qkBatch, 5, 3, 4}).input("k", {qkBatch, 5, 3, 4}).input("v", {2, 5, 3, 4}).input("mask", {2, 1, 1, 5});
  b.initializer("scale", {}, {2.f});
  OnnxBuilder::attrInts(b.node("Transpose", {"q"}, {"qt"}), "perm", {0, 2, 1, 3});
  OnnxBuilder::attrInts(b.node("Transpose", {"k"}, {"kt"}), "perm", permK);
  OnnxBuilder::attrInts(b.node("Transpose", {"v"}, {"vt"}), "perm", {0, 2, 1, 3});
  b.node("MatMul", {"qt", "kt"}, {"s"});
  b.node("Div", {"s", "scale"}, {"sd"});
  b.node("Add", {"sd", "mask"}, {"sm"});
  OnnxBuilder::attrInt(b.node("Softmax", {"sm"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "vt"}, {"o"});
  OnnxBuilder::attrInts(b.node("Transpose", {"o"}, {"y"}), "perm", {0, 2, 1, 3});
  b.output("y", {2, 5, 3, 4});
  return b;
}

std::vector<NamedTensor> attentionFeeds(std::mt19937& rng) {
  return {{"q", randomTensor({2, 5, 3, 4}, rng)},
          {"k", randomTensor({2, 5, 3, 4}, rng)},
          {"v", randomTensor({2, 5, 3, 4}, rng)},
          {"mask", randomTensor({2, 1, 1, 5}, rng, -3.f, 0.f)}};
}

// A Linear layer [N, T, d] -> [N, T, f] (MatMul + bias Add) then the Erf form of Gelu.
OnnxBuilder linearGeluModel(float sqrt2 = 1.41421356f, bool biasPerRow = false, bool intermediateOutput = false) {
  std::mt19937 rng(5);
  OnnxBuilder b(13);
  b.input("x", {2, 3, 8});
  b.initializer("w", {8, 16}, randomValues(8 * 16, rng));
  if (biasPerRow) {
    b.initializer("bias", {3, 16}, randomValues(3 * 16, rng));
  } else {
    b.initializer("bias", {16}, randomValues(16, rng));
  }
  b.initializer("sqrt2", {}, {sqrt2});
  b.initializer("one", {}, {1.f});
  b.initializer("half", {}, {0.5f});
  b.node("MatMul", {"x", "w"}, {"h"});
  b.node("Add", {"bias", "h"}, {"hb"});
  b.node("Div", {"hb", "sqrt2"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"e1"});
  b.node("Mul", {"hb", "e1"}, {"g"});
  b.node("Mul", {"g", "half"}, {"y"});
  b.output("y", {2, 3, 16});
  if (intermediateOutput) b.output("e", {2, 3, 16});
  return b;
}

// The LayerNorm of older exporters over the last axis, epsilon from the graph.
OnnxBuilder decomposedLayerNormModel(int64_t varAxis = -1, float eps = 1e-3f) {
  std::mt19937 rng(9);
  OnnxBuilder b(13);
  b.input("x", {2, 3, 8});
  b.initializer("two", {}, {2.f});
  b.initializer("eps", {}, {eps});
  b.initializer("gamma", {8}, randomValues(8, rng, 0.5f, 1.5f));
  b.initializer("beta", {8}, randomValues(8, rng));
  OnnxBuilder::attrInts(b.node("ReduceMean", {"x"}, {"mean"}), "axes", {-1});
  b.node("Sub", {"x", "mean"}, {"d"});
  b.node("Pow", {"d", "two"}, {"d2"});
  OnnxBuilder::attrInts(b.node("ReduceMean", {"d2"}, {"var"}), "axes", {varAxis});
  b.node("Add", {"var", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"sd"});
  b.node("Div", {"d", "sd"}, {"n"});
  b.node("Mul", {"n", "gamma"}, {"s"});
  b.node("Add", {"s", "beta"}, {"y"});
  b.output("y", {2, 3, 8});
  return b;
}

}  // namespace

TEST(TransformerRewrites, AttentionTransposesAndScaleFoldIntoMatMuls) {
  auto m = builtModel(attentionModel());
  ASSERT_TRUE(m);
  const RewriteReport r = rewriteReport(*m);
  EXPECT_EQ(r.fusedMatMuls, 2);
  // q, k Transposes, the Div, the mask Add and the Softmax into the first; the v Transpose and the
  // output Transpose into the second.
  EXPECT_EQ(r.foldedIntoMatMul, 7);
  std::mt19937 rng(1);
  expectSameResults(m, attentionFeeds(rng));
}

TEST(TransformerRewrites, MaskThatGrowsTheScoresStillMatchesUnrewritten) {
  // Scores [1, 3, 5, 5] + mask [2, 1, 1, 5] is [2, 3, 5, 5]: larger than the product, so the kernel
  // adds the mask after it (exported attention often has no shapes at load to tell this apart).
  auto m = builtModel(attentionModel({0, 2, 3, 1}, 1));
  ASSERT_TRUE(m);
  const RewriteReport r = rewriteReport(*m);
  EXPECT_EQ(r.fusedMatMuls, 2);
  EXPECT_EQ(r.foldedIntoMatMul, 7);
  std::mt19937 rng(3);
  auto feeds = attentionFeeds(rng);
  feeds[0].tensor = randomTensor({1, 5, 3, 4}, rng);
  feeds[1].tensor = randomTensor({1, 5, 3, 4}, rng);
  expectSameResults(m, feeds);
}

// FusedMatMul with softmax (and an addend) against the same FusedMatMul followed by the Add and
// Softmax nodes, rewrites off: the same bits, at 1 and 2 threads. A [nb, M, K] @ B [K, N] (nb > 1:
// one product per head; nb = 1: one product over the threads, its rows then split), the addend
// shaped `dShape` (empty: none).
void expectSoftmaxFusedBits(int64_t nb, int64_t M, int64_t K, int64_t N, const std::vector<int64_t>& dShape) {
  std::mt19937 rng(17);
  const std::vector<float> w = randomValues((size_t)(K * N), rng);
  std::shared_ptr<Model> m[2];
  for (int fused = 0; fused < 2; ++fused) {
    OnnxBuilder b(13);
    auto* os = b.proto().add_opset_import();
    os->set_domain(kFusedDomain);
    os->set_version(1);
    b.input("a", {nb, M, K});
    if (!dShape.empty()) b.input("d", dShape);
    b.initializer("w", {K, N}, w);
    if (fused) {
      auto& n = b.node(kFusedMatMulOp, {"a", "w", "", dShape.empty() ? "" : "d"}, {"y"});
      n.set_domain(kFusedDomain);
      OnnxBuilder::attrFloat(n, "alpha", 0.35f);
      OnnxBuilder::attrInt(n, "softmax", 1);
    } else {
      auto& n = b.node(kFusedMatMulOp, {"a", "w"}, {"s"});
      n.set_domain(kFusedDomain);
      OnnxBuilder::attrFloat(n, "alpha", 0.35f);
      if (!dShape.empty()) b.node("Add", {"s", "d"}, {"sd"});
      OnnxBuilder::attrInt(b.node("Softmax", {dShape.empty() ? "s" : "sd"}, {"y"}), "axis", -1);
    }
    b.output("y", {nb, M, N});
    m[fused] = builtModel(b);
    ASSERT_TRUE(m[fused]);
  }
  std::vector<NamedTensor> feeds = {{"a", randomTensor({nb, M, K}, rng)}};
  if (!dShape.empty()) feeds.push_back({"d", randomTensor(Shape(dShape.begin(), dShape.end()), rng, -4.f, 1.f)});
  std::vector<Tensor> ref;
  for (int threads : {1, 2})
    for (int fused = 0; fused < 2; ++fused) {
      ExecutorOptions o;
      o.threads = threads;
      auto e = Executor::create(m[fused], o);
      ASSERT_TRUE(e) << e.status().message();
      auto r = (*e)->run(feeds);
      ASSERT_TRUE(r) << r.status().message();
      if (ref.empty()) {
        ref = *r;
        continue;
      }
      ASSERT_EQ((*r)[0].shape(), ref[0].shape());
      int64_t differ = 0;
      for (int64_t i = 0; i < ref[0].numel(); ++i)
        differ += std::memcmp(&(*r)[0].data<float>()[i], &ref[0].data<float>()[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0) << "fused " << fused << " threads " << threads << ", " << nb << "x" << M << "x" << K << "x"
                           << N;
    }
}

TEST(TransformerRewrites, SoftmaxInTheProductGivesTheAddAndSoftmaxBits) {
  expectSoftmaxFusedBits(12, 20, 8, 20, {1, 1, 20});    // a mask over the columns, per head products
  expectSoftmaxFusedBits(12, 20, 8, 37, {12, 20, 37});  // a full addend (a position bias), odd row length
  expectSoftmaxFusedBits(3, 16, 8, 49, {3, 1, 49});     // per batch, broadcast over the rows
  expectSoftmaxFusedBits(1, 300, 64, 130, {130});       // one product over the threads, its rows split
  expectSoftmaxFusedBits(4, 9, 5, 11, {});              // no addend
}

TEST(TransformerRewrites, TransposeMovingTheLastDimIsNotFolded) {
  // k transposed with perm {0, 3, 1, 2}: dims (h, dh)... the input's last dim becomes dim 1, outside
  // the matrix dims; a GEMM cannot read that with a leading dimension. Shapes: k [2, 5, 3, 4] ->
  // [2, 4, 5, 3]; the MatMul then multiplies [2, 3, 5, 4] x [2, 4, 5, 3]: batch dims (2, 3) vs
  // (2, 4) do not broadcast, so use a model of its own.
  OnnxBuilder b(13);
  b.input("a", {2, 3, 5, 4}).input("k", {2, 5, 3, 4});
  OnnxBuilder::attrInts(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 3, 1, 2});  // [2, 4, 5, 3]
  b.node("MatMul", {"a", "kt"}, {"y"});  // [2, 3, 5, 4] x [2, 4, 5, 3]: batch (2, 3) vs (2, 4)
  b.output("y", {-1, -1, -1, -1});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  const RewriteReport r = rewriteReport(*m);
  EXPECT_EQ(r.foldedIntoMatMul, 0);
  EXPECT_EQ(r.fusedMatMuls, 0);
}

TEST(TransformerRewrites, FoldableAndUnfoldablePerms) {
  EXPECT_TRUE(matMulOperandPermFoldable({0, 2, 1, 3}));
  EXPECT_TRUE(matMulOperandPermFoldable({0, 2, 3, 1}));
  EXPECT_FALSE(matMulOperandPermFoldable({0, 3, 1, 2}));
  EXPECT_FALSE(matMulOperandPermFoldable({0, 0, 1, 3}));
}

TEST(TransformerRewrites, LinearBiasAndErfGeluFuse) {
  auto m = builtModel(linearGeluModel());
  ASSERT_TRUE(m);
  const RewriteReport r = rewriteReport(*m);
  EXPECT_EQ(r.fusedMatMuls, 1);
  EXPECT_EQ(r.foldedIntoMatMul, 6);  // Add bias + Div, Erf, Add, Mul, Mul
  std::mt19937 rng(2);
  expectSameResults(m, {{"x", randomTensor({2, 3, 8}, rng, -2.f, 2.f)}});
}

TEST(TransformerRewrites, LoneMatMulWithConstantWeightsGoesToFusedMatMulWhereOneDnnIsPreferred) {
  // gpt_decoder's head: x @ W with nothing to absorb. Where oneDNN's matmul is preferred (AVX-512
  // CPUs, or QS_DNNL_MATMUL=1) it becomes a FusedMatMul, whose kernel takes it to oneDNN; elsewhere
  // it stays a MatMul. A B computed at run time stays a MatMul everywhere.
  std::mt19937 rng(6);
  OnnxBuilder b(13);
  b.input("x", {2, 3, 8}).input("v", {8, 16});
  b.initializer("w", {8, 16}, randomValues(8 * 16, rng));
  b.node("MatMul", {"x", "w"}, {"y"});
  b.node("MatMul", {"x", "v"}, {"z"});
  b.output("y", {2, 3, 16}).output("z", {2, 3, 16});
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  const RewriteReport r = rewriteReport(*m);
  EXPECT_EQ(r.fusedMatMuls, DnnlMatMul::preferred() ? 1 : 0);
  EXPECT_EQ(r.foldedIntoMatMul, 0);
  expectSameResults(m, {{"x", randomTensor({2, 3, 8}, rng)}, {"v", randomTensor({8, 16}, rng)}}, 2e-6, true);
}

TEST(TransformerRewrites, TransposedInputAgainstConstantWeightsMatchesUnrewritten) {
  // rec's head: x [N, K, M] transposed to [N, M, K], @ W [K, C] + bias. Where oneDNN's matmul is
  // preferred, FusedMatMul copies the transposed A to rows and hands them to oneDNN; elsewhere our
  // GEMM reads A transposed. Odd sizes, batch 1 and 2 (two products against the one B).
  std::mt19937 rng(7);
  for (int64_t n : {1, 2}) {
    OnnxBuilder b(13);
    b.input("x", {n, 13, 7});
    b.initializer("w", {13, 37}, randomValues(13 * 37, rng));
    b.initializer("bias", {37}, randomValues(37, rng));
    OnnxBuilder::attrInts(b.node("Transpose", {"x"}, {"xt"}), "perm", {0, 2, 1});
    b.node("MatMul", {"xt", "w"}, {"h"});
    b.node("Add", {"h", "bias"}, {"y"});
    b.output("y", {n, 7, 37});
    auto m = builtModel(b);
    ASSERT_TRUE(m);
    const RewriteReport r = rewriteReport(*m);
    EXPECT_EQ(r.fusedMatMuls, 1);
    EXPECT_EQ(r.foldedIntoMatMul, 2);
    expectSameResults(m, {{"x", randomTensor({n, 13, 7}, rng)}}, 2e-6, true);
  }
}

TEST(TransformerRewrites, NearMissGeluAndBiasAreLeftAlone) {
  std::mt19937 rng(3);
  {  // Div by 2 is not Gelu: only the bias is absorbed
    auto m = builtModel(linearGeluModel(2.f));
    ASSERT_TRUE(m);
    const RewriteReport r = rewriteReport(*m);
    EXPECT_EQ(r.foldedIntoMatMul, 1);
    expectSameResults(m, {{"x", randomTensor({2, 3, 8}, rng)}});
  }
  {  // a [T, N] bias is not a per-column bias; Gelu then has no MatMul output to attach to
    auto m = builtModel(linearGeluModel(1.41421356f, true));
    ASSERT_TRUE(m);
    const RewriteReport r = rewriteReport(*m);
    EXPECT_EQ(r.foldedIntoMatMul, 0);
    expectSameResults(m, {{"x", randomTensor({2, 3, 8}, rng)}});
  }
  {  // an intermediate of the Gelu chain is a graph output: the chain stays
    auto m = builtModel(linearGeluModel(1.41421356f, false, true));
    ASSERT_TRUE(m);
    const RewriteReport r = rewriteReport(*m);
    EXPECT_EQ(r.foldedIntoMatMul, 1);
    expectSameResults(m, {{"x", randomTensor({2, 3, 8}, rng)}});
  }
}

TEST(TransformerRewrites, DecomposedLayerNormBecomesOneOpWithTheGraphsEpsilon) {
  auto m = builtModel(decomposedLayerNormModel());
  ASSERT_TRUE(m);
  const RewriteReport r = rewriteReport(*m);
  EXPECT_EQ(r.fusedLayerNorms, 1);
  std::mt19937 rng(4);
  // Small values: the variance (~1e-4) is below epsilon (1e-3), so a wrong epsilon shows.
  expectSameResults(m, {{"x", randomTensor({2, 3, 8}, rng, -0.02f, 0.02f)}}, 1e-5);
  expectSameResults(m, {{"x", randomTensor({2, 3, 8}, rng, -3.f, 3.f)}}, 1e-5);
}

// A residual Add feeding LayerNormalization (opset 17, last axis): `skipShape` the second addend's
// shape; `sumRead`: the sum is also read by a Mul (a pre-LN block's next residual); `axis` of the norm.
std::shared_ptr<Model> residualLayerNormModel(const std::vector<int64_t>& skipShape, bool sumRead, int64_t axis = -1) {
  std::mt19937 rng(21);
  OnnxBuilder b(17);
  b.input("x", {2, 3, 40}).input("r", skipShape);
  b.initializer("gamma", {40}, randomValues(40, rng, 0.5f, 1.5f));
  b.initializer("beta", {40}, randomValues(40, rng));
  b.initializer("two", {}, {2.f});
  b.node("Add", {"x", "r"}, {"s"});
  auto& ln = b.node("LayerNormalization", {"s", "gamma", "beta"}, {"y"});
  OnnxBuilder::attrInt(ln, "axis", axis);
  OnnxBuilder::attrFloat(ln, "epsilon", 1e-3f);
  b.output("y", {2, 3, 40});
  if (sumRead) {
    b.node("Mul", {"s", "two"}, {"z"});
    b.output("z", {2, 3, 40});
  }
  return builtModel(b);
}

// Rewrites off and on (2 threads and 1): every output the same bits.
void expectSameBits(const std::shared_ptr<Model>& m, const std::vector<NamedTensor>& feeds) {
  ExecutorOptions off, on, on1;
  off.threads = on.threads = 2;
  on.rewrites = on1.rewrites = true;
  on1.threads = 1;
  auto a = Executor::create(m, off), b = Executor::create(m, on), c = Executor::create(m, on1);
  ASSERT_TRUE(a && b && c);
  auto ra = (*a)->run(feeds), rb = (*b)->run(feeds), rc = (*c)->run(feeds);
  ASSERT_TRUE(ra && rb && rc);
  for (const auto* r : {&*rb, &*rc}) {
    ASSERT_EQ(r->size(), ra->size());
    for (size_t i = 0; i < ra->size(); ++i) {
      ASSERT_EQ((*r)[i].shape(), (*ra)[i].shape());
      EXPECT_EQ(std::memcmp((*r)[i].data<float>(), (*ra)[i].data<float>(), sizeof(float) * (size_t)(*ra)[i].numel()), 0)
          << "output " << i;
    }
  }
}

TEST(TransformerRewrites, ResidualAddAndLayerNormBecomeSkipLayerNorm) {
  std::mt19937 rng(8);
  struct Case {
    std::vector<int64_t> skip;
    bool sumRead;
  };
  for (const Case& c : {Case{{2, 3, 40}, false}, Case{{2, 3, 40}, true}, Case{{40}, false}, Case{{3, 1}, true}}) {
    auto m = residualLayerNormModel(c.skip, c.sumRead);
    ASSERT_TRUE(m);
    EXPECT_EQ(rewriteReport(*m).fusedSkipLayerNorms, 1);
    expectSameBits(m, {{"x", randomTensor({2, 3, 40}, rng)}, {"r", randomTensor(Shape(c.skip.begin(), c.skip.end()), rng)}});
  }
  // A norm over the last two axes is left alone.
  auto m = residualLayerNormModel({2, 3, 40}, false, -2);
  ASSERT_TRUE(m);
  EXPECT_EQ(rewriteReport(*m).fusedSkipLayerNorms, 0);
}

TEST(TransformerRewrites, LayerNormWithAnotherVarianceAxisIsLeftAlone) {
  auto m = builtModel(decomposedLayerNormModel(1));
  ASSERT_TRUE(m);
  const RewriteReport r = rewriteReport(*m);
  EXPECT_EQ(r.fusedLayerNorms, 0);
}

TEST(TransformerRewrites, SoftmaxOnAnotherAxisStillMatchesUnrewritten) {
  // Softmax over axis 2 between the attention MatMuls: nothing fuses across it, results equal.
  OnnxBuilder b = attentionModel();
  for (auto& n : *b.graph().mutable_node())
    if (n.op_type() == "Softmax") n.mutable_attribute(0)->set_i(2);
  auto m = builtModel(b);
  ASSERT_TRUE(m);
  EXPECT_EQ(rewriteReport(*m).foldedIntoMatMul, 5);  // neither the mask Add nor the Softmax
  std::mt19937 rng(6);
  expectSameResults(m, attentionFeeds(rng));
}
