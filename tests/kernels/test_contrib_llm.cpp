// Tests of the com.microsoft contrib ops of LLM graphs (core/kernels/contrib_llm.h): single-op
// models built in code and compared with ONNX Runtime (onnxruntime-node) for each op under a few
// attribute combinations, a small decoder layer (Gather -> SkipSimplifiedLayerNormalization ->
// MatMulNBits Q/K/V -> RotaryEmbedding -> GroupQueryAttention -> MatMulNBits -> Add ->
// SimplifiedLayerNormalization) against ONNX Runtime, and bad models asserting their messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/io/npy.h"
#include "core/numeric/metrics.h"
#include "tests/support/ort_runner.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using qs::test::OnnxBuilder;

int onnxType(DType t) {
  switch (t) {
    case DType::UInt8: return onnx::TensorProto::UINT8;
    case DType::Int32: return onnx::TensorProto::INT32;
    case DType::Int64: return onnx::TensorProto::INT64;
    default: return onnx::TensorProto::FLOAT;
  }
}

// A model under construction with its feeds (graph-input order) and checked outputs.
struct Built {
  OnnxBuilder builder{17};
  std::vector<NamedTensor> feeds;
  std::vector<std::string> outputNames;
  std::mt19937 rng{11};

  Built() {
    auto* os = builder.proto().add_opset_import();
    os->set_domain("com.microsoft");
    os->set_version(1);
  }
  void feed(const std::string& name, const Tensor& t) {
    builder.input(name, t.shape(), onnxType(t.dtype()));
    feeds.push_back({name, t});
  }
  Tensor random(const Shape& s, float lo = -1.f, float hi = 1.f) { return qs::test::randomTensor(s, rng, lo, hi); }
  void constant(const std::string& name, const Tensor& t) {
    auto* p = builder.graph().add_initializer();
    p->set_name(name);
    p->set_data_type(onnxType(t.dtype()));
    for (auto d : t.shape()) p->add_dims(d);
    p->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.byteSize()));
  }
  void output(const std::string& name, const Shape& s) {
    builder.output(name, Shape(s.size(), -1));
    outputNames.push_back(name);
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& ins,
                        const std::vector<std::string>& outs, bool ms = true) {
    auto& n = builder.node(op, ins, outs, "n_" + op);
    if (ms) n.set_domain("com.microsoft");
    return n;
  }
};

Tensor randomBytes(const Shape& s, std::mt19937& rng) {
  Tensor t(DType::UInt8, s);
  std::uniform_int_distribution<int> u(0, 255);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = (uint8_t)u(rng);
  return t;
}

Tensor int64s(const std::vector<int64_t>& v, const Shape& s) { return Tensor::fromVector<int64_t>(v, s); }
Tensor int32s(const std::vector<int32_t>& v, const Shape& s) { return Tensor::fromVector<int32_t>(v, s); }

// cos/sin caches [positions, half] of the usual RoPE angles.
std::pair<Tensor, Tensor> ropeCaches(int64_t positions, int64_t half) {
  Tensor c(DType::Float, {positions, half}), s(DType::Float, {positions, half});
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double a = p * std::pow(10000.0, -(double)i / (double)half);
      c.data<float>()[p * half + i] = (float)std::cos(a);
      s.data<float>()[p * half + i] = (float)std::sin(a);
    }
  return {c, s};
}

Result<std::vector<Tensor>> runOurs(const Built& b, int threads = 2) {
  auto model = qs::test::builtModel(b.builder);
  if (!model) return runtimeError("model did not load");
  ExecutorOptions eo;
  eo.threads = threads;
  auto ex = Executor::create(model, eo);
  if (!ex) return ex.status();
  return (*ex)->run(b.feeds);
}

// ONNX Runtime's outputs for the same model and feeds.
std::vector<Tensor> runOrt(const Built& b) {
  std::vector<Tensor> feeds;
  for (const NamedTensor& f : b.feeds) feeds.push_back(f.tensor);
  std::vector<Tensor> refs = qs::test::runOrt(b.builder, feeds);
  EXPECT_EQ(refs.size(), b.outputNames.size());
  refs.resize(b.outputNames.size());
  return refs;
}

// Every checked output at 90 dB SNR or better, or within a relative error of 1e-5.
void expectOrtParity(const Built& b, const std::string& what) {
  auto ours = runOurs(b);
  ASSERT_TRUE(ours) << ours.status().message();
  const std::vector<Tensor> refs = runOrt(b);
  ASSERT_EQ(refs.size(), ours->size());
  for (size_t i = 0; i < refs.size(); ++i) {
    ASSERT_FALSE(refs[i].empty()) << b.outputNames[i];
    ASSERT_EQ(refs[i].shape(), (*ours)[i].shape()) << b.outputNames[i];
    ErrorAccumulator acc;
    acc.add(refs[i], (*ours)[i]);
    const auto m = acc.metrics();
    const double rel = qs::test::relativeError((*ours)[i], refs[i]);
    std::printf("%s %s %s: relative error %.3g, SNR %.1f dB\n", what.c_str(), b.outputNames[i].c_str(),
                shapeToString(refs[i].shape()).c_str(), rel, m.snrDb);
    EXPECT_TRUE(m.snrDb >= 90.0 || rel <= 1e-5) << b.outputNames[i] << ": SNR " << m.snrDb << " dB, relative " << rel;
  }
}

std::string failure(const Built& b) {
  auto r = runOurs(b);
  EXPECT_FALSE(r) << "expected a failure";
  return r ? std::string() : r.status().message();
}

// ------------------------------------------------------------------ RMS normalisation

TEST(ContribOrtParity, SimplifiedLayerNormalizationLastAxis) {
  Built b;
  b.feed("X", b.random({2, 5, 48}, -2, 2));
  b.constant("scale", b.random({48}));
  auto& n = b.node("SimplifiedLayerNormalization", {"X", "scale"}, {"Y", "inv"}, false);
  OnnxBuilder::attrFloat(n, "epsilon", 1e-6f);
  b.output("Y", {2, 5, 48});
  b.output("inv", {2, 5, 1});
  expectOrtParity(b, "SimplifiedLayerNormalization");
}

TEST(ContribOrtParity, SimplifiedLayerNormalizationAxis1) {
  Built b;
  b.feed("X", b.random({3, 4, 6}, -2, 2));
  b.feed("scale", b.random({4, 6}));
  auto& n = b.node("SimplifiedLayerNormalization", {"X", "scale"}, {"Y"}, false);
  OnnxBuilder::attrInt(n, "axis", 1);
  b.output("Y", {3, 4, 6});
  expectOrtParity(b, "SimplifiedLayerNormalization axis 1");
}

TEST(ContribOrtParity, SkipSimplifiedLayerNormalizationWithBias) {
  Built b;
  b.feed("x", b.random({2, 4, 32}, -2, 2));
  b.feed("skip", b.random({2, 4, 32}));
  b.constant("gamma", b.random({32}));
  b.constant("bias", b.random({32}, -0.2f, 0.2f));
  auto& n = b.node("SkipSimplifiedLayerNormalization", {"x", "skip", "gamma", "bias"}, {"y", "", "", "sum"});
  OnnxBuilder::attrFloat(n, "epsilon", 1e-5f);
  b.output("y", {2, 4, 32});
  b.output("sum", {2, 4, 32});
  expectOrtParity(b, "SkipSimplifiedLayerNormalization");
}

TEST(ContribOrtParity, SkipSimplifiedLayerNormalizationNoBias) {
  Built b;
  b.feed("x", b.random({3, 2, 16}, -2, 2));
  b.feed("skip", b.random({3, 2, 16}));
  b.feed("gamma", b.random({16}));
  b.node("SkipSimplifiedLayerNormalization", {"x", "skip", "gamma"}, {"y"});
  b.output("y", {3, 2, 16});
  expectOrtParity(b, "SkipSimplifiedLayerNormalization no bias");
}

// ------------------------------------------------------------------ RotaryEmbedding

void rotaryCase(bool interleaved, bool bnsh, int64_t rotaryDim) {
  Built b;
  const int64_t B = 2, S = 5, N = 3, h = 8;
  const int64_t half = (rotaryDim ? rotaryDim : h) / 2;
  b.feed("x", b.random(bnsh ? Shape{B, N, S, h} : Shape{B, S, N * h}));
  if (bnsh)
    b.feed("pos", int64s({3}, {1}));
  else
    b.feed("pos", int64s({0, 1, 2, 3, 4, 7, 2, 9, 11, 0}, {B, S}));
  auto [c, s] = ropeCaches(16, half);
  b.constant("cos", c);
  b.constant("sin", s);
  auto& n = b.node("RotaryEmbedding", {"x", "pos", "cos", "sin"}, {"y"});
  OnnxBuilder::attrInt(n, "interleaved", interleaved ? 1 : 0);
  if (!bnsh || rotaryDim) OnnxBuilder::attrInt(n, "num_heads", N);
  if (rotaryDim) OnnxBuilder::attrInt(n, "rotary_embedding_dim", rotaryDim);
  b.output("y", bnsh ? Shape{B, N, S, h} : Shape{B, S, N * h});
  expectOrtParity(b, std::string("RotaryEmbedding interleaved ") + (interleaved ? "1" : "0") + (bnsh ? " BNSH" : " BSH") +
                         " rotary_dim " + std::to_string(rotaryDim));
}

TEST(ContribOrtParity, RotaryEmbeddingHalves) { rotaryCase(false, false, 0); }
TEST(ContribOrtParity, RotaryEmbeddingInterleaved) { rotaryCase(true, false, 0); }
TEST(ContribOrtParity, RotaryEmbeddingBnshOffset) { rotaryCase(false, true, 0); }
TEST(ContribOrtParity, RotaryEmbeddingInterleavedBnshOffset) { rotaryCase(true, true, 0); }
TEST(ContribOrtParity, RotaryEmbeddingPartialDim) { rotaryCase(false, false, 4); }

// ------------------------------------------------------------------ GroupQueryAttention

struct GqaSpec {
  int64_t B = 2, S = 6, N = 4, kvN = 2, h = 8;
  bool rotary = false, interleaved = false, packed = false;
  int64_t window = -1;
  float scale = 0.f;
};

Built gqaModel(const GqaSpec& g) {
  Built b;
  std::vector<std::string> ins;
  if (g.packed) {
    b.feed("qkv", b.random({g.B, g.S, (g.N + 2 * g.kvN) * g.h}));
    ins = {"qkv", "", ""};
  } else {
    b.feed("q", b.random({g.B, g.S, g.N * g.h}));
    b.feed("k", b.random({g.B, g.S, g.kvN * g.h}));
    b.feed("v", b.random({g.B, g.S, g.kvN * g.h}));
    ins = {"q", "k", "v"};
  }
  b.constant("seqlens", int32s(std::vector<int32_t>((size_t)g.B, (int32_t)(g.S - 1)), {g.B}));
  b.constant("total", Tensor::scalar<int32_t>((int32_t)g.S));
  ins.insert(ins.end(), {"", "", "seqlens", "total"});
  if (g.rotary) {
    auto [c, s] = ropeCaches(32, g.h / 2);
    b.constant("cos", c);
    b.constant("sin", s);
    ins.insert(ins.end(), {"cos", "sin"});
  }
  auto& n = b.node("GroupQueryAttention", ins, {"out", "present_key", "present_value"});
  OnnxBuilder::attrInt(n, "num_heads", g.N);
  OnnxBuilder::attrInt(n, "kv_num_heads", g.kvN);
  if (g.rotary) OnnxBuilder::attrInt(n, "do_rotary", 1);
  if (g.interleaved) OnnxBuilder::attrInt(n, "rotary_interleaved", 1);
  if (g.window > 0) OnnxBuilder::attrInt(n, "local_window_size", g.window);
  if (g.scale > 0) OnnxBuilder::attrFloat(n, "scale", g.scale);
  b.output("out", {g.B, g.S, g.N * g.h});
  b.output("present_key", {g.B, g.kvN, g.S, g.h});
  b.output("present_value", {g.B, g.kvN, g.S, g.h});
  return b;
}

TEST(ContribOrtParity, GroupQueryAttentionGrouped) {
  GqaSpec g;
  expectOrtParity(gqaModel(g), "GroupQueryAttention N4 kv2");
}

TEST(ContribOrtParity, GroupQueryAttentionRotaryScale) {
  GqaSpec g;
  g.N = 6;
  g.kvN = 2;
  g.rotary = true;  // ORT's rotary GQA wants a head size that is a multiple of 16
  g.h = 16;
  g.scale = 0.2f;
  expectOrtParity(gqaModel(g), "GroupQueryAttention N6 kv2 do_rotary");
}

TEST(ContribOrtParity, GroupQueryAttentionPackedWindowInterleaved) {
  GqaSpec g;
  g.packed = true;
  g.window = 2;
  g.rotary = true;
  g.interleaved = true;
  g.h = 16;
  g.kvN = 1;
  expectOrtParity(gqaModel(g), "GroupQueryAttention packed local_window 2");
}

// ------------------------------------------------------------------ MultiHeadAttention

TEST(ContribOrtParity, MultiHeadAttentionPaddingMaskUnidirectional) {
  Built b;
  const int64_t B = 2, S = 5, D = 16, N = 2;
  b.feed("q", b.random({B, S, D}));
  b.feed("k", b.random({B, S, D}));
  b.feed("v", b.random({B, S, D}));
  b.feed("mask", int32s({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {B, S}));
  auto& n = b.node("MultiHeadAttention", {"q", "k", "v", "", "mask"}, {"out"});
  OnnxBuilder::attrInt(n, "num_heads", N);
  OnnxBuilder::attrInt(n, "unidirectional", 1);
  b.output("out", {B, S, D});
  expectOrtParity(b, "MultiHeadAttention key_padding_mask unidirectional");
}

TEST(ContribOrtParity, MultiHeadAttentionCrossBiasAttentionBias) {
  Built b;
  const int64_t B = 2, S = 3, L = 7, D = 24, N = 3;
  b.feed("q", b.random({B, S, D}));
  b.feed("k", b.random({B, L, D}));
  b.feed("v", b.random({B, L, D}));
  b.constant("bias", b.random({3 * D}, -0.3f, 0.3f));
  b.feed("mask", int32s({7, 4}, {B}));
  b.feed("ab", b.random({1, N, S, L}));
  auto& n = b.node("MultiHeadAttention", {"q", "k", "v", "bias", "mask", "ab"}, {"out"});
  OnnxBuilder::attrInt(n, "num_heads", N);
  OnnxBuilder::attrFloat(n, "scale", 0.3f);
  b.output("out", {B, S, D});
  expectOrtParity(b, "MultiHeadAttention bias, key lengths, attention_bias");
}

// ------------------------------------------------------------------ MatMulNBits

void nbitsCase(int64_t K, int64_t N, int64_t block, int zeroPoints /* 0 none, 1 packed uint8, 2 float */,
               bool bias = false) {
  Built b;
  const int64_t kb = (K + block - 1) / block;
  b.feed("A", b.random({2, 3, K}));
  b.constant("B", randomBytes({N, kb, block / 2}, b.rng));
  b.constant("scales", b.random({N * kb}, 0.01f, 0.1f));
  std::vector<std::string> ins{"A", "B", "scales"};
  if (zeroPoints == 1) b.constant("zp", randomBytes({N * ((kb + 1) / 2)}, b.rng));
  if (zeroPoints == 2) b.constant("zp", b.random({N * kb}, 5.f, 10.f));
  if (zeroPoints) ins.push_back("zp");
  if (bias) {
    if (!zeroPoints) ins.push_back("");
    ins.push_back("");
    b.constant("bias", b.random({N}));
    ins.push_back("bias");
  }
  auto& n = b.node("MatMulNBits", ins, {"Y"});
  OnnxBuilder::attrInt(n, "K", K);
  OnnxBuilder::attrInt(n, "N", N);
  OnnxBuilder::attrInt(n, "bits", 4);
  OnnxBuilder::attrInt(n, "block_size", block);
  b.output("Y", {2, 3, N});
  expectOrtParity(b, "MatMulNBits K" + std::to_string(K) + " N" + std::to_string(N) + " block " +
                         std::to_string(block) + " zero points " + std::to_string(zeroPoints));
}

TEST(ContribOrtParity, MatMulNBitsBlock32ZeroPoints) { nbitsCase(96, 24, 32, 1); }
TEST(ContribOrtParity, MatMulNBitsBlock32NoZeroPointsRaggedK) { nbitsCase(80, 20, 32, 0); }
TEST(ContribOrtParity, MatMulNBitsBlock128NoZeroPoints) { nbitsCase(256, 16, 128, 0); }
TEST(ContribOrtParity, MatMulNBitsBlock128ZeroPoints) { nbitsCase(384, 8, 128, 1); }
TEST(ContribOrtParity, MatMulNBitsFloatZeroPointsBias) { nbitsCase(64, 12, 32, 2, true); }

// ------------------------------------------------------------------ a small decoder layer

TEST(ContribOrtParity, DecoderLayer) {
  Built b;
  const int64_t B = 2, S = 6, V = 50, H = 32, N = 4, kvN = 2, h = 8, block = 16, kb = H / block;
  b.feed("input_ids", int64s({1, 4, 9, 16, 25, 36, 49, 0, 7, 7, 3, 12}, {B, S}));
  b.feed("residual", b.random({B, S, H}));
  b.feed("position_ids", int64s({0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, {B, S}));
  b.constant("embed", b.random({V, H}));
  b.constant("gamma1", b.random({H}, 0.5f, 1.5f));
  b.constant("gamma2", b.random({H}, 0.5f, 1.5f));
  auto [c, s] = ropeCaches(32, h / 2);
  b.constant("cos", c);
  b.constant("sin", s);
  b.constant("seqlens", int32s({(int32_t)S - 1, (int32_t)S - 1}, {B}));
  b.constant("total", Tensor::scalar<int32_t>((int32_t)S));
  auto proj = [&](const std::string& name, const std::string& in, int64_t outN, bool zp) {
    b.constant(name + "_B", randomBytes({outN, kb, block / 2}, b.rng));
    b.constant(name + "_s", b.random({outN * kb}, 0.02f, 0.08f));
    std::vector<std::string> ins{in, name + "_B", name + "_s"};
    if (zp) {
      b.constant(name + "_zp", randomBytes({outN * ((kb + 1) / 2)}, b.rng));
      ins.push_back(name + "_zp");
    }
    auto& n = b.node("MatMulNBits", ins, {name});
    n.set_name(name + "_proj");
    OnnxBuilder::attrInt(n, "K", H);
    OnnxBuilder::attrInt(n, "N", outN);
    OnnxBuilder::attrInt(n, "bits", 4);
    OnnxBuilder::attrInt(n, "block_size", block);
  };
  b.node("Gather", {"embed", "input_ids"}, {"x"}, false);
  b.node("SkipSimplifiedLayerNormalization", {"x", "residual", "gamma1"}, {"norm1", "", "", "sum1"});
  proj("q", "norm1", N * h, true);
  proj("k", "norm1", kvN * h, false);
  proj("v", "norm1", kvN * h, true);
  auto& rq = b.node("RotaryEmbedding", {"q", "position_ids", "cos", "sin"}, {"q_rot"});
  rq.set_name("rope_q");
  OnnxBuilder::attrInt(rq, "num_heads", N);
  auto& rk = b.node("RotaryEmbedding", {"k", "position_ids", "cos", "sin"}, {"k_rot"});
  rk.set_name("rope_k");
  OnnxBuilder::attrInt(rk, "num_heads", kvN);
  auto& gqa = b.node("GroupQueryAttention", {"q_rot", "k_rot", "v", "", "", "seqlens", "total"},
                     {"attn", "present_key", "present_value"});
  OnnxBuilder::attrInt(gqa, "num_heads", N);
  OnnxBuilder::attrInt(gqa, "kv_num_heads", kvN);
  proj("o", "attn", H, true);
  b.node("Add", {"o", "sum1"}, {"h2"}, false);
  auto& ln = b.node("SimplifiedLayerNormalization", {"h2", "gamma2"}, {"y"}, false);
  OnnxBuilder::attrFloat(ln, "epsilon", 1e-6f);
  b.output("y", {B, S, H});
  b.output("present_key", {B, kvN, S, h});
  expectOrtParity(b, "decoder layer");
}

// ------------------------------------------------------------------ bad models and inputs

TEST(ContribBadInput, MatMulNBitsWrongBlobSize) {
  Built b;
  b.feed("A", b.random({1, 64}));
  b.constant("B", randomBytes({8, 2, 8}, b.rng));  // block 32 at 4 bits needs 16 bytes a block
  b.constant("scales", b.random({16}, 0.01f, 0.1f));
  auto& n = b.node("MatMulNBits", {"A", "B", "scales"}, {"Y"});
  OnnxBuilder::attrInt(n, "K", 64);
  OnnxBuilder::attrInt(n, "N", 8);
  OnnxBuilder::attrInt(n, "block_size", 32);
  b.output("Y", {1, 8});
  const std::string m = failure(b);
  EXPECT_NE(m.find("B has shape [8,2,8], expected [8,2,16] for K=64 N=8 bits=4 block_size=32 (blob size is not "
                   "block_size * bits / 8)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("n_MatMulNBits"), std::string::npos) << m;
}

TEST(ContribBadInput, MatMulNBitsNMismatchAtRunTime) {
  Built b;
  b.feed("A", b.random({1, 64}));
  b.feed("B", randomBytes({6, 2, 16}, b.rng));
  b.feed("scales", b.random({16}, 0.01f, 0.1f));
  auto& n = b.node("MatMulNBits", {"A", "B", "scales"}, {"Y"});
  OnnxBuilder::attrInt(n, "K", 64);
  OnnxBuilder::attrInt(n, "N", 8);
  OnnxBuilder::attrInt(n, "block_size", 32);
  b.output("Y", {1, 8});
  const std::string m = failure(b);
  EXPECT_NE(m.find("B has shape [6,2,16], expected [8,2,16]"), std::string::npos) << m;
  EXPECT_NE(m.find("(dim 0 is not N)"), std::string::npos) << m;
}

TEST(ContribBadInput, MatMulNBitsHostileAttributes) {
  Built b;
  b.feed("A", b.random({1, 64}));
  b.feed("B", randomBytes({8, 2, 16}, b.rng));
  b.feed("scales", b.random({16}, 0.01f, 0.1f));
  auto& n = b.node("MatMulNBits", {"A", "B", "scales"}, {"Y"});
  OnnxBuilder::attrInt(n, "K", int64_t(1) << 40);
  OnnxBuilder::attrInt(n, "N", int64_t(1) << 40);
  OnnxBuilder::attrInt(n, "block_size", 32);
  b.output("Y", {1, 8});
  const std::string m = failure(b);
  EXPECT_NE(m.find("is too large a weight"), std::string::npos) << m;
}

TEST(ContribBadInput, GroupQueryAttentionHeadsNotDivisible) {
  GqaSpec g;
  g.N = 6;
  g.kvN = 4;
  g.h = 4;
  const std::string m = failure(gqaModel(g));
  EXPECT_NE(m.find("num_heads 6 is not divisible by kv_num_heads 4"), std::string::npos) << m;
}

TEST(ContribBadInput, GroupQueryAttentionPastNotSupported) {
  Built b = gqaModel(GqaSpec());
  // total_sequence_length past the query's length means a cached prefix.
  b.builder.graph().mutable_initializer(1)->set_raw_data(std::string("\x09\0\0\0", 4));
  const std::string m = failure(b);
  EXPECT_NE(m.find("total_sequence_length 9 differs from the query's sequence length 6"), std::string::npos) << m;
}

TEST(ContribBadInput, RotaryEmbeddingCacheTooShort) {
  Built b;
  b.feed("x", b.random({1, 4, 16}));
  b.feed("pos", int64s({0, 1, 2, 3}, {1, 4}));
  auto [c, s] = ropeCaches(3, 4);
  b.constant("cos", c);
  b.constant("sin", s);
  auto& n = b.node("RotaryEmbedding", {"x", "pos", "cos", "sin"}, {"y"});
  OnnxBuilder::attrInt(n, "num_heads", 2);
  b.output("y", {1, 4, 16});
  const std::string m = failure(b);
  EXPECT_NE(m.find("position 3 is outside the cos/sin cache of 3 positions (cache too short)"), std::string::npos) << m;
}

TEST(ContribBadInput, RotaryEmbeddingNegativePosition) {
  Built b;
  b.feed("x", b.random({1, 2, 16}));
  b.feed("pos", int64s({-5}, {1}));
  auto [c, s] = ropeCaches(8, 8);
  b.constant("cos", c);
  b.constant("sin", s);
  b.node("RotaryEmbedding", {"x", "pos", "cos", "sin"}, {"y"});
  b.output("y", {1, 2, 16});
  const std::string m = failure(b);
  EXPECT_NE(m.find("position -5 is outside the cos/sin cache"), std::string::npos) << m;
}

TEST(ContribBadInput, SkipSimplifiedLayerNormalizationWrongGamma) {
  Built b;
  b.feed("x", b.random({2, 3, 8}));
  b.feed("skip", b.random({2, 3, 8}));
  b.feed("gamma", b.random({7}));
  b.node("SkipSimplifiedLayerNormalization", {"x", "skip", "gamma"}, {"y"});
  b.output("y", {2, 3, 8});
  const std::string m = failure(b);
  EXPECT_NE(m.find("gamma has shape [7], expected [8]"), std::string::npos) << m;
}

TEST(ContribBadInput, MultiHeadAttentionPastNotSupported) {
  Built b;
  b.feed("q", b.random({1, 2, 8}));
  b.feed("k", b.random({1, 2, 8}));
  b.feed("v", b.random({1, 2, 8}));
  b.feed("past_k", b.random({1, 2, 3, 4}));
  b.feed("past_v", b.random({1, 2, 3, 4}));
  auto& n = b.node("MultiHeadAttention", {"q", "k", "v", "", "", "", "past_k", "past_v"}, {"out"});
  OnnxBuilder::attrInt(n, "num_heads", 2);
  b.output("out", {1, 2, 8});
  const std::string m = failure(b);
  EXPECT_NE(m.find("past_key [1,2,3,4] is not empty: decoding with a KV cache is not supported"), std::string::npos)
      << m;
}

}  // namespace
}  // namespace qs
