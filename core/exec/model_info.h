// A summary of a loaded model: what `quantscope info` prints and the GUI's model page shows.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/exec/kernel_registry.h"
#include "core/ir/graph.h"

namespace qs {

struct ValueDesc {
  std::string name;
  DType dtype = DType::Undefined;
  std::optional<std::vector<Dim>> shape;
};

struct ModelInfo {
  std::string path;
  int64_t irVersion = 0;
  std::string producerName, producerVersion;
  std::map<std::string, int64_t> opsets;
  std::vector<ValueDesc> inputs, outputs;
  std::map<std::string, int64_t> opHistogram;  // op type -> node count
  int64_t nodeCount = 0;
  /// Nodes inside If branches and Loop/Scan bodies (not in nodeCount), by op type.
  int64_t subgraphNodeCount = 0;
  std::map<std::string, int64_t> subgraphOpHistogram;
  int64_t parameterCount = 0;   // elements of all initializers (including folded Constant nodes)
  uint64_t parameterBytes = 0;
  std::vector<std::string> unsupported;  // "Op (nodes 'a', 'b')"
  std::string shapeInference;             // Model::shapeInference
};

/// Summarises `model`; `registry` decides which ops are unsupported.
ModelInfo describeModel(const Model& model, const KernelRegistry& registry);

/// Rows of the constant table that a Gather (axis 0) looks the integer value `v` up in (token ids
/// indexing an embedding), or -1 when no Gather consumes `v` that way.
int64_t lookupTableRows(const Graph& g, ValueId v);

/// "[1,3,batch,?]" or "?" when the rank is unknown.
std::string dimsToString(const std::optional<std::vector<Dim>>& dims);

}  // namespace qs
