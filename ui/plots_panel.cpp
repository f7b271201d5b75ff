#include "ui/plots_panel.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QSettings>
#include <QTabWidget>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "core/numeric/fake_quant.h"
#include "ui/fallback_curve_plot.h"
#include "ui/realisation_text.h"
#include "ui/snr_scale.h"

namespace qs::ui {

namespace {

const QColor kGraphwise(0x1f, 0x5f, 0xa8);
const QColor kLayerwise(0xe0, 0x7b, 0x10);
const QColor kBelow(0xd0, 0x1c, 0x8b);
const QColor kSelected(0xf0, 0x8c, 0x00);
// Clip-range colours per CalibMethod (max, entropy, percentile, mse).
const QColor kMethodColours[4] = {QColor(0x33, 0x33, 0x33), QColor(0x1f, 0x77, 0xb4), QColor(0x2c, 0xa0, 0x2c),
                                  QColor(0x94, 0x67, 0xbd)};
constexpr int kMaxScatterPoints = 20000;

double finiteOrNaN(double v) { return std::isfinite(v) ? v : qQNaN(); }

QCPTextElement* addTitle(QCustomPlot* plot) {
  plot->plotLayout()->insertRow(0);
  QFont f = plot->font();
  f.setPointSizeF(f.pointSizeF() * 1.0);
  f.setBold(true);
  auto* title = new QCPTextElement(plot, QString(), f);
  plot->plotLayout()->addElement(0, 0, title);
  return title;
}

// Moves the legend out of the axis rect into a row under the title, laid out in columns.
void legendBelowTitle(QCustomPlot* plot) {
  plot->legend->setVisible(true);
  plot->axisRect()->insetLayout()->take(plot->legend);
  plot->plotLayout()->insertRow(1);
  plot->plotLayout()->addElement(1, 0, plot->legend);
  plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
  plot->legend->setBorderPen(Qt::NoPen);
  plot->legend->setBrush(Qt::NoBrush);
  plot->legend->setMargins(QMargins(4, 0, 4, 0));
  QFont f = plot->font();
  f.setPointSizeF(f.pointSizeF() * 0.9);
  plot->legend->setFont(f);
  plot->plotLayout()->setRowStretchFactor(1, 0.001);
}

QCPTextElement* titleOf(QCustomPlot* plot) { return qobject_cast<QCPTextElement*>(plot->plotLayout()->element(0, 0)); }

void stylePlot(QCustomPlot* plot) {
  plot->setBackground(QColor(0xfa, 0xfb, 0xfc));
  plot->axisRect()->setBackground(Qt::white);
  for (QCPAxis* a : {plot->xAxis, plot->yAxis}) {
    a->grid()->setPen(QPen(QColor(0xe3, 0xe6, 0xea), 0));
    a->grid()->setSubGridVisible(false);
    a->setBasePen(QPen(QColor(0x9a, 0xa1, 0xa9)));
    a->setTickPen(QPen(QColor(0x9a, 0xa1, 0xa9)));
    a->setSubTickPen(QPen(QColor(0xc0, 0xc5, 0xcb)));
  }
  plot->setNoAntialiasingOnDrag(true);
}

}  // namespace

struct PlotsPanel::Capture {
  uint64_t generation = 0;
  ValueId value = kNoValue;
  QVector<double> x, y;
  int64_t total = 0;
  float scale = 0, amax = 0;
  double snrDb = NAN;
  QString error;
};

PlotsPanel::PlotsPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->setSpacing(2);
  m_tabs = new QTabWidget(this);
  m_tabs->setDocumentMode(true);
  buildSnrPlot();
  buildHistogramPlot();
  buildScatterPlot();
  m_curvePlot = new FallbackCurvePlot(m_tabs);
  m_tabs->addTab(m_curvePlot, QStringLiteral("Fallback curve"));
  auto* save = new QToolButton(m_tabs);
  save->setText(QStringLiteral("Save plot…"));
  save->setToolTip(QStringLiteral("Save the plot shown as PNG or PDF"));
  save->setAutoRaise(true);
  connect(save, &QToolButton::clicked, this, &PlotsPanel::saveCurrent);
  m_tabs->setCornerWidget(save, Qt::TopRightCorner);
  layout->addWidget(m_tabs);
  connect(m_tabs, &QTabWidget::currentChanged, this, [this](int tab) {
    if (tab == ScatterTab && m_scatterPoints == 0 && m_tensor != kNoValue) startScatter();
  });
}

PlotsPanel::~PlotsPanel() {
  if (m_scatterWatcher) m_scatterWatcher->waitForFinished();
}

QCustomPlot* PlotsPanel::plot(Tab tab) const {
  switch (tab) {
    case SnrTab: return m_snr;
    case HistogramTab: return m_hist;
    case ScatterTab: return m_scatter;
    case FallbackTab: return m_curvePlot->plot();
  }
  return nullptr;
}

void PlotsPanel::buildSnrPlot() {
  m_snr = new QCustomPlot(m_tabs);
  stylePlot(m_snr);
  addTitle(m_snr)->setText(QStringLiteral("Per-layer SNR (calibrate to see it)"));
  m_snr->xAxis->setLabel(QStringLiteral("node, in topological order"));
  m_snr->yAxis->setLabel(QStringLiteral("SNR (dB)"));
  QCPGraph* gw = m_snr->addGraph();
  gw->setName(QStringLiteral("graph-wise"));
  gw->setPen(QPen(kGraphwise, 1.6));
  gw->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, kGraphwise, Qt::white, 4));
  QCPGraph* lw = m_snr->addGraph();
  lw->setName(QStringLiteral("layer-wise (node alone)"));
  lw->setLineStyle(QCPGraph::lsNone);
  lw->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, kLayerwise, kLayerwise, 5));
  QCPGraph* below = m_snr->addGraph();
  below->setName(QStringLiteral("below threshold"));
  below->setLineStyle(QCPGraph::lsNone);
  below->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(kBelow, 1.8), QBrush(kBelow), 6));
  m_beforeGraph = m_snr->addGraph();
  m_beforeGraph->setName(QStringLiteral("graph-wise, no remedies"));
  m_beforeGraph->setPen(QPen(QColor(0x8a, 0x8f, 0x96), 1.2, Qt::DashLine));
  m_beforeGraph->setVisible(false);
  m_beforeGraph->removeFromLegend();
  legendBelowTitle(m_snr);
  m_thresholdLine = new QCPItemStraightLine(m_snr);
  m_thresholdLine->setPen(QPen(kBelow, 1.5, Qt::DashLine));
  m_thresholdLine->setSelectable(false);
  m_thresholdLabel = new QCPItemText(m_snr);
  m_thresholdLabel->position->setType(QCPItemPosition::ptAxisRectRatio);
  m_thresholdLabel->position->setCoords(0.99, 0.02);
  m_thresholdLabel->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
  m_thresholdLabel->setColor(kBelow);
  m_thresholdLabel->setBrush(QColor(255, 255, 255, 220));
  m_thresholdLabel->setPadding(QMargins(4, 2, 4, 2));
  m_selectedLine = new QCPItemStraightLine(m_snr);
  m_selectedLine->setPen(QPen(kSelected, 1.5));
  m_selectedLine->setVisible(false);
  m_snr->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_snr->axisRect()->setRangeDrag(Qt::Horizontal);
  m_snr->axisRect()->setRangeZoom(Qt::Horizontal);
  m_snr->setToolTip(QStringLiteral("Drag the dashed line to set the threshold; click a point to select its node; "
                                   "wheel zooms, drag pans"));

  // The threshold line is dragged with the mouse; a click elsewhere selects the nearest node.
  connect(m_snr, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    const double py = m_snr->yAxis->coordToPixel(m_threshold);
    if (e->button() == Qt::LeftButton && std::abs(e->position().y() - py) <= 6) {
      m_dragging = true;
      m_snr->setInteraction(QCP::iRangeDrag, false);
    }
  });
  connect(m_snr, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
    if (m_dragging) {
      setThreshold(m_snr->yAxis->pixelToCoord(e->position().y()));
      return;
    }
    const double py = m_snr->yAxis->coordToPixel(m_threshold);
    m_snr->setCursor(std::abs(e->position().y() - py) <= 6 ? Qt::SizeVerCursor : Qt::ArrowCursor);
  });
  connect(m_snr, &QCustomPlot::mouseRelease, this, [this](QMouseEvent*) {
    if (!m_dragging) return;
    m_dragging = false;
    m_snr->setInteraction(QCP::iRangeDrag, true);
    emit thresholdChanged(m_threshold);
  });
  connect(m_snr, &QCustomPlot::plottableClick, this, [this](QCPAbstractPlottable* p, int index, QMouseEvent*) {
    auto* g = qobject_cast<QCPGraph*>(p);
    if (!g || m_dragging || index < 0 || index >= g->dataCount()) return;
    const int x = (int)std::lround(g->data()->at(index)->key);
    if (x >= 0 && x < (int)m_plotted.size()) emit nodeClicked(m_plotted[(size_t)x]);
  });
  for (int i = 0; i < 3; ++i) m_snr->graph(i)->setSelectable(QCP::stSingleData);
  m_tabs->addTab(m_snr, QStringLiteral("SNR per layer"));
}

void PlotsPanel::buildHistogramPlot() {
  m_hist = new QCustomPlot(m_tabs);
  stylePlot(m_hist);
  addTitle(m_hist)->setText(QStringLiteral("Histogram of the selected tensor"));
  m_hist->xAxis->setLabel(QStringLiteral("|x|"));
  m_hist->yAxis->setLabel(QStringLiteral("count"));
  m_hist->yAxis->setScaleType(QCPAxis::stLogarithmic);
  m_hist->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  m_hist->yAxis->setNumberFormat(QStringLiteral("eb"));
  m_hist->yAxis->setNumberPrecision(0);
  legendBelowTitle(m_hist);
  m_hist->legend->setWrap(3);
  m_hist->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_hist->axisRect()->setRangeDrag(Qt::Horizontal);
  m_hist->axisRect()->setRangeZoom(Qt::Horizontal);
  m_tabs->addTab(m_hist, QStringLiteral("Histogram"));
}

void PlotsPanel::buildScatterPlot() {
  m_scatter = new QCustomPlot(m_tabs);
  stylePlot(m_scatter);
  addTitle(m_scatter)->setText(QStringLiteral("Float against quantized values of the selected tensor"));
  m_scatter->xAxis->setLabel(QStringLiteral("float value"));
  m_scatter->yAxis->setLabel(QStringLiteral("quantized value (Q → DQ)"));
  m_scatter->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_tabs->addTab(m_scatter, QStringLiteral("Float vs quantized"));
}

void PlotsPanel::setAnalysis(std::shared_ptr<const Model> model, std::shared_ptr<const AnalysisResult> result,
                             std::shared_ptr<QuantSession> session, std::shared_ptr<const CalibrationData> data) {
  const bool newSession = session != m_session;
  if (model != m_model) m_thresholdSet = false;
  if (!m_thresholdSet && result) {
    std::vector<double> v;
    for (const NodeResult& r : result->nodes)
      if (r.hasGraphwise && std::isfinite(r.graphwise.snrDb)) v.push_back(r.graphwise.snrDb);
    if (!v.empty()) {
      std::sort(v.begin(), v.end());
      m_threshold = std::floor(v[v.size() / 10]);
    }
  }
  m_model = std::move(model);
  m_result = std::move(result);
  m_session = std::move(session);
  m_data = std::move(data);
  if (!m_model) m_node = -1;
  refreshSnr();
  // A toggle changes neither the statistics nor the scales: the histogram and scatter stay valid.
  if (newSession || !m_result) setSelectedNode(m_node);
}

void PlotsPanel::setBaseline(std::shared_ptr<const AnalysisResult> before) {
  if (before && (!m_model || before->nodes.size() != m_model->graph.nodes.size())) before.reset();
  if (before == m_before) return;
  m_before = std::move(before);
  refreshSnr();
}

int PlotsPanel::baselinePointCount() const { return m_beforeGraph->visible() ? m_beforeGraph->dataCount() : 0; }

void PlotsPanel::refreshSnr() {
  m_plotted.clear();
  QVector<double> x, gw, lx, lw, bx, bw;
  if (m_model && m_result) {
    for (NodeId id : m_model->graph.topoOrder) {
      const NodeResult& r = m_result->nodes[(size_t)id];
      if (!r.hasGraphwise) continue;
      const double k = (double)m_plotted.size();
      m_plotted.push_back(id);
      x << k;
      gw << finiteOrNaN(r.graphwise.snrDb);
      if (m_before && m_before->nodes.size() == m_result->nodes.size() && m_before->nodes[(size_t)id].hasGraphwise) {
        bx << k;
        bw << finiteOrNaN(m_before->nodes[(size_t)id].graphwise.snrDb);
      }
      if (r.hasLayerwise) {
        lx << k;
        lw << finiteOrNaN(r.layerwise.snrDb);
      }
    }
  }
  m_snr->graph(0)->setData(x, gw, true);
  m_snr->graph(1)->setData(lx, lw, true);
  m_beforeGraph->setData(bx, bw, true);
  m_beforeGraph->setVisible(!bx.isEmpty());
  if (bx.isEmpty()) m_beforeGraph->removeFromLegend();
  else m_beforeGraph->addToLegend();
  const QString realisations = m_result ? worstRealisationsShortText(*m_result) : QString();
  titleOf(m_snr)->setText(m_result ? QStringLiteral("Per-layer SNR · worst output %1 dB%2 · %3 samples")
                                         .arg(formatDb(m_result->worstOutputSnrDb()))
                                         .arg(realisations.isEmpty() ? QString() : QStringLiteral("\n(%1)").arg(realisations))
                                         .arg(m_result->samples)
                                   : QStringLiteral("Per-layer SNR (calibrate to see it)"));
  if (!x.isEmpty()) {
    double lo = 1e300, hi = -1e300;
    for (const QVector<double>* v : {&gw, &lw, &bw})
      for (double d : *v)
        if (std::isfinite(d)) {
          lo = std::min(lo, d);
          hi = std::max(hi, d);
        }
    if (lo > hi) lo = 0, hi = 40;
    lo = std::min(lo, m_threshold);
    hi = std::max(hi, m_threshold);
    m_snr->xAxis->setRange(-1, (double)x.size());
    m_snr->yAxis->setRange(std::floor(lo / 5) * 5 - 2, std::ceil(hi / 5) * 5 + 2);
  }
  refreshThreshold();
}

void PlotsPanel::setThreshold(double db) {
  if (!std::isfinite(db)) return;
  m_thresholdSet = true;
  m_threshold = std::round(db * 10) / 10;
  refreshThreshold();
}

std::vector<char> PlotsPanel::nodesBelowThreshold() const {
  std::vector<char> below;
  if (!m_model || !m_result || !m_thresholdSet) return below;
  below.assign(m_model->graph.nodes.size(), 0);
  for (size_t id = 0; id < below.size(); ++id) {
    const NodeResult& r = m_result->nodes[id];
    below[id] = r.hasGraphwise && r.graphwise.snrDb < m_threshold;
  }
  return below;
}

void PlotsPanel::refreshThreshold() {
  m_thresholdLine->point1->setCoords(0, m_threshold);
  m_thresholdLine->point2->setCoords(1, m_threshold);
  QVector<double> bx, by;
  const QCPGraph* gw = m_snr->graph(0);
  for (int i = 0; i < gw->dataCount(); ++i) {
    const double v = gw->data()->at(i)->value;
    if (v < m_threshold) {
      bx << gw->data()->at(i)->key;
      by << v;
    }
  }
  m_snr->graph(2)->setData(bx, by, true);
  m_thresholdLabel->setText(QStringLiteral("threshold %1 dB · %2 node%3 below").arg(m_threshold, 0, 'f', 1).arg(bx.size()).arg(bx.size() == 1 ? "" : "s"));
  m_thresholdLabel->setVisible((bool)m_result);
  m_thresholdLine->setVisible((bool)m_result);
  m_snr->replot(QCustomPlot::rpQueuedReplot);
}

ValueId PlotsPanel::tensorOfNode(NodeId node, QString* description) const {
  if (!m_model || !m_result || node < 0) return kNoValue;
  const Graph& g = m_model->graph;
  const Node& n = g.nodes[(size_t)node];
  auto describe = [&](ValueId v, const QString& role) {
    *description = QStringLiteral("'%1' (%2 of %3 '%4')")
                       .arg(QString::fromStdString(g.value(v).name), role, QString::fromStdString(n.opType),
                            QString::fromStdString(n.name));
  };
  // The node's own quantization point first (its quantized input), then its output when that is
  // calibrated as the input of a consumer.
  for (const ActivationPoint& a : m_result->plan.activations)
    if (a.node == node && m_result->activations.count(a.value)) {
      describe(a.value, QStringLiteral("input %1").arg(a.inputIndex));
      return a.value;
    }
  for (ValueId v : n.outputs)
    if (v != kNoValue && m_result->activations.count(v)) {
      describe(v, QStringLiteral("output"));
      return v;
    }
  return kNoValue;
}

ValueId PlotsPanel::sessionTensor(NodeId node, ValueId v) const {
  if (!m_session || !m_model || node < 0 || v == kNoValue) return v;
  const Graph& g = m_model->graph;
  const Graph& run = m_session->model().graph;
  if (&run == &g) return v;
  // A run that inserted nodes has its own ids: the same slot of the run's node of the same name (a
  // smoothed Conv's point is on the inserted Mul's output there), else the tensor of the same name.
  const Node& n = g.nodes[(size_t)node];
  for (const Node& r : run.nodes) {
    if (r.name != n.name) continue;
    for (size_t i = 0; i < n.inputs.size() && i < r.inputs.size(); ++i)
      if (n.inputs[i] == v) return r.inputs[i];
    for (size_t i = 0; i < n.outputs.size() && i < r.outputs.size(); ++i)
      if (n.outputs[i] == v) return r.outputs[i];
    break;
  }
  return run.findValue(g.value(v).name);
}

void PlotsPanel::setSelectedNode(NodeId node) {
  m_node = node;
  const auto it = std::find(m_plotted.begin(), m_plotted.end(), node);
  m_selectedLine->setVisible(node >= 0 && it != m_plotted.end());
  if (it != m_plotted.end()) {
    const double x = (double)(it - m_plotted.begin());
    m_selectedLine->point1->setCoords(x, 0);
    m_selectedLine->point2->setCoords(x, 1);
  }
  m_snr->replot(QCustomPlot::rpQueuedReplot);
  m_tensor = tensorOfNode(node, &m_tensorDescription);
  m_sessionTensor = sessionTensor(node, m_tensor);
  refreshHistogram();
  m_scatterPoints = 0;
  m_scatter->clearGraphs();
  m_scatter->clearItems();
  ++m_scatterGeneration;
  titleOf(m_scatter)->setText(m_tensor == kNoValue ? QStringLiteral("Select a node with a quantization point")
                                                    : QStringLiteral("Float against quantized: %1").arg(m_tensorDescription));
  m_scatter->replot(QCustomPlot::rpQueuedReplot);
  if (m_tensor != kNoValue && m_tabs->currentIndex() == ScatterTab) startScatter();
}

void PlotsPanel::refreshHistogram() {
  m_hist->clearGraphs();
  m_hist->clearItems();
  const TensorStats* stats = m_session && m_sessionTensor != kNoValue ? m_session->stats(m_sessionTensor) : nullptr;
  if (!stats || stats->histogram().empty()) {
    titleOf(m_hist)->setText(m_result ? QStringLiteral("Select a node with a quantization point to see its tensor's histogram")
                                      : QStringLiteral("Histogram of the selected tensor (calibrate first)"));
    m_hist->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const auto& h = stats->histogram();
  const double w = stats->binWidth();
  // Merge bins for drawing: a few hundred steps are what a dock can show.
  const size_t merge = std::max<size_t>(1, h.size() / 512);
  QVector<double> x, y;
  double top = 1;
  for (size_t k = 0; k < h.size(); k += merge) {
    double c = 0;
    for (size_t j = k; j < std::min(h.size(), k + merge); ++j) c += h[j];
    x << (double)k * w;
    y << std::max(c, 0.5);
    top = std::max(top, c);
  }
  x << (double)h.size() * w;
  y << 0.5;
  QCPGraph* g = m_hist->addGraph();
  g->setName(QStringLiteral("|x| (%1 bins)").arg(h.size()));
  g->setLineStyle(QCPGraph::lsStepLeft);
  g->setPen(QPen(QColor(0x4a, 0x6f, 0x95), 1));
  g->setBrush(QColor(0x4a, 0x6f, 0x95, 90));
  g->setData(x, y, true);
  const CalibrationSettings& cs = m_result->calibration;
  const std::array<float, 4> amax = stats->allAmax(cs);
  for (int m = 0; m < 4; ++m) {
    const bool chosen = (int)cs.method == m;
    QPen pen(kMethodColours[m], chosen ? 2.6 : 1.5, chosen ? Qt::SolidLine : Qt::DashLine);
    auto* line = new QCPItemStraightLine(m_hist);
    line->point1->setCoords(amax[(size_t)m], 0.5);
    line->point2->setCoords(amax[(size_t)m], top);
    line->setPen(pen);
    // An empty graph carries the legend entry of the line.
    QCPGraph* entry = m_hist->addGraph();
    entry->setPen(pen);
    QString name = QString::fromStdString(calibMethodName((CalibMethod)m));
    if ((CalibMethod)m == CalibMethod::Percentile) name += QStringLiteral(" %1").arg(cs.percentile);
    entry->setName(QStringLiteral("%1 amax %2%3").arg(name).arg(amax[(size_t)m], 0, 'g', 4).arg(chosen ? QStringLiteral(" (used)") : QString()));
  }
  titleOf(m_hist)->setText(QStringLiteral("|x| of %1\n%2 values, max %3").arg(m_tensorDescription).arg(stats->count()).arg(stats->absMax(), 0, 'g', 4));
  m_hist->xAxis->setRange(0, std::max(stats->absMax(), (double)*std::max_element(amax.begin(), amax.end())) * 1.04);
  m_hist->yAxis->setRange(0.5, top * 3);
  m_hist->replot(QCustomPlot::rpQueuedReplot);
}

namespace {

// Keeps a copy of one value as the executor produces it.
class CaptureObserver : public ExecutionObserver {
 public:
  explicit CaptureObserver(ValueId id) : m_id(id) {}
  void onGraphInput(ValueId id, const Tensor& v) override {
    if (id == m_id) captured = v;
  }
  void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& v) override {
    if (id == m_id) captured = v;
  }
  Tensor captured;

 private:
  ValueId m_id;
};

}  // namespace

void PlotsPanel::startScatter() {
  if (!m_session || !m_data || !m_result || m_tensor == kNoValue) return;
  auto it = m_result->activations.find(m_tensor);
  if (it == m_result->activations.end()) return;
  const uint64_t generation = ++m_scatterGeneration;
  titleOf(m_scatter)->setText(QStringLiteral("Running the first sample in float…"));
  m_scatter->replot(QCustomPlot::rpQueuedReplot);
  auto session = m_session;
  auto data = m_data;
  const ValueId value = m_sessionTensor;
  const float scale = it->second.scale, amax = it->second.amax;
  const QuantMode mode = m_result->plan.mode;
  auto* watcher = new QFutureWatcher<std::shared_ptr<Capture>>(this);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher] {
    auto c = watcher->result();
    watcher->deleteLater();
    if (m_scatterWatcher == watcher) m_scatterWatcher = nullptr;
    if (c->generation == m_scatterGeneration) showScatter(c);
  });
  if (m_scatterWatcher) m_scatterWatcher->disconnect(this), connect(m_scatterWatcher, &QFutureWatcherBase::finished, m_scatterWatcher, &QObject::deleteLater);
  m_scatterWatcher = watcher;
  watcher->setFuture(QtConcurrent::run([session, data, value, scale, amax, mode, generation] {
    auto c = std::make_shared<Capture>();
    c->generation = generation;
    c->value = value;
    c->scale = scale;
    c->amax = amax;
    auto feeds = data->batch(0);
    if (!feeds) {
      c->error = QString::fromStdString(feeds.status().message());
      return c;
    }
    CaptureObserver observer(value);
    RunOptions ro;
    ro.observer = &observer;
    auto outputs = session->executor().run(*feeds, ro);
    if (!outputs) {
      c->error = QString::fromStdString(outputs.status().message());
      return c;
    }
    const Tensor& t = observer.captured;
    if (t.empty() || t.dtype() != DType::Float) {
      c->error = QStringLiteral("the tensor is not a float tensor in this run");
      return c;
    }
    // The first sample: the leading slice along the batch dim.
    int64_t n = t.numel();
    if (t.rank() >= 1 && t.dim(0) > 1 && data->batchSize() > 1 && t.dim(0) == data->batchSize()) n /= t.dim(0);
    std::vector<float> q(t.data<float>(), t.data<float>() + n);
    if (mode == QuantMode::Int8) fakeQuantInt8(q.data(), q.data(), n, scale, kActQmin, kActQmax);
    else fakeQuantFp8(q.data(), q.data(), n, scale);
    const float* f = t.data<float>();
    double sig = 0, noise = 0;
    for (int64_t i = 0; i < n; ++i) {
      sig += (double)f[i] * f[i];
      noise += ((double)f[i] - q[(size_t)i]) * ((double)f[i] - q[(size_t)i]);
    }
    c->snrDb = snrDb(sig, noise);
    c->total = n;
    const int64_t stride = std::max<int64_t>(1, (n + kMaxScatterPoints - 1) / kMaxScatterPoints);
    for (int64_t i = 0; i < n; i += stride) {
      c->x << f[i];
      c->y << q[(size_t)i];
    }
    return c;
  }));
}

void PlotsPanel::showScatter(const std::shared_ptr<Capture>& c) {
  m_scatter->clearGraphs();
  m_scatter->clearItems();
  m_scatterPoints = 0;
  if (!c->error.isEmpty()) {
    titleOf(m_scatter)->setText(QStringLiteral("Float pass failed: %1").arg(c->error));
    m_scatter->replot();
    emit scatterUpdated();
    return;
  }
  QCPGraph* g = m_scatter->addGraph();
  g->setLineStyle(QCPGraph::lsNone);
  g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, QColor(0x1f, 0x5f, 0xa8, 110), 3.5));
  g->setData(c->x, c->y);
  g->setAdaptiveSampling(true);
  m_scatterPoints = (int)c->x.size();
  auto* diagonal = new QCPItemStraightLine(m_scatter);
  diagonal->point1->setCoords(0, 0);
  diagonal->point2->setCoords(1, 1);
  diagonal->setPen(QPen(QColor(0x90, 0x98, 0xa0), 1, Qt::DotLine));
  for (double s : {-1.0, 1.0}) {
    auto* clip = new QCPItemStraightLine(m_scatter);
    clip->point1->setCoords(s * c->amax, 0);
    clip->point2->setCoords(s * c->amax, 1);
    clip->setPen(QPen(kBelow, 1.2, Qt::DashLine));
  }
  double lo = 0, hi = 0;
  for (double v : c->x) lo = std::min(lo, v), hi = std::max(hi, v);
  lo = std::min(lo, -(double)c->amax * 0.05);
  const double pad = (hi - lo) * 0.04 + 1e-12;
  m_scatter->xAxis->setRange(lo - pad, hi + pad);
  m_scatter->yAxis->setRange(lo - pad, hi + pad);
  titleOf(m_scatter)->setText(QStringLiteral("%1\nfirst sample, %2 of %3 values · scale %4, clip ±%5 · SNR %6 dB")
                                  .arg(m_tensorDescription)
                                  .arg(c->x.size())
                                  .arg(c->total)
                                  .arg(c->scale, 0, 'e', 3)
                                  .arg(c->amax, 0, 'g', 4)
                                  .arg(formatDb(c->snrDb)));
  m_scatter->replot();
  emit scatterUpdated();
}

bool PlotsPanel::savePlot(Tab tab, const QString& path) {
  QCustomPlot* p = plot(tab);
  if (!p) return false;
  if (path.endsWith(QStringLiteral(".pdf"), Qt::CaseInsensitive)) return p->savePdf(path, 0, 0, QCP::epNoCosmetic);
  return p->savePng(path, 0, 0, 2.0);
}

void PlotsPanel::saveCurrent() {
  QSettings settings;
  const QString dir = settings.value(QStringLiteral("lastPlotDir"), QDir::homePath()).toString();
  static const char* const names[] = {"snr-per-layer", "histogram", "float-vs-quantized", "fallback-curve"};
  const Tab tab = (Tab)m_tabs->currentIndex();
  const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save plot"),
                                                    dir + QStringLiteral("/") + QLatin1String(names[tab]) + QStringLiteral(".png"),
                                                    QStringLiteral("PNG image (*.png);;PDF document (*.pdf)"));
  if (path.isEmpty()) return;
  settings.setValue(QStringLiteral("lastPlotDir"), QFileInfo(path).absolutePath());
  savePlot(tab, path);
}

}  // namespace qs::ui
