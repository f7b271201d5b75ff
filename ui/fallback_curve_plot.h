// The fallback curve (issue 14 item 4) as a plot: the worst output SNR against the number of
// excluded nodes, one point per step of the re-measuring auto-fallback (core/analysis/
// fallback_curve.h), the target dashed and the point the fallback chose marked. Clicking a point
// asks for that set of exclusions (pointClicked); the workbench applies it as one undoable toggle.
#pragma once

#include <QWidget>
#include <memory>

#include "core/analysis/fallback_curve.h"

class QCustomPlot;
class QCPGraph;
class QCPItemStraightLine;
class QCPTextElement;

namespace qs::ui {

class FallbackCurvePlot : public QWidget {
  Q_OBJECT
 public:
  explicit FallbackCurvePlot(QWidget* parent = nullptr);

  /// Shows `curve` with its target (NaN: none); null clears the plot.
  void setCurve(std::shared_ptr<const FallbackCurve> curve, double targetDb);
  /// Marks point `point` as the one the model is at now (after a click or a toggle back to it);
  /// -1 marks none.
  void setCurrentPoint(int point);
  /// Marks the point whose exclusions `result`'s node states are (the first i steps excluded, the
  /// curve's other nodes quantized), or none.
  void matchResult(const AnalysisResult& result);
  std::shared_ptr<const FallbackCurve> curve() const { return m_curve; }
  int currentPoint() const { return m_current; }
  /// Points drawn (steps + 1 with a curve, else 0).
  int pointCount() const;
  QCustomPlot* plot() const { return m_plot; }

 signals:
  /// The user clicked point `point` (0: no exclusion; i: the first i exclusions of the curve).
  void pointClicked(int point);

 private:
  void refreshCurrent();

  std::shared_ptr<const FallbackCurve> m_curve;
  int m_current = -1;
  QCustomPlot* m_plot = nullptr;
  QCPGraph* m_points = nullptr;   // every point
  QCPGraph* m_here = nullptr;     // the point the model is at
  QCPItemStraightLine* m_target = nullptr;
  QCPTextElement* m_title = nullptr;
};

}  // namespace qs::ui
