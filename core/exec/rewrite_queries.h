// Graph queries the inference graph rewrites share (graph_rewrites.cpp, neck_rewrites.cpp,
// residual_rewrites.cpp, blocked_rewrite.cpp). Internal to core/exec: not installed, not part of the
// core's API.
#pragma once

#include <cstdint>

#include "core/ir/graph.h"

namespace qs::rewrite {

/// The constant `v` holds when it cannot be fed at run time (not a graph input, not overridable);
/// nullptr otherwise, and for kNoValue. Owned by the graph.
inline const Tensor* fixedConstant(const Graph& g, ValueId v) {
  if (v == kNoValue) return nullptr;
  const Value& val = g.value(v);
  if (!val.constant || val.isGraphInput || val.isOverridable) return nullptr;
  return &*val.constant;
}

/// The opset `m` imports for `n`'s domain; 1 when it imports none.
inline int64_t opsetOf(const Model& m, const Node& n) {
  auto it = m.opsets.find(n.domain);
  return it == m.opsets.end() ? 1 : it->second;
}

}  // namespace qs::rewrite
