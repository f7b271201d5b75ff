// Vocabulary of the quantization simulation: modes, calibration methods and the plan of
// quantization points (reference section 2). Shared by placement, calibration, fake quant,
// analysis and export.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/numeric/quant_mode.h"

namespace qs {

/// Auto (core/analysis/clip_search.h): per activation tensor, the candidate clip (every other
/// method's amax and a grid of fractions of max) whose consumer's output error is least. It comes
/// last so that arrays indexed by the four histogram methods keep their layout.
enum class CalibMethod { Max, Entropy, Percentile, Mse, Auto };

std::string calibMethodName(CalibMethod m);   // "max", "entropy", "percentile", "mse", "auto"
bool parseCalibMethod(const std::string& s, CalibMethod& out);

/// An activation input of a node that gets QuantizeLinear -> DequantizeLinear (per-tensor).
/// The scale belongs to the tensor (value), so every point on the same value shares it;
/// Concat sharing is expressed by `scaleGroup`.
struct ActivationPoint {
  NodeId node = -1;        // consumer whose input is quantized
  size_t inputIndex = 0;   // which input of that node
  ValueId value = kNoValue;
  int scaleGroup = -1;     // points/values with the same group >= 0 share one amax (Concat)
};

/// A constant weight input quantized per channel (symmetric, [-127, 127]).
struct WeightPoint {
  NodeId node = -1;
  size_t inputIndex = 0;
  ValueId value = kNoValue;
  int axis = 0;            // channel axis of the weight tensor
};

/// Why a node is or is not quantized.
struct NodeQuantState {
  bool quantizable = false;  // the placement rules give it at least one quantization point
  bool quantized = false;    // quantizable and enabled by the user's configuration
  std::string reason;        // when not quantized: "op type Relu fuses into the producing Conv",
                             // "excluded by --nodes-to-exclude 'head.*'", "output node", ...
};

/// The quantization points of a model under the TensorRT rules, before user exclusions are
/// applied: each point belongs to the node in `node`; a node's points are active only when the
/// node is quantized.
struct QuantPlan {
  QuantMode mode = QuantMode::Int8;
  std::vector<ActivationPoint> activations;
  std::vector<WeightPoint> weights;
  std::vector<NodeQuantState> nodes;  // indexed by NodeId
};

}  // namespace qs
