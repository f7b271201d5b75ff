// The calibration dialog: data source (image folder with preprocessing, .npz/.npy, or random
// inputs with a warning and the shapes of the inputs' symbolic dims), calibration method, mode and
// sample count. Runs the calibration and the analysis through the AnalysisController with a
// progress bar and Cancel; problems in the data show as one line in the dialog. Not modal: the
// window stays usable while it runs.
#pragma once

#include <QDialog>
#include <utility>

#include "ui/analysis_controller.h"
#include "ui/int4_run.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace qs::ui {

class InputShapeFields;
class RemedyOptions;

class CalibrationDialog : public QDialog {
  Q_OBJECT
 public:
  enum Source { ImageFolder, NumpyFile, Random };
  CalibrationDialog(AnalysisController* controller, QWidget* parent = nullptr);

  /// Fills the form (from the last run, the project or QSettings). What the form does not show
  /// (batch size, seed, lists, threads) is kept for request().
  void setRequest(const AnalysisRequest& request);
  /// The request the form describes.
  AnalysisRequest request() const;
  /// The INT4 weight-only settings (on: the mode selector is on int4); setInt4Settings() with on
  /// false leaves the mode to setRequest().
  Int4Settings int4Settings() const;
  void setInt4Settings(const Int4Settings& settings);
  QComboBox* modeCombo() const { return m_mode; }
  QComboBox* blockSizeCombo() const { return m_blockSize; }
  QComboBox* int4MethodCombo() const { return m_int4Method; }
  /// Adapts the defaults to the model's input (fixed or free height and width).
  void setModel(const Model* model);

  /// Starts the run (what the Calibrate button does); false when it could not start.
  bool start();
  QString errorText() const;
  QPushButton* calibrateButton() const { return m_run; }
  QPushButton* cancelButton() const { return m_cancel; }
  QProgressBar* progressBar() const { return m_progress; }
  QLineEdit* pathEdit() const { return m_path; }
  QComboBox* sourceCombo() const { return m_source; }
  QLabel* randomWarning() const { return m_randomWarning; }
  /// The inputs' shapes for random inputs (enabled with that source); object name "inputShapes".
  InputShapeFields* shapeFields() const { return m_shapes; }
  /// Remedies, high-precision dtype and sensitivity mode (ui/remedy_options.h).
  RemedyOptions* remedyOptions() const { return m_remedies; }

 private:
  Source source() const;
  void setScale(float scale);
  void updateEnabled();
  void applyPreset(int index);
  void browse();
  void showError(const QString& message);
  void onJobStarted(AnalysisController::Job job);
  void onProgress(int percent, const QString& stage);
  void onFinished();

  AnalysisController* m_controller;
  AnalysisRequest m_base;  // setRequest()'s, for what the form does not show
  bool m_running = false;
  QComboBox* m_source = nullptr;
  QLineEdit* m_path = nullptr;
  QPushButton* m_browse = nullptr;
  QGroupBox* m_imageBox = nullptr;
  QComboBox* m_preset = nullptr;
  QSpinBox* m_width = nullptr;
  QSpinBox* m_height = nullptr;
  QDoubleSpinBox* m_scale = nullptr;
  std::pair<double, float> m_scaleShown;  // what the scale box shows, and the float it stands for
  QDoubleSpinBox* m_mean[3] = {};
  QDoubleSpinBox* m_std[3] = {};
  QCheckBox* m_bgr = nullptr;
  QCheckBox* m_nhwc = nullptr;
  QComboBox* m_method = nullptr;
  QDoubleSpinBox* m_percentile = nullptr;
  QComboBox* m_mode = nullptr;
  QComboBox* m_blockSize = nullptr;   // int4: 32, 64, 128
  QComboBox* m_int4Method = nullptr;  // int4: rtn_dq, awq_lite, awq_clip
  QSpinBox* m_samples = nullptr;
  QLabel* m_randomWarning = nullptr;
  QGroupBox* m_shapeBox = nullptr;
  InputShapeFields* m_shapes = nullptr;
  bool m_hasModel = false;  // setModel() gave the inputs the shape fields are for
  QLabel* m_stage = nullptr;
  QProgressBar* m_progress = nullptr;
  QLabel* m_error = nullptr;
  QPushButton* m_run = nullptr;
  QPushButton* m_cancel = nullptr;
  QPushButton* m_close = nullptr;
  RemedyOptions* m_remedies = nullptr;
};

}  // namespace qs::ui
