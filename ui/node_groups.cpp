#include "ui/node_groups.h"

#include <algorithm>
#include <unordered_map>

namespace qs::ui {

std::vector<std::string> scopeOf(const std::string& nodeName) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= nodeName.size()) {
    const size_t slash = nodeName.find('/', start);
    const size_t end = slash == std::string::npos ? nodeName.size() : slash;
    if (end > start) parts.push_back(nodeName.substr(start, end - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  // The last component names the node itself; a name without '/' has no scope.
  if (nodeName.find('/') == std::string::npos || parts.empty()) return {};
  parts.pop_back();
  return parts;
}

std::vector<int32_t> NodeGrouping::ancestorsOf(NodeId node) const {
  std::vector<int32_t> out;
  if (node < 0 || (size_t)node >= groupOfNode.size()) return out;
  for (int32_t g = groupOfNode[(size_t)node]; g >= 0; g = groups[(size_t)g].parent) out.push_back(g);
  std::reverse(out.begin(), out.end());
  return out;
}

namespace {

struct RawGroup {
  std::string name, path;
  int32_t parent = -1;
  std::vector<int32_t> children;
  std::vector<NodeId> nodes;
  int32_t nodeCount = 0;
};

// The trie of scope paths, pruned: single-node groups dissolve into their parent, a group holding
// one group and nothing else merges with it.
class ScopeGrouper {
 public:
  ScopeGrouper(const Graph& g, std::vector<RawGroup> raw, NodeGrouping* out) : m_raw(std::move(raw)), m_out(out) {
    m_position.assign(g.nodes.size(), 0);
    for (size_t k = 0; k < g.topoOrder.size(); ++k) m_position[(size_t)g.topoOrder[k]] = (int32_t)k;
  }

  void emit(int32_t raw, int32_t parent, const std::string& prefix) {
    const RawGroup& r = m_raw[(size_t)raw];
    if (r.nodeCount < 2) {
      collectInto(raw, parent);
      return;
    }
    if (r.nodes.empty() && r.children.size() == 1) {
      emit(r.children[0], parent, prefix + r.name + "/");
      return;
    }
    const int32_t id = (int32_t)m_out->groups.size();
    NodeGroup grp;
    grp.path = r.path;
    grp.label = prefix + r.name;
    grp.parent = parent;
    grp.depth = parent < 0 ? 0 : m_out->groups[(size_t)parent].depth + 1;
    grp.nodeCount = r.nodeCount;
    m_out->groups.push_back(std::move(grp));
    if (parent < 0) m_out->roots.push_back(id);
    else m_out->groups[(size_t)parent].children.push_back(id);
    for (NodeId n : r.nodes) assign(n, id);
    for (int32_t c : r.children) emit(c, id, "");
    auto& nodes = m_out->groups[(size_t)id].nodes;
    std::sort(nodes.begin(), nodes.end(), [&](NodeId a, NodeId b) { return m_position[(size_t)a] < m_position[(size_t)b]; });
  }

 private:
  void collectInto(int32_t raw, int32_t parent) {
    for (NodeId n : m_raw[(size_t)raw].nodes) assign(n, parent);
    for (int32_t c : m_raw[(size_t)raw].children) collectInto(c, parent);
  }
  void assign(NodeId n, int32_t group) {
    m_out->groupOfNode[(size_t)n] = group;
    if (group >= 0) m_out->groups[(size_t)group].nodes.push_back(n);
  }

  std::vector<RawGroup> m_raw;
  NodeGrouping* m_out;
  std::vector<int32_t> m_position;
};

bool groupByScopes(const Graph& g, const GroupingOptions& opt, NodeGrouping* out) {
  std::vector<RawGroup> raw;
  std::vector<int32_t> rawRoots;
  std::unordered_map<std::string, int32_t> byPath;
  size_t scoped = 0;
  std::vector<int32_t> rawOf(g.nodes.size(), -1);
  for (NodeId n : g.topoOrder) {
    const std::vector<std::string> scope = scopeOf(g.nodes[(size_t)n].name);
    if (scope.empty()) continue;
    ++scoped;
    int32_t parent = -1;
    std::string path;
    for (const std::string& part : scope) {
      path += (path.empty() ? "" : "/") + part;
      auto [it, added] = byPath.try_emplace(path, (int32_t)raw.size());
      if (added) {
        RawGroup r;
        r.name = part;
        r.path = path;
        r.parent = parent;
        raw.push_back(std::move(r));
        if (parent < 0) rawRoots.push_back(it->second);
        else raw[(size_t)parent].children.push_back(it->second);
      }
      parent = it->second;
    }
    raw[(size_t)parent].nodes.push_back(n);
    rawOf[(size_t)n] = parent;
    for (int32_t a = parent; a >= 0; a = raw[(size_t)a].parent) ++raw[(size_t)a].nodeCount;
  }
  // A node without a scope whose outputs are read only inside one group joins it (exporters' Identity
  // of shared weights, shape arithmetic feeding one block); last first, so that chains of them follow.
  auto chainOf = [&](int32_t r) {
    std::vector<int32_t> c;
    for (; r >= 0; r = raw[(size_t)r].parent) c.push_back(r);
    std::reverse(c.begin(), c.end());
    return c;
  };
  for (size_t k = g.topoOrder.size(); k-- > 0;) {
    const NodeId n = g.topoOrder[k];
    if (rawOf[(size_t)n] >= 0) continue;
    std::vector<int32_t> common;
    bool first = true, ok = true;
    for (ValueId v : g.nodes[(size_t)n].outputs) {
      if (v == kNoValue) continue;
      if (g.value(v).isGraphOutput) ok = false;
      for (NodeId c : g.value(v).consumers) {
        if (rawOf[(size_t)c] < 0) ok = false;
        if (!ok) break;
        const std::vector<int32_t> chain = chainOf(rawOf[(size_t)c]);
        if (first) common = chain, first = false;
        size_t d = 0;
        while (d < common.size() && d < chain.size() && common[d] == chain[d]) ++d;
        common.resize(d);
      }
    }
    if (!ok || common.empty()) continue;
    int32_t joined = common.back();
    // Not into a scope of one node (a module's own "relu"), which would then stay a group of two.
    if (raw[(size_t)joined].children.empty() && raw[(size_t)joined].nodeCount == 1 && raw[(size_t)joined].parent >= 0)
      joined = raw[(size_t)joined].parent;
    raw[(size_t)joined].nodes.push_back(n);
    rawOf[(size_t)n] = joined;
    ++scoped;
    for (int32_t a = joined; a >= 0; a = raw[(size_t)a].parent) ++raw[(size_t)a].nodeCount;
  }
  if (g.nodes.empty() || (double)scoped < opt.minScopedFraction * (double)g.nodes.size()) return false;
  ScopeGrouper grouper(g, std::move(raw), out);
  for (int32_t r : rawRoots) grouper.emit(r, -1, "");
  return !out->groups.empty();
}

bool groupByRepeatedBlocks(const Graph& g, const GroupingOptions& opt, NodeGrouping* out) {
  const size_t n = g.topoOrder.size();
  const size_t repeats = (size_t)std::max(2, opt.minBlockRepeats);
  if (n < 2 * repeats) return false;
  std::unordered_map<std::string, int32_t> typeId;
  std::vector<int32_t> s(n);
  for (size_t k = 0; k < n; ++k)
    s[k] = typeId.try_emplace(g.nodes[(size_t)g.topoOrder[k]].opType, (int32_t)typeId.size()).first->second;
  if (typeId.size() < 2) return false;  // a chain of one op has no blocks worth drawing
  // The period: the shift at which most op types repeat (a multiple of the period matches fewer
  // positions, as it has fewer to compare).
  const size_t maxL = std::min(n / repeats, (size_t)std::max(2, opt.maxBlockLength));
  size_t bestL = 0, bestScore = 0;
  for (size_t L = 2; L <= maxL; ++L) {
    size_t score = 0;
    for (size_t i = 0; i + L < n; ++i) score += s[i] == s[i + L];
    if (score > bestScore) bestScore = score, bestL = L;
  }
  if (bestL == 0 || (double)bestScore < opt.minPeriodMatch * (double)(n - bestL)) return false;
  // The longest run that repeats at the period.
  size_t runStart = 0, runLength = 0;
  for (size_t i = 0; i + bestL < n;) {
    if (s[i] != s[i + bestL]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j + bestL < n && s[j] == s[j + bestL]) ++j;
    if (j - i > runLength) runStart = i, runLength = j - i;
    i = j;
  }
  const size_t blocks = (runLength + bestL) / bestL;
  if (blocks < repeats) return false;
  // A block must hold more than one op type, or it is a run of one op.
  std::vector<char> seen(typeId.size(), 0);
  size_t distinct = 0;
  for (size_t k = runStart; k < runStart + bestL; ++k) distinct += !seen[(size_t)s[k]]++;
  if (distinct < 2) return false;
  for (size_t b = 0; b < blocks; ++b) {
    NodeGroup grp;
    grp.path = grp.label = "block " + std::to_string(b + 1);
    for (size_t k = runStart + b * bestL; k < runStart + (b + 1) * bestL; ++k) {
      grp.nodes.push_back(g.topoOrder[k]);
      out->groupOfNode[(size_t)g.topoOrder[k]] = (int32_t)b;
    }
    grp.nodeCount = (int32_t)grp.nodes.size();
    out->roots.push_back((int32_t)b);
    out->groups.push_back(std::move(grp));
  }
  out->blockLength = (int32_t)bestL;
  return true;
}

}  // namespace

NodeGrouping groupNodes(const Graph& g, const GroupingOptions& options) {
  NodeGrouping out;
  out.groupOfNode.assign(g.nodes.size(), -1);
  if (groupByScopes(g, options, &out)) {
    out.source = NodeGrouping::Source::Scopes;
    return out;
  }
  out = NodeGrouping();
  out.groupOfNode.assign(g.nodes.size(), -1);
  if (groupByRepeatedBlocks(g, options, &out)) {
    out.source = NodeGrouping::Source::RepeatedBlocks;
    return out;
  }
  out = NodeGrouping();
  out.groupOfNode.assign(g.nodes.size(), -1);
  return out;
}

}  // namespace qs::ui
