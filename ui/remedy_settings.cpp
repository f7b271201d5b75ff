#include "ui/remedy_settings.h"

#include <cmath>

namespace qs::ui {

namespace {

// A value that is no valid name, as an error message echoes it: a string without its control characters (so the
// message stays one line), at most 40 of them.
QString printableValue(const QJsonValue& v) {
  QString shown = v.isString() ? v.toString().left(40) : QStringLiteral("(not a string)");
  for (QChar& ch : shown)
    if (!ch.isPrint()) ch = QLatin1Char('?');
  return shown;
}

}  // namespace

RemedySensitivity sensitivityOf(const AnalysisRequest& r) {
  if (!r.sensitivity) return SensitivityOff;
  return r.sensitivityMethod == SensitivityMethod::Fast ? SensitivityFast : SensitivityExact;
}

bool remedySwitchesAtDefaults(const AnalysisRequest& r) {
  const AnalysisRequest d;
  return r.equalize == d.equalize && r.biasCorrection == d.biasCorrection && r.smoothQuant == d.smoothQuant &&
         std::isnan(r.smoothQuantAlpha) && r.weightClipSearch == d.weightClipSearch &&
         r.depthwiseEqualize == d.depthwiseEqualize && r.depthwiseSmooth == d.depthwiseSmooth &&
         r.pointwiseSmooth == d.pointwiseSmooth;
}

RemedyChoiceMode remedyChoiceOf(const AnalysisRequest& r) {
  if (r.remedies == RemedyMode::Auto) return RemediesAuto;
  return remedySwitchesAtDefaults(r) ? RemediesNone : RemediesCustom;
}

QString remedyChoiceName(RemedyChoiceMode m) {
  switch (m) {
    case RemediesNone: return QStringLiteral("none");
    case RemediesAuto: return QStringLiteral("auto");
    case RemediesCustom: return QStringLiteral("custom");
  }
  return {};
}

QString sensitivityName(RemedySensitivity s) {
  switch (s) {
    case SensitivityExact: return QStringLiteral("exact");
    case SensitivityFast: return QStringLiteral("fast");
    case SensitivityOff: return QStringLiteral("off");
  }
  return {};
}

void writeRemedySettings(const AnalysisRequest& r, QJsonObject& c) {
  if (r.equalize) c.insert(QStringLiteral("equalize"), true);
  if (r.biasCorrection) c.insert(QStringLiteral("bias_correction"), true);
  if (r.smoothQuant) c.insert(QStringLiteral("smoothquant"), true);
  if (!std::isnan(r.smoothQuantAlpha)) c.insert(QStringLiteral("smoothquant_alpha"), r.smoothQuantAlpha);
  if (r.weightClipSearch) c.insert(QStringLiteral("weight_clip_search"), true);
  // On by default: written when off only, so that older projects (without the key) read as on.
  const AnalysisRequest defaults;
  if (r.depthwiseEqualize != defaults.depthwiseEqualize) c.insert(QStringLiteral("depthwise_equalize"), r.depthwiseEqualize);
  if (r.depthwiseSmooth != defaults.depthwiseSmooth) c.insert(QStringLiteral("depthwise_smooth"), r.depthwiseSmooth);
  if (r.pointwiseSmooth != defaults.pointwiseSmooth) c.insert(QStringLiteral("pointwise_smooth"), r.pointwiseSmooth);
  // --remedies: written for auto only, so that projects of runs without it stay as they were.
  if (r.remedies == RemedyMode::Auto) c.insert(QStringLiteral("remedies"), QStringLiteral("auto"));
  if (r.integerConv != defaults.integerConv) c.insert(QStringLiteral("integer_conv"), r.integerConv);
  if (r.headWeightScale != defaults.headWeightScale) c.insert(QStringLiteral("head_weight_scale"), r.headWeightScale);
  if (r.headBiasCorrection != defaults.headBiasCorrection)
    c.insert(QStringLiteral("head_bias_correction"), r.headBiasCorrection);
  const auto s = sensitivityOf(r);
  if (s != sensitivityOf(AnalysisRequest{})) c.insert(QStringLiteral("sensitivity"), sensitivityName(s));
  if (r.calibrationRefine.passes > 0) c.insert(QStringLiteral("calibration_refine"), r.calibrationRefine.passes);
  // --realisations: written when not 1 (the default), "auto" or the count, so that older projects read as 1.
  if (r.realisationsAuto) c.insert(QStringLiteral("realisations"), QStringLiteral("auto"));
  else if (r.realisations > 1) c.insert(QStringLiteral("realisations"), r.realisations);
  if (r.memoryBudgetBytes > 0) c.insert(QStringLiteral("memory_budget_bytes"), (double)r.memoryBudgetBytes);
}

bool readRemedySettings(const QJsonObject& c, const QString& projectPath, AnalysisRequest& r, QString& error) {
  for (auto [key, flag] : {std::pair{"equalize", &r.equalize}, std::pair{"bias_correction", &r.biasCorrection},
                           std::pair{"smoothquant", &r.smoothQuant}, std::pair{"weight_clip_search", &r.weightClipSearch},
                           std::pair{"depthwise_equalize", &r.depthwiseEqualize}, std::pair{"depthwise_smooth", &r.depthwiseSmooth},
                           std::pair{"pointwise_smooth", &r.pointwiseSmooth},
                           std::pair{"integer_conv", &r.integerConv},
                           std::pair{"head_weight_scale", &r.headWeightScale},
                           std::pair{"head_bias_correction", &r.headBiasCorrection}}) {
    const QJsonValue v = c.value(QLatin1String(key));
    if (v.isUndefined()) continue;
    if (!v.isBool()) {
      error = QStringLiteral("%1: \"%2\" must be true or false").arg(projectPath, QLatin1String(key));
      return false;
    }
    *flag = v.toBool();
  }
  if (const QJsonValue m = c.value(QStringLiteral("remedies")); !m.isUndefined()) {
    if (!m.isString() || !parseRemedyMode(m.toString().toStdString(), r.remedies)) {
      error = QStringLiteral("%1: \"remedies\": '%2': expected auto or none").arg(projectPath, printableValue(m));
      return false;
    }
  }
  if (const QJsonValue a = c.value(QStringLiteral("smoothquant_alpha")); !a.isUndefined()) {
    const double alpha = a.toDouble(-1);
    if (!a.isDouble() || !(alpha >= 0 && alpha <= 1)) {
      error = QStringLiteral("%1: \"smoothquant_alpha\" must be a number in [0, 1]").arg(projectPath);
      return false;
    }
    r.smoothQuantAlpha = alpha;
    // An alpha alone asks for SmoothQuant, as --smoothquant-alpha alone does.
    if (c.value(QStringLiteral("smoothquant")).isUndefined()) r.smoothQuant = true;
  }
  if (const QJsonValue m = c.value(QStringLiteral("memory_budget_bytes")); !m.isUndefined()) {
    const double bytes = m.toDouble(-1);
    if (!m.isDouble() || !(bytes >= 1) || bytes > 9.0e15 || bytes != std::floor(bytes)) {
      error = QStringLiteral("%1: \"memory_budget_bytes\" must be a whole number of bytes, at least 1").arg(projectPath);
      return false;
    }
    r.memoryBudgetBytes = (uint64_t)bytes;
  }
  if (const QJsonValue n = c.value(QStringLiteral("calibration_refine")); !n.isUndefined()) {
    const double passes = n.toDouble(-1);
    if (!n.isDouble() || !(passes >= 0) || passes > 16 || passes != std::floor(passes)) {
      error = QStringLiteral("%1: \"calibration_refine\" must be a whole number of passes from 0 to 16").arg(projectPath);
      return false;
    }
    r.calibrationRefine.passes = (int)passes;
  }
  if (const QJsonValue n = c.value(QStringLiteral("realisations")); !n.isUndefined()) {
    const double count = n.toDouble(-1);
    if (n.isString() && n.toString() == QLatin1String("auto")) {
      r.realisationsAuto = true;
    } else if (n.isDouble() && count >= 1 && count <= 64 && count == std::floor(count)) {
      r.realisationsAuto = false;
      r.realisations = (int)count;
    } else {
      error = QStringLiteral("%1: \"realisations\": '%2': expected auto or a count from 1 to 64")
                  .arg(projectPath, n.isDouble() ? QString::number(count) : printableValue(n));
      return false;
    }
  }
  const QJsonValue s = c.value(QStringLiteral("sensitivity"));
  if (s.isUndefined()) return true;
  const QString name = s.toString();
  if (name == QLatin1String("off")) {
    r.sensitivity = false;
  } else if (name == QLatin1String("exact") || name == QLatin1String("fast")) {
    r.sensitivity = true;
    r.sensitivityMethod = name == QLatin1String("fast") ? SensitivityMethod::Fast : SensitivityMethod::Exact;
  } else {
    error = QStringLiteral("%1: \"sensitivity\": '%2': expected exact, fast or off").arg(projectPath, printableValue(s));
    return false;
  }
  return true;
}

}  // namespace qs::ui
