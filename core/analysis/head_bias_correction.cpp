#include "core/analysis/head_bias_correction.h"

#include <algorithm>
#include <cmath>

#include "core/analysis/batch_schedule.h"
#include "core/analysis/node_paths.h"
#include "core/analysis/weight_clip.h"

namespace qs {

namespace {

// Whether value `b` is a float constant of one value per class, read by nothing but its node.
bool isClassBias(const Graph& g, ValueId b) {
  if (b == kNoValue) return false;
  const Value& v = g.value(b);
  if (!v.constant || v.constant->dtype() != DType::Float || v.isOverridable || v.consumers.size() != 1) return false;
  const Tensor& t = *v.constant;
  if (t.rank() < 1 || t.numel() < 2) return false;
  for (int i = 0; i + 1 < t.rank(); ++i)
    if (t.dim(i) != 1) return false;  // [C] or [1, ..., 1, C]: the classes on the logits' last axis
  return true;
}

}  // namespace

std::vector<HeadBias> headBiases(const QuantSession& session) {
  const Graph& g = session.model().graph;
  std::vector<HeadBias> out;
  for (NodeId id : outputHeads(session)) {
    const Node& n = g.nodes[(size_t)id];
    HeadBias h;
    h.head = id;
    if (n.opType == "Gemm" && n.inputs.size() > 2 && isClassBias(g, n.inputs[2])) {
      h.reader = id;
      h.input = 2;
    } else {
      // outputHeads() guarantees a chain of single readers; the bias Add, if any, comes first.
      const Value& y = g.value(n.outputs[0]);
      if (y.consumers.size() != 1) continue;
      const NodeId add = y.consumers[0];
      const Node& a = g.nodes[(size_t)add];
      if (a.opType != "Add" || !a.domain.empty() || a.inputs.size() != 2) continue;
      const size_t k = a.inputs[0] == n.outputs[0] ? 1 : 0;
      if (!isClassBias(g, a.inputs[k])) continue;
      h.reader = add;
      h.input = k;
    }
    const Node& r = g.nodes[(size_t)h.reader];
    h.bias = r.inputs[h.input];
    h.logits = r.outputs[0];
    h.classes = g.value(h.bias).constant->numel();
    out.push_back(h);
  }
  return out;
}

Result<std::vector<HeadBiasShift>> measureHeadBiasCorrection(const QuantSession& session, const CalibrationData& data,
                                                             const ProgressFn& progress) {
  const Model& model = session.model();
  const Graph& g = model.graph;
  const QuantPlan& plan = session.plan();
  const Executor& exec = session.executor();
  const std::vector<HeadBias> heads = headBiases(session);
  std::vector<HeadBiasShift> res;
  if (heads.empty()) return res;

  const size_t N = g.nodes.size();
  const NodePaths paths = plainPaths(N);  // FP32 kernels on fake-quantized tensors, as ONNX Runtime runs the export
  std::vector<char> enabled(N, 0);
  for (size_t i = 0; i < N; ++i) enabled[i] = isNodeQuantized(plan, (NodeId)i) ? 1 : 0;

  // Per head and class: the sums of d = float - quantized and of d^2, and the rows seen.
  std::vector<std::vector<double>> sum(heads.size()), sq(heads.size());
  std::vector<int64_t> rows(heads.size(), 0);
  for (size_t h = 0; h < heads.size(); ++h) {
    sum[h].assign((size_t)heads[h].classes, 0.0);
    sq[h].assign((size_t)heads[h].classes, 0.0);
  }
  const int64_t batches = data.batchCount();
  for (int64_t b = 0; b < batches; ++b) {
    if (!keepGoing(session.cancelToken(), progress, (double)b / (double)batches, "head bias correction"))
      return Status(StatusCode::Cancelled, model.path + ": head bias correction cancelled");
    auto feeds = data.batch(b);
    if (!feeds) return feeds.status();
    auto fv = exec.makeValueTable(*feeds);
    if (!fv) return fv.status();
    QS_RETURN_IF_ERROR(exec.runNodes(g.topoOrder, *fv));
    auto qv = exec.makeValueTable(*feeds);
    if (!qv) return qv.status();
    FakeQuantTransform fq(session.state(), paths, enabled);
    RunOptions ro;
    ro.inputTransform = &fq;
    QS_RETURN_IF_ERROR(exec.runNodes(g.topoOrder, *qv, ro));
    for (size_t h = 0; h < heads.size(); ++h) {
      const Tensor& f = (*fv)[(size_t)heads[h].logits];
      const Tensor& q = (*qv)[(size_t)heads[h].logits];
      const int64_t C = heads[h].classes;
      if (f.dtype() != DType::Float || q.dtype() != DType::Float || f.rank() < 1 || f.dim(f.rank() - 1) != C ||
          q.numel() != f.numel()) {
        return runtimeError(model.path + ": node '" + g.nodes[(size_t)heads[h].reader].name +
                            "': head bias correction expects its output's last axis to hold its bias's " +
                            std::to_string(C) + " classes");
      }
      const float* pf = f.data<float>();
      const float* pq = q.data<float>();
      const int64_t R = f.numel() / C;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
          const double d = (double)pf[r * C + c] - (double)pq[r * C + c];
          sum[h][(size_t)c] += d;
          sq[h][(size_t)c] += d * d;
        }
      rows[h] += R;
    }
  }
  for (size_t h = 0; h < heads.size(); ++h) {
    if (rows[h] == 0) continue;
    HeadBiasShift s;
    s.where = heads[h];
    const double n = (double)rows[h];
    double before = 0, after = 0;
    for (size_t c = 0; c < sum[h].size(); ++c) {
      const double m = sum[h][c] / n;
      s.shift.push_back((float)m);
      s.meanAbsShift += std::fabs(m);
      s.maxAbsShift = std::max(s.maxAbsShift, std::fabs(m));
      before += sq[h][c];
      after += std::max(0.0, sq[h][c] - n * m * m);
    }
    const double count = n * (double)sum[h].size();
    s.meanAbsShift /= (double)sum[h].size();
    s.errorBefore = before / count;
    s.errorAfter = after / count;
    res.push_back(std::move(s));
  }
  if (progress) progress(1.0, "head bias correction");
  return res;
}

Status applyHeadBiasShifts(QuantSession& session, const std::vector<HeadBiasShift>& shifts) {
  const Model& model = session.model();
  const Graph& g = model.graph;
  std::vector<ConstantCorrection> all = session.state().corrections;
  for (const HeadBiasShift& s : shifts) {
    const HeadBias& w = s.where;
    const bool ok = w.reader >= 0 && (size_t)w.reader < g.nodes.size() && w.head >= 0 &&
                    (size_t)w.head < g.nodes.size() && w.input < g.nodes[(size_t)w.reader].inputs.size() &&
                    g.nodes[(size_t)w.reader].inputs[w.input] != kNoValue &&
                    g.value(g.nodes[(size_t)w.reader].inputs[w.input]).constant &&
                    g.value(g.nodes[(size_t)w.reader].inputs[w.input]).constant->dtype() == DType::Float &&
                    g.value(g.nodes[(size_t)w.reader].inputs[w.input]).constant->numel() == (int64_t)s.shift.size();
    if (!ok) {
      const std::string name = w.reader >= 0 && (size_t)w.reader < g.nodes.size() ? g.nodes[(size_t)w.reader].name
                                                                                    : std::to_string(w.reader);
      return invalidArgument(model.path + ": head bias correction of node '" + name + "': " +
                             std::to_string(s.shift.size()) + " shifts do not fit its bias");
    }
    // Added to what the quantized model reads now: a --bias-correction of the same Gemm's C stays.
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const ConstantCorrection& c) { return c.reader == w.reader && c.input == w.input; });
    Tensor value = it != all.end() ? it->value.clone() : g.value(g.nodes[(size_t)w.reader].inputs[w.input]).constant->clone();
    float* p = value.data<float>();
    for (size_t c = 0; c < s.shift.size(); ++c) p[c] += s.shift[c];
    if (it != all.end()) {
      it->value = std::move(value);
    } else {
      all.push_back(ConstantCorrection{w.head, w.reader, w.input, std::move(value), Tensor()});
    }
  }
  return session.setConstantCorrections(std::move(all));
}

Result<std::vector<HeadBiasShift>> applyHeadBiasCorrection(QuantSession& session, const CalibrationData& data,
                                                           const ProgressFn& progress) {
  auto shifts = measureHeadBiasCorrection(session, data, progress);
  if (!shifts) return shifts.status();
  if (!shifts->empty()) QS_RETURN_IF_ERROR(applyHeadBiasShifts(session, *shifts));
  return shifts;
}

}  // namespace qs
