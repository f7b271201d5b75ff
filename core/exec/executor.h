// Executes a loaded model on the CPU. Kernels are created once (unsupported ops reported at
// creation, naming the nodes); run() feeds inputs by name, runs nodes in topological order,
// lets an observer see every value, and frees each intermediate after its last consumer
// (an observer that keeps a Tensor copy keeps the buffer alive: buffers are shared).
//
// With ExecutorOptions::rewrites, create() also builds a rewritten copy of the graph
// (core/exec/graph_rewrites.h: constant folding, BatchNormalization and constant affines folded
// into Conv, activations fused into the Conv kernel). run() uses it only when no observer and
// no input transform is attached: an observed or transformed run, runNodes() and runNode()
// always execute the original nodes, so every original node's output is seen exactly as
// without rewrites (fusion is skipped for observed runs rather than re-materialised).
// Unobserved rewritten runs also evaluate shape-only subgraphs (Shape -> Gather -> Concat ->
// Reshape's shape input, ...) once per combination of feed shapes and reuse them afterwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/exec/kernel_registry.h"
#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

/// Sees values as the executor produces them. Calibration, error analysis and profiling are
/// observers: kernels never know about them.
class ExecutionObserver {
 public:
  virtual ~ExecutionObserver() = default;
  /// Called for each fed graph input before any node runs.
  virtual void onGraphInput(ValueId id, const Tensor& value) {}
  /// Called after node `id` ran, once per present output, in output order.
  virtual void onNodeOutput(NodeId node, size_t outputIndex, ValueId id, const Tensor& value) {}
};

/// Rewrites a node's input before the node runs (fake quantization of quantization points).
/// Return nullptr to keep the input; otherwise the returned tensor replaces it for this node.
class InputTransform {
 public:
  virtual ~InputTransform() = default;
  virtual const Tensor* transform(NodeId node, size_t inputIndex, const Tensor& value, Tensor& storage) = 0;
  /// Lets the transform compute node `node` itself from its untransformed `inputs`, e.g. in
  /// integer arithmetic where fake quantization would run a float kernel on dequantized values.
  /// Return true with `outputs` filled (and `status` ok) to skip transform() and the kernel for
  /// this node; false runs them as usual. The default never takes over.
  virtual bool runNode(NodeId node, std::span<const Tensor* const> inputs, std::span<Tensor> outputs, Status& status) {
    return false;
  }
};

struct NodeProfile {
  NodeId node = -1;        // original node id (for a fused node: its Conv)
  double ms = 0;           // wall time of the kernel
  double flops = 0;        // multiply-adds counted as 2 FLOPs; elementwise ops as 1 per output element
  uint64_t outputBytes = 0;
  std::string kernel;            // what ran when it is not the node's own op, e.g. "FusedConv(Conv,BatchNormalization,Relu)"
  std::vector<NodeId> absorbed;  // original nodes fused into this one (rewritten runs)
};

struct RunProfile {
  std::vector<NodeProfile> nodes;  // in execution order
  double totalMs = 0;
  uint64_t peakLiveBytes = 0;      // largest sum of live intermediate tensors during the run
};

struct RunOptions {
  ExecutionObserver* observer = nullptr;
  InputTransform* inputTransform = nullptr;
  RunProfile* profile = nullptr;
  const std::atomic<bool>* cancel = nullptr;  // checked between nodes
};

struct ExecutorOptions {
  int threads = 0;                            // intra-op threads; 0 = all hardware threads
  const KernelRegistry* registry = nullptr;   // nullptr = the built-in kernels
  /// Build the rewritten graph for unobserved run() calls (see the top of this file). Off by
  /// default: the analysis session keeps it off; `quantscope run` turns it on.
  bool rewrites = false;
  /// Let kernels run shapes through a library where it measured faster (oneDNN's convolutions,
  /// core/kernels/conv_dnnl.h). Its sums run in another order, so the analyses (whose figures
  /// are compared to 1e-9 across versions) keep it off; `quantscope run` turns it on.
  bool libraryKernels = false;
  /// With rewrites and libraryKernels: keep chains of oneDNN convolutions in nChw8c, reordering
  /// only at their borders (core/exec/blocked_rewrite.h). Off only for A/B runs (QS_BLOCKED=0).
  bool blockedRegions = true;
};

class Executor {
 public:
  /// Creates every node's kernel. Fails listing all unsupported ops with their node names, or
  /// naming the first node whose attributes are invalid.
  static Result<std::unique_ptr<Executor>> create(std::shared_ptr<const Model> model, const ExecutorOptions& options = {});

  /// Runs the graph. `feeds` are matched to graph inputs by name (overridable initializers may
  /// be fed too); dtype and fixed dims are checked. Returns the graph outputs in declaration order.
  Result<std::vector<Tensor>> run(const std::vector<NamedTensor>& feeds, const RunOptions& options = {}) const;

  /// A value table indexed by ValueId holding the constants and the checked feeds; the other
  /// entries are empty. Used with runNodes() by analyses that keep every activation.
  Result<std::vector<Tensor>> makeValueTable(const std::vector<NamedTensor>& feeds) const;

  /// Runs `order` (node ids in topological order, any subset) over `values` (indexed by
  /// ValueId): inputs are read from the table and outputs written to it; nothing is freed.
  /// The observer, input transform and cancel token of `options` apply; profile is ignored.
  Status runNodes(std::span<const NodeId> order, std::vector<Tensor>& values, const RunOptions& options = {}) const;

  /// Runs one node on `inputs` (one per node input, nullptr when omitted); returns its outputs.
  Result<std::vector<Tensor>> runNode(NodeId id, std::span<const Tensor* const> inputs) const;
  /// The same through `transform` (may be null): its runNode() if it takes the node over, else
  /// the kernel on the inputs its transform() rewrites. What runNodes() does for each node.
  Result<std::vector<Tensor>> runNode(NodeId id, std::span<const Tensor* const> inputs, InputTransform* transform) const;

  const Model& model() const { return *m_model; }
  std::shared_ptr<const Model> modelPtr() const { return m_model; }
  int threads() const { return m_threads; }
  /// True when unobserved run() calls use a rewritten graph.
  bool rewritesActive() const { return m_fast != nullptr; }
  /// What the rewrites did ("" when off): counts of folded and fused nodes.
  const std::string& rewriteSummary() const { return m_rewriteSummary; }
  /// FLOP estimate of one node given its input and output tensors (used by profiles).
  static double estimateFlops(const Node& node, std::span<const Tensor* const> inputs, std::span<const Tensor> outputs);

 private:
  Executor() = default;
  Status checkFeeds(const std::vector<NamedTensor>& feeds, std::vector<const Tensor*>& byValue) const;

  // A graph with its kernels: the original, or the rewritten one.
  struct Plan {
    std::shared_ptr<const Model> model;
    std::vector<std::unique_ptr<Kernel>> kernels;  // indexed by the plan's NodeId
    std::vector<int32_t> useCount;                 // consumer slots + graph-output uses, per value
    std::vector<NodeId> origin;                    // rewritten plans: original node per node
    std::vector<std::vector<NodeId>> absorbed;     // rewritten plans: original nodes fused into each node
    // Rewritten plans: nodes whose outputs depend only on the shapes of the feeds (Shape and what
    // computes from it and constants), evaluated once per feed-shape key and then reused.
    std::vector<char> shapeOnly;
    bool hasShapeOnly = false;
    mutable std::mutex cacheMutex;
    mutable std::map<std::vector<int64_t>, std::vector<std::pair<ValueId, Tensor>>> shapeCache;
  };
  static void markShapeOnly(Plan& plan);
  static Status createKernels(Plan& plan, const KernelRegistry& registry, bool libraryKernels, int threads);
  Result<std::vector<Tensor>> runPlan(const Plan& plan, const std::vector<NamedTensor>& feeds, const RunOptions& options) const;

  std::shared_ptr<const Model> m_model;
  std::vector<std::unique_ptr<Kernel>> m_kernels;  // indexed by NodeId
  std::vector<int32_t> m_useCount;                 // consumer slots + graph-output uses, per value
  int m_threads = 1;
  std::unique_ptr<Plan> m_fast;                    // rewritten graph; nullptr when rewrites are off
  std::string m_rewriteSummary;
};

/// Lists the ops of `model` that `registry` cannot run: "Foo (nodes 'a', 'b')", one per op type.
std::vector<std::string> unsupportedOps(const Model& model, const KernelRegistry& registry);

}  // namespace qs
