#include "core/analysis/smoothing_pass.h"

#include <algorithm>

namespace qs {

namespace {

// The first `batches` batches of `data` through a float executor of `model` with `observer`
// watching, progress from 0 to `span` under `what`.
Status observeSmoothingBatches(const std::shared_ptr<const Model>& model, const CalibrationData& data, int threads,
                               int64_t batches, ExecutionObserver& observer, const ProgressFn& progress, double span,
                               const std::string& what) {
  ExecutorOptions eo;
  eo.threads = threads;
  auto exec = Executor::create(model, eo);
  if (!exec) return exec.status();
  RunOptions ro;
  ro.observer = &observer;
  for (int64_t b = 0; b < batches; ++b) {
    if (progress && !progress(span * (double)b / (double)batches, what))
      return Status(StatusCode::Cancelled, model->path + ": " + what + " cancelled");
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    auto out = (*exec)->run(*feeds, ro);
    if (!out) return out.status();
  }
  return Status::ok();
}

}  // namespace

int64_t smoothingBatches(const CalibrationData& data, int maxBatches) {
  return maxBatches > 0 ? std::min<int64_t>(maxBatches, data.batchCount()) : data.batchCount();
}

Status runSmoothingPass(std::shared_ptr<const Model> model, const CalibrationData& data, int threads, int64_t batches,
                        SmoothingObserver& observer, size_t count, const SmoothingPassInfo& info,
                        const ProgressFn& progress, const SmoothCandidateFn& smoothCandidate,
                        DepthwiseSmoothingResult& res) {
  if (count == 0) {
    res.model = std::move(model);
    return Status::ok();
  }
  QS_RETURN_IF_ERROR(observeSmoothingBatches(model, data, threads, batches, observer, progress, info.span, info.what));
  if (observer.mismatch() >= 0) {
    return runtimeError(model->path + ": node '" + model->graph.nodes[(size_t)observer.mismatch()].name + "': " +
                        info.what + ": " + info.mismatchReason);
  }

  auto copy = std::make_shared<Model>(*model);
  Graph& g = copy->graph;
  std::set<std::string> nodeNames;
  for (const Node& n : g.nodes) nodeNames.insert(n.name);
  for (size_t ci = 0; ci < count; ++ci) {
    if (progress && !progress(info.span + (1 - info.span) * (double)ci / (double)count, info.what))
      return Status(StatusCode::Cancelled, model->path + ": " + info.what + " cancelled");
    smoothCandidate(g, ci, nodeNames);
  }
  if (res.inputs.empty()) {
    res.model = std::move(model);
    return Status::ok();
  }
  QS_RETURN_IF_ERROR(g.finalize(model->path));
  std::sort(res.changedInitializers.begin(), res.changedInitializers.end());
  res.model = std::move(copy);
  if (progress) progress(1.0, info.what);
  return Status::ok();
}

}  // namespace qs
