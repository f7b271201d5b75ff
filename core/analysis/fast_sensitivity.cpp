#include "core/analysis/fast_sensitivity.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace qs {

namespace {

// Ops whose output noise is their inputs' noise moved or added, not scaled with the signal.
bool movesOrAddsNoise(std::string_view op) {
  static constexpr std::string_view kOps[] = {"Add",     "Sub",       "Sum",   "Concat",   "Reshape", "Flatten",
                                              "Squeeze", "Unsqueeze", "Split", "Identity", "Pad",     "Transpose",
                                              "DepthToSpace", "SpaceToDepth", "Dropout"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

}  // namespace

std::vector<double> estimateSensitivity(const Graph& g, const SensitivityInputs& in) {
  const size_t N = g.nodes.size(), V = g.values.size();
  const std::vector<ErrorAccumulator>& gw = *in.graphwise;
  const std::vector<ErrorAccumulator>& lw = *in.layerwise;
  // Signal and graph-wise noise energy of each value compared in the quantized pass (first outputs).
  std::vector<double> signal(V, -1), noise(V, 0);
  for (size_t i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.empty() || n.outputs[0] == kNoValue || gw[i].metrics().count == 0) continue;
    signal[(size_t)n.outputs[0]] = gw[i].signalPower();
    noise[(size_t)n.outputs[0]] = gw[i].noisePower();
  }
  // Energy gain of each node from the noise at its inputs to the noise at its output.
  std::vector<double> gain(N, 1.0);
  for (size_t i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.empty() || n.outputs[0] == kNoValue) continue;
    const ValueId out = n.outputs[0];
    double eIn = 0, sIn = 0;
    bool known = true;
    for (ValueId v : n.inputs) {
      if (v == kNoValue || g.value(v).constant) continue;
      eIn += noise[(size_t)v];
      if (signal[(size_t)v] < 0) known = false;
      else sIn += signal[(size_t)v];
    }
    const double own = in.enabled[i] && in.quantizable[i] && lw[i].metrics().count > 0 ? lw[i].noisePower() : 0.0;
    const double eOut = signal[(size_t)out] >= 0 ? noise[(size_t)out] : -1;
    if (eOut >= 0 && eIn > 0 && eOut - own > 0.02 * eOut) {
      gain[i] = (eOut - own) / eIn;  // measured on the analysed data
    } else if (movesOrAddsNoise(n.opType)) {
      gain[i] = 1.0;
    } else if (known && sIn > 0 && signal[(size_t)out] >= 0) {
      gain[i] = signal[(size_t)out] / sIn;  // relative noise preserved
    }
  }
  // Gain of each value's noise to the pooled graph outputs, in reverse topological order.
  std::vector<double> toOut(V, 0.0);
  for (ValueId o : g.outputs) toOut[(size_t)o] += 1.0;
  std::vector<double> nodeGain(N, 0.0);
  for (auto it = g.topoOrder.rbegin(); it != g.topoOrder.rend(); ++it) {
    const Node& n = g.nodes[(size_t)*it];
    double sum = 0;
    int outs = 0;
    for (ValueId v : n.outputs) {
      if (v == kNoValue) continue;
      sum += toOut[(size_t)v];
      ++outs;
    }
    // Noise at the input splits among outputs (Split): each output carries its share.
    const double gOut = outs ? sum / outs : 0.0;
    nodeGain[(size_t)*it] = gOut;
    const double pass = gain[(size_t)*it] * gOut;
    if (pass <= 0) continue;
    for (ValueId v : n.inputs)
      if (v != kNoValue && !g.value(v).constant) toOut[(size_t)v] += pass;
  }
  double outSignal = 0;
  for (const ErrorAccumulator& a : *in.outputs) outSignal += a.signalPower();
  std::vector<double> snr(N, NAN);
  for (size_t i = 0; i < N; ++i) {
    if (!in.quantizable[i] || lw[i].metrics().count == 0) continue;
    snr[i] = snrDb(outSignal, lw[i].noisePower() * nodeGain[i]);
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
