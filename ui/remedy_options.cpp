#include "ui/remedy_options.h"

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QSpinBox>

namespace qs::ui {

RemedyOptions::RemedyOptions(QWidget* parent) : QGroupBox(QStringLiteral("Remedies and precision"), parent) {
  setObjectName(QStringLiteral("remedyOptions"));
  auto* form = new QFormLayout(this);
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
  auto* remedies = new QHBoxLayout;
  remedies->addWidget(m_equalize);
  remedies->addWidget(m_bias);
  remedies->addStretch();
  form->addRow(QStringLiteral("Remedies"), remedies);
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
  m_memoryBudget = new QSpinBox(this);
  m_memoryBudget->setObjectName(QStringLiteral("memoryBudgetBox"));
  m_memoryBudget->setRange(0, 1 << 24);  // MiB: up to 16 TiB
  m_memoryBudget->setSingleStep(256);
  m_memoryBudget->setSuffix(QStringLiteral(" MiB"));
  m_memoryBudget->setSpecialValueText(QStringLiteral("default (half the available memory)"));
  m_memoryBudget->setToolTip(QStringLiteral("--memory-budget: activations the analysis may hold; above it, it keeps "
                                            "no whole activation table and recomputes instead, with the same figures"));
  form->addRow(QStringLiteral("Memory budget"), m_memoryBudget);
  setRequest(AnalysisRequest{});  // the command line's defaults, from the one place that has them
}

void RemedyOptions::setRequest(const AnalysisRequest& r) {
  m_equalize->setChecked(r.equalize);
  m_bias->setChecked(r.biasCorrection);
  m_highPrecision->setCurrentIndex(m_highPrecision->findData((int)r.calibration.highPrecision));
  m_sensitivity->setCurrentIndex(m_sensitivity->findData(sensitivityOf(r)));
  m_memoryBudget->setValue((int)std::min<uint64_t>(r.memoryBudgetBytes >> 20, (uint64_t)m_memoryBudget->maximum()));
}

void RemedyOptions::apply(AnalysisRequest& r) const {
  r.equalize = m_equalize->isChecked();
  r.biasCorrection = m_bias->isChecked();
  r.memoryBudgetBytes = (uint64_t)m_memoryBudget->value() << 20;
  r.calibration.highPrecision = (HighPrecision)m_highPrecision->currentData().toInt();
  const auto s = (Sensitivity)m_sensitivity->currentData().toInt();
  r.sensitivity = s != SensitivityOff;
  // Off keeps the method, so that switching back restores it.
  if (s != SensitivityOff) r.sensitivityMethod = s == SensitivityFast ? SensitivityMethod::Fast : SensitivityMethod::Exact;
}

}  // namespace qs::ui
