// The passes of an analysis over one batch (docs/design.md, "Analysis", step 3): the float pass,
// the quantized pass compared with it, the layer-wise runs of each quantizable node, the
// sensitivity cones, and the sweep that does all of them in one walk over the nodes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/analysis/agreement.h"
#include "core/analysis/node_paths.h"
#include "core/analysis/quant_state.h"
#include "core/analysis/split_gram.h"
#include "core/io/calibration_data.h"
#include "core/numeric/metrics.h"
#include "core/util/progress.h"

namespace qs {

/// Activations of one analysed batch: the float run and the quantized run. `state` is the enabled
/// mask quantTable was computed with (empty: unknown after an interrupted update, rebuilt in full
/// by the next toggle). Toggles update quantTable in place, so each entry carries its own state.
struct BatchCache {
  std::vector<Tensor> floatTable, quantTable;
  std::vector<char> state;
};

/// Sums of one batch, per node and per graph output; merged in batch order by the caller, so the
/// results do not depend on which thread ran which batch.
struct BatchSums {
  std::vector<ErrorAccumulator> node, out, layer, weight, act, sens;
  std::vector<AgreementAccumulator> agree;  // per graph output, as `out`
  /// The graph outputs of the float pass, when the batch's tables were not kept (they share its
  /// buffers): what exactSensitivity() compares with, so that it need not re-run the whole float pass.
  std::vector<Tensor> floatOutputs;
  /// The float values BatchSweep::run() was asked to keep (`keepFloat`), in the order produced;
  /// they share the float table's buffers.
  std::vector<std::pair<ValueId, Tensor>> keptFloat;
};

/// What the passes read: the session's model, executor, quantization state and paths, and its
/// cancel token (checked between nodes).
struct PassContext {
  const Model& model;
  const Executor& executor;
  const QuantState& state;
  const NodePaths& paths;
  CancelToken& cancel;
  const std::vector<OutputKind>& outputKinds;  // per graph output: the user's kind, or Auto

  /// Cancelled, naming the model.
  Status cancelled() const;
  int threads() const { return executor.threads(); }
};

/// The nodes downstream of `roots`, the roots included, in topological order.
std::vector<NodeId> coneOf(const Graph& g, const std::vector<NodeId>& roots);
/// Bytes of the activations (not the constants) in a value table.
uint64_t tableBytes(const Graph& g, const std::vector<Tensor>& table);

/// The float pass of one batch, every activation kept (the reference of every comparison).
Result<std::vector<Tensor>> floatPass(const PassContext& c, const std::vector<NamedTensor>& feeds);
/// The quantized pass of one batch through `transform` (a toggle's batch beyond the cache), its
/// node outputs (those of `nodes`, or all) and graph outputs accumulated against `floatTable`,
/// intermediates freed as the pass goes.
Status quantizedPass(const PassContext& c, const std::vector<NamedTensor>& feeds, const std::vector<Tensor>& floatTable,
                     const FakeQuantTransform& transform, const std::vector<NodeId>* nodes,
                     std::vector<ErrorAccumulator>& nodeAcc, std::vector<ErrorAccumulator>& outAcc,
                     std::vector<AgreementAccumulator>* outAgreement = nullptr);
/// Re-runs `cone` over the float table with `transform`; adds the graph outputs to `acc`.
Status sensitivityPass(const PassContext& c, const std::vector<NodeId>& cone, FakeQuantTransform& transform,
                       const std::vector<Tensor>& floatTable, ErrorAccumulator& acc);

/// A toggle's cached batch: brings its quantized table to `target` in place, re-running only the
/// cone of what differs from the state it holds (`cone`, the toggled nodes' cone, when that is
/// what differs, i.e. unless an earlier update of this batch was interrupted), so no table is
/// copied and replaced buffers return to the pool at once. The graph-wise sums of `cone` go to
/// nodeAcc, the graph outputs' to outAcc (and their agreement to outAgreement).
Status updateCachedBatch(const PassContext& c, BatchCache& cache, const std::vector<char>& target,
                         const std::vector<NodeId>& changed, const std::vector<NodeId>& cone,
                         const FakeQuantTransform& transform, std::vector<ErrorAccumulator>& nodeAcc,
                         std::vector<ErrorAccumulator>& outAcc,
                         std::vector<AgreementAccumulator>* outAgreement = nullptr);

/// The sweep of one batch in analyze(): float, graph-wise and layer-wise in one walk over the
/// nodes, then the sensitivity cones. Immutable once made: batches run side by side on one.
class BatchSweep {
 public:
  /// `report(fraction of this batch, stage)`: returns false to stop.
  using Report = std::function<bool(double, const std::string&)>;

  /// Nodes on as in `enabled`; `layerwise` and `sensitivity` as AnalysisOptions.
  BatchSweep(const PassContext& c, const QuantPlan& plan, std::vector<char> enabled, bool layerwise, bool sensitivity);

  /// Batch `b` of `data` into `sums`. With `keep`, both tables go to *kept for toggles while
  /// `budget` bytes allow; `batchBytes` gets the bytes of both tables (up to where it stopped
  /// counting them, past the budget). `keepFloat` (per value; null: none): the float values whose
  /// entry is above 0 go to sums.keptFloat as they are produced (exactSensitivity()'s cone inputs,
  /// by the rank QuantSession::chooseConeInputs gives them).
  Status run(const CalibrationData& data, int64_t b, bool keep, uint64_t budget, std::unique_ptr<BatchCache>* kept,
             uint64_t& batchBytes, BatchSums& sums, const Report& report,
             const std::vector<int32_t>* keepFloat = nullptr) const;

  bool quantizable(size_t node) const { return m_quantizable[node] != 0; }
  bool hasWeight(size_t node) const { return m_hasWeight[node] != 0; }
  bool hasActivation(size_t node) const { return m_hasAct[node] != 0; }

 private:
  Status layerwiseNode(NodeId id, const std::vector<Tensor>& floatTable, int64_t batches, BatchSums& S) const;
  Status sensitivity(const std::vector<Tensor>& floatTable, BatchSums& S, const Report& report) const;

  PassContext m_c;
  const Graph& m_g;
  std::vector<char> m_enabled;
  bool m_layerwise, m_sensitivity;
  std::vector<char> m_quantizable, m_hasWeight, m_hasAct;
  std::vector<NodeId> m_candidates;               // quantizable nodes, in topological order
  std::vector<std::vector<NodeId>> m_cones;       // per candidate, with sensitivity
  std::vector<int32_t> m_useCount;                // per value: consumers and graph-output uses
  std::shared_ptr<SplitGramCache> m_grams;        // with layer-wise and paths.gramSplit
};

}  // namespace qs
