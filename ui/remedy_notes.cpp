#include "ui/remedy_notes.h"

#include <QStringList>
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

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
  // A smoothing that --remedies auto kept says so (the switch did not ask for it).
  auto chosen = [&](const char* name) {
    return std::find(s.choice.kept.begin(), s.choice.kept.end(), name) != s.choice.kept.end()
               ? QStringLiteral("; kept by the remedy choice (%1)").arg(QString::fromStdString(s.choice.mode))
               : QString();
  };
  for (const DepthwiseEqualizedPair& p : s.depthwisePairs) {
    const QString ratio = p.rangeRatio > 0 ? QStringLiteral(", channel ranges %1:1 before").arg(p.rangeRatio, 0, 'g', 3) : QString();
    add(notes, p.producer, QStringLiteral("DW eq"),
        QStringLiteral("Depthwise input equalization: output channels divided for %1 (%2 channels%3)")
            .arg(nodeName(g, p.consumer)).arg(p.channels).arg(ratio));
    add(notes, p.consumer, QStringLiteral("DW eq"),
        QStringLiteral("Depthwise input equalization: input channels rescaled to one range at %1 (%2 channels%3)")
            .arg(nodeName(g, p.producer)).arg(p.channels).arg(ratio));
  }
  for (const DepthwiseSmoothedInput& d : s.depthwiseSmoothed) {
    const QString text = QStringLiteral("Depthwise input smoothing: %1 channels scaled by an inserted Mul (alpha %2, "
                                        "channel ranges %3:1 before), layer-wise error %4 -> %5")
                             .arg(d.channels).arg(d.alpha, 0, 'g', 2).arg(d.rangeRatio, 0, 'g', 3)
                             .arg(d.errorBefore, 0, 'g', 3).arg(d.errorAfter, 0, 'g', 3) + chosen("depthwise_smooth");
    add(notes, d.consumer, QStringLiteral("DW smooth"), text);
    add(notes, d.mul, QStringLiteral("DW smooth"), text);
  }
  for (const DepthwiseSmoothedInput& d : s.pointwiseSmoothed) {
    const QString text = QStringLiteral("Pointwise input smoothing: %1 channels scaled by an inserted Mul (alpha %2, "
                                        "channel ranges %3:1 before), layer-wise error %4 -> %5")
                             .arg(d.channels).arg(d.alpha, 0, 'g', 2).arg(d.rangeRatio, 0, 'g', 3)
                             .arg(d.errorBefore, 0, 'g', 3).arg(d.errorAfter, 0, 'g', 3) + chosen("pointwise_smooth");
    add(notes, d.consumer, QStringLiteral("PW smooth"), text);
    add(notes, d.mul, QStringLiteral("PW smooth"), text);
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

namespace {

// The "Remedies" section: what the remedies applied did, and the outputs without and with them.
PropertyEntry remedyProperties(const Graph& g, const AnalysisResult& after, const RemedySummary& s) {
  PropertyEntry r;
  r.key = QStringLiteral("Remedies");
  r.heading = true;
  QStringList applied;
  for (const std::string& a : s.applied) applied << QString::fromStdString(a);
  if (!s.depthwisePairs.empty()) applied << QStringLiteral("depthwise_equalize");
  if (!s.depthwiseSmoothed.empty()) applied << QStringLiteral("depthwise_smooth");
  if (!s.pointwiseSmoothed.empty()) applied << QStringLiteral("pointwise_smooth");
  r.value = applied.join(QStringLiteral(", "));
  if (s.before)
    for (size_t i = 0; i < after.outputs.size() && i < s.before->outputs.size(); ++i)
      r.children.push_back({QStringLiteral("Output %1").arg(QString::fromStdString(after.outputs[i].name)),
                            QStringLiteral("SNR %1 dB without the remedies, %2 dB with them")
                                .arg(s.before->outputs[i].metrics.snrDb, 0, 'f', 2)
                                .arg(after.outputs[i].metrics.snrDb, 0, 'f', 2),
                            {}, false});
  int clipped = 0;
  for (const WeightClipNode& w : s.weightClips) clipped += w.clipped > 0;
  auto count = [&](const char* key, size_t n, bool shown) {
    if (shown) r.children.push_back({QLatin1String(key), QString::number(n), {}, false});
  };
  auto has = [&](const char* name) { return std::find(s.applied.begin(), s.applied.end(), name) != s.applied.end(); };
  count("Equalized pairs", s.pairs.size(), has("equalize"));
  count("SmoothQuant groups", s.smoothed.size(), has("smoothquant"));
  count("SmoothQuant skipped", s.smoothSkipped.size(), has("smoothquant"));
  count("Weights with clipped channels", (size_t)clipped, has("weight_clip_search"));
  count("Bias-corrected nodes", s.biasShifts.size(), has("bias_correction"));
  count("Depthwise pairs equalized", s.depthwisePairs.size(), !s.depthwisePairs.empty());
  count("Depthwise inputs smoothed", s.depthwiseSmoothed.size(), !s.depthwiseSmoothed.empty());
  count("Pointwise inputs smoothed", s.pointwiseSmoothed.size(), !s.pointwiseSmoothed.empty());
  count("Changed initializers", s.changedInitializers.size(), true);
  (void)g;
  return r;
}

}  // namespace

PropertyEntry remedyChoiceProperties(const RemedyChoice& c) {
  PropertyEntry r;
  r.key = QStringLiteral("Remedy choice");
  r.heading = true;
  QStringList kept;
  for (const std::string& k : c.kept) kept << QString::fromStdString(k);
  r.value = QStringLiteral("%1: %2").arg(QString::fromStdString(c.mode),
                                        kept.isEmpty() ? QStringLiteral("none kept") : QStringLiteral("kept ") + kept.join(QStringLiteral(", ")));
  if (c.fromConfig) {
    r.children.push_back({QStringLiteral("From"), QStringLiteral("the loaded quant_cfg.json (not measured in this run)"), {}, false});
    return r;
  }
  if (!c.note.empty()) r.children.push_back({QStringLiteral("Note"), QString::fromStdString(c.note), {}, false});
  r.children.push_back({QStringLiteral("Samples"),
                        QStringLiteral("%1 to choose on, %2 held out; a remedy needs +%3 dB on the first and no loss on the second")
                            .arg(c.choiceSamples).arg(c.heldOutSamples).arg(c.marginDb, 0, 'f', 2),
                        {}, false});
  for (const RemedyTrial& t : c.trials) {
    QString v;
    if (t.items == 0) {
      v = QStringLiteral("not tried: %1").arg(QString::fromStdString(t.reason));
    } else {
      v = QStringLiteral("%1 (%2 inputs): worst output SNR %3 -> %4 dB, held out %5 -> %6 dB; %7")
              .arg(t.kept ? QStringLiteral("kept") : QStringLiteral("not kept")).arg(t.items)
              .arg(t.beforeDb, 0, 'f', 2).arg(t.afterDb, 0, 'f', 2).arg(t.heldOutBeforeDb, 0, 'f', 2)
              .arg(t.heldOutAfterDb, 0, 'f', 2).arg(QString::fromStdString(t.reason));
    }
    r.children.push_back({QString::fromStdString(t.remedy), v, {}, false});
  }
  if (!c.trials.empty())
    r.children.push_back({QStringLiteral("Time"), QStringLiteral("%1 s (%2 s CPU)").arg(c.seconds, 0, 'f', 1).arg(c.cpuSeconds, 0, 'f', 1), {}, false});
  return r;
}

std::vector<PropertyEntry> remedySummaryProperties(const Graph& g, const AnalysisResult& after, const RemedySummary& s) {
  std::vector<PropertyEntry> out;
  if (!s.applied.empty() || !s.depthwisePairs.empty() || !s.depthwiseSmoothed.empty() || !s.pointwiseSmoothed.empty())
    out.push_back(remedyProperties(g, after, s));
  if (!s.choice.empty()) out.push_back(remedyChoiceProperties(s.choice));
  return out;
}

std::vector<RemedyNote> remedyNotesOnShown(const Graph& shown, const Graph& run, const RemedySummary& s) {
  std::vector<RemedyNote> onRun = remedyNotes(run, s);
  if (&shown == &run || shown.nodes.size() == run.nodes.size()) return onRun;  // no node inserted: the same ids
  std::unordered_map<std::string, NodeId> ids;
  for (NodeId id = 0; id < (NodeId)shown.nodes.size(); ++id) ids.emplace(shown.nodes[(size_t)id].name, id);
  std::vector<RemedyNote> notes(shown.nodes.size());
  for (size_t i = 0; i < onRun.size(); ++i) {
    if (onRun[i].empty()) continue;
    const auto it = ids.find(run.nodes[i].name);
    if (it != ids.end()) notes[(size_t)it->second] = std::move(onRun[i]);
  }
  return notes;
}

std::vector<PropertyEntry> remedyNodeProperties(const Graph& g, const RemedySummary& s, NodeId id) {
  return remedyNodeProperties(g, g, s, id);
}

std::vector<PropertyEntry> remedyNodeProperties(const Graph& shown, const Graph& run, const RemedySummary& s, NodeId id) {
  const std::vector<RemedyNote> notes = remedyNotesOnShown(shown, run, s);
  if (id < 0 || (size_t)id >= notes.size() || notes[(size_t)id].empty()) return {};
  PropertyEntry r;
  r.key = QStringLiteral("Remedies");
  r.value = notes[(size_t)id].text;
  r.heading = true;
  for (const QString& line : notes[(size_t)id].detail.split(QLatin1Char('\n'))) {
    const qsizetype colon = line.indexOf(QStringLiteral(": "));
    r.children.push_back({line.left(colon), line.mid(colon + 2), {}, false});
  }
  return {r};
}

}  // namespace qs::ui
