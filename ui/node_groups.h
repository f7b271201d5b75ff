// Groups of a model's nodes for the graph view of large models, without Qt (unit-tested alone).
// Two sources, tried in order:
//  - name scopes: exporters write the module path into node names ("/encoder/layer.3/attention/
//    MatMul", torchvision's "/layer2/layer2.1/conv1/Conv"); every path prefix is a group, a
//    hierarchy. Groups of one node are dissolved into their parent, and a group whose only member is
//    one other group is merged with it ("layer2/layer2.1"); a node without a scope whose outputs
//    are read only inside one group joins that group (the Identity of a shared weight);
//  - repeated blocks, where names carry no scopes: the op-type sequence along the topological order
//    is searched for a period (the shift at which most op types repeat); the longest run that
//    repeats it is cut into blocks of one period each ("block 1", "block 2", ...), one level.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/graph.h"

namespace qs::ui {

struct NodeGroup {
  std::string path;   // scope path ("encoder/layer.3") or "block 12"; unique in its grouping
  std::string label;  // what the collapsed box shows: the path's own components
  int32_t parent = -1;             // -1: a top-level group
  int32_t depth = 0;               // 0 for top-level groups
  std::vector<int32_t> children;   // child groups, in topological order of their first node
  std::vector<NodeId> nodes;       // direct members, in topological order
  int32_t nodeCount = 0;           // members at every depth
};

struct NodeGrouping {
  enum class Source { None, Scopes, RepeatedBlocks };
  Source source = Source::None;
  std::vector<NodeGroup> groups;     // parents before their children
  std::vector<int32_t> roots;        // top-level groups
  std::vector<int32_t> groupOfNode;  // NodeId -> innermost group, or -1 (top level)
  int32_t blockLength = 0;           // RepeatedBlocks: nodes per block

  bool empty() const { return groups.empty(); }
  /// The groups holding `node`, outermost first (empty for a top-level node).
  std::vector<int32_t> ancestorsOf(NodeId node) const;
};

struct GroupingOptions {
  double minScopedFraction = 0.5;  // scopes are used when at least this share of nodes has one
  int32_t minBlockRepeats = 3;     // repeated blocks: at least this many
  int32_t maxBlockLength = 2048;   // longest period tried
  double minPeriodMatch = 0.6;     // share of positions whose op type repeats at the period
};

/// Groups `g`'s nodes (main graph only). Linear in the nodes for scopes; for repeated blocks
/// O(nodes x min(nodes / 3, maxBlockLength)) integer compares. Returns Source::None when neither
/// source finds groups (fewer than two nodes in every scope, no period).
NodeGrouping groupNodes(const Graph& g, const GroupingOptions& options = {});

/// The scope components of a node name: "/encoder/layer.3/attention/MatMul" -> {encoder, layer.3,
/// attention}; a name without '/' has none (the last component is the node's own name).
std::vector<std::string> scopeOf(const std::string& nodeName);

}  // namespace qs::ui
