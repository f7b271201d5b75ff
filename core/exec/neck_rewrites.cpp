// det's neck Adds and its Concat of upsampled maps in the inference graph rewrites: see fuseResidualAdds and
// fuseUpsampleConcats (residual_rewrites.h).
#include "core/exec/residual_rewrites.h"

#include <cmath>

#include "core/exec/rewrite_queries.h"
#include "core/kernels/conv.h"
#include "core/kernels/residual_add.h"
#include "core/kernels/upsample_concat.h"

namespace qs {

namespace {

class NeckRewriter {
 public:
  NeckRewriter(Model& m, std::vector<char>& removed, std::vector<std::vector<NodeId>>& absorbed)
      : m_model(m), m_g(m.graph), m_removed(removed), m_absorbed(absorbed) {}

  int run() { return sweep("Add", &NeckRewriter::fuseResidualAdd); }
  int runConcats() { return sweep("Concat", &NeckRewriter::fuseUpsampleConcat); }

 private:
  // Tries `fuse` on every live node of the default domain's `opType`, in topological order; the number fused.
  int sweep(const char* opType, void (NeckRewriter::*fuse)(NodeId)) {
    for (NodeId id : m_g.topoOrder) {
      if (m_removed[(size_t)id]) continue;
      const Node& n = m_g.nodes[(size_t)id];
      if (n.opType == opType && n.domain.empty()) (this->*fuse)(id);
    }
    return m_fused;
  }

  int64_t opsetOf(const Node& n) const { return rewrite::opsetOf(m_model, n); }

  const Tensor* fixedConstant(ValueId v) const { return rewrite::fixedConstant(m_g, v); }

  // The single live consumer of v, or -1 (also -1 when v is a graph output).
  NodeId soleConsumer(ValueId v) const {
    if (m_g.value(v).isGraphOutput) return -1;
    NodeId only = -1;
    int n = 0;
    for (NodeId c : m_g.value(v).consumers)
      if (!m_removed[(size_t)c]) {
        only = c;
        ++n;
      }
    return n == 1 ? only : -1;
  }

  // Index of the input of n that is not `v` for a binary node, or -1.
  static int otherInput(const Node& n, ValueId v) {
    if (n.inputs.size() != 2) return -1;
    if (n.inputs[0] == v && n.inputs[1] != v) return 1;
    if (n.inputs[1] == v && n.inputs[0] != v) return 0;
    return -1;
  }

  // The node producing v when it is live, of op `op` (default domain), and v its only output.
  const Node* producerOf(ValueId v, const char* op) const {
    const NodeId p = m_g.value(v).producer;
    if (p < 0 || m_removed[(size_t)p]) return nullptr;
    const Node& n = m_g.nodes[(size_t)p];
    return n.opType == op && n.domain.empty() && !n.outputs.empty() && n.outputs[0] == v ? &n : nullptr;
  }

  // The input of a live Resize node producing v that upsamples by whole factors [1, 1, fh, fw] with
  // the nearest value below (mode nearest, asymmetric coordinates, nearest_mode floor: det's FPN), v
  // its only output; kNoValue otherwise.
  ValueId nearestUpsampleInput(ValueId v, int64_t& fh, int64_t& fw) const {
    const Node* r = producerOf(v, "Resize");
    if (!r || r->inputs.empty() || r->outputs.size() != 1) return kNoValue;
    auto attrIs = [&](const char* key, const char* want) {
      const Attribute* a = r->attr(key);
      return a && a->type == Attribute::Type::String && a->s == want;
    };
    if (!attrIs("mode", "nearest") || !attrIs("coordinate_transformation_mode", "asymmetric") ||
        !attrIs("nearest_mode", "floor"))
      return kNoValue;
    const size_t si = opsetOf(*r) >= 11 ? 2 : 1;
    if (r->inputs.size() <= si || (r->inputs.size() > si + 1 && r->inputs[si + 1] != kNoValue)) return kNoValue;
    const Tensor* scales = fixedConstant(r->inputs[si]);
    if (!scales || scales->dtype() != DType::Float || scales->numel() != 4) return kNoValue;
    const float* sc = scales->data<float>();
    if (sc[0] != 1.f || sc[1] != 1.f || sc[2] < 1.f || sc[3] < 1.f || sc[2] != std::floor(sc[2]) ||
        sc[3] != std::floor(sc[3]))
      return kNoValue;
    fh = (int64_t)sc[2];
    fw = (int64_t)sc[3];
    return r->inputs[0];
  }

  // One Add: see fuseResidualAdds (residual_rewrites.h).
  void fuseResidualAdd(NodeId addId) {
    Node& add = m_g.nodes[(size_t)addId];
    if (add.inputs.size() != 2 || add.outputs.size() != 1 || add.inputs[0] == add.inputs[1]) return;
    if (fixedConstant(add.inputs[0]) || fixedConstant(add.inputs[1])) return;
    std::vector<NodeId> absorbed;
    ValueId X = kNoValue, S = kNoValue, U = kNoValue;
    int64_t fh = 1, fw = 1;
    for (int k = 0; k < 2 && X == kNoValue; ++k) {
      const Node* mul = producerOf(add.inputs[(size_t)k], "Mul");
      const ValueId other = add.inputs[(size_t)(1 - k)];
      if (!mul || mul->inputs.size() != 2 || soleConsumer(add.inputs[(size_t)k]) != addId) continue;
      const int oi = otherInput(*mul, other);
      if (oi < 0) continue;
      X = other;
      S = mul->inputs[(size_t)oi];
      absorbed.push_back(m_g.value(add.inputs[(size_t)k]).producer);
    }
    ValueId out = add.outputs[0];
    std::vector<NodeId> absorbedAdds;
    if (X == kNoValue) {
      for (int k = 0; k < 2 && X == kNoValue; ++k) {
        if (soleConsumer(add.inputs[(size_t)k]) != addId) continue;
        U = nearestUpsampleInput(add.inputs[(size_t)k], fh, fw);
        if (U == kNoValue) continue;
        X = add.inputs[(size_t)(1 - k)];
        absorbed.push_back(m_g.value(add.inputs[(size_t)k]).producer);
      }
      if (X == kNoValue) return;
    } else {
      // The squeeze-excitation sum feeding an upsampled FPN Add.
      const NodeId next = soleConsumer(out);
      const Node* n2 = next >= 0 ? &m_g.nodes[(size_t)next] : nullptr;
      const int oi = n2 ? otherInput(*n2, out) : -1;
      if (n2 && n2->opType == "Add" && n2->domain.empty() && n2->outputs.size() == 1 && oi >= 0 &&
          soleConsumer(n2->inputs[(size_t)oi]) == next) {
        const ValueId up = nearestUpsampleInput(n2->inputs[(size_t)oi], fh, fw);
        if (up != kNoValue) {
          U = up;
          absorbedAdds = {next, m_g.value(n2->inputs[(size_t)oi]).producer};
          out = n2->outputs[0];
        }
      }
    }
    for (NodeId a : absorbedAdds) absorbed.push_back(a);
    for (NodeId a : absorbed) m_removed[(size_t)a] = 1;
    Node& f = m_g.nodes[(size_t)addId];
    f.opType = kResidualAddOp;
    f.domain = kFusedDomain;
    f.inputs = {X, S, U};
    f.outputs = {out};
    if (U != kNoValue) {
      Attribute a;
      a.type = Attribute::Type::Ints;
      a.ints = {fh, fw};
      f.attributes["upsample"] = a;
    }
    m_absorbed[(size_t)addId] = absorbed;
    ++m_fused;
  }

  // One Concat: see fuseUpsampleConcats (residual_rewrites.h).
  void fuseUpsampleConcat(NodeId concatId) {
    const Node& cat = m_g.nodes[(size_t)concatId];
    const Attribute* axis = cat.attr("axis");
    // The channel axis of rank 4: an upsampled input is rank 4 (four scales), so every input is.
    if (cat.outputs.size() != 1 || cat.inputs.empty() || !axis || axis->type != Attribute::Type::Int ||
        (axis->i != 1 && axis->i != -3))
      return;
    std::vector<ValueId> inputs;
    std::vector<int64_t> factors;
    std::vector<NodeId> absorbed;
    for (ValueId v : cat.inputs) {
      if (v == kNoValue) return;
      int64_t fh = 1, fw = 1;
      const ValueId up = soleConsumer(v) == concatId ? nearestUpsampleInput(v, fh, fw) : kNoValue;
      if (up != kNoValue) absorbed.push_back(m_g.value(v).producer);
      inputs.push_back(up != kNoValue ? up : v);
      factors.push_back(up != kNoValue ? fh : 1);
      factors.push_back(up != kNoValue ? fw : 1);
    }
    if (absorbed.empty()) return;
    for (NodeId a : absorbed) m_removed[(size_t)a] = 1;
    Node& f = m_g.nodes[(size_t)concatId];
    f.opType = kUpsampleConcatOp;
    f.domain = kFusedDomain;
    f.inputs = inputs;
    f.attributes.clear();
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = factors;
    f.attributes["upsample"] = a;
    m_absorbed[(size_t)concatId] = absorbed;
    ++m_fused;
  }

  Model& m_model;
  Graph& m_g;
  std::vector<char>& m_removed;
  std::vector<std::vector<NodeId>>& m_absorbed;
  int m_fused = 0;
};

}  // namespace

int fuseResidualAdds(Model& model, std::vector<char>& removed, std::vector<std::vector<NodeId>>& absorbed) {
  return NeckRewriter(model, removed, absorbed).run();
}

int fuseUpsampleConcats(Model& model, std::vector<char>& removed, std::vector<std::vector<NodeId>>& absorbed) {
  return NeckRewriter(model, removed, absorbed).runConcats();
}

}  // namespace qs
