// The graph view's control-flow parts: which items expand, expanding and collapsing them, and
// painting an expanded node's frames and a collapsed one's "+N" badge.
#include <QFontMetricsF>
#include <QPainter>
#include <tuple>

#include "ui/graph_view.h"

namespace qs::ui {

namespace {

const QColor kFrameBorder(0x9a, 0xa4, 0xb0);
const QColor kFrameFill(0xf3, 0xf5, 0xf8);
const QColor kFrameText(0x3d, 0x45, 0x4e);
const QColor kMarker(0x30, 0x36, 0x3d);

}  // namespace

double GraphView::frameHeaderHeight() {
  static const double h = LayoutOptions().frameHeader;
  return h;
}

bool GraphView::isExpandable(int item) const {
  if (isGroup(item)) return true;
  return m_layout && item >= 0 && (size_t)item < m_layout->items.size() &&
         m_layout->items[(size_t)item].kind == LayoutItem::Kind::Node && m_layout->items[(size_t)item].subgraphNodes > 0;
}

bool GraphView::isExpanded(int item) const { return isExpandable(item) && m_layout->items[(size_t)item].expanded; }

void GraphView::setExpanded(int item, bool expanded) {
  if (isGroup(item)) return setGroupExpanded(item, expanded);
  if (!isExpandable(item) || isExpanded(item) == expanded || !m_baseLayout) return;
  // Items are matched across layouts by (graph, kind, id): each subgraph appears once in a model.
  using Key = std::tuple<const Graph*, LayoutItem::Kind, int32_t>;
  auto keyOf = [](const GraphLayout& L, int i) -> Key {
    return {&L.graphOf(i), L.items[(size_t)i].kind, L.items[(size_t)i].id};
  };
  const Key anchor = keyOf(*m_layout, item);
  const QPointF anchorOnScreen = mapFromScene(m_layout->items[(size_t)item].rect.topLeft());
  const bool hadSelection = m_selected >= 0;
  const Key selected = hadSelection ? keyOf(*m_layout, m_selected) : Key{};
  const Node* node = m_layout->nodeOf(item);
  // A collapsed node keeps the expansions inside it, so that expanding it again shows them again.
  if (expanded) m_expanded.insert(node);
  else m_expanded.erase(node);
  auto next = expandGraphLayout(m_baseLayout, m_expanded, layoutOptions(), &m_skeletons);
  if (!next) {
    if (expanded) m_expanded.erase(node);
    else m_expanded.insert(node);
    return;
  }
  m_layout = std::move(next.value());
  int newAnchor = -1;
  m_selected = m_hover = -1;
  for (int i = 0; i < (int)m_layout->items.size(); ++i) {
    const Key k = keyOf(*m_layout, i);
    if (k == anchor) newAnchor = i;
    if (hadSelection && k == selected) m_selected = i;
  }
  prepareLabels();
  recolour();
  if (newAnchor >= 0) m_origin = m_layout->items[(size_t)newAnchor].rect.topLeft() - anchorOnScreen / m_scale;
  update();
  emit graphLayoutChanged();
}

void GraphView::paintExpanded(QPainter& p, int ii, bool detailed) const {
  const GraphLayout& L = *m_layout;
  const LayoutItem& it = L.items[(size_t)ii];
  const QRectF& r = it.rect;
  const QColor fill = m_fill[(size_t)ii];
  const double header = frameHeaderHeight();
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(Qt::NoPen);
  p.setBrush(Qt::white);
  p.drawRoundedRect(r, 7, 7);
  // The title strip in the node's colour, square at the bottom.
  const QRectF head(r.left(), r.top(), r.width(), header);
  p.setBrush(fill);
  p.drawRoundedRect(head, 7, 7);
  p.drawRect(head.adjusted(0, header / 2, 0, 0));
  p.setBrush(Qt::NoBrush);
  p.setPen(QPen(fill.darker(135), ii == m_hover ? 2.2 : 1.4));
  p.drawRoundedRect(r, 7, 7);
  if (detailed) {
    const QColor text = textColorOn(fill);
    p.setPen(text);
    p.setFont(m_opFont);
    const QRectF titleRect = head.adjusted(10, 0, -60, 0);
    p.drawText(titleRect, Qt::AlignLeft | Qt::AlignVCenter, m_titles[(size_t)ii]);
    const double opWidth = QFontMetricsF(m_opFont).horizontalAdvance(m_titles[(size_t)ii]);
    p.setFont(m_nameFont);
    p.drawText(titleRect.adjusted(opWidth + 10, 0, 0, 0), Qt::AlignLeft | Qt::AlignVCenter,
               QFontMetricsF(m_nameFont).elidedText(m_names[(size_t)ii], Qt::ElideMiddle, titleRect.width() - opWidth - 10));
    p.drawText(head.adjusted(0, 0, -10, 0), Qt::AlignRight | Qt::AlignVCenter, QStringLiteral("− collapse"));
  }
  for (const SubgraphFrame& f : L.frames) {
    if (f.owner != ii) continue;
    p.setPen(QPen(kFrameBorder, 1.0));
    p.setBrush(kFrameFill);
    p.drawRoundedRect(f.rect, 4, 4);
    if (!detailed) continue;
    p.setPen(kFrameText);
    QFont label = m_nameFont;
    label.setBold(true);
    p.setFont(label);
    const QString text = QStringLiteral("%1 · %2 nodes · float")
                             .arg(QString::fromStdString(f.attribute))
                             .arg(f.graph->nodes.size());
    p.drawText(f.rect.adjusted(8, 2, -8, 0).topLeft() + QPointF(0, 14), text);
  }
}

void GraphView::paintMarker(QPainter& p, int ii) const {
  const QRectF& r = m_layout->items[(size_t)ii].rect;
  QFont f = m_nameFont;
  f.setBold(true);
  f.setPixelSize(10);
  const QString text = QStringLiteral("+%1").arg(m_layout->items[(size_t)ii].subgraphNodes);
  const double w = QFontMetricsF(f).horizontalAdvance(text) + 10, h = 15;
  const QRectF badge(r.right() - w + 6, r.top() - h / 2, w, h);
  p.setPen(QPen(Qt::white, 1.2));
  p.setBrush(kMarker);
  p.drawRoundedRect(badge, h / 2, h / 2);
  p.setPen(Qt::white);
  p.setFont(f);
  p.drawText(badge, Qt::AlignCenter, text);
}

}  // namespace qs::ui
