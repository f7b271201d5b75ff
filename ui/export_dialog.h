// The export dialog: writes quantized.onnx (Q/DQ at the analysed points, with the analysed scales),
// quant_cfg.json, calibration.cache and report.json into a folder, in a worker thread.
#pragma once

#include <QDialog>
#include <QFutureWatcher>
#include <memory>

#include "core/analysis/quant_session.h"

class QCheckBox;
class QLabel;
class QLineEdit;
class QPushButton;

namespace qs::ui {

/// What an export needs; everything is immutable or only read.
struct ExportInput {
  std::string modelPath;  // the file the model was loaded from
  std::shared_ptr<const Model> model;
  std::shared_ptr<const AnalysisResult> result;
  std::shared_ptr<QuantSession> session;          // its executor observes ranks for old opsets
  std::shared_ptr<const CalibrationData> data;
  QuantConfig config;                             // the user's exclusions, as exact names
  bool dqOnly = true;
};

/// Writes the four files into `dir` (created if needed); returns the paths written, or a Status
/// naming the file and the reason. Synchronous: run it in a worker.
Result<std::vector<std::string>> writeExport(const ExportInput& in, const std::string& dir);

class ExportDialog : public QDialog {
  Q_OBJECT
 public:
  ExportDialog(ExportInput input, QWidget* parent = nullptr);
  ~ExportDialog() override;
  QLineEdit* folderEdit() const { return m_folder; }
  QPushButton* exportButton() const { return m_export; }
  QString statusText() const;
  /// Starts the export (what the Export button does).
  void start();

 signals:
  void exported(const QStringList& files);
  void exportFailed(const QString& message);

 private:
  ExportInput m_input;
  QLineEdit* m_folder = nullptr;
  QCheckBox* m_dqOnly = nullptr;
  QLabel* m_status = nullptr;
  QPushButton* m_export = nullptr;
  QFutureWatcher<std::shared_ptr<Result<std::vector<std::string>>>>* m_watcher = nullptr;
};

}  // namespace qs::ui
