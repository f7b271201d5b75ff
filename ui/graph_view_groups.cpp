// The graph view's groups (grouped layouts of large models, group_layout.h): expanding and
// collapsing them, their colours (worst and mean SNR of their nodes), painting, revealing a node
// inside collapsed groups, "go to worst node", and the minimap's place.
#include <QFontMetricsF>
#include <QPainter>
#include <algorithm>
#include <cmath>
#include <limits>

#include "ui/graph_minimap.h"
#include "ui/graph_view.h"
#include "ui/node_groups.h"

namespace qs::ui {

namespace {

const QColor kGroupFill(0xe4, 0xe8, 0xee);
const QColor kGroupBorder(0x5c, 0x67, 0x73);
const QColor kFrameFill(0xf6, 0xf7, 0xf9);

}  // namespace

bool GraphView::isGroup(int item) const {
  return m_layout && item >= 0 && (size_t)item < m_layout->items.size() &&
         m_layout->items[(size_t)item].kind == LayoutItem::Kind::Group;
}

void GraphView::setGroupExpanded(int item, bool expanded) {
  if (!isGroup(item) || m_layout->items[(size_t)item].expanded == expanded) return;
  std::vector<char> flags = m_layout->groupExpanded;
  flags[(size_t)m_layout->items[(size_t)item].id] = expanded;
  relayoutGroups(std::move(flags), item);
}

void GraphView::relayoutGroups(std::vector<char> expanded, int anchorItem) {
  const GraphLayout& old = *m_layout;
  using Key = std::pair<LayoutItem::Kind, int32_t>;
  auto keyOf = [](const GraphLayout& L, int i) { return Key{L.items[(size_t)i].kind, L.items[(size_t)i].id}; };
  const bool hasAnchor = anchorItem >= 0;
  const Key anchor = hasAnchor ? keyOf(old, anchorItem) : Key{};
  const QPointF anchorOnScreen = hasAnchor ? mapFromScene(old.items[(size_t)anchorItem].rect.topLeft()) : QPointF();
  const bool hadSelection = m_selected >= 0;
  const Key selected = hadSelection ? keyOf(old, m_selected) : Key{};
  auto next = computeGroupedLayout(old.model, old.grouping, expanded, layoutOptions(), &m_groupSkeletons);
  if (!next) return;
  m_layout = std::move(next.value());
  m_selected = m_hover = -1;
  int newAnchor = -1;
  for (int i = 0; i < (int)m_layout->items.size(); ++i) {
    const Key k = keyOf(*m_layout, i);
    if (hasAnchor && k == anchor) newAnchor = i;
    if (hadSelection && k == selected) m_selected = i;
  }
  prepareLabels();
  recolour();
  if (newAnchor >= 0) m_origin = m_layout->items[(size_t)newAnchor].rect.topLeft() - anchorOnScreen / m_scale;
  if (m_minimap) m_minimap->invalidate();
  update();
  emit graphLayoutChanged();
}

int GraphView::revealNode(NodeId node) {
  if (!m_layout || node < 0 || (size_t)node >= m_layout->itemOfNode.size()) return -1;
  if (m_layout->grouping && m_layout->itemOfNode[(size_t)node] < 0) {
    std::vector<char> flags = m_layout->groupExpanded;
    for (int32_t g : m_layout->grouping->ancestorsOf(node)) flags[(size_t)g] = 1;
    relayoutGroups(std::move(flags), -1);
  }
  return m_layout->itemOfNode[(size_t)node];
}

int GraphView::goToWorstNode() {
  if (!m_layout || !m_result) return -1;
  NodeId worst = -1;
  double lowest = std::numeric_limits<double>::infinity();
  for (size_t n = 0; n < m_result->nodes.size(); ++n) {
    const NodeResult& r = m_result->nodes[n];
    if (!r.hasGraphwise || !m_result->plan.nodes[n].quantized || std::isnan(r.graphwise.snrDb)) continue;
    if (worst < 0 || r.graphwise.snrDb < lowest) worst = (NodeId)n, lowest = r.graphwise.snrDb;
  }
  if (worst < 0) return -1;
  const int item = revealNode(worst);
  setSelectedItem(item, true);
  emit itemSelected(item);
  return item;
}

double GraphView::nodeMetric(NodeId id) const {
  const NodeResult& r = m_result->nodes[(size_t)id];
  switch (m_colouring) {
    case Colouring::GraphwiseSnr: return r.hasGraphwise ? r.graphwise.snrDb : NAN;
    case Colouring::LayerwiseSnr: return r.hasLayerwise ? r.layerwise.snrDb : NAN;
    case Colouring::Sensitivity: return r.sensitivitySnrDb;
    case Colouring::OpType: break;
  }
  return NAN;
}

std::pair<double, double> GraphView::groupSnr(int32_t group) const {
  if (group < 0 || (size_t)group >= m_groupWorst.size()) return {NAN, NAN};
  return {m_groupWorst[(size_t)group], m_groupMean[(size_t)group]};
}

void GraphView::recolourGroups() {
  m_groupWorst.clear();
  m_groupMean.clear();
  if (m_minimap) m_minimap->invalidate();
  if (!m_layout || !m_layout->grouping) return;
  const NodeGrouping& grouping = *m_layout->grouping;
  const size_t count = grouping.groups.size();
  m_groupWorst.assign(count, NAN);
  m_groupMean.assign(count, NAN);
  const bool bySnr = m_result && m_colouring != Colouring::OpType;
  if (bySnr) {
    // Over the quantized nodes with a finite value; +inf (identical outputs) counts as worst only alone.
    std::vector<double> sum(count, 0.0);
    std::vector<int64_t> n(count, 0);
    for (size_t node = 0; node < grouping.groupOfNode.size(); ++node) {
      if (!m_result->plan.nodes[node].quantized) continue;
      const double v = nodeMetric((NodeId)node);
      if (std::isnan(v)) continue;
      for (int32_t g = grouping.groupOfNode[node]; g >= 0; g = grouping.groups[(size_t)g].parent) {
        double& w = m_groupWorst[(size_t)g];
        if (std::isnan(w) || v < w) w = v;
        if (std::isfinite(v)) sum[(size_t)g] += v, ++n[(size_t)g];
      }
    }
    for (size_t g = 0; g < count; ++g)
      m_groupMean[g] = n[g] ? sum[g] / (double)n[g] : m_groupWorst[g];
  }
  for (size_t i = 0; i < m_layout->items.size(); ++i) {
    const LayoutItem& it = m_layout->items[i];
    if (it.kind != LayoutItem::Kind::Group) continue;
    m_fill[i] = bySnr ? m_snrScale.color(m_groupWorst[(size_t)it.id]) : kGroupFill;
  }
}

void GraphView::paintGroupBox(QPainter& p, int ii, bool hover) const {
  const QRectF& r = m_layout->items[(size_t)ii].rect;
  const int32_t group = m_layout->items[(size_t)ii].id;
  QColor fill = m_fill[(size_t)ii];
  if (hover) fill = fill.lighter(108);
  // A stack of two cards: a group holds many nodes.
  p.setPen(QPen(kGroupBorder, 1.0));
  p.setBrush(fill.darker(112));
  p.drawRoundedRect(r.translated(4, 4).adjusted(0, 0, -4, -4), 6, 6);
  p.setBrush(fill);
  p.drawRoundedRect(r.adjusted(0, 0, -4, -4), 6, 6);
  const QRectF face = r.adjusted(0, 0, -4, -4);
  const auto [worst, mean] = groupSnr(group);
  const bool snr = !std::isnan(worst);
  if (snr) {  // the mean's colour as a strip along the bottom
    const QRectF strip(face.left() + 6, face.bottom() - 8, face.width() - 12, 5);
    p.setPen(Qt::NoPen);
    p.setBrush(m_snrScale.color(mean));
    p.drawRoundedRect(strip, 2, 2);
  }
  const QColor text = textColorOn(fill);
  p.setPen(text);
  p.setFont(m_opFont);
  p.drawText(QRectF(face.left() + 6, face.top() + 3, face.width() - 12, 20), Qt::AlignHCenter | Qt::AlignVCenter,
             QFontMetricsF(m_opFont).elidedText(m_titles[(size_t)ii], Qt::ElideMiddle, face.width() - 12));
  p.setFont(m_nameFont);
  p.drawText(QRectF(face.left() + 6, face.top() + 21, face.width() - 12, 15), Qt::AlignHCenter | Qt::AlignVCenter,
             m_names[(size_t)ii] + (snr ? QStringLiteral(" · worst %1").arg(formatDb(worst)) : QString()));
}

void GraphView::paintGroupFrame(QPainter& p, int ii, bool detailed) const {
  const QRectF& r = m_layout->items[(size_t)ii].rect;
  const QColor fill = m_fill[(size_t)ii];
  const double header = frameHeaderHeight();
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(QPen(fill.darker(140), ii == m_hover ? 2.2 : 1.2, Qt::DashLine));
  p.setBrush(kFrameFill);
  p.drawRoundedRect(r, 8, 8);
  const QRectF head(r.left(), r.top(), r.width(), header);
  p.setPen(Qt::NoPen);
  p.setBrush(fill);
  p.drawRoundedRect(head, 8, 8);
  p.drawRect(head.adjusted(0, header / 2, 0, 0));
  if (!detailed) return;
  const auto [worst, mean] = groupSnr(m_layout->items[(size_t)ii].id);
  p.setPen(textColorOn(fill));
  p.setFont(m_opFont);
  QString title = m_titles[(size_t)ii] + QStringLiteral("  ·  ") + m_names[(size_t)ii];
  if (!std::isnan(worst)) title += QStringLiteral(" · worst %1 dB · mean %2 dB").arg(formatDb(worst), formatDb(mean));
  p.drawText(head.adjusted(10, 0, -90, 0), Qt::AlignLeft | Qt::AlignVCenter,
             QFontMetricsF(m_opFont).elidedText(title, Qt::ElideRight, head.width() - 100));
  p.setFont(m_nameFont);
  p.drawText(head.adjusted(0, 0, -10, 0), Qt::AlignRight | Qt::AlignVCenter, QStringLiteral("− collapse"));
}

void GraphView::paintGroupLabels(QPainter& p, const std::vector<int32_t>& items) const {
  // Below the zoom that draws text, a collapsed group still shows its name while its box is tall
  // enough for a line: that is what makes an overview of many groups readable.
  const QTransform toDevice = p.transform();
  const double zoom = std::sqrt(std::abs(toDevice.determinant()));
  QFont f = m_nameFont;
  f.setBold(true);
  f.setPixelSize(std::clamp((int)std::lround(zoom * LayoutOptions().nodeHeight * 0.55), 7, 12));
  const QFontMetricsF fm(f);
  p.save();
  p.resetTransform();
  p.setFont(f);
  p.setRenderHint(QPainter::TextAntialiasing, true);
  for (int32_t ii : items) {
    const LayoutItem& it = m_layout->items[(size_t)ii];
    if (it.kind != LayoutItem::Kind::Group || it.expanded) continue;
    const QRectF d = toDevice.mapRect(it.rect);
    if (d.height() < fm.ascent() || d.width() < 24) continue;
    p.setPen(textColorOn(m_fill[(size_t)ii]));
    p.drawText(d, Qt::AlignCenter, fm.elidedText(m_titles[(size_t)ii], Qt::ElideMiddle, d.width() - 4));
  }
  p.restore();
}

void GraphView::placeMinimap() {
  if (!m_minimap) return;
  const QSize s(std::clamp(width() / 6, 140, 240), std::clamp(height() / 5, 100, 180));
  m_minimap->setGeometry(width() - s.width() - 10, 10, s.width(), s.height());
  bool needed = false;
  if (m_layout && !m_layout->items.empty()) {
    const QRectF visible(mapToScene(QPointF(0, 0)), mapToScene(QPointF(width(), height())));
    needed = !visible.contains(m_layout->bounds);
  }
  if (m_minimap->isHidden() == needed) m_minimap->setVisible(needed);
}

void GraphView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  placeMinimap();
}

}  // namespace qs::ui
