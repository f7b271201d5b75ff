// The calibration dialog's "Remedies and precision" box: the switches the command line has as
// --equalize, --bias-correction, --high-precision-dtype, --sensitivity and --memory-budget, each mapped onto the
// AnalysisRequest the pipeline runs (core/export/pipeline.h), so that a click in the workbench and
// the same flags on the command line run the same thing. The project file's keys
// for them are in ui/remedy_settings.h.
#pragma once

#include <QGroupBox>

#include "core/export/pipeline.h"
#include "ui/remedy_settings.h"

class QCheckBox;
class QComboBox;
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
  QComboBox* highPrecisionCombo() const { return m_highPrecision; }
  QComboBox* sensitivityCombo() const { return m_sensitivity; }
  /// --memory-budget in MiB; 0 ("default") is half the available memory.
  QSpinBox* memoryBudgetBox() const { return m_memoryBudget; }

 private:
  QCheckBox* m_equalize = nullptr;
  QCheckBox* m_bias = nullptr;
  QComboBox* m_highPrecision = nullptr;
  QComboBox* m_sensitivity = nullptr;
  QSpinBox* m_memoryBudget = nullptr;
};

}  // namespace qs::ui
