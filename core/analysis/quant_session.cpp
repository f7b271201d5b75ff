// The session: plans, calibrates and schedules the batches; what happens in a batch is
// batch_sweep.h, the quantization state quant_state.h, the choice of fast paths node_paths.h.
#include "core/analysis/quant_session.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/batch_sweep.h"
#include "core/analysis/streaming.h"
#include "core/exec/parallel.h"
#include "core/quant/high_precision.h"
#include "core/quant/placement.h"
#include "core/util/memory.h"

namespace qs {

namespace {

// The model's weights: every constant value (initializers and folded Constant nodes), as
// `quantscope info`'s parameter_bytes counts them.
uint64_t weightBytes(const Graph& g) {
  uint64_t bytes = 0;
  for (const Value& v : g.values)
    if (v.constant) bytes += v.constant->byteSize();
  return bytes;
}

// range[c] = max(range[c], max |x|) over channel c along `axis` (< 0: from the end) of a float
// tensor; range sized on first use, left as is where the axis or channel count does not fit.
void accumulateAxisAbsMax(const Tensor& t, int axis, std::vector<double>& range) {
  if (axis < 0) axis += t.rank();
  if (axis < 0 || axis >= t.rank()) return;
  const int64_t C = t.dim(axis);
  if (range.empty()) range.assign((size_t)C, 0.0);
  if ((int64_t)range.size() != C) return;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= t.dim(i);
  for (int i = axis + 1; i < t.rank(); ++i) inner *= t.dim(i);
  const float* p = t.data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < C; ++c) {
      const float* q = p + (o * C + c) * inner;
      float m = 0;
      for (int64_t i = 0; i < inner; ++i) m = std::max(m, std::fabs(q[i]));
      range[(size_t)c] = std::max(range[(size_t)c], (double)m);
    }
}

}  // namespace

QuantSession::~QuantSession() = default;

int64_t QuantSession::analysedBatches() const { return m_data ? m_data->batchCount() : 0; }

PassContext QuantSession::passContext() const {
  return PassContext{*m_model, *m_executor, m_state, m_paths, *m_cancelToken, m_outputKinds};
}

Status QuantSession::cancelled() const { return passContext().cancelled(); }

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
  const Graph& g = model->graph;
  s->m_outputKinds.assign(g.outputs.size(), OutputKind::Auto);
  for (const auto& [name, kind] : options.outputKinds) {
    size_t o = 0;
    while (o < g.outputs.size() && g.value(g.outputs[o]).name != name) ++o;
    if (o == g.outputs.size()) {
      std::string names;
      for (ValueId v : g.outputs) names += (names.empty() ? "" : ", ") + g.value(v).name;
      return invalidArgument(model->path + ": --output-kind names '" + name + "', not a graph output (outputs: " +
                             names + ")");
    }
    s->m_outputKinds[o] = kind;
  }
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
  const size_t N = g.nodes.size();
  m_state.mode = m_plan.mode;
  m_state.threads = m_executor->threads();
  m_state.pointsByNode = activationPointsByNode(g, m_plan);
  m_state.highPrecision = m_options.calibration.highPrecision;
  m_state.executor = m_executor.get();
  m_state.weightClip = m_options.weightClip;
  m_state.whatIf = m_options.whatIf;
  quantizeWeights(g, m_plan, m_state);
  roundConstants(g, m_state);
  if (m_state.highPrecision != HighPrecision::Fp32) {
    // Every node is taken over to round what ORT holds in float16 (high_precision_sim.cpp): no
    // fast path, and no sums derived from a producer's, which rounding would make inexact.
    m_paths.affine.assign(N, AffineOp{});
    m_paths.chainAt.assign(N, nullptr);
    m_paths.dwConv.assign(N, nullptr);
    m_paths.intConv.assign(N, nullptr);
    m_paths.packedWq.assign(N, nullptr);
    m_paths.binary.assign(N, 0);
    return;
  }
  m_paths.affine = findAffineOps(g, m_state);
  m_paths.chainAt = m_options.fuseElementwise ? findElementwiseChains(g, m_state) : decltype(m_paths.chainAt)(N);
  m_paths.binary = m_options.fuseElementwise ? findBinaryOps(g, m_paths.affine) : decltype(m_paths.binary)(N, 0);
  m_paths.dwConv = m_options.planeLayerwise ? findDepthwiseConvs(g, m_plan, m_state) : decltype(m_paths.dwConv)(N);
  m_paths.intConv = m_options.integerConv ? findIntConvs(g, m_plan, m_state) : decltype(m_paths.intConv)(N);
  m_paths.gramSplit = m_options.gramSplit;
  m_paths.packedWq = m_options.prepackWeights ? findPackedMatMulWeights(g, m_state, m_options.dnnlMatMul)
                                              : decltype(m_paths.packedWq)(N);
  if (m_state.whatIf != WhatIf::None) {
    // A what-if changes points these paths read on their own (the integer weights, the tensor's
    // scale): every quantized node goes through FakeQuantTransform::transform instead.
    m_paths.dwConv.assign(N, nullptr);
    m_paths.intConv.assign(N, nullptr);
    m_paths.packedWq.assign(N, nullptr);
    m_paths.gramSplit = false;
  }
}

Status QuantSession::calibrate(const CalibrationData& data, const ProgressFn& progress) {
  const Graph& g = m_model->graph;
  std::vector<char> wanted(g.values.size(), 0);
  for (const ActivationPoint& a : m_plan.activations) wanted[(size_t)a.value] = 1;
  std::map<ValueId, TensorStats> stats;
  for (const ActivationPoint& a : m_plan.activations) stats.try_emplace(a.value, m_options.calibration.bins);
  if (m_options.allTensorRanges) {
    auto want = [&](ValueId v) {
      const Value& val = g.value(v);
      if (val.constant || (val.dtype != DType::Float && val.dtype != DType::Undefined)) return;
      wanted[(size_t)v] = 1;
      stats.try_emplace(v, m_options.calibration.bins);
    };
    for (ValueId v : g.inputs) want(v);
    for (const Node& n : g.nodes)
      for (ValueId v : n.outputs)
        if (v != kNoValue) want(v);
  }

  // --what-if activations-per-channel: the channel axes of each value read by a per-channel point.
  std::multimap<ValueId, int> channelAxes;
  std::map<std::pair<ValueId, int>, std::vector<double>> channelMax;
  m_state.actChannels.clear();  // the clip search below runs at per-tensor scales
  if (activationsPerChannel(m_options.whatIf))
    for (const auto& [key, ch] : perChannelActivationPoints(g, m_plan))
      if (!channelMax.count({ch.value, ch.axis})) {
        channelAxes.emplace(ch.value, ch.axis);
        channelMax[{ch.value, ch.axis}];
      }

  struct Collector : ExecutionObserver {
    const std::vector<char>* wanted;
    std::map<ValueId, TensorStats>* stats;
    const std::multimap<ValueId, int>* channelAxes;
    std::map<std::pair<ValueId, int>, std::vector<double>>* channelMax;
    uint64_t bytes = 0;  // of the batch's graph inputs and node outputs
    void see(ValueId id, const Tensor& t) {
      bytes += t.byteSize();
      if ((*wanted)[(size_t)id] && t.dtype() == DType::Float) stats->at(id).add(t.data<float>(), t.numel());
      if (t.dtype() == DType::Float)
        for (auto [it, end] = channelAxes->equal_range(id); it != end; ++it)
          accumulateAxisAbsMax(t, it->second, channelMax->at({id, it->second}));
    }
    void onGraphInput(ValueId id, const Tensor& t) override { see(id, t); }
    void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& t) override { see(id, t); }
  } collector;
  collector.wanted = &wanted;
  collector.stats = &stats;
  collector.channelAxes = &channelAxes;
  collector.channelMax = &channelMax;
  // Inputs that are also initializers (and constants feeding points) are seen once here.
  for (auto& [id, st] : stats) {
    const Value& v = g.value(id);
    if (v.constant && v.constant->dtype() == DType::Float) st.add(v.constant->data<float>(), v.constant->numel());
  }
  int64_t n = data.batchCount();
  uint64_t batchBytes = 0;
  for (int64_t b = 0; b < n; ++b) {
    if (!keepGoing(*m_cancelToken, progress, (double)b / (double)n, "calibrating")) return cancelled();
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    RunOptions ro;
    ro.observer = &collector;
    ro.cancel = &m_cancelToken->flag();
    collector.bytes = 0;
    auto out = m_executor->run(*feeds, ro);
    if (!out) return out.status();
    // What analyze() will hold per batch (float and quantized tables) if it keeps one.
    batchBytes = std::max(batchBytes, 2 * collector.bytes);
  }
  m_batchBytes = batchBytes;
  m_stats = std::move(stats);
  m_calibratedSamples = data.sampleCount();
  QS_RETURN_IF_ERROR(searchClips(data, progress));
  m_state.act = computeScales(g, m_plan, m_stats, scaleOverrides(), m_options.calibration);
  m_channelMax = std::move(channelMax);
  if (activationsPerChannel(m_options.whatIf) && m_options.whatIfChannelAmax == ChannelAmax::Searched)
    QS_RETURN_IF_ERROR(searchChannelClips(data, progress));
  if (activationsPerChannel(m_options.whatIf))
    computeChannelScales(g, m_plan, m_channelMax, m_options.whatIfChannelAmax, m_state, &m_channelSearched);
  calibrateTensorRanges();
  keepGoing(*m_cancelToken, progress, 1.0, "calibrated");
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
  m_state.act = computeScales(g, m_plan, m_stats, scaleOverrides(), m_options.calibration);
  // --what-if activations-per-channel: the channels follow the new tensor amax (none without calibrate()).
  // Searched keeps calibrate()'s choices (capped's candidate was the tensor amax of then).
  if (activationsPerChannel(m_options.whatIf))
    computeChannelScales(g, m_plan, m_channelMax, m_options.whatIfChannelAmax, m_state, &m_channelSearched);
  return Status::ok();
}

Status QuantSession::setConstantCorrections(std::vector<ConstantCorrection> corrections) {
  const Graph& g = m_model->graph;
  std::vector<int> of(g.nodes.size(), -1);
  for (size_t k = 0; k < corrections.size(); ++k) {
    ConstantCorrection& c = corrections[k];
    const bool nodes = c.owner >= 0 && (size_t)c.owner < g.nodes.size() && c.reader >= 0 && (size_t)c.reader < g.nodes.size();
    const Node* n = nodes ? &g.nodes[(size_t)c.reader] : nullptr;
    const ValueId v = n && c.input < n->inputs.size() ? n->inputs[c.input] : kNoValue;
    const Value* val = v == kNoValue ? nullptr : &g.value(v);
    if (!val || !val->constant || val->constant->dtype() != DType::Float || c.value.dtype() != DType::Float ||
        c.value.shape() != val->constant->shape() || of[(size_t)c.reader] >= 0) {
      return invalidArgument(m_model->path + ": a constant correction of node " +
                             (n ? "'" + n->name + "' input " + std::to_string(c.input) : std::to_string(c.reader)) +
                             " does not match a float constant input of the model (or is its second)");
    }
    c.rounded = Tensor();
    if (m_state.highPrecision != HighPrecision::Fp32) {
      c.rounded = c.value.clone();
      roundInPlace(c.rounded, m_state.highPrecision);
    }
    of[(size_t)c.reader] = (int)k;
  }
  m_state.corrections = std::move(corrections);
  m_state.correctionOf = m_state.corrections.empty() ? std::vector<int>{} : std::move(of);
  // The cached quantized tables and the figures were computed with the previous constants.
  m_cache.clear();
  m_cachedBytes = 0;
  m_result.reset();
  return Status::ok();
}

Status QuantSession::setWeightClip(std::map<ValueId, std::vector<float>> ratios) {
  const Graph& g = m_model->graph;
  for (const auto& [v, r] : ratios) {
    const WeightQuant* w = nullptr;
    for (const WeightQuant& q : m_state.weights)
      if (q.value == v) w = &q;
    if (!w || w->amax.size() != r.size()) {
      const std::string name = v >= 0 && (size_t)v < g.values.size() ? g.value(v).name : std::to_string(v);
      return invalidArgument(m_model->path + ": weight scale ratios for '" + name + "' (" + std::to_string(r.size()) +
                             " channels): not a quantized weight of that many channels");
    }
  }
  m_options.weightClip = std::move(ratios);
  m_state.weights.clear();
  m_state.fakeWeights.clear();
  m_state.roundedConstants.clear();
  indexPoints();
  // The cached quantized tables and the figures were computed with the previous weights.
  m_cache.clear();
  m_cachedBytes = 0;
  m_result.reset();
  return Status::ok();
}

std::map<ValueId, float> QuantSession::scaleOverrides() const {
  std::map<ValueId, float> out;
  for (const auto& [id, c] : m_clipChoices) out[id] = c.amax;
  for (const auto& [id, amax] : m_amaxOverride) out[id] = amax;
  return out;
}


void QuantSession::calibrateTensorRanges() {
  m_rangeAmax.clear();
  if (!m_options.allTensorRanges) return;
  const Graph& g = m_model->graph;
  std::vector<std::pair<ValueId, const TensorStats*>> todo;
  for (const auto& [id, st] : m_stats)
    if (!m_state.act.count(id)) todo.emplace_back(id, &st);
  // Entropy and mse search every clip candidate of the histogram: one tensor per task.
  std::vector<float> amax(todo.size());
  parallelForEach(m_executor->threads(), (int64_t)todo.size(), [&](int64_t i) {
    const NodeId producer = g.value(todo[(size_t)i].first).producer;
    const bool softmax = producer >= 0 && g.nodes[(size_t)producer].opType == "Softmax";
    amax[(size_t)i] = calibratedAmax(*todo[(size_t)i].second, m_options.calibration, softmax);
  });
  for (size_t i = 0; i < todo.size(); ++i) m_rangeAmax[todo[i].first] = amax[i];
}

std::map<ValueId, float> QuantSession::tensorRanges() const {
  std::map<ValueId, float> out;
  if (!m_options.allTensorRanges) return out;
  out = m_rangeAmax;
  for (const auto& [id, amax] : m_amaxOverride) out[id] = amax;
  for (const auto& [id, a] : m_state.act) out[id] = a.amax;  // a point's range is its scale's (scale groups too)
  return out;
}

const TensorStats* QuantSession::stats(ValueId value) const {
  auto it = m_stats.find(value);
  return it == m_stats.end() ? nullptr : &it->second;
}

std::vector<char> QuantSession::enabledMask() const {
  std::vector<char> m(m_plan.nodes.size(), 0);
  for (size_t i = 0; i < m.size(); ++i) m[i] = m_plan.nodes[i].quantized ? 1 : 0;
  return m;
}

Result<std::shared_ptr<const AnalysisResult>> QuantSession::analyze(std::shared_ptr<const CalibrationData> data,
                                                                    const ProgressFn& progress) {
  if (m_state.act.empty() && !m_plan.activations.empty()) {
    return invalidArgument(m_model->path + ": analyze() needs calibrate() or explicit amax values first");
  }
  // Activations cached by an earlier analysis go now rather than at the end, so that two sets are
  // never held; until this one completes, toggles re-run every batch of the previous data.
  m_cache.clear();
  m_cachedBytes = 0;
  const Graph& g = m_model->graph;
  const size_t N = g.nodes.size();
  // The cones run only for the exact method; the estimate reads the sums of the other passes.
  const bool cones = m_options.sensitivity && m_options.sensitivityMethod == SensitivityMethod::Exact;
  // The estimate reads the layer-wise sums: the fast method computes them even without layer-wise.
  const bool layerwise = m_options.layerwise || (m_options.sensitivity && !cones);
  const int64_t batches = data->batchCount();
  // The memory budget (streaming.h) needs one batch's float table: measured here if calibration did not.
  if (m_batchBytes == 0 && m_options.memoryBudgetBytes != UINT64_MAX && batches > 0) {
    auto feeds = data->batch(0);
    if (!feeds) return feeds.status();
    auto bytes = measureFloatTableBytes(passContext(), *feeds);
    if (!bytes) return bytes.status();
    m_batchBytes = 2 * *bytes;
  }
  const MemoryPlan mem = planMemory(m_options.memoryBudgetBytes, m_options.cacheBudgetBytes, m_batchBytes / 2, batches,
                                    m_executor->threads(), cones);
  m_streaming = mem.streaming;
  // Streamed, the cones run from a shared float prefix after each batch's sweep instead of over its table.
  std::vector<NodeId> streamed;
  std::vector<std::vector<NodeId>> streamedCones;
  if (cones && mem.streaming)
    for (NodeId id : g.topoOrder)
      if (m_plan.nodes[(size_t)id].quantizable) {
        streamed.push_back(id);
        streamedCones.push_back(coneOf(g, {id}));
      }
  const BatchSweep sweep(passContext(), m_plan, enabledMask(), layerwise, cones && !mem.streaming);
  std::vector<BatchSums> sums((size_t)batches);
  std::vector<std::unique_ptr<BatchCache>> kept((size_t)batches);
  BatchSchedule schedule(batches, *m_cancelToken, progress);
  const BatchSweep::Report report = [&](double f, const std::string& stage) { return schedule.report(f, stage); };

  // The first batches whose tables fit the cache budget are kept for toggles; the size of one
  // batch comes from calibration, or else from running the first batch alone.
  int64_t first = 0, keepCount = 0;
  uint64_t budget = mem.cacheBudget;
  // Within issue 16's bound (AnalysisOptions::cacheRssBound): what the weights and every batch's
  // float activations allow beside what the process holds now and one batch's two tables. Without
  // a table size yet (no calibration), after the first batch below.
  const double boundFactor = m_options.cacheRssBound;
  const uint64_t resident = boundFactor > 0 ? currentRssBytes() : 0;
  auto bounded = [&](uint64_t limit) {
    return boundedCacheBudget(limit, boundFactor, weightBytes(g), m_batchBytes / 2 * (uint64_t)batches, resident,
                              m_batchBytes, m_options.cacheFloorBytes);
  };
  if (m_batchBytes > 0) budget = bounded(budget);
  auto streamCones = [&](int64_t b) -> Status {
    if (streamed.empty()) return Status::ok();
    auto feeds = data->batch(b);
    if (!feeds) return feeds.status();
    std::vector<ErrorAccumulator> acc(streamed.size());
    QS_RETURN_IF_ERROR(streamingSensitivity(passContext(), *feeds, streamed, streamedCones, acc,
                                            [&](double f) { return schedule.report(f, "sensitivity (streamed)"); }));
    for (size_t k = 0; k < streamed.size(); ++k) sums[(size_t)b].sens[(size_t)streamed[k]] = acc[k];
    return Status::ok();
  };
  // The float graph outputs of the batches not kept, for exactSensitivity(), within an eighth of
  // the budget or the floor (keptOutputsFloorBytes; whichever batches come first; where none fit
  // it re-runs the whole float pass).
  m_floatOutputs.assign((size_t)batches, {});
  std::atomic<uint64_t> outputBytes{0};
  auto keptLimit = [&] {
    return std::max(budget / 8, std::min(m_options.keptOutputsFloorBytes, m_options.memoryBudgetBytes / 8));
  };
  // exactSensitivity()'s cone inputs (AnalysisOptions::keepConeInputs), ranked by the estimate of
  // the first batches (coneRank: per value, 1 + the rank of the worst node whose cone reads it).
  const bool coneInputs = m_options.keepConeInputs && m_options.sensitivity && !cones && layerwise &&
                          !mem.streaming && m_options.fallbackExactTopK > 0 && batches > 0;
  std::vector<int32_t> coneRank;
  m_coneInputs.assign((size_t)batches, {});
  m_coneInputNodes.clear();
  // With them the cone inputs, after the outputs: the worst nodes' first, within an equal share of
  // the limit per batch.
  auto keepOutputs = [&](BatchSums& S) {
    uint64_t bytes = 0;
    for (const Tensor& t : S.floatOutputs) bytes += t.byteSize();
    if (S.floatOutputs.empty() || outputBytes.fetch_add(bytes) + bytes > keptLimit()) {
      S.floatOutputs.clear();
      S.keptFloat.clear();  // of no use without the outputs (or the batch is cached)
      return;
    }
    if (S.keptFloat.empty()) return;
    std::vector<uint64_t> perRank(m_coneInputNodes.size() + 1, 0);
    for (const auto& [v, t] : S.keptFloat) perRank[(size_t)coneRank[(size_t)v] - 1] += t.byteSize();
    const uint64_t share = keptLimit() / (uint64_t)batches;
    size_t served = 0;
    for (uint64_t used = bytes; served < m_coneInputNodes.size() && used + perRank[served] <= share; ++served)
      used += perRank[served];
    std::erase_if(S.keptFloat, [&](const auto& vt) { return coneRank[(size_t)vt.first] > (int32_t)served; });
  };
  if (m_batchBytes == 0 && batches > 0) {
    schedule.run(1, 0, 1, [&](int64_t) {
      uint64_t bytes = 0;
      QS_RETURN_IF_ERROR(sweep.run(*data, 0, true, budget, &kept[0], bytes, sums[0], report));
      keepOutputs(sums[0]);
      m_batchBytes = bytes;
      return streamCones(0);
    });
    if (!schedule.status(0)) return schedule.status(0);
    first = 1;
    if (boundFactor > 0) {
      budget = bounded(budget);
      if (kept[0] && m_batchBytes > budget) kept[0].reset();  // over the bound after all
    }
  }
  if (m_batchBytes > 0) keepCount = std::min<int64_t>(batches, (int64_t)(budget / m_batchBytes));
  if (first == 1 && !kept[0]) keepCount = 0;  // the first batch did not fit: none will
  // The sensitivity cones read the whole float table (half a batch's bytes): batches run side by
  // side only as far as their tables fit together (planMemory), so that memory stays bounded; when
  // the first batch measured the table (no calibration, no budget: nothing streams), from its size.
  const int batchThreads = first == 1 ? planMemory(m_options.memoryBudgetBytes, m_options.cacheBudgetBytes,
                                                   m_batchBytes / 2, batches, m_executor->threads(), cones)
                                            .batchThreads
                                      : mem.batchThreads;
  auto sweepBatch = [&](int64_t b) -> Status {
    uint64_t bytes = 0;
    // Each kept batch may use an equal share of the budget (at least the estimate).
    const uint64_t own = b < keepCount ? budget / (uint64_t)keepCount : 0;
    QS_RETURN_IF_ERROR(sweep.run(*data, b, b < keepCount, own, &kept[(size_t)b], bytes, sums[(size_t)b], report,
                                 coneRank.empty() ? nullptr : &coneRank));
    keepOutputs(sums[(size_t)b]);
    return streamCones(b);
  };
  if (coneInputs) {
    // The first batches (those that run side by side, or the one run alone above) rank the nodes;
    // their own cone inputs are not kept (exactSensitivity() re-runs their float prefix).
    const int64_t ranking = first > 0 ? first : std::min<int64_t>(batches, batchThreads);
    schedule.run(batchThreads, first, ranking, sweepBatch);
    if (schedule.stopped()) return schedule.result(cancelled());
    first = ranking;
    coneRank = chooseConeInputs(std::span<const BatchSums>(sums.data(), (size_t)ranking), sweep);
  }
  schedule.run(batchThreads, first, batches, sweepBatch);
  QS_RETURN_IF_ERROR(schedule.result(cancelled()));

  std::vector<ErrorAccumulator> nodeAcc(N), outAcc(g.outputs.size());
  std::vector<ErrorAccumulator> layerAcc(N), weightAcc(N), actAcc(N), sensAcc(N);
  std::vector<AgreementAccumulator> outAgree(g.outputs.size());
  for (size_t b = 0; b < sums.size(); ++b) {
    m_floatOutputs[b] = std::move(sums[b].floatOutputs);
    m_coneInputs[b] = std::move(sums[b].keptFloat);
  }
  for (const BatchSums& S : sums) {
    for (size_t i = 0; i < N; ++i) {
      nodeAcc[i].merge(S.node[i]);
      layerAcc[i].merge(S.layer[i]);
      weightAcc[i].merge(S.weight[i]);
      actAcc[i].merge(S.act[i]);
      sensAcc[i].merge(S.sens[i]);
    }
    for (size_t o = 0; o < g.outputs.size(); ++o) outAcc[o].merge(S.out[o]);
    for (size_t o = 0; o < g.outputs.size() && o < S.agree.size(); ++o) outAgree[o].merge(S.agree[o]);
  }
  // Toggles use cached batches 0..k-1: the cache ends at the first batch not kept.
  std::vector<std::unique_ptr<BatchCache>> cache;
  uint64_t cachedBytes = 0;
  for (auto& bc : kept) {
    if (!bc) break;
    cachedBytes += tableBytes(g, bc->floatTable) + tableBytes(g, bc->quantTable);
    cache.push_back(std::move(bc));
  }

  auto r = std::make_shared<AnalysisResult>();
  r->nodes.resize(N);
  for (size_t i = 0; i < N; ++i) {
    NodeResult& nr = r->nodes[i];
    if (sweep.quantizable(i) && layerwise && layerAcc[i].metrics().count > 0) {
      nr.hasLayerwise = true;
      nr.layerwise = layerAcc[i].metrics();
      if (sweep.hasWeight(i)) nr.weightSnrDb = weightAcc[i].metrics().snrDb;
      if (sweep.hasActivation(i)) nr.activationSnrDb = actAcc[i].metrics().snrDb;
    }
    if (sweep.quantizable(i) && cones && sensAcc[i].metrics().count > 0) {
      nr.sensitivitySnrDb = sensAcc[i].metrics().snrDb;
      nr.sensitivityExact = true;
    }
  }
  if (m_options.sensitivity && layerwise) {
    const std::vector<double> estimate = estimateFrom(nodeAcc, layerAcc, outAcc, sweep);
    for (size_t i = 0; i < N; ++i) {
      r->nodes[i].sensitivityEstimateDb = estimate[i];
      if (!cones) r->nodes[i].sensitivitySnrDb = estimate[i];
    }
  }
  r->samples = data->sampleCount();
  m_nodeAcc = std::move(nodeAcc);
  m_outAcc = std::move(outAcc);
  m_outAgree = std::move(outAgree);
  m_cache = std::move(cache);
  m_cachedBytes = cachedBytes;
  m_cacheLimit = budget;
  m_boundedCache = boundFactor > 0;
  m_data = std::move(data);
  finishResult(*r, m_nodeAcc, m_outAcc);
  r->peakRssBytes = peakRssBytes();
  r->streamed = m_streaming;
  r->memoryBudgetBytes = m_options.memoryBudgetBytes == UINT64_MAX ? 0 : m_options.memoryBudgetBytes;
  m_result = r;
  if (m_options.realisationsAuto && !m_probe.ran) {
    // The probe where no table check ran it (a method other than auto, or loaded scales).
    auto v = realisationSnrDb(std::max(2, m_options.realisationProbe), m_options.realisationDither, progress);
    if (!v) return v.status();
    std::vector<double> worst((size_t)std::max(2, m_options.realisationProbe), std::numeric_limits<double>::infinity());
    for (const std::vector<double>& out : *v)
      for (size_t k = 0; k < out.size() && k < worst.size(); ++k)
        worst[k] = std::isnan(out[k]) ? -std::numeric_limits<double>::infinity() : std::min(worst[k], out[k]);
    decideRealisations(std::move(worst), "analysis", m_data->sampleCount());
    auto copy = std::make_shared<AnalysisResult>(*m_result);
    copy->realisationProbe = m_probe;
    m_result = copy;
  }
  if (m_options.realisations > 1) {
    auto measured = measureRealisations(progress);
    if (!measured) return measured.status();
  }
  keepGoing(*m_cancelToken, progress, 1.0, "analysed");
  return m_result;
}

void QuantSession::finishResult(AnalysisResult& r, const std::vector<ErrorAccumulator>& nodeAcc,
                                const std::vector<ErrorAccumulator>& outAcc) const {
  const Graph& g = m_model->graph;
  r.plan = m_plan;
  r.calibration = m_options.calibration;
  r.clipChoices = m_clipChoices;
  r.realisationProbe = m_probe;
  r.activations = m_state.act;
  r.tensorRanges = tensorRanges();
  r.weights = m_state.weights;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    r.nodes[i].hasGraphwise = nodeAcc[i].metrics().count > 0;
    r.nodes[i].graphwise = nodeAcc[i].metrics();
  }
  r.outputs.clear();
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    r.outputs.push_back(OutputResult{g.outputs[i], g.value(g.outputs[i]).name, outAcc[i].metrics(),
                                     i < m_outAgree.size() ? m_outAgree[i].metrics() : AgreementMetrics{}, {}});
  }
}

Result<std::shared_ptr<const AnalysisResult>> QuantSession::setQuantized(const std::vector<std::pair<NodeId, bool>>& toggles,
                                                                         const ProgressFn& progress) {
  if (!m_result) return invalidArgument(m_model->path + ": setQuantized() needs a prior analyze()");
  const Graph& g = m_model->graph;
  const size_t N = g.nodes.size();
  QuantPlan previous = m_plan;
  for (auto [id, on] : toggles) {
    if (id < 0 || (size_t)id >= N) return invalidArgument("node id " + std::to_string(id) + " out of range");
  }
  for (auto [id, on] : toggles) setNodeQuantized(m_plan, g, id, on);
  std::vector<NodeId> changed;
  for (size_t i = 0; i < N; ++i)
    if (previous.nodes[i].quantized != m_plan.nodes[i].quantized) changed.push_back((NodeId)i);
  if (changed.empty()) {
    auto r = std::make_shared<AnalysisResult>(*m_result);
    r->plan = m_plan;
    m_result = r;
    return m_result;
  }
  // Only the graph-wise figures of the changed nodes' downstream cone and the outputs change.
  const PassContext c = passContext();
  const std::vector<NodeId> cone = coneOf(g, changed);
  const std::vector<char> target = enabledMask();
  const int64_t batches = m_data->batchCount();
  const int64_t cachedCount = std::min<int64_t>((int64_t)m_cache.size(), batches);
  // Per-batch accumulators, merged in batch order afterwards: the sums are then bit-identical to
  // those of analyze(), which adds batch after batch, whatever thread ran which batch.
  std::vector<std::vector<ErrorAccumulator>> nodeB((size_t)batches), outB((size_t)batches);
  std::vector<std::vector<AgreementAccumulator>> agreeB((size_t)batches);
  for (int64_t b = 0; b < batches; ++b) {
    nodeB[(size_t)b].resize(N);
    outB[(size_t)b].resize(g.outputs.size());
    agreeB[(size_t)b].resize(g.outputs.size());
  }
  const FakeQuantTransform t(m_state, m_paths, target);  // copied per batch (each copy compares its batch)
  BatchSchedule schedule(batches, *m_cancelToken, progress);
  static const char* const kStage = "re-analysing";
  schedule.report(0, kStage);
  // Cached batches in parallel, one batch per thread (the kernels then run serially inside,
  // which suits small per-sample ops); the others, float and quantized passes in full, one at a
  // time with threaded kernels, so that two full tables of a large model are never built at once.
  schedule.run(m_executor->threads(), 0, cachedCount, [&](int64_t b) {
    return updateCachedBatch(c, *m_cache[(size_t)b], target, changed, cone, t, nodeB[(size_t)b], outB[(size_t)b],
                             &agreeB[(size_t)b]);
  }, kStage);
  schedule.run(1, cachedCount, batches, [&](int64_t b) -> Status {
    // Streamed or bounded, no whole float table: both passes in one walk (streaming.h).
    if (m_streaming || m_boundedCache)
      return streamingToggleBatch(c, m_plan, target, *m_data, b, cone, nodeB[(size_t)b], outB[(size_t)b],
                                  &agreeB[(size_t)b]);
    auto feeds = m_data->batch(b);
    if (!feeds) return feeds.status();
    auto ft = floatPass(c, *feeds);
    if (!ft) return ft.status();
    return quantizedPass(c, *feeds, *ft, t, &cone, nodeB[(size_t)b], outB[(size_t)b], &agreeB[(size_t)b]);
  }, kStage);
  if (schedule.stopped()) {
    m_plan = previous;  // cached tables keep their own states; the next toggle brings them along
    return schedule.result(cancelled());
  }

  std::vector<ErrorAccumulator> nodeAcc = m_nodeAcc, outAcc(g.outputs.size());
  for (NodeId id : cone) {
    ErrorAccumulator a;
    for (int64_t b = 0; b < batches; ++b) a.merge(nodeB[(size_t)b][(size_t)id]);
    nodeAcc[(size_t)id] = a;
  }
  std::vector<AgreementAccumulator> outAgree(g.outputs.size());
  for (size_t o = 0; o < g.outputs.size(); ++o)
    for (int64_t b = 0; b < batches; ++b) {
      outAcc[o].merge(outB[(size_t)b][o]);
      outAgree[o].merge(agreeB[(size_t)b][o]);
    }
  m_nodeAcc = std::move(nodeAcc);
  m_outAcc = std::move(outAcc);
  m_outAgree = std::move(outAgree);
  auto r = std::make_shared<AnalysisResult>(*m_result);
  finishResult(*r, m_nodeAcc, m_outAcc);
  m_result = r;
  keepGoing(*m_cancelToken, progress, 1.0, "re-analysed");
  return m_result;
}

Result<std::vector<FallbackStep>> QuantSession::autoFallback(double targetDb, const ProgressFn& progress) {
  return autoFallback(targetDb, NAN, progress);
}

Result<std::vector<FallbackStep>> QuantSession::autoFallback(double targetDb, double targetAgreement,
                                                             const ProgressFn& progress) {
  if (!m_result) return invalidArgument(m_model->path + ": auto fallback needs a prior analysis");
  if (!std::isnan(targetAgreement) && std::isnan(m_result->worstAgreement())) {
    std::string names;
    for (const OutputResult& o : m_result->outputs) names += (names.empty() ? "" : ", ") + o.name;
    return invalidArgument(m_model->path + ": --target-agreement: no graph output has a class axis (" + names +
                           " are dense; --output-kind NAME=classes|sequence names one)");
  }
  // NaN targets are met; an output's agreement never gets worse than the float model's 1.
  auto reached = [&] {
    const bool snr = std::isnan(targetDb) || m_result->worstOutputSnrDb() >= targetDb;
    const bool agree = std::isnan(targetAgreement) || m_result->worstAgreement() >= targetAgreement;
    return snr && agree;
  };
  std::vector<FallbackStep> steps;
  while (!reached()) {
    // Estimated figures rank the candidates; the top K get their exact figure before one is chosen.
    std::vector<NodeId> estimated;
    for (size_t i = 0; i < m_plan.nodes.size(); ++i)
      if (m_plan.nodes[i].quantized && !std::isnan(m_result->nodes[i].sensitivitySnrDb)) estimated.push_back((NodeId)i);
    std::sort(estimated.begin(), estimated.end(), [&](NodeId a, NodeId b) {
      return m_result->nodes[(size_t)a].sensitivitySnrDb < m_result->nodes[(size_t)b].sensitivitySnrDb;
    });
    estimated.resize(std::min<size_t>(estimated.size(), (size_t)std::max(0, m_options.fallbackExactTopK)));
    std::erase_if(estimated, [&](NodeId id) { return m_result->nodes[(size_t)id].sensitivityExact; });
    if (!estimated.empty()) {
      auto refined = exactSensitivity(estimated, [&](double f, const std::string& stage) {
        return !progress || progress(f, "fallback: " + stage);
      });
      if (!refined) return refined.status();
    }
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
    for (const auto& o : m_result->outputs) {
      step.outputSnrDb.push_back(o.metrics.snrDb);
      step.outputAgreement.push_back(o.agreement.primary());
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace qs
