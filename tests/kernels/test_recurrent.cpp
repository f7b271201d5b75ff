// Tests of the 'recurrent' kernel group (LSTM, GRU, RNN; core/kernels/recurrent.h): single-op models
// built in code and compared with ONNX Runtime (onnxruntime-node) on what the ONNX node suite does
// not cover (bidirectional runs with sequence_lens, peepholes, clip, input_forget, layout=1,
// linear_before_reset 0 and 1, every activation function, opset 14); the sequence_lens rules checked
// directly; thread-count independence; and bad models and inputs, each asserting its message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/io/npy.h"
#include "core/kernels/matmul_dnnl.h"
#include "core/numeric/metrics.h"
#include "tests/support/ort_runner.h"
#include "tests/support/model_helpers.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using qs::test::OnnxBuilder;

// One LSTM/GRU/RNN node; every present input is a graph input (fed at run time).
struct Spec {
  std::string op = "LSTM";
  int64_t opset = 14;
  int64_t seq = 4, batch = 3, input = 5, hidden = 6;
  std::string direction = "forward";
  int64_t layout = 0;
  bool bias = true, initialH = false, initialC = false, peepholes = false;
  std::vector<int32_t> seqLens;  // empty: no sequence_lens input
  std::optional<float> clip;
  std::vector<std::string> activations;
  std::vector<float> alphas, betas;
  std::optional<int64_t> linearBeforeReset, inputForget, hiddenSizeAttr;
  bool outputs[3] = {true, true, true};  // Y, Y_h, Y_c (Y_c for LSTM only)
  // Shape overrides for the bad-input tests (empty: the consistent shape).
  std::vector<int64_t> wShape, rShape;
  bool dynamicShapes = false;  // graph inputs and outputs declared with symbolic dims (to feed other shapes)
  bool constantWeights = false;  // W and R as initializers (packed when the kernel is created)
  bool constantBias = false;     // B as an initializer too (folded into oneDNN's projection)
  uint32_t seed = 7;

  int64_t gates() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
  int64_t dirs() const { return direction == "bidirectional" ? 2 : 1; }
  bool lstm() const { return op == "LSTM"; }
};

void attrString(onnx::NodeProto& n, const std::string& key, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
void attrStrings(onnx::NodeProto& n, const std::string& key, const std::vector<std::string>& v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const auto& s : v) a->add_strings(s);
}
void attrFloats(onnx::NodeProto& n, const std::string& key, const std::vector<float>& v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::FLOATS);
  for (float f : v) a->add_floats(f);
}

// The model and its feeds, in graph-input order.
struct Built {
  OnnxBuilder builder;
  std::vector<NamedTensor> feeds;
  std::vector<std::string> outputNames;
  explicit Built(int64_t opset) : builder(opset) {}
};

Built build(const Spec& s) {
  Built out(s.opset);
  std::mt19937 rng(s.seed);
  const int64_t D = s.dirs(), G = s.gates(), H = s.hidden;
  const bool bf = s.layout == 1;
  auto declared = [&](const Shape& shape) { return s.dynamicShapes ? Shape(shape.size(), -1) : shape; };
  auto add = [&](const std::string& name, const Tensor& t, int elemType = onnx::TensorProto::FLOAT) {
    if ((s.constantWeights && (name == "W" || name == "R")) || (s.constantBias && name == "B")) {
      out.builder.initializer(name, t.shape(), std::vector<float>(t.data<float>(), t.data<float>() + t.numel()));
      return;
    }
    out.builder.input(name, declared(t.shape()), elemType);
    out.feeds.push_back({name, t});
  };
  std::vector<std::string> ins(s.lstm() ? 8 : 6, "");
  ins[0] = "X";
  add("X", qs::test::randomTensor(bf ? Shape{s.batch, s.seq, s.input} : Shape{s.seq, s.batch, s.input}, rng));
  ins[1] = "W";
  add("W", qs::test::randomTensor(s.wShape.empty() ? Shape{D, G * H, s.input} : s.wShape, rng, -0.6f, 0.6f));
  ins[2] = "R";
  add("R", qs::test::randomTensor(s.rShape.empty() ? Shape{D, G * H, H} : s.rShape, rng, -0.6f, 0.6f));
  if (s.bias) {
    ins[3] = "B";
    add("B", qs::test::randomTensor({D, 2 * G * H}, rng, -0.5f, 0.5f));
  }
  if (!s.seqLens.empty()) {
    ins[4] = "sequence_lens";
    add("sequence_lens", Tensor::fromVector<int32_t>(s.seqLens, {(int64_t)s.seqLens.size()}), onnx::TensorProto::INT32);
  }
  const Shape stateShape = bf ? Shape{s.batch, D, H} : Shape{D, s.batch, H};
  if (s.initialH) {
    ins[5] = "initial_h";
    add("initial_h", qs::test::randomTensor(stateShape, rng));
  }
  if (s.initialC) {
    ins[6] = "initial_c";
    add("initial_c", qs::test::randomTensor(stateShape, rng));
  }
  if (s.peepholes) {
    ins[7] = "P";
    add("P", qs::test::randomTensor({D, 3 * H}, rng, -0.5f, 0.5f));
  }
  while (!ins.empty() && ins.back().empty()) ins.pop_back();

  static const char* outNames[] = {"Y", "Y_h", "Y_c"};
  const Shape shapes[] = {bf ? Shape{s.batch, s.seq, D, H} : Shape{s.seq, D, s.batch, H}, stateShape, stateShape};
  std::vector<std::string> outs;
  for (size_t o = 0; o < (s.lstm() ? 3u : 2u); ++o) {
    outs.push_back(s.outputs[o] ? outNames[o] : "");
    if (!s.outputs[o]) continue;
    out.builder.output(outNames[o], declared(shapes[o]));
    out.outputNames.push_back(outNames[o]);
  }
  while (!outs.empty() && outs.back().empty()) outs.pop_back();

  auto& n = out.builder.node(s.op, ins, outs, "rec");
  if (s.hiddenSizeAttr)
    OnnxBuilder::attrInt(n, "hidden_size", *s.hiddenSizeAttr);
  else
    OnnxBuilder::attrInt(n, "hidden_size", H);
  if (s.direction != "forward") attrString(n, "direction", s.direction);
  if (s.layout != 0) OnnxBuilder::attrInt(n, "layout", s.layout);
  if (s.clip) OnnxBuilder::attrFloat(n, "clip", *s.clip);
  if (!s.activations.empty()) attrStrings(n, "activations", s.activations);
  if (!s.alphas.empty()) attrFloats(n, "activation_alpha", s.alphas);
  if (!s.betas.empty()) attrFloats(n, "activation_beta", s.betas);
  if (s.linearBeforeReset) OnnxBuilder::attrInt(n, "linear_before_reset", *s.linearBeforeReset);
  if (s.inputForget) OnnxBuilder::attrInt(n, "input_forget", *s.inputForget);
  return out;
}

// Our outputs (graph order), or the error of whichever of create/run failed.
Result<std::vector<Tensor>> runOurs(const Built& b, int threads = 2, bool libraryKernels = false) {
  auto model = qs::test::builtModel(b.builder);
  if (!model) return runtimeError("model did not load");
  ExecutorOptions eo;
  eo.threads = threads;
  eo.libraryKernels = libraryKernels;
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

// out[i0, i1, ...] = t[...] with out's axis k being t's axis perm[k].
Tensor permuted(const Tensor& t, const std::vector<int>& perm) {
  Shape shape;
  for (int p : perm) shape.push_back(t.dim(p));
  Tensor out(DType::Float, shape);
  std::vector<int64_t> inStride((size_t)t.rank(), 1);
  for (int k = t.rank() - 2; k >= 0; --k) inStride[(size_t)k] = inStride[(size_t)k + 1] * t.dim(k + 1);
  std::vector<int64_t> idx(perm.size(), 0);
  for (int64_t o = 0; o < out.numel(); ++o) {
    int64_t src = 0;
    for (size_t k = 0; k < perm.size(); ++k) src += idx[k] * inStride[(size_t)perm[k]];
    out.data<float>()[o] = t.data<float>()[src];
    for (size_t k = perm.size(); k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

// ONNX Runtime's outputs for a spec. ONNX Runtime refuses layout=1 ("Batchwise recurrent operations
// (layout == 1) are not supported"), so for those it runs the layout-0 model on the same inputs
// transposed to sequence-first, and its outputs are transposed back to batch-first.
std::vector<Tensor> ortReference(const Spec& s, const Built& b) {
  if (s.layout == 0) return runOrt(b);
  Spec s0 = s;
  s0.layout = 0;
  Built b0 = build(s0);
  for (size_t i = 0; i < b.feeds.size(); ++i) {
    const std::string& name = b.feeds[i].name;
    b0.feeds[i].tensor = name == "X" || name == "initial_h" || name == "initial_c"
                             ? permuted(b.feeds[i].tensor, {1, 0, 2})
                             : b.feeds[i].tensor;
  }
  std::vector<Tensor> refs = runOrt(b0);
  for (size_t i = 0; i < refs.size(); ++i) {
    if (refs[i].empty()) continue;
    refs[i] = b0.outputNames[i] == "Y" ? permuted(refs[i], {2, 0, 1, 3}) : permuted(refs[i], {1, 0, 2});
  }
  return refs;
}

// Every output within a relative error of 1e-5 (largest difference over the largest reference
// value) and at 90 dB SNR or better.
void expectOrtParity(const Spec& s) {
  Built b = build(s);
  auto ours = runOurs(b);
  ASSERT_TRUE(ours) << ours.status().message();
  const std::vector<Tensor> refs = ortReference(s, b);
  ASSERT_EQ(refs.size(), ours->size());
  ASSERT_EQ(refs.size(), b.outputNames.size());
  ASSERT_FALSE(refs.empty());
  for (size_t i = 0; i < refs.size(); ++i) {
    ASSERT_FALSE(refs[i].empty()) << b.outputNames[i];
    ASSERT_EQ(refs[i].shape(), (*ours)[i].shape()) << b.outputNames[i];
    ErrorAccumulator acc;
    acc.add(refs[i], (*ours)[i]);
    const auto m = acc.metrics();
    const double rel = qs::test::relativeError((*ours)[i], refs[i]);
    std::printf("%s %s %s: relative error %.3g, SNR %.1f dB\n", s.op.c_str(), b.outputNames[i].c_str(),
                shapeToString(refs[i].shape()).c_str(), rel, m.snrDb);
    EXPECT_LE(rel, 1e-5) << b.outputNames[i];
    EXPECT_GE(m.snrDb, 90.0) << b.outputNames[i];
  }
}

// ------------------------------------------------------------------ parity with ONNX Runtime

TEST(RecurrentOrtParity, LstmBidirectionalSequenceLens) {
  Spec s;
  s.direction = "bidirectional";
  s.seq = 6;
  s.batch = 4;
  s.seqLens = {6, 2, 0, 1};
  s.initialH = s.initialC = true;
  expectOrtParity(s);
}

TEST(RecurrentOrtParity, LstmPeepholesClip) {
  Spec s;
  s.peepholes = true;
  s.initialH = s.initialC = true;
  s.clip = 0.7f;  // below the pre-activations' range, so it bites
  s.seqLens = {4, 3, 4};
  expectOrtParity(s);
}

TEST(RecurrentOrtParity, LstmReverseInputForgetPeepholes) {
  Spec s;
  s.direction = "reverse";
  s.inputForget = 1;
  s.peepholes = true;
  s.initialC = true;
  s.seqLens = {2, 4, 3};
  expectOrtParity(s);
}

TEST(RecurrentOrtParity, LstmLayout1BidirectionalOpset14) {
  Spec s;
  s.layout = 1;
  s.direction = "bidirectional";
  s.initialH = s.initialC = true;
  s.peepholes = true;
  s.seqLens = {3, 4, 1};
  expectOrtParity(s);
}

TEST(RecurrentOrtParity, LstmOtherActivationsNoBiasOpset7) {
  Spec s;
  s.opset = 7;
  s.bias = false;
  s.direction = "bidirectional";
  s.activations = {"HardSigmoid", "Softsign", "Elu", "Sigmoid", "ScaledTanh", "Tanh"};
  s.alphas = {0.3f, 0.9f, 1.2f};  // HardSigmoid, Elu, ScaledTanh
  s.betas = {0.45f, 0.8f};        // HardSigmoid, ScaledTanh
  expectOrtParity(s);
}

TEST(RecurrentOrtParity, LstmOnlyFinalStatesOutput) {
  Spec s;
  s.outputs[0] = false;  // Y omitted: "" in the node's outputs
  s.initialH = true;
  expectOrtParity(s);
}

class GruLinearBeforeReset : public ::testing::TestWithParam<int64_t> {};

TEST_P(GruLinearBeforeReset, BidirectionalSequenceLensClip) {
  Spec s;
  s.op = "GRU";
  s.linearBeforeReset = GetParam();
  s.direction = "bidirectional";
  s.seq = 5;
  s.batch = 4;
  s.seqLens = {5, 3, 0, 1};
  s.initialH = true;
  s.clip = 1.5f;
  expectOrtParity(s);
}

TEST_P(GruLinearBeforeReset, Layout1OtherActivations) {
  Spec s;
  s.op = "GRU";
  s.linearBeforeReset = GetParam();
  s.layout = 1;
  s.activations = {"LeakyRelu", "Softplus"};
  s.alphas = {0.2f};
  s.initialH = true;
  expectOrtParity(s);
}

INSTANTIATE_TEST_SUITE_P(Recurrent, GruLinearBeforeReset, ::testing::Values(0, 1));

// RNN in both directions with one non-default function per direction; every function the spec
// lists runs in one of the cases. Alpha and beta are given explicitly: ONNX Runtime's defaults
// for Affine, ScaledTanh and ThresholdedRelu are not the spec's.
struct RnnActivations {
  const char* name;
  std::vector<std::string> acts;
  std::vector<float> alphas, betas;
};

void PrintTo(const RnnActivations& a, std::ostream* os) { *os << a.name; }

class RnnActivationParity : public ::testing::TestWithParam<RnnActivations> {};

TEST_P(RnnActivationParity, Bidirectional) {
  Spec s;
  s.op = "RNN";
  s.direction = "bidirectional";
  s.activations = GetParam().acts;
  s.alphas = GetParam().alphas;
  s.betas = GetParam().betas;
  s.initialH = true;
  s.seqLens = {4, 0, 3};
  expectOrtParity(s);
}

INSTANTIATE_TEST_SUITE_P(
    Recurrent, RnnActivationParity,
    ::testing::Values(RnnActivations{"Relu_Sigmoid", {"Relu", "Sigmoid"}, {}, {}},
                      RnnActivations{"LeakyRelu_HardSigmoid", {"LeakyRelu", "HardSigmoid"}, {0.15f, 0.3f}, {0.4f}},
                      RnnActivations{"ScaledTanh_Affine", {"ScaledTanh", "Affine"}, {1.5f, 0.5f}, {0.7f, 0.1f}},
                      RnnActivations{"Elu_Softsign", {"Elu", "Softsign"}, {0.8f}, {}},
                      RnnActivations{"Softplus_ThresholdedRelu", {"Softplus", "ThresholdedRelu"}, {0.1f}, {}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RecurrentOrtParity, RnnLayout1ClipOpset14) {
  Spec s;
  s.op = "RNN";
  s.layout = 1;
  s.direction = "reverse";
  s.clip = 0.8f;
  s.seqLens = {1, 4, 2};
  s.initialH = true;
  expectOrtParity(s);
}

// Large enough that the per-step product is split across threads, at a batch that takes dot
// products (8) and one that takes the packed GEMM (12): the result must not depend on the thread
// count (each hidden unit is summed in the same order either way).
TEST(RecurrentOrtParity, LstmThreadCountIndependent) {
  for (int64_t batch : {8, 12}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    Spec s;
    s.direction = "bidirectional";
    s.seq = 3;
    s.batch = batch;
    s.input = 16;
    s.hidden = 192;
    s.seqLens.assign((size_t)batch, 3);
    s.seqLens[1] = 1;
    s.seqLens[2] = 2;
    s.initialH = s.initialC = true;
    Built b = build(s);
    auto one = runOurs(b, 1), two = runOurs(b, 2);
    ASSERT_TRUE(one) << one.status().message();
    ASSERT_TRUE(two) << two.status().message();
    ASSERT_EQ(one->size(), 3u);
    for (size_t i = 0; i < one->size(); ++i) {
      ASSERT_EQ((*one)[i].shape(), (*two)[i].shape());
      EXPECT_EQ(std::memcmp((*one)[i].raw(), (*two)[i].raw(), (*one)[i].byteSize()), 0) << b.outputNames[i];
    }
    expectOrtParity(s);
  }
}

// At 2 threads a bidirectional node runs its two directions at once, one per thread; at 1, one
// after the other. GRU (both linear_before_reset values) and RNN must give the same bits either
// way, with sequence_lens, and agree with ONNX Runtime.
TEST(RecurrentOrtParity, BidirectionalDirectionsInParallelMatchSerial) {
  for (const char* op : {"GRU", "RNN"}) {
    for (int64_t lbr : {0, 1}) {
      if (std::string(op) == "RNN" && lbr == 1) continue;
      SCOPED_TRACE(std::string(op) + " linear_before_reset " + std::to_string(lbr));
      Spec s;
      s.op = op;
      s.direction = "bidirectional";
      s.seq = 9;
      s.batch = 5;
      s.input = 7;
      s.hidden = 20;
      if (s.op == "GRU") s.linearBeforeReset = lbr;
      s.seqLens = {9, 1, 0, 5, 8};
      s.initialH = true;
      Built b = build(s);
      auto one = runOurs(b, 1), two = runOurs(b, 2);
      ASSERT_TRUE(one) << one.status().message();
      ASSERT_TRUE(two) << two.status().message();
      ASSERT_EQ(one->size(), 2u);
      for (size_t i = 0; i < one->size(); ++i) {
        ASSERT_EQ((*one)[i].shape(), (*two)[i].shape());
        EXPECT_EQ(std::memcmp((*one)[i].raw(), (*two)[i].raw(), (*one)[i].byteSize()), 0) << b.outputNames[i];
      }
      expectOrtParity(s);
    }
  }
}

// W and R as initializers are packed once when the kernel is created; fed as inputs, on each run.
// Both must give the same bits (LSTM, GRU and RNN, one and two directions, batch 1 and 8), and
// the constant form agrees with ONNX Runtime.
TEST(RecurrentOrtParity, WeightsPackedAtLoadMatchPackedPerRun) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    for (const char* direction : {"forward", "bidirectional"}) {
      for (int64_t batch : {1, 8}) {
        SCOPED_TRACE(std::string(op) + " " + direction + " batch " + std::to_string(batch));
        Spec s;
        s.op = op;
        s.direction = direction;
        s.seq = 6;
        s.batch = batch;
        s.input = 11;
        s.hidden = 21;
        Built fed = build(s);
        s.constantWeights = true;
        Built constant = build(s);
        auto a = runOurs(fed), b = runOurs(constant);
        ASSERT_TRUE(a) << a.status().message();
        ASSERT_TRUE(b) << b.status().message();
        ASSERT_EQ(a->size(), b->size());
        for (size_t i = 0; i < a->size(); ++i) {
          ASSERT_EQ((*a)[i].shape(), (*b)[i].shape());
          EXPECT_EQ(std::memcmp((*a)[i].raw(), (*b)[i].raw(), (*a)[i].byteSize()), 0) << fed.outputNames[i];
        }
        expectOrtParity(s);
      }
    }
  }
}

// What a recurrent node makes at load from its constant W and R (packed W and R, oneDNN's
// projection) serves only those constants: handed other W and R of the same shapes (as an input
// transform hands fake-quantized copies), the node computes with them, the bits of the same node
// fed those weights as inputs.
TEST(RecurrentOrtParity, WeightsMadeAtLoadServeOnlyTheirConstants) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    for (bool library : {false, true}) {
      SCOPED_TRACE(std::string(op) + (library ? " library kernels" : " our kernels"));
      Spec s;
      s.op = op;
      s.direction = "bidirectional";
      s.seq = 6;
      s.batch = 8;
      s.input = 24;
      s.hidden = 32;
      s.bias = true;
      Built fed = build(s);
      s.constantWeights = true;
      const Built constant = build(s);
      for (NamedTensor& f : fed.feeds) {
        if (f.name != "W" && f.name != "R") continue;
        Tensor other = f.tensor.clone();
        for (int64_t i = 0; i < other.numel(); ++i) other.data<float>()[i] *= 0.5f;
        f.tensor = other;
      }
      auto want = runOurs(fed, 2, library);
      ASSERT_TRUE(want) << want.status().message();
      auto model = qs::test::builtModel(constant.builder);
      ASSERT_TRUE(model);
      ExecutorOptions eo;
      eo.threads = 2;
      eo.libraryKernels = library;
      auto ex = Executor::create(model, eo);
      ASSERT_TRUE(ex) << ex.status().message();
      const Graph& g = model->graph;
      ASSERT_EQ(g.nodes.size(), 1u);
      std::vector<const Tensor*> inputs;
      for (ValueId v : g.nodes[0].inputs) {
        const Tensor* t = nullptr;
        if (v != kNoValue)
          for (const NamedTensor& f : fed.feeds)
            if (f.name == g.value(v).name) t = &f.tensor;
        inputs.push_back(t);
      }
      auto got = (*ex)->runNode(0, inputs);
      ASSERT_TRUE(got) << got.status().message();
      ASSERT_GE(got->size(), want->size());
      for (size_t i = 0; i < want->size(); ++i) {
        ASSERT_EQ((*got)[i].shape(), (*want)[i].shape());
        EXPECT_EQ(std::memcmp((*got)[i].raw(), (*want)[i].raw(), (*want)[i].byteSize()), 0) << fed.outputNames[i];
      }
    }
  }
}

// With library kernels, on CPUs where oneDNN's matmul runs AVX-512 (or forced with QS_DNNL_MATMUL=1,
// as ctest's recurrent_library_projection1 does), the input projection of a constant W goes to
// oneDNN, the bias folded in when B is constant too. It must agree with our GEMM's result (relative
// 1e-6: the sums may run in another order; ours is checked against ONNX Runtime above), for each
// cell, with B constant, fed, and absent; 300 steps at batch 8 (LSTM's 4*32 gate rows: chunks of
// 256 steps, so a full chunk and a short one).
TEST(RecurrentOrtParity, LibraryProjectionMatchesOurs) {
  std::printf("oneDNN matmul %s on this CPU (QS_DNNL_MATMUL=%s)\n", DnnlMatMul::preferred() ? "used" : "not used",
              std::getenv("QS_DNNL_MATMUL") ? std::getenv("QS_DNNL_MATMUL") : "unset");
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    for (int bias = 0; bias < 3; ++bias) {  // 0: none, 1: fed, 2: constant
      SCOPED_TRACE(std::string(op) + " bias " + std::to_string(bias));
      Spec s;
      s.op = op;
      s.direction = "bidirectional";
      s.seq = 300;
      s.batch = 8;
      s.input = 24;
      s.hidden = 32;
      s.bias = bias > 0;
      s.constantBias = bias == 2;
      s.constantWeights = true;
      s.linearBeforeReset = std::string(op) == "GRU" ? std::optional<int64_t>(1) : std::nullopt;
      Built b = build(s);
      auto ours = runOurs(b, 2, false), library = runOurs(b, 2, true);
      ASSERT_TRUE(ours) << ours.status().message();
      ASSERT_TRUE(library) << library.status().message();
      ASSERT_EQ(ours->size(), library->size());
      for (size_t i = 0; i < ours->size(); ++i) {
        ASSERT_EQ((*ours)[i].shape(), (*library)[i].shape());
        EXPECT_LE(qs::test::relativeError((*library)[i], (*ours)[i]), 1e-6) << b.outputNames[i];
      }
    }
  }
}

// Long enough that the input projection runs in several chunks of steps (at batch 16 and 4*64
// gate rows a chunk holds 64 steps), with sequences ending on either side of a chunk boundary.
TEST(RecurrentOrtParity, LstmLongSequenceLayout1) {
  Spec s;
  s.layout = 1;
  s.direction = "bidirectional";
  s.seq = 150;
  s.batch = 16;
  s.input = 8;
  s.hidden = 64;
  s.seqLens = {150, 64, 65, 1, 0, 128, 129, 100, 150, 63, 2, 149, 130, 70, 64, 3};
  s.initialH = s.initialC = true;
  expectOrtParity(s);
}

// ------------------------------------------------------------------ sequence_lens, directly

// Steps past a sequence's length are zero in Y; Y_h is the state after the last valid step: the
// forward direction's at t = len-1, the reverse direction's at t = 0; a length of 0 gives an
// all-zero Y and zero final states (as ONNX Runtime does), not the initial state.
TEST(RecurrentSequenceLens, PaddingIsZeroAndFinalStateIsLastValidStep) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    SCOPED_TRACE(op);
    Spec s;
    s.op = op;
    s.direction = "bidirectional";
    s.seq = 5;
    s.batch = 3;
    s.hidden = 4;
    s.seqLens = {5, 2, 0};
    s.initialH = true;
    s.initialC = s.lstm();
    Built b = build(s);
    auto out = runOurs(b);
    ASSERT_TRUE(out) << out.status().message();
    const Tensor& Y = (*out)[0];
    const Tensor& Yh = (*out)[1];
    ASSERT_EQ(Y.shape(), (Shape{5, 2, 3, 4}));
    auto y = [&](int64_t t, int64_t d, int64_t n, int64_t j) { return Y.data<float>()[((t * 2 + d) * 3 + n) * 4 + j]; };
    auto yh = [&](int64_t d, int64_t n, int64_t j) { return Yh.data<float>()[(d * 3 + n) * 4 + j]; };
    for (int64_t n = 0; n < 3; ++n) {
      const int64_t len = s.seqLens[(size_t)n];
      for (int64_t j = 0; j < 4; ++j) {
        for (int64_t d = 0; d < 2; ++d)
          for (int64_t t = len; t < 5; ++t) EXPECT_EQ(y(t, d, n, j), 0.f) << "t " << t << " d " << d << " n " << n;
        if (len > 0) {
          EXPECT_EQ(yh(0, n, j), y(len - 1, 0, n, j)) << "n " << n;
          EXPECT_EQ(yh(1, n, j), y(0, 1, n, j)) << "n " << n;
          EXPECT_NE(y(0, 0, n, j), 0.f);
        } else {
          for (int64_t d = 0; d < 2; ++d) {
            EXPECT_EQ(yh(d, n, j), 0.f);
            if (s.lstm()) {
              EXPECT_EQ((*out)[2].data<float>()[(d * 3 + n) * 4 + j], 0.f);
            }
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------------ bad models and inputs

// The message of the failure, which must exist: the executor's create or run.
std::string failure(const Spec& s) {
  Built b = build(s);
  auto r = runOurs(b);
  EXPECT_FALSE(r) << "expected a failure";
  return r ? std::string() : r.status().message();
}

TEST(RecurrentBadInput, WrongWShape) {
  Spec s;
  s.wShape = {1, 4 * 6 + 1, 5};
  const std::string m = failure(s);
  EXPECT_NE(m.find("W has shape [1,25,5], expected [1,24,5]"), std::string::npos) << m;
  EXPECT_NE(m.find("rec"), std::string::npos) << m;  // the executor names the node
}

TEST(RecurrentBadInput, WrongRShape) {
  Spec s;
  s.op = "GRU";
  s.rShape = {1, 17, 6};
  const std::string m = failure(s);
  EXPECT_NE(m.find("R has shape [1,17,6], expected [1,18,6]"), std::string::npos) << m;
}

TEST(RecurrentBadInput, HiddenSizeMismatch) {
  Spec s;
  s.op = "RNN";
  s.hiddenSizeAttr = 5;  // W and R are made for 6
  const std::string m = failure(s);
  EXPECT_NE(m.find("attribute hidden_size is 5 but R has shape [1,6,6]"), std::string::npos) << m;
}

TEST(RecurrentBadInput, SequenceLensOutOfRange) {
  Spec s;
  s.seq = 4;
  s.seqLens = {4, 5, 1};
  std::string m = failure(s);
  EXPECT_NE(m.find("sequence_lens[1] is 5, outside [0, 4]"), std::string::npos) << m;
  s.seqLens = {4, 2, -1};
  m = failure(s);
  EXPECT_NE(m.find("sequence_lens[2] is -1, outside [0, 4]"), std::string::npos) << m;
  s.seqLens = {4, 2};  // one per batch entry is required
  m = failure(s);
  EXPECT_NE(m.find("sequence_lens has shape [2], expected [3]"), std::string::npos) << m;
}

TEST(RecurrentBadInput, UnknownActivation) {
  Spec s;
  s.op = "GRU";
  s.activations = {"Sigmoid", "Swish"};
  const std::string m = failure(s);
  EXPECT_NE(m.find("unknown activation 'Swish'"), std::string::npos) << m;
}

TEST(RecurrentBadInput, WrongActivationCount) {
  Spec s;
  s.activations = {"Sigmoid", "Tanh"};  // LSTM takes 3 per direction
  const std::string m = failure(s);
  EXPECT_NE(m.find("attribute 'activations' has 2 names, expected 3"), std::string::npos) << m;
}

TEST(RecurrentBadInput, SidewaysDirection) {
  Spec s;
  s.direction = "sideways";
  const std::string m = failure(s);
  EXPECT_NE(m.find("attribute 'direction' is 'sideways', expected forward, reverse or bidirectional"),
            std::string::npos)
      << m;
}

TEST(RecurrentBadInput, LayoutBeforeOpset14) {
  Spec s;
  s.opset = 13;
  s.layout = 1;
  const std::string m = failure(s);
  EXPECT_NE(m.find("attribute 'layout' needs opset 14"), std::string::npos) << m;
}

TEST(RecurrentBadInput, NonPositiveClipAndHiddenSize) {
  Spec s;
  s.clip = -1.f;
  std::string m = failure(s);
  EXPECT_NE(m.find("attribute 'clip' is -1"), std::string::npos) << m;
  Spec z;
  z.hiddenSizeAttr = 0;
  m = failure(z);
  EXPECT_NE(m.find("attribute 'hidden_size' is 0, must be positive"), std::string::npos) << m;
}

TEST(RecurrentBadInput, InitialStateOfAnotherLayout) {
  Spec s;
  s.direction = "bidirectional";
  s.initialH = true;
  s.dynamicShapes = true;
  Built b = build(s);
  // initial_h as [batch, dirs, hidden] while layout is 0.
  std::mt19937 rng(1);
  for (auto& f : b.feeds)
    if (f.name == "initial_h") f.tensor = qs::test::randomTensor({3, 2, 6}, rng);
  auto r = runOurs(b);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("initial_h has shape [3,2,6], expected [2,3,6]"), std::string::npos)
      << r.status().message();
}

// Hostile shapes: an empty batch with a huge sequence length must return at once (no step loop over
// it), and a zero input size (X without elements, so nothing bounds the other dims) is refused.
TEST(RecurrentBadInput, EmptyDimsDoNotRunAwayOrAllocate) {
  Spec s;
  s.op = "RNN";
  s.dynamicShapes = true;
  Built b = build(s);
  b.feeds[0].tensor = Tensor(DType::Float, {(int64_t)1 << 50, 0, 5});
  auto r = runOurs(b);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), (Shape{(int64_t)1 << 50, 1, 0, 6}));
  EXPECT_EQ((*r)[0].numel(), 0);
  EXPECT_EQ((*r)[1].shape(), (Shape{1, 0, 6}));

  b.feeds[0].tensor = Tensor(DType::Float, {(int64_t)1 << 40, (int64_t)1 << 20, 0});
  auto bad = runOurs(b);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("has input_size 0"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace qs
