#include "ui/app_icon.h"

#include <QPainter>
#include <QPixmap>

namespace qs::ui {

namespace {

// Same geometry as resources/quantscope.svg, in its 256-unit coordinates.
QPixmap paintIcon(int size) {
  QPixmap pm(size, size);
  pm.fill(Qt::transparent);
  QPainter p(&pm);
  p.setRenderHint(QPainter::Antialiasing);
  p.scale(size / 256.0, size / 256.0);
  p.setPen(Qt::NoPen);
  p.setBrush(QColor(0x1f, 0x3a, 0x5f));
  p.drawRoundedRect(QRectF(8, 8, 240, 240), 48, 48);
  QPen edge(QColor(0xdf, 0xe7, 0xf0), 8, Qt::SolidLine, Qt::RoundCap);
  p.setPen(edge);
  p.drawLine(QPointF(128, 88), QPointF(76, 140));
  p.drawLine(QPointF(128, 88), QPointF(180, 140));
  p.setPen(Qt::NoPen);
  p.setBrush(QColor(0x5b, 0x9b, 0xd5));
  p.drawRoundedRect(QRectF(92, 48, 72, 40), 9, 9);
  p.setBrush(QColor(0xf0, 0x8c, 0x00));
  p.drawRoundedRect(QRectF(36, 136, 80, 40), 9, 9);
  p.setBrush(QColor(0x2b, 0x9f, 0x8f));
  p.drawRoundedRect(QRectF(140, 136, 80, 40), 9, 9);
  const QPointF trace[] = {{40, 214}, {80, 200}, {120, 216}, {160, 196}, {216, 208}};
  p.setPen(QPen(QColor(0x9f, 0xc3, 0xe8), 7, Qt::SolidLine, Qt::RoundCap, Qt::RoundJoin));
  p.setBrush(Qt::NoBrush);
  p.drawPolyline(trace, 5);
  return pm;
}

}  // namespace

QIcon appIcon() {
  QIcon icon;
  for (int s : {16, 24, 32, 48, 64, 128, 256}) icon.addPixmap(paintIcon(s));
  return icon;
}

}  // namespace qs::ui
