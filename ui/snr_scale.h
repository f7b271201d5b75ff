// The colour scale shared by the graph view, the layer table and the plots: an SNR in dB mapped
// onto a red (poor) - yellow - green (good) ramp between two bounds chosen from the data.
#pragma once

#include <QColor>
#include <QString>
#include <vector>

namespace qs::ui {

struct SnrScale {
  double lo = 0, hi = 40;  // dB at the red and the green end

  /// Colour of `db`; NaN gets `noValue`, +inf the green end.
  QColor color(double db) const;
  /// Bounds from the 5th and 95th percentiles of the finite values, rounded outwards to 5 dB,
  /// at least 10 dB apart (0..40 when there are none).
  static SnrScale fromValues(std::vector<double> values);
  /// The colour of a node without a value.
  static QColor noValue() { return QColor(0xd5, 0xd9, 0xde); }
};

/// "23.4", "∞" (identical), "−∞", or "" for NaN.
QString formatDb(double db);
/// Black or white, whichever reads better on `fill`.
QColor textColorOn(const QColor& fill);

}  // namespace qs::ui
