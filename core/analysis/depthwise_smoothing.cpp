#include "core/analysis/depthwise_smoothing.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "core/analysis/depthwise_equalization.h"
#include "core/analysis/smoothing_pass.h"
#include "core/exec/executor.h"
#include "core/numeric/fake_quant.h"
#include "core/quant/calibrator.h"

namespace qs {

namespace {

constexpr double kMinScale = 1.0 / 1024;  // as depthwise_equalization.cpp: a dead channel is lifted by 1024 at most
constexpr double kAlphas[] = {0.25, 0.5, 0.75, 1.0};
constexpr double kClipFractions[] = {1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2};

struct Candidate {
  NodeId conv = -1;
  ValueId input = kNoValue;
  int64_t channels = 0;
  std::vector<double> range;                 // largest |x| per channel
  std::vector<std::vector<float>> samples;   // sampled values per channel
  std::vector<double> filterEnergy;          // sum of w^2 per channel
};

// Per watched value, the channel maxima and an even sample of each channel's values.
class SampleObserver : public SmoothingObserver {
 public:
  SampleObserver(std::vector<Candidate>& cands, int64_t batches, int perChannel)
      : cands_(cands), batches_(std::max<int64_t>(1, batches)), perChannel_(std::max(1, perChannel)) {
    for (size_t i = 0; i < cands.size(); ++i) index_[cands[i].input] = i;
  }
  void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& value) override {
    auto it = index_.find(id);
    if (it == index_.end()) return;
    Candidate& c = cands_[it->second];
    if (!accumulateChannelAbsMax(value, c.range)) {
      m_mismatch = c.conv;
      return;
    }
    int64_t inner = 1;
    for (int i = 2; i < value.rank(); ++i) inner *= value.dim(i);
    const int64_t n = value.dim(0);
    const int64_t perPlane = std::max<int64_t>(1, (perChannel_ + batches_ * n - 1) / (batches_ * n));
    const int64_t step = std::max<int64_t>(1, inner / perPlane);
    const float* p = value.data<float>();
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c.channels; ++ch) {
        const float* q = p + (b * c.channels + ch) * inner;
        std::vector<float>& s = c.samples[(size_t)ch];
        for (int64_t i = 0; i < inner && (int64_t)s.size() < 2 * perChannel_; i += step) s.push_back(q[i]);
      }
  }

 private:
  std::vector<Candidate>& cands_;
  std::unordered_map<ValueId, size_t> index_;
  int64_t batches_;
  int perChannel_;
};

// The proxy of the depthwise Conv's output error with the input divided by s: per channel, the
// scaled filter's energy times the squared INT8 error of the samples, at the best clip.
double layerError(const Candidate& c, const std::vector<double>& s) {
  double top = 0;
  for (int64_t ch = 0; ch < c.channels; ++ch) top = std::max(top, c.range[(size_t)ch] / s[(size_t)ch]);
  if (!(top > 0)) return 0;
  double best = INFINITY;
  std::vector<float> buf;
  for (double f : kClipFractions) {
    const float scale = scaleFromAmax((float)(top * f), QuantMode::Int8);
    if (!(scale > 0)) continue;
    double err = 0;
    for (int64_t ch = 0; ch < c.channels && err < best; ++ch) {
      const std::vector<float>& v = c.samples[(size_t)ch];
      const float inv = (float)(1.0 / s[(size_t)ch]);
      buf.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) buf[i] = v[i] * inv;
      double e = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        const float q = std::clamp(std::nearbyint(buf[i] / scale), (float)kActQmin, (float)kActQmax) * scale;
        const double d = (double)buf[i] - (double)q;
        e += d * d;
      }
      err += e * c.filterEnergy[(size_t)ch] * s[(size_t)ch] * s[(size_t)ch];
    }
    best = std::min(best, err);
  }
  return best;
}

std::string uniqueValueName(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 1; g.findValue(name) != kNoValue; ++i) name = base + "_" + std::to_string(i);
  return name;
}

}  // namespace

void insertSmoothingMul(Graph& g, NodeId conv, const std::vector<double>& bestS, int weightAxis,
                        const std::string& suffix, std::set<std::string>& nodeNames, DepthwiseSmoothingResult& res) {
  const int64_t channels = (int64_t)bestS.size();
  const std::string name = g.nodes[(size_t)conv].name;
  // The Mul on the Conv's input edge: x * (1 / s), the scale shaped [1, C, 1, ...] as the weight's rank.
  const ValueId x = g.nodes[(size_t)conv].inputs[0];
  const ValueId wId = g.nodes[(size_t)conv].inputs[1];
  const int rank = g.value(wId).constant->rank();
  Shape shape((size_t)rank, 1);
  shape[1] = channels;
  Tensor inv(DType::Float, shape);
  for (int64_t ch = 0; ch < channels; ++ch) inv.data<float>()[ch] = (float)(1.0 / bestS[(size_t)ch]);
  const std::string base = g.value(x).name + suffix;
  const ValueId sv = g.valueId(uniqueValueName(g, base + "_scale"));
  g.value(sv).dtype = DType::Float;
  g.value(sv).shape = std::vector<Dim>();
  for (int64_t d : shape) g.value(sv).shape->push_back(Dim{d, ""});
  g.value(sv).constant = std::move(inv);
  const ValueId yv = g.valueId(uniqueValueName(g, base));
  g.value(yv).dtype = DType::Float;
  g.value(yv).shape = g.value(x).shape;
  Node mul;
  mul.name = name + suffix;
  for (int i = 1; nodeNames.count(mul.name); ++i) mul.name = name + suffix + "_" + std::to_string(i);
  nodeNames.insert(mul.name);
  mul.opType = "Mul";
  mul.inputs = {x, sv};
  mul.outputs = {yv};
  g.nodes.push_back(std::move(mul));
  g.nodes[(size_t)conv].inputs[0] = yv;
  // The weights of input channel c by s_c (the bias is unchanged): axis 0 of a depthwise Conv's
  // [C, 1, k...], axis 1 of a group-1 Conv's [O, C, k...].
  Tensor w = g.value(wId).constant->clone();
  const int64_t outer = weightAxis == 0 ? 1 : w.dim(0);
  const int64_t block = w.numel() / (outer * channels);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t ch = 0; ch < channels; ++ch)
      for (int64_t k = 0; k < block; ++k) w.data<float>()[(o * channels + ch) * block + k] *= (float)bestS[(size_t)ch];
  g.value(wId).constant = std::move(w);
  res.changedInitializers.push_back(g.value(wId).name);
  res.insertedNodes.push_back(g.nodes.back().name);
}

Result<DepthwiseSmoothingResult> applySavedSmoothing(std::shared_ptr<const Model> model,
                                                     const std::vector<DepthwiseSmoothingScale>& scales,
                                                     const std::string& where, const SavedSmoothingForm& form) {
  DepthwiseSmoothingResult res;
  if (scales.empty()) {
    res.model = std::move(model);
    return res;
  }
  auto copy = std::make_shared<Model>(*model);
  Graph& g = copy->graph;
  std::set<std::string> nodeNames;
  std::unordered_map<std::string, NodeId> byName;
  for (NodeId id = 0; id < (NodeId)g.nodes.size(); ++id) {
    nodeNames.insert(g.nodes[(size_t)id].name);
    byName.emplace(g.nodes[(size_t)id].name, id);
  }
  for (const DepthwiseSmoothingScale& sc : scales) {
    auto it = byName.find(sc.consumer);
    if (it == byName.end() || form.channelsOf(g, g.nodes[(size_t)it->second]) != (int64_t)sc.scale.size())
      return invalidArgument(where + ": " + form.key + ": node '" + sc.consumer + "' is not a " + form.consumer + " with " +
                             std::to_string(sc.scale.size()) + " " + form.channels + " in " + model->path);
    for (double v : sc.scale)
      if (!(v > 0) || !std::isfinite(v))
        return invalidArgument(where + ": " + form.key + ": node '" + sc.consumer + "': a scale is not a positive number");
    insertSmoothingMul(g, it->second, sc.scale, form.weightAxis, form.suffix, nodeNames, res);
    DepthwiseSmoothedInput in{it->second, (NodeId)g.nodes.size() - 1, (int)sc.scale.size(), NAN, 0, 0, 0, sc.scale};
    in.pointwise = form.weightAxis == 1;
    res.inputs.push_back(std::move(in));
  }
  QS_RETURN_IF_ERROR(g.finalize(model->path));
  std::sort(res.changedInitializers.begin(), res.changedInitializers.end());
  res.model = std::move(copy);
  return res;
}

Result<DepthwiseSmoothingResult> applyDepthwiseSmoothing(std::shared_ptr<const Model> model,
                                                         const std::vector<DepthwiseSmoothingScale>& scales,
                                                         const std::string& where) {
  return applySavedSmoothing(std::move(model), scales, where,
                             {"depthwise_smooth", "depthwise Conv", "channels", depthwiseChannels, 0, "_dwsmooth"});
}

Result<DepthwiseSmoothingResult> smoothDepthwiseInputs(std::shared_ptr<const Model> model, const CalibrationData& data,
                                                       int threads, const DepthwiseSmoothingOptions& options,
                                                       const ProgressFn& progress) {
  DepthwiseSmoothingResult res;
  const Graph& g0 = model->graph;
  const std::set<NodeId> skip(options.skip.begin(), options.skip.end());
  std::vector<Candidate> cands;
  for (NodeId id : g0.topoOrder) {
    const Node& d = g0.nodes[(size_t)id];
    const int64_t ch = depthwiseChannels(g0, d);
    if (ch < 0 || skip.count(id)) continue;
    const ValueId x = d.inputs[0];
    if (g0.value(x).producer < 0) {
      res.skipped.push_back(d.name + ": its input is a graph input");
      continue;
    }
    Candidate c;
    c.conv = id;
    c.input = x;
    c.channels = ch;
    c.range.assign((size_t)ch, 0.0);
    c.samples.resize((size_t)ch);
    c.filterEnergy.assign((size_t)ch, 0.0);
    const Tensor& w = *g0.value(d.inputs[1]).constant;
    const int64_t block = w.numel() / ch;
    for (int64_t k = 0; k < ch; ++k)
      for (int64_t i = 0; i < block; ++i) {
        const double v = w.data<float>()[k * block + i];
        c.filterEnergy[(size_t)k] += v * v;
      }
    cands.push_back(std::move(c));
  }
  const int64_t batches = smoothingBatches(data, options.maxBatches);
  SampleObserver observer(cands, batches, options.samplesPerChannel);
  const SmoothingPassInfo info{"depthwise smoothing", "its input has another channel count at run time than its weight", 0.8};
  auto smoothOne = [&](Graph& g, size_t ci, std::set<std::string>& nodeNames) {
    const Candidate& c = cands[ci];
    const std::string& name = g.nodes[(size_t)c.conv].name;
    const double top = *std::max_element(c.range.begin(), c.range.end());
    if (!(top > 0) || !std::isfinite(top) || c.samples[0].empty()) {
      res.skipped.push_back(name + ": its input is zero or not finite on the calibration data");
      return;
    }
    double lowest = top;
    for (double v : c.range)
      if (v >= top * kMinScale) lowest = std::min(lowest, v);
    const double before = layerError(c, std::vector<double>((size_t)c.channels, 1.0));
    double bestErr = INFINITY, bestAlpha = 0;
    std::vector<double> bestS;
    for (double a : kAlphas) {
      std::vector<double> s((size_t)c.channels);
      for (int64_t ch = 0; ch < c.channels; ++ch) s[(size_t)ch] = std::pow(std::max(kMinScale, c.range[(size_t)ch] / top), a);
      const double e = layerError(c, s);
      if (e < bestErr) {
        bestErr = e;
        bestAlpha = a;
        bestS = std::move(s);
      }
    }
    if (!(bestErr <= options.maxErrorRatio * before)) {
      res.skipped.push_back(name + ": no scale lowers its layer-wise error enough (" + std::to_string(bestErr / before) +
                            " of it at best)");
      return;
    }
    insertSmoothingMul(g, c.conv, bestS, 0, "_dwsmooth", nodeNames, res);
    res.inputs.push_back({c.conv, (NodeId)g.nodes.size() - 1, (int)c.channels, bestAlpha, top / lowest, before, bestErr, bestS});
  };
  QS_RETURN_IF_ERROR(runSmoothingPass(model, data, threads, batches, observer, cands.size(), info, progress, smoothOne, res));
  return res;
}

}  // namespace qs
