// The realisations of the rounding noise (--realisations auto|N; docs/quality.md, "Realisations of the
// rounding noise" and "Realisations by default: the probe") as the workbench shows them: the same
// figures, to the same digits, as `quantscope analyze` prints (app/cli_analyze.cpp), so that a run in
// the workbench and the same run on the command line read alike. QtCore only.
#pragma once

#include <QString>

#include "core/analysis/results.h"
#include "core/export/pipeline.h"

namespace qs::ui {

/// The request's realisations as the CLI's flag spells them: "auto", or the count ("1", "8").
QString realisationsSettingText(const AnalysisRequest& request);

/// One output's realisations, as the CLI's line under it: "8 realisations: mean 22.10 dB, sd 0.69 dB,
/// 21.02 .. 23.11 dB (the analysis 22.85 dB)"; empty with fewer than 2.
QString outputRealisationsText(const OutputResult& output);

/// The worst output by its realisations' mean (the figure the fallback checks its target on with N > 1),
/// -1 when no output has 2 or more.
int worstRealisationOutput(const AnalysisResult& result);

/// Short, for a status line or a title: "mean of 8 realisations 22.10 dB, sd 0.69" of the worst output by
/// its mean; empty when the result has no realisations.
QString worstRealisationsShortText(const AnalysisResult& result);

/// --realisations auto's decision, as the CLI's line: "realisations auto: probe of 4 at the analysis (4
/// samples): worst output sd 0.69 dB (threshold 0.25): 8 realisation(s)"; empty when no probe ran.
QString realisationProbeText(const AnalysisResult& result);

/// Short: "auto: probe sd 0.69 dB -> 8"; empty when no probe ran.
QString realisationProbeShortText(const RealisationProbe& probe);

}  // namespace qs::ui
