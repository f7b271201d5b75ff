// Per node, what the PTQ remedies of a run did there (AnalysisRun::remedies): the layer table's
// "Remedy" column (ui/remedy_columns.cpp) shows `text`, its tooltip `detail`. One entry per remedy
// that touched the node: cross-layer equalization, bias correction, SmoothQuant, weight clip search
// and the depthwise input equalization that int8 runs by default.
#pragma once

#include <QString>
#include <vector>

#include "core/analysis/remedies.h"
#include "ui/property_tree_model.h"

namespace qs::ui {

struct RemedyNote {
  QString text;    // short, e.g. "SQ α 0.4 · clip 0.93"
  QString detail;  // one line per remedy, with its figures
  bool empty() const { return text.isEmpty(); }
};

/// Indexed by NodeId of `g` (the run's model: the remedies keep the node ids of the model loaded).
std::vector<RemedyNote> remedyNotes(const Graph& g, const RemedySummary& summary);

/// The inspector's "Remedies" section of the model summary: the remedies applied, per output the
/// SNR without them, and what each did (pairs, groups, clipped weights, corrected biases); none
/// when the run applied no remedy and equalized no depthwise pair. `after`: the run's result.
std::vector<PropertyEntry> remedySummaryProperties(const Graph& g, const AnalysisResult& after, const RemedySummary& summary);
/// The inspector's "Remedies" section of node `id`: one row per remedy that touched it, with the
/// figures of the Remedy column's tooltip; none when no remedy did.
std::vector<PropertyEntry> remedyNodeProperties(const Graph& g, const RemedySummary& summary, NodeId id);

}  // namespace qs::ui
