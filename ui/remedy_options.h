// The calibration dialog's "Remedies and precision" box: the choice the command line has as --remedies
// (none, auto, or custom: the switches), the switches it has as --equalize, --bias-correction, --smoothquant
// (--smoothquant-alpha), --weight-clip-search, --depthwise-equalize, --depthwise-smooth, --pointwise-smooth, and
// --integer-conv, --high-precision-dtype, --sensitivity, --calibration-refine, --realisations and --memory-budget, each mapped onto the
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

  /// Shows the request's remedies (the choice: remedyChoiceOf()), high-precision dtype and sensitivity mode.
  void setRequest(const AnalysisRequest& request);
  /// Writes what the box shows into `request` (nothing else is touched): --remedies auto for the auto choice,
  /// and the remedy switches as shown (the CLI's defaults under none and a chosen auto).
  void apply(AnalysisRequest& request) const;

  /// "Remedies": none (the CLI's defaults, --remedies none), auto (--remedies auto: the pipeline's choice, measured
  /// per model; int8 with calibrated scales only) or custom (the switches). None and auto set the remedy switches to
  /// the CLI's defaults (custom's are kept and come back with custom), auto disables them; changing a switch
  /// under none or auto makes the choice custom.
  QComboBox* remedyChoiceCombo() const { return m_choice; }
  RemedyChoiceMode remedyChoice() const;
  void setRemedyChoice(RemedyChoiceMode choice);

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
  /// --pointwise-smooth on|off (off by default; int8 only).
  QCheckBox* pointwiseSmoothBox() const { return m_pointwiseSmooth; }
  /// --integer-conv on|off (on by default; INT8 Convs summed in integers where the CPU can).
  QCheckBox* integerConvBox() const { return m_integerConv; }
  /// --head-weight-scale on|off (on by default; int8 only).
  QCheckBox* headWeightScaleBox() const { return m_headWeightScale; }
  /// --head-bias-correction on|off (off by default; int8 only).
  QCheckBox* headBiasCorrectionBox() const { return m_headBiasCorrection; }
  /// The int8-only switches (depthwise equalization, integer Convs) are enabled for int8 only.
  void setInt8(bool int8);
  QComboBox* highPrecisionCombo() const { return m_highPrecision; }
  QComboBox* sensitivityCombo() const { return m_sensitivity; }
  /// --calibration-refine passes (0: off, the default).
  QSpinBox* calibrationRefineBox() const { return m_calibrationRefine; }
  /// --realisations auto|N (docs/quality.md, "Realisations of the rounding noise"): 1 (the default: the analysis
  /// alone), 2 to 64 (the output SNR over N realisations of the rounding noise, the fallback's target checked on their
  /// mean), or its minimum, 0, shown "auto" (--realisations auto: a probe of 4 decides 1 or 8).
  QSpinBox* realisationsBox() const { return m_realisations; }
  static constexpr int kAutoRealisations = 0;
  /// --memory-budget in MiB; 0 ("default") is half the available memory.
  QSpinBox* memoryBudgetBox() const { return m_memoryBudget; }

 private:
  // The remedy switches' state, as a request holds it (what custom brings back).
  void showSwitches(const AnalysisRequest& request);
  void onChoice(RemedyChoiceMode choice);
  void onSwitchChanged();
  void updateEnabled();

  QComboBox* m_choice = nullptr;
  RemedyChoiceMode m_shownChoice = RemediesNone;
  AnalysisRequest m_custom;   // custom's switches, kept while none or auto shows the defaults
  bool m_showing = false;     // the box sets its switches: no switch change is the user's
  bool m_int8 = true;
  QCheckBox* m_equalize = nullptr;
  QCheckBox* m_bias = nullptr;
  QCheckBox* m_smoothQuant = nullptr;
  QDoubleSpinBox* m_smoothQuantAlpha = nullptr;
  QCheckBox* m_weightClip = nullptr;
  QCheckBox* m_depthwise = nullptr;
  QCheckBox* m_depthwiseSmooth = nullptr;
  QCheckBox* m_pointwiseSmooth = nullptr;
  QCheckBox* m_integerConv = nullptr;
  QCheckBox* m_headWeightScale = nullptr;
  QCheckBox* m_headBiasCorrection = nullptr;
  QComboBox* m_highPrecision = nullptr;
  QComboBox* m_sensitivity = nullptr;
  QSpinBox* m_calibrationRefine = nullptr;
  QSpinBox* m_realisations = nullptr;
  QSpinBox* m_memoryBudget = nullptr;
};

}  // namespace qs::ui
