// The export dialog: writes the export bundle of the current analysis (core/export/bundle.h, the
// builder and writer `quantscope export` uses): quantized.onnx (Q/DQ at the analysed points, with
// the analysed scales), quant_cfg.json, calibration.cache and report.json, all or none, into a
// folder, in a worker thread.
#pragma once

#include <QDialog>
#include <QFutureWatcher>
#include <memory>

#include "core/analysis/int4_analysis.h"
#include "core/export/bundle.h"

class QCheckBox;
class QLabel;
class QLineEdit;
class QPushButton;

namespace qs::ui {

class AnalysisController;

/// `run` as the workbench exports it: weights as `dqOnly` says, and the nodes the user switched
/// off (`requested` false, and off in the results) recorded in quant_cfg.json as exact-name
/// exclusions, beside the lists the run was configured with. `requested` is by `shown`'s node ids
/// (the open model, matched to the run's by name), or by the run's own when `shown` is null.
AnalysisRun runForExport(const AnalysisRun& run, const std::map<NodeId, bool>& requested, bool dqOnly,
                         const Graph* shown = nullptr);

class ExportDialog : public QDialog {
  Q_OBJECT
 public:
  /// Exports `controller`'s run as it is when Export is clicked.
  explicit ExportDialog(const AnalysisController* controller, QWidget* parent = nullptr);
  ~ExportDialog() override;
  QString statusText() const;
  /// Starts the export (what the Export button does).
  void start();

 signals:
  void exported(const QStringList& files);
  void exportFailed(const QString& message);

 private:
  using Outcome = Result<std::vector<std::string>>;
  /// An INT4 run (AnalysisController::int4Result()): the int4 bundle, as the CLI's export writes it.
  void startInt4(const QString& folder, std::shared_ptr<const Int4Result> int4);
  /// Shows the outcome of `future` when it finishes.
  void watch(QFuture<std::shared_ptr<Outcome>> future);
  const AnalysisController* m_controller;
  QLineEdit* m_folder = nullptr;
  QCheckBox* m_dqOnly = nullptr;
  QLabel* m_status = nullptr;
  QPushButton* m_export = nullptr;
  QFutureWatcher<std::shared_ptr<Outcome>>* m_watcher = nullptr;
};

}  // namespace qs::ui
