// The calibration dialog's "Remedies and precision" box: the switches the command line has as
// --equalize, --bias-correction, --smoothquant (--smoothquant-alpha), --weight-clip-search,
// --depthwise-equalize, --depthwise-smooth, --integer-conv, --high-precision-dtype, --sensitivity and --memory-budget, each mapped onto the
// AnalysisRequest the pipeline runs (core/export/pipeline.h), so that a click in the workbench and
// the same flags on the command line run the same thing. The project file's keys
// for them are in ui/remedy_settings.h.
#pragma once

#include <QGroupBox>

#include "core/export/pipeline.h"
#include "ui/remedy_settings.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QSpinBox;

namespace qs::ui {

class RemedyOptions : public QGroupBox {
  Q_OBJECT
 public:
  /// The sensitivity combo's entries (ui/remedy_settings.h), also as RemedyOptions::SensitivityFast etc.
  using Sensitivity = RemedySensitivity;
  using enum RemedySensitivity;

  explicit RemedyOptions(QWidget* parent = nullptr);

  /// Shows the request's remedies, high-precision dtype and sensitivity mode.
  void setRequest(const AnalysisRequest& request);
  /// Writes what the box shows into `request` (nothing else is touched).
  void apply(AnalysisRequest& request) const;

  QCheckBox* equalizeBox() const { return m_equalize; }
  QCheckBox* biasCorrectionBox() const { return m_bias; }
  /// --smoothquant; its alpha box (smoothQuantAlphaBox) is enabled while it is ticked.
  QCheckBox* smoothQuantBox() const { return m_smoothQuant; }
  /// --smoothquant-alpha: a value in [0, 1], or its minimum (kSearchAlpha, shown "search per layer"): searched.
  QDoubleSpinBox* smoothQuantAlphaBox() const { return m_smoothQuantAlpha; }
  static constexpr double kSearchAlpha = -0.1;
  QCheckBox* weightClipBox() const { return m_weightClip; }
  /// --depthwise-equalize on|off (on by default; int8 with calibrated scales only).
  QCheckBox* depthwiseEqualizeBox() const { return m_depthwise; }
  /// --depthwise-smooth on|off (off by default; int8 only).
  QCheckBox* depthwiseSmoothBox() const { return m_depthwiseSmooth; }
  /// --integer-conv on|off (on by default; INT8 Convs summed in integers where the CPU can).
  QCheckBox* integerConvBox() const { return m_integerConv; }
  /// The int8-only switches (depthwise equalization, integer Convs) are enabled for int8 only.
  void setInt8(bool int8);
  QComboBox* highPrecisionCombo() const { return m_highPrecision; }
  QComboBox* sensitivityCombo() const { return m_sensitivity; }
  /// --calibration-refine passes (0: off, the default).
  QSpinBox* calibrationRefineBox() const { return m_calibrationRefine; }
  /// --memory-budget in MiB; 0 ("default") is half the available memory.
  QSpinBox* memoryBudgetBox() const { return m_memoryBudget; }

 private:
  QCheckBox* m_equalize = nullptr;
  QCheckBox* m_bias = nullptr;
  QCheckBox* m_smoothQuant = nullptr;
  QDoubleSpinBox* m_smoothQuantAlpha = nullptr;
  QCheckBox* m_weightClip = nullptr;
  QCheckBox* m_depthwise = nullptr;
  QCheckBox* m_depthwiseSmooth = nullptr;
  QCheckBox* m_integerConv = nullptr;
  QComboBox* m_highPrecision = nullptr;
  QComboBox* m_sensitivity = nullptr;
  QSpinBox* m_calibrationRefine = nullptr;
  QSpinBox* m_memoryBudget = nullptr;
};

}  // namespace qs::ui
