// The plots dock (QCustomPlot): per-layer SNR in topological order with a draggable threshold,
// the selected tensor's |x| histogram with each calibration method's clip range, and float against
// fake-quantized values of the selected tensor on the first calibration sample.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <memory>
#include <vector>

#include "core/analysis/quant_session.h"

class QCustomPlot;
class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;
class QLabel;
class QTabWidget;

namespace qs::ui {

class FallbackCurvePlot;

class PlotsPanel : public QWidget {
  Q_OBJECT
 public:
  enum Tab { SnrTab, HistogramTab, ScatterTab, FallbackTab };
  explicit PlotsPanel(QWidget* parent = nullptr);
  ~PlotsPanel() override;

  /// Shows an analysis. `session` gives the tensor statistics and the executor for the float pass,
  /// `data` the first sample. All may be null (empty plots).
  void setAnalysis(std::shared_ptr<const Model> model, std::shared_ptr<const AnalysisResult> result,
                   std::shared_ptr<QuantSession> session, std::shared_ptr<const CalibrationData> data);
  /// The analysis without remedies (AnalysisRun::remedies.before), drawn in the SNR plot beside
  /// the current one; null hides it. Set it after setAnalysis().
  void setBaseline(std::shared_ptr<const AnalysisResult> before);
  /// Points of the no-remedies curve in the SNR plot now.
  int baselinePointCount() const;
  /// Shows the node's tensor in the histogram and scatter plots and marks it in the SNR plot.
  void setSelectedNode(NodeId node);
  NodeId selectedNode() const { return m_node; }
  /// The tensor the histogram and scatter show (kNoValue: none).
  ValueId selectedTensor() const { return m_tensor; }
  /// The session's id of the shown model's tensor `v` at `node` (the histogram's and the scatter's):
  /// by name, as a run that inserted nodes has its own ids; `v` itself without a session.
  ValueId sessionTensor(NodeId node, ValueId v) const;

  double threshold() const { return m_threshold; }
  /// Sets the threshold; from then on the graph view outlines the nodes below it.
  void setThreshold(double db);
  /// Whether the user (or a project) set the threshold; until then it follows each new model's
  /// results (10th percentile of the graph-wise SNR) and nothing is outlined in the graph.
  bool thresholdSet() const { return m_thresholdSet; }
  /// Nodes whose graph-wise SNR is below the threshold, indexed by NodeId.
  std::vector<char> nodesBelowThreshold() const;

  QTabWidget* tabs() const { return m_tabs; }
  /// The auto-fallback's curve (its own tab; empty until a fallback ran).
  FallbackCurvePlot* fallbackCurvePlot() const { return m_curvePlot; }
  QCustomPlot* plot(Tab tab) const;
  /// Writes a plot as PNG or PDF (by the suffix of `path`).
  bool savePlot(Tab tab, const QString& path);
  /// Points in the scatter plot now.
  int scatterPointCount() const { return m_scatterPoints; }

 signals:
  void thresholdChanged(double db);
  /// The user clicked a node's point in the SNR plot.
  void nodeClicked(qs::NodeId node);
  /// The float pass for the scatter plot finished (or failed: the plot says why).
  void scatterUpdated();

 private:
  struct Capture;
  void buildSnrPlot();
  void buildHistogramPlot();
  void buildScatterPlot();
  void refreshSnr();
  void refreshThreshold();
  void refreshHistogram();
  void startScatter();
  void showScatter(const std::shared_ptr<Capture>& c);
  void saveCurrent();
  ValueId tensorOfNode(NodeId node, QString* description) const;

  std::shared_ptr<const Model> m_model;
  std::shared_ptr<const AnalysisResult> m_result;
  std::shared_ptr<const AnalysisResult> m_before;  // without remedies
  std::shared_ptr<QuantSession> m_session;
  std::shared_ptr<const CalibrationData> m_data;
  NodeId m_node = -1;
  ValueId m_tensor = kNoValue;
  ValueId m_sessionTensor = kNoValue;  // m_tensor's id in the session's model (the run's: it may insert nodes)
  QString m_tensorDescription;
  double m_threshold = 20;
  bool m_thresholdSet = false;
  std::vector<NodeId> m_plotted;  // x index -> NodeId (nodes with a graph-wise SNR, topological order)
  bool m_dragging = false;
  uint64_t m_scatterGeneration = 0;
  int m_scatterPoints = 0;
  QFutureWatcher<std::shared_ptr<Capture>>* m_scatterWatcher = nullptr;

  QTabWidget* m_tabs = nullptr;
  QCustomPlot* m_snr = nullptr;
  QCustomPlot* m_hist = nullptr;
  QCustomPlot* m_scatter = nullptr;
  FallbackCurvePlot* m_curvePlot = nullptr;
  QCPGraph* m_beforeGraph = nullptr;  // graph-wise SNR without remedies
  QCPItemStraightLine* m_thresholdLine = nullptr;
  QCPItemText* m_thresholdLabel = nullptr;
  QCPItemStraightLine* m_selectedLine = nullptr;
  QLabel* m_snrInfo = nullptr;
};

}  // namespace qs::ui
