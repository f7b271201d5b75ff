// A fast estimate of the output sensitivity of every quantizable node (issue #16), from sums the
// analysis has anyway: no pass of its own, so its cost does not grow with (nodes x depth).
//
// First-order noise propagation in relative terms. Each node's layer-wise quantization noise (its
// output's noise-to-signal ratio, NSR, with only its own points on and float inputs) is carried to
// the pooled graph outputs by a reverse topological walk that is linear in the NSRs: an Add (Sub,
// Sum) or Concat weights each input's NSR by that input's share of the output's signal, products
// of two activations add their inputs' NSRs, other ops preserve it, and each node's gain is
// corrected by what the analysis measured: (graph-wise NSR of its output - its own) / (the NSR its
// inputs bring). Ops whose output does not depend on input values (Shape, ...) and integer values
// carry no noise. A node's estimated output noise is its NSR times the weight of its output.
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
