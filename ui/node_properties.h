// What the inspector lists for a node, a graph input/output, or the whole model.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/ir/graph.h"
#include "core/exec/model_info.h"
#include "ui/property_tree_model.h"

namespace qs::ui {

/// Summary statistics of a constant tensor, over its finite elements.
struct WeightStats {
  int64_t count = 0;      // all elements
  int64_t nonFinite = 0;  // NaN and infinities, left out of the other figures
  double min = 0, max = 0, mean = 0, stddev = 0;
};
WeightStats tensorStats(const Tensor& t);

/// "float32 [1,3,?,?]"-style description of a value's declared type and shape.
QString valueTypeString(const Value& v);

/// A main-graph node. A control-flow node also gets a "Subgraphs" section: per graph attribute its
/// node count, op-type counts and the outer-scope values it reads, and that its nodes run in float.
std::vector<PropertyEntry> nodeProperties(const Model& model, NodeId id);
/// A node inside a subgraph `sub`, at `scope` (as nestedNodes() writes it: "loop/body").
std::vector<PropertyEntry> subgraphNodeProperties(const Graph& sub, NodeId id, const std::string& scope);
/// A subgraph's input, output or outer-scope value.
std::vector<PropertyEntry> subgraphValueProperties(const Graph& sub, ValueId id, const std::string& scope);
std::vector<PropertyEntry> valueProperties(const Model& model, ValueId id);
std::vector<PropertyEntry> modelSummary(const Model& model, const ModelInfo& info);

struct NodeGrouping;
/// A group of a grouped layout: its path, size, child groups, and the worst and mean SNR of its
/// quantized nodes (`snr`, NaN without an analysis).
std::vector<PropertyEntry> groupProperties(const NodeGrouping& grouping, int32_t group, std::pair<double, double> snr);

}  // namespace qs::ui
