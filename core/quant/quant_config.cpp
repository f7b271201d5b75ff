#include "core/quant/quant_config.h"

#include <re2/re2.h>

#include <memory>
#include <unordered_set>

#include "core/quant/placement.h"

namespace qs {

namespace {

struct CompiledPattern {
  std::string text;
  std::shared_ptr<const RE2> re;
  size_t matched = 0;             // nodes matched
  size_t matchedQuantizable = 0;  // of those, quantizable
};

// RE2 rather than std::regex: linear-time matching, so a pattern such as "r+*+++...+" from a
// saved config cannot take exponential time (the quant-files fuzzer found one taking > 10 s).
// Its syntax is Python's `re` without backreferences and lookaround, which is what ModelOpt's
// patterns are written in.
Status compile(const std::vector<std::string>& patterns, const char* option, std::vector<CompiledPattern>& out) {
  RE2::Options o;
  o.set_log_errors(false);
  for (const auto& p : patterns) {
    auto re = std::make_shared<const RE2>(p, o);
    if (!re->ok())
      return invalidArgument(std::string("invalid regular expression '") + p + "' in " + option + ": " + re->error());
    out.push_back({p, std::move(re), 0, 0});
  }
  return Status::ok();
}

// ModelOpt's re.match: anchored at the start of the name, free at the end.
bool prefixMatch(const RE2& re, const std::string& name) {
  return re.Match(name, 0, name.size(), RE2::ANCHOR_START, nullptr, 0);
}

void warnUnmatched(const std::vector<CompiledPattern>& ps, const char* option, std::vector<std::string>& warnings) {
  for (const auto& p : ps) {
    if (p.matched == 0)
      warnings.push_back(std::string(option) + " '" + p.text + "' matches no node name (patterns match from the start of the name)");
    else if (p.matchedQuantizable == 0)
      warnings.push_back(std::string(option) + " '" + p.text + "' matches " + std::to_string(p.matched) +
                         " node(s), none of which can be quantized");
  }
}

}  // namespace

std::string exactNamePattern(const std::string& name) { return RE2::QuoteMeta(name) + "$"; }

Result<ConfigSummary> applyConfig(QuantPlan& plan, const Graph& g, const QuantConfig& cfg,
                                  std::vector<std::string>& warnings) {
  if (plan.nodes.size() != g.nodes.size())
    return invalidArgument("applyConfig: the plan has " + std::to_string(plan.nodes.size()) +
                           " nodes but graph '" + g.name + "' has " + std::to_string(g.nodes.size()));
  std::vector<CompiledPattern> exclude, restrict;
  QS_RETURN_IF_ERROR(compile(cfg.nodesToExclude, "--nodes-to-exclude", exclude));
  QS_RETURN_IF_ERROR(compile(cfg.nodesToQuantize, "--nodes-to-quantize", restrict));
  const std::unordered_set<std::string> excludeOps(cfg.opTypesToExclude.begin(), cfg.opTypesToExclude.end());
  const std::unordered_set<std::string> onlyOps(cfg.opTypesToQuantize.begin(), cfg.opTypesToQuantize.end());

  // Every pattern is tried on every node (not only until the first hit) so that the warnings
  // about patterns that match nothing are exact.
  for (NodeId n = 0; n < (NodeId)g.nodes.size(); ++n) {
    const Node& node = g.nodes[(size_t)n];
    NodeQuantState& st = plan.nodes[(size_t)n];
    std::string reason;
    for (auto& p : exclude) {
      if (!prefixMatch(*p.re, node.name)) continue;
      ++p.matched;
      if (st.quantizable) ++p.matchedQuantizable;
      if (reason.empty()) reason = "excluded by --nodes-to-exclude '" + p.text + "'";
    }
    if (reason.empty() && excludeOps.count(node.opType))
      reason = "op type " + node.opType + " excluded by --op-types-to-exclude";
    bool restrictHit = restrict.empty();
    for (auto& p : restrict) {
      if (!prefixMatch(*p.re, node.name)) continue;
      ++p.matched;
      if (st.quantizable) ++p.matchedQuantizable;
      restrictHit = true;
    }
    if (reason.empty() && !restrictHit) reason = "not matched by --nodes-to-quantize";
    if (reason.empty() && !onlyOps.empty() && !onlyOps.count(node.opType))
      reason = "op type " + node.opType + " not in --op-types-to-quantize";
    if (!st.quantizable) continue;  // keeps its placement reason
    st.quantized = reason.empty();
    st.reason = reason;
  }

  refreshNeighbourDependentNodes(plan, g);

  warnUnmatched(exclude, "--nodes-to-exclude", warnings);
  warnUnmatched(restrict, "--nodes-to-quantize", warnings);
  auto warnOps = [&](const std::vector<std::string>& ops, const char* option) {
    for (const auto& t : ops) {
      size_t matched = 0, quantizable = 0;
      for (NodeId n = 0; n < (NodeId)g.nodes.size(); ++n) {
        if (g.nodes[(size_t)n].opType != t) continue;
        ++matched;
        if (plan.nodes[(size_t)n].quantizable) ++quantizable;
      }
      if (matched == 0)
        warnings.push_back(std::string(option) + " '" + t + "' matches no node (op types are case-sensitive)");
      else if (quantizable == 0)
        warnings.push_back(std::string(option) + " '" + t + "' matches " + std::to_string(matched) +
                           " node(s), none of which can be quantized");
    }
  };
  warnOps(cfg.opTypesToExclude, "--op-types-to-exclude");
  warnOps(cfg.opTypesToQuantize, "--op-types-to-quantize");

  ConfigSummary sum;
  for (NodeId n = 0; n < (NodeId)plan.nodes.size(); ++n) {
    const NodeQuantState& st = plan.nodes[(size_t)n];
    if (!st.quantizable) continue;
    ++sum.quantizable;
    if (st.quantized) ++sum.quantized;
    else sum.switchedOff.push_back(n);
  }
  return sum;
}

void setNodeQuantized(QuantPlan& plan, NodeId node, bool on) {
  if (node < 0 || (size_t)node >= plan.nodes.size()) return;
  NodeQuantState& st = plan.nodes[(size_t)node];
  if (!st.quantizable) return;  // keeps its placement reason; cannot be turned on
  st.quantized = on;
  st.reason = on ? std::string() : std::string("excluded by the user");
}

void setNodeQuantized(QuantPlan& plan, const Graph& g, NodeId node, bool on) {
  setNodeQuantized(plan, node, on);
  refreshNeighbourDependentNodes(plan, g);
}

std::vector<ActivationPoint> activeActivationPoints(const QuantPlan& plan) {
  std::vector<ActivationPoint> r;
  for (const auto& p : plan.activations)
    if (isNodeQuantized(plan, p.node)) r.push_back(p);
  return r;
}

std::vector<WeightPoint> activeWeightPoints(const QuantPlan& plan) {
  std::vector<WeightPoint> r;
  for (const auto& p : plan.weights)
    if (isNodeQuantized(plan, p.node)) r.push_back(p);
  return r;
}

bool isNodeQuantized(const QuantPlan& plan, NodeId node) {
  return node >= 0 && (size_t)node < plan.nodes.size() && plan.nodes[(size_t)node].quantized;
}

}  // namespace qs
