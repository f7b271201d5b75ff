// Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization Through Weight Equalization
// and Bias Correction", section 4.1; AIMET's cross_layer_equalization.py is the reference): for two
// layers y = f(W1 x + b1), z = W2 y where f is positively homogeneous (Relu, Clip with min 0 and
// no max, or the identity), scaling output channel i of the first layer by 1/s_i and input channel
// i of the second by s_i leaves z unchanged. With r1_i, r2_i the channel's absolute weight ranges,
// s_i = sqrt(r1_i * r2_i) / r2_i gives both the range sqrt(r1_i * r2_i), which suits per-channel
// weight quantization of both layers.
//
// Pairs: Conv -> Conv (any group on either side: depthwise -> pointwise and pointwise -> depthwise
// included), Gemm/MatMul -> Gemm/MatMul with constant weights, each through Relu, Clip(min 0, no
// max) or nothing, the intermediate tensors read by the next layer only. Chains (a layer in two
// pairs) are iterated until the scales converge. The float function is unchanged up to rounding.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

/// One equalized pair: the two layers and the largest |log s_i| applied over all iterations.
struct EqualizedPair {
  NodeId first = -1, second = -1;
  int channels = 0;
  double maxLogScale = 0;
};

struct EqualizationResult {
  std::shared_ptr<const Model> model;         // a copy of the input with the changed weights and biases
  std::vector<EqualizedPair> pairs;           // in topological order of `first`
  std::vector<std::string> changedInitializers;  // names, sorted, of the initializers whose values changed
  int iterations = 0;
};

/// Finds the equalizable pairs of `model` and equalizes them (at most `maxIterations` sweeps over
/// all pairs, stopping when no scale differs from 1 by more than `tolerance`). The input is not
/// changed. A model with no pair comes back as an unchanged copy with no pairs. Fails only for a
/// malformed weight (a bug of the loader).
Result<EqualizationResult> equalizeCrossLayer(const Model& model, int maxIterations = 20, double tolerance = 1e-4);

/// The pairs equalizeCrossLayer() would equalize, without changing anything.
std::vector<EqualizedPair> findEqualizablePairs(const Model& model);

/// A float constant that only one node slot reads and no input overrides: changing it changes
/// nothing else.
bool isOwnFloatConstant(const Graph& g, ValueId id);

/// Relu, or Clip with min 0 and no max: f(x / s) = f(x) / s for s > 0.
bool isPositiveHomogeneous(const Graph& g, const Node& n);

/// The single consumer of `v`, when it has exactly one and is not a graph output; else -1.
NodeId soleConsumer(const Graph& g, ValueId v);

}  // namespace qs
