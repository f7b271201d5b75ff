#include "core/analysis/quant_session.h"

#include <algorithm>
#include <limits>

#include "core/quant/fake_quant.h"
#include "core/quant/placement.h"

namespace qs {

double AnalysisResult::worstOutputSnrDb() const {
  double worst = std::numeric_limits<double>::infinity();
  for (const auto& o : outputs) worst = std::min(worst, o.metrics.snrDb);
  return worst;
}

// Activations of one analysed batch: the float run and the quantized run with the current states.
struct QuantSession::BatchCache {
  std::vector<NamedTensor> feeds;
  std::vector<Tensor> floatTable, quantTable;
};

// Fake-quantizes node inputs at the quantization points of the enabled nodes.
class QuantSession::Transform : public InputTransform {
 public:
  enum Parts { kActivations = 1, kWeights = 2, kBoth = 3 };
  // Every node whose mask entry is set.
  Transform(const QuantSession& s, std::vector<char> enabled, int parts = kBoth)
      : m_s(s), m_enabled(std::move(enabled)), m_parts(parts) {}
  // One node alone (layer-wise, sensitivity): no per-node mask to build.
  Transform(const QuantSession& s, NodeId only, int parts = kBoth) : m_s(s), m_only(only), m_parts(parts) {}

  const Tensor* transform(NodeId node, size_t input, const Tensor& value, Tensor& storage) override {
    if (m_only >= 0 ? node != m_only : !m_enabled[(size_t)node]) return nullptr;
    const auto& refs = m_s.m_pointsByNode[(size_t)node];
    for (const PointRef& r : refs) {
      if (r.inputIndex != input) continue;
      if (r.weight >= 0) {
        if (!(m_parts & kWeights)) return nullptr;
        return &m_s.m_fakeWeights[(size_t)r.weight];
      }
      if (!(m_parts & kActivations) || value.dtype() != DType::Float) return nullptr;
      auto it = m_s.m_act.find(r.value);
      if (it == m_s.m_act.end()) return nullptr;
      storage = fakeQuantize(value, {it->second.scale}, 0, m_s.m_plan.mode, kActQmin, kActQmax);
      return &storage;
    }
    return nullptr;
  }

 private:
  const QuantSession& m_s;
  std::vector<char> m_enabled;
  NodeId m_only = -1;
  int m_parts;
};

QuantSession::~QuantSession() = default;

bool QuantSession::keepGoing(const ProgressFn& progress, double fraction, const std::string& stage) const {
  if (m_cancel.load()) return false;
  return !progress || progress(std::min(1.0, std::max(0.0, fraction)), stage);
}

static Status cancelled(const Model& m) { return Status(StatusCode::Cancelled, m.path + ": analysis cancelled"); }

Result<std::unique_ptr<QuantSession>> QuantSession::create(std::shared_ptr<const Model> model, const QuantConfig& config,
                                                           const AnalysisOptions& options,
                                                           std::vector<std::string>* warnings) {
  std::unique_ptr<QuantSession> s(new QuantSession());
  s->m_model = model;
  s->m_options = options;
  ExecutorOptions eo;
  eo.threads = options.threads;
  auto ex = Executor::create(model, eo);
  if (!ex) return ex.status();
  s->m_executor = std::move(ex).value();
  s->m_plan = planQuantization(model->graph, options.calibration.mode);
  std::vector<std::string> w;
  auto summary = applyConfig(s->m_plan, model->graph, config, w);
  if (!summary) return summary.status();
  if (warnings) warnings->insert(warnings->end(), w.begin(), w.end());
  s->indexPoints();
  return s;
}

void QuantSession::indexPoints() {
  const Graph& g = m_model->graph;
  m_pointsByNode.assign(g.nodes.size(), {});
  m_weights.clear();
  m_fakeWeights.clear();
  for (const ActivationPoint& a : m_plan.activations)
    m_pointsByNode[(size_t)a.node].push_back(PointRef{a.inputIndex, a.value, -1});
  for (const WeightPoint& w : m_plan.weights) {
    const Tensor& t = *g.value(w.value).constant;
    WeightQuant wq;
    wq.node = w.node;
    wq.inputIndex = w.inputIndex;
    wq.value = w.value;
    wq.axis = w.axis;
    auto amax = perChannelAbsMax(t, w.axis);
    if (amax) wq.amax = std::move(amax).value();
    else wq.amax.assign((size_t)t.dim(w.axis), 0.f);  // the plan only emits valid axes
    for (float a : wq.amax) wq.scale.push_back(scaleFromAmax(a, m_plan.mode));
    m_fakeWeights.push_back(fakeQuantize(t, wq.scale, w.axis, m_plan.mode, kWeightQmin, kWeightQmax));
    m_pointsByNode[(size_t)w.node].push_back(PointRef{w.inputIndex, w.value, (int)m_weights.size()});
    m_weights.push_back(std::move(wq));
  }
}

Status QuantSession::calibrate(const CalibrationData& data, const ProgressFn& progress) {
  m_cancel = false;
  const Graph& g = m_model->graph;
  std::vector<char> wanted(g.values.size(), 0);
  for (const ActivationPoint& a : m_plan.activations) wanted[(size_t)a.value] = 1;
  std::map<ValueId, TensorStats> stats;
  for (const ActivationPoint& a : m_plan.activations) stats.try_emplace(a.value, m_options.calibration.bins);

  struct Collector : ExecutionObserver {
    const std::vector<char>* wanted;
    std::map<ValueId, TensorStats>* stats;
    void see(ValueId id, const Tensor& t) {
      if ((*wanted)[(size_t)id] && t.dtype() == DType::Float) stats->at(id).add(t.data<float>(), t.numel());
    }
    void onGraphInput(ValueId id, const Tensor& t) override { see(id, t); }
    void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& t) override { see(id, t); }
  } collector;
  collector.wanted = &wanted;
  collector.stats = &stats;
  // Inputs that are also initializers (and constants feeding points) are seen once here.
  for (auto& [id, st] : stats) {
    const Value& v = g.value(id);
    if (v.constant && v.constant->dtype() == DType::Float) st.add(v.constant->data<float>(), v.constant->numel());
  }
  int64_t n = data.batchCount();
  for (int64_t b = 0; b < n; ++b) {
    if (!keepGoing(progress, (double)b / (double)n, "calibrating")) return cancelled(*m_model);
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    RunOptions ro;
    ro.observer = &collector;
    ro.cancel = &m_cancel;
    auto out = m_executor->run(*feeds, ro);
    if (!out) return out.status();
  }
  m_stats = std::move(stats);
  m_calibratedSamples = data.sampleCount();
  computeScales();
  keepGoing(progress, 1.0, "calibrated");
  return Status::ok();
}

Status QuantSession::setActivationAmax(const std::map<std::string, float>& amaxByTensor) {
  const Graph& g = m_model->graph;
  for (const auto& [name, amax] : amaxByTensor) {
    ValueId id = g.findValue(name);
    if (id == kNoValue) return invalidArgument(m_model->path + ": amax given for unknown tensor '" + name + "'");
    if (!(amax >= 0) || !std::isfinite(amax)) {
      return invalidArgument(m_model->path + ": amax of tensor '" + name + "' is " + std::to_string(amax));
    }
    m_amaxOverride[id] = amax;
  }
  computeScales();
  return Status::ok();
}

void QuantSession::computeScales() {
  m_act.clear();
  std::map<int, float> groupAmax;
  for (const ActivationPoint& a : m_plan.activations) {
    if (m_act.count(a.value)) continue;
    ActivationQuant q;
    q.value = a.value;
    q.scaleGroup = a.scaleGroup;
    auto st = m_stats.find(a.value);
    if (st != m_stats.end()) {
      q.methodAmax = st->second.allAmax(m_options.calibration);
      NodeId producer = m_model->graph.value(a.value).producer;
      bool softmax = producer >= 0 && m_model->graph.nodes[(size_t)producer].opType == "Softmax";
      q.amax = calibratedAmax(st->second, m_options.calibration, softmax);
    }
    auto ov = m_amaxOverride.find(a.value);
    if (ov != m_amaxOverride.end()) q.amax = ov->second;
    if (st == m_stats.end() && ov == m_amaxOverride.end()) continue;  // neither calibrated nor given
    m_act[a.value] = q;
    if (a.scaleGroup >= 0) groupAmax[a.scaleGroup] = std::max(groupAmax[a.scaleGroup], q.amax);
  }
  for (auto& [id, q] : m_act) {
    if (q.scaleGroup >= 0) q.amax = groupAmax[q.scaleGroup];
    q.scale = scaleFromAmax(q.amax, m_plan.mode);
  }
}

const TensorStats* QuantSession::stats(ValueId value) const {
  auto it = m_stats.find(value);
  return it == m_stats.end() ? nullptr : &it->second;
}

std::vector<NodeId> QuantSession::coneOf(const std::vector<NodeId>& roots) const {
  const Graph& g = m_model->graph;
  std::vector<char> in(g.nodes.size(), 0);
  for (NodeId r : roots) in[(size_t)r] = 1;
  std::vector<NodeId> cone;
  for (NodeId id : g.topoOrder) {  // one pass in topological order marks every descendant
    if (!in[(size_t)id]) {
      for (ValueId v : g.nodes[(size_t)id].inputs) {
        if (v == kNoValue) continue;
        NodeId p = g.value(v).producer;
        if (p >= 0 && in[(size_t)p]) {
          in[(size_t)id] = 1;
          break;
        }
      }
    }
    if (in[(size_t)id]) cone.push_back(id);
  }
  return cone;
}

namespace {
// Adds every float output of the nodes in `order` (or all nodes) to per-node accumulators.
void accumulateNodes(const Graph& g, std::span<const NodeId> order, const std::vector<Tensor>& ref,
                     const std::vector<Tensor>& got, std::vector<ErrorAccumulator>& acc) {
  for (NodeId id : order) {
    const Node& n = g.nodes[(size_t)id];
    if (n.outputs.empty() || n.outputs[0] == kNoValue) continue;
    const Tensor& a = ref[(size_t)n.outputs[0]];
    const Tensor& b = got[(size_t)n.outputs[0]];
    if (a.dtype() == DType::Float && b.dtype() == DType::Float && a.numel() == b.numel()) acc[(size_t)id].add(a, b);
  }
}
void accumulateOutputs(const Graph& g, const std::vector<Tensor>& ref, const std::vector<Tensor>& got,
                       std::vector<ErrorAccumulator>& acc) {
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Tensor& a = ref[(size_t)g.outputs[i]];
    const Tensor& b = got[(size_t)g.outputs[i]];
    if (a.numel() == b.numel() && !a.empty()) acc[i].add(a, b);
  }
}
uint64_t tableBytes(const Graph& g, const std::vector<Tensor>& t) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < t.size(); ++i)
    if (!g.values[i].constant) bytes += t[i].byteSize();
  return bytes;
}
}  // namespace

std::vector<char> QuantSession::enabledMask() const {
  std::vector<char> m(m_plan.nodes.size(), 0);
  for (size_t i = 0; i < m.size(); ++i) m[i] = m_plan.nodes[i].quantized ? 1 : 0;
  return m;
}

Result<std::shared_ptr<const AnalysisResult>> QuantSession::analyze(std::shared_ptr<const CalibrationData> data,
                                                                    const ProgressFn& progress) {
  m_cancel = false;
  if (m_act.empty() && !m_plan.activations.empty()) {
    return invalidArgument(m_model->path + ": analyze() needs calibrate() or explicit amax values first");
  }
  const Graph& g = m_model->graph;
  const size_t N = g.nodes.size();
  std::vector<ErrorAccumulator> nodeAcc(N), outAcc(g.outputs.size());
  std::vector<ErrorAccumulator> layerAcc(N), weightAcc(N), actAcc(N), sensAcc(N);
  std::vector<char> quantizable(N, 0), hasWeight(N, 0), hasAct(N, 0);
  for (size_t i = 0; i < N; ++i) quantizable[i] = m_plan.nodes[i].quantizable;
  for (const auto& w : m_plan.weights) hasWeight[(size_t)w.node] = 1;
  for (const auto& a : m_plan.activations) hasAct[(size_t)a.node] = 1;
  std::vector<NodeId> candidates;
  for (NodeId id : g.topoOrder)
    if (quantizable[(size_t)id]) candidates.push_back(id);
  std::vector<std::vector<NodeId>> cones;
  if (m_options.sensitivity) {
    cones.reserve(candidates.size());
    for (NodeId id : candidates) cones.push_back(coneOf({id}));
  }

  std::vector<std::unique_ptr<BatchCache>> cache;
  uint64_t cachedBytes = 0;
  bool cacheOn = true;
  const int64_t batches = data->batchCount();
  auto enabled = enabledMask();
  for (int64_t b = 0; b < batches; ++b) {
    double base = (double)b / (double)batches, span = 1.0 / (double)batches;
    if (!keepGoing(progress, base, "float and graph-wise passes")) return cancelled(*m_model);
    auto feeds = data->batch(b);
    if (!feeds) return feeds.status();
    auto floatTable = m_executor->makeValueTable(*feeds);
    if (!floatTable) return floatTable.status();
    RunOptions ro;
    ro.cancel = &m_cancel;
    QS_RETURN_IF_ERROR(m_executor->runNodes(g.topoOrder, *floatTable, ro));
    auto quantTable = m_executor->makeValueTable(*feeds);
    if (!quantTable) return quantTable.status();
    Transform all(*this, enabled);
    ro.inputTransform = &all;
    QS_RETURN_IF_ERROR(m_executor->runNodes(g.topoOrder, *quantTable, ro));
    accumulateNodes(g, g.topoOrder, *floatTable, *quantTable, nodeAcc);
    accumulateOutputs(g, *floatTable, *quantTable, outAcc);

    if (m_options.layerwise) {
      if (!keepGoing(progress, base + 0.3 * span, "layer-wise")) return cancelled(*m_model);
      std::vector<const Tensor*> inputs;
      for (NodeId id : candidates) {
        const Node& n = g.nodes[(size_t)id];
        if (n.outputs.empty() || n.outputs[0] == kNoValue) continue;
        const Tensor& ref = (*floatTable)[(size_t)n.outputs[0]];
        if (ref.dtype() != DType::Float) continue;
        struct Part {
          int parts;
          ErrorAccumulator* acc;
          bool wanted;
        } parts[] = {{Transform::kBoth, &layerAcc[(size_t)id], true},
                     {Transform::kWeights, &weightAcc[(size_t)id], (bool)hasWeight[(size_t)id]},
                     {Transform::kActivations, &actAcc[(size_t)id], hasAct[(size_t)id] && hasWeight[(size_t)id]}};
        for (const Part& p : parts) {
          if (!p.wanted) continue;
          Transform t(*this, id, p.parts);
          std::vector<Tensor> storage(n.inputs.size());
          inputs.assign(n.inputs.size(), nullptr);
          for (size_t i = 0; i < n.inputs.size(); ++i) {
            if (n.inputs[i] == kNoValue) continue;
            inputs[i] = &(*floatTable)[(size_t)n.inputs[i]];
            if (const Tensor* q = t.transform(id, i, *inputs[i], storage[i])) inputs[i] = q;
          }
          auto outs = m_executor->runNode(id, inputs);
          if (!outs) return outs.status();
          p.acc->add(ref, (*outs)[0]);
        }
        // Activation-only equals the layer-wise error when the node has no weight.
        if (!hasWeight[(size_t)id]) actAcc[(size_t)id] = layerAcc[(size_t)id];
      }
    }

    if (m_options.sensitivity) {
      for (size_t c = 0; c < candidates.size(); ++c) {
        if (c % 8 == 0 && !keepGoing(progress, base + span * (0.6 + 0.4 * (double)c / (double)candidates.size()),
                                     "sensitivity"))
          return cancelled(*m_model);
        Transform t(*this, candidates[c]);
        std::vector<Tensor> table = *floatTable;  // shares buffers: only the cone's outputs are replaced
        RunOptions so;
        so.cancel = &m_cancel;
        so.inputTransform = &t;
        QS_RETURN_IF_ERROR(m_executor->runNodes(cones[c], table, so));
        for (ValueId out : g.outputs) {
          const Tensor& a = (*floatTable)[(size_t)out];
          if (!a.empty() && a.numel() == table[(size_t)out].numel()) sensAcc[(size_t)candidates[c]].add(a, table[(size_t)out]);
        }
      }
    }
    if (cacheOn) {
      uint64_t bytes = tableBytes(g, *floatTable) + tableBytes(g, *quantTable);
      if (cachedBytes + bytes <= m_options.cacheBudgetBytes) {
        auto bc = std::make_unique<BatchCache>();
        bc->feeds = std::move(feeds).value();
        bc->floatTable = std::move(floatTable).value();
        bc->quantTable = std::move(quantTable).value();
        cache.push_back(std::move(bc));
        cachedBytes += bytes;
      } else {
        cacheOn = false;
        cache.clear();
      }
    }
  }

  auto r = std::make_shared<AnalysisResult>();
  r->nodes.resize(N);
  for (size_t i = 0; i < N; ++i) {
    NodeResult& nr = r->nodes[i];
    if (quantizable[i] && m_options.layerwise && layerAcc[i].metrics().count > 0) {
      nr.hasLayerwise = true;
      nr.layerwise = layerAcc[i].metrics();
      if (hasWeight[i]) nr.weightSnrDb = weightAcc[i].metrics().snrDb;
      if (hasAct[i]) nr.activationSnrDb = actAcc[i].metrics().snrDb;
    }
    if (quantizable[i] && m_options.sensitivity && sensAcc[i].metrics().count > 0) {
      nr.sensitivitySnrDb = sensAcc[i].metrics().snrDb;
    }
  }
  r->samples = data->sampleCount();
  m_nodeAcc = std::move(nodeAcc);
  m_outAcc = std::move(outAcc);
  m_cache = std::move(cache);
  m_data = std::move(data);
  finishResult(*r, m_nodeAcc, m_outAcc);
  m_result = r;
  keepGoing(progress, 1.0, "analysed");
  return m_result;
}

void QuantSession::finishResult(AnalysisResult& r, const std::vector<ErrorAccumulator>& nodeAcc,
                                const std::vector<ErrorAccumulator>& outAcc) const {
  const Graph& g = m_model->graph;
  r.plan = m_plan;
  r.calibration = m_options.calibration;
  r.activations = m_act;
  r.weights = m_weights;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    r.nodes[i].hasGraphwise = nodeAcc[i].metrics().count > 0;
    r.nodes[i].graphwise = nodeAcc[i].metrics();
  }
  r.outputs.clear();
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    r.outputs.push_back(OutputResult{g.outputs[i], g.value(g.outputs[i]).name, outAcc[i].metrics()});
  }
}

Result<std::shared_ptr<const AnalysisResult>> QuantSession::setQuantized(const std::vector<std::pair<NodeId, bool>>& toggles,
                                                                         const ProgressFn& progress) {
  m_cancel = false;
  if (!m_result) return invalidArgument(m_model->path + ": setQuantized() needs a prior analyze()");
  const Graph& g = m_model->graph;
  QuantPlan previous = m_plan;
  std::vector<NodeId> changed;
  for (auto [id, on] : toggles) {
    if (id < 0 || (size_t)id >= g.nodes.size()) return invalidArgument("node id " + std::to_string(id) + " out of range");
    setNodeQuantized(m_plan, g, id, on);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (previous.nodes[i].quantized != m_plan.nodes[i].quantized) changed.push_back((NodeId)i);
  if (changed.empty()) {
    auto r = std::make_shared<AnalysisResult>(*m_result);
    r->plan = m_plan;
    m_result = r;
    return m_result;
  }
  std::vector<NodeId> cone = coneOf(changed);
  std::vector<ErrorAccumulator> nodeAcc = m_nodeAcc, outAcc(g.outputs.size());
  for (NodeId id : cone) nodeAcc[(size_t)id] = ErrorAccumulator();
  Transform t(*this, enabledMask());
  RunOptions ro;
  ro.cancel = &m_cancel;
  ro.inputTransform = &t;
  const bool cached = !m_cache.empty();
  const int64_t batches = cached ? (int64_t)m_cache.size() : m_data->batchCount();
  std::vector<std::vector<Tensor>> newQuant;
  for (int64_t b = 0; b < batches; ++b) {
    if (!keepGoing(progress, (double)b / (double)batches, "re-analysing")) {
      m_plan = previous;
      return cancelled(*m_model);
    }
    std::vector<Tensor> floatTable, quantTable;
    if (cached) {
      floatTable = m_cache[(size_t)b]->floatTable;
      quantTable = m_cache[(size_t)b]->quantTable;  // shares buffers; the cone's entries are replaced
      Status st = m_executor->runNodes(cone, quantTable, ro);
      if (!st) {
        m_plan = previous;
        return st;
      }
    } else {
      auto feeds = m_data->batch(b);
      if (!feeds) return feeds.status();
      auto ft = m_executor->makeValueTable(*feeds);
      auto qt = m_executor->makeValueTable(*feeds);
      if (!ft) return ft.status();
      RunOptions fo;
      fo.cancel = &m_cancel;
      Status st = m_executor->runNodes(g.topoOrder, *ft, fo);
      if (st) st = m_executor->runNodes(g.topoOrder, *qt, ro);
      if (!st) {
        m_plan = previous;
        return st;
      }
      floatTable = std::move(ft).value();
      quantTable = std::move(qt).value();
    }
    accumulateNodes(g, cone, floatTable, quantTable, nodeAcc);
    accumulateOutputs(g, floatTable, quantTable, outAcc);
    if (cached) newQuant.push_back(std::move(quantTable));
  }
  for (size_t b = 0; b < newQuant.size(); ++b) m_cache[b]->quantTable = std::move(newQuant[b]);
  m_nodeAcc = std::move(nodeAcc);
  m_outAcc = std::move(outAcc);
  auto r = std::make_shared<AnalysisResult>(*m_result);
  finishResult(*r, m_nodeAcc, m_outAcc);
  m_result = r;
  keepGoing(progress, 1.0, "re-analysed");
  return m_result;
}

Result<std::vector<FallbackStep>> QuantSession::autoFallback(double targetDb, const ProgressFn& progress) {
  if (!m_result) return invalidArgument(m_model->path + ": auto fallback needs a prior analysis");
  std::vector<FallbackStep> steps;
  while (m_result->worstOutputSnrDb() < targetDb) {
    NodeId worst = -1;
    double worstSnr = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < m_plan.nodes.size(); ++i) {
      if (!m_plan.nodes[i].quantized) continue;
      double s = m_result->nodes[i].sensitivitySnrDb;
      if (std::isnan(s)) continue;
      if (worst < 0 || s < worstSnr) {
        worst = (NodeId)i;
        worstSnr = s;
      }
    }
    if (worst < 0) break;
    auto r = setQuantized({{worst, false}}, [&](double f, const std::string& stage) {
      return !progress || progress(f, "fallback: " + stage);
    });
    if (!r) return r.status();
    FallbackStep step;
    step.excluded = worst;
    for (const auto& o : m_result->outputs) step.outputSnrDb.push_back(o.metrics.snrDb);
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace qs
