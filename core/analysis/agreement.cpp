#include "core/analysis/agreement.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace qs {

const char* outputKindName(OutputKind k) {
  switch (k) {
    case OutputKind::Auto: return "auto";
    case OutputKind::Dense: return "dense";
    case OutputKind::Classes: return "classes";
    case OutputKind::Sequence: return "sequence";
  }
  return "auto";
}

bool parseOutputKind(const std::string& name, OutputKind& out) {
  for (OutputKind k : {OutputKind::Auto, OutputKind::Dense, OutputKind::Classes, OutputKind::Sequence}) {
    if (name == outputKindName(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

namespace {

bool isConstant(const Graph& g, ValueId v) { return v != kNoValue && g.value(v).constant.has_value(); }

// The node that computes `value`'s scores, seen through ops that only move or reshape them.
const Node* scoreProducer(const Graph& g, ValueId value) {
  static const char* const kShapeOnly[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
  for (int hops = 0; hops < 8 && value != kNoValue; ++hops) {
    const NodeId p = g.value(value).producer;
    if (p < 0) return nullptr;
    const Node& n = g.nodes[(size_t)p];
    const bool shapeOnly =
        std::any_of(std::begin(kShapeOnly), std::end(kShapeOnly), [&](const char* op) { return n.opType == op; });
    if (!shapeOnly || n.inputs.empty()) return &n;
    value = n.inputs[0];
  }
  return nullptr;
}

// A linear head: Gemm, MatMul, or a MatMul/Gemm plus a constant bias.
bool isLinearHead(const Graph& g, const Node& n) {
  if (n.opType == "Gemm" || n.opType == "MatMul") return true;
  if (n.opType != "Add" || n.inputs.size() != 2) return false;
  for (int side = 0; side < 2; ++side) {
    const ValueId in = n.inputs[(size_t)side], other = n.inputs[(size_t)(1 - side)];
    if (!isConstant(g, other) || in == kNoValue) continue;
    const NodeId p = g.value(in).producer;
    if (p >= 0 && (g.nodes[(size_t)p].opType == "MatMul" || g.nodes[(size_t)p].opType == "Gemm")) return true;
  }
  return false;
}

bool overLastAxis(const Node& n, int rank) {
  const Attribute* a = n.attr("axis");
  if (!a) return true;  // -1 since opset 13; before it 1, the last axis of the [N, C] it was used on
  return a->i == -1 || a->i == rank - 1;
}

// Index of the first maximum of a row (numpy's argmax); NaNs are never the maximum.
int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best] || (std::isnan(row[best]) && !std::isnan(row[i]))) best = i;
  return best;
}

// Whether class `c` is among the `k` largest of the row (ties count in its favour).
bool inTopK(const float* row, int64_t n, int64_t c, int64_t k) {
  int64_t greater = 0;
  const float v = row[c];
  for (int64_t i = 0; i < n && greater < k; ++i) greater += row[i] > v;
  return greater < k;
}

}  // namespace

OutputKind outputKind(const Graph& g, ValueId value, const Tensor& t, OutputKind requested) {
  if (t.dtype() != DType::Float || t.rank() < 1 || t.dim(t.rank() - 1) < 2) return OutputKind::Dense;
  if (requested == OutputKind::Sequence) return t.rank() == 3 ? OutputKind::Sequence : OutputKind::Dense;
  if (requested != OutputKind::Auto) return requested;
  if (t.rank() < 2) return OutputKind::Dense;  // a single row of scores has no batch axis: a vector
  const Node* p = scoreProducer(g, value);
  if (!p) return OutputKind::Dense;
  if ((p->opType == "Softmax" || p->opType == "LogSoftmax") && overLastAxis(*p, t.rank()))
    return t.rank() == 3 ? OutputKind::Sequence : OutputKind::Classes;
  return isLinearHead(g, *p) ? OutputKind::Classes : OutputKind::Dense;
}

double AgreementMetrics::primary() const {
  if (kind == OutputKind::Sequence) return sequenceAgreement;
  if (kind == OutputKind::Classes) return top1;
  return NAN;
}

std::string describeAgreement(const AgreementMetrics& m) {
  if (m.kind == OutputKind::Dense || m.positions == 0) return "";
  char buf[160];
  if (m.kind == OutputKind::Sequence) {
    std::snprintf(buf, sizeof buf, "%lld/%lld sequences decoded alike, CER %.1f%%, top-1 %.1f%% of %lld steps",
                  (long long)std::llround(m.sequenceAgreement * (double)m.sequences), (long long)m.sequences,
                  100 * m.charErrorRate, 100 * m.top1, (long long)m.positions);
  } else {
    std::snprintf(buf, sizeof buf, "top-1 %.1f%%, top-5 %.1f%% of %lld rows", 100 * m.top1, 100 * m.top5,
                  (long long)m.positions);
  }
  return buf;
}

std::vector<int32_t> ctcGreedyDecode(const float* scores, int64_t steps, int64_t classes, int32_t blank) {
  std::vector<int32_t> out;
  int32_t previous = -1;
  for (int64_t s = 0; s < steps; ++s) {
    const int32_t c = (int32_t)argmax(scores + s * classes, classes);
    if (c != previous && c != blank) out.push_back(c);
    previous = c;
  }
  return out;
}

int64_t editDistance(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int64_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = (int64_t)j;
  for (size_t i = 1; i <= a.size(); ++i) {
    int64_t diagonal = row[0];
    row[0] = (int64_t)i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const int64_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

void AgreementAccumulator::add(const Tensor& reference, const Tensor& candidate, OutputKind kind) {
  if (kind != OutputKind::Classes && kind != OutputKind::Sequence) return;
  if (reference.dtype() != DType::Float || candidate.dtype() != DType::Float) return;
  if (reference.shape() != candidate.shape() || reference.rank() < 1) return;
  const int64_t classes = reference.dim(reference.rank() - 1);
  if (classes < 2 || (kind == OutputKind::Sequence && reference.rank() != 3)) return;
  m_kind = kind;
  const int64_t rows = reference.numel() / classes, k = std::min<int64_t>(5, classes);
  const float* a = reference.data<float>();
  const float* b = candidate.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ia = argmax(a + r * classes, classes), ib = argmax(b + r * classes, classes);
    m_top1 += ia == ib;
    m_top5 += inTopK(b + r * classes, classes, ia, k);
  }
  m_positions += rows;
  if (kind != OutputKind::Sequence) return;
  const int64_t n = reference.dim(0), steps = reference.dim(1);
  for (int64_t s = 0; s < n; ++s) {
    const std::vector<int32_t> ra = ctcGreedyDecode(a + s * steps * classes, steps, classes);
    const std::vector<int32_t> rb = ctcGreedyDecode(b + s * steps * classes, steps, classes);
    m_sequencesEqual += ra == rb;
    m_editDistance += editDistance(ra, rb);
    m_referenceLength += (int64_t)ra.size();
  }
  m_sequences += n;
}

void AgreementAccumulator::merge(const AgreementAccumulator& o) {
  if (o.m_kind != OutputKind::Dense) m_kind = o.m_kind;
  m_positions += o.m_positions;
  m_top1 += o.m_top1;
  m_top5 += o.m_top5;
  m_sequences += o.m_sequences;
  m_sequencesEqual += o.m_sequencesEqual;
  m_editDistance += o.m_editDistance;
  m_referenceLength += o.m_referenceLength;
}

AgreementMetrics AgreementAccumulator::metrics() const {
  AgreementMetrics m;
  m.kind = m_kind;
  m.positions = m_positions;
  if (m_positions > 0) {
    m.top1 = (double)m_top1 / (double)m_positions;
    m.top5 = (double)m_top5 / (double)m_positions;
  }
  m.sequences = m_sequences;
  if (m_sequences > 0) {
    m.sequenceAgreement = (double)m_sequencesEqual / (double)m_sequences;
    // Float sequences all empty: any decoded character is an error of its own.
    m.charErrorRate = m_referenceLength > 0 ? (double)m_editDistance / (double)m_referenceLength
                                            : (m_editDistance > 0 ? 1.0 : 0.0);
  }
  return m;
}

}  // namespace qs
