// The user's quantization configuration (ModelOpt's --nodes_to_exclude, --nodes_to_quantize,
// --op_types_to_exclude, --op_types_to_quantize, --quantize_mode; reference section 6) applied to
// a QuantPlan, and the GUI's per-node toggle.
//
// Node patterns are ECMAScript regular expressions matched from the START of the node name, like
// ModelOpt's re.match: 'conv' matches 'conv1', 'onv' does not, 'conv1$' matches only 'conv1'.
// Op types are compared exactly. Excludes win over the restricting lists. A pattern or op type
// that matches no node gives a warning naming it (PPQ ignores these silently; users lose hours).
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/quant/quant_types.h"
#include "core/util/status.h"

namespace qs {

struct QuantConfig {
  std::vector<std::string> nodesToExclude;     // regexes, prefix match on node names
  std::vector<std::string> nodesToQuantize;    // when non-empty: only matching nodes are quantized
  std::vector<std::string> opTypesToExclude;   // exact op types
  std::vector<std::string> opTypesToQuantize;  // when non-empty: only these op types are quantized
};

/// What applyConfig did.
struct ConfigSummary {
  size_t quantizable = 0;        // nodes the placement rules can quantize
  size_t quantized = 0;          // of those, quantized after the configuration
  std::vector<NodeId> switchedOff;  // quantizable nodes left in float, in node order
};

/// A node-name pattern (RE2 syntax, as applyConfig matches them) that matches exactly `name`.
std::string exactNamePattern(const std::string& name);

/// Applies `cfg` to `plan` (made by planQuantization(g, ...)): every quantizable node is first
/// switched on again, then off when an exclude matches it ("excluded by --nodes-to-exclude
/// 'head.*'", "op type Add excluded by --op-types-to-exclude") or when a non-empty restricting list
/// does not ("not matched by --nodes-to-quantize", "op type Add not in --op-types-to-quantize");
/// both restricting lists apply when both are given. Then pools, Resize and residual Add/Mul are
/// re-evaluated against their neighbours (reason "no quantized neighbour"). Non-quantizable nodes
/// keep their placement reason. `plan.mode` is the one planQuantization set (the placement
/// depends on the mode: re-plan when it changes). Idempotent: applying the same config
/// twice gives the same plan. Appends one warning per pattern/op type matching no node, or
/// matching only nodes that cannot be quantized. Fails with InvalidArgument naming the option and
/// the pattern when a regex does not compile; `plan` is then unchanged.
Result<ConfigSummary> applyConfig(QuantPlan& plan, const Graph& g, const QuantConfig& cfg,
                                  std::vector<std::string>& warnings);

/// The GUI's per-node toggle. Only a quantizable node can be turned on (a request to turn on any
/// other node is ignored); turning a node off gives the reason "excluded by the user". Does not
/// re-evaluate neighbours: use the overload with the graph for that.
void setNodeQuantized(QuantPlan& plan, NodeId node, bool on);
/// As above, then re-evaluates the pools, Resize and residual Add/Mul next to the toggled node
/// (refreshNeighbourDependentNodes).
void setNodeQuantized(QuantPlan& plan, const Graph& g, NodeId node, bool on);

/// The activation points whose node is quantized, in plan order.
std::vector<ActivationPoint> activeActivationPoints(const QuantPlan& plan);
/// The weight points whose node is quantized, in plan order.
std::vector<WeightPoint> activeWeightPoints(const QuantPlan& plan);
/// True when `node` is quantized in `plan` (false for an out-of-range id).
bool isNodeQuantized(const QuantPlan& plan, NodeId node);

}  // namespace qs
