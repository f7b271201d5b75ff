#include "ui/graph_view.h"

#include <QApplication>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QMenu>
#include <QPainter>
#include <QPainterPath>
#include <QWheelEvent>
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

#include "core/exec/model_info.h"
#include "ui/graph_minimap.h"
#include "ui/node_groups.h"

namespace qs::ui {

namespace {

const QColor kBackground(0xfa, 0xfb, 0xfc);
const QColor kEdge(0x8f, 0x98, 0xa3);
const QColor kAccent(0xf0, 0x8c, 0x00);
const QColor kIoFill(0xee, 0xf1, 0xf4);
const QColor kIoBorder(0x7d, 0x87, 0x91);
const QColor kIoText(0x24, 0x29, 0x2f);
const QColor kQuantPoint(0x5b, 0x3f, 0xa8);
const QColor kHighlight(0xd0, 0x1c, 0x8b);
constexpr double kMinZoom = 1e-4;
constexpr double kMaxZoom = 6.0;
constexpr double kArrowLength = 7.0;
constexpr double kArrowHalfWidth = 3.6;

QPainterPath edgePath(const std::vector<QPointF>& pts) {
  // Cubic segments with vertical tangents at every point: smooth S-bends that leave and enter
  // boxes straight, the usual look of layered drawings. The last segment stops at the arrow base.
  QPainterPath path(pts.front());
  for (size_t i = 1; i < pts.size(); ++i) {
    QPointF a = pts[i - 1], b = pts[i];
    if (i + 1 == pts.size()) b.ry() -= kArrowLength;
    const double dy = (b.y() - a.y()) * 0.5;
    path.cubicTo(QPointF(a.x(), a.y() + dy), QPointF(b.x(), b.y() - dy), b);
  }
  return path;
}

void drawArrowHead(QPainter& p, const QPointF& tip, const QColor& color) {
  const QPointF pts[3] = {tip, QPointF(tip.x() - kArrowHalfWidth, tip.y() - kArrowLength),
                          QPointF(tip.x() + kArrowHalfWidth, tip.y() - kArrowLength)};
  p.setPen(Qt::NoPen);
  p.setBrush(color);
  p.drawPolygon(pts, 3);
}

}  // namespace

GraphView::GraphView(QWidget* parent) : QWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  setMinimumSize(200, 150);
  m_opFont = font();
  m_opFont.setPixelSize(13);
  m_opFont.setBold(true);
  m_nameFont = font();
  m_nameFont.setPixelSize(11);
  m_nameFont.setBold(false);
  setCursor(Qt::OpenHandCursor);
  m_minimap = new GraphMinimap(this);
  m_minimap->hide();
}

LayoutOptions GraphView::layoutOptions() const {
  LayoutOptions o;
  o.opFont = m_opFont;
  o.nameFont = m_nameFont;
  return o;
}

void GraphView::setGraphLayout(std::shared_ptr<const GraphLayout> layout) {
  m_layout = std::move(layout);
  m_baseLayout = m_layout;
  m_expanded.clear();
  m_skeletons.clear();
  m_groupSkeletons.clear();
  m_selected = m_hover = -1;
  m_result.reset();
  m_highlightNodes.clear();
  prepareLabels();
  recolour();
  if (!m_layout || m_layout->items.empty()) {
    update();
    return;
  }
  // Open like a document: readable zoom at the top of the graph, or the whole graph if it fits.
  const QRectF b = m_layout->bounds.adjusted(-40, -40, 40, 40);
  const double fit = std::min(width() / b.width(), height() / b.height());
  if (fit >= 0.6) {
    fitToWindow();
  } else {
    setScale(std::clamp(width() / b.width(), 0.6, 0.9));
    const QRectF& first = m_layout->items.front().rect;
    centerOn(QPointF(first.center().x(), b.top() + height() / (2 * m_scale)));
  }
}

void GraphView::prepareLabels() {
  m_titles.clear();
  m_names.clear();
  m_elidedNames.clear();
  if (!m_layout) return;
  const size_t n = m_layout->items.size();
  m_titles.resize(n);
  m_names.resize(n);
  m_elidedNames.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const LayoutItem& it = m_layout->items[i];
    const Graph& g = m_layout->graphOf((int32_t)i);
    if (it.kind == LayoutItem::Kind::Node) {
      const Node& node = g.nodes[(size_t)it.id];
      m_titles[i] = QString::fromStdString(node.opType);
      m_names[i] = QString::fromStdString(node.name);
    } else if (it.kind == LayoutItem::Kind::Group) {
      m_titles[i] = QString::fromStdString(m_layout->grouping->groups[(size_t)it.id].label);
      m_names[i] = QStringLiteral("%1 nodes").arg(m_layout->grouping->groups[(size_t)it.id].nodeCount);
    } else {
      m_titles[i] = QString::fromStdString(g.value(it.id).name);
    }
  }
}

void GraphView::setAnalysis(std::shared_ptr<const AnalysisResult> result) {
  if (result && (!m_layout || result->nodes.size() != m_layout->model->graph.nodes.size())) result.reset();
  m_result = std::move(result);
  recolour();
  update();
}

void GraphView::setColouring(Colouring c) {
  m_colouring = c;
  recolour();
  update();
}

void GraphView::setHighlightedNodes(std::vector<char> nodes) {
  m_highlightNodes = std::move(nodes);
  recolour();
  update();
}

QColor GraphView::itemFill(int item) const {
  return item >= 0 && (size_t)item < m_fill.size() ? m_fill[(size_t)item] : QColor();
}

int GraphView::quantizationPointCount() const { return (int)std::count(m_quantEdge.begin(), m_quantEdge.end(), 1); }

void GraphView::recolour() {
  m_fill.clear();
  m_excluded.clear();
  m_highlighted.clear();
  m_quantEdge.clear();
  if (!m_layout) return;
  const size_t n = m_layout->items.size();
  m_fill.resize(n);
  m_excluded.assign(n, 0);
  m_highlighted.assign(n, 0);
  m_quantEdge.assign(m_layout->edges.size(), 0);
  const bool bySnr = m_result && m_colouring != Colouring::OpType;
  if (bySnr) {
    std::vector<double> values;
    for (size_t id = 0; id < m_result->nodes.size(); ++id) values.push_back(nodeMetric((NodeId)id));
    m_snrScale = SnrScale::fromValues(std::move(values));
  }
  for (size_t i = 0; i < n; ++i) {
    const LayoutItem& it = m_layout->items[i];
    if (it.kind != LayoutItem::Kind::Node) {
      m_fill[i] = kIoFill;
      continue;
    }
    if (it.frame >= 0) {  // inside a subgraph: runs in float, no SNR of its own
      m_fill[i] = bySnr ? SnrScale::noValue() : opCategoryColor(it.category);
      continue;
    }
    if (!bySnr) {
      m_fill[i] = opCategoryColor(it.category);
    } else {
      // 32 steps: the far-out view batches boxes by colour.
      double v = nodeMetric(it.id);
      if (std::isfinite(v) && m_snrScale.hi > m_snrScale.lo)
        v = m_snrScale.lo + std::round(std::clamp((v - m_snrScale.lo) / (m_snrScale.hi - m_snrScale.lo), 0.0, 1.0) * 32) / 32 * (m_snrScale.hi - m_snrScale.lo);
      m_fill[i] = m_snrScale.color(v);
    }
    if (m_result) {
      const NodeQuantState& st = m_result->plan.nodes[(size_t)it.id];
      m_excluded[i] = st.quantizable && !st.quantized;
    }
    if ((size_t)it.id < m_highlightNodes.size()) m_highlighted[i] = m_highlightNodes[(size_t)it.id];
  }
  if (m_result) {
    std::vector<std::pair<NodeId, ValueId>> points;
    for (const ActivationPoint& a : m_result->plan.activations)
      if (m_result->plan.nodes[(size_t)a.node].quantized) points.emplace_back(a.node, a.value);
    std::sort(points.begin(), points.end());
    for (size_t e = 0; e < m_layout->edges.size(); ++e) {
      const LayoutEdge& edge = m_layout->edges[e];
      const LayoutItem& to = m_layout->items[(size_t)edge.to];
      if (to.kind == LayoutItem::Kind::Node && to.frame < 0)
        m_quantEdge[e] = std::binary_search(points.begin(), points.end(), std::make_pair((NodeId)to.id, edge.value));
    }
  }
  recolourGroups();
}

QString GraphView::itemTitle(int item) const { return item >= 0 && (size_t)item < m_titles.size() ? m_titles[(size_t)item] : QString(); }
QString GraphView::itemName(int item) const { return item >= 0 && (size_t)item < m_names.size() ? m_names[(size_t)item] : QString(); }

void GraphView::setSelectedItem(int item, bool center) {
  if (!m_layout || item >= (int)m_layout->items.size()) item = -1;
  m_selected = item;
  if (center && item >= 0) {
    if (m_scale < kTextZoom * 1.5) setScale(0.9);
    centerOn(m_layout->items[(size_t)item].rect.center());
  }
  update();
}

std::vector<int32_t> GraphView::findItems(const QString& text) const {
  std::vector<int32_t> exact, partial;
  if (!m_layout || text.isEmpty()) return exact;
  const std::string needle = text.toLower().toStdString();
  auto lower = [](const std::string& s) {
    std::string r = s;
    std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return (char)std::tolower(c); });
    return r;
  };
  for (int32_t i = 0; i < (int32_t)m_layout->items.size(); ++i) {
    const LayoutItem& it = m_layout->items[(size_t)i];
    const Graph& g = m_layout->graphOf(i);
    std::vector<const std::string*> names;
    if (it.kind == LayoutItem::Kind::Node) {
      const Node& node = g.nodes[(size_t)it.id];
      names.push_back(&node.name);
      for (ValueId v : node.outputs)
        if (v != kNoValue) names.push_back(&g.value(v).name);
      for (ValueId v : node.inputs)  // weights are not drawn: a weight's name finds its consumer
        if (v != kNoValue && g.value(v).constant) names.push_back(&g.value(v).name);
    } else if (it.kind == LayoutItem::Kind::Group) {
      names.push_back(&m_layout->grouping->groups[(size_t)it.id].path);
    } else {
      names.push_back(&g.value(it.id).name);
    }
    bool isExact = false, isPartial = false;
    for (const std::string* s : names) {
      const std::string l = lower(*s);
      isExact |= l == needle;
      isPartial |= l.find(needle) != std::string::npos;
    }
    if (isExact) exact.push_back(i);
    else if (isPartial) partial.push_back(i);
  }
  exact.insert(exact.end(), partial.begin(), partial.end());
  return exact;
}

QPointF GraphView::mapToScene(const QPointF& w) const { return m_origin + w / m_scale; }
QPointF GraphView::mapFromScene(const QPointF& s) const { return (s - m_origin) * m_scale; }

void GraphView::centerOn(const QPointF& s) {
  m_origin = s - QPointF(width(), height()) / (2 * m_scale);
  update();
}

void GraphView::setScale(double scale) {
  scale = std::clamp(scale, kMinZoom, kMaxZoom);
  if (scale == m_scale) return;
  m_scale = scale;
  emit zoomChanged(m_scale);
}

void GraphView::zoomAround(const QPointF& widgetPos, double factor) {
  const QPointF anchor = mapToScene(widgetPos);
  setScale(m_scale * factor);
  m_origin = anchor - widgetPos / m_scale;
  update();
}

void GraphView::fitToWindow() {
  if (!m_layout || m_layout->items.empty()) return;
  const QRectF b = m_layout->bounds.adjusted(-30, -30, 30, 30);
  setScale(std::min({width() / b.width(), height() / b.height(), 1.5}));
  centerOn(b.center());
}

void GraphView::setZoom(double zoom) {
  if (zoom > 0) zoomAround(QPointF(width(), height()) / 2, zoom / m_scale);
}

void GraphView::zoomIn() { zoomAround(QPointF(width(), height()) / 2, 1.25); }
void GraphView::zoomOut() { zoomAround(QPointF(width(), height()) / 2, 1 / 1.25); }
void GraphView::resetZoom() { zoomAround(QPointF(width(), height()) / 2, 1.0 / m_scale); }

void GraphView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), kBackground);
  placeMinimap();
  if (!m_layout) return;
  p.save();
  p.scale(m_scale, m_scale);
  p.translate(-m_origin);
  renderScene(p, QRectF(m_origin, QSizeF(width() / m_scale, height() / m_scale)));
  p.restore();
  paintLegend(p);
}

void GraphView::renderScene(QPainter& p, const QRectF& visible) const {
  if (!m_layout) return;
  const GraphLayout& L = *m_layout;
  std::vector<int32_t> items, edges;
  const QRectF area = visible.adjusted(-20, -20, 20, 20);
  if (area.contains(L.bounds)) {  // everything is visible: skip the index
    items.resize(L.items.size());
    edges.resize(L.edges.size());
    std::iota(items.begin(), items.end(), 0);
    std::iota(edges.begin(), edges.end(), 0);
  } else {
    L.index.query(area, &items, &edges);
  }
  // The painter's scale (for exports it may differ from m_scale).
  const double zoom = std::sqrt(std::abs(p.transform().determinant()));
  const bool detailed = zoom >= kTextZoom;
  const bool curved = zoom >= kTextZoom * 0.5;

  auto touchesSelection = [&](const LayoutEdge& e) {
    return m_selected >= 0 && (e.from == m_selected || e.to == m_selected);
  };

  // Expanded control-flow nodes first: their frames lie under the edges and boxes inside them.
  if (!L.frames.empty() || L.grouping)
    for (int32_t ii : items)
      if (L.items[(size_t)ii].expanded) isGroup(ii) ? paintGroupFrame(p, ii, detailed) : paintExpanded(p, ii, detailed);

  // Edges.
  if (curved) {
    p.setRenderHint(QPainter::Antialiasing, true);
    QPen pen(kEdge, 1.2);
    p.setBrush(Qt::NoBrush);
    for (int32_t ei : edges) {
      const LayoutEdge& e = L.edges[(size_t)ei];
      if (touchesSelection(e)) continue;
      pen.setStyle(e.outerScope ? Qt::DashLine : Qt::SolidLine);
      p.setPen(pen);
      p.setBrush(Qt::NoBrush);
      p.drawPath(edgePath(e.points));
      drawArrowHead(p, e.points.back(), kEdge);
    }
  } else {
    // Far out: straight polylines in one call, no antialiasing.
    p.setRenderHint(QPainter::Antialiasing, false);
    std::vector<QLineF> lines;
    lines.reserve(edges.size() * 2);
    // Segments shorter than a couple of device pixels vanish under the boxes anyway: skipping them
    // keeps a 50,000-node overview cheap. Runs of bend points are merged the same way.
    const double minLength = 2.5 / zoom;
    for (int32_t ei : edges) {
      const LayoutEdge& e = L.edges[(size_t)ei];
      QPointF from = e.points.front();
      for (size_t k = 1; k < e.points.size(); ++k) {
        const QPointF& to = e.points[k];
        if (k + 1 < e.points.size() && std::abs(to.x() - from.x()) + std::abs(to.y() - from.y()) < minLength) continue;
        if (std::abs(to.x() - from.x()) + std::abs(to.y() - from.y()) >= minLength) lines.emplace_back(from, to);
        from = to;
      }
    }
    QPen pen(kEdge, 0);  // cosmetic: one device pixel
    p.setPen(pen);
    p.drawLines(lines.data(), (int)lines.size());
  }
  // Edges of the selected item on top, in the accent colour.
  if (m_selected >= 0) {
    p.setRenderHint(QPainter::Antialiasing, true);
    for (int32_t ei : edges) {
      const LayoutEdge& e = L.edges[(size_t)ei];
      if (!touchesSelection(e)) continue;
      p.setPen(QPen(kAccent, curved ? 2.0 : 0, e.outerScope ? Qt::DashLine : Qt::SolidLine));
      p.setBrush(Qt::NoBrush);
      p.drawPath(edgePath(e.points));
      if (curved) drawArrowHead(p, e.points.back(), kAccent);
    }
  }

  // Quantization points: a diamond on each input edge of a quantized node that quantizes it.
  if (curved && !m_quantEdge.empty()) {
    p.setRenderHint(QPainter::Antialiasing, true);
    p.setPen(QPen(Qt::white, 1.2));
    p.setBrush(kQuantPoint);
    for (int32_t ei : edges) {
      if (!m_quantEdge[(size_t)ei]) continue;
      const QPointF c = L.edges[(size_t)ei].points.back() - QPointF(0, kArrowLength + 6);
      const QPointF d[4] = {c + QPointF(0, -5.5), c + QPointF(4.5, 0), c + QPointF(0, 5.5), c + QPointF(-4.5, 0)};
      p.drawPolygon(d, 4);
    }
  }

  // Boxes.
  if (!detailed) {
    p.setRenderHint(QPainter::Antialiasing, false);
    std::map<QRgb, std::vector<QRectF>> byColour;
    const QTransform toDevice = p.transform();
    const bool subPixel = zoom * 42 < 3;  // boxes a few pixels tall: many share a pixel
    const int devW = p.device() ? p.device()->width() : 0, devH = p.device() ? p.device()->height() : 0;
    std::vector<uint8_t> taken(subPixel ? (size_t)devW * (size_t)devH : 0, 0);
    for (int32_t ii : items) {
      const LayoutItem& it = L.items[(size_t)ii];
      if (it.expanded) continue;
      const QRgb slot = it.kind == LayoutItem::Kind::Node || it.kind == LayoutItem::Kind::Group ? m_fill[(size_t)ii].rgb() : kIoBorder.rgb();
      if (subPixel) {
        // Draw in device pixels, once per pixel: a 50,000-node overview stays a few milliseconds.
        const QRectF d = toDevice.mapRect(it.rect);
        const int x = (int)d.center().x(), y = (int)d.center().y();
        if (x < 0 || y < 0 || x >= devW || y >= devH) continue;
        uint8_t& t = taken[(size_t)y * (size_t)devW + (size_t)x];
        if (t) continue;
        t = 1;
        // At least 3x2 pixels, so that the colours still read in an overview.
        const double w = std::max(3.0, std::round(d.width())), h = std::max(2.0, std::round(d.height()));
        byColour[slot].push_back(QRectF(std::floor(d.center().x() - w / 2), std::floor(d.center().y() - h / 2), w, h));
      } else {
        byColour[slot].push_back(it.rect);
      }
    }
    p.save();
    if (subPixel) p.resetTransform();
    p.setPen(Qt::NoPen);
    for (auto& [rgb, rects] : byColour) {
      p.setBrush(QColor(rgb));
      p.drawRects(rects.data(), (int)rects.size());
    }
    p.restore();
    if (L.grouping) paintGroupLabels(p, items);
  } else {
    p.setRenderHint(QPainter::Antialiasing, true);
    p.setRenderHint(QPainter::TextAntialiasing, true);
    const bool showNames = zoom >= kTextZoom * 1.5;
    for (int32_t ii : items) {
      const LayoutItem& it = L.items[(size_t)ii];
      if (it.expanded) continue;
      const QRectF& r = it.rect;
      const bool hover = ii == m_hover;
      if (it.kind == LayoutItem::Kind::Node) {
        QColor fill = m_fill[(size_t)ii];
        if (hover) fill = fill.lighter(110);
        const QColor text = textColorOn(fill);
        const bool excluded = m_excluded[(size_t)ii];
        p.setPen(excluded ? QPen(QColor(0x45, 0x4c, 0x55), 1.6, Qt::DashLine) : QPen(fill.darker(135), 1.0));
        p.setBrush(fill);
        p.drawRoundedRect(r, 5, 5);
        if (excluded) {
          p.setPen(Qt::NoPen);
          p.setBrush(QBrush(QColor(0x30, 0x36, 0x3d, 70), Qt::BDiagPattern));
          p.drawRoundedRect(r, 5, 5);
        }
        if (m_highlighted[(size_t)ii]) {
          p.setBrush(Qt::NoBrush);
          p.setPen(QPen(kHighlight, 2.2));
          p.drawRoundedRect(r.adjusted(-4, -4, 4, 4), 8, 8);
        }
        p.setPen(text);
        p.setFont(m_opFont);
        if (showNames && !m_names[(size_t)ii].isEmpty()) {
          p.drawText(QRectF(r.left() + 6, r.top() + 3, r.width() - 12, 20), Qt::AlignHCenter | Qt::AlignVCenter,
                     m_titles[(size_t)ii]);
          QString& elided = m_elidedNames[(size_t)ii];
          if (elided.isNull()) elided = QFontMetricsF(m_nameFont).elidedText(m_names[(size_t)ii], Qt::ElideMiddle, r.width() - 14);
          p.setFont(m_nameFont);
          QColor nameColour = text;
          nameColour.setAlpha(text == Qt::white ? 215 : 190);
          p.setPen(nameColour);
          p.drawText(QRectF(r.left() + 6, r.top() + 21, r.width() - 12, 17), Qt::AlignHCenter | Qt::AlignVCenter,
                     elided);
        } else {
          p.drawText(r, Qt::AlignCenter, m_titles[(size_t)ii]);
        }
        if (it.subgraphNodes > 0) paintMarker(p, ii);
      } else if (it.kind == LayoutItem::Kind::Group) {
        paintGroupBox(p, ii, hover);
      } else {
        // A value read from an outer scope: a dashed pill.
        const Qt::PenStyle style = it.kind == LayoutItem::Kind::OuterRef ? Qt::DashLine : Qt::SolidLine;
        p.setPen(QPen(hover ? kIoBorder.darker(130) : kIoBorder, 1.0, style));
        p.setBrush(hover ? kIoFill.darker(104) : kIoFill);
        p.drawRoundedRect(r, r.height() / 2, r.height() / 2);
        p.setPen(kIoText);
        p.setFont(m_nameFont);
        QString& elided = m_elidedNames[(size_t)ii];
        if (elided.isNull())
          elided = QFontMetricsF(m_nameFont).elidedText(m_titles[(size_t)ii], Qt::ElideMiddle, r.width() - 16);
        p.drawText(r, Qt::AlignCenter, elided);
      }
    }
  }

  // Selection outline.
  if (m_selected >= 0 && std::binary_search(items.begin(), items.end(), m_selected)) {
    const LayoutItem& it = L.items[(size_t)m_selected];
    p.setRenderHint(QPainter::Antialiasing, true);
    p.setBrush(Qt::NoBrush);
    p.setPen(QPen(kAccent, detailed ? 3.0 : 0.0));
    const QRectF r = it.rect.adjusted(-2.5, -2.5, 2.5, 2.5);
    const double radius = it.kind == LayoutItem::Kind::Node ? 7 : r.height() / 2;
    if (detailed) p.drawRoundedRect(r, radius, radius);
    else p.drawRect(r.adjusted(-3 / zoom, -3 / zoom, 3 / zoom, 3 / zoom));
  }
}

void GraphView::paintLegend(QPainter& p) const {
  if (!m_layout) return;
  if (m_result && m_colouring != Colouring::OpType) return paintSnrLegend(p);
  std::array<int, kOpCategoryCount> counts{};
  for (const LayoutItem& it : m_layout->items)
    if (it.kind == LayoutItem::Kind::Node) ++counts[(size_t)it.category];
  QFont f = font();
  f.setPixelSize(11);
  p.setFont(f);
  QFontMetrics fm(f);
  const int rowH = fm.height() + 4, sw = 12;
  int rows = 1, textW = fm.horizontalAdvance(QStringLiteral("Graph input / output"));
  for (int c = 0; c < kOpCategoryCount; ++c)
    if (counts[(size_t)c]) {
      ++rows;
      textW = std::max(textW, fm.horizontalAdvance(opCategoryName((OpCategory)c) + QStringLiteral("  0000")));
    }
  const QRect box(10, height() - 10 - rows * rowH - 12, sw + 8 + textW + 20, rows * rowH + 12);
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(QColor(0xd0, 0xd5, 0xdb));
  p.setBrush(QColor(255, 255, 255, 235));
  p.drawRoundedRect(box, 5, 5);
  int y = box.top() + 6;
  auto row = [&](const QColor& c, const QString& label, const QString& count, bool pill) {
    QRectF swatch(box.left() + 10, y + (rowH - sw) / 2.0, sw, sw);
    p.setPen(pill ? QPen(kIoBorder, 1) : Qt::NoPen);
    p.setBrush(c);
    if (pill) p.drawRoundedRect(swatch, sw / 2.0, sw / 2.0);
    else p.drawRoundedRect(swatch, 2, 2);
    p.setPen(QColor(0x33, 0x3a, 0x42));
    p.drawText(QRect(box.left() + 10 + sw + 8, y, textW, rowH), Qt::AlignLeft | Qt::AlignVCenter, label);
    if (!count.isEmpty()) {
      p.setPen(QColor(0x80, 0x88, 0x90));
      p.drawText(QRect(box.left() + 10 + sw + 8, y, textW, rowH), Qt::AlignRight | Qt::AlignVCenter, count);
    }
    y += rowH;
  };
  for (int c = 0; c < kOpCategoryCount; ++c)
    if (counts[(size_t)c])
      row(opCategoryColor((OpCategory)c), opCategoryName((OpCategory)c), QString::number(counts[(size_t)c]), false);
  row(kIoFill, QStringLiteral("Graph input / output"), QString(), true);
}

void GraphView::paintSnrLegend(QPainter& p) const {
  QFont f = font();
  f.setPixelSize(11);
  QFont bold = f;
  bold.setBold(true);
  QFontMetrics fm(f);
  const int rowH = fm.height() + 4, sw = 12, barW = 180, barH = 12;
  const QString title = m_colouring == Colouring::GraphwiseSnr   ? QStringLiteral("Graph-wise SNR (dB)")
                        : m_colouring == Colouring::LayerwiseSnr ? QStringLiteral("Layer-wise SNR (dB)")
                                                                 : QStringLiteral("Sensitivity: output SNR (dB)");
  const int rows = 3;
  const int boxW = std::max(barW, fm.horizontalAdvance(QStringLiteral("Excluded from quantization  "))) + 24;
  const int boxH = rowH + barH + fm.height() + 8 + rows * rowH + 12;
  const QRect box(10, height() - 10 - boxH, boxW, boxH);
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(QColor(0xd0, 0xd5, 0xdb));
  p.setBrush(QColor(255, 255, 255, 240));
  p.drawRoundedRect(box, 5, 5);
  int y = box.top() + 6;
  p.setFont(bold);
  p.setPen(QColor(0x33, 0x3a, 0x42));
  p.drawText(QRect(box.left() + 10, y, boxW - 20, rowH), Qt::AlignLeft | Qt::AlignVCenter, title);
  y += rowH;
  const QRect bar(box.left() + 10, y, barW, barH);
  for (int x = 0; x < barW; ++x) {
    const double db = m_snrScale.lo + (m_snrScale.hi - m_snrScale.lo) * (x + 0.5) / barW;
    p.fillRect(QRect(bar.left() + x, bar.top(), 1, barH), m_snrScale.color(db));
  }
  p.setBrush(Qt::NoBrush);
  p.setPen(QColor(0xb0, 0xb6, 0xbd));
  p.drawRect(bar);
  p.setFont(f);
  p.setPen(QColor(0x33, 0x3a, 0x42));
  y += barH + 2;
  const int ticks = 4;
  for (int k = 0; k <= ticks; ++k) {
    const double db = m_snrScale.lo + (m_snrScale.hi - m_snrScale.lo) * k / ticks;
    const int x = bar.left() + barW * k / ticks;
    QString label = QString::number(db, 'f', 0);
    if (k == 0) label = QStringLiteral("≤") + label;
    if (k == ticks) label = QStringLiteral("≥") + label;
    const int w = fm.horizontalAdvance(label);
    const int left = k == 0 ? x : k == ticks ? x - w : x - w / 2;
    p.drawText(QRect(left, y, w + 2, fm.height()), Qt::AlignLeft | Qt::AlignTop, label);
  }
  y += fm.height() + 8;
  auto row = [&](const QString& label, auto&& drawSwatch) {
    drawSwatch(QRectF(box.left() + 10, y + (rowH - sw) / 2.0, sw, sw));
    p.setPen(QColor(0x33, 0x3a, 0x42));
    p.setFont(f);
    p.drawText(QRect(box.left() + 10 + sw + 8, y, boxW - sw - 28, rowH), Qt::AlignLeft | Qt::AlignVCenter, label);
    y += rowH;
  };
  row(QStringLiteral("Excluded from quantization"), [&](const QRectF& r) {
    p.setPen(QPen(QColor(0x45, 0x4c, 0x55), 1.2, Qt::DashLine));
    p.setBrush(QColor(0xee, 0xee, 0xee));
    p.drawRoundedRect(r, 2, 2);
    p.setPen(Qt::NoPen);
    p.setBrush(QBrush(QColor(0x30, 0x36, 0x3d, 110), Qt::BDiagPattern));
    p.drawRoundedRect(r, 2, 2);
  });
  row(m_colouring == Colouring::GraphwiseSnr ? QStringLiteral("No float output") : QStringLiteral("Not quantizable"),
      [&](const QRectF& r) {
        p.setPen(QPen(SnrScale::noValue().darker(130), 1));
        p.setBrush(SnrScale::noValue());
        p.drawRoundedRect(r, 2, 2);
      });
  row(QStringLiteral("Quantization point (Q/DQ)"), [&](const QRectF& r) {
    const QPointF c = r.center();
    const QPointF d[4] = {c + QPointF(0, -6), c + QPointF(5, 0), c + QPointF(0, 6), c + QPointF(-5, 0)};
    p.setPen(QPen(Qt::white, 1));
    p.setBrush(kQuantPoint);
    p.drawPolygon(d, 4);
  });
}

void GraphView::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() != 0 ? event->angleDelta().y() : event->pixelDelta().y();
  if (steps == 0) return;
  zoomAround(event->position(), std::pow(1.0015, steps));
  event->accept();
}

void GraphView::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return QWidget::mousePressEvent(event);
  m_pressed = true;
  m_panning = false;
  m_pressPos = event->position().toPoint();
  m_pressOrigin = m_origin;
}

void GraphView::mouseMoveEvent(QMouseEvent* event) {
  if (m_pressed) {
    const QPoint delta = event->position().toPoint() - m_pressPos;
    if (!m_panning && delta.manhattanLength() >= QApplication::startDragDistance()) {
      m_panning = true;
      setCursor(Qt::ClosedHandCursor);
    }
    if (m_panning) {
      m_origin = m_pressOrigin - QPointF(delta) / m_scale;
      update();
    }
    return;
  }
  if (!m_layout) return;
  const int hit = m_layout->itemAt(mapToScene(event->position()));
  if (hit != m_hover) {
    m_hover = hit;
    setCursor(hit >= 0 ? Qt::PointingHandCursor : Qt::OpenHandCursor);
    if (hit >= 0) {
      const QString name = itemName(hit);
      setToolTip(name.isEmpty() ? itemTitle(hit) : QStringLiteral("<b>%1</b><br>%2").arg(itemTitle(hit).toHtmlEscaped(), name.toHtmlEscaped()));
    } else {
      setToolTip(QString());
    }
    update();
  }
}

void GraphView::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || !m_pressed) return QWidget::mouseReleaseEvent(event);
  m_pressed = false;
  if (m_panning) {
    m_panning = false;
    setCursor(m_hover >= 0 ? Qt::PointingHandCursor : Qt::OpenHandCursor);
    return;
  }
  if (!m_layout) return;
  const int hit = m_layout->itemAt(mapToScene(event->position()));
  setSelectedItem(hit, false);
  emit itemSelected(hit);
}

void GraphView::mouseDoubleClickEvent(QMouseEvent* event) {
  if (!m_layout) return;
  const QPointF scenePos = mapToScene(event->position());
  const int hit = m_layout->itemAt(scenePos);
  if (hit < 0) return;
  // A control-flow node: expand it, or collapse it from its title strip.
  if (isExpandable(hit) &&
      (!isExpanded(hit) || scenePos.y() < m_layout->items[(size_t)hit].rect.top() + frameHeaderHeight())) {
    setSelectedItem(hit, false);
    setExpanded(hit, !isExpanded(hit));
    emit itemSelected(m_selected);
    return;
  }
  setScale(std::max(m_scale, 1.0));
  setSelectedItem(hit, true);
  emit itemSelected(hit);
}

void GraphView::keyPressEvent(QKeyEvent* event) {
  const double step = 80 / m_scale;
  switch (event->key()) {
    case Qt::Key_F: fitToWindow(); break;
    case Qt::Key_Plus:
    case Qt::Key_Equal: zoomIn(); break;
    case Qt::Key_Minus: zoomOut(); break;
    case Qt::Key_0: resetZoom(); break;
    case Qt::Key_Left: m_origin.rx() -= step; update(); break;
    case Qt::Key_Right: m_origin.rx() += step; update(); break;
    case Qt::Key_Up: m_origin.ry() -= step; update(); break;
    case Qt::Key_Down: m_origin.ry() += step; update(); break;
    case Qt::Key_Escape:
      setSelectedItem(-1, false);
      emit itemSelected(-1);
      break;
    default: QWidget::keyPressEvent(event);
  }
}

void GraphView::contextMenuEvent(QContextMenuEvent* event) {
  if (!m_layout) return;
  const int hit = m_layout->itemAt(mapToScene(event->pos()));
  QMenu menu(this);
  if (hit >= 0) {
    setSelectedItem(hit, false);
    emit itemSelected(hit);
    const bool isNode = m_layout->items[(size_t)hit].kind == LayoutItem::Kind::Node;
    const bool nested = m_layout->items[(size_t)hit].frame >= 0;
    const QString name = isNode ? itemName(hit) : itemTitle(hit);
    if (isExpandable(hit)) {
      const bool open = isExpanded(hit);
      const QString what = isGroup(hit) ? QStringLiteral("group") : QStringLiteral("subgraphs");
      menu.addAction((open ? QStringLiteral("Collapse ") : QStringLiteral("Expand ")) + what, this,
                     [this, hit, open] { setExpanded(hit, !open); });
      menu.addSeparator();
    }
    menu.addAction(QStringLiteral("Copy name"), this, [name] { QApplication::clipboard()->setText(name); });
    QAction* show = menu.addAction(QStringLiteral("Show in table"), this, [this, hit] { emit showInTableRequested(hit); });
    show->setEnabled(isNode && !nested);
    if (isNode && nested) {
      menu.addSeparator();
      menu.addAction(QStringLiteral("Inside a subgraph: kept in float"))->setEnabled(false);
    } else if (isNode && m_result) {
      const NodeId node = m_layout->items[(size_t)hit].id;
      const NodeQuantState& st = m_result->plan.nodes[(size_t)node];
      const QString op = itemTitle(hit);
      menu.addSeparator();
      if (!st.quantizable) {
        menu.addAction(QStringLiteral("Not quantizable: %1").arg(QString::fromStdString(st.reason)))->setEnabled(false);
      } else if (st.quantized) {
        menu.addAction(QStringLiteral("Exclude this node"), this, [this, node] { emit quantizeRequested(node, false); });
      } else {
        menu.addAction(QStringLiteral("Quantize this node"), this, [this, node] { emit quantizeRequested(node, true); });
      }
      menu.addAction(QStringLiteral("Exclude every %1 node").arg(op), this, [this, op] { emit opTypeQuantizeRequested(op, false); });
      menu.addAction(QStringLiteral("Quantize every %1 node").arg(op), this, [this, op] { emit opTypeQuantizeRequested(op, true); });
      menu.addAction(QStringLiteral("Show histogram"), this, [this, node] { emit histogramRequested(node); });
    }
    menu.addSeparator();
  }
  menu.addAction(QStringLiteral("Fit to window"), this, &GraphView::fitToWindow);
  menu.exec(event->globalPos());
}

void GraphView::leaveEvent(QEvent*) {
  if (m_hover >= 0) {
    m_hover = -1;
    update();
  }
}

}  // namespace qs::ui
