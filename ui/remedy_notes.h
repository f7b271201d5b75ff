// Per node, what the PTQ remedies of a run did there (AnalysisRun::remedies): the layer table's
// "Remedy" column (ui/remedy_columns.cpp) shows `text`, its tooltip `detail`. One entry per remedy
// that touched the node: cross-layer equalization, bias correction, SmoothQuant, weight clip search,
// depthwise and pointwise input smoothing (with "kept by the remedy choice" where --remedies auto chose
// them) and the depthwise input equalization that int8 runs by default. The model summary also shows
// what --remedies auto tried and kept (RemedySummary::choice).
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

/// Indexed by NodeId of `g`, the run's model (AnalysisRun::model), whose ids the summary's entries use.
std::vector<RemedyNote> remedyNotes(const Graph& g, const RemedySummary& summary);
/// remedyNotes() of the run's model `run` moved onto the nodes of `shown` (the model the workbench shows) by node
/// name: the smoothings insert Muls, after which a node's id in the run's model need not be its id in the model
/// shown. Notes of nodes `shown` lacks (the inserted Muls) are dropped; with as many nodes in both (nothing
/// inserted) the ids are the same and the notes are returned as they are.
std::vector<RemedyNote> remedyNotesOnShown(const Graph& shown, const Graph& run, const RemedySummary& summary);

/// The inspector's "Remedies" section of the model summary: the remedies applied, per output the
/// SNR without them, and what each did (pairs, groups, clipped weights, corrected biases, smoothed
/// inputs); none when the run applied no remedy, equalized no depthwise pair and smoothed no input.
/// Then its "Remedy choice" section (remedyChoiceProperties) when the run made one. `after`: the run's result.
std::vector<PropertyEntry> remedySummaryProperties(const Graph& g, const AnalysisResult& after, const RemedySummary& summary);
/// The "Remedy choice" section: "auto: kept pointwise_smooth" (or "auto: none kept"), the samples it chose on
/// and held out, and per candidate tried whether it was kept, its worst output SNR before and after on both
/// parts and why (the report's "remedy_choice", as the HTML report shows it); a choice read from a loaded
/// quant_cfg.json says so instead.
PropertyEntry remedyChoiceProperties(const RemedyChoice& choice);
/// The inspector's "Remedies" section of node `id`: one row per remedy that touched it, with the
/// figures of the Remedy column's tooltip; none when no remedy did. `id` is of `shown`, the summary's of `run`
/// (remedyNotesOnShown); the three-argument form is for a run on the model shown.
std::vector<PropertyEntry> remedyNodeProperties(const Graph& g, const RemedySummary& summary, NodeId id);
std::vector<PropertyEntry> remedyNodeProperties(const Graph& shown, const Graph& run, const RemedySummary& summary, NodeId id);

}  // namespace qs::ui
