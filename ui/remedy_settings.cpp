#include "ui/remedy_settings.h"

#include <cmath>

namespace qs::ui {

RemedySensitivity sensitivityOf(const AnalysisRequest& r) {
  if (!r.sensitivity) return SensitivityOff;
  return r.sensitivityMethod == SensitivityMethod::Fast ? SensitivityFast : SensitivityExact;
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
  const auto s = sensitivityOf(r);
  if (s != sensitivityOf(AnalysisRequest{})) c.insert(QStringLiteral("sensitivity"), sensitivityName(s));
  if (r.memoryBudgetBytes > 0) c.insert(QStringLiteral("memory_budget_bytes"), (double)r.memoryBudgetBytes);
}

bool readRemedySettings(const QJsonObject& c, const QString& projectPath, AnalysisRequest& r, QString& error) {
  for (auto [key, flag] : {std::pair{"equalize", &r.equalize}, std::pair{"bias_correction", &r.biasCorrection}}) {
    const QJsonValue v = c.value(QLatin1String(key));
    if (v.isUndefined()) continue;
    if (!v.isBool()) {
      error = QStringLiteral("%1: \"%2\" must be true or false").arg(projectPath, QLatin1String(key));
      return false;
    }
    *flag = v.toBool();
  }
  if (const QJsonValue m = c.value(QStringLiteral("memory_budget_bytes")); !m.isUndefined()) {
    const double bytes = m.toDouble(-1);
    if (!m.isDouble() || !(bytes >= 1) || bytes > 9.0e15 || bytes != std::floor(bytes)) {
      error = QStringLiteral("%1: \"memory_budget_bytes\" must be a whole number of bytes, at least 1").arg(projectPath);
      return false;
    }
    r.memoryBudgetBytes = (uint64_t)bytes;
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
    // A string that is no valid name is echoed without its control characters, so the message stays one line.
    QString shown = s.isString() ? name.left(40) : QStringLiteral("(not a string)");
    for (QChar& ch : shown)
      if (!ch.isPrint()) ch = QLatin1Char('?');
    error = QStringLiteral("%1: \"sensitivity\": '%2': expected exact, fast or off").arg(projectPath, shown);
    return false;
  }
  return true;
}

}  // namespace qs::ui
