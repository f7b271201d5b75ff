#include "ui/realisation_text.h"

#include <algorithm>
#include <cmath>

namespace qs::ui {

namespace {

// %.2f, as the CLI's printf writes it (QString::number rounds the same way for these magnitudes).
QString f2(double v) { return QString::asprintf("%.2f", v); }

}  // namespace

QString realisationsSettingText(const AnalysisRequest& r) {
  return r.realisationsAuto ? QStringLiteral("auto") : QString::number(std::max(1, r.realisations));
}

QString outputRealisationsText(const OutputResult& o) {
  if (o.realisationSnrDb.size() < 2) return {};
  const auto [lo, hi] = std::minmax_element(o.realisationSnrDb.begin(), o.realisationSnrDb.end());
  return QStringLiteral("%1 realisations: mean %2 dB, sd %3 dB, %4 .. %5 dB (the analysis %6 dB)")
      .arg(o.realisationSnrDb.size())
      .arg(f2(o.realisationMeanDb()), f2(o.realisationSdDb()), f2(*lo), f2(*hi), f2(o.realisationSnrDb[0]));
}

int worstRealisationOutput(const AnalysisResult& r) {
  int worst = -1;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    if (r.outputs[i].realisationSnrDb.size() < 2) continue;
    const double m = r.outputs[i].realisationMeanDb();
    // NaN (an output with no signal) counts as the worst, as worstOutputSnrDb() does.
    if (worst < 0 || std::isnan(m) || m < r.outputs[(size_t)worst].realisationMeanDb()) worst = (int)i;
    if (std::isnan(m)) break;
  }
  return worst;
}

QString worstRealisationsShortText(const AnalysisResult& r) {
  const int i = worstRealisationOutput(r);
  if (i < 0) return {};
  const OutputResult& o = r.outputs[(size_t)i];
  return QStringLiteral("mean of %1 realisations %2 dB, sd %3")
      .arg(o.realisationSnrDb.size())
      .arg(f2(o.realisationMeanDb()), f2(o.realisationSdDb()));
}

QString realisationProbeText(const AnalysisResult& r) {
  const RealisationProbe& p = r.realisationProbe;
  if (!p.ran) return {};
  const QString where = p.where == "table check" ? QStringLiteral("method auto's table check") : QStringLiteral("the analysis");
  QString text = QStringLiteral("realisations auto: probe of %1 at %2 (%3 samples): worst output sd %4 dB (threshold %5): %6 realisation(s)")
                     .arg(p.worstSnrDb.size())
                     .arg(where)
                     .arg(p.samples)
                     .arg(f2(p.sdDb), f2(p.thresholdDb))
                     .arg(p.chosen);
  // The first table choice, as the CLI's line has it, when the tables were scored on the mean.
  if (!r.clipChoices.empty()) {
    const ClipChoice& c = r.clipChoices.begin()->second;
    if (c.selectionRealisations > 1)
      text += QStringLiteral("; tables scored on the mean of %1: %2 (%3 dB; on realisation 0 alone: %4, %5 dB)")
                  .arg(c.selectionRealisations)
                  .arg(QString::fromStdString(c.selection), f2(c.selectionOutputSnrDb),
                       QString::fromStdString(c.selectionOnFirst), f2(c.selectionOnFirstSnrDb));
  }
  return text;
}

QString realisationProbeShortText(const RealisationProbe& p) {
  if (!p.ran) return {};
  return QStringLiteral("auto: probe sd %1 dB -> %2").arg(f2(p.sdDb)).arg(p.chosen);
}

}  // namespace qs::ui
