// What the inspector shows about a node's quantization: its state and why it is not quantized, the
// quantization parameters of its points, and its error figures from the analysis.
#pragma once

#include <vector>

#include "core/analysis/results.h"
#include "ui/property_tree_model.h"

namespace qs::ui {

/// The "Quantization" and "Error" sections of a node.
std::vector<PropertyEntry> quantizationProperties(const Model& model, const AnalysisResult& result, NodeId id);
/// The "Analysis" section of the model summary: outputs, sample count, method, counts.
std::vector<PropertyEntry> analysisSummary(const Model& model, const AnalysisResult& result);

}  // namespace qs::ui
