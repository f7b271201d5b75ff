#include "ui/quant_properties.h"

#include <algorithm>
#include <cmath>

#include "ui/realisation_text.h"
#include "ui/snr_scale.h"

namespace qs::ui {

namespace {

QString num(double v) { return QString::number(v, 'g', 6); }
QString dbText(double v) { return std::isnan(v) ? QStringLiteral("—") : formatDb(v) + QStringLiteral(" dB"); }

PropertyEntry heading(const QString& title) {
  PropertyEntry e;
  e.key = title;
  e.heading = true;
  return e;
}

}  // namespace

std::vector<PropertyEntry> quantizationProperties(const Model& model, const AnalysisResult& r, NodeId id) {
  const Graph& g = model.graph;
  const NodeQuantState& st = r.plan.nodes[(size_t)id];
  PropertyEntry q = heading(QStringLiteral("Quantization"));
  if (st.quantized) {
    q.value = QStringLiteral("quantized (%1)").arg(QString::fromStdString(quantModeName(r.plan.mode)));
  } else {
    q.value = st.quantizable ? QStringLiteral("excluded") : QStringLiteral("not quantizable");
    q.children.push_back({QStringLiteral("Why"), QString::fromStdString(st.reason), {}, false});
  }
  for (const ActivationPoint& a : r.plan.activations) {
    if (a.node != id) continue;
    PropertyEntry e;
    e.key = QStringLiteral("Input %1 (activation)").arg(a.inputIndex);
    auto it = r.activations.find(a.value);
    const QString name = QString::fromStdString(g.value(a.value).name);
    if (it == r.activations.end()) {
      e.value = name + QStringLiteral(": no scale");
    } else {
      const ActivationQuant& aq = it->second;
      e.value = QStringLiteral("%1: amax %2, scale %3").arg(name, num(aq.amax), QString::number(aq.scale, 'e', 4));
      e.children.push_back({QStringLiteral("Tensor"), name, {}, false});
      e.children.push_back({QStringLiteral("amax (%1)").arg(QString::fromStdString(calibMethodName(r.calibration.method))), num(aq.amax), {}, false});
      e.children.push_back({QStringLiteral("Scale"), QString::number(aq.scale, 'e', 6), {}, false});
      e.children.push_back({QStringLiteral("Zero point"), QStringLiteral("0 (symmetric, per tensor)"), {}, false});
      for (int m = 0; m < 4; ++m)
        e.children.push_back({QStringLiteral("amax by %1").arg(QString::fromStdString(calibMethodName((CalibMethod)m))),
                              num(aq.methodAmax[(size_t)m]), {}, false});
      if (aq.scaleGroup >= 0)
        e.children.push_back({QStringLiteral("Shared scale group"), QStringLiteral("%1 (Concat: one amax for the group)").arg(aq.scaleGroup), {}, false});
    }
    q.children.push_back(std::move(e));
  }
  for (const WeightQuant& w : r.weights) {
    if (w.node != id || w.amax.empty()) continue;
    PropertyEntry e;
    e.key = QStringLiteral("Input %1 (weight)").arg(w.inputIndex);
    const auto [amin, amax] = std::minmax_element(w.amax.begin(), w.amax.end());
    const auto [smin, smax] = std::minmax_element(w.scale.begin(), w.scale.end());
    e.value = QStringLiteral("%1: per channel, axis %2, %3 channels").arg(QString::fromStdString(g.value(w.value).name)).arg(w.axis).arg(w.amax.size());
    e.children.push_back({QStringLiteral("amax range"), QStringLiteral("%1 … %2").arg(num(*amin), num(*amax)), {}, false});
    e.children.push_back({QStringLiteral("Scale range"), QStringLiteral("%1 … %2").arg(QString::number(*smin, 'e', 3), QString::number(*smax, 'e', 3)), {}, false});
    e.children.push_back({QStringLiteral("Range"), QStringLiteral("int8 [-127, 127], zero point 0"), {}, false});
    q.children.push_back(std::move(e));
  }

  const NodeResult& nr = r.nodes[(size_t)id];
  PropertyEntry err = heading(QStringLiteral("Error"));
  err.value = QStringLiteral("over %1 samples").arg(r.samples);
  if (nr.hasGraphwise) {
    err.children.push_back({QStringLiteral("Graph-wise SNR"), dbText(nr.graphwise.snrDb), {}, false});
    err.children.push_back({QStringLiteral("Cosine"), QString::number(nr.graphwise.cosine, 'f', 6), {}, false});
    err.children.push_back({QStringLiteral("MSE"), QString::number(nr.graphwise.mse, 'e', 3), {}, false});
    err.children.push_back({QStringLiteral("Max abs error"), num(nr.graphwise.maxAbs), {}, false});
  }
  if (nr.hasLayerwise) err.children.push_back({QStringLiteral("Layer-wise SNR"), dbText(nr.layerwise.snrDb), {}, false});
  if (!std::isnan(nr.weightSnrDb)) err.children.push_back({QStringLiteral("Weights only"), dbText(nr.weightSnrDb), {}, false});
  if (!std::isnan(nr.activationSnrDb)) err.children.push_back({QStringLiteral("Activations only"), dbText(nr.activationSnrDb), {}, false});
  if (!std::isnan(nr.sensitivitySnrDb))
    err.children.push_back({nr.sensitivityExact ? QStringLiteral("Sensitivity (outputs, this node alone)")
                                                : QStringLiteral("Sensitivity, estimated (exact: right click the node's row)"),
                            dbText(nr.sensitivitySnrDb), {}, false});
  return {q, err};
}

std::vector<PropertyEntry> analysisSummary(const Model& model, const AnalysisResult& r) {
  PropertyEntry a = heading(QStringLiteral("Analysis"));
  a.value = QStringLiteral("worst output %1").arg(dbText(r.worstOutputSnrDb()));
  size_t quantizable = 0, quantized = 0;
  for (const NodeQuantState& s : r.plan.nodes) {
    quantizable += s.quantizable;
    quantized += s.quantized;
  }
  a.children.push_back({QStringLiteral("Mode"), QString::fromStdString(quantModeName(r.plan.mode)), {}, false});
  QString method = QString::fromStdString(calibMethodName(r.calibration.method));
  if (r.calibration.method == CalibMethod::Percentile) method += QStringLiteral(" %1").arg(r.calibration.percentile);
  a.children.push_back({QStringLiteral("Calibration"), method, {}, false});
  a.children.push_back({QStringLiteral("Samples"), QString::number(r.samples), {}, false});
  a.children.push_back({QStringLiteral("Quantized nodes"), QStringLiteral("%1 of %2 quantizable").arg(quantized).arg(quantizable), {}, false});
  // --realisations: the setting as the run had it, and auto's decision (ui/realisation_text.h: the CLI's words).
  if (r.realisationProbe.ran)
    // The decision first: the value column is narrow.
    a.children.push_back({QStringLiteral("Realisations"),
                          QString::asprintf("%d (auto: probe sd %.2f dB)", r.realisationProbe.chosen, r.realisationProbe.sdDb),
                          {{QStringLiteral("Probe"), realisationProbeText(r), {}, false}}, false});
  else if (worstRealisationOutput(r) >= 0)
    a.children.push_back({QStringLiteral("Realisations"),
                          QString::number(r.outputs[(size_t)worstRealisationOutput(r)].realisationSnrDb.size()), {}, false});
  for (const OutputResult& o : r.outputs) {
    // Over the realisations of the rounding noise (what another runtime's figure compares with), beside the SNR.
    const QString mean = o.realisationSnrDb.size() < 2 ? QString()
                         : QString::asprintf(", mean of %zu %.2f dB, sd %.2f dB", o.realisationSnrDb.size(),
                                             o.realisationMeanDb(), o.realisationSdDb());
    PropertyEntry e{QStringLiteral("Output %1").arg(QString::fromStdString(o.name)),
                    QStringLiteral("SNR %1%2, cosine %3").arg(dbText(o.metrics.snrDb), mean).arg(o.metrics.cosine, 0, 'f', 6), {}, false};
    if (!mean.isEmpty())
      e.children.push_back({QStringLiteral("Over %1 realisations").arg(o.realisationSnrDb.size()), outputRealisationsText(o), {}, false});
    a.children.push_back(std::move(e));
  }
  // Agreement with the float model's decisions, for the outputs with a class axis (agreement.h).
  for (const OutputResult& o : r.outputs)
    if (const std::string text = describeAgreement(o.agreement); !text.empty())
      a.children.push_back({QStringLiteral("Agreement %1").arg(QString::fromStdString(o.name)),
                            QString::fromStdString(text), {}, false});
  (void)model;
  return {a};
}

}  // namespace qs::ui
