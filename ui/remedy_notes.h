// Per node, what the PTQ remedies of a run did there (AnalysisRun::remedies): the layer table's
// "Remedy" column (ui/remedy_columns.cpp) shows `text`, its tooltip `detail`. One entry per remedy
// that touched the node: cross-layer equalization, bias correction, SmoothQuant, weight clip search
// and the depthwise input equalization that int8 runs by default.
#pragma once

#include <QString>
#include <vector>

#include "core/analysis/remedies.h"

namespace qs::ui {

struct RemedyNote {
  QString text;    // short, e.g. "SQ α 0.4 · clip 0.93"
  QString detail;  // one line per remedy, with its figures
  bool empty() const { return text.isEmpty(); }
};

/// Indexed by NodeId of `g` (the run's model: the remedies keep the node ids of the model loaded).
std::vector<RemedyNote> remedyNotes(const Graph& g, const RemedySummary& summary);

}  // namespace qs::ui
