// SmoothQuant (smoothquant.h). The producers that take the 1/s: a LayerNormalization (its scale and
// bias), and since 2026-11-27 (wt-recn) a LayerNormalization decomposed into ops (paddle2onnx's
// ReduceMean, Sub, Pow, ..., Div, then Mul(gamma), Add(beta), as in PP-OCRv4 rec's SVTR neck), at its
// closing Add(Mul(z, gamma), beta) with per-channel constants of their own; SmoothedGroup::producer
// is then that Add.
#include "core/analysis/smoothquant.h"

#include <Eigen/Core>
#include <algorithm>
#include <set>

#include "core/analysis/batch_schedule.h"
#include "core/numeric/fake_quant.h"

namespace qs {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Consumer {
  NodeId node = -1;
  ValueId weight = kNoValue;
  bool nk = false;  // Gemm transB: W [N, K]; else [K, N]
};

struct Group {
  NodeId ln = -1;                                // the producer: LayerNormalization, or the Add of a decomposed one
  std::vector<std::pair<NodeId, size_t>> folds;  // (node, input slot) of the constants that take the 1/s
  int64_t K = 0;
  std::vector<Consumer> consumers;
  std::vector<double> xMax;  // per input channel, over all read rows
  RowMatrix rows;            // sampled rows of X
  int64_t kept = 0;
};

bool floatConstant(const Graph& g, ValueId id) {
  if (id == kNoValue) return false;
  const Value& v = g.value(id);
  return v.constant && v.constant->dtype() == DType::Float && !v.isOverridable;
}

// The LayerNormalization's scale or bias at `id` can be changed for it alone: a float constant
// only it reads, or the output of an Identity of a float constant that only it reads.
bool ownable(const Graph& g, ValueId id) {
  if (id == kNoValue) return true;  // no bias
  const Value& v = g.value(id);
  if (v.isGraphOutput || v.consumers.size() != 1) return false;
  if (floatConstant(g, id)) return true;
  if (v.producer < 0) return false;
  const Node& p = g.nodes[(size_t)v.producer];
  return p.opType == "Identity" && p.domain.empty() && p.inputs.size() == 1 && floatConstant(g, p.inputs[0]);
}

// The number of values of the constant at `id` (directly or through an Identity), 0 if none.
int64_t constantNumel(const Graph& g, ValueId id) {
  if (id == kNoValue) return 0;
  const Value& v = g.value(id);
  if (v.constant) return v.constant->numel();
  if (v.producer < 0) return 0;
  const Node& p = g.nodes[(size_t)v.producer];
  if (p.opType != "Identity" || p.inputs.empty() || !floatConstant(g, p.inputs[0])) return 0;
  return g.value(p.inputs[0]).constant->numel();
}

// The constant at `id` broadcasts along the last axis only: shape [K] or [1, ..., 1, K].
bool lastAxisVector(const Graph& g, ValueId id) {
  const Value& v = g.value(id);
  const Tensor* t = v.constant ? &*v.constant : nullptr;
  if (!t && v.producer >= 0) t = &*g.value(g.nodes[(size_t)v.producer].inputs[0]).constant;
  if (!t || t->rank() < 1) return false;
  for (int64_t d = 0; d + 1 < t->rank(); ++d)
    if (t->dim(d) != 1) return false;
  return true;
}

std::string consumersOf(const Graph& g, const QuantPlan& plan, const Value& y, Group& out);

// Where the group's reason not to smooth is, "" when it can be.
std::string groupOf(const Graph& g, const QuantPlan& plan, NodeId id, Group& out) {
  const Node& n = g.nodes[(size_t)id];
  if (n.outputs.empty() || n.outputs[0] == kNoValue || n.inputs.size() < 2) return "no output";
  const Value& y = g.value(n.outputs[0]);
  if (y.isGraphOutput) return "its output is a graph output";
  const Attribute* axis = n.attr("axis");
  if (axis && axis->i != -1) {
    // Only the last axis normalised gives one scale per channel of the consumers' K.
    if (!y.shape || axis->i != (int64_t)y.shape->size() - 1) return "it normalises more than the last axis";
  }
  for (size_t i = 1; i < std::min<size_t>(n.inputs.size(), 3); ++i)
    if (!ownable(g, n.inputs[i])) return "its scale or bias is not a constant of its own";
  const std::string why = consumersOf(g, plan, y, out);
  if (!why.empty()) return why;
  const int64_t gk = constantNumel(g, n.inputs[1]);
  if (gk != out.K) return "its scale has " + std::to_string(gk) + " values, its consumers " + std::to_string(out.K) + " input channels";
  out.ln = id;
  out.folds = {{id, 1}};
  if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) out.folds.push_back({id, 2});
  return "";
}

// A LayerNormalization decomposed into ops (what paddle2onnx writes: ReduceMean, Sub, Pow, ...,
// Div, then Mul by the scale and Add of the bias) ends in Add(Mul(z, gamma), beta) with per-channel
// constants: (z gamma + beta) / s = z (gamma / s) + beta / s for any z, so the 1/s folds into gamma
// and beta as into a LayerNormalization's. `id` is the Add. "-" where `id` is not that pattern at all
// (nothing to report), else as groupOf.
std::string decomposedOf(const Graph& g, const QuantPlan& plan, NodeId id, Group& out) {
  const Node& add = g.nodes[(size_t)id];
  if (add.opType != "Add" || !add.domain.empty() || add.inputs.size() != 2 || add.outputs.empty() ||
      add.outputs[0] == kNoValue)
    return "-";
  for (size_t bi = 0; bi < 2; ++bi) {
    const ValueId beta = add.inputs[bi], m = add.inputs[1 - bi];
    if (constantNumel(g, beta) == 0 || m == kNoValue || g.value(m).producer < 0) continue;
    const NodeId mulId = g.value(m).producer;
    const Node& mul = g.nodes[(size_t)mulId];
    if (mul.opType != "Mul" || !mul.domain.empty() || mul.inputs.size() != 2) continue;
    for (size_t gi = 0; gi < 2; ++gi) {
      const ValueId gamma = mul.inputs[gi];
      if (constantNumel(g, gamma) == 0 || constantNumel(g, mul.inputs[1 - gi]) != 0) continue;
      // The pattern; from here on a failure is a reason.
      const Value& y = g.value(add.outputs[0]);
      if (y.isGraphOutput) return "its output is a graph output";
      const Value& mv = g.value(m);
      if (mv.isGraphOutput || mv.consumers.size() != 1) return "its Mul '" + mul.name + "' has other readers";
      if (!ownable(g, gamma) || !ownable(g, beta)) return "its scale or bias is not a constant of its own";
      if (!lastAxisVector(g, gamma) || !lastAxisVector(g, beta)) return "its scale or bias is not per last-axis channel";
      const std::string why = consumersOf(g, plan, y, out);
      if (!why.empty()) return why;
      if (constantNumel(g, gamma) != out.K || constantNumel(g, beta) != out.K)
        return "its scale has " + std::to_string(constantNumel(g, gamma)) + " values, its consumers " +
               std::to_string(out.K) + " input channels";
      out.ln = id;
      out.folds = {{mulId, gi}, {id, bi}};
      return "";
    }
  }
  return "-";
}

// The MatMul/Gemm readers of `y` with constant weights of their own (Shape nodes aside), into `out`.
std::string consumersOf(const Graph& g, const QuantPlan& plan, const Value& y, Group& out) {
  bool anyQuantized = false;
  for (NodeId c : y.consumers) {
    const Node& cn = g.nodes[(size_t)c];
    if (cn.opType == "Shape" && cn.domain.empty()) continue;
    if ((cn.opType != "MatMul" && cn.opType != "Gemm") || !cn.domain.empty() || cn.inputs.size() < 2 ||
        cn.inputs[0] == kNoValue || &g.value(cn.inputs[0]) != &y)
      return "its output is read by " + cn.opType + " '" + cn.name + "'";
    const ValueId w = cn.inputs[1];
    if (!floatConstant(g, w) || g.value(w).consumers.size() != 1 || g.value(w).constant->rank() != 2)
      return "'" + cn.name + "' has no constant 2-D weight of its own";
    Consumer con{c, w, false};
    if (cn.opType == "Gemm") {
      const Attribute* ta = cn.attr("transA");
      const Attribute* tb = cn.attr("transB");
      if (ta && ta->i != 0) return "'" + cn.name + "' transposes its input";
      con.nk = tb && tb->i != 0;
    }
    const Tensor& wt = *g.value(w).constant;
    const int64_t k = con.nk ? wt.dim(1) : wt.dim(0);
    if (out.K != 0 && out.K != k) return "its consumers' weights differ in input channels";
    out.K = k;
    anyQuantized = anyQuantized || isNodeQuantized(plan, c);
    out.consumers.push_back(con);
  }
  if (out.consumers.empty()) return "no MatMul/Gemm reads it";
  if (!anyQuantized) return "none of its consumers is quantized";
  return "";
}

// max over output channels of |W_j . |, per input channel j.
void weightRowMax(const Tensor& w, bool nk, std::vector<double>& m) {
  const float* d = w.data<float>();
  const int64_t r = w.dim(0), c = w.dim(1);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const int64_t k = nk ? j : i;
      m[(size_t)k] = std::max(m[(size_t)k], (double)std::fabs(d[i * c + j]));
    }
}

std::vector<float> scalesFor(const Group& grp, const std::vector<double>& wMax, double alpha) {
  std::vector<float> s((size_t)grp.K, 1.f);
  for (size_t j = 0; j < s.size(); ++j) {
    const double x = grp.xMax[j], w = wMax[j];
    if (!(x > 0) || !(w > 0)) continue;
    const double v = std::pow(x, alpha) / std::pow(w, 1.0 - alpha);
    if (std::isfinite(v) && v > 0) s[j] = (float)std::clamp(v, 1e-5, 1e5);
  }
  return s;
}

// W scaled by s on its input channels.
Tensor scaledWeight(const Tensor& w, bool nk, const std::vector<float>& s) {
  Tensor out = w.clone();
  float* d = out.data<float>();
  const int64_t r = w.dim(0), c = w.dim(1);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) d[i * c + j] *= s[(size_t)(nk ? j : i)];
  return out;
}

// Layer-wise squared error of the group's consumers on the sampled rows with smoothing s.
double groupError(const Graph& g, const Group& grp, const std::vector<float>& s, QuantMode mode,
                  const std::vector<RowMatrix>& ref) {
  double amax = 0;
  for (size_t j = 0; j < s.size(); ++j) amax = std::max(amax, grp.xMax[j] / s[j]);
  Tensor x(DType::Float, {grp.kept, grp.K});
  Eigen::Map<RowMatrix> xm(x.data<float>(), grp.kept, grp.K);
  xm = grp.rows.topRows(grp.kept);
  for (int64_t j = 0; j < grp.K; ++j) xm.col(j) /= s[(size_t)j];
  const Tensor xq = fakeQuantize(x, {scaleFromAmax((float)amax, mode)}, 0, mode, kActQmin, kActQmax);
  Eigen::Map<const RowMatrix> xqm(xq.data<float>(), grp.kept, grp.K);
  double err = 0;
  for (size_t c = 0; c < grp.consumers.size(); ++c) {
    const Consumer& con = grp.consumers[c];
    const Tensor ws = scaledWeight(*g.value(con.weight).constant, con.nk, s);
    const int axis = con.nk ? 0 : 1;
    std::vector<float> scales((size_t)ws.dim(axis));
    for (size_t n = 0; n < scales.size(); ++n) {
      float m = 0;
      for (int64_t k = 0; k < grp.K; ++k)
        m = std::max(m, std::fabs(ws.data<float>()[con.nk ? (int64_t)n * grp.K + k : k * ws.dim(1) + (int64_t)n]));
      scales[n] = scaleFromAmax(m, mode);
    }
    const Tensor wq = fakeQuantize(ws, scales, axis, mode, kWeightQmin, kWeightQmax);
    Eigen::Map<const RowMatrix> wm(wq.data<float>(), wq.dim(0), wq.dim(1));
    RowMatrix y = con.nk ? RowMatrix(xqm * wm.transpose()) : RowMatrix(xqm * wm);
    err += (double)(y - ref[c]).squaredNorm();
  }
  return err;
}

// Divides input `slot` (the scale or bias of a LayerNormalization, or of its decomposed tail) of `ln`
// in `g` by s, for it alone.
std::string divideOwn(Graph& g, NodeId ln, size_t slot, const std::vector<float>& s) {
  const ValueId id = g.nodes[(size_t)ln].inputs[slot];
  Value& v = g.value(id);
  Tensor t;
  if (v.constant) {
    t = v.constant->clone();
  } else {
    t = g.value(g.nodes[(size_t)v.producer].inputs[0]).constant->clone();
  }
  float* d = t.data<float>();
  for (int64_t j = 0; j < t.numel(); ++j) d[j] /= s[(size_t)j];
  if (v.constant) {
    v.constant = std::move(t);
    return v.name;
  }
  // Identity of a shared constant: the Identity reads a constant of its own (exporter.cpp makes
  // the file's Identity a Constant node with this value).
  const std::string name = v.name;
  const NodeId producer = v.producer;
  const ValueId src = g.nodes[(size_t)producer].inputs[0];
  const ValueId own = g.valueId(name + "_smoothquant");
  g.value(own).shape = g.value(src).shape;
  g.value(own).dtype = DType::Float;
  g.value(own).constant = std::move(t);
  g.nodes[(size_t)producer].inputs[0] = own;
  return name;
}
}  // namespace

Result<SmoothQuantResult> smoothQuant(const QuantSession& session, const CalibrationData& data,
                                      const SmoothQuantOptions& options, const ProgressFn& progress) {
  const Model& model = session.model();
  const Graph& g = model.graph;
  const QuantPlan& plan = session.plan();
  const Executor& exec = session.executor();
  SmoothQuantResult res;

  std::vector<Group> groups;
  std::set<NodeId> grouped, listed;
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    const bool ln = n.opType == "LayerNormalization" && n.domain.empty();
    if (!ln && n.opType != "Add") continue;
    Group grp;
    const std::string why = ln ? groupOf(g, plan, id, grp) : decomposedOf(g, plan, id, grp);
    if (why == "-") continue;
    if (!why.empty()) {
      if (n.outputs.empty() || n.outputs[0] == kNoValue) continue;
      for (NodeId c : g.value(n.outputs[0]).consumers)
        if ((g.nodes[(size_t)c].opType == "MatMul" || g.nodes[(size_t)c].opType == "Gemm") && isNodeQuantized(plan, c) &&
            listed.insert(c).second)
          res.skipped.push_back(g.nodes[(size_t)c].name + ": its input's " +
                                (ln ? "LayerNormalization '" : "scale and bias (Mul, Add '") + n.name +
                                (ln ? "': " : "'): ") + why);
      continue;
    }
    grp.xMax.assign((size_t)grp.K, 0.0);
    grp.rows.resize(std::max(1, options.maxRows), grp.K);
    for (const Consumer& c : grp.consumers) grouped.insert(c.node);
    groups.push_back(std::move(grp));
  }
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    if ((n.opType == "MatMul" || n.opType == "Gemm") && isNodeQuantized(plan, id) && !grouped.count(id) &&
        !listed.count(id) && n.inputs.size() > 1 && floatConstant(g, n.inputs[1])) {
      const ValueId x = n.inputs[0];
      const NodeId p = x == kNoValue ? -1 : g.value(x).producer;
      if (p < 0 || g.nodes[(size_t)p].opType != "LayerNormalization")
        res.skipped.push_back(n.name + ": its input is not a LayerNormalization's (or its scale and bias') output (no Mul is inserted)");
    }
  }

  const int64_t batches = std::min<int64_t>(data.batchCount(), std::max(1, options.maxBatches));
  for (int64_t b = 0; b < batches && !groups.empty(); ++b) {
    if (!keepGoing(session.cancelToken(), progress, 0.5 * (double)b / (double)batches, "smoothquant"))
      return Status(StatusCode::Cancelled, model.path + ": smoothquant cancelled");
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    auto values = exec.makeValueTable(*feeds);
    if (!values) return values.status();
    QS_RETURN_IF_ERROR(exec.runNodes(g.topoOrder, *values));
    for (Group& grp : groups) {
      const Tensor& x = (*values)[(size_t)g.nodes[(size_t)grp.ln].outputs[0]];
      if (x.dtype() != DType::Float || x.numel() % grp.K != 0)
        return runtimeError(model.path + ": node '" + g.nodes[(size_t)grp.ln].name + "': output does not have " +
                            std::to_string(grp.K) + " channels last");
      const int64_t rows = x.numel() / grp.K;
      const float* d = x.data<float>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < grp.K; ++j) grp.xMax[(size_t)j] = std::max(grp.xMax[(size_t)j], (double)std::fabs(d[r * grp.K + j]));
      // An even share of the kept rows per batch, spread over the batch's rows.
      const int64_t room = grp.rows.rows() - grp.kept;
      const int64_t take = std::min<int64_t>(rows, std::max<int64_t>(1, room / std::max<int64_t>(1, batches - b)));
      for (int64_t i = 0; i < take && grp.kept < grp.rows.rows(); ++i) {
        const int64_t r = i * rows / take;
        grp.rows.row(grp.kept++) = Eigen::Map<const RowMatrix>(d + r * grp.K, 1, grp.K);
      }
    }
  }

  auto copy = std::make_shared<Model>(model);
  Graph& cg = copy->graph;
  std::set<std::string> changed;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (!keepGoing(session.cancelToken(), progress, 0.5 + 0.5 * (double)gi / (double)groups.size(), "smoothquant"))
      return Status(StatusCode::Cancelled, model.path + ": smoothquant cancelled");
    Group& grp = groups[gi];
    if (grp.kept == 0) continue;
    std::vector<double> wMax((size_t)grp.K, 0.0);
    std::vector<RowMatrix> ref;
    for (const Consumer& c : grp.consumers) {
      const Tensor& w = *g.value(c.weight).constant;
      weightRowMax(w, c.nk, wMax);
      Eigen::Map<const RowMatrix> wm(w.data<float>(), w.dim(0), w.dim(1));
      const auto x = grp.rows.topRows(grp.kept);
      ref.push_back(c.nk ? RowMatrix(x * wm.transpose()) : RowMatrix(x * wm));
    }
    SmoothedGroup out;
    out.producer = grp.ln;
    out.channels = (int)grp.K;
    out.errorBefore = groupError(g, grp, std::vector<float>((size_t)grp.K, 1.f), plan.mode, ref);
    std::vector<double> alphas;
    if (std::isnan(options.alpha)) {
      for (int a = 0; a <= 10; ++a) alphas.push_back(a / 10.0);
    } else {
      alphas.push_back(options.alpha);
    }
    out.errorAfter = INFINITY;
    for (double a : alphas) {
      const double e = groupError(g, grp, scalesFor(grp, wMax, a), plan.mode, ref);
      if (e < out.errorAfter) {
        out.errorAfter = e;
        out.alpha = a;
      }
    }
    if (std::isnan(options.alpha) && !(out.errorAfter < out.errorBefore)) {
      res.skipped.push_back(g.nodes[(size_t)grp.ln].name + ": no alpha lowers its consumers' layer-wise error");
      continue;
    }
    const std::vector<float> s = scalesFor(grp, wMax, out.alpha);
    for (float v : s) out.maxLogScale = std::max(out.maxLogScale, std::fabs(std::log((double)v)));
    for (const auto& [node, slot] : grp.folds) changed.insert(divideOwn(cg, node, slot, s));
    for (const Consumer& c : grp.consumers) {
      Value& wv = cg.value(c.weight);
      wv.constant = scaledWeight(*wv.constant, c.nk, s);
      changed.insert(wv.name);
      out.consumers.push_back(c.node);
    }
    res.groups.push_back(std::move(out));
  }
  QS_RETURN_IF_ERROR(cg.finalize(model.path));
  res.changedInitializers.assign(changed.begin(), changed.end());
  res.model = std::move(copy);
  if (progress) progress(1.0, "smoothquant");
  return res;
}

}  // namespace qs
