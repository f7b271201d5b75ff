// The calibration dialog's "Remedies and precision" box: the switches the command line has as
// --equalize, --bias-correction, --high-precision-dtype and --sensitivity, each mapped onto the
// AnalysisRequest the pipeline runs (core/export/pipeline.h), so that a click in the workbench and
// the same flags on the command line run the same thing. Also the project file's keys for them.
#pragma once

#include <QGroupBox>
#include <QJsonObject>
#include <QString>

#include "core/export/pipeline.h"

class QCheckBox;
class QComboBox;

namespace qs::ui {

class RemedyOptions : public QGroupBox {
  Q_OBJECT
 public:
  /// The sensitivity combo's entries (the CLI's --sensitivity exact|fast|off).
  enum Sensitivity { SensitivityExact, SensitivityFast, SensitivityOff };

  explicit RemedyOptions(QWidget* parent = nullptr);

  /// Shows the request's remedies, high-precision dtype and sensitivity mode.
  void setRequest(const AnalysisRequest& request);
  /// Writes what the box shows into `request` (nothing else is touched).
  void apply(AnalysisRequest& request) const;

  QCheckBox* equalizeBox() const { return m_equalize; }
  QCheckBox* biasCorrectionBox() const { return m_bias; }
  QComboBox* highPrecisionCombo() const { return m_highPrecision; }
  QComboBox* sensitivityCombo() const { return m_sensitivity; }

 private:
  QCheckBox* m_equalize = nullptr;
  QCheckBox* m_bias = nullptr;
  QComboBox* m_highPrecision = nullptr;
  QComboBox* m_sensitivity = nullptr;
};

/// The sensitivity mode of a request: off, or the method (what --sensitivity says).
RemedyOptions::Sensitivity sensitivityOf(const AnalysisRequest& request);
/// "exact", "fast" or "off".
QString sensitivityName(RemedyOptions::Sensitivity s);

/// The project file's keys of the calibration object for these settings: "equalize" and
/// "bias_correction" (written when on), "sensitivity" (written when not the default request's), so
/// that projects without them read as they did.
void writeRemedySettings(const AnalysisRequest& request, QJsonObject& calibration);
/// Reads those keys into `request`; false with `error` naming the file, the key and the value
/// when one is not what it must be.
bool readRemedySettings(const QJsonObject& calibration, const QString& projectPath, AnalysisRequest& request,
                        QString& error);

}  // namespace qs::ui
