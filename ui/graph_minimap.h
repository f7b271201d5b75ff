// The graph view's minimap: the whole scene in a corner of the view, boxes in their colours, with
// the visible part outlined; clicking or dragging in it centres the view there.
#pragma once

#include <QImage>
#include <QWidget>

namespace qs::ui {

class GraphView;
struct GraphLayout;

class GraphMinimap : public QWidget {
  Q_OBJECT
 public:
  explicit GraphMinimap(GraphView* view);
  /// The scene point a minimap position shows.
  QPointF sceneAt(const QPointF& pos) const;
  /// The minimap rectangle of the view's visible scene.
  QRectF viewportRect() const;
  /// Redraws the cached scene (after a new layout or colours).
  void invalidate();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;

 private:
  QRectF sceneRect() const;  // the layout's bounds with a margin
  double scale() const;      // minimap pixels per scene unit
  QPointF offset() const;    // minimap position of sceneRect().topLeft()
  GraphView* m_view;
  QImage m_cache;
  const GraphLayout* m_cachedLayout = nullptr;
};

}  // namespace qs::ui
