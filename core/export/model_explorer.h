// Per-node figures of an analysis as Google Model Explorer node-data overlays (the JSON that
// model_explorer's node_data_builder writes and its "Add per-node data" loads): one file per
// figure, {graph id: {"results": {node key: {"value": v}}, "gradient": [...]}}, keyed by each
// node's first output tensor name (Model Explorer matches a key against a node's output tensor
// names or its id), the graph id being the ONNX graph's name.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/analysis/results.h"
#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

/// The overlays for `path` (FILE.json): FILE.json holds the graph-wise SNR, FILE-layerwise.json the
/// layer-wise SNR, FILE-sensitivity.json the output sensitivity SNR (all in dB; lower is worse and
/// is coloured red). Nodes without the figure are left out; an infinite SNR is written as 999.
/// Returns (path, contents) pairs.
std::vector<std::pair<std::string, std::string>> modelExplorerOverlays(const Model& model, const AnalysisResult& r,
                                                                       const std::string& path);

/// Writes the overlays of modelExplorerOverlays(), all or none: each to a temporary file first,
/// then renamed over its target; on failure the temporary files are removed. Fails naming the
/// file and the reason.
Status writeModelExplorerOverlays(const Model& model, const AnalysisResult& r, const std::string& path);

}  // namespace qs
