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

/// The calibration dialog's "Remedies" choice: none (every remedy at the CLI's default, `--remedies none`), auto
/// (`--remedies auto`: the candidates measured per model by core/export/remedy_choice.h) or custom (the switches).
enum RemedyChoiceMode { RemediesNone, RemediesAuto, RemediesCustom };

/// The choice a request stands for: auto when it asks for --remedies auto, none when every remedy switch
/// (equalize, bias correction, SmoothQuant and its alpha, weight clip search, depthwise equalization, depthwise
/// and pointwise smoothing) is at the CLI's default, custom otherwise.
RemedyChoiceMode remedyChoiceOf(const AnalysisRequest& request);
/// "none", "auto" or "custom".
QString remedyChoiceName(RemedyChoiceMode m);
/// Whether the remedy switches of `request` are the CLI's defaults (the remedies --remedies none runs).
bool remedySwitchesAtDefaults(const AnalysisRequest& request);

/// The sensitivity mode of a request: off, or the method (what --sensitivity says).
RemedySensitivity sensitivityOf(const AnalysisRequest& request);
/// "exact", "fast" or "off".
QString sensitivityName(RemedySensitivity s);

/// The project file's keys of the calibration object for these settings: "equalize",
/// "bias_correction", "smoothquant" and "weight_clip_search" (written when on), "smoothquant_alpha"
/// (a number in [0, 1], written when fixed; alone it turns SmoothQuant on, as the CLI's flag does),
/// "depthwise_equalize" and "integer_conv" (on by default: written when off), "depthwise_smooth" and
/// "pointwise_smooth" (off by default: written when on), "remedies" ("auto", written for --remedies auto only),
/// "sensitivity" (written when not the default request's),
/// "memory_budget_bytes" (--memory-budget, written when set), "calibration_refine" (--calibration-refine, written when not 0),
/// "realisations" (--realisations: "auto" or a count from 2 to 64, written when not 1; 1 to 64 read), so that projects without them read as
/// they did.
void writeRemedySettings(const AnalysisRequest& request, QJsonObject& calibration);
/// Reads those keys into `request`; false with `error` naming the file, the key and the value
/// when one is not what it must be.
bool readRemedySettings(const QJsonObject& calibration, const QString& projectPath, AnalysisRequest& request,
                        QString& error);

}  // namespace qs::ui
