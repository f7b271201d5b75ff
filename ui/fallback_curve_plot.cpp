#include "ui/fallback_curve_plot.h"

#include <QVBoxLayout>
#include <cmath>
#include <qcustomplot.h>

#include "ui/realisation_text.h"

namespace qs::ui {

namespace {

const QColor kCurve(0x1f, 0x5f, 0xa8);
const QColor kHere(0xd0, 0x1c, 0x2b);
const QColor kTarget(0x55, 0x55, 0x55);

const QString kTitle = QStringLiteral("Auto-fallback: output SNR against exclusions");

double finiteOrNaN(double v) { return std::isfinite(v) ? v : qQNaN(); }

}  // namespace

FallbackCurvePlot::FallbackCurvePlot(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_plot = new QCustomPlot(this);
  m_plot->setObjectName(QStringLiteral("fallbackCurvePlot"));
  layout->addWidget(m_plot);
  m_plot->plotLayout()->insertRow(0);
  QFont f = m_plot->font();
  f.setBold(true);
  m_title = new QCPTextElement(m_plot, kTitle, f);
  m_plot->plotLayout()->addElement(0, 0, m_title);
  m_plot->xAxis->setLabel(QStringLiteral("nodes excluded"));
  m_plot->yAxis->setLabel(QStringLiteral("worst output SNR (dB)"));
  QSharedPointer<QCPAxisTickerFixed> whole(new QCPAxisTickerFixed);  // counts of nodes: whole ticks only
  whole->setTickStep(1);
  whole->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  m_plot->xAxis->setTicker(whole);
  m_points = m_plot->addGraph();
  m_points->setName(QStringLiteral("measured"));
  m_points->setPen(QPen(kCurve, 1.6));
  m_points->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, kCurve, Qt::white, 6));
  m_points->setSelectable(QCP::stSingleData);
  m_here = m_plot->addGraph();
  m_here->setName(QStringLiteral("the model now"));
  m_here->setLineStyle(QCPGraph::lsNone);
  m_here->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, QPen(kHere, 1.5), QBrush(kHere), 9));
  m_here->setSelectable(QCP::stNone);
  m_target = new QCPItemStraightLine(m_plot);
  m_target->setPen(QPen(kTarget, 1.2, Qt::DashLine));
  m_target->setVisible(false);
  m_plot->legend->setVisible(true);
  m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignRight);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom | QCP::iSelectPlottables);
  connect(m_plot, &QCustomPlot::plottableClick, this, [this](QCPAbstractPlottable* p, int index, QMouseEvent*) {
    if (p != m_points || !m_curve || index < 0 || index >= m_points->dataCount()) return;
    emit pointClicked((int)std::lround(m_points->data()->at(index)->key));
  });
}

int FallbackCurvePlot::pointCount() const { return m_points->dataCount(); }

void FallbackCurvePlot::setCurve(std::shared_ptr<const FallbackCurve> curve, double targetDb) {
  m_curve = std::move(curve);
  QVector<double> x, y;
  if (m_curve) {
    for (int i = 0; i <= (int)m_curve->steps.size(); ++i) {
      x.push_back(i);
      y.push_back(finiteOrNaN(m_curve->worstSnrDb(i)));
    }
  }
  m_points->setData(x, y, true);
  m_target->setVisible(m_curve && std::isfinite(targetDb));
  if (std::isfinite(targetDb)) {
    m_target->point1->setCoords(0, targetDb);
    m_target->point2->setCoords(1, targetDb);
    m_target->setObjectName(QString::number(targetDb));
  }
  m_current = m_curve ? m_curve->chosen : -1;
  refreshCurrent();
  bool found = false;
  QCPRange yr = m_points->getValueRange(found);
  if (found) {
    if (std::isfinite(targetDb)) yr.expand(targetDb);
    m_plot->yAxis->setRange(yr.lower - 1, yr.upper + 1);
    m_plot->xAxis->setRange(-0.5, std::max<double>(1, x.size()) - 0.5);
  }
  m_plot->replot();
}

void FallbackCurvePlot::setCurrentPoint(int point) {
  m_current = point;
  refreshCurrent();
  m_plot->replot();
}

void FallbackCurvePlot::matchResult(const AnalysisResult& result) {
  int point = -1;
  if (m_curve) {
    auto quantized = [&](NodeId id) {
      return id >= 0 && (size_t)id < result.plan.nodes.size() && result.plan.nodes[(size_t)id].quantized;
    };
    const int n = (int)m_curve->steps.size();
    int i = 0;
    while (i < n && !quantized(m_curve->steps[(size_t)i].excluded)) ++i;
    bool rest = true;
    for (int j = i; j < n && rest; ++j) rest = quantized(m_curve->steps[(size_t)j].excluded);
    if (rest) point = i;
  }
  if (point != m_current) setCurrentPoint(point);
  // The points are the analysis's own figure (realisation 0); with realisations, the model's mean and sd
  // now, which the fallback checked its target on too (ui/realisation_text.h).
  const QString realisations = worstRealisationsShortText(result);
  const QString title = realisations.isEmpty() ? kTitle : kTitle + QStringLiteral("\n(the model now: %1)").arg(realisations);
  if (m_title->text() != title) {
    m_title->setText(title);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
  }
}

void FallbackCurvePlot::refreshCurrent() {
  QVector<double> x, y;
  if (m_curve && m_current >= 0 && m_current <= (int)m_curve->steps.size()) {
    x.push_back(m_current);
    y.push_back(finiteOrNaN(m_curve->worstSnrDb(m_current)));
  }
  m_here->setData(x, y, true);
}

}  // namespace qs::ui
