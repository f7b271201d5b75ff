#include "core/ir/graph.h"

#include <deque>

namespace qs {

std::string attributeTypeName(Attribute::Type t) {
  switch (t) {
    case Attribute::Type::Float: return "float";
    case Attribute::Type::Int: return "int";
    case Attribute::Type::String: return "string";
    case Attribute::Type::Tensor: return "tensor";
    case Attribute::Type::Graph: return "graph";
    case Attribute::Type::Floats: return "floats";
    case Attribute::Type::Ints: return "ints";
    case Attribute::Type::Strings: return "strings";
    case Attribute::Type::Tensors: return "tensors";
    case Attribute::Type::Graphs: return "graphs";
    default: return "undefined";
  }
}

std::vector<NestedNode> nestedNodes(const Graph& g) {
  std::vector<NestedNode> out;
  // An explicit stack of (graph, scope, top-level node); the loader bounds the nesting depth.
  struct Frame {
    const Graph* graph;
    std::string scope;
    NodeId top;
  };
  auto push = [](std::vector<Frame>& stack, const Node& n, const std::string& scope, NodeId top) {
    std::vector<Frame> mine;
    for (const auto& [key, a] : n.attributes) {
      const std::string where = (scope.empty() ? "" : scope + "/") + n.name + "/" + key;
      if (a.g) mine.push_back({a.g.get(), where, top});
      for (size_t k = 0; k < a.graphs.size(); ++k) mine.push_back({a.graphs[k].get(), where + "[" + std::to_string(k) + "]", top});
    }
    stack.insert(stack.end(), mine.rbegin(), mine.rend());
  };
  for (NodeId id = 0; id < (NodeId)g.nodes.size(); ++id) {
    std::vector<Frame> stack;
    push(stack, g.nodes[(size_t)id], "", id);
    while (!stack.empty()) {
      Frame f = std::move(stack.back());
      stack.pop_back();
      std::vector<Frame> inner;
      for (const Node& n : f.graph->nodes) {
        out.push_back({f.scope, &n, f.top});
        push(inner, n, f.scope, f.top);
      }
      stack.insert(stack.end(), inner.rbegin(), inner.rend());
    }
  }
  return out;
}

std::string Node::label() const { return "node '" + name + "' (" + opType + ")"; }

ValueId Graph::valueId(const std::string& n) {
  auto it = valueByName.find(n);
  if (it != valueByName.end()) return it->second;
  ValueId id = (ValueId)values.size();
  values.emplace_back();
  values.back().name = n;
  valueByName.emplace(n, id);
  return id;
}

ValueId Graph::findValue(const std::string& n) const {
  auto it = valueByName.find(n);
  return it == valueByName.end() ? kNoValue : it->second;
}

Status Graph::finalize(const std::string& where) {
  for (auto& v : values) {
    v.producer = -1;
    v.consumers.clear();
  }
  for (NodeId n = 0; n < (NodeId)nodes.size(); ++n) {
    for (ValueId out : nodes[(size_t)n].outputs) {
      if (out == kNoValue) continue;
      Value& v = values[(size_t)out];
      if (v.producer >= 0) {
        return invalidModel(where + ": " + nodes[(size_t)n].label() + ": output '" + v.name +
                            "' is already produced by " + nodes[(size_t)v.producer].label());
      }
      if (v.isGraphInput || v.constant || v.isOuterRef) {
        return invalidModel(where + ": " + nodes[(size_t)n].label() + ": output '" + v.name +
                            "' is also a graph input or initializer");
      }
      v.producer = n;
    }
  }
  std::vector<int32_t> pending(nodes.size(), 0);
  for (NodeId n = 0; n < (NodeId)nodes.size(); ++n) {
    for (const ValueId& in : nodes[(size_t)n].inputs) {
      if (in == kNoValue) continue;
      Value& v = values[(size_t)in];
      if (v.producer < 0 && !v.isGraphInput && !v.constant && !v.isOuterRef) {
        const Node& node = nodes[(size_t)n];
        if (&in - node.inputs.data() >= (ptrdiff_t)node.explicitInputCount()) {
          return invalidModel(where + ": " + node.label() + ": its subgraph reads '" + v.name +
                              "', which no node, input or initializer of an enclosing scope defines");
        }
        return invalidModel(where + ": " + node.label() + ": input '" + v.name +
                            "' is not produced by any node, graph input or initializer");
      }
      v.consumers.push_back(n);
      if (v.producer >= 0) ++pending[(size_t)n];
    }
  }
  for (ValueId out : outputs) {
    const Value& v = values[(size_t)out];
    if (v.producer < 0 && !v.isGraphInput && !v.constant && !v.isOuterRef) {
      return invalidModel(where + ": graph output '" + v.name + "' is not produced by any node");
    }
  }
  // Kahn's algorithm, keeping file order among ready nodes for stable, readable schedules.
  topoOrder.clear();
  topoOrder.reserve(nodes.size());
  std::deque<NodeId> ready;
  for (NodeId n = 0; n < (NodeId)nodes.size(); ++n)
    if (pending[(size_t)n] == 0) ready.push_back(n);
  while (!ready.empty()) {
    NodeId n = ready.front();
    ready.pop_front();
    topoOrder.push_back(n);
    for (ValueId out : nodes[(size_t)n].outputs) {
      if (out == kNoValue) continue;
      for (NodeId c : values[(size_t)out].consumers)
        if (--pending[(size_t)c] == 0) ready.push_back(c);
    }
  }
  if (topoOrder.size() != nodes.size()) {
    // Walk back through unscheduled producers until a node repeats: that node lies on a cycle.
    NodeId n = 0;
    while (pending[(size_t)n] == 0) ++n;
    std::vector<char> seen(nodes.size(), 0);
    while (!seen[(size_t)n]) {
      seen[(size_t)n] = 1;
      for (ValueId in : nodes[(size_t)n].inputs) {
        if (in == kNoValue) continue;
        NodeId p = values[(size_t)in].producer;
        if (p >= 0 && pending[(size_t)p] > 0) {
          n = p;
          break;
        }
      }
    }
    return invalidModel(where + ": " + nodes[(size_t)n].label() + ": the graph has a cycle through this node");
  }
  return Status::ok();
}

}  // namespace qs
