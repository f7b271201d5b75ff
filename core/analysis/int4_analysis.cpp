#include "core/analysis/int4_analysis.h"

#include <Eigen/Core>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <map>
#include <random>
#include <regex>

#include "core/exec/executor.h"
#include "core/exec/model_info.h"

namespace qs {

namespace {

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;

// A candidate weight, before quantization.
struct Candidate {
  NodeId node;
  ValueId weight, activation;
  bool transposed;
  int64_t k, n;
  std::vector<float> w; // [K, N] row-major
};

bool matchesAny(const std::vector<std::regex> &res, const std::string &name) {
  for (const std::regex &re : res)
    if (std::regex_search(name, re, std::regex_constants::match_continuous))
      return true;
  return false;
}

Result<std::vector<std::regex>>
compilePatterns(const std::vector<std::string> &patterns,
                const std::string &option) {
  std::vector<std::regex> out;
  for (const std::string &p : patterns) {
    try {
      out.emplace_back(p, std::regex::ECMAScript);
    } catch (const std::regex_error &e) {
      return invalidArgument(option + " '" + p +
                             "': not a valid regular expression (" + e.what() +
                             ")");
    }
  }
  return out;
}

// Why node `n` is left in float by the configuration ("" when it is quantized).
struct ConfigFilter {
  std::vector<std::regex> exclude, quantize;
  const QuantConfig *cfg = nullptr;
  std::string reason(const Node &n) const {
    if (matchesAny(exclude, n.name))
      return "excluded by --nodes-to-exclude";
    if (std::find(cfg->opTypesToExclude.begin(), cfg->opTypesToExclude.end(),
                  n.opType) != cfg->opTypesToExclude.end())
      return "op type " + n.opType + " excluded by --op-types-to-exclude";
    if (!cfg->nodesToQuantize.empty() && !matchesAny(quantize, n.name))
      return "not matched by --nodes-to-quantize";
    if (!cfg->opTypesToQuantize.empty() &&
        std::find(cfg->opTypesToQuantize.begin(), cfg->opTypesToQuantize.end(),
                  n.opType) == cfg->opTypesToQuantize.end())
      return "op type " + n.opType + " not in --op-types-to-quantize";
    return "";
  }
};

Result<std::vector<Candidate>> findCandidates(const Model &model,
                                              const Int4Options &options,
                                              Int4Result &result) {
  const Graph &g = model.graph;
  auto ex =
      compilePatterns(options.config.nodesToExclude, "--nodes-to-exclude");
  if (!ex)
    return ex.status();
  auto qu =
      compilePatterns(options.config.nodesToQuantize, "--nodes-to-quantize");
  if (!qu)
    return qu.status();
  ConfigFilter filter{std::move(ex).value(), std::move(qu).value(),
                      &options.config};
  std::vector<Candidate> out;
  for (NodeId id : g.topoOrder) {
    const Node &n = g.nodes[(size_t)id];
    if (!n.domain.empty() || (n.opType != "MatMul" && n.opType != "Gemm") ||
        n.inputs.size() < 2)
      continue;
    const ValueId b = n.inputs[1], a = n.inputs[0];
    if (b == kNoValue || a == kNoValue)
      continue;
    const Value &vb = g.value(b);
    if (!vb.constant || vb.constant->dtype() != DType::Float ||
        vb.constant->rank() != 2)
      continue;
    if (g.value(a).constant)
      continue;
    const std::string label = "'" + n.name + "' (" + n.opType + ")";
    bool transposed = false;
    if (n.opType == "Gemm") {
      const Attribute *ta = n.attr("transA");
      if (ta && ta->i != 0) {
        result.skipped.push_back(label + ": transA=1");
        continue;
      }
      const Attribute *tb = n.attr("transB");
      transposed = tb && tb->i != 0;
    }
    if (std::string why = filter.reason(n); !why.empty()) {
      result.skipped.push_back(label + ": " + why);
      continue;
    }
    if (vb.consumers.size() != 1 || vb.isGraphOutput) {
      result.skipped.push_back(label + ": its weight '" + vb.name +
                               "' is shared");
      continue;
    }
    const Tensor &t = *vb.constant;
    Candidate c{id,
                b,
                a,
                transposed,
                transposed ? t.dim(1) : t.dim(0),
                transposed ? t.dim(0) : t.dim(1),
                {}};
    if (c.k % 2 != 0) {
      return invalidArgument(
          model.path + ": node " + label + ": weight '" + vb.name +
          "' has an odd reduction dim K=" + std::to_string(c.k) +
          ": INT4 packs two values per byte along K");
    }
    c.w.resize((size_t)(c.k * c.n));
    const float *src = t.data<float>();
    for (int64_t i = 0; i < c.k; ++i)
      for (int64_t j = 0; j < c.n; ++j)
        c.w[(size_t)(i * c.n + j)] =
            transposed ? src[j * c.k + i] : src[i * c.n + j];
    out.push_back(std::move(c));
  }
  return out;
}

// Keeps up to a number of rows (tokens) of each observed activation, strided
// over each batch.
class TokenCollector final : public ExecutionObserver {
public:
  TokenCollector(const std::map<ValueId, int64_t> &widths, int64_t perBatch)
      : m_perBatch(perBatch) {
    for (const auto &[v, k] : widths)
      m_slots[v] = Slot{k, {}};
  }
  void onGraphInput(ValueId id, const Tensor &value) override {
    take(id, value);
  }
  void onNodeOutput(NodeId, size_t, ValueId id, const Tensor &value) override {
    take(id, value);
  }
  std::vector<float> &rows(ValueId v) { return m_slots[v].rows; }

private:
  struct Slot {
    int64_t k;
    std::vector<float> rows;
  };
  void take(ValueId id, const Tensor &value) {
    auto it = m_slots.find(id);
    if (it == m_slots.end() || value.dtype() != DType::Float)
      return;
    Slot &s = it->second;
    const int64_t total = value.numel() / s.k;
    const int64_t stride =
        std::max<int64_t>(1, total / std::max<int64_t>(1, m_perBatch));
    const float *src = value.data<float>();
    for (int64_t r = 0, kept = 0; r < total && kept < m_perBatch;
         r += stride, ++kept)
      s.rows.insert(s.rows.end(), src + r * s.k, src + (r + 1) * s.k);
  }
  std::map<ValueId, Slot> m_slots;
  int64_t m_perBatch;
};

// Keeps the first output of the observed nodes.
class OutputCollector final : public ExecutionObserver {
public:
  explicit OutputCollector(const std::vector<NodeId> &nodes) {
    for (size_t i = 0; i < nodes.size(); ++i)
      m_index[nodes[i]] = i;
    m_values.resize(nodes.size());
  }
  void onNodeOutput(NodeId node, size_t outputIndex, ValueId,
                    const Tensor &value) override {
    if (outputIndex != 0)
      return;
    auto it = m_index.find(node);
    if (it != m_index.end())
      m_values[it->second] = value;
  }
  std::vector<Tensor> m_values;

private:
  std::map<NodeId, size_t> m_index;
};

double meanSquaredDiff(const RowMatrix &a, const RowMatrix &b) {
  return a.size() ? (double)(a - b).squaredNorm() / (double)a.size() : 0.0;
}

RowMatrix dequantized(const Int4Weight &q) {
  RowMatrix m(q.k, q.n);
  dequantizeInt4(q, m.data());
  return m;
}

// awq_lite for the layers `members` sharing the activation tokens `x` [T, K].
void awqLiteSearch(const RowMatrix &x, std::vector<Candidate *> members,
                   std::vector<Int4Layer *> layers, int64_t block) {
  const int64_t k = x.cols();
  std::vector<float> xm((size_t)k, 0.0f), wm((size_t)k, 0.0f);
  for (int64_t j = 0; j < k; ++j)
    xm[(size_t)j] = x.col(j).cwiseAbs().mean();
  int64_t columns = 0;
  for (const Candidate *c : members) {
    const int64_t nb = (c->k + block - 1) / block;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * block, k1 = std::min(c->k, k0 + block);
      for (int64_t j = 0; j < c->n; ++j) {
        float amax = 0;
        for (int64_t i = k0; i < k1; ++i)
          amax = std::max(amax, std::fabs(c->w[(size_t)(i * c->n + j)]));
        for (int64_t i = k0; i < k1; ++i)
          wm[(size_t)i] +=
              std::fabs(c->w[(size_t)(i * c->n + j)]) / (amax + FLT_MIN);
      }
    }
    columns += c->n;
  }
  for (float &v : wm)
    v /= (float)std::max<int64_t>(1, columns);

  std::vector<RowMatrix> reference;
  for (const Candidate *c : members)
    reference.push_back(x * ConstMap(c->w.data(), c->k, c->n));

  double bestLoss = INFINITY, bestAlpha = NAN;
  std::vector<float> bestInv;
  // Each member's loss with s = 1 (plain RTN) and with the best s: a member
  // whose own error the shared s does not reduce keeps RTN on the unscaled
  // activation (the per-layer guard; the sum over the siblings can hide it).
  std::vector<double> rtnLoss(members.size()), bestMemberLoss(members.size());
  // alpha < 0: s = 1 (no scaling), then ModelOpt's grid 0, 0.1, ..., 1.
  for (int step = -1; step <= 10; ++step) {
    const double alpha = step < 0 ? -1.0 : step / 10.0;
    std::vector<float> s((size_t)k, 1.0f);
    if (step >= 0) {
      float smax = 0, smin = INFINITY;
      for (int64_t j = 0; j < k; ++j) {
        float v = std::pow(xm[(size_t)j], (float)alpha) /
                  (std::pow(wm[(size_t)j], (float)(1.0 - alpha)) + FLT_MIN);
        if (!std::isfinite(v))
          v = 1.0f;
        v = std::clamp(v, 1e-4f, 1e4f);
        s[(size_t)j] = v;
        smax = std::max(smax, v);
        smin = std::min(smin, v);
      }
      const float norm = std::sqrt(smax * smin);
      for (float &v : s)
        v /= norm;
    }
    std::vector<float> inv((size_t)k);
    for (int64_t j = 0; j < k; ++j)
      inv[(size_t)j] = 1.0f / s[(size_t)j];
    RowMatrix xs = x;
    for (int64_t j = 0; j < k; ++j)
      xs.col(j) *= inv[(size_t)j];
    double loss = 0;
    std::vector<double> memberLoss(members.size());
    for (size_t m = 0; m < members.size(); ++m) {
      const Candidate *c = members[m];
      std::vector<float> ws(c->w);
      for (int64_t i = 0; i < c->k; ++i)
        for (int64_t j = 0; j < c->n; ++j)
          ws[(size_t)(i * c->n + j)] *= s[(size_t)i];
      const Int4Weight q = quantizeInt4(ws.data(), c->k, c->n, block);
      memberLoss[m] = meanSquaredDiff(reference[m], xs * dequantized(q));
      loss += memberLoss[m];
    }
    if (step < 0)
      rtnLoss = memberLoss;
    if (loss < bestLoss) {
      bestLoss = loss;
      bestAlpha = alpha;
      bestInv = step < 0 ? std::vector<float>{} : inv;
      bestMemberLoss = memberLoss;
    }
  }
  bool owned = false;
  for (size_t m = 0; m < members.size(); ++m) {
    const Candidate *c = members[m];
    Int4Layer &l = *layers[m];
    const bool scaled = !bestInv.empty() && bestMemberLoss[m] < rtnLoss[m];
    l.awqAlpha = scaled ? bestAlpha : NAN;
    l.activationScale = scaled ? bestInv : std::vector<float>{};
    l.ownsActivationScale = scaled && !owned;
    owned |= scaled;
    std::vector<float> ws(c->w);
    if (scaled) {
      for (int64_t i = 0; i < c->k; ++i)
        for (int64_t j = 0; j < c->n; ++j)
          ws[(size_t)(i * c->n + j)] /= bestInv[(size_t)i];
    }
    l.weight = quantizeInt4(ws.data(), c->k, c->n, block);
  }
}

// ModelOpt's awq_clip: per (block, column), the clip ratio minimising the
// block's partial output error.
void awqClipSearch(const RowMatrix &xAll, const Candidate &c, int64_t block,
                   int64_t tokens, Int4Layer &layer) {
  const int64_t stride =
      std::max<int64_t>(1, xAll.rows() / std::max<int64_t>(1, tokens));
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < xAll.rows() && (int64_t)rows.size() < tokens;
       r += stride)
    rows.push_back(r);
  RowMatrix x((int64_t)rows.size(), xAll.cols());
  for (size_t i = 0; i < rows.size(); ++i)
    x.row((int64_t)i) = xAll.row(rows[i]);
  const int64_t nb = (c.k + block - 1) / block;
  std::vector<float> clip((size_t)(nb * c.n), 1.0f),
      best((size_t)(nb * c.n), INFINITY);
  std::vector<float> ratios;
  for (int i = 0; i < 10; ++i)
    ratios.push_back(0.5f + 0.05f * (float)i);
  ratios.push_back(1.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t k0 = b * block, len = std::min(c.k, k0 + block) - k0;
    ConstMap wb(c.w.data() + k0 * c.n, len, c.n);
    const RowMatrix xb = x.middleCols(k0, len);
    const RowMatrix org = xb * wb;
    std::vector<float> uniform((size_t)c.n);
    for (float r : ratios) {
      std::fill(uniform.begin(), uniform.end(), r);
      const Int4Weight q =
          quantizeInt4(c.w.data() + k0 * c.n, len, c.n, len, uniform.data());
      const RowMatrix diff = org - xb * dequantized(q);
      for (int64_t j = 0; j < c.n; ++j) {
        const float loss = diff.col(j).squaredNorm();
        float &bl = best[(size_t)(b * c.n + j)];
        if (loss < bl) {
          bl = loss;
          clip[(size_t)(b * c.n + j)] = r;
        }
      }
    }
  }
  layer.weight = quantizeInt4(c.w.data(), c.k, c.n, block, clip.data());
  double sum = 0;
  for (float v : clip)
    sum += v;
  layer.meanClip = clip.empty() ? 1.0 : sum / (double)clip.size();
}

bool isLogits(const Graph &g, const std::string &name, const Tensor &t) {
  if (t.rank() < 3 || t.dtype() != DType::Float)
    return false;
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return (char)std::tolower(ch); });
  if (lower.find("logit") != std::string::npos)
    return true;
  for (ValueId in : g.inputs) {
    const int64_t rows = lookupTableRows(g, in);
    if (rows > 1 && rows == t.dim(t.rank() - 1))
      return true;
  }
  return false;
}

// Argmax over the last axis, equal positions counted.
void countTop1(const Tensor &ref, const Tensor &cand, int64_t &equal,
               int64_t &total) {
  const int64_t v = ref.dim(ref.rank() - 1), rows = ref.numel() / v;
  const float *a = ref.data<float>();
  const float *b = cand.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ia =
        std::max_element(a + r * v, a + (r + 1) * v) - (a + r * v);
    const int64_t ib =
        std::max_element(b + r * v, b + (r + 1) * v) - (b + r * v);
    equal += ia == ib;
    ++total;
  }
}

// The simulated model of `r` against the float model `fp` over every batch:
// each layer's output error (graph-wise) and each graph output's error and
// top-1 agreement. Progress from f0 to f1.
struct Int4Evaluation {
  std::vector<ErrorMetrics> layers;
  std::vector<Int4OutputResult> outputs;
};

Result<Int4Evaluation>
evaluateInt4(const std::shared_ptr<const Model> &model, const Executor &fp,
             const CalibrationData &data, const Int4Result &r,
             const ExecutorOptions &eo,
             const std::function<Status(double, const std::string &)> &stop,
             double f0, double f1) {
  const Graph &g = model->graph;
  auto sim = int4SimulatedModel(*model, r);
  if (!sim)
    return sim.status();
  auto qex = Executor::create(
      std::shared_ptr<const Model>(std::move(sim).value()), eo);
  if (!qex)
    return qex.status();
  std::vector<NodeId> nodes;
  for (const Int4Layer &l : r.layers)
    nodes.push_back(l.node);
  std::vector<ErrorAccumulator> layerAcc(nodes.size()),
      outAcc(g.outputs.size());
  std::vector<int64_t> top1Equal(g.outputs.size(), 0),
      top1Total(g.outputs.size(), 0);
  std::vector<char> logits(g.outputs.size(), 0);
  const int64_t batches = data.batchCount();
  for (int64_t b = 0; b < batches; ++b) {
    QS_RETURN_IF_ERROR(
        stop(f0 + (f1 - f0) * (double)b / (double)batches, "int4: analysing"));
    auto feeds = int4CalibrationBatch(*model, data, b);
    if (!feeds)
      return feeds.status();
    OutputCollector fo(nodes), qo(nodes);
    RunOptions ro;
    ro.observer = &fo;
    auto ref = fp.run(*feeds, ro);
    if (!ref)
      return ref.status();
    ro.observer = &qo;
    auto cand = (*qex)->run(*feeds, ro);
    if (!cand)
      return cand.status();
    for (size_t i = 0; i < nodes.size(); ++i)
      if (!fo.m_values[i].empty() && !qo.m_values[i].empty())
        layerAcc[i].add(fo.m_values[i], qo.m_values[i]);
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      const Tensor &rt = (*ref)[o];
      const Tensor &ct = (*cand)[o];
      outAcc[o].add(rt, ct);
      if (b == 0)
        logits[o] = isLogits(g, g.value(g.outputs[o]).name, rt);
      if (logits[o])
        countTop1(rt, ct, top1Equal[o], top1Total[o]);
    }
  }
  Int4Evaluation e;
  for (size_t i = 0; i < nodes.size(); ++i)
    e.layers.push_back(layerAcc[i].metrics());
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    Int4OutputResult out;
    out.name = g.value(g.outputs[o]).name;
    out.metrics = outAcc[o].metrics();
    if (logits[o] && top1Total[o] > 0)
      out.top1Agreement = (double)top1Equal[o] / (double)top1Total[o];
    e.outputs.push_back(std::move(out));
  }
  return e;
}

} // namespace

Result<std::vector<NamedTensor>>
int4CalibrationBatch(const Model &model, const CalibrationData &data,
                     int64_t index) {
  auto feeds = data.batch(index);
  if (!feeds || !data.isRandom())
    return feeds;
  const Graph &g = model.graph;
  for (size_t k = 0; k < feeds->size(); ++k) {
    NamedTensor &f = (*feeds)[k];
    Tensor &t = f.tensor;
    if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32)
      continue;
    const ValueId id = g.findValue(f.name);
    const int64_t rows = id == kNoValue ? -1 : lookupTableRows(g, id);
    std::mt19937_64 rng(0x9e3779b97f4a7c15ull * (uint64_t)(index + 1) +
                        0xbf58476d1ce4e5b9ull * (uint64_t)(k + 1));
    for (int64_t i = 0; i < t.numel(); ++i) {
      const int64_t x = rows > 0 ? (int64_t)(rng() % (uint64_t)rows) : 1;
      if (t.dtype() == DType::Int64)
        t.data<int64_t>()[i] = x;
      else
        t.data<int32_t>()[i] = (int32_t)x;
    }
  }
  return feeds;
}

Result<std::shared_ptr<Model>> int4SimulatedModel(const Model &model,
                                                  const Int4Result &result) {
  auto sim = std::make_shared<Model>(model);
  Graph &g = sim->graph;
  std::map<std::string, ValueId> scaled; // activation name -> the Mul's output
  for (const Int4Layer &l : result.layers) {
    const ValueId w = g.findValue(l.weightName);
    if (w == kNoValue || !g.value(w).constant)
      return invalidModel(model.path + ": weight '" + l.weightName +
                          "' not found");
    std::vector<float> dq((size_t)(l.weight.k * l.weight.n));
    dequantizeInt4(l.weight, dq.data());
    Tensor t(DType::Float, g.value(w).constant->shape());
    float *dst = t.data<float>();
    for (int64_t i = 0; i < l.weight.k; ++i)
      for (int64_t j = 0; j < l.weight.n; ++j)
        (l.transposed ? dst[j * l.weight.k + i] : dst[i * l.weight.n + j]) =
            dq[(size_t)(i * l.weight.n + j)];
    g.value(w).constant = std::move(t);
    if (l.activationScale.empty())
      continue;
    auto it = scaled.find(l.activationName);
    if (it == scaled.end()) {
      const ValueId a = g.findValue(l.activationName);
      const std::string base = l.activationName + "_awq";
      const ValueId s = g.valueId(base + "_scale");
      g.value(s).dtype = DType::Float;
      g.value(s).shape =
          std::vector<Dim>{Dim{(int64_t)l.activationScale.size(), ""}};
      g.value(s).constant = Tensor::fromVector(
          l.activationScale, Shape{(int64_t)l.activationScale.size()});
      const ValueId o = g.valueId(base + "_scaled");
      g.value(o).dtype = DType::Float;
      g.value(o).shape = g.value(a).shape;
      Node mul;
      mul.name = base + "_Mul";
      mul.opType = "Mul";
      mul.inputs = {a, s};
      mul.outputs = {o};
      g.nodes.push_back(std::move(mul));
      it = scaled.emplace(l.activationName, o).first;
    }
    g.nodes[(size_t)l.node].inputs[0] = it->second;
  }
  QS_RETURN_IF_ERROR(g.finalize(model.path + " (int4 simulation)"));
  return sim;
}

Result<Int4Result> runInt4Analysis(std::shared_ptr<const Model> model,
                                   const CalibrationData &data,
                                   const Int4Options &options,
                                   const ProgressFn &progress,
                                   const CancelToken *cancel) {
  QS_RETURN_IF_ERROR(checkInt4BlockSize(options.blockSize));
  const Graph &g = model->graph;
  Int4Result result;
  result.method = options.method;
  result.blockSize = options.blockSize;
  result.samples = data.sampleCount();
  result.randomData = data.isRandom();
  auto candidates = findCandidates(*model, options, result);
  if (!candidates)
    return candidates.status();
  if (candidates->empty()) {
    return invalidArgument(model->path +
                           ": no MatMul or Gemm with a constant 2-D float "
                           "weight to quantize to INT4");
  }
  auto stop = [&](double f, const std::string &stage) -> Status {
    if ((cancel && cancel->cancelled()) || (progress && !progress(f, stage)))
      return {StatusCode::Cancelled, "cancelled"};
    return Status::ok();
  };

  ExecutorOptions eo;
  eo.threads = options.threads;
  auto fp = Executor::create(model, eo);
  if (!fp)
    return fp.status();

  // 1. Calibration tokens of every quantized weight's activation.
  std::map<ValueId, int64_t> widths;
  for (const Candidate &c : *candidates)
    widths[c.activation] = c.k;
  const int64_t batches = data.batchCount();
  TokenCollector tokens(widths, (options.maxTokens + batches - 1) / batches);
  for (int64_t b = 0; b < batches; ++b) {
    QS_RETURN_IF_ERROR(stop(0.3 * (double)b / (double)batches,
                            "int4: collecting activations"));
    auto feeds = int4CalibrationBatch(*model, data, b);
    if (!feeds)
      return feeds.status();
    RunOptions ro;
    ro.observer = &tokens;
    auto out = (*fp)->run(*feeds, ro);
    if (!out)
      return out.status();
  }

  // 2. The method's search, then the quantized weights.
  result.layers.resize(candidates->size());
  std::map<ValueId, std::vector<size_t>> byActivation;
  for (size_t i = 0; i < candidates->size(); ++i) {
    const Candidate &c = (*candidates)[i];
    Int4Layer &l = result.layers[i];
    l.node = c.node;
    l.nodeName = g.nodes[(size_t)c.node].name;
    l.opType = g.nodes[(size_t)c.node].opType;
    l.weightName = g.value(c.weight).name;
    l.activationName = g.value(c.activation).name;
    l.transposed = c.transposed;
    byActivation[c.activation].push_back(i);
  }
  size_t done = 0;
  std::map<ValueId, RowMatrix> xs; // the tokens, kept for the measures below
  std::vector<Int4Weight> rtn(result.layers.size()); // awq_lite's guard
  for (const auto &[act, members] : byActivation) {
    QS_RETURN_IF_ERROR(
        stop(0.3 + 0.3 * (double)done / (double)candidates->size(),
             "int4: " + int4MethodName(options.method)));
    std::vector<float> &rows = tokens.rows(act);
    const int64_t k = widths[act];
    const RowMatrix &x = xs[act] =
        ConstMap(rows.data(), (int64_t)rows.size() / k, k);
    rows.clear();
    rows.shrink_to_fit();
    if (options.method == Int4Method::AwqLite) {
      std::vector<Candidate *> cs;
      std::vector<Int4Layer *> ls;
      for (size_t i : members) {
        cs.push_back(&(*candidates)[i]);
        ls.push_back(&result.layers[i]);
      }
      awqLiteSearch(x, cs, ls, options.blockSize);
    }
    for (size_t i : members) {
      const Candidate &c = (*candidates)[i];
      Int4Layer &l = result.layers[i];
      if (options.method != Int4Method::AwqClip)
        rtn[i] = quantizeInt4(c.w.data(), c.k, c.n, options.blockSize);
      if (options.method == Int4Method::RtnDq)
        l.weight = rtn[i];
      if (options.method == Int4Method::AwqClip)
        awqClipSearch(x, c, options.blockSize, options.clipTokens, l);
      ++done;
    }
  }

  // 3. Graph-wise and output error: the simulated model against the float one.
  auto eval = evaluateInt4(model, **fp, data, result, eo, stop, 0.6, 0.8);
  if (!eval)
    return eval.status();
  if (options.method == Int4Method::AwqLite) {
    // The graph-wise guard: the tokens of the search are the float model's,
    // but the layer sees the upstream layers' error (and, for a layer fed by
    // few tokens, such as a pooler on the CLS token, the search fits them
    // too closely). A layer whose graph-wise error with its AWQ scale is not
    // below its error in the all-RTN model gets RTN on the unscaled
    // activation; then the model is measured again.
    Int4Result plain = result;
    for (size_t i = 0; i < plain.layers.size(); ++i) {
      plain.layers[i].weight = rtn[i];
      plain.layers[i].activationScale.clear();
    }
    auto base = evaluateInt4(model, **fp, data, plain, eo, stop, 0.8, 0.9);
    if (!base)
      return base.status();
    bool reverted = false;
    std::map<std::string, bool> owned;
    for (size_t i = 0; i < result.layers.size(); ++i) {
      Int4Layer &l = result.layers[i];
      if (l.activationScale.empty())
        continue;
      if (!(eval->layers[i].mse < base->layers[i].mse)) {
        l.weight = rtn[i];
        l.activationScale.clear();
        l.awqAlpha = NAN;
        reverted = true;
      }
      l.ownsActivationScale =
          !l.activationScale.empty() && !owned[l.activationName];
      owned[l.activationName] |= !l.activationScale.empty();
    }
    if (reverted) {
      eval = evaluateInt4(model, **fp, data, result, eo, stop, 0.9, 0.95);
      if (!eval)
        return eval.status();
    }
    // The output guard: while a graph output's error is above the all-RTN
    // model's on this data, the scaled activation nearest the outputs (last
    // in topological order) goes back to RTN, so awq_lite is never worse than
    // rtn_dq on any output of the data it was calibrated on.
    auto worse = [&](const Int4Evaluation &e) {
      for (size_t o = 0; o < e.outputs.size(); ++o)
        if (e.outputs[o].metrics.mse > base->outputs[o].metrics.mse)
          return true;
      return false;
    };
    std::vector<std::string> order; // scaled activations, topological
    for (const Int4Layer &l : result.layers)
      if (!l.activationScale.empty() &&
          std::find(order.begin(), order.end(), l.activationName) ==
              order.end())
        order.push_back(l.activationName);
    while (worse(*eval) && !order.empty()) {
      for (size_t i = 0; i < result.layers.size(); ++i) {
        Int4Layer &l = result.layers[i];
        if (l.activationName != order.back() || l.activationScale.empty())
          continue;
        l.weight = rtn[i];
        l.activationScale.clear();
        l.awqAlpha = NAN;
        l.ownsActivationScale = false;
      }
      order.pop_back();
      eval = evaluateInt4(model, **fp, data, result, eo, stop, 0.95, 1.0);
      if (!eval)
        return eval.status();
    }
  }
  for (size_t i = 0; i < result.layers.size(); ++i) {
    const Candidate &c = (*candidates)[i];
    Int4Layer &l = result.layers[i];
    l.graphwise = eval->layers[i];
    // Layer-wise: the layer's output with its exact input.
    const RowMatrix &x = xs[c.activation];
    RowMatrix xscaled = x;
    for (int64_t j = 0; j < c.k && !l.activationScale.empty(); ++j)
      xscaled.col(j) *= l.activationScale[(size_t)j];
    const RowMatrix ref = x * ConstMap(c.w.data(), c.k, c.n);
    const RowMatrix cand = xscaled * dequantized(l.weight);
    ErrorAccumulator acc;
    acc.add(ref.data(), cand.data(), ref.size());
    l.layerwise = acc.metrics();
    l.bytesBefore = (uint64_t)(c.k * c.n) * 4;
    l.bytesAfter =
        (uint64_t)(c.k * c.n + 1) / 2 + (uint64_t)l.weight.scale.size() * 4 +
        (l.ownsActivationScale ? (uint64_t)l.activationScale.size() * 4 : 0);
    result.bytesBefore += l.bytesBefore;
    result.bytesAfter += l.bytesAfter;
  }
  result.outputs = std::move(eval->outputs);
  QS_RETURN_IF_ERROR(stop(1.0, "int4: done"));
  return result;
}

} // namespace qs
