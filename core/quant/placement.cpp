#include "core/quant/placement.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

namespace qs {

namespace {

// Activations TensorRT fuses into the producing Conv's epilogue.
const std::unordered_set<std::string>& fusingActivations() {
  static const std::unordered_set<std::string> s = {"Relu", "LeakyRelu", "Sigmoid", "Clip", "HardSigmoid",
                                                    "HardSwish"};
  return s;
}

// Data-movement ops: TensorRT moves Q/DQ across them, so they never carry a point themselves.
const std::unordered_set<std::string>& copyOps() {
  static const std::unordered_set<std::string> s = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                                                    "Split",   "Slice",     "Gather",  "Pad",       "Expand",
                                                    "Tile",    "Identity",  "Cast"};
  return s;
}

// Ops the table names as never quantized (they run in float/FP16 in TensorRT).
const std::unordered_set<std::string>& floatOps() {
  static const std::unordered_set<std::string> s = {"LayerNormalization", "Gelu", "InstanceNormalization",
                                                    "ArgMax", "Where"};
  return s;
}

bool isPool(const std::string& op) {
  return op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool";
}
bool isConvLike(const std::string& op) { return op == "Conv" || op == "ConvTranspose"; }
bool isDefaultDomain(const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; }

// The candidate points of one node before the neighbour and output rules decide whether it is on.
struct Candidate {
  std::vector<ActivationPoint> acts;
  std::vector<WeightPoint> weights;
};

// Structural facts shared by planQuantization and refreshNeighbourDependentNodes.
struct Analysis {
  std::vector<char> isOutputValue;     // per value
  std::vector<NodeId> groupHead;       // per node: the Conv heading its fused group, or -1
  std::vector<NodeId> residualFused;   // per Add/Mul: the Conv head of the fused branch, or -1
  std::vector<int> residualSkipInput;  // per Add/Mul: index of the skip input, or -1
  std::vector<char> anchorType;        // Conv/ConvTranspose/Gemm/MatMul/residual Add-Mul
  std::vector<std::vector<NodeId>> deps;  // per pool/Resize/residual: nodes whose state it needs
};

bool isConst(const Graph& g, ValueId v) { return v != kNoValue && g.value(v).constant.has_value(); }

// The only consumer of `v`, or -1 when it has none, several, or is a graph output.
NodeId soleConsumer(const Analysis& a, const Graph& g, ValueId v) {
  if (v == kNoValue || a.isOutputValue[(size_t)v]) return -1;
  const auto& cs = g.value(v).consumers;
  return cs.size() == 1 ? cs[0] : -1;
}

ValueId firstOutput(const Node& n) { return n.outputs.empty() ? kNoValue : n.outputs[0]; }

Analysis analyze(const Graph& g) {
  const size_t nn = g.nodes.size();
  Analysis a;
  a.isOutputValue.assign(g.values.size(), 0);
  for (ValueId v = 0; v < (ValueId)g.values.size(); ++v)
    if (g.value(v).isGraphOutput) a.isOutputValue[(size_t)v] = 1;
  for (ValueId v : g.outputs)
    if (v != kNoValue) a.isOutputValue[(size_t)v] = 1;

  // Conv [-> BatchNormalization] [-> fused activation]: each link must be the only consumer.
  a.groupHead.assign(nn, -1);
  for (NodeId n = 0; n < (NodeId)nn; ++n) {
    const Node& node = g.nodes[(size_t)n];
    if (!isConvLike(node.opType) || !isDefaultDomain(node)) continue;
    a.groupHead[(size_t)n] = n;
    NodeId tail = n;
    NodeId next = soleConsumer(a, g, firstOutput(node));
    if (next >= 0 && g.nodes[(size_t)next].opType == "BatchNormalization" &&
        g.nodes[(size_t)next].inputs[0] == firstOutput(node) && a.groupHead[(size_t)next] < 0) {
      a.groupHead[(size_t)next] = n;
      tail = next;
      next = soleConsumer(a, g, firstOutput(g.nodes[(size_t)tail]));
    }
    if (next >= 0 && fusingActivations().count(g.nodes[(size_t)next].opType) &&
        g.nodes[(size_t)next].inputs[0] == firstOutput(g.nodes[(size_t)tail]) && a.groupHead[(size_t)next] < 0) {
      a.groupHead[(size_t)next] = n;
    }
  }

  // Longest-path depth from the graph inputs: decides which branch of a two-Conv residual fuses.
  std::vector<int64_t> depth(nn, 0);
  for (NodeId n : g.topoOrder) {
    int64_t d = 0;
    for (ValueId in : g.nodes[(size_t)n].inputs) {
      if (in == kNoValue) continue;
      NodeId p = g.value(in).producer;
      if (p >= 0) d = std::max(d, depth[(size_t)p] + 1);
    }
    depth[(size_t)n] = d;
  }

  a.residualFused.assign(nn, -1);
  a.residualSkipInput.assign(nn, -1);
  a.anchorType.assign(nn, 0);
  for (NodeId n = 0; n < (NodeId)nn; ++n) {
    const Node& node = g.nodes[(size_t)n];
    if (!isDefaultDomain(node)) continue;
    const std::string& op = node.opType;
    if (op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "MatMul") {
      a.anchorType[(size_t)n] = 1;
      continue;
    }
    if ((op != "Add" && op != "Mul") || node.inputs.size() != 2) continue;
    ValueId in0 = node.inputs[0], in1 = node.inputs[1];
    if (in0 == kNoValue || in1 == kNoValue || isConst(g, in0) || isConst(g, in1)) continue;
    // A fusible branch: produced by a Conv or a Conv -> BatchNormalization whose output feeds only
    // this node (the activation of a group would end the fusion: TensorRT adds before it).
    auto fusibleHead = [&](ValueId v) -> NodeId {
      NodeId p = g.value(v).producer;
      if (p < 0 || a.groupHead[(size_t)p] < 0) return -1;
      const std::string& pop = g.nodes[(size_t)p].opType;
      if (!isConvLike(pop) && pop != "BatchNormalization") return -1;
      if (soleConsumer(a, g, v) != n) return -1;
      return a.groupHead[(size_t)p];
    };
    NodeId h0 = fusibleHead(in0), h1 = fusibleHead(in1);
    if (h0 < 0 && h1 < 0) continue;
    int fused;
    if (h0 >= 0 && h1 >= 0) {
      // Both branches end in a Conv group: the longer one is the main path that fuses.
      int64_t d0 = depth[(size_t)g.value(in0).producer], d1 = depth[(size_t)g.value(in1).producer];
      fused = d0 > d1 ? 0 : 1;
    } else {
      fused = h0 >= 0 ? 0 : 1;
    }
    a.residualFused[(size_t)n] = fused == 0 ? h0 : h1;
    a.residualSkipInput[(size_t)n] = 1 - fused;
    a.anchorType[(size_t)n] = 1;
  }

  // Dependencies of the neighbour-conditioned nodes.
  a.deps.assign(nn, {});
  constexpr int kWalkLimit = 64;  // pattern depth, not graph size: keeps every walk O(1) per node
  for (NodeId n = 0; n < (NodeId)nn; ++n) {
    const Node& node = g.nodes[(size_t)n];
    if (!isDefaultDomain(node)) continue;
    if (a.residualFused[(size_t)n] >= 0) {
      a.deps[(size_t)n].push_back(a.residualFused[(size_t)n]);
    } else if (node.opType == "Resize") {
      ValueId in = node.inputs.empty() ? kNoValue : node.inputs[0];
      NodeId p = in == kNoValue ? -1 : g.value(in).producer;
      if (p >= 0 && a.groupHead[(size_t)p] >= 0) a.deps[(size_t)n].push_back(a.groupHead[(size_t)p]);
    } else if (isPool(node.opType)) {
      std::vector<NodeId>& d = a.deps[(size_t)n];
      // Backwards to the producing anchor.
      ValueId v = node.inputs.empty() ? kNoValue : node.inputs[0];
      for (int step = 0; step < kWalkLimit && v != kNoValue; ++step) {
        NodeId p = g.value(v).producer;
        if (p < 0) break;
        if (a.groupHead[(size_t)p] >= 0) {
          d.push_back(a.groupHead[(size_t)p]);
          break;
        }
        if (a.anchorType[(size_t)p]) {
          d.push_back(p);
          break;
        }
        const std::string& pop = g.nodes[(size_t)p].opType;
        if (!fusingActivations().count(pop) && !copyOps().count(pop) && pop != "BatchNormalization") break;
        v = g.nodes[(size_t)p].inputs.empty() ? kNoValue : g.nodes[(size_t)p].inputs[0];
      }
      // Forwards through copy ops to consuming anchors.
      std::vector<ValueId> frontier{firstOutput(node)};
      int visited = 0;
      while (!frontier.empty() && visited < kWalkLimit) {
        ValueId cur = frontier.back();
        frontier.pop_back();
        if (cur == kNoValue) continue;
        for (NodeId c : g.value(cur).consumers) {
          if (++visited > kWalkLimit) break;
          if (a.anchorType[(size_t)c]) {
            d.push_back(c);
          } else if (copyOps().count(g.nodes[(size_t)c].opType)) {
            for (ValueId o : g.nodes[(size_t)c].outputs) frontier.push_back(o);
          }
        }
      }
      std::sort(d.begin(), d.end());
      d.erase(std::unique(d.begin(), d.end()), d.end());
    }
  }
  return a;
}

bool producesGraphOutput(const Analysis& a, const Node& node) {
  for (ValueId o : node.outputs)
    if (o != kNoValue && a.isOutputValue[(size_t)o]) return true;
  return false;
}

std::string dimsText(const Shape& s) {
  std::string r;
  for (size_t i = 2; i < s.size(); ++i) {
    if (i > 2) r.push_back('x');
    r.append(std::to_string(s[i]));
  }
  return r.empty() ? "1" : r;
}

// Known extent of dimension `fromEnd` (1 = last) of a value, or -1.
int64_t knownDim(const Graph& g, ValueId v, size_t fromEnd, int64_t* rankOut) {
  const Value& value = g.value(v);
  if (value.constant) {
    const Shape& s = value.constant->shape();
    *rankOut = (int64_t)s.size();
    return s.size() >= fromEnd ? s[s.size() - fromEnd] : -1;
  }
  if (!value.shape) {
    *rankOut = -1;
    return -1;
  }
  const auto& s = *value.shape;
  *rankOut = (int64_t)s.size();
  return s.size() >= fromEnd ? s[s.size() - fromEnd].value : -1;
}

// Builds the candidate points of a compute node and returns the reason when it has none.
std::string computeCandidates(const Graph& g, NodeId n, QuantMode mode, Candidate& c) {
  const Node& node = g.nodes[(size_t)n];
  const std::string& op = node.opType;
  auto act = [&](size_t i) {
    if (i < node.inputs.size() && node.inputs[i] != kNoValue && !isConst(g, node.inputs[i]))
      c.acts.push_back({n, i, node.inputs[i], -1});
  };
  auto weight = [&](size_t i, int axis) {
    if (i < node.inputs.size() && isConst(g, node.inputs[i])) c.weights.push_back({n, i, node.inputs[i], axis});
  };
  if (op == "Conv" || op == "ConvTranspose") {
    if (mode == QuantMode::Fp8 && op == "ConvTranspose")
      return "ConvTranspose: not quantized in fp8 mode (ModelOpt quantizes Conv, Gemm, MatMul and residual Add)";
    if (mode == QuantMode::Fp8) {
      // ModelOpt's _find_unsupported_fp8_convs_to_exclude: TensorRT's FP8 conv kernels.
      if (node.inputs.size() < 2 || !isConst(g, node.inputs[1]))
        return "Conv: weight is not a constant, no FP8 kernel (fp8 mode)";
      const Shape& w = g.value(node.inputs[1]).constant->shape();
      if (w.size() >= 3) {
        int64_t cout = w[0], cin = w[1], area = 1;
        for (size_t i = 2; i < w.size(); ++i) area *= w[i];
        if (cout < 16 || cin < 16 || cout % 16 != cin % 16 || area > 32)
          return "Conv: no FP8 kernel in TensorRT for Cout=" + std::to_string(cout) + ", Cin/group=" +
                 std::to_string(cin) + ", kernel " + dimsText(w) +
                 " (needs Cout, Cin/group >= 16, Cout % 16 == Cin/group % 16, kernel area <= 32)";
      }
    }
    act(0);
    weight(1, op == "Conv" ? 0 : 1);
    if (c.acts.empty() && c.weights.empty()) return op + ": no non-constant input and no constant weight";
    return {};
  }
  if (op == "Gemm") {
    const Attribute* tb = node.attr("transB");
    act(0);
    if (node.inputs.size() > 1 && isConst(g, node.inputs[1])) weight(1, tb && tb->i != 0 ? 0 : 1);
    else act(1);
    if (c.acts.empty() && c.weights.empty()) return "Gemm: all inputs are constant";
    return {};
  }
  if (op == "MatMul") {
    if (node.inputs.size() < 2 || node.inputs[0] == kNoValue || node.inputs[1] == kNoValue)
      return "MatMul: missing input";
    bool constA = isConst(g, node.inputs[0]), constB = isConst(g, node.inputs[1]);
    if (constA && constB) return "MatMul: both inputs are constant";
    // ModelOpt's GEMV detection: M == 1 or N == 1 cannot use tensor cores; Q/DQ only costs time.
    int64_t rankA = 0, rankB = 0;
    int64_t m = knownDim(g, node.inputs[0], 2, &rankA);
    int64_t nDim = knownDim(g, node.inputs[1], 1, &rankB);
    if (rankA == 1) m = 1;
    if (rankB == 1) nDim = 1;
    if (m == 1 || nDim == 1)
      return "MatMul: matrix-vector shape (" + std::string(m == 1 ? "M" : "N") +
             " = 1), left in float as ModelOpt's GEMV rule does";
    act(0);
    if (constB) weight(1, rankB >= 2 ? (int)rankB - 1 : 0);
    else act(1);
    return {};
  }
  return "op type " + op + " has no INT8 implementation in TensorRT's rules";
}

// Union-find over values for Concat scale sharing (iterative find with path halving).
struct ValueSets {
  std::vector<ValueId> parent;
  explicit ValueSets(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  ValueId find(ValueId v) {
    while (parent[(size_t)v] != v) {
      parent[(size_t)v] = parent[(size_t)parent[(size_t)v]];
      v = parent[(size_t)v];
    }
    return v;
  }
  void unite(ValueId a, ValueId b) { parent[(size_t)find(a)] = find(b); }
};

bool dependencySatisfied(const QuantPlan& plan, const Analysis& a, NodeId n, bool useQuantized) {
  for (NodeId d : a.deps[(size_t)n]) {
    const NodeQuantState& s = plan.nodes[(size_t)d];
    if (useQuantized ? s.quantized : s.quantizable) return true;
  }
  return false;
}

// The neighbour-conditioned nodes in dependency order: residual Add/Mul first (they are anchors of
// pools), then Resize and pools.
std::vector<NodeId> dependentNodesInOrder(const Graph& g, const Analysis& a) {
  std::vector<NodeId> first, second;
  for (NodeId n = 0; n < (NodeId)g.nodes.size(); ++n) {
    if (a.residualFused[(size_t)n] >= 0) first.push_back(n);
    else if (isDefaultDomain(g.nodes[(size_t)n]) &&
             (g.nodes[(size_t)n].opType == "Resize" || isPool(g.nodes[(size_t)n].opType)))
      second.push_back(n);
  }
  first.insert(first.end(), second.begin(), second.end());
  return first;
}

}  // namespace

QuantPlan planQuantization(const Graph& g, QuantMode mode) {
  QuantPlan plan;
  plan.mode = mode;
  const size_t nn = g.nodes.size();
  plan.nodes.assign(nn, {});
  Analysis a = analyze(g);
  std::vector<Candidate> cand(nn);

  // Pass 1: every node's own rule (compute ops get their points, never-ops their reason).
  for (NodeId n = 0; n < (NodeId)nn; ++n) {
    const Node& node = g.nodes[(size_t)n];
    const std::string& op = node.opType;
    NodeQuantState& st = plan.nodes[(size_t)n];
    if (!isDefaultDomain(node)) {
      st.reason = "op type " + node.domain + "::" + op + " has no INT8 implementation in TensorRT's rules";
    } else if (op == "LSTM" || op == "GRU" || op == "RNN") {
      st.reason = op + ": recurrent, kept in float (TensorRT's explicit quantization has no INT8 recurrent layers)";
    } else if (node.implicitInputs > 0 || op == "If" || op == "Loop" || op == "Scan") {
      st.reason = op + ": control flow; the nodes of its subgraphs run in float (" + std::string(kInsideSubgraph) + ")";
    } else if (op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "MatMul") {
      st.reason = computeCandidates(g, n, mode, cand[(size_t)n]);
      st.quantizable = st.reason.empty();
      // ModelOpt keeps Conv, Gemm and MatMul quantized at the network output (their output is float);
      // any other producer of a graph output is skipped.
      if (st.quantizable && op == "ConvTranspose" && producesGraphOutput(a, node)) {
        st.quantizable = false;
        st.reason = kOutputNode;
      }
    } else if (op == "Add" || op == "Mul") {
      if (a.residualFused[(size_t)n] >= 0) {
        if (mode == QuantMode::Fp8 && op == "Mul") {
          st.reason = "Mul: not quantized in fp8 mode (ModelOpt quantizes Conv, Gemm, MatMul and residual Add)";
        } else {
          size_t skip = (size_t)a.residualSkipInput[(size_t)n];
          cand[(size_t)n].acts.push_back({n, skip, node.inputs[skip], -1});
          st.quantizable = true;  // confirmed against its fused Conv below
        }
      } else if (node.inputs.size() == 2 && (isConst(g, node.inputs[0]) || isConst(g, node.inputs[1]))) {
        st.reason = op + ": constant input (bias/scale), not a residual; fuses into its producer";
      } else {
        st.reason = op + ": no input comes from a Conv group, not a residual";
      }
    } else if (isPool(op) || op == "Resize") {
      if (mode == QuantMode::Fp8) {
        st.reason = op + ": not quantized in fp8 mode (ModelOpt quantizes Conv, Gemm, MatMul and residual Add)";
      } else if (!node.inputs.empty() && node.inputs[0] != kNoValue && !isConst(g, node.inputs[0])) {
        cand[(size_t)n].acts.push_back({n, 0, node.inputs[0], -1});
        st.quantizable = true;  // confirmed against its neighbours below
      } else {
        st.reason = op + ": constant input";
      }
    } else if (fusingActivations().count(op)) {
      st.reason = op + ": fuses into the producing Conv (TensorRT)";
    } else if (a.groupHead[(size_t)n] >= 0 && a.groupHead[(size_t)n] != n) {
      st.reason = op + ": fused into Conv '" + g.nodes[(size_t)a.groupHead[(size_t)n]].name + "' (TensorRT)";
    } else if (op == "Softmax") {
      st.reason = "Softmax: never quantized, TensorRT runs it in float";
    } else if (copyOps().count(op)) {
      st.reason = op + ": copy op, TensorRT moves Q/DQ across it";
    } else if (floatOps().count(op)) {
      st.reason = op + ": never quantized, TensorRT runs it in float";
    } else if (op == "Concat") {
      st.reason = "Concat: never quantized itself; its inputs and output share one scale";
    } else {
      st.reason = "op type " + op + " has no INT8 implementation in TensorRT's rules";
    }
  }

  // Pass 2: neighbour-conditioned nodes, residuals before the pools that may depend on them.
  for (NodeId n : dependentNodesInOrder(g, a)) {
    NodeQuantState& st = plan.nodes[(size_t)n];
    if (!st.quantizable) continue;
    const Node& node = g.nodes[(size_t)n];
    bool isResidual = a.residualFused[(size_t)n] >= 0;
    if (!isResidual && producesGraphOutput(a, node)) {
      st.quantizable = false;
      st.reason = kOutputNode;
    } else if (!dependencySatisfied(plan, a, n, false)) {
      st.quantizable = false;
      st.reason = node.opType == "Resize" ? "Resize: does not directly follow a quantized Conv group"
                                          : kNoQuantizedNeighbour;
    }
  }

  for (auto& st : plan.nodes) st.quantized = st.quantizable;

  // Emit the points of quantizable nodes in topological order.
  for (NodeId n : g.topoOrder) {
    if (!plan.nodes[(size_t)n].quantizable) continue;
    for (auto& p : cand[(size_t)n].acts) plan.activations.push_back(p);
    for (auto& p : cand[(size_t)n].weights) plan.weights.push_back(p);
  }

  // Concat: values entering or leaving a Concat (and chains of Concats) share one amax.
  ValueSets sets(g.values.size());
  std::vector<char> inConcat(g.values.size(), 0);
  for (const Node& node : g.nodes) {
    if (node.opType != "Concat" || !isDefaultDomain(node) || node.outputs.empty() || node.outputs[0] == kNoValue)
      continue;
    ValueId out = node.outputs[0];
    inConcat[(size_t)out] = 1;
    for (ValueId in : node.inputs) {
      if (in == kNoValue || isConst(g, in)) continue;
      inConcat[(size_t)in] = 1;
      sets.unite(in, out);
    }
  }
  std::vector<int> groupOfRoot(g.values.size(), -1);
  int nextGroup = 0;
  for (auto& p : plan.activations) {
    if (!inConcat[(size_t)p.value]) continue;
    ValueId root = sets.find(p.value);
    if (groupOfRoot[(size_t)root] < 0) groupOfRoot[(size_t)root] = nextGroup++;
    p.scaleGroup = groupOfRoot[(size_t)root];
  }
  return plan;
}

void refreshNeighbourDependentNodes(QuantPlan& plan, const Graph& g) {
  if (plan.nodes.size() != g.nodes.size()) return;  // not a plan of this graph: nothing sensible to do
  Analysis a = analyze(g);
  for (NodeId n : dependentNodesInOrder(g, a)) {
    NodeQuantState& st = plan.nodes[(size_t)n];
    if (!st.quantizable) continue;
    bool auto_ = st.reason.empty() || st.reason == kNoQuantizedNeighbour;
    if (!auto_) continue;  // turned off by the user: leave it
    bool on = dependencySatisfied(plan, a, n, true);
    st.quantized = on;
    st.reason = on ? std::string() : std::string(kNoQuantizedNeighbour);
  }
}

}  // namespace qs
