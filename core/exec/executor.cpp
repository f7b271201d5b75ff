#include "core/exec/executor.h"

#include <chrono>
#include <map>
#include <set>

#include "core/exec/blocked_rewrite.h"
#include "core/exec/graph_rewrites.h"
#include "core/exec/parallel.h"
#include "core/kernels/channel_shuffle.h"
#include "core/kernels/conv.h"

namespace qs {

std::vector<std::string> unsupportedOps(const Model& model, const KernelRegistry& registry) {
  std::map<std::string, std::vector<std::string>> missing;
  // Subgraphs' nodes too (an explicit stack: nesting depth is bounded by the loader anyway).
  std::vector<const Graph*> pending{&model.graph};
  while (!pending.empty()) {
    const Graph* g = pending.back();
    pending.pop_back();
    for (const Node& n : g->nodes) {
      auto it = model.opsets.find(n.domain);
      int64_t opset = it == model.opsets.end() ? 1 : it->second;
      if (!registry.find(n.opType, n.domain, opset)) {
        std::string key = n.domain.empty() ? n.opType : n.domain + "::" + n.opType;
        if (registry.knowsOp(n.opType, n.domain)) key += " (opset " + std::to_string(opset) + ")";
        missing[key].push_back(n.name);
      }
      for (const auto& [key, a] : n.attributes) {
        if (a.g) pending.push_back(a.g.get());
        for (const auto& sg : a.graphs) pending.push_back(sg.get());
      }
    }
  }
  std::vector<std::string> out;
  for (auto& [op, names] : missing) {
    std::string line = op + " (node" + (names.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < names.size() && i < 5; ++i) line += (i ? ", '" : "'") + names[i] + "'";
    if (names.size() > 5) line += ", ... " + std::to_string(names.size()) + " in all";
    out.push_back(line + ")");
  }
  return out;
}

Status Executor::createKernels(Plan& plan, const KernelRegistry& registry, bool libraryKernels, int threads) {
  const Model& model = *plan.model;
  const Graph& g = model.graph;
  plan.kernels.clear();
  plan.kernels.resize(g.nodes.size());
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    auto it = model.opsets.find(n.domain);
    int64_t opset = it == model.opsets.end() ? 1 : it->second;
    const KernelEntry* entry = registry.find(n.opType, n.domain, opset);
    if (!entry) return unsupported(model.path + ": " + n.label() + ": no kernel at opset " + std::to_string(opset));
    KernelInit init{n, opset, g, libraryKernels, &model, &registry, threads};
    auto kernel = entry->create(init);
    if (!kernel) {
      // Kernels give the bare reason; the file and the node are added here, once.
      return kernel.status().withContext(model.path + ": " + n.label());
    }
    plan.kernels[(size_t)id] = std::move(kernel).value();
  }
  plan.useCount.assign(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId in : n.inputs)
      if (in != kNoValue) ++plan.useCount[(size_t)in];
  for (ValueId out : g.outputs) ++plan.useCount[(size_t)out];
  return Status::ok();
}

void Executor::markShapeOnly(Plan& plan) {
  // Two properties per value: its shape follows from the feed shapes (shapeKnown), and its
  // contents do too (valueKnown: constants and shape-only outputs). Ops whose output shape
  // depends on the contents of some inputs need those inputs valueKnown; ops whose output
  // shape depends on data are never shapeKnown.
  static const std::set<std::string> kDataShaped = {"NonZero", "Unique", "Compress", "NonMaxSuppression", "If", "Loop",
                                                    "Scan", "RandomNormal", "RandomUniform", "RandomNormalLike",
                                                    "RandomUniformLike", "Multinomial", "Bernoulli", "StringNormalizer"};
  static const std::map<std::string, std::vector<size_t>> kValueInputs = {
      {"Reshape", {1}}, {"Expand", {1}}, {"Tile", {1}}, {"Slice", {1, 2, 3, 4}}, {"Pad", {1, 3}},
      {"Resize", {1, 2, 3}}, {"Upsample", {1}}, {"ConstantOfShape", {0}}, {"Range", {0, 1, 2}}, {"Unsqueeze", {1}},
      {"Squeeze", {1}}, {"Split", {1}}, {"TopK", {1}}, {"OneHot", {1}}, {"ReduceSum", {1}}, {"ReduceMean", {1}},
      {"ReduceMax", {1}}, {"ReduceMin", {1}}, {"ReduceProd", {1}}, {"ReduceL1", {1}}, {"ReduceL2", {1}},
      {"ReduceLogSum", {1}}, {"ReduceLogSumExp", {1}}, {"ReduceSumSquare", {1}}, {"CenterCropPad", {1}},
      {"Col2Im", {1, 2}}, {"DFT", {1}}, {"STFT", {1, 2, 3}}, {"MaxUnpool", {2}}};
  const Graph& g = plan.model->graph;
  std::vector<char> shapeKnown(g.values.size(), 0), valueKnown(g.values.size(), 0);
  for (ValueId v = 0; v < (ValueId)g.values.size(); ++v) {
    const Value& val = g.value(v);
    if (val.isGraphInput || val.isOverridable || val.constant) shapeKnown[(size_t)v] = 1;
    if (val.constant && !val.isGraphInput && !val.isOverridable) valueKnown[(size_t)v] = 1;
  }
  plan.shapeOnly.assign(g.nodes.size(), 0);
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    bool allShape = true, allValue = true, anyInput = false;
    for (ValueId in : n.inputs) {
      if (in == kNoValue) continue;
      anyInput = true;
      allShape = allShape && shapeKnown[(size_t)in];
      allValue = allValue && valueKnown[(size_t)in];
    }
    // The rewrites' ops (ai.quantscope) shape their outputs as the nodes they replace did, from
    // their inputs' shapes (ChannelShuffle also from the contents of its Reshape targets and Slice
    // bounds, the inputs after the concatenated ones); without them, every shape chain behind a
    // FusedConv ran on every pass (shufflenet_v2: ~450 Shape, Gather, Unsqueeze, ... nodes).
    const bool fused = n.domain == kFusedDomain;
    bool shapes = (n.domain.empty() || fused) && !kDataShaped.count(n.opType) && allShape && anyInput;
    if (shapes && !fused) {
      auto it = kValueInputs.find(n.opType);
      if (it != kValueInputs.end())
        for (size_t i : it->second)
          if (i < n.inputs.size() && n.inputs[i] != kNoValue && !valueKnown[(size_t)n.inputs[i]]) shapes = false;
    }
    if (shapes && fused && n.opType == kChannelShuffleOp) {
      const Attribute* k = n.attr("inputs");
      for (size_t i = k && k->type == Attribute::Type::Int ? (size_t)std::max<int64_t>(0, k->i) : 0;
           i < n.inputs.size(); ++i)
        if (n.inputs[i] != kNoValue && !valueKnown[(size_t)n.inputs[i]]) shapes = false;
    }
    // Shape and Size read only their input's shape (ConcatShape its inputs'); other ops need every
    // input's contents known.
    const bool isShapeOp =
        (n.domain.empty() && (n.opType == "Shape" || n.opType == "Size")) || (fused && n.opType == kConcatShapeOp);
    const bool only = shapes && (isShapeOp || allValue);
    plan.shapeOnly[(size_t)id] = only;
    plan.hasShapeOnly = plan.hasShapeOnly || only;
    for (ValueId out : n.outputs) {
      if (out == kNoValue) continue;
      shapeKnown[(size_t)out] = shapes;
      valueKnown[(size_t)out] = only;
    }
  }
}

Result<std::unique_ptr<Executor>> Executor::create(std::shared_ptr<const Model> model, const ExecutorOptions& options) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->m_model = model;
  ex->m_threads = options.threads > 0 ? options.threads : hardwareThreads();
  KernelRegistry builtin;
  const KernelRegistry* registry = options.registry;
  if (!registry) {
    builtin = KernelRegistry::builtin();
    registry = &builtin;
  }
  auto missing = unsupportedOps(*model, *registry);
  if (!missing.empty()) {
    std::string msg = model->path + ": unsupported op" + (missing.size() > 1 ? "s: " : ": ");
    for (size_t i = 0; i < missing.size(); ++i) msg += (i ? "; " : "") + missing[i];
    return unsupported(msg);
  }
  Plan original;
  original.model = model;
  QS_RETURN_IF_ERROR(createKernels(original, *registry, options.libraryKernels, ex->m_threads));
  ex->m_kernels = std::move(original.kernels);
  ex->m_useCount = std::move(original.useCount);
  if (options.rewrites) {
    RewriteReport report;
    auto rewritten = rewriteForInference(*model, *registry, ex->m_threads, &report);
    if (!rewritten) return rewritten.status();
    auto plan = std::make_unique<Plan>();
    std::shared_ptr<Model> fast = std::move(rewritten).value();
    plan->origin = std::move(report.origin);
    plan->absorbed = std::move(report.absorbed);
    BlockedRegionReport blocked;  // oneDNN convolution chains kept in nChw8c/16c (blocked_rewrite.h)
    if (options.libraryKernels && options.blockedRegions)
      QS_RETURN_IF_ERROR(rewriteBlockedRegions(*fast, plan->origin, plan->absorbed, &blocked));
    plan->model = std::move(fast);
    QS_RETURN_IF_ERROR(createKernels(*plan, *registry, options.libraryKernels, ex->m_threads));
    markShapeOnly(*plan);
    ex->m_fast = std::move(plan);
    ex->m_rewriteSummary = std::to_string(report.foldedConstantNodes) + " constant nodes folded, " +
                           std::to_string(report.foldedIntoConv) + " nodes folded into Conv weights, " +
                           std::to_string(report.fusedActivations) + " activation nodes fused into " +
                           std::to_string(report.fusedConvs) + " FusedConv, " +
                           std::to_string(report.foldedIntoMatMul) + " nodes fused into " +
                           std::to_string(report.fusedMatMuls) + " FusedMatMul, " +
                           std::to_string(report.fusedLayerNorms) + " decomposed LayerNorm chains fused, " +
                           std::to_string(report.fusedShuffles) + " channel shuffles fused";
    if (report.fusedResidualAdds > 0)
      ex->m_rewriteSummary += ", " + std::to_string(report.fusedResidualAdds) + " residual / upsampled Adds fused";
    if (report.fusedUpsampleConcats > 0)
      ex->m_rewriteSummary += ", " + std::to_string(report.fusedUpsampleConcats) + " Concats of upsampled maps fused";
    if (blocked.regions > 0)
      ex->m_rewriteSummary += ", " + std::to_string(blocked.convs) + " Convs in " + std::to_string(blocked.regions) +
                              " nChw" + std::to_string(blocked.block) + "c regions (" +
                              (blocked.narrowRegions > 0
                                   ? std::to_string(blocked.narrowRegions) + " of them nChw8c, "
                                   : std::string()) +
                              std::to_string(blocked.residualAdds) + " residual Adds fused, " +
                              (blocked.stems > 0 ? std::to_string(blocked.stems) + " from the image, "
                                                 : std::string()) +
                              std::to_string(blocked.reorders) + " reorders)";
  }
  return ex;
}

Status Executor::checkFeeds(const std::vector<NamedTensor>& feeds, std::vector<const Tensor*>& byValue) const {
  const Graph& g = m_model->graph;
  const std::string& where = m_model->path;
  for (const NamedTensor& f : feeds) {
    ValueId id = g.findValue(f.name);
    if (id == kNoValue || (!g.value(id).isGraphInput && !g.value(id).isOverridable && !g.value(id).isOuterRef)) {
      std::string names;
      for (ValueId in : g.inputs) names += (names.empty() ? "'" : ", '") + g.value(in).name + "'";
      return invalidArgument(where + ": input '" + f.name + "' is not an input of the model (inputs: " + names + ")");
    }
    const Value& v = g.value(id);
    if (v.dtype != DType::Undefined && f.tensor.dtype() != v.dtype) {
      return invalidArgument(where + ": input '" + f.name + "' expects " + dtypeName(v.dtype) + ", got " +
                             dtypeName(f.tensor.dtype()));
    }
    if (v.shape) {
      const auto& dims = *v.shape;
      bool ok = dims.size() == f.tensor.shape().size();
      for (size_t i = 0; ok && i < dims.size(); ++i)
        if (dims[i].isFixed() && dims[i].value != f.tensor.shape()[i]) ok = false;
      if (!ok) {
        std::string want = "[";
        for (size_t i = 0; i < dims.size(); ++i)
          want += (i ? "," : "") + (dims[i].isFixed() ? std::to_string(dims[i].value) : dims[i].symbol.empty() ? "?" : dims[i].symbol);
        return invalidArgument(where + ": input '" + f.name + "' expects shape " + want + "], got " +
                               shapeToString(f.tensor.shape()));
      }
    }
    if (byValue[(size_t)id]) return invalidArgument(where + ": input '" + f.name + "' is given twice");
    byValue[(size_t)id] = &f.tensor;
  }
  for (ValueId in : g.inputs) {
    if (!byValue[(size_t)in]) return invalidArgument(where + ": input '" + g.value(in).name + "' is missing");
  }
  for (ValueId in : g.outerRefs) {
    if (!byValue[(size_t)in]) return invalidArgument(where + ": outer-scope value '" + g.value(in).name + "' is missing");
  }
  return Status::ok();
}

Result<std::vector<Tensor>> Executor::makeValueTable(const std::vector<NamedTensor>& feeds) const {
  const Graph& g = m_model->graph;
  std::vector<const Tensor*> fed(g.values.size(), nullptr);
  QS_RETURN_IF_ERROR(checkFeeds(feeds, fed));
  std::vector<Tensor> values(g.values.size());
  for (ValueId id = 0; id < (ValueId)g.values.size(); ++id) {
    if (fed[(size_t)id]) values[(size_t)id] = *fed[(size_t)id];
    else if (g.value(id).constant) values[(size_t)id] = *g.value(id).constant;
  }
  return values;
}

Result<std::vector<Tensor>> Executor::runNode(NodeId id, std::span<const Tensor* const> inputs) const {
  const Node& node = m_model->graph.nodes[(size_t)id];
  std::vector<Tensor> outputs(node.outputs.size());
  KernelContext ctx{inputs, std::span<Tensor>(outputs), m_threads};
  Status st = m_kernels[(size_t)id]->run(ctx);
  if (!st.isOk()) return Status(st.code(), m_model->path + ": " + node.label() + ": " + st.message());
  return outputs;
}

Result<std::vector<Tensor>> Executor::runNode(NodeId id, std::span<const Tensor* const> inputs,
                                              InputTransform* transform) const {
  if (!transform) return runNode(id, inputs);
  const Node& node = m_model->graph.nodes[(size_t)id];
  std::vector<Tensor> outs(node.outputs.size());
  Status taken;
  if (transform->runNode(id, inputs, std::span<Tensor>(outs), taken)) {
    if (!taken.isOk()) return Status(taken.code(), m_model->path + ": " + node.label() + ": " + taken.message());
    return outs;
  }
  std::vector<const Tensor*> in(inputs.begin(), inputs.end());
  std::vector<Tensor> transformed(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i])
      if (const Tensor* t = transform->transform(id, i, *in[i], transformed[i])) in[i] = t;
  return runNode(id, in);
}

Status Executor::runNodes(std::span<const NodeId> order, std::vector<Tensor>& values, const RunOptions& options) const {
  const Graph& g = m_model->graph;
  std::vector<const Tensor*> inputs;
  for (NodeId id : order) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
      return Status(StatusCode::Cancelled, m_model->path + ": run cancelled");
    }
    const Node& node = g.nodes[(size_t)id];
    inputs.assign(node.inputs.size(), nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue) inputs[i] = &values[(size_t)node.inputs[i]];
    auto outs = runNode(id, inputs, options.inputTransform);
    if (!outs) return outs.status();
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      ValueId v = node.outputs[o];
      if (v == kNoValue) continue;
      values[(size_t)v] = std::move((*outs)[o]);
      if (options.observer) options.observer->onNodeOutput(id, o, v, values[(size_t)v]);
    }
  }
  return Status::ok();
}

namespace {
double product(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
  double p = 1;
  for (size_t i = from; i < s.size() && i < to; ++i) p *= (double)s[i];
  return p;
}
}  // namespace

double Executor::estimateFlops(const Node& node, std::span<const Tensor* const> in, std::span<const Tensor> out) {
  if (out.empty() || out[0].empty()) return 0;
  const std::string& op = node.opType;
  double outElems = (double)out[0].numel();
  const bool transposed = op == "ConvTranspose" || op == "FusedConvTranspose";
  if ((op == "Conv" || transposed || op == "FusedConv" || op == "BlockedConv") && in.size() > 1 && in[1]) {
    // each output element of Conv: Cin/group * prod(kernel) MACs; ConvTranspose: per input element.
    const Shape& w = in[1]->shape();
    if (!transposed) return 2.0 * outElems * product(w, 1);
    return 2.0 * (double)in[0]->numel() * product(w, 1);
  }
  if ((op == "MatMul" || op == "Gemm" || op == "FusedMatMul") && in.size() > 1 && in[0] && in[1]) {
    const Shape& a = in[0]->shape();
    int64_t k = a.empty() ? 1 : a.back();
    if (op == "FusedMatMul") {
      const Attribute* pa = node.attr("perm_a");
      if (pa && pa->ints.size() == a.size() && !a.empty()) k = a[(size_t)pa->ints.back()];
    }
    if (op == "Gemm") {
      const Attribute* ta = node.attr("transA");
      if (ta && ta->i && a.size() == 2) k = a[0];
    }
    return 2.0 * outElems * (double)k;
  }
  return outElems;
}

Result<std::vector<Tensor>> Executor::run(const std::vector<NamedTensor>& feeds, const RunOptions& options) const {
  if (m_fast && !options.observer && !options.inputTransform) return runPlan(*m_fast, feeds, options);
  // The original graph, without moving the kernels: a plan that borrows nothing but names them.
  Plan original;
  original.model = m_model;
  return runPlan(original, feeds, options);
}

Result<std::vector<Tensor>> Executor::runPlan(const Plan& plan, const std::vector<NamedTensor>& feeds,
                                             const RunOptions& options) const {
  const bool isOriginal = &plan != m_fast.get();
  const Graph& g = plan.model->graph;
  const std::vector<std::unique_ptr<Kernel>>& kernels = isOriginal ? m_kernels : plan.kernels;
  const std::vector<int32_t>& useCount = isOriginal ? m_useCount : plan.useCount;
  std::vector<const Tensor*> fed(g.values.size(), nullptr);
  QS_RETURN_IF_ERROR(checkFeeds(feeds, fed));

  std::vector<Tensor> values(g.values.size());
  std::vector<int32_t> uses = useCount;
  uint64_t liveBytes = 0, peakBytes = 0;
  for (ValueId id = 0; id < (ValueId)g.values.size(); ++id) {
    if (fed[(size_t)id]) {
      values[(size_t)id] = *fed[(size_t)id];
      if (options.observer) options.observer->onGraphInput(id, values[(size_t)id]);
    } else if (g.value(id).constant) {
      values[(size_t)id] = *g.value(id).constant;
    }
  }
  using Clock = std::chrono::steady_clock;
  auto runStart = Clock::now();
  std::vector<const Tensor*> inputs;
  std::vector<Tensor> transformed;
  std::vector<Tensor> outputs;
  // Free inputs after their last consumer, and outputs nobody reads.
  auto release = [&](ValueId v) {
    if (--uses[(size_t)v] == 0 && !g.value(v).constant && !fed[(size_t)v]) {
      liveBytes -= std::min<uint64_t>(liveBytes, values[(size_t)v].byteSize());
      values[(size_t)v] = Tensor();
    }
  };
  // Shape-only subgraphs: reuse their outputs for feeds of shapes seen before.
  const bool useShapeCache = !isOriginal && plan.hasShapeOnly && !options.observer && !options.inputTransform;
  std::vector<int64_t> shapeKey;
  bool cached = false;
  std::vector<std::pair<ValueId, Tensor>> fresh;
  if (useShapeCache) {
    for (ValueId in = 0; in < (ValueId)g.values.size(); ++in) {  // graph inputs and fed overridable initializers
      if (!fed[(size_t)in]) continue;
      const Tensor& t = values[(size_t)in];
      shapeKey.push_back(in);
      shapeKey.push_back((int64_t)t.dtype());
      shapeKey.push_back(t.rank());
      shapeKey.insert(shapeKey.end(), t.shape().begin(), t.shape().end());
    }
    std::lock_guard<std::mutex> lock(plan.cacheMutex);
    auto it = plan.shapeCache.find(shapeKey);
    if (it != plan.shapeCache.end()) {
      cached = true;
      for (const auto& [v, t] : it->second) values[(size_t)v] = t;
    }
  }
  for (NodeId id : g.topoOrder) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
      return Status(StatusCode::Cancelled, m_model->path + ": run cancelled");
    }
    const Node& node = g.nodes[(size_t)id];
    if (cached && plan.shapeOnly[(size_t)id]) {
      for (ValueId v : node.inputs)
        if (v != kNoValue) release(v);
      continue;
    }
    inputs.assign(node.inputs.size(), nullptr);
    transformed.assign(node.inputs.size(), Tensor());
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue) inputs[i] = &values[(size_t)node.inputs[i]];
    outputs.assign(node.outputs.size(), Tensor());
    auto t0 = Clock::now();
    Status st;
    if (!options.inputTransform || !options.inputTransform->runNode(id, inputs, std::span<Tensor>(outputs), st)) {
      for (size_t i = 0; i < node.inputs.size() && options.inputTransform; ++i) {
        if (!inputs[i]) continue;
        const Tensor* t = options.inputTransform->transform(id, i, *inputs[i], transformed[i]);
        if (t) inputs[i] = t;
      }
      KernelContext ctx{std::span<const Tensor* const>(inputs), std::span<Tensor>(outputs), m_threads, options.cancel};
      st = kernels[(size_t)id]->run(ctx);
    }
    if (!st.isOk()) {
      return Status(st.code() == StatusCode::Ok ? StatusCode::RuntimeError : st.code(),
                    m_model->path + ": " + node.label() + ": " + st.message());
    }
    auto t1 = Clock::now();
    double flops = options.profile ? estimateFlops(node, inputs, outputs) : 0;
    uint64_t outBytes = 0;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      ValueId v = node.outputs[o];
      if (v == kNoValue) continue;
      if (outputs[o].empty()) {
        return runtimeError(m_model->path + ": " + node.label() + ": produced no value for output '" + g.value(v).name + "'");
      }
      outBytes += outputs[o].byteSize();
      values[(size_t)v] = std::move(outputs[o]);
      if (options.observer) options.observer->onNodeOutput(id, o, v, values[(size_t)v]);
    }
    liveBytes += outBytes;
    peakBytes = std::max(peakBytes, liveBytes);
    if (options.profile) {
      NodeProfile np{id, std::chrono::duration<double, std::milli>(t1 - t0).count(), flops, outBytes, {}, {}};
      if (!isOriginal) {
        np.node = plan.origin[(size_t)id];
        np.absorbed = plan.absorbed[(size_t)id];
        if (np.absorbed.empty() && node.opType != m_model->graph.nodes[(size_t)np.node].opType) {
          np.kernel = node.opType;  // e.g. a reorder of a blocked region (blocked_rewrite.h)
        } else if (!np.absorbed.empty()) {
          const Graph& og = m_model->graph;
          np.kernel = node.opType + "(" + og.nodes[(size_t)np.node].opType;
          for (NodeId a : np.absorbed) np.kernel += "," + og.nodes[(size_t)a].opType;
          np.kernel += ")";
        }
      }
      options.profile->nodes.push_back(std::move(np));
    }
    if (useShapeCache && !cached && plan.shapeOnly[(size_t)id])
      for (ValueId v : node.outputs)
        if (v != kNoValue) fresh.emplace_back(v, values[(size_t)v]);
    for (ValueId v : node.inputs)
      if (v != kNoValue) release(v);
    for (ValueId v : node.outputs)
      if (v != kNoValue && uses[(size_t)v] == 0) {
        ++uses[(size_t)v];
        release(v);
      }
  }
  if (useShapeCache && !cached) {
    std::lock_guard<std::mutex> lock(plan.cacheMutex);
    if (plan.shapeCache.size() >= 16) plan.shapeCache.clear();  // bounded: many shapes, few hits
    plan.shapeCache.emplace(std::move(shapeKey), std::move(fresh));
  }
  std::vector<Tensor> result;
  result.reserve(g.outputs.size());
  for (ValueId v : g.outputs) result.push_back(values[(size_t)v]);
  if (options.profile) {
    options.profile->totalMs = std::chrono::duration<double, std::milli>(Clock::now() - runStart).count();
    options.profile->peakLiveBytes = std::max(options.profile->peakLiveBytes, peakBytes);
  }
  return result;
}

}  // namespace qs
