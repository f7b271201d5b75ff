// An analysis result over the run's model seen on the model the user opened, by node and tensor
// name. A run that inserts nodes (the depthwise and pointwise input smoothings' Muls) analyses a
// model with more nodes than the one shown, so the run's NodeIds and ValueIds are not the shown
// ones; the views, the toggles and the inspector index by the shown model and read the projection.
#pragma once

#include <vector>

#include "core/analysis/results.h"
#include "core/ir/graph.h"

namespace qs {

/// Per node of `to`, the node of `from` with the same name (-1: none). Identity when both are the
/// same graph.
std::vector<NodeId> nodesByName(const Graph& to, const Graph& from);

/// True when `run`'s node ids are `shown`'s (the same graph, or the same node names in order).
bool sameNodeIds(const Graph& shown, const Graph& run);

/// `r`, a result over `run`, on the nodes and values of `shown`: each shown node takes the figures,
/// plan state, activation and weight points of the run node of the same name; a point's value is
/// the shown node's input in the same slot (a smoothed Conv's input is the inserted Mul's output in
/// the run, its original input here). Run nodes with no shown node (the inserted Muls) are dropped;
/// shown nodes the run has not (removed by it) keep no figures and are not quantizable. Tensors are
/// matched by name. The outputs, calibration and totals are kept as they are.
AnalysisResult projectResult(const AnalysisResult& r, const Graph& run, const Graph& shown);

}  // namespace qs
