#include "core/analysis/quant_state.h"

#include <algorithm>
#include <cmath>

#include "core/analysis/compare_outputs.h"
#include "core/analysis/node_paths.h"
#include "core/numeric/fake_quant.h"

namespace qs {

bool parseWhatIf(const std::string& name, WhatIf& out) {
  for (WhatIf w : {WhatIf::None, WhatIf::WeightsFloat, WhatIf::ActivationsPerChannel, WhatIf::Both})
    if (name == whatIfName(w)) {
      out = w;
      return true;
    }
  return false;
}

const char* whatIfName(WhatIf w) {
  switch (w) {
    case WhatIf::WeightsFloat: return "weights-float";
    case WhatIf::ActivationsPerChannel: return "activations-per-channel";
    case WhatIf::Both: return "both";
    case WhatIf::None: break;
  }
  return "none";
}

bool parseChannelAmax(const std::string& name, ChannelAmax& out) {
  for (ChannelAmax c : {ChannelAmax::Capped, ChannelAmax::Scaled, ChannelAmax::Searched})
    if (name == channelAmaxName(c)) {
      out = c;
      return true;
    }
  return false;
}

const char* channelAmaxName(ChannelAmax c) {
  switch (c) {
    case ChannelAmax::Scaled: return "scaled";
    case ChannelAmax::Searched: return "searched";
    case ChannelAmax::Capped: break;
  }
  return "capped";
}

std::vector<double> searchedClipCandidates(double channelMax, double tensorAmax) {
  std::vector<double> amax;
  amax.reserve(kSearchedClipSteps + 2);
  amax.push_back(std::min(tensorAmax, channelMax));
  for (int k = 0; k <= kSearchedClipSteps; ++k) amax.push_back(channelMax * std::exp2(-k / 8.0));
  return amax;
}

float channelScale(double amax, QuantMode mode, HighPrecision hp) { return roundScale(scaleFromAmax((float)amax, mode), hp); }

void accumulateChannelClipErrors(const Tensor& t, int axis, const std::vector<std::vector<float>>& scales,
                                 QuantMode mode, std::vector<std::vector<double>>& err, std::vector<double>& count) {
  if (axis < 0) axis += t.rank();
  if (axis < 0 || axis >= t.rank() || t.dtype() != DType::Float) return;
  const int64_t C = t.dim(axis);
  if ((int64_t)scales.size() != C || (int64_t)err.size() != C || (int64_t)count.size() != C) return;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= t.dim(i);
  for (int i = axis + 1; i < t.rank(); ++i) inner *= t.dim(i);
  const float* p = t.data<float>();
  std::vector<float> y((size_t)inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < C; ++c) {
      const float* x = p + (o * C + c) * inner;
      const std::vector<float>& sc = scales[(size_t)c];
      std::vector<double>& e = err[(size_t)c];
      for (size_t j = 0; j < sc.size(); ++j) {
        if (mode == QuantMode::Fp8) {
          fakeQuantFp8(x, y.data(), inner, sc[j]);
        } else {
          fakeQuantInt8(x, y.data(), inner, sc[j], kActQmin, kActQmax);
        }
        double sum = 0;
        for (int64_t i = 0; i < inner; ++i) {
          const double d = (double)x[i] - (double)y[(size_t)i];
          sum += d * d;
        }
        e[j] += sum;
      }
      count[(size_t)c] += (double)inner;
    }
}

std::map<std::pair<NodeId, size_t>, ChannelScales> perChannelActivationPoints(const Graph& g, const QuantPlan& plan) {
  std::map<std::pair<NodeId, size_t>, ChannelScales> points;
  for (const ActivationPoint& a : plan.activations) {
    const Node& n = g.nodes[(size_t)a.node];
    if (!n.domain.empty()) continue;
    int axis = 0;
    if (n.opType == "Conv" && a.inputIndex == 0) {
      axis = 1;
    } else if (n.opType == "MatMul" && a.inputIndex < 2) {
      axis = a.inputIndex == 0 ? -1 : -2;  // K: A's last axis, B's second last
    } else if (n.opType == "Gemm" && a.inputIndex < 2) {
      const Attribute* t = n.attr(a.inputIndex == 0 ? "transA" : "transB");
      const bool trans = t && t->i != 0;
      axis = a.inputIndex == 0 ? (trans ? 0 : 1) : (trans ? 1 : 0);
    } else {
      continue;  // pools, Concat, elementwise: per tensor
    }
    points[{a.node, a.inputIndex}] = ChannelScales{a.value, axis, {}};
  }
  return points;
}

void computeChannelScales(const Graph& g, const QuantPlan& plan,
                          const std::map<std::pair<ValueId, int>, std::vector<double>>& channelMax, ChannelAmax rule,
                          QuantState& s, const std::map<std::pair<ValueId, int>, std::vector<double>>* searchedAmax) {
  s.actChannels.clear();
  for (auto& [key, ch] : perChannelActivationPoints(g, plan)) {
    const ActivationQuant* q = s.activation(ch.value);
    auto m = channelMax.find({ch.value, ch.axis});
    if (!q || q->scale <= 0 || m == channelMax.end() || m->second.empty()) continue;
    const double top = *std::max_element(m->second.begin(), m->second.end());
    if (!(top > 0)) continue;
    const std::vector<double>* searched = nullptr;
    if (rule == ChannelAmax::Searched) {
      if (!searchedAmax) continue;
      auto f = searchedAmax->find({ch.value, ch.axis});
      if (f == searchedAmax->end() || f->second.size() != m->second.size()) continue;
      searched = &f->second;
    }
    for (size_t k = 0; k < m->second.size(); ++k) {
      const double c = m->second[k];
      const double amax = rule == ChannelAmax::Scaled ? q->amax * (c / top)
                          : searched                  ? (*searched)[k]
                                                      : std::min((double)q->amax, c);
      const float scale = channelScale(amax, plan.mode, s.highPrecision);
      ch.scale.push_back(c > 0 && scale > 0 ? scale : q->scale);
    }
    s.actChannels.emplace(key, std::move(ch));
  }
}

ValueId QuantState::inputActPoint(NodeId node) const {
  for (const PointRef& r : pointsByNode[(size_t)node])
    if (r.weight < 0 && r.inputIndex == 0) return r.value;
  return kNoValue;
}

const ActivationQuant* QuantState::activation(ValueId value) const {
  auto it = act.find(value);
  return it == act.end() ? nullptr : &it->second;
}

std::vector<std::vector<PointRef>> activationPointsByNode(const Graph& g, const QuantPlan& plan) {
  std::vector<std::vector<PointRef>> byNode(g.nodes.size());
  for (const ActivationPoint& a : plan.activations)
    byNode[(size_t)a.node].push_back(PointRef{a.inputIndex, a.value, -1});
  return byNode;
}

void quantizeWeights(const Graph& g, const QuantPlan& plan, QuantState& s) {
  for (const WeightPoint& w : plan.weights) {
    const Tensor& t = *g.value(w.value).constant;
    WeightQuant wq;
    wq.node = w.node;
    wq.inputIndex = w.inputIndex;
    wq.value = w.value;
    wq.axis = w.axis;
    auto amax = perChannelAbsMax(t, w.axis);
    if (amax) wq.amax = std::move(amax).value();
    else wq.amax.assign((size_t)t.dim(w.axis), 0.f);  // the plan only emits valid axes
    if (auto clip = s.weightClip.find(w.value); clip != s.weightClip.end() && clip->second.size() == wq.amax.size())
      for (size_t c = 0; c < wq.amax.size(); ++c) wq.amax[c] *= clip->second[c];
    for (float a : wq.amax) wq.scale.push_back(roundScale(scaleFromAmax(a, plan.mode), s.highPrecision));
    // --what-if weights-float: the scales stay (the report shows them), the weight stays float.
    if (weightsFloat(s.whatIf)) s.fakeWeights.push_back(s.highPrecision == HighPrecision::Fp32 ? t : t.clone());
    else s.fakeWeights.push_back(fakeQuantize(t, wq.scale, w.axis, plan.mode, kWeightQmin, kWeightQmax));
    roundInPlace(s.fakeWeights.back(), s.highPrecision);
    s.pointsByNode[(size_t)w.node].push_back(PointRef{w.inputIndex, w.value, (int)s.weights.size()});
    s.weights.push_back(std::move(wq));
  }
}

std::map<ValueId, ActivationQuant> computeScales(const Graph& g, const QuantPlan& plan,
                                                 const std::map<ValueId, TensorStats>& stats,
                                                 const std::map<ValueId, float>& amaxOverride,
                                                 const CalibrationSettings& calibration) {
  std::map<ValueId, ActivationQuant> act;
  std::map<int, float> groupAmax;
  for (const ActivationPoint& a : plan.activations) {
    if (act.count(a.value)) continue;
    ActivationQuant q;
    q.value = a.value;
    q.scaleGroup = a.scaleGroup;
    auto st = stats.find(a.value);
    if (st != stats.end()) {
      q.methodAmax = st->second.allAmax(calibration);
      NodeId producer = g.value(a.value).producer;
      bool softmax = producer >= 0 && g.nodes[(size_t)producer].opType == "Softmax";
      q.amax = calibratedAmax(st->second, calibration, softmax);
    }
    auto ov = amaxOverride.find(a.value);
    if (ov != amaxOverride.end()) q.amax = ov->second;
    if (st == stats.end() && ov == amaxOverride.end()) continue;  // neither calibrated nor given
    act[a.value] = q;
    if (a.scaleGroup >= 0) groupAmax[a.scaleGroup] = std::max(groupAmax[a.scaleGroup], q.amax);
  }
  for (auto& [id, q] : act) {
    if (q.scaleGroup >= 0) q.amax = groupAmax[q.scaleGroup];
    q.scale = roundScale(scaleFromAmax(q.amax, plan.mode), calibration.highPrecision);
  }
  return act;
}

const Tensor* FakeQuantTransform::transform(NodeId node, size_t input, const Tensor& value, Tensor& storage) {
  if (m_s.highPrecision != HighPrecision::Fp32) return transformRounded(node, input, value, storage);
  // Before the node's own state: a BatchNormalization's corrected mean follows its Conv's.
  if (const ConstantCorrection* c = correctionFor(node, input)) return &c->value;
  if (!enabled(node)) return nullptr;
  for (const PointRef& r : m_s.pointsByNode[(size_t)node]) {
    if (r.inputIndex != input) continue;
    if (r.weight >= 0) {
      if (!(m_parts & kWeights)) return nullptr;
      return &m_s.fakeWeights[(size_t)r.weight];
    }
    if (!(m_parts & kActivations) || value.dtype() != DType::Float) return nullptr;
    const ActivationQuant* q = m_s.activation(r.value);
    if (!q) return nullptr;
    if (!m_s.actChannels.empty())  // --what-if activations-per-channel
      if (auto ch = m_s.actChannels.find({node, input}); ch != m_s.actChannels.end()) {
        const int axis = ch->second.axis < 0 ? value.rank() + ch->second.axis : ch->second.axis;
        if (axis >= 0 && axis < value.rank() && value.dim(axis) == (int64_t)ch->second.scale.size()) {
          storage = fakeQuantize(value, ch->second.scale, axis, m_s.mode, kActQmin, kActQmax);
          return &storage;
        }
      }
    storage = fakeQuantize(value, {q->scale}, 0, m_s.mode, kActQmin, kActQmax, m_s.threads);
    return &storage;
  }
  return nullptr;
}

bool FakeQuantTransform::runNode(NodeId node, std::span<const Tensor* const> inputs, std::span<Tensor> outputs,
                                 Status& status) {
  if (m_s.highPrecision != HighPrecision::Fp32) return runNodeRounded(node, inputs, outputs, status);
  if (m_compare && (size_t)node < m_paths.binary.size() && m_paths.binary[(size_t)node] && inputs.size() == 2 &&
      inputs[0] && inputs[1] && outputs.size() == 1)
    if (const Tensor* ref = m_compare->reference(node)) {
      // Its inputs as the executor would pass them to the kernel; computed and compared piece by
      // piece (one pass over the output, not a second one by the observer after the kernel's).
      Tensor storage[2];
      const Tensor* in[2] = {inputs[0], inputs[1]};
      for (size_t i = 0; i < 2; ++i)
        if (const Tensor* t = transform(node, i, *in[i], storage[i])) in[i] = t;
      ErrorAccumulator sums;
      if (runComparedBinary(m_paths.binary[(size_t)node] - 1, *in[0], *in[1], *ref, outputs[0], sums, m_s.threads)) {
        m_compare->compared(node, sums);
        return true;
      }
    }
  if (m_parts != kBoth || outputs.empty() || !enabled(node)) return false;
  // The integer and depthwise paths read the bias from `inputs`: the corrected one where there is one.
  std::vector<const Tensor*> corrected;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (const ConstantCorrection* c = correctionFor(node, i)) {
      corrected.assign(inputs.begin(), inputs.end());
      corrected[i] = &c->value;
      inputs = corrected;
      break;
    }
  // (The integer Conv's output is compared by the observer: measured, comparing it in the
  // epilogue, row run by row run across the output planes, was slower than one pass over it.)
  if (const IntConvNode* ic = m_paths.intConv[(size_t)node].get())
    return runIntConvNode(m_s, *ic, inputs, QConvOutputs{&outputs[0]});
  const Tensor* ref = m_compare ? m_compare->reference(node) : nullptr;
  ErrorAccumulator sums;
  if (const DepthwiseNode* dw = m_paths.dwConv[(size_t)node].get()) {
    ErrorAccumulator* const planeSums[3] = {ref ? &sums : nullptr, nullptr, nullptr};
    if (!runDepthwiseNode(m_s, *dw, inputs, &outputs[0], ref, planeSums)) return false;
    if (ref) m_compare->compared(node, sums);
    return true;
  }
  if ((size_t)node < m_paths.packedWq.size())
    if (const PackedMatMulWeight* pw = m_paths.packedWq[(size_t)node].get()) {
      // A MatMul over its prepacked Wq: A fake-quantized as transform() would, B not packed again.
      if (inputs.size() != 2 || !inputs[0] || !inputs[1]) return false;
      Tensor unused, storage;
      const Tensor* wq = transform(node, 1, *inputs[1], unused);
      const Tensor& a = *inputs[0];
      if (!wq || !pw->packs(*wq) || a.dtype() != DType::Float || a.rank() < 2 ||
          a.shape().back() != pw->panels.rows() || a.numel() / pw->panels.rows() <= 2)
        return false;
      const Tensor* aq = transform(node, 0, a, storage);
      return runPackedMatMul(*pw, aq ? *aq : a, m_s.threads, outputs[0]);
    }
  return false;
}

void ditherActivationScales(std::map<ValueId, ActivationQuant>& act, int realisation, double dither) {
  if (realisation <= 0) return;
  for (auto& [value, q] : act) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)realisation + 0xD1B54A32D192ED03ull * ((uint64_t)value + 1);
    auto next = [&x] {
      uint64_t z = (x += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    const double u1 = ((double)(next() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = ((double)(next() >> 11) + 0.5) / 9007199254740992.0;
    const double n = std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    q.scale = (float)((double)q.scale * (1 + dither * n));
  }
}

}  // namespace qs
