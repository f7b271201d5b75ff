#include "ui/remedy_options.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QSpinBox>

namespace qs::ui {

RemedyOptions::RemedyOptions(QWidget* parent) : QGroupBox(QStringLiteral("Remedies and precision"), parent) {
  setObjectName(QStringLiteral("remedyOptions"));
  auto* form = new QFormLayout(this);
  m_choice = new QComboBox(this);
  m_choice->setObjectName(QStringLiteral("remedyChoiceCombo"));
  m_choice->addItem(QStringLiteral("none (each at the command line's default)"), RemediesNone);
  m_choice->addItem(QStringLiteral("auto (measured per model)"), RemediesAuto);
  m_choice->addItem(QStringLiteral("custom (the switches below)"), RemediesCustom);
  m_choice->setToolTip(QStringLiteral("--remedies none|auto. auto (int8 with calibrated scales): depthwise and "
                                      "pointwise input smoothing are each tried on half of the calibration batches "
                                      "and kept where they raise the worst output SNR by 0.2 dB there and do not "
                                      "lower it on the other half; the inspector's model summary and the report "
                                      "show what was tried and kept. custom: the switches below"));
  auto* choice = new QHBoxLayout;
  choice->addWidget(m_choice);
  choice->addStretch();
  form->addRow(QStringLiteral("Remedies"), choice);
  m_equalize = new QCheckBox(QStringLiteral("Cross-layer equalization"), this);
  m_equalize->setObjectName(QStringLiteral("equalizeBox"));
  m_equalize->setToolTip(QStringLiteral("--equalize: rescales the weights of Conv/Gemm pairs through ReLU, Clip at 0 or "
                                        "identity (Nagel et al., 2019); the float model's output is kept, the "
                                        "export writes the equalized weights"));
  m_bias = new QCheckBox(QStringLiteral("Bias correction"), this);
  m_bias->setObjectName(QStringLiteral("biasCorrectionBox"));
  m_bias->setToolTip(QStringLiteral("--bias-correction: per output channel, the mean error the quantized weights and "
                                    "inputs add on the calibration data is taken out of the bias; the export writes "
                                    "the corrected biases"));
  m_weightClip = new QCheckBox(QStringLiteral("Weight clip search"), this);
  m_weightClip->setObjectName(QStringLiteral("weightClipBox"));
  m_weightClip->setToolTip(QStringLiteral("--weight-clip-search: per output channel, the clip ratio (1 down to 0.5) of "
                                          "the weight scale with the least layer-wise error; the export writes the "
                                          "clipped scales"));
  auto* remedies = new QHBoxLayout;
  remedies->addWidget(m_equalize);
  remedies->addWidget(m_bias);
  remedies->addWidget(m_weightClip);
  remedies->addStretch();
  form->addRow(QStringLiteral("Custom"), remedies);
  m_smoothQuant = new QCheckBox(QStringLiteral("SmoothQuant"), this);
  m_smoothQuant->setObjectName(QStringLiteral("smoothQuantBox"));
  m_smoothQuant->setToolTip(QStringLiteral("--smoothquant: MatMul/Gemm that read a LayerNormalization get per input "
                                           "channel scales s (their weights times s, the LayerNormalization's scale "
                                           "and bias divided by it); the export writes the smoothed weights"));
  m_smoothQuantAlpha = new QDoubleSpinBox(this);
  m_smoothQuantAlpha->setObjectName(QStringLiteral("smoothQuantAlphaBox"));
  m_smoothQuantAlpha->setRange(kSearchAlpha, 1.0);
  m_smoothQuantAlpha->setSingleStep(0.1);
  m_smoothQuantAlpha->setDecimals(2);
  m_smoothQuantAlpha->setPrefix(QStringLiteral("alpha "));
  m_smoothQuantAlpha->setSpecialValueText(QStringLiteral("alpha searched per layer"));
  m_smoothQuantAlpha->setToolTip(QStringLiteral("--smoothquant-alpha: a fixed alpha in [0, 1], or searched per layer "
                                                "over 0, 0.1, ..., 1 (the default)"));
  auto* smooth = new QHBoxLayout;
  smooth->addWidget(m_smoothQuant);
  smooth->addWidget(m_smoothQuantAlpha);
  smooth->addStretch();
  form->addRow(QString(), smooth);
  m_depthwise = new QCheckBox(QStringLiteral("Depthwise input equalization"), this);
  m_depthwise->setObjectName(QStringLiteral("depthwiseEqualizeBox"));
  m_depthwise->setToolTip(QStringLiteral("--depthwise-equalize on|off (int8, on by default): the input channels of "
                                         "depthwise Convs rescaled to one range at their BatchNormalization or Conv "
                                         "producer; the float model's output is kept, so the remedies' before "
                                         "figures have it too"));
  m_depthwiseSmooth = new QCheckBox(QStringLiteral("Depthwise input smoothing"), this);
  m_depthwiseSmooth->setObjectName(QStringLiteral("depthwiseSmoothBox"));
  m_depthwiseSmooth->setToolTip(QStringLiteral("--depthwise-smooth on|off (int8, off by default): a per-channel Mul "
                                               "inserted before the depthwise Convs whose producer cannot take the "
                                               "scale, the scale folded into their weights; written in quantized.onnx"));
  m_pointwiseSmooth = new QCheckBox(QStringLiteral("Pointwise input smoothing"), this);
  m_pointwiseSmooth->setObjectName(QStringLiteral("pointwiseSmoothBox"));
  m_pointwiseSmooth->setToolTip(QStringLiteral("--pointwise-smooth on|off (int8, off by default): a per-channel Mul "
                                               "inserted before group-1 Convs where it lowers the quantized Conv's "
                                               "layer-wise error, the scale folded into their weights; written in "
                                               "quantized.onnx"));
  m_integerConv = new QCheckBox(QStringLiteral("Integer Convs"), this);
  m_integerConv->setObjectName(QStringLiteral("integerConvBox"));
  m_integerConv->setToolTip(QStringLiteral("--integer-conv on|off (int8, on by default): INT8 Convs summed exactly in "
                                           "integers where the CPU has AVX2 or VNNI, as TensorRT; off: FP32 "
                                           "convolutions of the fake-quantized tensors, as ONNX Runtime runs the Q/DQ file"));
  m_headWeightScale = new QCheckBox(QStringLiteral("Output head weight scales searched"), this);
  m_headWeightScale->setObjectName(QStringLiteral("headWeightScaleBox"));
  m_headWeightScale->setToolTip(QStringLiteral("--head-weight-scale on|off (int8, on by default): each output channel's "
                                               "weight scale of the last MatMul/Gemm before a graph output times "
                                               "1 +- k/256, chosen by that layer's output error on the calibration "
                                               "data; written in quantized.onnx and quant_cfg.json"));
  m_headBiasCorrection = new QCheckBox(QStringLiteral("Output head bias corrected"), this);
  m_headBiasCorrection->setObjectName(QStringLiteral("headBiasCorrectionBox"));
  m_headBiasCorrection->setToolTip(QStringLiteral("--head-bias-correction on|off (int8, off by default): the bias of the "
                                                  "last MatMul/Gemm before a graph output shifted per class by the mean "
                                                  "of float - quantized logits on the calibration data; written in "
                                                  "quantized.onnx and quant_cfg.json"));
  auto* int8 = new QHBoxLayout;
  int8->addWidget(m_depthwise);
  int8->addWidget(m_depthwiseSmooth);
  int8->addWidget(m_pointwiseSmooth);
  int8->addStretch();
  form->addRow(QStringLiteral("INT8"), int8);
  auto* int8Defaults = new QHBoxLayout;
  int8Defaults->addWidget(m_integerConv);
  int8Defaults->addWidget(m_headWeightScale);
  int8Defaults->addWidget(m_headBiasCorrection);
  int8Defaults->addStretch();
  form->addRow(QString(), int8Defaults);
  m_highPrecision = new QComboBox(this);
  m_highPrecision->setObjectName(QStringLiteral("highPrecisionCombo"));
  for (HighPrecision p : {HighPrecision::Fp32, HighPrecision::Fp16, HighPrecision::Bf16})
    m_highPrecision->addItem(QString::fromLatin1(highPrecisionName(p)), (int)p);
  m_highPrecision->setToolTip(QStringLiteral("--high-precision-dtype: the precision of the nodes left out of "
                                             "quantization, simulated in the analysis and written in quantized.onnx"));
  form->addRow(QStringLiteral("Excluded nodes run in"), m_highPrecision);
  m_sensitivity = new QComboBox(this);
  m_sensitivity->setObjectName(QStringLiteral("sensitivityCombo"));
  m_sensitivity->addItem(QStringLiteral("exact (re-run each node's cone)"), SensitivityExact);
  m_sensitivity->addItem(QStringLiteral("fast (first-order estimate)"), SensitivityFast);
  m_sensitivity->addItem(QStringLiteral("off"), SensitivityOff);
  m_sensitivity->setToolTip(QStringLiteral("--sensitivity: the output SNR with each node alone quantized. Fast "
                                           "estimates it at no extra cost; a node's exact figure is one right "
                                           "click away in the layer table"));
  form->addRow(QStringLiteral("Sensitivity"), m_sensitivity);
  m_calibrationRefine = new QSpinBox(this);
  m_calibrationRefine->setObjectName(QStringLiteral("calibrationRefineBox"));
  m_calibrationRefine->setRange(0, 16);
  m_calibrationRefine->setSuffix(QStringLiteral(" passes"));
  m_calibrationRefine->setSpecialValueText(QStringLiteral("off"));
  m_calibrationRefine->setToolTip(QStringLiteral("--calibration-refine: method auto's clip ranges refined on the graph "
                                                 "outputs, tensor by tensor (each pass costs about 3-8x the rest of "
                                                 "the calibration)"));
  form->addRow(QStringLiteral("Refine on outputs"), m_calibrationRefine);
  m_realisations = new QSpinBox(this);
  m_realisations->setObjectName(QStringLiteral("realisationsBox"));
  m_realisations->setRange(kAutoRealisations, 64);  // the CLI's 1 to 64, and auto below them
  m_realisations->setSpecialValueText(QStringLiteral("auto"));
  m_realisations->setToolTip(QStringLiteral("--realisations auto|N: the output SNR over N realisations of the rounding "
                                            "noise (N - 1 quantized passes more, activation scales dithered by 1e-6), "
                                            "shown as mean and sd beside the analysis's figure; the fallback checks its "
                                            "target on the mean. auto: a probe of 4 at the all-INT8 start, 8 when the "
                                            "worst output's sd exceeds 0.25 dB, else 1. 1: the analysis alone"));
  form->addRow(QStringLiteral("Realisations"), m_realisations);
  m_memoryBudget = new QSpinBox(this);
  m_memoryBudget->setObjectName(QStringLiteral("memoryBudgetBox"));
  m_memoryBudget->setRange(0, 1 << 24);  // MiB: up to 16 TiB
  m_memoryBudget->setSingleStep(256);
  m_memoryBudget->setSuffix(QStringLiteral(" MiB"));
  m_memoryBudget->setSpecialValueText(QStringLiteral("default (half the available memory)"));
  m_memoryBudget->setToolTip(QStringLiteral("--memory-budget: activations the analysis may hold; above it, it keeps "
                                            "no whole activation table and recomputes instead, with the same figures"));
  form->addRow(QStringLiteral("Memory budget"), m_memoryBudget);
  connect(m_choice, &QComboBox::currentIndexChanged, this, [this] {
    if (!m_showing) onChoice(remedyChoice());
  });
  for (QCheckBox* b : {m_equalize, m_bias, m_weightClip, m_smoothQuant, m_depthwise, m_depthwiseSmooth, m_pointwiseSmooth})
    connect(b, &QCheckBox::toggled, this, &RemedyOptions::onSwitchChanged);
  connect(m_smoothQuantAlpha, &QDoubleSpinBox::valueChanged, this, &RemedyOptions::onSwitchChanged);
  setRequest(AnalysisRequest{});  // the command line's defaults, from the one place that has them
}

RemedyChoiceMode RemedyOptions::remedyChoice() const { return (RemedyChoiceMode)m_choice->currentData().toInt(); }

void RemedyOptions::setRemedyChoice(RemedyChoiceMode choice) { m_choice->setCurrentIndex(m_choice->findData(choice)); }

void RemedyOptions::onChoice(RemedyChoiceMode choice) {
  if (m_shownChoice == RemediesCustom) apply(m_custom);  // custom's switches come back with custom
  m_shownChoice = choice;
  showSwitches(choice == RemediesCustom ? m_custom : AnalysisRequest{});
  updateEnabled();
}

void RemedyOptions::onSwitchChanged() {
  if (!m_showing && remedyChoice() != RemediesCustom) {
    m_showing = true;
    setRemedyChoice(RemediesCustom);
    m_showing = false;
    m_shownChoice = RemediesCustom;
  }
  updateEnabled();
}

void RemedyOptions::updateEnabled() {
  // Auto chooses: its switches show the defaults it starts from, greyed. Under none a click on one makes it custom.
  const bool open = remedyChoice() != RemediesAuto;
  for (QWidget* w : std::initializer_list<QWidget*>{m_equalize, m_bias, m_weightClip, m_smoothQuant}) w->setEnabled(open);
  m_smoothQuantAlpha->setEnabled(open && m_smoothQuant->isChecked());
  for (QWidget* w : std::initializer_list<QWidget*>{m_depthwise, m_depthwiseSmooth, m_pointwiseSmooth}) w->setEnabled(open && m_int8);
  m_integerConv->setEnabled(m_int8);
  m_headWeightScale->setEnabled(m_int8);
  m_headBiasCorrection->setEnabled(m_int8);
}

void RemedyOptions::showSwitches(const AnalysisRequest& r) {
  const bool was = m_showing;
  m_showing = true;
  m_equalize->setChecked(r.equalize);
  m_bias->setChecked(r.biasCorrection);
  // A fixed alpha alone asks for SmoothQuant, as --smoothquant-alpha alone does.
  m_smoothQuant->setChecked(r.smoothQuant || !std::isnan(r.smoothQuantAlpha));
  m_smoothQuantAlpha->setValue(std::isnan(r.smoothQuantAlpha) ? kSearchAlpha : r.smoothQuantAlpha);
  m_weightClip->setChecked(r.weightClipSearch);
  m_depthwise->setChecked(r.depthwiseEqualize);
  m_depthwiseSmooth->setChecked(r.depthwiseSmooth);
  m_pointwiseSmooth->setChecked(r.pointwiseSmooth);
  m_showing = was;
}

void RemedyOptions::setRequest(const AnalysisRequest& r) {
  m_showing = true;
  showSwitches(r);
  m_shownChoice = remedyChoiceOf(r);
  setRemedyChoice(m_shownChoice);
  if (m_shownChoice == RemediesCustom) m_custom = r;  // else the last custom switches stay for custom
  m_showing = false;
  updateEnabled();
  m_integerConv->setChecked(r.integerConv);
  m_headWeightScale->setChecked(r.headWeightScale);
  m_headBiasCorrection->setChecked(r.headBiasCorrection);
  m_highPrecision->setCurrentIndex(m_highPrecision->findData((int)r.calibration.highPrecision));
  m_sensitivity->setCurrentIndex(m_sensitivity->findData(sensitivityOf(r)));
  m_calibrationRefine->setValue(r.calibrationRefine.passes);
  m_realisations->setValue(r.realisationsAuto ? kAutoRealisations : std::clamp(r.realisations, 1, m_realisations->maximum()));
  m_memoryBudget->setValue((int)std::min<uint64_t>(r.memoryBudgetBytes >> 20, (uint64_t)m_memoryBudget->maximum()));
}

void RemedyOptions::apply(AnalysisRequest& r) const {
  r.equalize = m_equalize->isChecked();
  r.biasCorrection = m_bias->isChecked();
  r.smoothQuant = m_smoothQuant->isChecked();
  // Unticked, no alpha either: the CLI reads an alpha alone as --smoothquant.
  r.smoothQuantAlpha = r.smoothQuant && m_smoothQuantAlpha->value() >= 0 ? m_smoothQuantAlpha->value() : NAN;
  r.weightClipSearch = m_weightClip->isChecked();
  r.depthwiseEqualize = m_depthwise->isChecked();
  r.depthwiseSmooth = m_depthwiseSmooth->isChecked();
  r.pointwiseSmooth = m_pointwiseSmooth->isChecked();
  r.remedies = remedyChoice() == RemediesAuto ? RemedyMode::Auto : RemedyMode::None;
  r.integerConv = m_integerConv->isChecked();
  r.headWeightScale = m_headWeightScale->isChecked();
  r.headBiasCorrection = m_headBiasCorrection->isChecked();
  r.memoryBudgetBytes = (uint64_t)m_memoryBudget->value() << 20;
  r.calibrationRefine.passes = m_calibrationRefine->value();
  r.realisationsAuto = m_realisations->value() == kAutoRealisations;
  if (!r.realisationsAuto) r.realisations = m_realisations->value();
  r.calibration.highPrecision = (HighPrecision)m_highPrecision->currentData().toInt();
  const auto s = (Sensitivity)m_sensitivity->currentData().toInt();
  r.sensitivity = s != SensitivityOff;
  // Off keeps the method, so that switching back restores it.
  if (s != SensitivityOff) r.sensitivityMethod = s == SensitivityFast ? SensitivityMethod::Fast : SensitivityMethod::Exact;
}

void RemedyOptions::setInt8(bool int8) {
  m_int8 = int8;
  updateEnabled();
}

}  // namespace qs::ui
