// The kernel interface. A kernel is created once per node at load time (attributes parsed
// and checked there, errors naming the node) and its run() is const and re-entrant.
// Kernels never know about calibration or analysis: those observe the executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"
#include "core/util/status.h"

namespace qs {

class KernelRegistry;

/// What a kernel's factory sees: the node, the opset it is used under, and the graph
/// (to read constant inputs at load time where that helps, e.g. packing weights).
struct KernelInit {
  const Node& node;
  int64_t opset;  // version of the node's domain
  const Graph& graph;
  /// ExecutorOptions::libraryKernels: a kernel may hand shapes to a library (oneDNN's Conv).
  bool libraryKernels = false;
  /// The model and registry the executor runs (null outside an executor, e.g. constant folding):
  /// control-flow kernels build executors for their subgraphs from them.
  const Model* model = nullptr;
  const KernelRegistry* registry = nullptr;
  int threads = 1;

  /// The constant tensor feeding input `i`, or nullptr when it is computed at run time.
  const Tensor* constantInput(size_t i) const {
    if (i >= node.inputs.size() || node.inputs[i] == kNoValue) return nullptr;
    const Value& v = graph.value(node.inputs[i]);
    return v.constant && !v.isGraphInput ? &*v.constant : nullptr;
  }
};

/// Runs a function over [0, n) split across the executor's intra-op threads.
/// fn(begin, end) is called for disjoint chunks; chunks are at least `grain` long.
using ParallelFor = std::function<void(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn)>;

struct KernelContext {
  /// One entry per node input; nullptr for an omitted optional input.
  std::span<const Tensor* const> inputs;
  /// One entry per node output, empty on entry; the kernel assigns each present output.
  std::span<Tensor> outputs;
  /// Intra-op threads available to this kernel (>= 1).
  int threads = 1;
  /// The run's cancel token (may be null); kernels that loop long (Loop, Scan) check it.
  const std::atomic<bool>* cancel = nullptr;

  size_t inputCount() const { return inputs.size(); }
  bool hasInput(size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  const Tensor& input(size_t i) const { return *inputs[i]; }
  size_t outputCount() const { return outputs.size(); }
  void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) const;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  /// Computes the node's outputs from its inputs. Must not modify inputs (they may be shared).
  virtual Status run(KernelContext& ctx) const = 0;
};

using KernelFactory = std::function<Result<std::unique_ptr<Kernel>>(const KernelInit&)>;

/// One row of the kernel table: (op, domain, opset range) -> factory.
struct KernelEntry {
  std::string opType;
  std::string domain;     // "" for ai.onnx
  int64_t sinceVersion;   // first opset this entry serves
  int64_t untilVersion;   // last opset this entry serves (inclusive)
  KernelFactory create;
};

/// Reads a node's attributes with type checking; the first error sticks and names the node.
/// Usage: AttrReader a(init); auto axis = a.i("axis", 1); if (!a.ok()) return a.status();
class AttrReader {
 public:
  explicit AttrReader(const KernelInit& init) : m_node(init.node) {}
  int64_t i(const std::string& key, int64_t def);
  float f(const std::string& key, float def);
  std::string s(const std::string& key, const std::string& def);
  std::vector<int64_t> ints(const std::string& key, const std::vector<int64_t>& def = {});
  std::vector<float> floats(const std::string& key, const std::vector<float>& def = {});
  std::vector<std::string> strings(const std::string& key, const std::vector<std::string>& def = {});
  const Tensor* tensor(const std::string& key);
  bool has(const std::string& key) const { return m_node.attr(key) != nullptr; }
  /// Records a failure (e.g. a value out of range), keeping the first one.
  void fail(const std::string& message);
  bool ok() const { return m_status.isOk(); }
  const Status& status() const { return m_status; }

 private:
  const Attribute* get(const std::string& key, Attribute::Type expected);
  const Node& m_node;
  Status m_status;
};

/// A kernel's error: the bare reason ("attribute 'axis' is 5, out of range for rank 4"). Kernels
/// never name the file or the node; the executor adds both, once ("det.onnx: node 'conv1' (Conv): ...").
inline Status kernelError(StatusCode code, std::string message) { return Status(code, std::move(message)); }

/// Normalises a possibly negative axis against `rank`; returns false when out of range.
bool normalizeAxis(int64_t& axis, int64_t rank);

/// Numpy-style broadcast of two shapes; returns false when incompatible.
bool broadcastShapes(const Shape& a, const Shape& b, Shape& out);

/// Helper for simple kernels written as a lambda.
template <class Fn>
class LambdaKernel : public Kernel {
 public:
  explicit LambdaKernel(Fn fn) : m_fn(std::move(fn)) {}
  Status run(KernelContext& ctx) const override { return m_fn(ctx); }

 private:
  Fn m_fn;
};
template <class Fn>
std::unique_ptr<Kernel> makeKernel(Fn fn) {
  return std::make_unique<LambdaKernel<Fn>>(std::move(fn));
}

}  // namespace qs
