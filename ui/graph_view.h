// The graph view: paints a GraphLayout with its own transform, querying the layout's spatial index
// for the visible items only, with less detail as the zoom drops. Wheel zooms around the cursor,
// dragging pans, F fits the graph to the window. With an analysis, boxes are coloured by SNR (the
// user's choice of metric, with a colour scale), excluded nodes are hatched with a dashed outline and
// quantization points are drawn as diamonds on the input edges of quantized nodes.
// Control-flow nodes carry a "+N" marker (N: nodes inside their subgraphs); double-clicking one, or
// its context menu, draws its subgraphs inside it, one labelled frame per graph attribute. Edges of
// outer-scope reads (implicit inputs) are dashed. Subgraph nodes run in float: they are never
// coloured by SNR.
#pragma once

#include <QFont>
#include <QWidget>
#include <memory>
#include <set>
#include <vector>

#include "core/analysis/results.h"
#include "ui/graph_layout.h"
#include "ui/group_layout.h"
#include "ui/snr_scale.h"

namespace qs::ui {

class GraphMinimap;

class GraphView : public QWidget {
  Q_OBJECT
 public:
  explicit GraphView(QWidget* parent = nullptr);

  /// Shows `layout` (may be null: empty view) and frames its top; everything collapsed.
  void setGraphLayout(std::shared_ptr<const GraphLayout> layout);
  /// The layout shown now: the one set, or that one with subgraphs expanded. Items below its
  /// mainItemCount keep their indices across expansions.
  const std::shared_ptr<const GraphLayout>& graphLayout() const { return m_layout; }

  /// Whether `item` is a control-flow node (has subgraphs), and whether they are drawn inside it.
  bool isExpandable(int item) const;
  bool isExpanded(int item) const;
  /// Draws (or hides) a control-flow node's subgraphs inside it. Only coordinates are recomputed;
  /// the item stays where it is on screen and the selection follows its item.
  void setExpanded(int item, bool expanded);

  /// Grouped layouts (graph_view_groups.cpp): double-clicking a group, or its context menu, expands it
  /// into a frame of its members (only that group is laid out anew) or collapses it from its title.
  bool isGroup(int item) const;
  /// Shows `node`'s own box, expanding the groups that hide it; returns its item (-1: none).
  int revealNode(NodeId node);
  /// Selects and centres the node with the lowest graph-wise SNR of the analysis (quantized nodes),
  /// expanding its groups, and emits itemSelected. Returns its item, or -1 without an analysis.
  int goToWorstNode();
  /// Worst and mean of the colouring's metric over a group's nodes (NaN without values).
  std::pair<double, double> groupSnr(int32_t group) const;
  /// The overview in the corner (shown while the graph does not fit the window).
  GraphMinimap* minimap() const { return m_minimap; }

  /// Fonts the layout was measured with; pass the same to computeGraphLayout.
  LayoutOptions layoutOptions() const;

  int selectedItem() const { return m_selected; }
  /// Selects an item (-1 clears) without emitting itemSelected; centres it when `center`.
  void setSelectedItem(int item, bool center);

  /// Items whose node name, op type or tensor names contain `text` (case-insensitive);
  /// exact name matches first, then in layout order.
  std::vector<int32_t> findItems(const QString& text) const;

  double zoom() const { return m_scale; }
  /// Sets the zoom (1 = one scene unit per pixel) around the centre of the view.
  void setZoom(double zoom);
  QPointF mapToScene(const QPointF& widgetPos) const;
  QPointF mapFromScene(const QPointF& scenePos) const;
  void centerOn(const QPointF& scenePos);
  /// Renders `scene` (scene coordinates) into `painter`; used by paintEvent and for export.
  void renderScene(QPainter& painter, const QRectF& visibleScene) const;

  /// Zoom below which boxes are plain rectangles without text.
  static constexpr double kTextZoom = 0.33;

  enum class Colouring { OpType, GraphwiseSnr, LayerwiseSnr, Sensitivity };
  /// Shows an analysis of the laid-out model (null: none; boxes take op-type colours).
  void setAnalysis(std::shared_ptr<const AnalysisResult> result);
  const std::shared_ptr<const AnalysisResult>& analysis() const { return m_result; }
  void setColouring(Colouring c);
  Colouring colouring() const { return m_colouring; }
  /// The scale the SNR colours use now (valid in an SNR colouring with an analysis).
  const SnrScale& snrScale() const { return m_snrScale; }
  /// The fill of an item's box as painted now.
  QColor itemFill(int item) const;
  /// Nodes outlined in red (below the SNR plot's threshold); indexed by NodeId, empty for none.
  void setHighlightedNodes(std::vector<char> nodes);
  /// Edges that carry a quantization point (for tests).
  int quantizationPointCount() const;

 public slots:
  void fitToWindow();
  void zoomIn();
  void zoomOut();
  void resetZoom();

 signals:
  /// The user clicked an item (-1: empty space).
  void itemSelected(int item);
  /// The user chose "Show in table" on an item.
  void showInTableRequested(int item);
  void zoomChanged(double zoom);
  /// Context menu: quantize (true) or exclude (false) a node.
  void quantizeRequested(qs::NodeId node, bool on);
  /// Context menu: set every node of an op type.
  void opTypeQuantizeRequested(const QString& opType, bool on);
  /// Context menu: "Show histogram".
  void histogramRequested(qs::NodeId node);
  /// A control-flow node was expanded or collapsed: graphLayout() is a new layout.
  void graphLayoutChanged();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void zoomAround(const QPointF& widgetPos, double factor);
  void setScale(double scale);
  void prepareLabels();
  QString itemTitle(int item) const;  // op type, or the tensor name of an input/output box
  QString itemName(int item) const;   // node name ("" for input/output boxes)
  void paintLegend(QPainter& p) const;
  void paintSnrLegend(QPainter& p) const;
  void recolour();
  void paintEmpty(QPainter& p) const;
  void paintExpanded(QPainter& p, int item, bool detailed) const;
  void paintMarker(QPainter& p, int item) const;
  static double frameHeaderHeight();  // an expanded node's title strip (graph_view_control_flow.cpp)
  void setGroupExpanded(int item, bool expanded);
  void relayoutGroups(std::vector<char> expanded, int anchorItem);
  void recolourGroups();
  double nodeMetric(NodeId node) const;
  void paintGroupBox(QPainter& p, int item, bool hover) const;
  void paintGroupFrame(QPainter& p, int item, bool detailed) const;
  void paintGroupLabels(QPainter& p, const std::vector<int32_t>& items) const;  // far out: names only
  void placeMinimap();

  std::shared_ptr<const GraphLayout> m_layout;
  std::shared_ptr<const GraphLayout> m_baseLayout;  // as loaded, nothing expanded
  std::set<const Node*> m_expanded;                 // control-flow nodes drawn expanded
  SkeletonCache m_skeletons;                        // subgraph orderings, built on first expansion
  GroupSkeletonCache m_groupSkeletons;              // grouped layouts: each level's ordering
  std::vector<double> m_groupWorst, m_groupMean;    // per group, in the current colouring
  GraphMinimap* m_minimap = nullptr;
  std::shared_ptr<const AnalysisResult> m_result;
  Colouring m_colouring = Colouring::GraphwiseSnr;
  SnrScale m_snrScale;
  std::vector<QColor> m_fill;        // per item, in the current colouring
  std::vector<char> m_excluded;      // per item: quantizable node switched off
  std::vector<char> m_highlighted;   // per item
  std::vector<char> m_quantEdge;     // per edge: its target quantizes this tensor
  std::vector<char> m_highlightNodes;
  std::vector<QString> m_titles, m_names;
  mutable std::vector<QString> m_elidedNames;  // filled as items are first painted
  QFont m_opFont, m_nameFont;
  double m_scale = 1.0;
  QPointF m_origin;  // scene point at the widget's top-left corner
  int m_selected = -1;
  int m_hover = -1;
  bool m_pressed = false, m_panning = false;
  QPoint m_pressPos;
  QPointF m_pressOrigin;
};

}  // namespace qs::ui
