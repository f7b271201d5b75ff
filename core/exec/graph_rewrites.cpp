#include "core/exec/graph_rewrites.h"

#include <cmath>
#include <set>

#include "core/kernels/channel_shuffle.h"
#include "core/kernels/conv.h"
#include "core/kernels/fused_matmul.h"
#include "core/exec/residual_rewrites.h"
#include "core/exec/rewrite_queries.h"
#include "core/kernels/matmul_dnnl.h"

namespace qs {

namespace {

class Rewriter {
 public:
  Rewriter(Model& m, const KernelRegistry& registry, int threads, RewriteReport& report)
      : m_model(m), m_g(m.graph), m_registry(registry), m_threads(threads), m_report(report) {}

  Status runAll() {
    m_removed.assign(m_g.nodes.size(), 0);
    m_absorbed.assign(m_g.nodes.size(), {});
    foldConstants();
    for (NodeId id : m_g.topoOrder) {
      if (m_removed[(size_t)id]) continue;
      const Node& n = m_g.nodes[(size_t)id];
      if ((n.opType == "Conv" || n.opType == "ConvTranspose") && n.domain.empty()) fuseConv(id);
    }
    // Decomposed LayerNorm before the MatMuls: a MatMul fusion rewires inputs, which leaves the
    // consumer lists of the values it reads stale for later matches.
    for (NodeId id : m_g.topoOrder) {
      if (m_removed[(size_t)id]) continue;
      const Node& n = m_g.nodes[(size_t)id];
      if (n.opType == "ReduceMean" && n.domain.empty()) fuseLayerNorm(id);
    }
    for (NodeId id : m_g.topoOrder) {
      if (m_removed[(size_t)id]) continue;
      const Node& n = m_g.nodes[(size_t)id];
      if (n.opType == "MatMul" && n.domain.empty()) fuseMatMul(id);
    }
    m_report.fusedResidualAdds = fuseResidualAdds(m_model, m_removed, m_absorbed);
    m_report.fusedUpsampleConcats = fuseUpsampleConcats(m_model, m_removed, m_absorbed);
    m_report.fusedSkipLayerNorms = fuseSkipLayerNorms(m_g, m_removed, m_absorbed);
    for (NodeId id : m_g.topoOrder) {
      if (m_removed[(size_t)id]) continue;
      const Node& n = m_g.nodes[(size_t)id];
      if (n.opType == "Transpose" && n.domain.empty()) fuseChannelShuffle(id);
    }
    return compact();
  }

 private:
  int64_t opsetOf(const Node& n) const { return rewrite::opsetOf(m_model, n); }

  // A constant that cannot be fed at run time.
  const Tensor* fixedConstant(ValueId v) const { return rewrite::fixedConstant(m_g, v); }

  // Live consumer slots of v (a node consuming v twice appears twice).
  std::vector<NodeId> consumers(ValueId v) const {
    std::vector<NodeId> out;
    for (NodeId c : m_g.value(v).consumers)
      if (!m_removed[(size_t)c]) out.push_back(c);
    return out;
  }

  void foldConstants() {
    static const std::set<std::string> kNonDeterministic = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                                            "RandomUniformLike", "Multinomial", "Bernoulli"};
    for (NodeId id : m_g.topoOrder) {
      Node& n = m_g.nodes[(size_t)id];
      if (kNonDeterministic.count(n.opType)) continue;
      bool any = false, all = true;
      for (ValueId in : n.inputs) {
        if (in == kNoValue) continue;
        any = true;
        if (!fixedConstant(in)) all = false;
      }
      if (!any || !all) continue;
      bool outputsOk = !n.outputs.empty();
      for (ValueId out : n.outputs)
        if (out != kNoValue && m_g.value(out).isGraphOutput) outputsOk = false;  // keep graph outputs computed
      if (!outputsOk) continue;
      const KernelEntry* entry = m_registry.find(n.opType, n.domain, opsetOf(n));
      if (!entry) continue;
      auto kernel = entry->create(KernelInit{n, opsetOf(n), m_g});
      if (!kernel) continue;
      std::vector<const Tensor*> inputs;
      for (ValueId in : n.inputs) inputs.push_back(in == kNoValue ? nullptr : fixedConstant(in));
      std::vector<Tensor> outputs(n.outputs.size());
      KernelContext ctx{inputs, outputs, m_threads};
      if (!(*kernel)->run(ctx).isOk()) continue;  // left to fail (with its message) at run time
      bool produced = true;
      for (size_t o = 0; o < n.outputs.size(); ++o)
        if (n.outputs[o] != kNoValue && outputs[o].empty()) produced = false;
      if (!produced) continue;
      for (size_t o = 0; o < n.outputs.size(); ++o)
        if (n.outputs[o] != kNoValue) m_g.value(n.outputs[o]).constant = std::move(outputs[o]);
      m_removed[(size_t)id] = 1;
      ++m_report.foldedConstantNodes;
    }
  }

  // The value of a constant that broadcasts over a Conv output [N, M, spatial...] along the
  // channel only: returns false unless it is a scalar or per-channel; fills `perChannel`
  // with M values.
  static bool channelConstant(const Tensor& t, int64_t M, size_t outRank, std::vector<float>& perChannel) {
    if (t.dtype() != DType::Float || (size_t)t.rank() > outRank) return false;
    if (t.numel() == 1) {
      perChannel.assign((size_t)M, t.data<float>()[0]);
      return true;
    }
    // Right-aligned against [N, M, s...]: every dim 1 except the channel one, which is M.
    const int64_t channelPos = 1 + (int64_t)t.rank() - (int64_t)outRank;
    if (channelPos < 0) return false;
    for (int i = 0; i < t.rank(); ++i) {
      if (i == channelPos) {
        if (t.dim(i) != M) return false;
      } else if (t.dim(i) != 1) {
        return false;
      }
    }
    perChannel.assign(t.data<float>(), t.data<float>() + M);
    return true;
  }

  static bool isScalar(const Tensor* t) { return t && t->dtype() == DType::Float && t->numel() == 1 && t->rank() <= 4; }

  // The single live consumer of v, or -1 (also -1 when v is a graph output).
  NodeId soleConsumer(ValueId v) const {
    if (m_g.value(v).isGraphOutput) return -1;
    auto c = consumers(v);
    return c.size() == 1 ? c[0] : -1;
  }

  bool onlyOutput(const Node& n) const {
    for (size_t o = 1; o < n.outputs.size(); ++o)
      if (n.outputs[o] != kNoValue && !consumers(n.outputs[o]).empty()) return false;
    for (size_t o = 1; o < n.outputs.size(); ++o)
      if (n.outputs[o] != kNoValue && m_g.value(n.outputs[o]).isGraphOutput) return false;
    return n.outputs.size() >= 1 && n.outputs[0] != kNoValue;
  }

  // Index of the input of n that is not `v` for a binary node, or -1.
  static int otherInput(const Node& n, ValueId v) {
    if (n.inputs.size() != 2) return -1;
    if (n.inputs[0] == v && n.inputs[1] != v) return 1;
    if (n.inputs[1] == v && n.inputs[0] != v) return 0;
    return -1;
  }

  bool scalarIs(ValueId v, float want) const {
    const Tensor* t = fixedConstant(v);
    return isScalar(t) && std::fabs(t->data<float>()[0] - want) <= 1e-6f * std::max(1.f, std::fabs(want));
  }

  // Activation node -> epilogue op; false when it is not one we fuse (or its params are not constant).
  bool activationOf(const Node& n, FusedActivation& f) const {
    using K = FusedActivation::Kind;
    if (!n.domain.empty() || n.inputs.empty()) return false;
    auto fattr = [&](const char* key, float def) {
      const Attribute* a = n.attr(key);
      return a && a->type == Attribute::Type::Float ? a->f : def;
    };
    if (n.opType == "Relu") f = {K::Relu, 0, 0};
    else if (n.opType == "Sigmoid") f = {K::Sigmoid, 0, 0};
    else if (n.opType == "LeakyRelu") f = {K::LeakyRelu, fattr("alpha", 0.01f), 0};
    else if (n.opType == "HardSigmoid") f = {K::HardSigmoid, fattr("alpha", 0.2f), fattr("beta", 0.5f)};
    else if (n.opType == "HardSwish") f = {K::HardSwish, 1.f / 6.f, 0.5f};
    else if (n.opType == "Clip") {
      float lo = -INFINITY, hi = INFINITY;
      if (opsetOf(n) < 11) {
        lo = fattr("min", -INFINITY);
        hi = fattr("max", INFINITY);
      } else {
        for (size_t i = 1; i < n.inputs.size() && i < 3; ++i) {
          if (n.inputs[i] == kNoValue) continue;
          const Tensor* t = fixedConstant(n.inputs[i]);
          if (!isScalar(t)) return false;
          (i == 1 ? lo : hi) = t->data<float>()[0];
        }
      }
      f = {K::Clip, lo, hi};
    } else {
      return false;
    }
    return true;
  }

  // Conv -> [BatchNormalization | Mul | Add | Sub | Div by constants]* -> [activation | scalar Mul/Add]*.
  void fuseConv(NodeId convId) {
    Node& conv = m_g.nodes[(size_t)convId];
    if (conv.outputs.size() != 1 || conv.inputs.size() < 2) return;
    const bool transposed = conv.opType == "ConvTranspose";
    const Tensor* W = fixedConstant(conv.inputs[1]);
    if (!W || W->dtype() != DType::Float || W->rank() < 3) return;
    const Tensor* B0 = conv.inputs.size() > 2 ? fixedConstant(conv.inputs[2]) : nullptr;
    if (conv.inputs.size() > 2 && conv.inputs[2] != kNoValue && (!B0 || B0->dtype() != DType::Float)) return;
    const int64_t group = conv.attr("group") ? conv.attr("group")->i : 1, M = transposed ? W->dim(1) * group : W->dim(0);
    if (transposed && (group < 1 || W->dim(0) % group != 0)) return;
    const size_t outRank = (size_t)W->rank();
    if (B0 && B0->numel() != M) return;
    std::vector<float> scale((size_t)M, 1.f), shift((size_t)M, 0.f);  // y = conv_nobias * scale + shift
    if (B0) shift.assign(B0->data<float>(), B0->data<float>() + M);
    std::vector<FusedActivation> acts;
    std::vector<NodeId> absorbed;
    int folded = 0, fusedActs = 0;
    ValueId tail = conv.outputs[0];
    using K = FusedActivation::Kind;
    for (;;) {
      if (m_g.value(tail).isGraphOutput) break;
      auto cons = consumers(tail);
      if (cons.size() == 1) {
        Node& c = m_g.nodes[(size_t)cons[0]];
        if (!c.domain.empty() || c.inputs.empty()) break;
        if (c.opType == "BatchNormalization" && acts.empty() && c.inputs.size() == 5 && c.inputs[0] == tail && onlyOutput(c)) {
          const Attribute* tm = c.attr("training_mode");
          if (tm && tm->i != 0) break;
          const Tensor *s = fixedConstant(c.inputs[1]), *b = fixedConstant(c.inputs[2]), *mean = fixedConstant(c.inputs[3]),
                       *var = fixedConstant(c.inputs[4]);
          auto ok = [&](const Tensor* t) { return t && t->dtype() == DType::Float && t->numel() == M; };
          if (!ok(s) || !ok(b) || !ok(mean) || !ok(var)) break;
          const Attribute* ea = c.attr("epsilon");
          const float eps = ea ? ea->f : 1e-5f;
          for (int64_t m = 0; m < M; ++m) {
            const float k = s->data<float>()[m] / std::sqrt(var->data<float>()[m] + eps);
            scale[(size_t)m] *= k;
            shift[(size_t)m] = (shift[(size_t)m] - mean->data<float>()[m]) * k + b->data<float>()[m];
          }
          ++folded;
        } else if ((c.opType == "Mul" || c.opType == "Add" || c.opType == "Sub" || c.opType == "Div") && otherInput(c, tail) >= 0) {
          const int oi = otherInput(c, tail);
          const Tensor* k = fixedConstant(c.inputs[(size_t)oi]);
          if (!k) break;
          if ((c.opType == "Sub" || c.opType == "Div") && oi != 1) break;  // only tail - k, tail / k
          std::vector<float> v;
          if (!channelConstant(*k, M, outRank, v)) break;
          if (c.opType == "Sub")
            for (float& x : v) x = -x;
          if (c.opType == "Div")
            for (float& x : v) x = 1.f / x;
          const bool mul = c.opType == "Mul" || c.opType == "Div";
          if (acts.empty()) {
            for (int64_t m = 0; m < M; ++m) {
              if (mul) {
                scale[(size_t)m] *= v[(size_t)m];
                shift[(size_t)m] *= v[(size_t)m];
              } else {
                shift[(size_t)m] += v[(size_t)m];
              }
            }
            ++folded;
          } else {
            if (k->numel() != 1) break;
            acts.push_back({mul ? K::Mul : K::Add, v[0], 0});
            ++fusedActs;
          }
        } else {
          FusedActivation f;
          if (!activationOf(c, f) || c.inputs[0] != tail || !onlyOutput(c) || (transposed && f.kind == K::Sigmoid)) break;
          acts.push_back(f);
          ++fusedActs;
        }
        absorbed.push_back(cons[0]);
        m_removed[(size_t)cons[0]] = 1;
        tail = c.outputs[0];
        continue;
      }
      if (cons.size() == 2) {
        // x * f(x) forms of HardSwish: f = Clip(x + 3, 0, 6) then / 6 (or * 1/6) after the
        // product, or f = HardSigmoid(x).
        NodeId a = cons[0], b = cons[1];
        if (m_g.nodes[(size_t)a].opType == "Mul") std::swap(a, b);
        const Node& first = m_g.nodes[(size_t)a];
        const Node& mul = m_g.nodes[(size_t)b];
        if (mul.opType != "Mul" || !mul.domain.empty() || otherInput(mul, tail) < 0 || !first.domain.empty()) break;
        const ValueId gate = mul.inputs[(size_t)otherInput(mul, tail)];
        std::vector<NodeId> chain;
        FusedActivation f;
        if (first.opType == "HardSigmoid" && first.outputs[0] == gate && soleConsumer(gate) == b) {
          FusedActivation hs;
          activationOf(first, hs);
          f = {K::HardSwish, hs.a, hs.b};
          chain = {a, b};
        } else if (first.opType == "Add" && otherInput(first, tail) >= 0 && scalarIs(first.inputs[(size_t)otherInput(first, tail)], 3.f)) {
          const NodeId clipId = soleConsumer(first.outputs[0]);
          if (clipId < 0) break;
          const Node& clip = m_g.nodes[(size_t)clipId];
          FusedActivation cf;
          if (clip.opType != "Clip" || !activationOf(clip, cf) || cf.a != 0.f || cf.b != 6.f || clip.outputs[0] != gate ||
              soleConsumer(gate) != b || !onlyOutput(clip))
            break;
          const NodeId divId = soleConsumer(mul.outputs[0]);
          if (divId < 0) break;
          const Node& div = m_g.nodes[(size_t)divId];
          const int oi = otherInput(div, mul.outputs[0]);
          if (!div.domain.empty() || oi < 0) break;
          const bool isDiv = div.opType == "Div" && oi == 1 && scalarIs(div.inputs[1], 6.f);
          const bool isMul = div.opType == "Mul" && scalarIs(div.inputs[(size_t)oi], 1.f / 6.f);
          if (!isDiv && !isMul) break;
          f = {K::HardSwish, 1.f / 6.f, 0.5f};
          chain = {a, clipId, b, divId};
        } else {
          break;
        }
        acts.push_back(f);
        fusedActs += (int)chain.size();
        for (NodeId x : chain) {
          absorbed.push_back(x);
          m_removed[(size_t)x] = 1;
        }
        tail = m_g.nodes[(size_t)chain.back()].outputs[0];
        continue;
      }
      break;
    }
    if (absorbed.empty()) return;
    // New weights and bias values.
    Tensor w2 = scaledConvWeights(*W, transposed, group, scale);
    Tensor b2 = Tensor::fromVector<float>(shift, {M});
    Node& cv = m_g.nodes[(size_t)convId];  // re-fetch: nothing reallocates nodes, but be explicit
    const ValueId wv = newConstant(cv.name + "/folded_W", std::move(w2));
    const ValueId bv = newConstant(cv.name + "/folded_B", std::move(b2));
    cv.inputs.resize(3);
    cv.inputs[1] = wv;
    cv.inputs[2] = bv;
    cv.outputs[0] = tail;
    if (!acts.empty()) {
      cv.opType = transposed ? kFusedConvTransposeOp : kFusedConvOp;
      cv.domain = kFusedDomain;
      setFusedActivations(cv, acts);
      ++m_report.fusedConvs;
    }
    m_absorbed[(size_t)convId] = absorbed;
    m_report.foldedIntoConv += folded;
    m_report.fusedActivations += fusedActs;
  }

  // The perm of a Transpose node (empty when it has none: the default reverses, rank unknown).
  static std::vector<int64_t> transposePerm(const Node& n) {
    const Attribute* a = n.attr("perm");
    return a && a->type == Attribute::Type::Ints ? a->ints : std::vector<int64_t>{};
  }

  // The node producing v when it is live, of op `op` (default domain), and v its only output.
  const Node* producerOf(ValueId v, const char* op) const {
    const NodeId p = m_g.value(v).producer;
    if (p < 0 || m_removed[(size_t)p]) return nullptr;
    const Node& n = m_g.nodes[(size_t)p];
    return n.opType == op && n.domain.empty() && !n.outputs.empty() && n.outputs[0] == v ? &n : nullptr;
  }

  // The Erf form of Gelu on `x`: Div(x, sqrt 2) | Mul(x, 1/sqrt 2) -> Erf -> Add 1, and
  // Mul(x, that) -> Mul 0.5. Fills the nodes (in order) and the output value.
  bool matchGelu(ValueId x, std::vector<NodeId>& chain, ValueId& out) const {
    if (m_g.value(x).isGraphOutput) return false;
    auto cons = consumers(x);
    if (cons.size() != 2) return false;
    NodeId d = cons[0], m = cons[1];
    if (m_g.nodes[(size_t)d].opType == "Mul" && m_g.nodes[(size_t)m].opType != "Mul") std::swap(d, m);
    for (int attempt = 0; attempt < 2; ++attempt) {
      const Node& dn = m_g.nodes[(size_t)d];
      const Node& mn = m_g.nodes[(size_t)m];
      const int di = otherInput(dn, x), mi = otherInput(mn, x);
      const bool scaleOk =
          dn.domain.empty() && di >= 0 &&
          ((dn.opType == "Div" && di == 1 && scalarIs(dn.inputs[1], 1.41421356f)) ||
           (dn.opType == "Mul" && scalarIs(dn.inputs[(size_t)di], 0.70710678f)));
      if (scaleOk && mn.opType == "Mul" && mn.domain.empty() && mi >= 0) {
        const NodeId erf = soleConsumer(dn.outputs[0]);
        const Node* en = erf >= 0 ? &m_g.nodes[(size_t)erf] : nullptr;
        if (en && en->opType == "Erf" && en->domain.empty() && onlyOutput(*en)) {
          const NodeId add = soleConsumer(en->outputs[0]);
          const Node* an = add >= 0 ? &m_g.nodes[(size_t)add] : nullptr;
          const int ai = an ? otherInput(*an, en->outputs[0]) : -1;
          if (an && an->opType == "Add" && an->domain.empty() && ai >= 0 && scalarIs(an->inputs[(size_t)ai], 1.f) &&
              an->outputs[0] == mn.inputs[(size_t)mi] && soleConsumer(an->outputs[0]) == m) {
            const NodeId half = soleConsumer(mn.outputs[0]);
            const Node* hn = half >= 0 ? &m_g.nodes[(size_t)half] : nullptr;
            const int hi = hn ? otherInput(*hn, mn.outputs[0]) : -1;
            if (hn && hn->opType == "Mul" && hn->domain.empty() && hi >= 0 && scalarIs(hn->inputs[(size_t)hi], 0.5f) &&
                onlyOutput(*hn)) {
              chain = {d, erf, add, m, half};
              out = hn->outputs[0];
              return true;
            }
          }
        }
      }
      std::swap(d, m);
    }
    return false;
  }

  // MatMul -> FusedMatMul: Transposes feeding it, then Div/Mul by a scalar, a bias Add, Gelu
  // (Erf form) and a Transpose of the result that keeps the last dim last, each only while the
  // value between has no other consumer and is no graph output.
  void fuseMatMul(NodeId id) {
    {
      const Node& mm = m_g.nodes[(size_t)id];
      if (mm.inputs.size() != 2 || mm.outputs.size() != 1 || mm.inputs[0] == kNoValue || mm.inputs[1] == kNoValue)
        return;
    }
    std::vector<NodeId> absorbed;
    std::vector<int64_t> perms[2];
    ValueId ins[2] = {m_g.nodes[(size_t)id].inputs[0], m_g.nodes[(size_t)id].inputs[1]};
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && ins[1] == ins[0]) break;
      const Node* t = producerOf(ins[k], "Transpose");
      if (!t || soleConsumer(ins[k]) != id || t->inputs.empty()) continue;
      std::vector<int64_t> perm = transposePerm(*t);
      if (!matMulOperandPermFoldable(perm)) continue;
      perms[k] = perm;
      absorbed.push_back(m_g.value(ins[k]).producer);
      m_removed[(size_t)absorbed.back()] = 1;
      ins[k] = t->inputs[0];
    }
    // N from a constant B (for the bias's shape check).
    int64_t N = -1;
    if (const Tensor* b = fixedConstant(ins[1]); b && perms[1].empty() && b->rank() >= 2) N = b->dim(b->rank() - 1);
    float alpha = 1.f;
    ValueId bias = kNoValue;
    bool gelu = false;
    std::vector<int64_t> permY;
    ValueId addend = kNoValue;  // added just before a Softmax (inputs[3])
    bool softmax = false;
    ValueId tail = m_g.nodes[(size_t)id].outputs[0];
    for (;;) {
      std::vector<NodeId> chain;
      ValueId out = kNoValue;
      if (!gelu && matchGelu(tail, chain, out)) {
        gelu = true;
        absorbed.insert(absorbed.end(), chain.begin(), chain.end());
        for (NodeId x : chain) m_removed[(size_t)x] = 1;
        tail = out;
        continue;
      }
      const NodeId cid = soleConsumer(tail);
      if (cid < 0) break;
      const Node& c = m_g.nodes[(size_t)cid];
      if (!c.domain.empty() || !onlyOutput(c)) break;
      const int oi = otherInput(c, tail);
      const Tensor* k = oi >= 0 ? fixedConstant(c.inputs[(size_t)oi]) : nullptr;
      if ((c.opType == "Div" || c.opType == "Mul") && bias == kNoValue && !gelu && isScalar(k) && k->rank() <= 2 &&
          (c.opType == "Mul" || oi == 1)) {
        const float v = k->data<float>()[0];
        if (c.opType == "Div" && v == 0.f) break;
        alpha = c.opType == "Mul" ? alpha * v : alpha / v;
      } else if (c.opType == "Add" && bias == kNoValue && !gelu && k && k->dtype() == DType::Float && N > 0 &&
                 k->numel() == N && k->rank() >= 1 && k->rank() <= 2 && k->dim(k->rank() - 1) == N) {
        bias = c.inputs[(size_t)oi];
      } else if (c.opType == "Transpose" && c.inputs[0] == tail && matMulResultPermFoldable(transposePerm(c))) {
        permY = transposePerm(c);
      } else if (c.opType == "Softmax" && !gelu && permY.empty() && softmaxOverLastAxis(m_g, c, tail, opsetOf(c))) {
        softmax = true;
      } else if (c.opType == "Add" && addend == kNoValue && !gelu && permY.empty() && oi >= 0 &&
                 addsBeforeLastAxisSoftmax(m_g, c, (size_t)oi, m_removed, opsetOf(c))) {
        addend = c.inputs[(size_t)oi];  // attention's mask or position bias
      } else {
        break;
      }
      absorbed.push_back(cid);
      m_removed[(size_t)cid] = 1;
      tail = c.outputs[0];
      if (!permY.empty() || softmax) break;
    }
    // A MatMul with nothing to absorb becomes FusedMatMul too when its B is one constant matrix and
    // oneDNN's matmul is preferred on this CPU: FusedMatMul takes that product to oneDNN (AVX-512),
    // the plain MatMul kernel runs our AVX2 GEMM (gpt_decoder's 128 x 8192 x 512 head: 12.1 against
    // ONNX Runtime's 8.0 ms). Elsewhere it stays a MatMul, as before.
    if (absorbed.empty()) {
      const Tensor* b = fixedConstant(ins[1]);
      if (N <= 0 || !b || b->rank() != 2 || b->dtype() != DType::Float || !DnnlMatMul::preferred()) return;
    }
    Node& mm = m_g.nodes[(size_t)id];
    mm.opType = kFusedMatMulOp;
    mm.domain = kFusedDomain;
    mm.inputs = {ins[0], ins[1], bias, addend};
    while (mm.inputs.back() == kNoValue) mm.inputs.pop_back();
    mm.outputs[0] = tail;
    // Keep consumer and producer lists current for the matches that follow.
    for (ValueId v : mm.inputs) if (v != kNoValue) m_g.value(v).consumers.push_back(id);
    m_g.value(tail).producer = id;
    auto ints = [](const std::vector<int64_t>& v) {
      Attribute a;
      a.type = Attribute::Type::Ints;
      a.ints = v;
      return a;
    };
    if (!perms[0].empty()) mm.attributes["perm_a"] = ints(perms[0]);
    if (!perms[1].empty()) mm.attributes["perm_b"] = ints(perms[1]);
    if (!permY.empty()) mm.attributes["perm_y"] = ints(permY);
    if (alpha != 1.f) {
      Attribute a;
      a.type = Attribute::Type::Float;
      a.f = alpha;
      mm.attributes["alpha"] = a;
    }
    if (gelu) {
      Attribute a;
      a.type = Attribute::Type::String;
      a.s = "Gelu";
      mm.attributes["activation"] = a;
    }
    if (softmax) mm.attributes["softmax"] = intAttribute(1);
    m_absorbed[(size_t)id] = absorbed;
    ++m_report.fusedMatMuls;
    m_report.foldedIntoMatMul += (int)absorbed.size();
  }

  // The axes of a ReduceMean (attribute, or constant input from opset 18); false when unknown.
  bool reduceAxes(const Node& n, std::vector<int64_t>& axes, bool& keepdims) const {
    const Attribute* kd = n.attr("keepdims");
    keepdims = !kd || kd->i != 0;
    const Attribute* a = n.attr("axes");
    if (a && a->type == Attribute::Type::Ints) {
      axes = a->ints;
    } else if (n.inputs.size() > 1 && n.inputs[1] != kNoValue) {
      const Tensor* t = fixedConstant(n.inputs[1]);
      if (!t || t->dtype() != DType::Int64) return false;
      axes.assign(t->data<int64_t>(), t->data<int64_t>() + t->numel());
    } else {
      return false;
    }
    return true;
  }

  // Last-axis mean only: axes [-1], or [r-1] where the input's rank is known.
  bool lastAxisMean(const Node& n, ValueId x) const {
    std::vector<int64_t> axes;
    bool keepdims = true;
    if (n.inputs.empty() || n.inputs[0] != x || !reduceAxes(n, axes, keepdims) || !keepdims || axes.size() != 1)
      return false;
    if (axes[0] == -1) return true;
    const auto& shape = m_g.value(x).shape;
    return shape && axes[0] == (int64_t)shape->size() - 1;
  }

  // ReduceMean(x) -> Sub(x, mean) -> {Pow(d, 2) -> ReduceMean -> Add(eps) -> Sqrt, Div(d, that)}
  // -> Mul(scale) -> Add(bias), all over the last axis: one LayerNormalization(x, scale, bias).
  void fuseLayerNorm(NodeId meanId) {
    const Node& mean = m_g.nodes[(size_t)meanId];
    if (mean.inputs.empty() || mean.outputs.size() != 1) return;
    const ValueId x = mean.inputs[0];
    if (!lastAxisMean(mean, x)) return;
    const NodeId subId = soleConsumer(mean.outputs[0]);
    if (subId < 0) return;
    const Node& sub = m_g.nodes[(size_t)subId];
    if (sub.opType != "Sub" || !sub.domain.empty() || sub.inputs.size() != 2 || sub.inputs[0] != x ||
        sub.inputs[1] != mean.outputs[0])
      return;
    const ValueId d = sub.outputs[0];
    if (m_g.value(d).isGraphOutput) return;
    auto dc = consumers(d);
    if (dc.size() != 2) return;
    NodeId powId = dc[0], divId = dc[1];
    if (m_g.nodes[(size_t)powId].opType != "Pow") std::swap(powId, divId);
    const Node& pw = m_g.nodes[(size_t)powId];
    const Node& dv = m_g.nodes[(size_t)divId];
    if (pw.opType != "Pow" || !pw.domain.empty() || pw.inputs.size() != 2 || pw.inputs[0] != d ||
        !scalarIs(pw.inputs[1], 2.f) || dv.opType != "Div" || !dv.domain.empty() || dv.inputs.size() != 2 ||
        dv.inputs[0] != d)
      return;
    const NodeId varId = soleConsumer(pw.outputs[0]);
    if (varId < 0) return;
    const Node& var = m_g.nodes[(size_t)varId];
    if (var.opType != "ReduceMean" || !var.domain.empty() || !lastAxisMean(var, pw.outputs[0])) return;
    {  // both means over the same axis spelled the same way
      std::vector<int64_t> a1, a2;
      bool k1, k2;
      reduceAxes(mean, a1, k1);
      reduceAxes(var, a2, k2);
      if (a1 != a2) return;
    }
    const NodeId epsId = soleConsumer(var.outputs[0]);
    if (epsId < 0) return;
    const Node& epsAdd = m_g.nodes[(size_t)epsId];
    const int ei = otherInput(epsAdd, var.outputs[0]);
    const Tensor* eps = ei >= 0 ? fixedConstant(epsAdd.inputs[(size_t)ei]) : nullptr;
    if (epsAdd.opType != "Add" || !epsAdd.domain.empty() || !isScalar(eps)) return;
    const NodeId sqrtId = soleConsumer(epsAdd.outputs[0]);
    if (sqrtId < 0) return;
    const Node& sq = m_g.nodes[(size_t)sqrtId];
    if (sq.opType != "Sqrt" || !sq.domain.empty() || sq.outputs[0] != dv.inputs[1] || soleConsumer(sq.outputs[0]) != divId)
      return;
    // The affine: Mul by a 1-D scale, then Add a 1-D bias (both needed: LayerNormalization's Scale).
    const NodeId mulId = soleConsumer(dv.outputs[0]);
    if (mulId < 0) return;
    const Node& mul = m_g.nodes[(size_t)mulId];
    const int mi = otherInput(mul, dv.outputs[0]);
    const Tensor* scale = mi >= 0 ? fixedConstant(mul.inputs[(size_t)mi]) : nullptr;
    if (mul.opType != "Mul" || !mul.domain.empty() || !scale || scale->dtype() != DType::Float || scale->rank() != 1)
      return;
    const NodeId addId = soleConsumer(mul.outputs[0]);
    ValueId biasV = kNoValue, out = mul.outputs[0];
    std::vector<NodeId> chain = {subId, powId, varId, epsId, sqrtId, divId, mulId};
    if (addId >= 0) {
      const Node& add = m_g.nodes[(size_t)addId];
      const int ai = otherInput(add, mul.outputs[0]);
      const Tensor* b = ai >= 0 ? fixedConstant(add.inputs[(size_t)ai]) : nullptr;
      if (add.opType == "Add" && add.domain.empty() && b && b->dtype() == DType::Float && b->rank() == 1 &&
          b->numel() == scale->numel() && onlyOutput(add)) {
        biasV = add.inputs[(size_t)ai];
        out = add.outputs[0];
        chain.push_back(addId);
      }
    }
    for (NodeId c : chain) {
      if (!onlyOutput(m_g.nodes[(size_t)c])) return;
      if (c != chain.back() && m_g.value(m_g.nodes[(size_t)c].outputs[0]).isGraphOutput) return;
    }
    const float epsilon = eps->data<float>()[0];
    const ValueId scaleV = mul.inputs[(size_t)mi];
    for (NodeId c : chain) m_removed[(size_t)c] = 1;
    Node& ln = m_g.nodes[(size_t)meanId];
    ln.opType = "LayerNormalization";
    ln.domain = kFusedDomain;
    ln.inputs = {x, scaleV};
    if (biasV != kNoValue) ln.inputs.push_back(biasV);
    ln.outputs = {out};
    for (size_t i = 1; i < ln.inputs.size(); ++i) m_g.value(ln.inputs[i]).consumers.push_back(meanId);
    m_g.value(out).producer = meanId;
    ln.attributes.clear();
    Attribute axis, e;
    axis.type = Attribute::Type::Int;
    axis.i = -1;
    e.type = Attribute::Type::Float;
    e.f = epsilon;
    ln.attributes["axis"] = axis;
    ln.attributes["epsilon"] = e;
    m_absorbed[(size_t)meanId] = chain;
    ++m_report.fusedLayerNorms;
  }

  static Attribute intAttribute(int64_t v) {
    Attribute a;
    a.type = Attribute::Type::Int;
    a.i = v;
    return a;
  }

  // ShuffleNet's channel shuffle: Concat(axis 1) -> Reshape to 5-D -> Transpose(0, 2, 1, 3, 4) ->
  // Reshape, and the Slices of one axis that read it (the next unit's chunk), become one
  // ChannelShuffle (core/kernels/channel_shuffle.h) that reads the Concat's inputs and writes the
  // shuffled tensor, or straight its slices: the concatenation, the transposed copy and the shuffled
  // tensor are never written. The Reshape targets and the Slices' starts / ends are computed from
  // Shape nodes of the Concat and of the shuffled tensor (the batch is symbolic, so they are not
  // constants); those Shape nodes become ConcatShape nodes over the Concat's inputs, which gives the
  // same shape without the concatenation (for the shuffled tensor's, ChannelShuffle checks at run
  // time that its shape is the Concat's: same_shape).
  void fuseChannelShuffle(NodeId tId) {
    const Node& t = m_g.nodes[(size_t)tId];
    if (transposePerm(t) != std::vector<int64_t>{0, 2, 1, 3, 4} || t.inputs.size() != 1 || !onlyOutput(t)) return;
    auto plainReshape = [&](const Node* r) {
      const Attribute* z = r ? r->attr("allowzero") : nullptr;
      return r && r->inputs.size() == 2 && r->inputs[1] != kNoValue && onlyOutput(*r) &&
             !(z && z->type == Attribute::Type::Int && z->i != 0);
    };
    const Node* r1 = producerOf(t.inputs[0], "Reshape");
    if (!plainReshape(r1) || soleConsumer(r1->outputs[0]) != tId) return;
    const NodeId r1Id = m_g.value(t.inputs[0]).producer;
    const Node* cat = producerOf(r1->inputs[0], "Concat");
    const Attribute* axis = cat ? cat->attr("axis") : nullptr;
    if (!cat || !onlyOutput(*cat) || !axis || axis->type != Attribute::Type::Int || axis->i != 1 ||
        m_g.value(cat->outputs[0]).isGraphOutput)
      return;
    for (ValueId in : cat->inputs)
      if (in == kNoValue) return;
    const NodeId catId = m_g.value(r1->inputs[0]).producer;
    const NodeId r2Id = soleConsumer(t.outputs[0]);
    if (r2Id < 0) return;
    const Node& r2 = m_g.nodes[(size_t)r2Id];
    if (r2.opType != "Reshape" || !r2.domain.empty() || !plainReshape(&r2) || r2.inputs[0] != t.outputs[0]) return;
    // Shape nodes (without start / end) of a value; false when it has other readers than `allowed`.
    auto isShape = [&](NodeId c) {
      const Node& n = m_g.nodes[(size_t)c];
      return n.opType == "Shape" && n.domain.empty() && n.attributes.empty() && onlyOutput(n);
    };
    std::vector<NodeId> catShapes;
    for (NodeId c : consumers(cat->outputs[0])) {
      if (c == r1Id) continue;
      if (!isShape(c)) return;
      catShapes.push_back(c);
    }
    if (consumers(cat->outputs[0]).size() != catShapes.size() + 1) return;  // the Reshape reads it once
    // The shuffled tensor's readers: slices fused when every reader is a Slice of it (opset >= 10) or a Shape.
    const ValueId S = r2.outputs[0];
    std::vector<NodeId> slices, sShapes;
    bool sliceable = !m_g.value(S).isGraphOutput;
    for (NodeId c : consumers(S)) {
      const Node& n = m_g.nodes[(size_t)c];
      if (isShape(c)) {
        sShapes.push_back(c);
      } else if (n.opType == "Slice" && n.domain.empty() && opsetOf(n) >= 10 && n.inputs.size() >= 3 &&
                 n.inputs.size() <= 5 && n.inputs[0] == S && onlyOutput(n) &&
                 std::count(n.inputs.begin(), n.inputs.end(), S) == 1) {
        slices.push_back(c);
      } else {
        sliceable = false;
      }
    }
    if (slices.empty()) sliceable = false;
    if (!sliceable) sShapes.clear();
    std::vector<NodeId> absorbed = {catId, r1Id, r2Id};
    Node& f = m_g.nodes[(size_t)tId];
    const std::vector<ValueId> xs = cat->inputs;
    f.inputs = xs;
    f.inputs.push_back(r1->inputs[1]);
    f.inputs.push_back(r2.inputs[1]);
    f.outputs.clear();
    if (sliceable) {
      for (NodeId c : slices) {
        const Node& sl = m_g.nodes[(size_t)c];
        for (size_t i = 1; i < 5; ++i) f.inputs.push_back(i < sl.inputs.size() ? sl.inputs[i] : kNoValue);
        f.outputs.push_back(sl.outputs[0]);
        absorbed.push_back(c);
      }
    } else {
      f.outputs.push_back(S);
    }
    f.opType = kChannelShuffleOp;
    f.domain = kFusedDomain;
    f.attributes.clear();
    f.attributes["inputs"] = intAttribute((int64_t)xs.size());
    f.attributes["slices"] = intAttribute(sliceable ? (int64_t)slices.size() : 0);
    f.attributes["same_shape"] = intAttribute(sShapes.empty() ? 0 : 1);
    for (NodeId c : absorbed) m_removed[(size_t)c] = 1;
    m_absorbed[(size_t)tId] = absorbed;
    // Shape(concatenation) and Shape(shuffled) -> ConcatShape(X1..Xk).
    catShapes.insert(catShapes.end(), sShapes.begin(), sShapes.end());
    for (NodeId c : catShapes) {
      Node& n = m_g.nodes[(size_t)c];
      n.opType = kConcatShapeOp;
      n.domain = kFusedDomain;
      n.inputs = xs;
      n.attributes["axis"] = intAttribute(1);
    }
    ++m_report.fusedShuffles;
  }

  ValueId newConstant(const std::string& base, Tensor t) {
    std::string name = base;
    for (int i = 1; m_g.findValue(name) != kNoValue; ++i) name = base + "_" + std::to_string(i);
    ValueId id = m_g.valueId(name);
    Value& v = m_g.value(id);
    v.dtype = t.dtype();
    std::vector<Dim> dims;
    for (int64_t d : t.shape()) dims.push_back(Dim{d, {}});
    v.shape = dims;
    v.constant = std::move(t);
    return id;
  }

  Status compact() {
    std::vector<Node> nodes;
    m_report.origin.clear();
    m_report.absorbed.clear();
    for (NodeId id = 0; id < (NodeId)m_g.nodes.size(); ++id) {
      if (m_removed[(size_t)id]) continue;
      nodes.push_back(std::move(m_g.nodes[(size_t)id]));
      m_report.origin.push_back(id);
      m_report.absorbed.push_back(m_absorbed[(size_t)id]);
    }
    m_g.nodes = std::move(nodes);
    if (m_report.fusedConvs > 0 || m_report.fusedMatMuls > 0 || m_report.fusedLayerNorms > 0 ||
        m_report.fusedShuffles > 0 || m_report.fusedSkipLayerNorms > 0 || m_report.fusedResidualAdds > 0 ||
        m_report.fusedUpsampleConcats > 0)
      m_model.opsets[kFusedDomain] = 1;
    return m_g.finalize(m_model.path + " (rewritten for inference)");
  }

  Model& m_model;
  Graph& m_g;
  const KernelRegistry& m_registry;
  int m_threads;
  RewriteReport& m_report;
  std::vector<char> m_removed;
  std::vector<std::vector<NodeId>> m_absorbed;
};

}  // namespace

Result<std::shared_ptr<Model>> rewriteForInference(const Model& model, const KernelRegistry& registry, int threads,
                                                   RewriteReport* report) {
  auto out = std::make_shared<Model>(model);
  RewriteReport local;
  RewriteReport& r = report ? *report : local;
  r = RewriteReport();
  Rewriter rw(*out, registry, threads, r);
  QS_RETURN_IF_ERROR(rw.runAll());
  return out;
}

}  // namespace qs
