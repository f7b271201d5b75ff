// Graph IR: values (tensor edges), nodes, initializers, topological order and the
// producer/consumer maps. Built by the ONNX loader; owns no protobuf types.
// Every walk over the graph is iterative: 100k-node chains are fine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir/tensor.h"
#include "core/util/status.h"

namespace qs {

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNoValue = -1;

/// One dimension of a declared shape: a fixed size, a symbolic name, or unknown.
struct Dim {
  int64_t value = -1;  // -1 when symbolic or unknown
  std::string symbol;  // e.g. "batch"; empty when fixed or unknown
  bool isFixed() const { return value >= 0; }
};

struct Value {
  std::string name;
  DType dtype = DType::Undefined;   // declared or inferred; Undefined when unknown
  std::optional<std::vector<Dim>> shape;  // declared or inferred; nullopt when rank unknown
  NodeId producer = -1;             // -1 for graph inputs and initializers
  std::vector<NodeId> consumers;    // one entry per consuming input slot
  bool isGraphInput = false;        // a real input (not an initializer)
  bool isGraphOutput = false;
  std::optional<Tensor> constant;   // initializer data
  bool isOverridable = false;       // an initializer also listed as a graph input: may be fed
  bool fromConstantNode = false;    // the constant came from a folded Constant node
  bool isOuterRef = false;          // subgraphs: read from an enclosing scope (fed by the control-flow node)
};

struct Graph;

struct Attribute {
  enum class Type { Undefined, Float, Int, String, Tensor, Graph, Floats, Ints, Strings, Tensors, Graphs };
  Type type = Type::Undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::shared_ptr<const Graph> g;
  std::vector<std::shared_ptr<const Graph>> graphs;
};

std::string attributeTypeName(Attribute::Type t);

struct Node {
  std::string name;
  std::string opType;
  std::string domain;  // "" for the default ONNX domain
  std::vector<ValueId> inputs;   // kNoValue for an omitted optional input
  std::vector<ValueId> outputs;  // kNoValue for an omitted optional output
  std::map<std::string, Attribute> attributes;
  /// Control-flow nodes (If, Loop, Scan): the last `implicitInputs` entries of `inputs` are the
  /// values their subgraphs read from this or an enclosing scope (as ONNX Runtime's implicit
  /// inputs), so that ordering, lifetimes and analysis cones see the dependency. They are not
  /// in the file's node; the kernel feeds them to the subgraphs by name.
  int32_t implicitInputs = 0;
  size_t explicitInputCount() const { return inputs.size() - (size_t)implicitInputs; }

  const Attribute* attr(const std::string& key) const {
    auto it = attributes.find(key);
    return it == attributes.end() ? nullptr : &it->second;
  }
  /// "'name' (OpType)" for messages.
  std::string label() const;
};

struct Graph {
  std::string name;
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<ValueId> inputs;   // real graph inputs, in declaration order
  std::vector<ValueId> outputs;  // graph outputs, in declaration order
  /// Subgraphs only: values read from an enclosing scope (Value::isOuterRef), in first-use order.
  std::vector<ValueId> outerRefs;
  std::unordered_map<std::string, ValueId> valueByName;
  std::vector<NodeId> topoOrder;  // filled by finalize()

  /// Returns the id of `name`, creating a value when absent.
  ValueId valueId(const std::string& name);
  /// Finds a value id by name; kNoValue when absent.
  ValueId findValue(const std::string& name) const;
  const Value& value(ValueId id) const { return values[(size_t)id]; }
  Value& value(ValueId id) { return values[(size_t)id]; }

  /// Rebuilds producers, consumers and the topological order (Kahn, iterative).
  /// Fails naming a node when a value is produced twice, an input is never produced,
  /// or the nodes form a cycle. `where` prefixes messages (usually the file path).
  Status finalize(const std::string& where);
};

/// A node inside a subgraph (If branches, Loop and Scan bodies), found by nestedNodes().
struct NestedNode {
  std::string scope;  // where it sits: "loop/body", "loop/body/branch/then_branch"
  const Node* node = nullptr;
  NodeId topNode = -1;  // the control-flow node of the main graph that holds it
};

/// Every node inside the subgraphs of `g`: per main-graph node, its subgraphs' nodes in order, each
/// subgraph followed by the subgraphs nested in it.
std::vector<NestedNode> nestedNodes(const Graph& g);

struct Model {
  std::string path;  // file it was loaded from, for messages
  int64_t irVersion = 0;
  std::string producerName;
  std::string producerVersion;
  std::string domain;
  std::string docString;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  std::vector<std::pair<std::string, std::string>> metadata;
  /// What ONNX's shape inference did at load: "done", "not run (...)", or why it gave nothing,
  /// e.g. "crashed (signal SIGSEGV)" (it runs in a child process; shapes then come from execution).
  std::string shapeInference;
  Graph graph;

  int64_t defaultOpset() const {
    auto it = opsets.find("");
    if (it != opsets.end()) return it->second;
    it = opsets.find("ai.onnx");
    return it == opsets.end() ? 0 : it->second;
  }
};

}  // namespace qs
