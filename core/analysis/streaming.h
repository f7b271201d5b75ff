// Bounded memory (issue 16): how an analysis stays within AnalysisOptions::memoryBudgetBytes.
//
// The passes of batch_sweep.h free each value after its last consumer, except where they keep a
// batch's whole float table: the exact sensitivity cones read it after the sweep, a toggle's batch
// beyond the cache is a float pass kept whole and then a quantized pass compared with it, and
// exactSensitivity() re-runs cones over one. When one float table of a batch (times the batches
// that would hold one side by side) exceeds the budget, the session streams instead: it keeps no
// whole table and recomputes.
//
// - Sensitivity (streamingSensitivity): one float walk over the nodes, values freed after their
//   last consumer. When the walk reaches a candidate node, the values it holds are exactly those
//   that nodes from there on read, so the candidate's cone is run from there: the candidate with
//   its points on, the rest of its cone on their float inputs, and the float nodes that feed the
//   cone from beyond the candidate recomputed. A shared float prefix: memory is two live sets,
//   not a table, and the figures are those of the cone over the kept table (the float values are
//   recomputed by the same kernels, so they are the same bits).
// - A toggle's batch beyond the cache (streamingToggleBatch): the float and quantized passes in
//   one walk (BatchSweep without layer-wise or sensitivity), as analyze() runs them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/analysis/agreement.h"
#include "core/analysis/batch_sweep.h"
#include "core/numeric/metrics.h"

namespace qs {

/// What an analysis may hold at once, from the budget and one batch's float table.
struct MemoryPlan {
  uint64_t cacheBudget = 0;  // activations kept for toggles: min(AnalysisOptions::cacheBudgetBytes, budget / 2)
  int batchThreads = 1;      // batches run side by side
  bool streaming = false;    // no whole float table: recompute (above)
};

/// `budget`: AnalysisOptions::memoryBudgetBytes; `cacheBudget`: AnalysisOptions::cacheBudgetBytes;
/// `floatTableBytes`: the activations (graph inputs and node outputs) of one batch's float pass
/// (0: unknown, nothing streams); `cones`: the exact sensitivity sweep runs in analyze(), whose
/// batches would then hold a float table each (as many side by side as fit in half the budget,
/// at most max(cacheBudget, 1 GiB)). Streaming when the float tables held at once
/// (one, or one per batch run side by side for the cones) exceed `budget`.
MemoryPlan planMemory(uint64_t budget, uint64_t cacheBudget, uint64_t floatTableBytes, int64_t batches, int threads,
                      bool cones);

/// The toggle cache's budget within issue 16's bound on peak RSS, `factor` x (`weightBytes` +
/// `activationBytes`: the model's weights and the float activations of every analysed batch): what
/// is left of the bound after `residentBytes` (what the process holds before the cache fills) and
/// `passBytes` (what the passes hold beside it), never above `cacheBudget`, and never below
/// min(`floorBytes`, `cacheBudget`): a small model's bound is below what the workbench holds
/// without any model, and its few tables are no concern. A factor <= 0 is no bound (`cacheBudget`).
uint64_t boundedCacheBudget(uint64_t cacheBudget, double factor, uint64_t weightBytes, uint64_t activationBytes,
                            uint64_t residentBytes, uint64_t passBytes, uint64_t floorBytes);

/// Bytes of the float activations (graph inputs and node outputs) of one pass over `feeds`,
/// measured by running it (each value freed after its last consumer).
Result<uint64_t> measureFloatTableBytes(const PassContext& c, const std::vector<NamedTensor>& feeds);

/// The exact sensitivity of each of `nodes` over one batch without a kept float table: adds to
/// sums[k] what sensitivityPass() over the float table adds for nodes[k] with cones[k]
/// (coneOf(g, {nodes[k]})). `report(fraction)` returns false to stop (then Cancelled).
Status streamingSensitivity(const PassContext& c, const std::vector<NamedTensor>& feeds,
                            const std::vector<NodeId>& nodes, const std::vector<std::vector<NodeId>>& cones,
                            std::vector<ErrorAccumulator>& sums, const std::function<bool(double)>& report = {});

/// A toggle's batch `b` of `data` beyond the cache, without a kept float table: the graph-wise sums
/// of `cone`'s nodes (nodes on as in `enabled`) into nodeAcc, the graph outputs' into outAcc and
/// their agreement into outAgreement, as quantizedPass() after floatPass() gives them.
Status streamingToggleBatch(const PassContext& c, const QuantPlan& plan, const std::vector<char>& enabled,
                            const CalibrationData& data, int64_t b, const std::vector<NodeId>& cone,
                            std::vector<ErrorAccumulator>& nodeAcc, std::vector<ErrorAccumulator>& outAcc,
                            std::vector<AgreementAccumulator>* outAgreement);

}  // namespace qs
