// A fast estimate of the output sensitivity of every quantizable node (issue #16), from sums the
// analysis has anyway: no pass of its own, so its cost does not grow with (nodes x depth).
//
// First-order noise propagation. Each node's layer-wise quantization noise (the energy sum d^2 of
// its output with only its own points on, float inputs) is carried to the graph outputs by a
// per-node energy gain. The gain of a node is measured on the analysed data from the graph-wise
// sums of the quantized pass: the noise energy at its output is, to first order and for
// independent noises, gain x (noise energy at its inputs) + (its own layer-wise noise), so
// gain = (E_out - E_own) / E_in. Where that is not determined (no noise reaches the node, or its
// own noise dominates), the gain comes from the op: 1 for ops that move or add values (Add,
// Concat, Reshape, ...), the ratio of output to input signal energy for the others (relative
// noise preserved). A reverse topological walk then gives each value's gain to the pooled graph
// outputs, and a node's estimated output noise is its layer-wise noise times its output's gain.
// Measured against the exact cone sweep in docs/performance.md ("Fast sensitivity").
#pragma once

#include <vector>

#include "core/ir/graph.h"
#include "core/numeric/metrics.h"

namespace qs {

/// The sums the estimate reads, all indexed by NodeId (outputs by graph output index).
struct SensitivityInputs {
  const std::vector<ErrorAccumulator>* graphwise = nullptr;  // quantized pass vs float, output 0
  const std::vector<ErrorAccumulator>* layerwise = nullptr;  // the node alone, output 0
  const std::vector<ErrorAccumulator>* outputs = nullptr;    // graph outputs, quantized pass
  std::vector<char> enabled;      // nodes whose points were on in the quantized pass
  std::vector<char> quantizable;  // nodes to estimate
};

/// Estimated sensitivity SNR (dB, graph outputs pooled) per node: NaN for nodes that are not
/// quantizable or have no layer-wise sums, +inf where the estimated noise is zero.
std::vector<double> estimateSensitivity(const Graph& g, const SensitivityInputs& in);

/// Spearman's rank correlation of two equally long series (ties get their mean rank; +-inf rank
/// as extremes, NaN pairs are skipped). NaN when fewer than two pairs are left or a series is constant.
double spearmanCorrelation(const std::vector<double>& a, const std::vector<double>& b);
/// How many of the k lowest of `a` are among the k lowest of `b` (NaN entries skipped): the top-k
/// overlap of two sensitivity rankings (lowest SNR = most sensitive).
int lowestOverlap(const std::vector<double>& a, const std::vector<double>& b, size_t k);

}  // namespace qs
