#include "ui/node_properties.h"

#include <cmath>

#include "ui/node_groups.h"
#include "ui/snr_scale.h"

#include <QFileInfo>
#include <QLocale>
#include <algorithm>
#include <cmath>
#include <map>

#include "ui/graph_layout.h"

namespace qs::ui {

namespace {

QString qstr(const std::string& s) { return QString::fromStdString(s); }
QString num(double v) { return QString::number(v, 'g', 6); }

QString tensorSummary(const Tensor& t) {
  return qstr(dtypeName(t.dtype())) + QStringLiteral(" ") + qstr(shapeToString(t.shape()));
}

template <class T>
QString listString(const std::vector<T>& v, size_t maxShown = 16) {
  QStringList parts;
  for (size_t i = 0; i < v.size() && i < maxShown; ++i) {
    if constexpr (std::is_same_v<T, std::string>) parts << qstr(v[i]);
    else parts << num((double)v[i]);
  }
  QString s = QStringLiteral("[") + parts.join(QStringLiteral(", "));
  if (v.size() > maxShown) s += QStringLiteral(", … (%1 values)").arg(v.size());
  return s + QStringLiteral("]");
}

QString attributeValue(const Attribute& a) {
  switch (a.type) {
    case Attribute::Type::Float: return num(a.f);
    case Attribute::Type::Int: return QString::number(a.i);
    case Attribute::Type::String: return QStringLiteral("\"%1\"").arg(qstr(a.s));
    case Attribute::Type::Tensor: return tensorSummary(a.t);
    case Attribute::Type::Graph:
      return a.g ? QStringLiteral("graph '%1' (%2 nodes)").arg(qstr(a.g->name)).arg(a.g->nodes.size())
                 : QStringLiteral("graph");
    case Attribute::Type::Floats: return listString(a.floats);
    case Attribute::Type::Ints: return listString(a.ints);
    case Attribute::Type::Strings: return listString(a.strings);
    case Attribute::Type::Tensors: {
      QStringList parts;
      for (const Tensor& t : a.tensors) parts << tensorSummary(t);
      return QStringLiteral("[") + parts.join(QStringLiteral(", ")) + QStringLiteral("]");
    }
    case Attribute::Type::Graphs: return QStringLiteral("graphs");
    default: return QStringLiteral("(undefined)");
  }
}

// Rows describing a constant tensor: its statistics, and its values when there are few.
std::vector<PropertyEntry> weightRows(const Value& v) {
  const Tensor& t = *v.constant;
  std::vector<PropertyEntry> rows;
  rows.push_back({QStringLiteral("Shape"), qstr(shapeToString(t.shape())), {}});
  rows.push_back({QStringLiteral("Type"), qstr(dtypeName(t.dtype())), {}});
  rows.push_back({QStringLiteral("Elements"), QLocale::c().toString((qlonglong)t.numel()), {}});
  if (v.fromConstantNode) rows.push_back({QStringLiteral("Origin"), QStringLiteral("Constant node (folded)"), {}});
  if (v.isOverridable) rows.push_back({QStringLiteral("Overridable"), QStringLiteral("also a graph input"), {}});
  if (!dtypeSupported(t.dtype()) || t.dtype() == DType::String || t.numel() == 0) return rows;
  if (t.numel() <= 16) {
    std::vector<double> values;
    for (int64_t i = 0; i < t.numel(); ++i) values.push_back(t.valueAsDouble(i));
    rows.push_back({QStringLiteral("Values"), listString(values), {}});
  }
  const WeightStats s = tensorStats(t);
  rows.push_back({QStringLiteral("Min"), num(s.min), {}});
  rows.push_back({QStringLiteral("Max"), num(s.max), {}});
  rows.push_back({QStringLiteral("Mean"), num(s.mean), {}});
  rows.push_back({QStringLiteral("Std"), num(s.stddev), {}});
  if (s.nonFinite) rows.push_back({QStringLiteral("Non-finite"), QString::number(s.nonFinite), {}});
  return rows;
}

QString nodeRef(const Graph& g, NodeId n) {
  const Node& node = g.nodes[(size_t)n];
  return qstr(node.name) + QStringLiteral(" (") + qstr(node.opType) + QStringLiteral(")");
}

}  // namespace

WeightStats tensorStats(const Tensor& t) {
  WeightStats s;
  s.count = t.numel();
  double sum = 0, sumSq = 0;
  double lo = INFINITY, hi = -INFINITY;
  int64_t finite = 0;
  auto visit = [&](double x) {
    if (!std::isfinite(x)) {
      ++s.nonFinite;
      return;
    }
    ++finite;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    sumSq += x * x;
  };
  if (t.dtype() == DType::Float) {
    const float* d = t.data<float>();
    for (int64_t i = 0; i < s.count; ++i) visit(d[i]);
  } else {
    for (int64_t i = 0; i < s.count; ++i) visit(t.valueAsDouble(i));
  }
  if (finite > 0) {
    s.min = lo;
    s.max = hi;
    s.mean = sum / (double)finite;
    s.stddev = std::sqrt(std::max(0.0, sumSq / (double)finite - s.mean * s.mean));
  }
  return s;
}

QString valueTypeString(const Value& v) {
  if (v.constant) return qstr(dtypeName(v.constant->dtype())) + QStringLiteral(" ") + qstr(shapeToString(v.constant->shape()));
  const QString type = v.dtype == DType::Undefined ? QStringLiteral("?") : qstr(dtypeName(v.dtype));
  return type + QStringLiteral(" ") + qstr(dimsToString(v.shape));
}

namespace {

const QString kFloatNote = QStringLiteral("inside a subgraph, kept in float");

// "Subgraphs": what a control-flow node holds. Empty children when it holds none.
PropertyEntry subgraphSection(const Node& node) {
  PropertyEntry section{QStringLiteral("Subgraphs"), QString(), {}, true};
  const auto subs = subgraphsOf(node);
  for (const auto& [attribute, sub] : subs) {
    PropertyEntry e{qstr(attribute), QStringLiteral("%1 nodes").arg(sub->nodes.size()), {}};
    std::map<std::string, int> ops;
    for (const Node& n : sub->nodes) ++ops[n.opType];
    PropertyEntry opRows{QStringLiteral("Op types"), QString::number(ops.size()), {}};
    for (const auto& [op, count] : ops) opRows.children.push_back({qstr(op), QString::number(count), {}});
    e.children.push_back(std::move(opRows));
    QStringList reads;
    for (ValueId v : sub->outerRefs) reads << qstr(sub->value(v).name);
    PropertyEntry outer{QStringLiteral("Reads from outer scope"), reads.isEmpty() ? QStringLiteral("none") : QString::number(reads.size()), {}};
    for (const QString& r : reads) outer.children.push_back({r, QString(), {}});
    e.children.push_back(std::move(outer));
    if (const int nested = subgraphNodeCount(node) - (int)sub->nodes.size(); nested > 0 && subs.size() == 1)
      e.children.push_back({QStringLiteral("Nested subgraph nodes"), QString::number(nested), {}});
    section.children.push_back(std::move(e));
  }
  section.value = QStringLiteral("%1 · %2 nodes, run in float").arg(subs.size()).arg(subgraphNodeCount(node));
  section.children.push_back({QStringLiteral("Quantization"),
                              QStringLiteral("the nodes of its subgraphs run in float (not quantized)"), {}});
  return section;
}

// Identity, attributes, inputs, outputs and weights of a node of `g`; `scope` non-empty in subgraphs.
std::vector<PropertyEntry> nodeRows(const Graph& g, NodeId id, const std::string& scope) {
  const Node& node = g.nodes[(size_t)id];
  std::vector<PropertyEntry> out;
  PropertyEntry head{QStringLiteral("Node"), qstr(node.name), {}, true};
  head.children.push_back({QStringLiteral("Name"), qstr(node.name), {}});
  head.children.push_back({QStringLiteral("Op type"), qstr(node.opType), {}});
  head.children.push_back({QStringLiteral("Domain"), node.domain.empty() ? QStringLiteral("ai.onnx") : qstr(node.domain), {}});
  if (!scope.empty()) {
    head.children.push_back({QStringLiteral("Scope"), qstr(scope), {}});
    head.children.push_back({QStringLiteral("Quantization"), kFloatNote, {}});
  }
  out.push_back(std::move(head));
  if (!subgraphsOf(node).empty()) out.push_back(subgraphSection(node));

  PropertyEntry attrs{QStringLiteral("Attributes"), QString::number(node.attributes.size()), {}, true};
  for (const auto& [key, a] : node.attributes) attrs.children.push_back({qstr(key), attributeValue(a), {}});
  out.push_back(std::move(attrs));

  PropertyEntry inputs{QStringLiteral("Inputs"), QString::number(node.inputs.size()), {}, true};
  PropertyEntry weights{QStringLiteral("Weights"), QString(), {}, true};
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const ValueId v = node.inputs[k];
    if (v == kNoValue) {
      inputs.children.push_back({QStringLiteral("%1: (omitted)").arg(k), QString(), {}});
      continue;
    }
    const Value& val = g.value(v);
    PropertyEntry e{QStringLiteral("%1: %2").arg(k).arg(qstr(val.name)), valueTypeString(val), {}};
    if (val.constant) {
      e.value += QStringLiteral("  (weight)");
      weights.children.push_back({qstr(val.name), valueTypeString(val), weightRows(val)});
    } else if (val.producer >= 0) {
      e.children.push_back({QStringLiteral("From"), nodeRef(g, val.producer), {}});
    } else if (val.isGraphInput) {
      e.children.push_back({QStringLiteral("From"), scope.empty() ? QStringLiteral("graph input") : QStringLiteral("subgraph input"), {}});
    } else if (val.isOuterRef) {
      e.children.push_back({QStringLiteral("From"), QStringLiteral("outer scope"), {}});
    }
    if (k >= node.explicitInputCount()) e.value += QStringLiteral("  (implicit: read by a subgraph)");
    inputs.children.push_back(std::move(e));
  }
  out.push_back(std::move(inputs));

  PropertyEntry outputs{QStringLiteral("Outputs"), QString::number(node.outputs.size()), {}, true};
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const ValueId v = node.outputs[k];
    if (v == kNoValue) {
      outputs.children.push_back({QStringLiteral("%1: (omitted)").arg(k), QString(), {}});
      continue;
    }
    const Value& val = g.value(v);
    PropertyEntry e{QStringLiteral("%1: %2").arg(k).arg(qstr(val.name)), valueTypeString(val), {}};
    for (NodeId c : val.consumers) e.children.push_back({QStringLiteral("To"), nodeRef(g, c), {}});
    if (val.isGraphOutput) e.children.push_back({QStringLiteral("To"), QStringLiteral("graph output"), {}});
    outputs.children.push_back(std::move(e));
  }
  out.push_back(std::move(outputs));
  if (!weights.children.empty()) {
    weights.value = QString::number(weights.children.size());
    out.push_back(std::move(weights));
  }
  return out;
}

}  // namespace

std::vector<PropertyEntry> nodeProperties(const Model& model, NodeId id) { return nodeRows(model.graph, id, {}); }

std::vector<PropertyEntry> subgraphNodeProperties(const Graph& sub, NodeId id, const std::string& scope) {
  return nodeRows(sub, id, scope);
}

std::vector<PropertyEntry> subgraphValueProperties(const Graph& g, ValueId id, const std::string& scope) {
  const Value& v = g.value(id);
  const QString role = v.isOuterRef     ? QStringLiteral("Outer-scope value")
                       : v.isGraphInput ? QStringLiteral("Subgraph input")
                                        : QStringLiteral("Subgraph output");
  PropertyEntry head{role, qstr(v.name), {}, true};
  head.children.push_back({QStringLiteral("Name"), qstr(v.name), {}});
  head.children.push_back({QStringLiteral("Type"), valueTypeString(v), {}});
  head.children.push_back({QStringLiteral("Scope"), qstr(scope), {}});
  if (v.producer >= 0) head.children.push_back({QStringLiteral("From"), nodeRef(g, v.producer), {}});
  for (NodeId c : v.consumers) head.children.push_back({QStringLiteral("To"), nodeRef(g, c), {}});
  return {std::move(head)};
}

std::vector<PropertyEntry> valueProperties(const Model& model, ValueId id) {
  const Graph& g = model.graph;
  const Value& v = g.value(id);
  std::vector<PropertyEntry> out;
  const QString role = v.isGraphInput ? QStringLiteral("Graph input") : QStringLiteral("Graph output");
  PropertyEntry head{role, qstr(v.name), {}, true};
  head.children.push_back({QStringLiteral("Name"), qstr(v.name), {}});
  head.children.push_back({QStringLiteral("Type"), v.dtype == DType::Undefined ? QStringLiteral("?") : qstr(dtypeName(v.dtype)), {}});
  head.children.push_back({QStringLiteral("Shape"), qstr(dimsToString(v.shape)), {}});
  if (v.producer >= 0) head.children.push_back({QStringLiteral("From"), nodeRef(g, v.producer), {}});
  for (NodeId c : v.consumers) head.children.push_back({QStringLiteral("To"), nodeRef(g, c), {}});
  out.push_back(std::move(head));
  return out;
}

std::vector<PropertyEntry> modelSummary(const Model& model, const ModelInfo& info) {
  std::vector<PropertyEntry> out;
  const QLocale c = QLocale::c();
  PropertyEntry head{QStringLiteral("Model"), QFileInfo(qstr(info.path)).fileName(), {}, true};
  head.children.push_back({QStringLiteral("File"), qstr(info.path), {}});
  head.children.push_back({QStringLiteral("IR version"), QString::number(info.irVersion), {}});
  QString producer = qstr(info.producerName);
  if (!info.producerVersion.empty()) producer += QStringLiteral(" ") + qstr(info.producerVersion);
  head.children.push_back({QStringLiteral("Producer"), producer.isEmpty() ? QStringLiteral("—") : producer, {}});
  QStringList opsets;
  for (const auto& [domain, version] : info.opsets)
    opsets << (domain.empty() ? QStringLiteral("ai.onnx") : qstr(domain)) + QStringLiteral(" ") + QString::number(version);
  head.children.push_back({QStringLiteral("Opsets"), opsets.join(QStringLiteral(", ")), {}});
  head.children.push_back({QStringLiteral("Nodes"), c.toString((qlonglong)info.nodeCount), {}});
  head.children.push_back({QStringLiteral("Parameters"),
                           QStringLiteral("%1 (%2 MiB)")
                               .arg(c.toString((qlonglong)info.parameterCount))
                               .arg((double)info.parameterBytes / (1024.0 * 1024.0), 0, 'f', 2),
                           {}});
  head.children.push_back({QStringLiteral("Shape inference"), qstr(info.shapeInference), {}});
  for (const auto& [key, value] : model.metadata) head.children.push_back({qstr(key), qstr(value), {}});
  out.push_back(std::move(head));

  auto ioSection = [&](const QString& title, const std::vector<ValueDesc>& values) {
    PropertyEntry s{title, QString::number(values.size()), {}, true};
    for (const ValueDesc& d : values)
      s.children.push_back({qstr(d.name),
                            (d.dtype == DType::Undefined ? QStringLiteral("?") : qstr(dtypeName(d.dtype))) +
                                QStringLiteral(" ") + qstr(dimsToString(d.shape)),
                            {}});
    out.push_back(std::move(s));
  };
  ioSection(QStringLiteral("Inputs"), info.inputs);
  ioSection(QStringLiteral("Outputs"), info.outputs);

  PropertyEntry ops{QStringLiteral("Operators"), QStringLiteral("%1 types").arg(info.opHistogram.size()), {}, true};
  std::vector<std::pair<std::string, int64_t>> hist(info.opHistogram.begin(), info.opHistogram.end());
  std::stable_sort(hist.begin(), hist.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [op, count] : hist) ops.children.push_back({qstr(op), QString::number(count), {}});
  out.push_back(std::move(ops));

  PropertyEntry unsupported{QStringLiteral("Unsupported ops"),
                            info.unsupported.empty() ? QStringLiteral("none") : QString::number(info.unsupported.size()),
                            {}, true};
  for (const std::string& u : info.unsupported) unsupported.children.push_back({qstr(u), QString(), {}});
  out.push_back(std::move(unsupported));
  return out;
}

std::vector<PropertyEntry> groupProperties(const NodeGrouping& grouping, int32_t group, std::pair<double, double> snr) {
  const NodeGroup& g = grouping.groups[(size_t)group];
  std::vector<PropertyEntry> out;
  out.push_back({QStringLiteral("Group"), QString::fromStdString(g.path), {}, true});
  out.push_back({QStringLiteral("From"), grouping.source == NodeGrouping::Source::Scopes ? QStringLiteral("node name scopes")
                                                                                          : QStringLiteral("repeated op sequence"), {}, false});
  out.push_back({QStringLiteral("Nodes"), QString::number(g.nodeCount), {}, false});
  out.push_back({QStringLiteral("Child groups"), QString::number(g.children.size()), {}, false});
  if (!std::isnan(snr.first)) {
    out.push_back({QStringLiteral("Worst SNR"), formatDb(snr.first) + QStringLiteral(" dB"), {}, false});
    out.push_back({QStringLiteral("Mean SNR"), formatDb(snr.second) + QStringLiteral(" dB"), {}, false});
  }
  return out;
}

}  // namespace qs::ui
