#include "ui/remedy_notes.h"

#include <cmath>

namespace qs::ui {

namespace {

QString nodeName(const Graph& g, NodeId id) {
  return id >= 0 && (size_t)id < g.nodes.size() ? QString::fromStdString(g.nodes[(size_t)id].name) : QStringLiteral("?");
}

// The layer-wise error change of a search, as a percentage ("-12.3%"); empty without a before.
QString errorChange(double before, double after) {
  if (!(before > 0) || !std::isfinite(after)) return {};
  const double pct = 100.0 * (after - before) / before;
  return QStringLiteral("%1%2%").arg(pct > 0 ? QStringLiteral("+") : QString()).arg(pct, 0, 'f', 1);
}

void add(std::vector<RemedyNote>& notes, NodeId id, const QString& text, const QString& detail) {
  if (id < 0 || (size_t)id >= notes.size()) return;
  RemedyNote& n = notes[(size_t)id];
  n.text += (n.text.isEmpty() ? QString() : QStringLiteral(" · ")) + text;
  n.detail += (n.detail.isEmpty() ? QString() : QStringLiteral("\n")) + detail;
}

}  // namespace

std::vector<RemedyNote> remedyNotes(const Graph& g, const RemedySummary& s) {
  std::vector<RemedyNote> notes(g.nodes.size());
  for (const DepthwiseEqualizedPair& p : s.depthwisePairs) {
    const QString ratio = p.rangeRatio > 0 ? QStringLiteral(", channel ranges %1:1 before").arg(p.rangeRatio, 0, 'g', 3) : QString();
    add(notes, p.producer, QStringLiteral("DW eq"),
        QStringLiteral("Depthwise input equalization: output channels divided for %1 (%2 channels%3)")
            .arg(nodeName(g, p.consumer)).arg(p.channels).arg(ratio));
    add(notes, p.consumer, QStringLiteral("DW eq"),
        QStringLiteral("Depthwise input equalization: input channels rescaled to one range at %1 (%2 channels%3)")
            .arg(nodeName(g, p.producer)).arg(p.channels).arg(ratio));
  }
  for (const EqualizedPair& p : s.pairs) {
    const QString scale = QStringLiteral("max |log s| %1").arg(p.maxLogScale, 0, 'f', 2);
    add(notes, p.first, QStringLiteral("CLE"),
        QStringLiteral("Cross-layer equalization with %1: %2 output channels, %3").arg(nodeName(g, p.second)).arg(p.channels).arg(scale));
    add(notes, p.second, QStringLiteral("CLE"),
        QStringLiteral("Cross-layer equalization with %1: %2 input channels, %3").arg(nodeName(g, p.first)).arg(p.channels).arg(scale));
  }
  for (const SmoothedGroup& sg : s.smoothed) {
    const QString alpha = QStringLiteral("α %1").arg(sg.alpha, 0, 'f', 1);
    const QString change = errorChange(sg.errorBefore, sg.errorAfter);
    QString consumers;
    for (NodeId c : sg.consumers) consumers += (consumers.isEmpty() ? QString() : QStringLiteral(", ")) + nodeName(g, c);
    add(notes, sg.producer, QStringLiteral("SQ ÷s"),
        QStringLiteral("SmoothQuant: scale and bias divided by s (%1 channels, %2, max |log s| %3) for %4")
            .arg(sg.channels).arg(alpha).arg(sg.maxLogScale, 0, 'f', 2).arg(consumers));
    for (NodeId c : sg.consumers)
      add(notes, c, QStringLiteral("SQ ") + alpha,
          QStringLiteral("SmoothQuant: weight rows times s (%1 channels, %2, max |log s| %3); layer-wise error of the group %4 "
                         "(%5 -> %6)")
              .arg(sg.channels).arg(alpha).arg(sg.maxLogScale, 0, 'f', 2).arg(change).arg(sg.errorBefore, 0, 'g', 4).arg(sg.errorAfter, 0, 'g', 4));
  }
  for (const WeightClipNode& w : s.weightClips) {
    if (w.clipped == 0) continue;  // searched, every channel kept at ratio 1: nothing changed
    const QString change = errorChange(w.errorBefore, w.errorAfter);
    add(notes, w.node, QStringLiteral("clip %1").arg(w.meanRatio, 0, 'f', 3),
        QStringLiteral("Weight clip search: %1 of %2 channels clipped, mean ratio %3; layer-wise error %4 (%5 -> %6)")
            .arg(w.clipped).arg(w.channels).arg(w.meanRatio, 0, 'f', 3).arg(change.isEmpty() ? QStringLiteral("±0%") : change)
            .arg(w.errorBefore, 0, 'g', 4).arg(w.errorAfter, 0, 'g', 4));
  }
  for (const BiasShift& b : s.biasShifts)
    add(notes, b.node, QStringLiteral("bias"),
        QStringLiteral("Bias correction: %1 channels, mean |shift| %2").arg(b.shift.size()).arg(b.meanAbsShift, 0, 'g', 3));
  return notes;
}

}  // namespace qs::ui
