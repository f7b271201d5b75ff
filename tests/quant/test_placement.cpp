// Q/DQ placement (reference section 2) and the user's configuration on small graphs built in
// code: each test states the points the TensorRT/ModelOpt rules give and checks nothing else is
// placed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/quant/placement.h"
#include "core/quant/quant_config.h"

using namespace qs;

namespace {

// Builds a qs::Graph directly: values by name, constants zero-filled with the given shape.
class GraphBuilder {
 public:
  ValueId input(const std::string& name, const std::vector<int64_t>& shape) {
    ValueId v = m_g.valueId(name);
    m_g.value(v).isGraphInput = true;
    m_g.value(v).dtype = DType::Float;
    setShape(v, shape);
    m_g.inputs.push_back(v);
    return v;
  }
  ValueId constant(const std::string& name, const std::vector<int64_t>& shape) {
    ValueId v = m_g.valueId(name);
    m_g.value(v).constant = Tensor::zeros(DType::Float, shape);
    m_g.value(v).dtype = DType::Float;
    setShape(v, shape);
    return v;
  }
  void shape(const std::string& name, const std::vector<int64_t>& shape) { setShape(m_g.valueId(name), shape); }
  NodeId node(const std::string& op, const std::string& name, const std::vector<std::string>& ins,
              const std::vector<std::string>& outs) {
    Node n;
    n.name = name;
    n.opType = op;
    for (auto& i : ins) n.inputs.push_back(i.empty() ? kNoValue : m_g.valueId(i));
    for (auto& o : outs) n.outputs.push_back(m_g.valueId(o));
    m_g.nodes.push_back(std::move(n));
    return (NodeId)m_g.nodes.size() - 1;
  }
  void attrInt(NodeId n, const std::string& key, int64_t v) {
    Attribute a;
    a.type = Attribute::Type::Int;
    a.i = v;
    m_g.nodes[(size_t)n].attributes[key] = a;
  }
  void output(const std::string& name) {
    ValueId v = m_g.valueId(name);
    m_g.value(v).isGraphOutput = true;
    m_g.outputs.push_back(v);
  }
  // Conv with a constant weight [cout, cin, k, k]; returns the node.
  NodeId conv(const std::string& name, const std::string& in, const std::string& out, int64_t cout = 4,
              int64_t cin = 4, int64_t k = 3, int64_t group = 1) {
    constant(name + ".w", {cout, cin, k, k});
    constant(name + ".b", {cout});
    NodeId n = node("Conv", name, {in, name + ".w", name + ".b"}, {out});
    if (group != 1) attrInt(n, "group", group);
    return n;
  }
  NodeId bn(const std::string& name, const std::string& in, const std::string& out, int64_t c = 4) {
    for (const char* p : {".scale", ".bias", ".mean", ".var"}) constant(name + p, {c});
    return node("BatchNormalization", name, {in, name + ".scale", name + ".bias", name + ".mean", name + ".var"},
                {out});
  }
  Graph& finish() {
    Status st = m_g.finalize("test");
    EXPECT_TRUE(st.isOk()) << st.message();
    return m_g;
  }
  Graph& graph() { return m_g; }

 private:
  void setShape(ValueId v, const std::vector<int64_t>& shape) {
    std::vector<Dim> dims;
    for (int64_t d : shape) dims.push_back(Dim{d, d < 0 ? "N" : ""});
    m_g.value(v).shape = dims;
  }
  Graph m_g;
};

NodeId nodeId(const Graph& g, const std::string& name) {
  for (NodeId n = 0; n < (NodeId)g.nodes.size(); ++n)
    if (g.nodes[(size_t)n].name == name) return n;
  ADD_FAILURE() << "no node " << name;
  return -1;
}

// "node:index=value" for every activation point, in plan order.
std::vector<std::string> actList(const Graph& g, const std::vector<ActivationPoint>& ps) {
  std::vector<std::string> r;
  for (auto& p : ps)
    r.push_back(g.nodes[(size_t)p.node].name + ":" + std::to_string(p.inputIndex) + "=" + g.value(p.value).name);
  return r;
}
std::vector<std::string> weightList(const Graph& g, const std::vector<WeightPoint>& ps) {
  std::vector<std::string> r;
  for (auto& p : ps)
    r.push_back(g.nodes[(size_t)p.node].name + ":" + std::to_string(p.inputIndex) + "=" + g.value(p.value).name +
                "@" + std::to_string(p.axis));
  return r;
}
using Strings = std::vector<std::string>;

const NodeQuantState& state(const QuantPlan& p, const Graph& g, const std::string& name) {
  return p.nodes[(size_t)nodeId(g, name)];
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Placement rules

TEST(PlaceGroups, ConvBnReluQuantizesGroupInputAndWeightOnly) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.conv("conv", "x", "c");
  b.bn("bn", "c", "n");
  b.node("Relu", "relu", {"n"}, {"y"});
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);

  EXPECT_EQ(actList(g, p.activations), (Strings{"conv:0=x"}));
  EXPECT_EQ(weightList(g, p.weights), (Strings{"conv:1=conv.w@0"}));
  EXPECT_EQ(p.activations[0].scaleGroup, -1);
  EXPECT_TRUE(state(p, g, "conv").quantizable);
  EXPECT_TRUE(state(p, g, "conv").quantized);
  EXPECT_TRUE(state(p, g, "conv").reason.empty());
  EXPECT_FALSE(state(p, g, "bn").quantizable);
  EXPECT_EQ(state(p, g, "bn").reason, "BatchNormalization: fused into Conv 'conv' (TensorRT)");
  EXPECT_FALSE(state(p, g, "relu").quantizable);
  EXPECT_EQ(state(p, g, "relu").reason, "Relu: fuses into the producing Conv (TensorRT)");
}

TEST(PlaceGroups, ConvWithComputedWeightGetsActivationOnly) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.input("w", {4, 4, 3, 3});
  b.node("Conv", "conv", {"x", "w"}, {"y"});
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_EQ(actList(g, p.activations), (Strings{"conv:0=x"}));
  EXPECT_TRUE(p.weights.empty());
  EXPECT_TRUE(state(p, g, "conv").quantized);
}

TEST(PlaceGroups, ConvTransposeWeightAxisOne) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.constant("w", {4, 2, 2, 2});
  b.node("ConvTranspose", "deconv", {"x", "w"}, {"d"});
  b.conv("conv", "d", "y", 4, 2, 1);
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_EQ(actList(g, p.activations), (Strings{"deconv:0=x", "conv:0=d"}));
  EXPECT_EQ(weightList(g, p.weights), (Strings{"deconv:1=w@1", "conv:1=conv.w@0"}));
}

// conv0 -> relu0 -> a ; a -> c1 -> bn1 -> r1 -> c2 -> bn2 -> Add(bn2, a) -> relu -> y
TEST(PlaceResidual, OnlyTheSkipInputOfAddIsQuantized) {
  for (bool skipFirst : {false, true}) {
    GraphBuilder b;
    b.input("x", {1, 4, 8, 8});
    b.conv("conv0", "x", "c0");
    b.node("Relu", "relu0", {"c0"}, {"a"});
    b.conv("c1", "a", "c1o");
    b.bn("bn1", "c1o", "bn1o");
    b.node("Relu", "r1", {"bn1o"}, {"r1o"});
    b.conv("c2", "r1o", "c2o");
    b.bn("bn2", "c2o", "bn2o");
    if (skipFirst) b.node("Add", "add", {"a", "bn2o"}, {"s"});
    else b.node("Add", "add", {"bn2o", "a"}, {"s"});
    b.node("Relu", "relu", {"s"}, {"y"});
    b.output("y");
    Graph& g = b.finish();
    QuantPlan p = planQuantization(g, QuantMode::Int8);
    std::string skip = skipFirst ? "add:0=a" : "add:1=a";
    EXPECT_EQ(actList(g, p.activations), (Strings{"conv0:0=x", "c1:0=a", "c2:0=r1o", skip})) << skipFirst;
    EXPECT_EQ(weightList(g, p.weights), (Strings{"conv0:1=conv0.w@0", "c1:1=c1.w@0", "c2:1=c2.w@0"}));
    EXPECT_TRUE(state(p, g, "add").quantized);
    for (auto n : {"bn1", "r1", "bn2", "relu"}) EXPECT_FALSE(state(p, g, n).quantizable) << n;
  }
}

// Downsampling block: both inputs of the Add end in a Conv group; the shorter (shortcut) branch is
// the skip that gets quantized, the longer main branch fuses.
TEST(PlaceResidual, TwoConvBranchesShortcutIsTheSkip) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.conv("c1", "x", "c1o");
  b.bn("bn1", "c1o", "bn1o");
  b.node("Relu", "r1", {"bn1o"}, {"r1o"});
  b.conv("c2", "r1o", "c2o");
  b.bn("bn2", "c2o", "main");
  b.conv("cs", "x", "cso", 4, 4, 1);
  b.bn("bns", "cso", "short");
  b.node("Add", "add", {"short", "main"}, {"y"});
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  Strings acts = actList(g, p.activations);
  EXPECT_NE(std::find(acts.begin(), acts.end(), "add:0=short"), acts.end());
  EXPECT_EQ(std::find(acts.begin(), acts.end(), "add:1=main"), acts.end());
  // The residual Add stays quantized although its output is a graph output.
  EXPECT_TRUE(state(p, g, "add").quantized);
}

TEST(PlaceResidual, ConstantAndNonResidualAddsAreNotQuantized) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.input("z", {1, 4, 8, 8});
  b.conv("conv", "x", "c");
  b.constant("bias", {1, 4, 1, 1});
  b.node("Add", "biasadd", {"c", "bias"}, {"ba"});
  b.node("Add", "plain", {"ba", "z"}, {"pl"});
  b.node("Mul", "mul", {"pl", "z"}, {"y"});
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_EQ(actList(g, p.activations), (Strings{"conv:0=x"}));
  EXPECT_FALSE(state(p, g, "biasadd").quantizable);
  EXPECT_TRUE(contains(state(p, g, "biasadd").reason, "constant input")) << state(p, g, "biasadd").reason;
  EXPECT_FALSE(state(p, g, "plain").quantizable);
  EXPECT_TRUE(contains(state(p, g, "plain").reason, "not a residual")) << state(p, g, "plain").reason;
  EXPECT_FALSE(state(p, g, "mul").quantizable);
}

TEST(PlaceResidual, ResidualMulAndExcludedFusedConv) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.conv("c0", "x", "a");
  b.node("Relu", "r0", {"a"}, {"ar"});
  b.conv("c1", "ar", "c1o");
  b.node("Mul", "mul", {"c1o", "ar"}, {"m"});
  b.conv("c2", "m", "y");
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_EQ(actList(g, p.activations), (Strings{"c0:0=x", "c1:0=ar", "mul:1=ar", "c2:0=m"}));
  // With its fused Conv in float the residual has nothing to fuse into.
  std::vector<std::string> warnings;
  QuantConfig cfg;
  cfg.nodesToExclude = {"c1$"};
  ASSERT_TRUE(applyConfig(p, g, cfg, warnings).isOk());
  EXPECT_FALSE(state(p, g, "mul").quantized);
  EXPECT_EQ(state(p, g, "mul").reason, kNoQuantizedNeighbour);
  EXPECT_TRUE(warnings.empty());
}

// x -> cA -> a ; x -> cB -> b ; a -> cD (side tap) ; Concat(a, b) -> c -> cC -> y
TEST(PlaceConcat, InputsAndOutputShareOneScaleGroup) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.conv("cA", "x", "a");
  b.conv("cB", "x", "b");
  b.conv("cD", "a", "d");
  NodeId concat = b.node("Concat", "concat", {"a", "b"}, {"c"});
  b.attrInt(concat, "axis", 1);
  b.conv("cC", "c", "y", 4, 8);
  b.output("y");
  b.output("d");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_EQ(actList(g, p.activations), (Strings{"cA:0=x", "cB:0=x", "cD:0=a", "cC:0=c"}));
  EXPECT_FALSE(state(p, g, "concat").quantizable);
  EXPECT_TRUE(contains(state(p, g, "concat").reason, "Concat")) << state(p, g, "concat").reason;
  int ga = p.activations[2].scaleGroup, gc = p.activations[3].scaleGroup;
  EXPECT_GE(ga, 0);
  EXPECT_EQ(ga, gc);
  EXPECT_EQ(p.activations[0].scaleGroup, -1);
  EXPECT_EQ(p.activations[1].scaleGroup, -1);
}

TEST(PlaceGroups, DepthwiseSeparableBlock) {
  GraphBuilder b;
  b.input("x", {1, 8, 16, 16});
  b.conv("dw", "x", "dwo", 8, 1, 3, 8);
  b.bn("dwbn", "dwo", "dwn", 8);
  b.node("Relu", "dwrelu", {"dwn"}, {"dwr"});
  b.conv("pw", "dwr", "pwo", 16, 8, 1);
  b.bn("pwbn", "pwo", "pwn", 16);
  b.node("Relu", "pwrelu", {"pwn"}, {"y"});
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_EQ(actList(g, p.activations), (Strings{"dw:0=x", "pw:0=dwr"}));
  EXPECT_EQ(weightList(g, p.weights), (Strings{"dw:1=dw.w@0", "pw:1=pw.w@0"}));
  for (auto n : {"dwbn", "dwrelu", "pwbn", "pwrelu"}) EXPECT_FALSE(state(p, g, n).quantizable) << n;
}

// LayerNorm -> Q/K/V projections -> Q.K^T -> Softmax -> .V -> Reshape -> Gemm(transB=1)
TEST(PlaceAttention, MatMulSoftmaxLayerNormGemm) {
  GraphBuilder b;
  b.input("x", {1, 16, 64});
  b.constant("ln.g", {64});
  b.constant("ln.b", {64});
  b.node("LayerNormalization", "ln", {"x", "ln.g", "ln.b"}, {"h"});
  b.shape("h", {1, 16, 64});
  for (const char* n : {"q", "k", "v"}) {
    b.constant(std::string("W") + n, {64, 64});
    b.node("MatMul", std::string("proj_") + n, {"h", std::string("W") + n}, {n});
    b.shape(n, {1, 16, 64});
  }
  b.node("Transpose", "kt", {"k"}, {"kT"});
  b.shape("kT", {1, 64, 16});
  b.node("MatMul", "qk", {"q", "kT"}, {"s"});
  b.shape("s", {1, 16, 16});
  b.node("Softmax", "softmax", {"s"}, {"pr"});
  b.shape("pr", {1, 16, 16});
  b.node("MatMul", "pv", {"pr", "v"}, {"o"});
  b.shape("o", {1, 16, 64});
  b.constant("shape2d", {2});
  b.node("Reshape", "flat", {"o", "shape2d"}, {"o2"});
  b.shape("o2", {16, 64});
  b.constant("Wo", {32, 64});
  b.constant("bo", {32});
  NodeId gemm = b.node("Gemm", "out_proj", {"o2", "Wo", "bo"}, {"y"});
  b.attrInt(gemm, "transB", 1);
  b.constant("Wf", {64, 8});
  b.node("Gemm", "fc", {"o2", "Wf"}, {"z"});
  b.output("y");
  b.output("z");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);

  EXPECT_EQ(actList(g, p.activations), (Strings{"proj_q:0=h", "proj_k:0=h", "proj_v:0=h", "qk:0=q", "qk:1=kT",
                                                "pv:0=pr", "pv:1=v", "out_proj:0=o2", "fc:0=o2"}));
  EXPECT_EQ(weightList(g, p.weights),
            (Strings{"proj_q:1=Wq@1", "proj_k:1=Wk@1", "proj_v:1=Wv@1", "out_proj:1=Wo@0", "fc:1=Wf@1"}));
  EXPECT_EQ(state(p, g, "ln").reason, "LayerNormalization: never quantized, TensorRT runs it in float");
  EXPECT_FALSE(state(p, g, "softmax").quantizable);
  EXPECT_TRUE(contains(state(p, g, "softmax").reason, "Softmax")) << state(p, g, "softmax").reason;
  EXPECT_EQ(state(p, g, "kt").reason, "Transpose: copy op, TensorRT moves Q/DQ across it");
  EXPECT_EQ(state(p, g, "flat").reason, "Reshape: copy op, TensorRT moves Q/DQ across it");
  // Gemm producing a graph output is still quantized (its output is float).
  EXPECT_TRUE(state(p, g, "out_proj").quantized);
}

TEST(PlaceAttention, MatrixVectorMatMulStaysFloat) {
  GraphBuilder b;
  b.input("x", {1, 64});
  b.constant("W", {64, 32});
  b.node("MatMul", "gemv_m", {"x", "W"}, {"a"});
  b.shape("a", {1, 32});
  b.input("t", {-1, 8, 64});
  b.constant("Wn", {64, 1});
  b.node("MatMul", "gemv_n", {"t", "Wn"}, {"c"});
  b.input("u", {-1, -1, 64});
  b.node("MatMul", "gemm", {"u", "W"}, {"d"});
  b.output("a");
  b.output("c");
  b.output("d");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_FALSE(state(p, g, "gemv_m").quantizable);
  EXPECT_TRUE(contains(state(p, g, "gemv_m").reason, "matrix-vector")) << state(p, g, "gemv_m").reason;
  EXPECT_FALSE(state(p, g, "gemv_n").quantizable);
  EXPECT_TRUE(state(p, g, "gemm").quantized);  // M unknown: quantized
  EXPECT_EQ(actList(g, p.activations), (Strings{"gemm:0=u"}));
}

// x -> conv1 -> relu -> MaxPool -> conv2 -> y ; plus an input-fed pool and a GAP -> Flatten -> Gemm head
TEST(PlacePooling, QuantizedOnlyNextToAQuantizedNode) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.conv("conv1", "x", "c1");
  b.node("Relu", "relu", {"c1"}, {"r"});
  b.node("MaxPool", "pool", {"r"}, {"pl"});
  b.conv("conv2", "pl", "c2");
  b.node("GlobalAveragePool", "gap", {"c2"}, {"gp"});
  b.node("Flatten", "flat", {"gp"}, {"f"});
  b.shape("f", {2, 4});
  b.constant("Wfc", {10, 4});
  NodeId fc = b.node("Gemm", "fc", {"f", "Wfc"}, {"y"});
  b.attrInt(fc, "transB", 1);
  b.input("z", {1, 4, 8, 8});
  b.node("AveragePool", "lonely", {"z"}, {"lp"});
  b.node("Sigmoid", "sig", {"lp"}, {"ls"});
  b.output("y");
  b.output("ls");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_EQ(actList(g, p.activations),
            (Strings{"conv1:0=x", "pool:0=r", "conv2:0=pl", "gap:0=c2", "fc:0=f"}));
  EXPECT_TRUE(state(p, g, "pool").quantized);
  EXPECT_TRUE(state(p, g, "gap").quantized);
  EXPECT_FALSE(state(p, g, "lonely").quantizable);
  EXPECT_EQ(state(p, g, "lonely").reason, kNoQuantizedNeighbour);

  // One neighbour excluded: the other keeps the pool quantized.
  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.nodesToExclude = {"conv1"};
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_FALSE(state(p, g, "conv1").quantized);
  EXPECT_TRUE(state(p, g, "pool").quantized);
  // Both neighbours excluded: the pool is not quantized either.
  cfg.nodesToExclude = {"conv"};
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_FALSE(state(p, g, "pool").quantized);
  EXPECT_EQ(state(p, g, "pool").reason, kNoQuantizedNeighbour);
  EXPECT_TRUE(state(p, g, "gap").quantized);  // the Gemm behind Flatten is still quantized
  EXPECT_EQ(actList(g, activeActivationPoints(p)), (Strings{"gap:0=c2", "fc:0=f"}));
  EXPECT_EQ(weightList(g, activeWeightPoints(p)), (Strings{"fc:1=Wfc@0"}));

  // The GUI toggle re-evaluates the neighbours.
  setNodeQuantized(p, g, nodeId(g, "conv2"), true);
  EXPECT_TRUE(state(p, g, "pool").quantized);
  EXPECT_TRUE(state(p, g, "pool").reason.empty());
  setNodeQuantized(p, g, nodeId(g, "conv2"), false);
  EXPECT_EQ(state(p, g, "conv2").reason, "excluded by the user");
  EXPECT_FALSE(state(p, g, "pool").quantized);
  // A user-excluded pool stays off when its neighbours come back.
  setNodeQuantized(p, g, nodeId(g, "pool"), false);
  setNodeQuantized(p, g, nodeId(g, "conv2"), true);
  EXPECT_FALSE(state(p, g, "pool").quantized);
  EXPECT_EQ(state(p, g, "pool").reason, "excluded by the user");
  // Non-quantizable nodes cannot be turned on.
  setNodeQuantized(p, g, nodeId(g, "relu"), true);
  EXPECT_FALSE(state(p, g, "relu").quantized);
}

TEST(PlaceResize, FollowsAQuantizedConvGroup) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.conv("conv", "x", "c");
  b.node("Relu", "relu", {"c"}, {"r"});
  b.constant("scales", {4});
  b.node("Resize", "up", {"r", "", "scales"}, {"u"});
  b.conv("head", "u", "y");
  b.input("z", {1, 4, 8, 8});
  b.node("Resize", "up_in", {"z", "", "scales"}, {"uz"});
  b.conv("head2", "uz", "y2");
  b.output("y");
  b.output("y2");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  Strings acts = actList(g, p.activations);
  std::sort(acts.begin(), acts.end());  // the two chains interleave in topological order
  EXPECT_EQ(acts, (Strings{"conv:0=x", "head2:0=uz", "head:0=u", "up:0=r"}));
  EXPECT_TRUE(state(p, g, "up").quantized);
  EXPECT_FALSE(state(p, g, "up_in").quantizable);
  EXPECT_TRUE(contains(state(p, g, "up_in").reason, "Conv group")) << state(p, g, "up_in").reason;

  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.opTypesToExclude = {"Conv"};
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_EQ(state(p, g, "conv").reason, "op type Conv excluded by --op-types-to-exclude");
  EXPECT_FALSE(state(p, g, "up").quantized);
  EXPECT_EQ(state(p, g, "up").reason, kNoQuantizedNeighbour);
}

// conv1's output is both a graph output and conv2's input; a pool and a Resize end the graph.
TEST(PlaceOutputs, OutputNodeRule) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.conv("conv1", "x", "y1");
  b.conv("conv2", "y1", "y2");
  b.node("MaxPool", "pool", {"y2"}, {"y3"});
  b.output("y1");
  b.output("y2");
  b.output("y3");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  // Conv producing a graph output keeps its input points; the point on y1 sits on conv2's edge.
  EXPECT_EQ(actList(g, p.activations), (Strings{"conv1:0=x", "conv2:0=y1"}));
  EXPECT_TRUE(state(p, g, "conv1").quantized);
  EXPECT_TRUE(state(p, g, "conv2").quantized);
  EXPECT_FALSE(state(p, g, "pool").quantizable);
  EXPECT_EQ(state(p, g, "pool").reason, kOutputNode);
}

TEST(PlaceFp8, GemmOnlyPlacement) {
  GraphBuilder b;
  b.input("x", {1, 16, 8, 8});
  b.conv("big", "x", "c1", 16, 16, 3);
  b.node("Relu", "relu", {"c1"}, {"r"});
  b.node("MaxPool", "pool", {"r"}, {"pl"});
  b.conv("small", "pl", "c2", 8, 16, 3);
  b.conv("wide", "c2", "y", 16, 8, 7);
  b.output("y");
  Graph& g = b.finish();
  QuantPlan i8 = planQuantization(g, QuantMode::Int8);
  EXPECT_TRUE(state(i8, g, "pool").quantized);
  EXPECT_TRUE(state(i8, g, "small").quantized);
  QuantPlan f8 = planQuantization(g, QuantMode::Fp8);
  EXPECT_EQ(f8.mode, QuantMode::Fp8);
  EXPECT_TRUE(state(f8, g, "big").quantized);
  EXPECT_FALSE(state(f8, g, "pool").quantizable);
  EXPECT_TRUE(contains(state(f8, g, "pool").reason, "fp8")) << state(f8, g, "pool").reason;
  EXPECT_FALSE(state(f8, g, "small").quantizable);
  EXPECT_TRUE(contains(state(f8, g, "small").reason, "Cout=8")) << state(f8, g, "small").reason;
  EXPECT_FALSE(state(f8, g, "wide").quantizable);
  EXPECT_EQ(actList(g, f8.activations), (Strings{"big:0=x"}));
}

TEST(PlaceScale, HundredThousandNodeChain) {
  GraphBuilder b;
  b.input("x", {1, 1, 4, 4});
  b.constant("w", {1, 1, 1, 1});
  const int kConvs = 50000;
  std::string prev = "x";
  for (int i = 0; i < kConvs; ++i) {
    std::string c = "c" + std::to_string(i), r = "r" + std::to_string(i);
    b.node("Conv", "conv_" + std::to_string(i), {prev, "w"}, {c});
    b.node("Relu", "relu_" + std::to_string(i), {c}, {r});
    prev = r;
  }
  b.output(prev);
  Graph& g = b.finish();
  ASSERT_EQ(g.nodes.size(), 100000u);
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  EXPECT_EQ(p.activations.size(), (size_t)kConvs);
  EXPECT_EQ(p.weights.size(), (size_t)kConvs);
  EXPECT_TRUE(p.nodes.front().quantized);
  EXPECT_FALSE(p.nodes.back().quantizable);
  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.nodesToExclude = {"conv_4999"};  // conv_4999 and conv_49990..49999
  auto r = applyConfig(p, g, cfg, w);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->switchedOff.size(), 11u);
  EXPECT_EQ(activeWeightPoints(p).size(), (size_t)kConvs - 11);
}

// ---------------------------------------------------------------------------------------------
// Configuration

namespace {
// x -> conv1 -> relu1 -> conv2 -> Add(conv2, relu1) -> head_conv -> y
Graph& configGraph(GraphBuilder& b) {
  b.input("x", {1, 4, 8, 8});
  b.conv("conv1", "x", "c1");
  b.node("Relu", "relu1", {"c1"}, {"r1"});
  b.conv("conv2", "r1", "c2");
  b.node("Add", "add", {"c2", "r1"}, {"s"});
  b.conv("head_conv", "s", "y");
  b.output("y");
  return b.finish();
}
}  // namespace

TEST(PlaceConfig, ExcludeByNameUsesPrefixRegex) {
  GraphBuilder b;
  Graph& g = configGraph(b);
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.nodesToExclude = {"conv", "onv", "head.*"};
  auto r = applyConfig(p, g, cfg, w);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_FALSE(state(p, g, "conv1").quantized);
  EXPECT_EQ(state(p, g, "conv1").reason, "excluded by --nodes-to-exclude 'conv'");
  EXPECT_FALSE(state(p, g, "conv2").quantized);
  EXPECT_EQ(state(p, g, "head_conv").reason, "excluded by --nodes-to-exclude 'head.*'");
  EXPECT_FALSE(state(p, g, "add").quantized);  // its fused conv2 is in float
  EXPECT_EQ(r->quantized, 0u);
  EXPECT_EQ(r->quantizable, 4u);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "'onv'")) << w[0];
  EXPECT_TRUE(contains(w[0], "--nodes-to-exclude")) << w[0];
  EXPECT_TRUE(activeActivationPoints(p).empty());
  EXPECT_TRUE(activeWeightPoints(p).empty());

  // Exact names and a full-name anchor.
  cfg.nodesToExclude = {"conv2$"};
  w.clear();
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_TRUE(state(p, g, "conv1").quantized);
  EXPECT_TRUE(state(p, g, "conv1").reason.empty());
  EXPECT_FALSE(state(p, g, "conv2").quantized);
  EXPECT_TRUE(state(p, g, "head_conv").quantized);
  EXPECT_TRUE(w.empty());
}

TEST(PlaceConfig, ExcludeByOpTypeAndRestrict) {
  GraphBuilder b;
  Graph& g = configGraph(b);
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.opTypesToExclude = {"Add", "Softmax"};
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_EQ(state(p, g, "add").reason, "op type Add excluded by --op-types-to-exclude");
  EXPECT_TRUE(state(p, g, "conv1").quantized);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "'Softmax'")) << w[0];

  // Only the matches are quantized; excludes win over the restriction.
  cfg = {};
  cfg.nodesToQuantize = {"conv", "head", "nothing_here"};
  cfg.nodesToExclude = {"conv2"};
  w.clear();
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_TRUE(state(p, g, "conv1").quantized);
  EXPECT_TRUE(state(p, g, "head_conv").quantized);
  EXPECT_EQ(state(p, g, "conv2").reason, "excluded by --nodes-to-exclude 'conv2'");
  EXPECT_EQ(state(p, g, "add").reason, "not matched by --nodes-to-quantize");
  EXPECT_EQ(state(p, g, "relu1").reason, "Relu: fuses into the producing Conv (TensorRT)");  // placement reason kept
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "'nothing_here'")) << w[0];

  cfg = {};
  cfg.opTypesToQuantize = {"Add", "Relu"};
  w.clear();
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_EQ(state(p, g, "conv1").reason, "op type Conv not in --op-types-to-quantize");
  // The Add's fused conv2 is float, so the Add has nothing to fuse into.
  EXPECT_FALSE(state(p, g, "add").quantized);
  ASSERT_EQ(w.size(), 1u);  // Relu exists but can never be quantized
  EXPECT_TRUE(contains(w[0], "'Relu'")) << w[0];
}

TEST(PlaceConfig, InvalidRegexIsAnErrorNamingThePattern) {
  GraphBuilder b;
  Graph& g = configGraph(b);
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  QuantPlan before = p;
  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.nodesToExclude = {"conv1", "head[("};
  auto r = applyConfig(p, g, cfg, w);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(r.status().message(), "'head[('")) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "--nodes-to-exclude")) << r.status().message();
  for (size_t i = 0; i < p.nodes.size(); ++i) EXPECT_EQ(p.nodes[i].quantized, before.nodes[i].quantized);

  cfg = {};
  cfg.nodesToQuantize = {"*conv"};
  auto r2 = applyConfig(p, g, cfg, w);
  ASSERT_FALSE(r2.isOk());
  EXPECT_TRUE(contains(r2.status().message(), "--nodes-to-quantize")) << r2.status().message();
}

TEST(PlaceConfig, ModeAndIdempotence) {
  GraphBuilder b;
  Graph& g = configGraph(b);
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.nodesToExclude = {"head"};
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  QuantPlan once = p;
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    EXPECT_EQ(p.nodes[i].quantized, once.nodes[i].quantized);
    EXPECT_EQ(p.nodes[i].reason, once.nodes[i].reason);
  }
  EXPECT_EQ(actList(g, activeActivationPoints(p)), (Strings{"conv1:0=x", "conv2:0=r1", "add:1=r1"}));
  EXPECT_FALSE(isNodeQuantized(p, -1));
  EXPECT_FALSE(isNodeQuantized(p, 1000));
}

// Node-name patterns go through RE2 (linear time): fuzz_quant_files found a saved-config pattern,
// "r+*+++...", that kept std::regex backtracking for over 10 s on a short node name. Such
// patterns are now refused or matched at once, and a pattern's syntax error is one line.
TEST(PlaceConfig, PathologicalPatternsAreRefusedOrMatchedInLinearTime) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.conv("relu_conv_rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr", "x", "a");
  b.node("Relu", "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrx", {"a"}, {"y"});
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.nodesToExclude = {"r+*" + std::string(40, '+') + "elu.*"};
  Status st = applyConfig(p, g, cfg, w).status();
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("invalid regular expression 'r+*"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  // Nested repetition, exponential for a backtracking matcher on this name: linear in RE2.
  cfg.nodesToExclude = {"(r+)+$", "(r|rr)+x"};
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_TRUE(state(p, g, "relu_conv_rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr").quantized);
  // "(r+)+$" matches no name (each has other letters); "(r|rr)+x" matches the Relu only.
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("'(r+)+$' matches no node name"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("'(r|rr)+x' matches 1 node(s), none of which can be quantized"), std::string::npos) << w[1];
}

// The exact-name patterns written to quant_cfg.json and made by the workbench's toggles.
TEST(PlaceConfig, ExactNamePatternMatchesOnlyThatName) {
  GraphBuilder b;
  const std::string odd = "model/conv.1+(x)[0]{2}|^$\\ \xc3\xa9";
  b.input("x", {1, 4, 8, 8});
  b.conv(odd, "x", "a");
  b.conv(odd + "_b", "a", "c");
  b.conv("model/conv01+(x)[0]{2}|^$\\ \xc3\xa9", "c", "y");  // what an unescaped '.' would match
  b.output("y");
  Graph& g = b.finish();
  QuantPlan p = planQuantization(g, QuantMode::Int8);
  std::vector<std::string> w;
  QuantConfig cfg;
  cfg.nodesToExclude = {exactNamePattern(odd)};
  ASSERT_TRUE(applyConfig(p, g, cfg, w).isOk());
  EXPECT_FALSE(state(p, g, odd).quantized);
  EXPECT_TRUE(state(p, g, odd + "_b").quantized);
  EXPECT_TRUE(state(p, g, "model/conv01+(x)[0]{2}|^$\\ \xc3\xa9").quantized);
  EXPECT_TRUE(w.empty());
}
