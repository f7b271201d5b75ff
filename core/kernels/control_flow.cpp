// If, Loop and Scan: their subgraphs run through an executor of their own, built once when the
// node's kernel is created (kernels inside subgraphs are ordinary kernels). What a subgraph reads
// from an enclosing scope arrives as the node's implicit inputs (Node::implicitInputs, appended
// by the loader) and is fed to the subgraph's executor by name.
#include "core/kernels/control_flow.h"

#include <cstring>

#include "core/exec/executor.h"
#include "core/exec/kernel_registry.h"

namespace qs {

namespace {

// One subgraph attribute, ready to run.
struct Subgraph {
  std::string attr;                                 // "then_branch", "body", ...
  std::unique_ptr<Executor> exec;
  std::vector<ValueId> inputs;                      // the subgraph's formal inputs
  std::vector<std::pair<std::string, size_t>> outer;  // outer-scope name -> index among the node's inputs
  size_t outputCount = 0;

  const Graph& graph() const { return exec->model().graph; }

  // Declared scalars and [1]-shaped values are interchangeable here (exporters declare Loop's
  // iteration count and condition either way): a one-element feed takes the declared shape.
  Tensor fit(size_t i, const Tensor& t) const {
    const Value& v = graph().value(inputs[i]);
    if (!v.shape || t.numel() != 1 || v.shape->size() == (size_t)t.rank()) return t;
    for (const Dim& d : *v.shape)
      if (d.value != 1) return t;
    return t.reshaped(Shape(v.shape->size(), 1));
  }

  Result<std::vector<Tensor>> run(std::span<const Tensor> formal, const KernelContext& ctx) const {
    std::vector<NamedTensor> feeds;
    feeds.reserve(formal.size() + outer.size());
    for (size_t i = 0; i < formal.size(); ++i) feeds.push_back({graph().value(inputs[i]).name, fit(i, formal[i])});
    for (const auto& [name, index] : outer) {
      if (!ctx.hasInput(index)) return kernelError(StatusCode::RuntimeError, attr + ": outer-scope value '" + name + "' is absent");
      feeds.push_back({name, ctx.input(index)});
    }
    RunOptions options;
    options.cancel = ctx.cancel;
    auto out = exec->run(feeds, options);
    if (!out) return out.status();
    if (out->size() != outputCount) {
      return kernelError(StatusCode::RuntimeError, attr + " gave " + std::to_string(out->size()) + " outputs, expected " +
                                                       std::to_string(outputCount));
    }
    return out;
  }
};

Result<Subgraph> makeSubgraph(const KernelInit& init, const std::string& attrName) {
  const Attribute* a = init.node.attr(attrName);
  if (!a || a->type != Attribute::Type::Graph || !a->g) {
    return kernelError(StatusCode::InvalidModel, "graph attribute '" + attrName + "' is missing");
  }
  if (!init.model) return kernelError(StatusCode::Unsupported, "subgraphs run only inside an executor");
  auto model = std::make_shared<Model>();
  model->path = attrName;  // errors read "file: node 'loop' (Loop): body: node 'add' (Add): ..."
  model->irVersion = init.model->irVersion;
  model->opsets = init.model->opsets;
  model->shapeInference = init.model->shapeInference;
  model->graph = *a->g;  // tensors share their buffers: constants are not copied
  Subgraph s;
  s.attr = attrName;
  s.inputs = model->graph.inputs;
  s.outputCount = model->graph.outputs.size();
  for (ValueId r : model->graph.outerRefs) {
    const std::string& name = model->graph.value(r).name;
    size_t index = init.node.inputs.size();
    for (size_t k = init.node.explicitInputCount(); k < init.node.inputs.size(); ++k)
      if (init.node.inputs[k] != kNoValue && init.graph.value(init.node.inputs[k]).name == name) index = k;
    if (index == init.node.inputs.size()) {
      return kernelError(StatusCode::InvalidModel, attrName + " reads '" + name + "', which is not among the node's implicit inputs");
    }
    s.outer.emplace_back(name, index);
  }
  ExecutorOptions options;
  options.threads = init.threads;
  options.registry = init.registry;
  options.libraryKernels = init.libraryKernels;
  auto exec = Executor::create(std::move(model), options);
  if (!exec) return exec.status();
  s.exec = std::move(exec).value();
  return s;
}

bool truthy(const Tensor& t) {
  switch (t.dtype()) {
    case DType::Bool: return t.data<uint8_t>()[0] != 0;
    default: return t.valueAsDouble(0) != 0;
  }
}

// Element size, the product of dims before `axis` and the bytes of one slab after it.
struct Slabs {
  int64_t outer = 1, count = 1, innerBytes = 0;
};
Slabs slabs(const Shape& shape, int64_t axis, size_t esize) {
  Slabs s;
  for (int64_t d = 0; d < axis; ++d) s.outer *= shape[(size_t)d];
  s.count = shape[(size_t)axis];
  int64_t inner = 1;
  for (size_t d = (size_t)axis + 1; d < shape.size(); ++d) inner *= shape[d];
  s.innerBytes = inner * (int64_t)esize;
  return s;
}

// Slice `i` of `t` along `axis`, the axis removed.
Tensor takeSlice(const Tensor& t, int64_t axis, int64_t i) {
  Shape shape = t.shape();
  Slabs s = slabs(shape, axis, dtypeSize(t.dtype()));
  shape.erase(shape.begin() + axis);
  Tensor out(t.dtype(), shape);
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < s.outer; ++o)
    std::memcpy(dst + o * s.innerBytes, src + (o * s.count + i) * s.innerBytes, (size_t)s.innerBytes);
  return out;
}

// Stacks equally shaped slices along a new axis `axis` (slice k at position order[k]).
Result<Tensor> stack(const std::vector<Tensor>& slices, int64_t axis, bool reversed, const std::string& what) {
  const Tensor& first = slices.front();
  for (const Tensor& t : slices)
    if (t.shape() != first.shape() || t.dtype() != first.dtype()) {
      return kernelError(StatusCode::RuntimeError, what + " changes shape between iterations (" + shapeToString(first.shape()) +
                                                       " then " + shapeToString(t.shape()) + ")");
    }
  Shape shape = first.shape();
  shape.insert(shape.begin() + axis, (int64_t)slices.size());
  Tensor out(first.dtype(), shape);
  Slabs s = slabs(shape, axis, dtypeSize(first.dtype()));
  char* dst = static_cast<char*>(out.raw());
  for (size_t k = 0; k < slices.size(); ++k) {
    const char* src = static_cast<const char*>(slices[k].raw());
    int64_t pos = reversed ? (int64_t)slices.size() - 1 - (int64_t)k : (int64_t)k;
    for (int64_t o = 0; o < s.outer; ++o)
      std::memcpy(dst + (o * s.count + pos) * s.innerBytes, src + o * s.innerBytes, (size_t)s.innerBytes);
  }
  return out;
}

// An empty stack (zero iterations): [0] followed by the body output's declared dims when known.
Tensor emptyStack(const Value& declared) {
  Shape shape{0};
  if (declared.shape)
    for (const Dim& d : *declared.shape) shape.push_back(d.isFixed() ? d.value : 0);
  return Tensor(declared.dtype == DType::Undefined ? DType::Float : declared.dtype, shape);
}

Status checkCancel(const KernelContext& ctx) {
  if (ctx.cancel && ctx.cancel->load(std::memory_order_relaxed)) return kernelError(StatusCode::Cancelled, "run cancelled");
  return Status::ok();
}

// ---------------------------------------------------------------------------------------- If

class IfKernel : public Kernel {
 public:
  Subgraph thenBranch, elseBranch;
  Status run(KernelContext& ctx) const override {
    if (!ctx.hasInput(0) || ctx.input(0).numel() != 1) {
      return kernelError(StatusCode::InvalidArgument, "cond must hold one element");
    }
    const Subgraph& branch = truthy(ctx.input(0)) ? thenBranch : elseBranch;
    auto out = branch.run({}, ctx);
    if (!out) return out.status();
    for (size_t o = 0; o < ctx.outputCount(); ++o) ctx.outputs[o] = std::move((*out)[o]);
    return Status::ok();
  }
};

Result<std::unique_ptr<Kernel>> createIf(const KernelInit& init) {
  auto k = std::make_unique<IfKernel>();
  auto t = makeSubgraph(init, "then_branch");
  if (!t) return t.status();
  auto e = makeSubgraph(init, "else_branch");
  if (!e) return e.status();
  k->thenBranch = std::move(t).value();
  k->elseBranch = std::move(e).value();
  const size_t n = init.node.outputs.size();
  for (const Subgraph* b : {&k->thenBranch, &k->elseBranch}) {
    if (!b->inputs.empty()) return kernelError(StatusCode::InvalidModel, b->attr + " must have no inputs");
    if (b->outputCount != n) {
      return kernelError(StatusCode::InvalidModel, b->attr + " has " + std::to_string(b->outputCount) +
                                                       " outputs, the node " + std::to_string(n));
    }
  }
  if (init.node.explicitInputCount() != 1) return kernelError(StatusCode::InvalidModel, "If takes exactly one input (cond)");
  return std::unique_ptr<Kernel>(std::move(k));
}

// -------------------------------------------------------------------------------------- Loop

class LoopKernel : public Kernel {
 public:
  Subgraph body;
  size_t carried = 0;  // N loop-carried values
  size_t scans = 0;    // K scan outputs

  Status run(KernelContext& ctx) const override {
    bool hasTrip = ctx.hasInput(0), hasCond = ctx.hasInput(1);
    int64_t trip = 0;
    if (hasTrip) {
      const Tensor& m = ctx.input(0);
      if (m.numel() != 1) return kernelError(StatusCode::InvalidArgument, "trip count M must hold one element");
      trip = (int64_t)m.valueAsDouble(0);
      if (m.dtype() == DType::Int64) trip = m.data<int64_t>()[0];
      if (trip < 0) return kernelError(StatusCode::InvalidArgument, "trip count M is negative (" + std::to_string(trip) + ")");
    }
    bool cond = true;
    if (hasCond) {
      if (ctx.input(1).numel() != 1) return kernelError(StatusCode::InvalidArgument, "cond must hold one element");
      cond = truthy(ctx.input(1));
    }
    if (!hasTrip && !hasCond) {
      return kernelError(StatusCode::InvalidModel, "the Loop has neither a trip count nor a condition: it never ends");
    }
    if (hasTrip && !hasCond && trip > kMaxLoopIterations) {
      return kernelError(StatusCode::ResourceLimit, "trip count " + std::to_string(trip) + " is beyond the limit of " +
                                                        std::to_string(kMaxLoopIterations) + " iterations");
    }
    std::vector<Tensor> state(2 + carried);
    for (size_t v = 0; v < carried; ++v) {
      if (!ctx.hasInput(2 + v)) return kernelError(StatusCode::InvalidArgument, "loop-carried input " + std::to_string(v) + " is absent");
      state[2 + v] = ctx.input(2 + v);
    }
    std::vector<std::vector<Tensor>> scanned(scans);
    int64_t i = 0;
    for (; (!hasTrip || i < trip) && cond; ++i) {
      if (i >= kMaxLoopIterations) {
        return kernelError(StatusCode::ResourceLimit, "the Loop ran " + std::to_string(i) +
                                                          " iterations without ending (limit)");
      }
      QS_RETURN_IF_ERROR(checkCancel(ctx));
      state[0] = Tensor::scalar<int64_t>(i);
      state[1] = Tensor::scalar<bool>(cond);
      auto out = body.run(state, ctx);
      if (!out) return out.status();
      if ((*out)[0].numel() != 1) return kernelError(StatusCode::RuntimeError, "body's condition output must hold one element");
      cond = truthy((*out)[0]);
      for (size_t v = 0; v < carried; ++v) state[2 + v] = std::move((*out)[1 + v]);
      for (size_t k = 0; k < scans; ++k) scanned[k].push_back(std::move((*out)[1 + carried + k]));
    }
    for (size_t v = 0; v < carried; ++v)
      if (ctx.outputs.size() > v) ctx.outputs[v] = state[2 + v];
    for (size_t k = 0; k < scans; ++k) {
      if (scanned[k].empty()) {
        ctx.outputs[carried + k] = emptyStack(body.graph().value(body.graph().outputs[1 + carried + k]));
        continue;
      }
      auto t = stack(scanned[k], 0, false, "scan output " + std::to_string(k));
      if (!t) return t.status();
      ctx.outputs[carried + k] = std::move(t).value();
    }
    return Status::ok();
  }
};

Result<std::unique_ptr<Kernel>> createLoop(const KernelInit& init) {
  const size_t explicitInputs = init.node.explicitInputCount();
  if (explicitInputs < 2) return kernelError(StatusCode::InvalidModel, "Loop needs inputs M and cond (either may be empty)");
  auto k = std::make_unique<LoopKernel>();
  k->carried = explicitInputs - 2;
  if (init.node.outputs.size() < k->carried) {
    return kernelError(StatusCode::InvalidModel, "Loop has " + std::to_string(k->carried) + " loop-carried inputs but only " +
                                                     std::to_string(init.node.outputs.size()) + " outputs");
  }
  k->scans = init.node.outputs.size() - k->carried;
  auto b = makeSubgraph(init, "body");
  if (!b) return b.status();
  k->body = std::move(b).value();
  if (k->body.inputs.size() != 2 + k->carried) {
    return kernelError(StatusCode::InvalidModel, "body has " + std::to_string(k->body.inputs.size()) + " inputs, expected " +
                                                     std::to_string(2 + k->carried) + " (iteration, condition, " +
                                                     std::to_string(k->carried) + " loop-carried)");
  }
  if (k->body.outputCount != 1 + k->carried + k->scans) {
    return kernelError(StatusCode::InvalidModel, "body has " + std::to_string(k->body.outputCount) + " outputs, expected " +
                                                     std::to_string(1 + k->carried + k->scans) + " (condition, " +
                                                     std::to_string(k->carried) + " loop-carried, " +
                                                     std::to_string(k->scans) + " scan outputs)");
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

// -------------------------------------------------------------------------------------- Scan

class ScanKernel : public Kernel {
 public:
  Subgraph body;
  bool opset8 = false;  // opset 8: a leading batch axis and an optional sequence_lens input
  size_t states = 0, scanInputs = 0, scanOutputs = 0;
  std::vector<int64_t> inAxes, inDirections, outAxes, outDirections;

  // One scan (opset 9 form) over states and scan inputs, given as tensors with their axes.
  Status scan(std::vector<Tensor> state, const std::vector<const Tensor*>& xs, const std::vector<int64_t>& axes,
              int64_t length, int64_t paddedLength, const KernelContext& ctx, std::vector<Tensor>& finalState,
              std::vector<Tensor>& stacked) const {
    std::vector<std::vector<Tensor>> outs(scanOutputs);
    std::vector<Tensor> feed(states + scanInputs);
    for (int64_t t = 0; t < length; ++t) {
      QS_RETURN_IF_ERROR(checkCancel(ctx));
      for (size_t s = 0; s < states; ++s) feed[s] = state[s];
      for (size_t m = 0; m < scanInputs; ++m) {
        int64_t pos = inDirections[m] ? length - 1 - t : t;
        feed[states + m] = takeSlice(*xs[m], axes[m], pos);
      }
      auto out = body.run(feed, ctx);
      if (!out) return out.status();
      for (size_t s = 0; s < states; ++s) state[s] = std::move((*out)[s]);
      for (size_t k = 0; k < scanOutputs; ++k) outs[k].push_back(std::move((*out)[states + k]));
    }
    finalState = std::move(state);
    stacked.assign(scanOutputs, Tensor());
    for (size_t k = 0; k < scanOutputs; ++k) {
      const Value& declared = body.graph().value(body.graph().outputs[states + k]);
      if (outs[k].empty()) {
        stacked[k] = emptyStack(declared);
        continue;
      }
      // Sequences shorter than the batch's longest (opset 8) are padded with zeros.
      while ((int64_t)outs[k].size() < paddedLength) outs[k].push_back(Tensor::zeros(outs[k][0].dtype(), outs[k][0].shape()));
      int64_t axis = outAxes[k];
      if (axis < 0) axis += outs[k][0].rank() + 1;
      if (axis < 0 || axis > outs[k][0].rank()) {
        return kernelError(StatusCode::InvalidArgument, "scan_output_axes entry " + std::to_string(outAxes[k]) +
                                                            " is out of range for rank " + std::to_string(outs[k][0].rank() + 1));
      }
      auto t = stack(outs[k], axis, outDirections[k] != 0, "scan output " + std::to_string(k));
      if (!t) return t.status();
      stacked[k] = std::move(t).value();
    }
    return Status::ok();
  }

  Status run(KernelContext& ctx) const override {
    const size_t first = opset8 ? 1 : 0;  // opset 8's sequence_lens comes first
    for (size_t i = 0; i < states + scanInputs; ++i)
      if (!ctx.hasInput(first + i)) return kernelError(StatusCode::InvalidArgument, "input " + std::to_string(first + i) + " is absent");
    if (!opset8) {
      std::vector<Tensor> state;
      std::vector<const Tensor*> xs;
      std::vector<int64_t> axes;
      int64_t length = -1;
      for (size_t s = 0; s < states; ++s) state.push_back(ctx.input(s));
      for (size_t m = 0; m < scanInputs; ++m) {
        const Tensor& x = ctx.input(states + m);
        int64_t axis = inAxes[m];
        if (!normalizeAxis(axis, x.rank())) {
          return kernelError(StatusCode::InvalidArgument, "scan_input_axes entry " + std::to_string(inAxes[m]) +
                                                              " is out of range for rank " + std::to_string(x.rank()));
        }
        if (length >= 0 && x.dim((int)axis) != length) {
          return kernelError(StatusCode::InvalidArgument, "scan inputs differ in length (" + std::to_string(length) + " and " +
                                                              std::to_string(x.dim((int)axis)) + ")");
        }
        length = x.dim((int)axis);
        xs.push_back(&x);
        axes.push_back(axis);
      }
      std::vector<Tensor> finalState, stacked;
      QS_RETURN_IF_ERROR(scan(std::move(state), xs, axes, std::max<int64_t>(length, 0), 0, ctx, finalState, stacked));
      for (size_t s = 0; s < states; ++s) ctx.outputs[s] = std::move(finalState[s]);
      for (size_t k = 0; k < scanOutputs; ++k) ctx.outputs[states + k] = std::move(stacked[k]);
      return Status::ok();
    }
    // Opset 8: every input has a leading batch axis; each batch entry is scanned on its own.
    const Tensor* lens = ctx.hasInput(0) ? &ctx.input(0) : nullptr;
    int64_t batch = -1, maxLength = -1;
    for (size_t i = 0; i < states + scanInputs; ++i) {
      const Tensor& t = ctx.input(1 + i);
      if (t.rank() < (i < states ? 1 : 2)) return kernelError(StatusCode::InvalidArgument, "input " + std::to_string(1 + i) + " lacks the batch axis");
      if (batch >= 0 && t.dim(0) != batch) return kernelError(StatusCode::InvalidArgument, "inputs differ in batch size");
      batch = t.dim(0);
      if (i >= states) {
        if (maxLength >= 0 && t.dim(1) != maxLength) return kernelError(StatusCode::InvalidArgument, "scan inputs differ in length");
        maxLength = t.dim(1);
      }
    }
    if (lens && (lens->numel() != batch || lens->dtype() != DType::Int64)) {
      return kernelError(StatusCode::InvalidArgument, "sequence_lens must be int64 with one entry per batch");
    }
    std::vector<std::vector<Tensor>> perBatch(states + scanOutputs);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t length = lens ? lens->data<int64_t>()[b] : maxLength;
      if (length < 0 || length > maxLength) {
        return kernelError(StatusCode::InvalidArgument, "sequence_lens entry " + std::to_string(length) + " is outside [0, " +
                                                            std::to_string(maxLength) + "]");
      }
      std::vector<Tensor> state, slicesB;
      for (size_t s = 0; s < states; ++s) state.push_back(takeSlice(ctx.input(1 + s), 0, b));
      for (size_t m = 0; m < scanInputs; ++m) {
        Tensor x = takeSlice(ctx.input(1 + states + m), 0, b);
        // Only the first `length` steps belong to this sequence; reversed scans start at its end.
        if (length < maxLength) {
          std::vector<Tensor> steps;
          for (int64_t t = 0; t < length; ++t) steps.push_back(takeSlice(x, 0, t));
          if (steps.empty()) {
            Shape s = x.shape();
            s[0] = 0;
            x = Tensor(x.dtype(), s);
          } else {
            auto st = stack(steps, 0, false, "scan input");
            if (!st) return st.status();
            x = std::move(st).value();
          }
        }
        slicesB.push_back(std::move(x));
      }
      std::vector<const Tensor*> xs;
      for (const Tensor& x : slicesB) xs.push_back(&x);
      std::vector<Tensor> finalState, stacked;
      QS_RETURN_IF_ERROR(scan(std::move(state), xs, std::vector<int64_t>(scanInputs, 0), length, maxLength, ctx, finalState,
                              stacked));
      for (size_t s = 0; s < states; ++s) perBatch[s].push_back(std::move(finalState[s]));
      for (size_t k = 0; k < scanOutputs; ++k) perBatch[states + k].push_back(std::move(stacked[k]));
    }
    for (size_t o = 0; o < states + scanOutputs; ++o) {
      if (perBatch[o].empty()) return kernelError(StatusCode::InvalidArgument, "the batch is empty");
      auto t = stack(perBatch[o], 0, false, "output " + std::to_string(o));
      if (!t) return t.status();
      ctx.outputs[o] = std::move(t).value();
    }
    return Status::ok();
  }
};

Result<std::unique_ptr<Kernel>> createScan(const KernelInit& init) {
  auto k = std::make_unique<ScanKernel>();
  k->opset8 = init.opset < 9;
  AttrReader a(init);
  int64_t m = a.i("num_scan_inputs", -1);
  if (!a.ok()) return a.status();
  const size_t explicitInputs = init.node.explicitInputCount() - (k->opset8 ? 1 : 0);
  if (m < 1 || (size_t)m > explicitInputs) {
    return kernelError(StatusCode::InvalidModel, "num_scan_inputs " + std::to_string(m) + " is not in [1, " +
                                                     std::to_string(explicitInputs) + "]");
  }
  k->scanInputs = (size_t)m;
  k->states = explicitInputs - k->scanInputs;
  if (init.node.outputs.size() < k->states) return kernelError(StatusCode::InvalidModel, "Scan has fewer outputs than state inputs");
  k->scanOutputs = init.node.outputs.size() - k->states;
  auto readList = [&](const std::string& key, size_t n, std::vector<int64_t>& out) -> Status {
    out = a.ints(key, std::vector<int64_t>(n, 0));
    if (!a.ok()) return a.status();
    if (out.size() != n) {
      return kernelError(StatusCode::InvalidModel, "attribute '" + key + "' has " + std::to_string(out.size()) +
                                                       " entries, expected " + std::to_string(n));
    }
    return Status::ok();
  };
  QS_RETURN_IF_ERROR(readList(k->opset8 ? "directions" : "scan_input_directions", k->scanInputs, k->inDirections));
  if (!k->opset8) {
    QS_RETURN_IF_ERROR(readList("scan_input_axes", k->scanInputs, k->inAxes));
    QS_RETURN_IF_ERROR(readList("scan_output_axes", k->scanOutputs, k->outAxes));
    QS_RETURN_IF_ERROR(readList("scan_output_directions", k->scanOutputs, k->outDirections));
  } else {
    k->inAxes.assign(k->scanInputs, 0);
    k->outAxes.assign(k->scanOutputs, 0);
    k->outDirections.assign(k->scanOutputs, 0);
  }
  auto b = makeSubgraph(init, "body");
  if (!b) return b.status();
  k->body = std::move(b).value();
  if (k->body.inputs.size() != k->states + k->scanInputs || k->body.outputCount != k->states + k->scanOutputs) {
    return kernelError(StatusCode::InvalidModel, "body has " + std::to_string(k->body.inputs.size()) + " inputs and " +
                                                     std::to_string(k->body.outputCount) + " outputs, expected " +
                                                     std::to_string(k->states + k->scanInputs) + " and " +
                                                     std::to_string(k->states + k->scanOutputs));
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

std::vector<KernelEntry> controlFlowKernels() {
  return {
      {"If", "", 1, 21, createIf},
      {"Loop", "", 1, 21, createLoop},
      {"Scan", "", 8, 21, createScan},
  };
}

}  // namespace qs
