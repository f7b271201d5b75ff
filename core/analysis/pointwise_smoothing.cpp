#include "core/analysis/pointwise_smoothing.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <unordered_map>

#include "core/analysis/depthwise_equalization.h"
#include "core/analysis/smoothing_pass.h"
#include "core/exec/executor.h"
#include "core/exec/kernel.h"
#include "core/kernels/conv.h"
#include "core/numeric/fake_quant.h"
#include "core/quant/calibrator.h"
#include "core/quant/equalization.h"

namespace qs {

namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr double kMinScale = 1.0 / 1024;  // as depthwise_smoothing.cpp: a dead channel is lifted by 1024 at most
constexpr double kAlphas[] = {0.25, 0.5, 0.75, 1.0};
constexpr double kClipFractions[] = {1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2};

struct Candidate {
  NodeId conv = -1;
  ValueId input = kNoValue;
  int64_t channels = 0, kSize = 1;  // input channels, kernel positions
  WindowAttrs attrs;
  std::vector<int64_t> kernel;
  std::vector<double> range;     // largest |x| per input channel over the whole tensor
  std::vector<float> patches;    // sampled input patches, channels * kSize floats each (im2col's order)
  int64_t patchCount = 0;
  std::string error;             // why the patches could not be taken
};

// Per watched value, the channel maxima and the input patches of a few random output positions.
class PatchObserver : public SmoothingObserver {
 public:
  PatchObserver(std::vector<Candidate>& cands, int64_t batches, int samples)
      : cands_(cands), batches_(std::max<int64_t>(1, batches)), samples_(std::max(1, samples)) {
    for (size_t i = 0; i < cands.size(); ++i) index_[cands[i].input].push_back(i);
  }
  void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& value) override {
    auto it = index_.find(id);
    if (it == index_.end()) return;
    for (size_t ci : it->second) take(cands_[ci], value);
  }

 private:
  void take(Candidate& c, const Tensor& value) {
    if (!c.error.empty()) return;
    if (value.rank() != 4 || value.dim(1) != c.channels || !accumulateChannelAbsMax(value, c.range)) {
      m_mismatch = c.conv;
      return;
    }
    WindowGeometry geo;
    const Status st = resolveWindow(c.attrs, {value.dim(2), value.dim(3)}, c.kernel, false, geo);
    if (!st.isOk()) {
      c.error = st.message();
      return;
    }
    const int64_t n = value.dim(0), outSize = geo.outSize(), inSize = geo.inSize();
    if (outSize <= 0) return;
    const int64_t perImage = std::max<int64_t>(1, (samples_ + batches_ * n - 1) / (batches_ * n));
    const int64_t K = c.channels * c.kSize;
    const float* p = value.data<float>();
    for (int64_t b = 0; b < n && c.patchCount < 2 * samples_; ++b) {
      // Positions drawn from a generator seeded by the Conv and the patch count: the same run, the same patches.
      std::mt19937 rng((uint32_t)(c.conv * 7919 + c.patchCount));
      for (int64_t m = 0; m < perImage && c.patchCount < 2 * samples_; ++m) {
        const int64_t o = (int64_t)(rng() % (uint64_t)outSize);
        const int64_t oh = o / geo.out[2], ow = o % geo.out[2];
        c.patches.resize((size_t)((c.patchCount + 1) * K));
        float* dst = c.patches.data() + c.patchCount * K;
        for (int64_t ch = 0; ch < c.channels; ++ch) {
          const float* plane = p + (b * c.channels + ch) * inSize;
          for (int64_t kh = 0; kh < geo.k[1]; ++kh)
            for (int64_t kw = 0; kw < geo.k[2]; ++kw) {
              const int64_t ih = oh * geo.s[1] - geo.padB[1] + kh * geo.d[1];
              const int64_t iw = ow * geo.s[2] - geo.padB[2] + kw * geo.d[2];
              const bool inside = ih >= 0 && ih < geo.in[1] && iw >= 0 && iw < geo.in[2];
              *dst++ = inside ? plane[ih * geo.in[2] + iw] : 0.f;
            }
        }
        ++c.patchCount;
      }
    }
  }

  std::vector<Candidate>& cands_;
  std::unordered_map<ValueId, std::vector<size_t>> index_;
  int64_t batches_;
  int samples_;
};

// The quantized Conv's squared output error on the sampled patches with the input divided by s:
// weights W * s quantized per output channel at their max, the input per tensor at the best of
// the clip fractions of its full-tensor max. `X` is [K, P], `W` [O, K], `ref` = W X.
double layerError(const Candidate& c, const Mat& W, const Mat& X, const Mat& ref, const std::vector<double>& s) {
  const int64_t K = W.cols(), kSize = c.kSize;
  Mat Wq = W;
  for (int64_t k = 0; k < K; ++k) Wq.col(k) *= (float)s[(size_t)(k / kSize)];
  for (int64_t o = 0; o < Wq.rows(); ++o) {
    const float step = scaleFromAmax(Wq.row(o).cwiseAbs().maxCoeff(), QuantMode::Int8);
    for (int64_t k = 0; k < K; ++k)
      Wq(o, k) = std::clamp(std::nearbyint(Wq(o, k) / step), (float)kWeightQmin, (float)kWeightQmax) * step;
  }
  Mat Xs = X;
  double top = 0;
  for (int64_t ch = 0; ch < c.channels; ++ch) {
    top = std::max(top, c.range[(size_t)ch] / s[(size_t)ch]);
    const float inv = (float)(1.0 / s[(size_t)ch]);  // what the inserted Mul multiplies by
    Xs.middleRows(ch * kSize, kSize) *= inv;
  }
  if (!(top > 0)) return 0;
  double best = INFINITY;
  Mat Xq(Xs.rows(), Xs.cols());
  for (double f : kClipFractions) {
    const float step = scaleFromAmax((float)(top * f), QuantMode::Int8);
    Xq = Xs.unaryExpr([step](float v) {
      return std::clamp(std::nearbyint(v / step), (float)kActQmin, (float)kActQmax) * step;
    });
    const double e = (Wq * Xq - ref).cast<double>().squaredNorm();
    best = std::min(best, e);
  }
  return best;
}

// s normalised to a largest of 1, each at least kMinScale.
std::vector<double> normalised(std::vector<double> s) {
  const double top = *std::max_element(s.begin(), s.end());
  for (double& v : s) v = std::max(kMinScale, top > 0 && std::isfinite(top) ? v / top : 1.0);
  return s;
}

}  // namespace

int64_t pointwiseChannels(const Graph& g, const Node& n) {
  if (n.opType != "Conv" || !n.domain.empty() || n.inputs.size() < 2 || n.outputs.empty()) return -1;
  if (n.inputs[0] == kNoValue || g.value(n.inputs[0]).constant || !isOwnFloatConstant(g, n.inputs[1])) return -1;
  const Attribute* group = n.attr("group");
  if (group && group->i != 1) return -1;
  const Tensor& w = *g.value(n.inputs[1]).constant;
  if (w.rank() != 4 || w.dim(1) < 2) return -1;
  return w.dim(1);
}

Result<DepthwiseSmoothingResult> applyPointwiseSmoothing(std::shared_ptr<const Model> model,
                                                         const std::vector<DepthwiseSmoothingScale>& scales,
                                                         const std::string& where) {
  return applySavedSmoothing(std::move(model), scales, where,
                             {"pointwise_smooth", "group-1 Conv", "input channels", pointwiseChannels, 1, "_pwsmooth"});
}

Result<DepthwiseSmoothingResult> smoothPointwiseInputs(std::shared_ptr<const Model> model, const CalibrationData& data,
                                                       int threads, const PointwiseSmoothingOptions& options,
                                                       const ProgressFn& progress) {
  DepthwiseSmoothingResult res;
  const Graph& g0 = model->graph;
  const std::set<NodeId> skip(options.skip.begin(), options.skip.end());
  std::vector<Candidate> cands;
  for (NodeId id : g0.topoOrder) {
    const Node& d = g0.nodes[(size_t)id];
    const int64_t ch = pointwiseChannels(g0, d);
    if (ch < 0 || skip.count(id)) continue;
    const ValueId x = d.inputs[0];
    if (g0.value(x).producer < 0) {
      res.skipped.push_back(d.name + ": its input is a graph input");
      continue;
    }
    // A pool is quantized only next to a quantized node (ModelOpt's rule, core/quant/placement.cpp):
    // a float Mul between it and the Conv would take the pool out of INT8 (cls: 8 of them).
    const std::string& producerOp = g0.nodes[(size_t)g0.value(x).producer].opType;
    if (producerOp == "GlobalAveragePool" || producerOp == "AveragePool" || producerOp == "MaxPool") {
      res.skipped.push_back(d.name + ": its input is a " + producerOp + "'s output, which would leave INT8");
      continue;
    }
    Candidate c;
    c.conv = id;
    c.input = x;
    c.channels = ch;
    KernelInit init{d, 0, g0};
    AttrReader a(init);
    c.attrs = readWindowAttrs(a, true);
    if (!a.ok()) {
      res.skipped.push_back(d.name + ": " + a.status().message());
      continue;
    }
    const Tensor& w = *g0.value(d.inputs[1]).constant;
    c.kernel = {w.dim(2), w.dim(3)};
    c.kSize = w.dim(2) * w.dim(3);
    c.range.assign((size_t)ch, 0.0);
    cands.push_back(std::move(c));
  }
  const int64_t batches = smoothingBatches(data, options.maxBatches);
  PatchObserver observer(cands, batches, options.samples);
  const SmoothingPassInfo info{"pointwise smoothing",
                               "its input is not 4-D with the weight's input channel count at run time", 0.5};
  auto smoothOne = [&](Graph& g, size_t ci, std::set<std::string>& nodeNames) {
    const Candidate& c = cands[ci];
    const std::string& name = g.nodes[(size_t)c.conv].name;
    if (!c.error.empty()) {
      res.skipped.push_back(name + ": " + c.error);
      return;
    }
    const double top = *std::max_element(c.range.begin(), c.range.end());
    if (!(top > 0) || !std::isfinite(top) || c.patchCount == 0) {
      res.skipped.push_back(name + ": its input is zero or not finite on the calibration data");
      return;
    }
    double lowest = top;
    for (double v : c.range)
      if (v >= top * kMinScale) lowest = std::min(lowest, v);
    const Tensor& wt = *g0.value(g0.nodes[(size_t)c.conv].inputs[1]).constant;
    const int64_t O = wt.dim(0), K = c.channels * c.kSize, P = c.patchCount;
    const Mat W = Eigen::Map<const Mat>(wt.data<float>(), O, K);
    const Mat X = Eigen::Map<const Mat>(c.patches.data(), P, K).transpose();
    const Mat ref = W * X;
    // w_c: the largest |W[:, c, ...]|, SmoothQuant's weight range of input channel c.
    std::vector<double> wRange((size_t)c.channels, 0.0);
    for (int64_t k = 0; k < K; ++k)
      wRange[(size_t)(k / c.kSize)] = std::max(wRange[(size_t)(k / c.kSize)], (double)W.col(k).cwiseAbs().maxCoeff());
    const double wTop = *std::max_element(wRange.begin(), wRange.end());
    const double before = layerError(c, W, X, ref, std::vector<double>((size_t)c.channels, 1.0));
    double bestErr = INFINITY, bestAlpha = 0;
    bool bestWeightTerm = false;
    std::vector<double> bestS;
    for (int form = 0; form < 2; ++form)
      for (double alpha : kAlphas) {
        if (form == 1 && (alpha == 1.0 || !(wTop > 0))) continue;  // alpha 1: the same s as the first form
        std::vector<double> s((size_t)c.channels);
        for (int64_t ch = 0; ch < c.channels; ++ch) {
          const double r = std::max(kMinScale, c.range[(size_t)ch] / top);
          const double w = std::max(kMinScale, wRange[(size_t)ch] / wTop);
          s[(size_t)ch] = form == 0 ? std::pow(r, alpha) : std::pow(r, alpha) / std::pow(w, 1.0 - alpha);
        }
        s = normalised(std::move(s));
        const double e = layerError(c, W, X, ref, s);
        if (e < bestErr) {
          bestErr = e;
          bestAlpha = alpha;
          bestWeightTerm = form == 1;
          bestS = std::move(s);
        }
      }
    if (!(before > 0) || !(bestErr <= options.maxErrorRatio * before)) {
      res.skipped.push_back(name + ": no scale lowers its layer-wise error enough (" + std::to_string(bestErr / before) +
                            " of it at best)");
      return;
    }
    insertSmoothingMul(g, c.conv, bestS, 1, "_pwsmooth", nodeNames, res);
    DepthwiseSmoothedInput in{c.conv, (NodeId)g.nodes.size() - 1, (int)c.channels, bestAlpha, top / lowest, before,
                              bestErr, bestS};
    in.pointwise = true;
    in.weightTerm = bestWeightTerm;
    res.inputs.push_back(std::move(in));
  };
  QS_RETURN_IF_ERROR(runSmoothingPass(model, data, threads, batches, observer, cands.size(), info, progress, smoothOne, res));
  return res;
}

}  // namespace qs
