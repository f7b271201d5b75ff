// The settings of the calibration dialog's "Remedies and precision" box (ui/remedy_options.h) as
// the project file stores them: QtCore only, so that the project reader (ui/project_file.cpp) and
// its fuzzer build without widgets.
#pragma once

#include <QJsonObject>
#include <QString>

#include "core/export/pipeline.h"

namespace qs::ui {

/// The sensitivity combo's entries (the CLI's --sensitivity exact|fast|off).
enum RemedySensitivity { SensitivityExact, SensitivityFast, SensitivityOff };

/// The sensitivity mode of a request: off, or the method (what --sensitivity says).
RemedySensitivity sensitivityOf(const AnalysisRequest& request);
/// "exact", "fast" or "off".
QString sensitivityName(RemedySensitivity s);

/// The project file's keys of the calibration object for these settings: "equalize",
/// "bias_correction", "smoothquant" and "weight_clip_search" (written when on), "smoothquant_alpha"
/// (a number in [0, 1], written when fixed; alone it turns SmoothQuant on, as the CLI's flag does),
/// "depthwise_equalize" and "integer_conv" (on by default: written when off), "depthwise_smooth" (off by default: written when on), "sensitivity" (written when not the default request's),
/// "memory_budget_bytes" (--memory-budget, written when set), "calibration_refine" (--calibration-refine, written when not 0), so that projects without them read as
/// they did.
void writeRemedySettings(const AnalysisRequest& request, QJsonObject& calibration);
/// Reads those keys into `request`; false with `error` naming the file, the key and the value
/// when one is not what it must be.
bool readRemedySettings(const QJsonObject& calibration, const QString& projectPath, AnalysisRequest& request,
                        QString& error);

}  // namespace qs::ui
