#include "core/analysis/fast_sensitivity.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace qs {

namespace {

// Ops whose output noise energy is the sum of their inputs'.
bool addsNoise(std::string_view op) { return op == "Add" || op == "Sub" || op == "Sum" || op == "Concat"; }

// Ops whose output does not depend on their inputs' values (shapes, indices, fresh tensors): a
// noise does not pass them. Without this, the shape computations of a transformer's attention
// (swin_t's shifted-window mask) fed weights back into the residual stream: gains of 1e55.
bool blocksNoise(std::string_view op) {
  static constexpr std::string_view kOps[] = {"Shape",  "Size",   "ConstantOfShape", "NonZero",          "ArgMax",
                                              "ArgMin", "EyeLike", "RandomNormalLike", "RandomUniformLike"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

// Values that can hold a quantization noise: floating point, or of a type not inferred.
bool carriesNoise(const Value& v) {
  return !v.constant && (v.dtype == DType::Undefined || v.dtype == DType::Float || v.dtype == DType::Float16 ||
                         v.dtype == DType::Double || v.dtype == DType::BFloat16);
}

// The measured gain is used where the node's inputs bring at least this share of its output's noise.
constexpr double kMeasuredShare = 0.02;

}  // namespace

std::vector<double> estimateSensitivity(const Graph& g, const SensitivityInputs& in) {
  const size_t N = g.nodes.size(), V = g.values.size();
  const std::vector<ErrorAccumulator>& gw = *in.graphwise;
  const std::vector<ErrorAccumulator>& lw = *in.layerwise;
  // Signal energy and graph-wise noise-to-signal ratio of each value compared in the quantized
  // pass (first outputs); -1: not compared.
  std::vector<double> signal(V, -1), nsr(V, 0);
  for (size_t i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.empty() || n.outputs[0] == kNoValue || gw[i].metrics().count == 0) continue;
    const double s = gw[i].signalPower(), e = gw[i].noisePower();
    if (!std::isfinite(s) || !std::isfinite(e)) continue;  // e.g. a causal mask's -inf
    signal[(size_t)n.outputs[0]] = s;
    nsr[(size_t)n.outputs[0]] = s > 0 ? e / s : 0.0;
  }
  // Per node: how the relative noise of each float input enters the output's (weights), and the
  // relative gain measured on the analysed data.
  std::vector<std::vector<std::pair<ValueId, double>>> weights(N);
  std::vector<double> gain(N, 1.0);
  for (size_t i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    std::vector<std::pair<ValueId, double>>& w = weights[i];
    if (blocksNoise(n.opType)) continue;
    for (ValueId v : n.inputs)
      if (v != kNoValue && carriesNoise(g.value(v))) w.emplace_back(v, 1.0);
    if (w.empty()) continue;
    const ValueId out = n.outputs.empty() ? kNoValue : n.outputs[0];
    const double sOut = out == kNoValue ? -1.0 : signal[(size_t)out];
    if (addsNoise(n.opType)) {
      // Noise energies add: the output's relative noise is the inputs' weighted by their share
      // of the output's signal (Add) or of the concatenation (Concat); equal shares if unknown.
      const bool concat = n.opType == "Concat";
      double total = concat ? 0.0 : sOut;
      bool known = sOut >= 0;
      for (const auto& [v, k] : w) {
        known = known && signal[(size_t)v] >= 0;
        if (concat) total += signal[(size_t)v];
      }
      for (auto& [v, k] : w) k = known && total > 0 ? signal[(size_t)v] / total : 1.0 / (double)w.size();
    }
    // Other ops preserve relative noise, and products (Mul, MatMul of two activations) add their
    // inputs' relative noises. The measured gain corrects this: (output's relative noise minus the
    // node's own) over what the inputs bring by these rules, where the inputs' share is determined.
    if (sOut <= 0) continue;
    double fromInputs = 0;
    for (const auto& [v, k] : w) fromInputs += k * nsr[(size_t)v];
    const double own =
        in.enabled[i] && in.quantizable[i] && lw[i].metrics().count > 0 ? lw[i].noisePower() / sOut : 0.0;
    const double total = nsr[(size_t)out];
    if (fromInputs > 0 && total - own > kMeasuredShare * total) gain[i] = (total - own) / fromInputs;
  }
  // Reverse topological walk: each value's weight in the pooled output noise energy per unit of
  // its relative noise. At a residual Add the stream and the branch enter by their shares of the
  // sum's signal, so depth does not compound the weights as summed energy gains did. A node with
  // several outputs (Split) gives each its relative noise: their weights add.
  std::vector<double> toOut(V, 0.0);
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const double s = (*in.outputs)[o].signalPower();
    if (std::isfinite(s)) toOut[(size_t)g.outputs[o]] += s;
  }
  std::vector<double> nodeWeight(N, 0.0);
  for (auto it = g.topoOrder.rbegin(); it != g.topoOrder.rend(); ++it) {
    const size_t i = (size_t)*it;
    double sum = 0;
    for (ValueId v : g.nodes[i].outputs)
      if (v != kNoValue) sum += toOut[(size_t)v];
    nodeWeight[i] = sum;
    const double pass = gain[i] * sum;
    if (pass <= 0) continue;
    for (const auto& [v, k] : weights[i]) toOut[(size_t)v] += pass * k;
  }
  double outSignal = 0;
  for (const ErrorAccumulator& a : *in.outputs)
    if (std::isfinite(a.signalPower())) outSignal += a.signalPower();
  std::vector<double> snr(N, NAN);
  for (size_t i = 0; i < N; ++i) {
    if (!in.quantizable[i] || lw[i].metrics().count == 0) continue;
    const double s = lw[i].signalPower();
    snr[i] = snrDb(outSignal, s > 0 ? lw[i].noisePower() / s * nodeWeight[i] : 0.0);
  }
  return snr;
}

namespace {

std::vector<double> ranks(const std::vector<double>& x) {
  std::vector<size_t> idx(x.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * (double)(i + j);
    i = j + 1;
  }
  return r;
}

std::vector<size_t> lowest(const std::vector<double>& x, size_t k) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i])) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  idx.resize(std::min(k, idx.size()));
  return idx;
}

}  // namespace

double spearmanCorrelation(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> x, y;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (!std::isnan(a[i]) && !std::isnan(b[i])) x.push_back(a[i]), y.push_back(b[i]);
  if (x.size() < 2) return NAN;
  const std::vector<double> rx = ranks(x), ry = ranks(y);
  const double mean = 0.5 * (double)(x.size() - 1);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < rx.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : NAN;
}

int lowestOverlap(const std::vector<double>& a, const std::vector<double>& b, size_t k) {
  const std::vector<size_t> la = lowest(a, k), lb = lowest(b, k);
  int n = 0;
  for (size_t i : la) n += std::find(lb.begin(), lb.end(), i) != lb.end();
  return n;
}

}  // namespace qs
