#include "ui/snr_scale.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace qs::ui {

namespace {

// A diverging ramp (ColorBrewer RdYlGn, 7 classes) read from red to green.
constexpr std::array<QRgb, 7> kRamp = {0xd73027, 0xf46d43, 0xfdae61, 0xfee08b, 0xd9ef8b, 0x91cf60, 0x1a9850};

QColor mix(QRgb a, QRgb b, double t) {
  return QColor::fromRgbF(float(qRed(a) / 255.0 * (1 - t) + qRed(b) / 255.0 * t),
                          float(qGreen(a) / 255.0 * (1 - t) + qGreen(b) / 255.0 * t),
                          float(qBlue(a) / 255.0 * (1 - t) + qBlue(b) / 255.0 * t));
}

}  // namespace

QColor SnrScale::color(double db) const {
  if (std::isnan(db)) return noValue();
  double t = hi > lo ? (db - lo) / (hi - lo) : 1.0;
  t = std::clamp(t, 0.0, 1.0);
  const double x = t * (double)(kRamp.size() - 1);
  const size_t i = std::min((size_t)x, kRamp.size() - 2);
  return mix(kRamp[i], kRamp[i + 1], x - (double)i);
}

SnrScale SnrScale::fromValues(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }), values.end());
  SnrScale s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const double p5 = values[(size_t)((double)(values.size() - 1) * 0.05)];
  const double p95 = values[(size_t)((double)(values.size() - 1) * 0.95)];
  s.lo = std::floor(p5 / 5) * 5;
  s.hi = std::ceil(p95 / 5) * 5;
  if (s.hi - s.lo < 10) s.hi = s.lo + 10;
  return s;
}

QString formatDb(double db) {
  if (std::isnan(db)) return {};
  if (std::isinf(db)) return db > 0 ? QStringLiteral("∞") : QStringLiteral("−∞");
  return QString::number(db, 'f', 1);
}

QColor textColorOn(const QColor& fill) {
  const double lum = 0.299 * fill.redF() + 0.587 * fill.greenF() + 0.114 * fill.blueF();
  return lum > 0.6 ? QColor(0x1f, 0x24, 0x29) : QColor(Qt::white);
}

}  // namespace qs::ui
