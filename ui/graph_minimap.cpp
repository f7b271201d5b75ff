#include "ui/graph_minimap.h"

#include <QMouseEvent>
#include <QPainter>
#include <algorithm>

#include "ui/graph_view.h"

namespace qs::ui {

GraphMinimap::GraphMinimap(GraphView* view) : QWidget(view), m_view(view) {
  setCursor(Qt::PointingHandCursor);
  setToolTip(QStringLiteral("Overview: click or drag to move the view"));
  resize(220, 160);
}

QRectF GraphMinimap::sceneRect() const {
  const auto& layout = m_view->graphLayout();
  return layout ? layout->bounds.adjusted(-40, -40, 40, 40) : QRectF(0, 0, 1, 1);
}

double GraphMinimap::scale() const {
  const QRectF s = sceneRect();
  return std::min((width() - 8) / std::max(1.0, s.width()), (height() - 8) / std::max(1.0, s.height()));
}

QPointF GraphMinimap::offset() const {
  const QRectF s = sceneRect();
  const double k = scale();
  return QPointF((width() - s.width() * k) / 2, (height() - s.height() * k) / 2);
}

QPointF GraphMinimap::sceneAt(const QPointF& pos) const { return sceneRect().topLeft() + (pos - offset()) / scale(); }

QRectF GraphMinimap::viewportRect() const {
  const QRectF visible(m_view->mapToScene(QPointF(0, 0)), m_view->mapToScene(QPointF(m_view->width(), m_view->height())));
  const double k = scale();
  return QRectF(offset() + (visible.topLeft() - sceneRect().topLeft()) * k, visible.size() * k);
}

void GraphMinimap::invalidate() {
  m_cachedLayout = nullptr;
  update();
}

void GraphMinimap::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(QColor(0xc4, 0xca, 0xd1));
  p.setBrush(QColor(255, 255, 255, 235));
  p.drawRoundedRect(QRectF(rect()).adjusted(0.5, 0.5, -0.5, -0.5), 4, 4);
  const auto& layout = m_view->graphLayout();
  if (!layout) return;
  if (m_cachedLayout != layout.get() || m_cache.size() != size() * devicePixelRatio()) {
    m_cache = QImage(size() * devicePixelRatio(), QImage::Format_ARGB32_Premultiplied);
    m_cache.setDevicePixelRatio(devicePixelRatio());
    m_cache.fill(Qt::transparent);
    QPainter c(&m_cache);
    const double k = scale();
    c.translate(offset());
    c.scale(k, k);
    c.translate(-sceneRect().topLeft());
    c.setPen(Qt::NoPen);
    for (size_t i = 0; i < layout->items.size(); ++i) {
      const LayoutItem& it = layout->items[i];
      // At least a pixel, so that thin boxes still show.
      QRectF r = it.rect;
      if (r.width() * k < 1.5) r.setWidth(1.5 / k);
      if (r.height() * k < 1.5) r.setHeight(1.5 / k);
      if (it.expanded) {
        c.setPen(QPen(QColor(0x9a, 0xa4, 0xb0), 0));
        c.setBrush(QColor(0xf3, 0xf5, 0xf8));
      } else {
        c.setPen(Qt::NoPen);
        c.setBrush(m_view->itemFill((int)i));
      }
      c.drawRect(r);
    }
    m_cachedLayout = layout.get();
  }
  p.drawImage(0, 0, m_cache);
  const QRectF v = viewportRect().intersected(QRectF(rect()).adjusted(1, 1, -1, -1));
  p.setPen(QPen(QColor(0xf0, 0x8c, 0x00), 1.6));
  p.setBrush(QColor(0xf0, 0x8c, 0x00, 30));
  p.drawRect(v);
}

void GraphMinimap::mousePressEvent(QMouseEvent* event) { m_view->centerOn(sceneAt(event->position())); update(); }
void GraphMinimap::mouseMoveEvent(QMouseEvent* event) {
  if (event->buttons() & Qt::LeftButton) {
    m_view->centerOn(sceneAt(event->position()));
    update();
  }
}

}  // namespace qs::ui
