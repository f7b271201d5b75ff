// Blocked regions: see blocked_rewrite.h.
#include "core/exec/blocked_rewrite.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>

#include "core/exec/expand_depthwise_rewrite.h"
#include "core/exec/rewrite_queries.h"
#include "core/kernels/blocked_layout.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"

namespace qs {

namespace {

// Unary: Relu, Clip, Sigmoid, HardSigmoid, HardSwish, LeakyRelu (elementwise, input 0 only);
// Identity: Identity or a Pad of zeros; Pool: 2-D MaxPool / AveragePool; GlobalPool: the region's
// exit into plain [N, C, 1, 1]; Scale: Mul of a blocked X by a plain [N, C, 1, 1] (squeeze-and-
// excitation); Add: two blocked values of one shape that no Conv absorbed.
enum class Kind { None, Conv, BatchNorm, Concat, Unary, Pool, GlobalPool, Scale, Add, Identity };

bool isUnaryActivation(const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0] == kNoValue) return false;
  return n.opType == "Relu" || n.opType == "Clip" || n.opType == "Sigmoid" || n.opType == "HardSigmoid" ||
         n.opType == "HardSwish" || n.opType == "LeakyRelu";
}

using rewrite::fixedConstant;

bool isOp(const Node& n, const char* op, const char* domain = "") { return n.opType == op && n.domain == domain; }

int64_t intAttr(const Node& n, const char* key, int64_t def) {
  const Attribute* a = n.attr(key);
  return a && a->type == Attribute::Type::Int ? a->i : def;
}

// Dims equal as far as they are known: both fixed and equal, or the same symbol.
bool sameKnownShape(const Value& a, const Value& b) {
  if (!a.shape || !b.shape || a.shape->size() != 4 || b.shape->size() != 4) return false;
  for (size_t i = 0; i < 4; ++i) {
    const Dim &x = (*a.shape)[i], &y = (*b.shape)[i];
    if (x.isFixed() ? !(y.isFixed() && x.value == y.value) : (x.symbol.empty() || x.symbol != y.symbol)) return false;
  }
  return true;
}

struct Rewrite {
  Model& model;
  Graph& g;
  std::vector<NodeId>& origin;
  std::vector<std::vector<NodeId>>& absorbed;
  BlockedRegionReport& report;
  int block = 8;  // channels per block of the layout: DnnlConv::preferredBlock()
  // Candidates are found at the smallest block, 8; a region then runs in `block` when every member
  // fits it, else in 8 (regionBlock, per region root).
  static constexpr int kMinBlock = 8;
  std::vector<int> regionBlock;

  std::vector<Kind> kind;
  std::vector<int64_t> outC;       // channels of the node's output (candidates)
  std::vector<ValueId> residual;   // Conv: the residual input of a fused Add
  std::vector<char> plainIn;       // Conv: a stem reading plain NCHW (fewer than 8 channels: the image)
  std::vector<int> scaleInput;     // Scale: which input of the Mul is the blocked X
  std::vector<NodeId> fusedAdd, fusedRelu;  // per candidate: the Add / Relu it absorbs (-1: none)
  std::vector<char> removed;
  std::vector<NodeId> parent;      // union-find over candidates

  NodeId find(NodeId x) {
    while (parent[(size_t)x] != x) x = parent[(size_t)x] = parent[(size_t)parent[(size_t)x]];
    return x;
  }
  void unite(NodeId a, NodeId b) { parent[(size_t)find(a)] = find(b); }

  // The value a candidate's consumers read: its own output, or that of the Add / Relu it absorbs.
  ValueId finalOutput(NodeId id) const {
    const NodeId last = fusedRelu[(size_t)id] >= 0 ? fusedRelu[(size_t)id] : fusedAdd[(size_t)id];
    return g.nodes[(size_t)(last >= 0 ? last : id)].outputs[0];
  }
  // The candidate producing value v (through an absorbed Add / Relu), or -1.
  std::vector<NodeId> owner;
  NodeId producerOf(ValueId v) const {
    const NodeId p = g.value(v).producer;
    return p >= 0 ? owner[(size_t)p] : -1;
  }
  // Whether v is the blocked output of a candidate (a GlobalPool's output is plain).
  bool blockedProducer(ValueId v) const {
    const NodeId p = v == kNoValue ? -1 : producerOf(v);
    return p >= 0 && kind[(size_t)p] != Kind::None && kind[(size_t)p] != Kind::GlobalPool;
  }
  int64_t channelsOf(ValueId v) const {
    const NodeId p = producerOf(v);
    if (p >= 0 && kind[(size_t)p] != Kind::None) return outC[(size_t)p];
    const Value& val = g.value(v);
    if (val.dtype != DType::Float || !val.shape || val.shape->size() != 4 || !(*val.shape)[1].isFixed()) return -1;
    return (*val.shape)[1].value;
  }
  std::vector<ValueId> activationInputs(NodeId id) const {
    const Node& n = g.nodes[(size_t)id];
    switch (kind[(size_t)id]) {
      case Kind::Conv: {
        // A stem reads its input as it lies: no reorder, and the image is no border.
        std::vector<ValueId> in;
        if (!plainIn[(size_t)id]) in.push_back(n.inputs[0]);
        if (residual[(size_t)id] != kNoValue) in.push_back(residual[(size_t)id]);
        return in;
      }
      case Kind::Concat:
      case Kind::Add: return n.inputs;
      case Kind::Scale: return {n.inputs[(size_t)scaleInput[(size_t)id]]};
      case Kind::BatchNorm:
      case Kind::Unary:
      case Kind::Pool:
      case Kind::GlobalPool:
      case Kind::Identity: return {n.inputs[0]};
      default: return {};
    }
  }

  void classify(NodeId id) {
    const Node& n = g.nodes[(size_t)id];
    if (n.outputs.empty() || n.outputs[0] == kNoValue) return;
    for (size_t o = 1; o < n.outputs.size(); ++o)
      if (n.outputs[o] != kNoValue && (!g.value(n.outputs[o]).consumers.empty() || g.value(n.outputs[o]).isGraphOutput))
        return;
    if (isOp(n, "Conv") || isOp(n, kFusedConvOp, kFusedDomain)) {
      const Tensor* W = n.inputs.size() > 1 ? fixedConstant(g, n.inputs[1]) : nullptr;
      const int64_t group = intAttr(n, "group", 1);
      if (!W || W->dtype() != DType::Float || W->rank() != 4 || group < 1) return;
      // A stem on the image (resnet50's and densenet121's 3 -> 64 7x7, the MobileNets' 3 -> 32 3x3)
      // writes the region's layout from plain NCHW, so the region starts at the image and its pool
      // (the stem MaxPool) runs blocked too.
      const bool stem = DnnlConv::plainInputSupported(W->dim(1) * group, W->dim(0), group, kMinBlock);
      if (!stem && !DnnlConv::blockedShapeSupported(W->dim(1) * group, W->dim(0), group, kMinBlock)) return;
      if (n.inputs.size() > 3) return;
      if (n.inputs.size() == 3 && n.inputs[2] != kNoValue && !fixedConstant(g, n.inputs[2])) return;
      const int64_t C = channelsOf(n.inputs[0]);
      if (C >= 0 && C != W->dim(1) * group) return;
      kind[(size_t)id] = Kind::Conv;
      outC[(size_t)id] = W->dim(0);
      plainIn[(size_t)id] = stem ? 1 : 0;
    } else if (isOp(n, "BatchNormalization")) {
      if (n.inputs.size() != 5 || intAttr(n, "training_mode", 0) != 0) return;
      const Tensor* s = fixedConstant(g, n.inputs[1]);
      if (!s || s->rank() != 1 || s->numel() % kMinBlock != 0) return;
      for (size_t i = 1; i < 5; ++i) {
        const Tensor* t = fixedConstant(g, n.inputs[i]);
        if (!t || t->dtype() != DType::Float || t->numel() != s->numel()) return;
      }
      const int64_t C = channelsOf(n.inputs[0]);
      if (C >= 0 && C != s->numel()) return;
      if (C < 0 && producerOf(n.inputs[0]) < 0) return;  // rank unknown: maybe not 4-D
      kind[(size_t)id] = Kind::BatchNorm;
      outC[(size_t)id] = s->numel();
    } else if (isOp(n, "Concat") && intAttr(n, "axis", 1) == 1 && n.attr("axis")) {
      int64_t sum = 0;
      for (ValueId v : n.inputs) {
        const int64_t c = v == kNoValue ? -1 : channelsOf(v);
        if (c <= 0 || c % kMinBlock != 0) return;
        sum += c;
      }
      kind[(size_t)id] = Kind::Concat;
      outC[(size_t)id] = sum;
    } else if (isUnaryActivation(n) || isOp(n, "Identity") || isZeroPad(n)) {
      // Layout-agnostic: joins a region only behind a blocked value.
      if (!blockedProducer(n.inputs[0])) return;
      kind[(size_t)id] = isUnaryActivation(n) ? Kind::Unary : Kind::Identity;
      outC[(size_t)id] = outC[(size_t)producerOf(n.inputs[0])];
    } else if ((isOp(n, "MaxPool") || isOp(n, "AveragePool")) && n.inputs.size() == 1) {
      // 2-D pools behind a blocked value (densenet's transitions); a pool fed from outside (after
      // a 3-channel stem) would only move the reorder to the larger tensor before it.
      const Attribute* ks = n.attr("kernel_shape");
      if (!ks || ks->ints.size() != 2 || !blockedProducer(n.inputs[0])) return;
      kind[(size_t)id] = Kind::Pool;
      outC[(size_t)id] = outC[(size_t)producerOf(n.inputs[0])];
    } else if (isOp(n, "GlobalAveragePool") && n.inputs.size() == 1) {
      if (!blockedProducer(n.inputs[0])) return;
      kind[(size_t)id] = Kind::GlobalPool;
      outC[(size_t)id] = outC[(size_t)producerOf(n.inputs[0])];
    } else if (isOp(n, "Mul") && n.inputs.size() == 2) {
      // x (blocked) * s [N, C, 1, 1]: s plain (from outside the region or a GlobalPool) or, when
      // its producer is kept (regnet's first SE block has 8-channel 1x1 convs), blocked: at 1x1
      // the same bytes, so s never needs a reorder.
      for (int i = 0; i < 2; ++i) {
        const ValueId x = n.inputs[(size_t)i], sv = n.inputs[(size_t)(1 - i)];
        if (x == kNoValue || sv == kNoValue || !blockedProducer(x)) continue;
        const Value& sval = g.value(sv);
        const int64_t C = outC[(size_t)producerOf(x)];
        if (sval.dtype != DType::Float || !sval.shape || sval.shape->size() != 4) continue;
        const std::vector<Dim>& sd = *sval.shape;
        if (!sd[1].isFixed() || sd[1].value != C || !sd[2].isFixed() || sd[2].value != 1 || !sd[3].isFixed() ||
            sd[3].value != 1)
          continue;
        // The batch: the same as x's as far as known (the kernel checks it at run time).
        const Value& xval = g.value(x);
        if (xval.shape && xval.shape->size() == 4 && sd[0].isFixed() && (*xval.shape)[0].isFixed() &&
            sd[0].value != (*xval.shape)[0].value)
          continue;
        kind[(size_t)id] = Kind::Scale;
        scaleInput[(size_t)id] = i;
        outC[(size_t)id] = C;
        return;
      }
    } else if (isOp(n, "Add") && n.inputs.size() == 2) {
      // Both blocked, one shape (a residual Add no Conv could absorb, e.g. after an activation).
      if (!blockedProducer(n.inputs[0]) || !blockedProducer(n.inputs[1])) return;
      if (!sameKnownShape(g.value(n.inputs[0]), g.value(n.inputs[1]))) return;
      if (channelsOf(n.inputs[0]) != channelsOf(n.inputs[1])) return;
      kind[(size_t)id] = Kind::Add;
      outC[(size_t)id] = channelsOf(n.inputs[0]);
    }
  }

  // A Pad of zeros (constant pads, all 0: densenet's transitions export one before each AveragePool).
  bool isZeroPad(const Node& n) const {
    if (!isOp(n, "Pad") || n.inputs.size() < 2 || n.inputs[0] == kNoValue) return false;
    const Tensor* pads = fixedConstant(g, n.inputs[1]);
    if (!pads || pads->dtype() != DType::Int64) return false;
    for (int64_t i = 0; i < pads->numel(); ++i)
      if (pads->data<int64_t>()[i] != 0) return false;
    return true;
  }

  // The sole consumer of v when it is not a graph output, else -1.
  NodeId soleConsumer(ValueId v) const {
    const Value& val = g.value(v);
    if (val.isGraphOutput || val.consumers.size() != 1) return -1;
    return val.consumers[0];
  }

  void fuseEpilogues(NodeId id) {
    const Node& n = g.nodes[(size_t)id];
    const NodeId next = soleConsumer(n.outputs[0]);
    if (next < 0 || removed[(size_t)next]) return;
    const Node& c = g.nodes[(size_t)next];
    if (kind[(size_t)id] == Kind::BatchNorm) {
      if (isOp(c, "Relu")) fusedRelu[(size_t)id] = next;
    } else if (kind[(size_t)id] == Kind::Conv) {
      const Attribute* acts = n.attr("activations");
      if (acts && !acts->strings.empty()) return;
      if (!isOp(c, "Add") || c.inputs.size() != 2 || c.inputs[0] == c.inputs[1]) return;
      const ValueId r = c.inputs[0] == n.outputs[0] ? c.inputs[1] : c.inputs[0];
      if (!sameKnownShape(g.value(r), g.value(n.outputs[0])) || channelsOf(r) != outC[(size_t)id]) return;
      residual[(size_t)id] = r;
      fusedAdd[(size_t)id] = next;
      const NodeId relu = soleConsumer(c.outputs[0]);
      if (relu >= 0 && isOp(g.nodes[(size_t)relu], "Relu")) fusedRelu[(size_t)id] = relu;
    }
    if (fusedRelu[(size_t)id] >= 0) {
      removed[(size_t)fusedRelu[(size_t)id]] = 1;
      kind[(size_t)fusedRelu[(size_t)id]] = Kind::None;
      owner[(size_t)fusedRelu[(size_t)id]] = id;
    }
    if (fusedAdd[(size_t)id] >= 0) {
      removed[(size_t)fusedAdd[(size_t)id]] = 1;
      kind[(size_t)fusedAdd[(size_t)id]] = Kind::None;
      owner[(size_t)fusedAdd[(size_t)id]] = id;
    }
  }

  // Whether candidate id runs in a layout of b channels per block. A channel count that is not a
  // whole number of blocks (mobilenet_v2's 24 in nChw16c) runs with its tail padded to a block:
  // the values carry the logical count (BlockedConv's W, the channels attribute of the exits,
  // BlockedBatchNorm's zero-padded scale and shift). Not padded: a count under one block (8
  // channels in 16 lanes would double the member's work), a grouped Conv's groups (whole blocks
  // per group: DnnlConv::blockedShapeSupported) and a Concat's inputs (the lanes of a padded
  // input would land among the next input's channels).
  bool fitsBlock(NodeId id, int b) const {
    auto fits = [b](int64_t c) { return c % kMinBlock == 0 && (c % b == 0 || c > b); };
    const Node& n = g.nodes[(size_t)id];
    if (kind[(size_t)id] == Kind::Conv) {
      const Tensor* W = fixedConstant(g, n.inputs[1]);
      const int64_t group = intAttr(n, "group", 1);
      if (plainIn[(size_t)id]) return DnnlConv::plainInputSupported(W->dim(1) * group, W->dim(0), group, b);
      if (fits(W->dim(0)) && fits(W->dim(1) * group) && pairedGroups(n, b)) return true;
      return fits(W->dim(0)) && fits(W->dim(1) * group) &&
             DnnlConv::blockedShapeSupported(W->dim(1) * group, W->dim(0), group, b);
    }
    if (kind[(size_t)id] == Kind::Concat) {
      if (outC[(size_t)id] % b != 0) return false;
      for (ValueId v : n.inputs)
        if (channelsOf(v) % b != 0) return false;
    }
    return fits(outC[(size_t)id]);
  }

  // A grouped conv of 8 channels per group in and out (regnet's) in blocks of 16: libdnnl 2.6 has
  // only its reference kernel for it in nChw16c, so it runs as a conv of 16 channels per group
  // whose weights are block-diagonal (two groups of 8 per group of 16, zeros across; an odd last
  // group beside the pad lanes): twice the multiply-adds on oneDNN's jit avx512_core kernel, 1.05-1.3x
  // the nChw8c time of the conv itself (regnet_y_400mf's four widths, 1 thread), which buys its
  // region nChw16c, where the 1x1 convs run 1.6-1.7x faster (jit_1x1 avx512_core against avx2).
  bool pairedGroups(const Node& n, int b) const {
    const Tensor* W = fixedConstant(g, n.inputs[1]);
    const int64_t group = intAttr(n, "group", 1);
    return b == 2 * kMinBlock && group > 1 && W->dim(1) == kMinBlock && W->dim(0) == group * kMinBlock;
  }

  // W [M, 8, kH, kW] in M/8 groups -> [Mp, 16, kH, kW] in Mp/16 groups (Mp: M padded to 16), and B
  // padded with zeros to Mp.
  void pairGroups(Node& node, NodeId id) {
    const Tensor& W = *fixedConstant(g, node.inputs[1]);
    const int64_t M = W.dim(0), K = W.dim(2) * W.dim(3), Mp = paddedChannels(M, id), b = 2 * kMinBlock;
    Tensor Wp(DType::Float, {Mp, b, W.dim(2), W.dim(3)});
    float* wp = Wp.data<float>();
    std::fill(wp, wp + Wp.numel(), 0.f);
    for (int64_t o = 0; o < M; ++o) {
      const int64_t lane = (o / kMinBlock) % 2 * kMinBlock;  // where group o/8's inputs sit in its group of 16
      std::copy(W.data<float>() + o * kMinBlock * K, W.data<float>() + (o + 1) * kMinBlock * K,
                wp + (o * b + lane) * K);
    }
    node.inputs[1] = newValue(node.name + "/paired_groups_w", std::move(Wp));
    if (node.inputs.size() > 2 && node.inputs[2] != kNoValue) {
      const Tensor& B = *fixedConstant(g, node.inputs[2]);
      Tensor Bp(DType::Float, {Mp});
      std::fill(Bp.data<float>(), Bp.data<float>() + Mp, 0.f);
      std::copy(B.data<float>(), B.data<float>() + M, Bp.data<float>());
      node.inputs[2] = newValue(node.name + "/paired_groups_b", std::move(Bp));
    }
    node.attributes["group"] = intAttribute(Mp / b);
  }

  int64_t paddedChannels(int64_t C, NodeId id) {
    const int64_t b = regionBlock[(size_t)find(id)];
    return (C + b - 1) / b * b;
  }

  Attribute intAttribute(int64_t v) {
    Attribute a;
    a.type = Attribute::Type::Int;
    a.i = v;
    return a;
  }

  Attribute blockAttr(NodeId id) {
    Attribute a;
    a.type = Attribute::Type::Int;
    a.i = regionBlock[(size_t)find(id)];
    return a;
  }

  ValueId newValue(const std::string& base, std::optional<Tensor> constant) {
    std::string name = base;
    for (int i = 1; g.findValue(name) != kNoValue; ++i) name = base + "_" + std::to_string(i);
    const ValueId id = g.valueId(name);
    Value& v = g.value(id);
    v.dtype = DType::Float;
    if (constant) {
      std::vector<Dim> dims;
      for (int64_t d : constant->shape()) dims.push_back(Dim{d, {}});
      v.shape = dims;
      v.constant = std::move(constant);
    }
    return id;
  }

  Status run() {
    const size_t n = g.nodes.size();
    kind.assign(n, Kind::None);
    outC.assign(n, -1);
    residual.assign(n, kNoValue);
    plainIn.assign(n, 0);
    scaleInput.assign(n, 0);
    fusedAdd.assign(n, -1);
    fusedRelu.assign(n, -1);
    removed.assign(n, 0);
    owner.resize(n);
    std::iota(owner.begin(), owner.end(), 0);
    for (NodeId id : g.topoOrder) classify(id);
    for (NodeId id : g.topoOrder)
      if (kind[(size_t)id] != Kind::None && !removed[(size_t)id]) fuseEpilogues(id);
    // Regions: candidates joined by the values between them; kept with >= 2 convolutions larger than 1x1.
    parent.resize(n);
    std::iota(parent.begin(), parent.end(), 0);
    for (NodeId id = 0; id < (NodeId)n; ++id) {
      if (kind[(size_t)id] == Kind::None) continue;
      for (ValueId v : activationInputs(id)) {
        if (blockedProducer(v)) unite(producerOf(v), id);
      }
    }
    std::vector<int> spatialConvs(n, 0), members(n, 0);
    for (NodeId id = 0; id < (NodeId)n; ++id) {
      if (kind[(size_t)id] == Kind::None) continue;
      ++members[(size_t)find(id)];
      if (kind[(size_t)id] == Kind::Conv) {
        // Counted when larger than 1x1. Depthwise and grouped convs count only where the output's
        // H x W is known (the zoo's fixed 224x224): with PaddleOCR's dynamic H and W they joined
        // cls's tiny convs into 3 regions (21 convs under 1.5 M multiply-adds each) that ran 1.5 ms
        // CPU against 1.2 ms unblocked, oneDNN's per-call cost not paid back by the reorders saved.
        const Tensor* W = fixedConstant(g, g.nodes[(size_t)id].inputs[1]);
        const Value& y = g.value(g.nodes[(size_t)id].outputs[0]);
        const bool grouped = intAttr(g.nodes[(size_t)id], "group", 1) != 1;
        const bool spatialKnown =
            y.shape && y.shape->size() == 4 && (*y.shape)[2].isFixed() && (*y.shape)[3].isFixed();
        // A stem does not count: it joins a region that pays for itself without it (PaddleOCR's
        // stems would otherwise tip det's and rec's candidates over the rule).
        if (W->dim(2) * W->dim(3) > 1 && (!grouped || spatialKnown) && !plainIn[(size_t)id])
          ++spatialConvs[(size_t)find(id)];
      }
    }
    // Border values per region (reorders if kept): values entering from outside, and outputs
    // read outside or graph outputs. A region must pay for them: at most one per counted conv
    // (det formed 2 counted convs with 5 reorders through its FPN's Adds: 32.8 ms CPU against
    // 31.7 unblocked, 1 thread, so it stays out).
    std::vector<int> borders(n, 0);
    std::vector<std::pair<NodeId, ValueId>> entering;
    for (NodeId id = 0; id < (NodeId)n; ++id) {
      if (kind[(size_t)id] == Kind::None) continue;
      const NodeId r = find(id);
      for (ValueId v : activationInputs(id))
        if (!(blockedProducer(v) && find(producerOf(v)) == r)) entering.emplace_back(r, v);
      if (kind[(size_t)id] == Kind::GlobalPool) continue;
      const ValueId out = finalOutput(id);
      bool outside = g.value(out).isGraphOutput;
      for (NodeId c : g.value(out).consumers)
        if (!removed[(size_t)c] && (kind[(size_t)c] == Kind::None || find(c) != r)) outside = true;
      borders[(size_t)r] += outside ? 1 : 0;
    }
    std::sort(entering.begin(), entering.end());
    entering.erase(std::unique(entering.begin(), entering.end()), entering.end());
    for (const auto& e : entering) ++borders[(size_t)e.first];
    std::vector<char> kept(n, 0);
    regionBlock.assign(n, block);
    for (NodeId id = 0; id < (NodeId)n; ++id) {
      if (kind[(size_t)id] == Kind::None) continue;
      const NodeId r = find(id);
      kept[(size_t)id] = spatialConvs[(size_t)r] >= 2 && borders[(size_t)r] <= spatialConvs[(size_t)r];
      if (kept[(size_t)id] && find(id) == id) ++report.regions;
      if (!fitsBlock(id, regionBlock[(size_t)r])) regionBlock[(size_t)r] = kMinBlock;
    }
    for (NodeId id = 0; id < (NodeId)n; ++id)
      if (kind[(size_t)id] != Kind::None && kept[(size_t)id] && find(id) == id && regionBlock[(size_t)id] != block)
        ++report.narrowRegions;
    // Undo the fusions of candidates that are not kept.
    for (NodeId id = 0; id < (NodeId)n; ++id) {
      if (kind[(size_t)id] == Kind::None || kept[(size_t)id]) continue;
      for (NodeId f : {fusedAdd[(size_t)id], fusedRelu[(size_t)id]})
        if (f >= 0) {
          removed[(size_t)f] = 0;
          owner[(size_t)f] = f;
        }
      fusedAdd[(size_t)id] = fusedRelu[(size_t)id] = -1;
      residual[(size_t)id] = kNoValue;
    }
    if (report.regions == 0) return Status::ok();
    // A BatchNormalization reading a Concat of its region that nothing else reads (each DenseNet
    // layer's input: the concatenation of every earlier output, then BN + Relu) reads the Concat's
    // inputs in place: the Concat's output is never written (BlockedBatchNorm's `concat`).
    std::vector<NodeId> concatOf(n, -1);
    std::vector<char> concatRead(n, 0);
    for (NodeId id = 0; id < (NodeId)n; ++id) {
      if (kind[(size_t)id] != Kind::BatchNorm || !kept[(size_t)id]) continue;
      const ValueId x = g.nodes[(size_t)id].inputs[0];
      const NodeId p = g.value(x).producer;
      if (p < 0 || kind[(size_t)p] != Kind::Concat || !kept[(size_t)p] || find(p) != find(id)) continue;
      if (g.value(x).isGraphOutput || g.value(x).consumers.size() != 1) continue;
      concatOf[(size_t)id] = p;
      concatRead[(size_t)p] = 1;
      ++report.concatsRead;
    }

    std::vector<Node> nodes;
    std::vector<NodeId> newOrigin;
    std::vector<std::vector<NodeId>> newAbsorbed;
    std::vector<ValueId> blockedOf(g.values.size(), kNoValue);  // plain value -> its blocked twin
    auto blockedValue = [&](ValueId v) {
      if (blockedOf[(size_t)v] == kNoValue) {
        const ValueId b = newValue(g.value(v).name + "#nChw8c", std::nullopt);
        blockedOf.resize(g.values.size(), kNoValue);
        blockedOf[(size_t)v] = b;
      }
      return blockedOf[(size_t)v];
    };
    auto isKept = [&](ValueId v) {
      const NodeId p = producerOf(v);
      return p >= 0 && kept[(size_t)p] && kind[(size_t)p] != Kind::GlobalPool;
    };
    std::vector<char> toBlockedMade(g.values.size(), 0);
    for (NodeId id = 0; id < (NodeId)n; ++id) {
      if (removed[(size_t)id] || concatRead[(size_t)id]) continue;
      Node node = g.nodes[(size_t)id];
      std::vector<NodeId> abs = absorbed[(size_t)id];
      if (!kept[(size_t)id]) {
        nodes.push_back(std::move(node));
        newOrigin.push_back(origin[(size_t)id]);
        newAbsorbed.push_back(std::move(abs));
        continue;
      }
      // Inputs from outside the region are reordered in, once per value.
      auto mapInput = [&](ValueId v) {
        const ValueId b = blockedValue(v);
        if (!isKept(v) && !toBlockedMade[(size_t)v]) {
          toBlockedMade[(size_t)v] = 1;
          Node r;
          r.name = g.value(v).name + "/to_nChw8c";
          r.opType = kToBlockedOp;
          r.domain = kFusedDomain;
          r.inputs = {v};
          r.outputs = {b};
          r.attributes["block"] = blockAttr(id);
          nodes.push_back(std::move(r));
          newOrigin.push_back(origin[(size_t)id]);
          newAbsorbed.emplace_back();
          ++report.reorders;
        }
        return b;
      };
      const ValueId out = finalOutput(id);
      switch (kind[(size_t)id]) {
        case Kind::Conv: {
          if (regionBlock[(size_t)find(id)] == 2 * kMinBlock && pairedGroups(node, 2 * kMinBlock)) pairGroups(node, id);
          node.opType = kBlockedConvOp;
          node.domain = kFusedDomain;
          node.inputs.resize(4, kNoValue);
          if (!plainIn[(size_t)id]) node.inputs[0] = mapInput(node.inputs[0]);
          if (residual[(size_t)id] != kNoValue) {
            node.inputs[3] = mapInput(residual[(size_t)id]);
            ++report.residualAdds;
          } else {
            node.inputs.resize(3);
          }
          Attribute relu;
          relu.type = Attribute::Type::Int;
          relu.i = fusedRelu[(size_t)id] >= 0 ? 1 : 0;
          node.attributes["residual_relu"] = relu;
          node.attributes["block"] = blockAttr(id);
          if (plainIn[(size_t)id]) {
            Attribute plain;
            plain.type = Attribute::Type::Int;
            plain.i = 1;
            node.attributes["plain_input"] = plain;
            ++report.stems;
          }
          ++report.convs;
          break;
        }
        case Kind::BatchNorm: {
          const Tensor& s = *fixedConstant(g, node.inputs[1]);
          const Tensor& b = *fixedConstant(g, node.inputs[2]);
          const Tensor& m = *fixedConstant(g, node.inputs[3]);
          const Tensor& var = *fixedConstant(g, node.inputs[4]);
          const Attribute* e = node.attr("epsilon");
          const float eps = e && e->type == Attribute::Type::Float ? e->f : 1e-5f;
          const int64_t C = s.numel(), Cp = paddedChannels(C, id);
          // The pad lanes of a padded tail: scale and shift 0, so they stay 0.
          Tensor scale(DType::Float, {Cp}), shift(DType::Float, {Cp});
          std::fill(scale.data<float>(), scale.data<float>() + Cp, 0.f);
          std::fill(shift.data<float>(), shift.data<float>() + Cp, 0.f);
          for (int64_t c = 0; c < C; ++c) {
            const float k = s.data<float>()[c] / std::sqrt(var.data<float>()[c] + eps);
            scale.data<float>()[c] = k;
            shift.data<float>()[c] = b.data<float>()[c] - m.data<float>()[c] * k;
          }
          std::vector<ValueId> xs;
          const NodeId cat = concatOf[(size_t)id];
          if (cat >= 0) {
            for (ValueId v : g.nodes[(size_t)cat].inputs) xs.push_back(mapInput(v));
            abs.push_back(origin[(size_t)cat]);
            abs.insert(abs.end(), absorbed[(size_t)cat].begin(), absorbed[(size_t)cat].end());
          } else {
            xs.push_back(mapInput(node.inputs[0]));
          }
          node.inputs = xs;
          node.inputs.push_back(newValue(node.name + "/blocked_scale", std::move(scale)));
          node.inputs.push_back(newValue(node.name + "/blocked_shift", std::move(shift)));
          node.outputs.resize(1);
          node.opType = kBlockedBatchNormOp;
          node.domain = kFusedDomain;
          node.attributes.clear();
          if (cat >= 0) {
            Attribute k;
            k.type = Attribute::Type::Int;
            k.i = (int64_t)xs.size();
            node.attributes["concat"] = k;
          }
          Attribute relu;
          relu.type = Attribute::Type::Int;
          relu.i = fusedRelu[(size_t)id] >= 0 ? 1 : 0;
          node.attributes["relu"] = relu;
          break;
        }
        case Kind::Concat:
        case Kind::Add:
          for (ValueId& v : node.inputs) v = mapInput(v);
          break;
        case Kind::Unary:
          node.inputs[0] = mapInput(node.inputs[0]);
          break;
        case Kind::Identity:
          node.inputs = {mapInput(node.inputs[0])};
          node.opType = "Identity";
          node.domain = "";
          node.attributes.clear();
          break;
        case Kind::Pool:
          node.inputs[0] = mapInput(node.inputs[0]);
          node.outputs.resize(1);
          node.opType = isOp(node, "MaxPool") ? kBlockedMaxPoolOp : kBlockedAveragePoolOp;
          node.domain = kFusedDomain;
          node.attributes.erase("storage_order");
          ++report.pools;
          break;
        case Kind::GlobalPool:
          node.inputs[0] = mapInput(node.inputs[0]);
          node.opType = kBlockedGlobalAveragePoolOp;
          node.domain = kFusedDomain;
          node.attributes["channels"] = intAttribute(outC[(size_t)id]);  // plain [N, C, 1, 1]: no pad lanes
          ++report.pools;
          break;
        case Kind::Scale: {
          const ValueId x = mapInput(node.inputs[(size_t)scaleInput[(size_t)id]]);
          const ValueId sv = node.inputs[(size_t)(1 - scaleInput[(size_t)id])];
          node.inputs = {x, isKept(sv) ? blockedValue(sv) : sv};
          node.opType = kBlockedChannelScaleOp;
          node.domain = kFusedDomain;
          ++report.scales;
          break;
        }
        default:
          break;
      }
      for (NodeId f : {fusedAdd[(size_t)id], fusedRelu[(size_t)id]})
        if (f >= 0) abs.push_back(origin[(size_t)f]);
      if (kind[(size_t)id] == Kind::GlobalPool) {  // plain [N, C, 1, 1]: the region ends here
        nodes.push_back(std::move(node));
        newOrigin.push_back(origin[(size_t)id]);
        newAbsorbed.push_back(std::move(abs));
        continue;
      }
      node.outputs[0] = blockedValue(out);
      nodes.push_back(std::move(node));
      newOrigin.push_back(origin[(size_t)id]);
      newAbsorbed.push_back(std::move(abs));
      // Readers outside the region, and graph outputs, get the value back in NCHW under its own id.
      bool outside = g.value(out).isGraphOutput;
      for (NodeId c : g.value(out).consumers)
        if (!removed[(size_t)c] && !kept[(size_t)c]) outside = true;
      if (outside) {
        Node r;
        r.name = g.value(out).name + "/from_nChw8c";
        r.opType = kFromBlockedOp;
        r.domain = kFusedDomain;
        r.inputs = {blockedOf[(size_t)out]};
        r.outputs = {out};
        r.attributes["channels"] = intAttribute(outC[(size_t)id]);
        nodes.push_back(std::move(r));
        newOrigin.push_back(origin[(size_t)id]);
        newAbsorbed.emplace_back();
        ++report.reorders;
      }
    }
    g.nodes = std::move(nodes);
    origin = std::move(newOrigin);
    absorbed = std::move(newAbsorbed);
    model.opsets[kFusedDomain] = std::max<int64_t>(model.opsets[kFusedDomain], 1);
    return g.finalize(model.path + " (blocked regions)");
  }
};

}  // namespace

Status rewriteBlockedRegions(Model& model, std::vector<NodeId>& origin, std::vector<std::vector<NodeId>>& absorbed,
                             BlockedRegionReport* report) {
  BlockedRegionReport local;
  BlockedRegionReport& r = report ? *report : local;
  r = BlockedRegionReport();
  if (!DnnlConv::available()) return Status::ok();
  if (origin.size() != model.graph.nodes.size() || absorbed.size() != origin.size())
    return runtimeError(model.path + ": blocked regions: node bookkeeping does not match the graph");
  r.block = DnnlConv::preferredBlock();
  Rewrite rw{model, model.graph, origin, absorbed, r, r.block, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  QS_RETURN_IF_ERROR(rw.run());
  return fuseExpandDepthwise(model, origin, absorbed, &r.expandDepthwise);
}

}  // namespace qs
