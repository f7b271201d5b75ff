#include "ui/int4_run.h"

#include <vector>

namespace qs::ui {

namespace {

QString megabytes(uint64_t bytes) { return QString::number((double)bytes / 1e6, 'f', 2) + QStringLiteral(" MB"); }

}  // namespace

std::shared_ptr<const AnalysisResult> int4AsAnalysisResult(const Model& model, const Int4Result& r) {
  const Graph& g = model.graph;
  auto out = std::make_shared<AnalysisResult>();
  out->samples = r.samples;
  out->plan.nodes.resize(g.nodes.size());
  out->nodes.resize(g.nodes.size());
  for (NodeQuantState& st : out->plan.nodes) st.reason = "INT4 weight-only: only MatMul and Gemm weights are quantized";
  for (const std::string& s : r.skipped) {
    // "'name' (Op): reason": the reason on the node it names.
    const size_t end = s.find("' (");
    if (s.size() < 2 || s[0] != '\'' || end == std::string::npos) continue;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].name == s.substr(1, end - 1)) out->plan.nodes[i].reason = s.substr(s.find("): ") + 3);
  }
  for (const Int4Layer& l : r.layers) {
    if (l.node < 0 || (size_t)l.node >= g.nodes.size()) continue;
    NodeQuantState& st = out->plan.nodes[(size_t)l.node];
    st.quantizable = st.quantized = true;
    st.reason.clear();
    NodeResult& n = out->nodes[(size_t)l.node];
    n.hasLayerwise = n.hasGraphwise = true;
    n.layerwise = l.layerwise;
    n.graphwise = l.graphwise;
    // The column's meaning in int8/fp8: the node's output with only its weights quantized, float
    // inputs. For weight-only int4 that is the layer-wise SNR (AWQ scale included). (The SNR of the
    // weight tensor itself would mislead for awq_lite, which moves error to the channels whose
    // activations are small.)
    n.weightSnrDb = l.layerwise.snrDb;
  }
  for (const Int4OutputResult& o : r.outputs) {
    OutputResult res;
    res.value = g.findValue(o.name);
    res.name = o.name;
    res.metrics = o.metrics;
    out->outputs.push_back(std::move(res));
  }
  return out;
}

std::vector<PropertyEntry> int4Summary(const Int4Result& r) {
  std::vector<PropertyEntry> e;
  e.push_back({QStringLiteral("INT4 weight-only"),
               QStringLiteral("%1, block %2, %3 weights").arg(QString::fromStdString(int4MethodName(r.method))).arg(r.blockSize).arg(r.layers.size()),
               {}, true});
  const double ratio = r.bytesBefore ? (double)r.bytesAfter / (double)r.bytesBefore : 0.0;
  e.push_back({QStringLiteral("Weight bytes"),
               QStringLiteral("%1 -> %2 (%3x)").arg(megabytes(r.bytesBefore), megabytes(r.bytesAfter)).arg(ratio, 0, 'f', 3), {}, false});
  for (const Int4OutputResult& o : r.outputs) {
    QString v = QStringLiteral("%1 dB").arg(o.metrics.snrDb, 0, 'f', 2);
    if (!std::isnan(o.top1Agreement)) v += QStringLiteral(", top-1 %1 %").arg(o.top1Agreement * 100, 0, 'f', 1);
    e.push_back({QStringLiteral("Output ") + QString::fromStdString(o.name), v, {}, false});
  }
  if (!r.skipped.empty()) e.push_back({QStringLiteral("Left in float"), QString::number(r.skipped.size()), {}, false});
  return e;
}

}  // namespace qs::ui
