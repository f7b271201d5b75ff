// Agreement beyond SNR: whether the quantized model makes the float model's decisions. For a
// graph output with a class axis (the last), the top-1 and top-5 agreement per position; for a
// sequence of class scores [N, T, C] read by a CTC decoder (PaddleOCR rec, a speech model), the
// greedy decoded sequences (argmax per step, repeats collapsed, blank 0 dropped): the fraction
// identical and the character error rate. Sums over every analysed sample, as the SNR's.
//
// Which outputs have which kind (outputKind, docs/report-schema.md "Agreement"): an output whose
// producer is a Softmax or LogSoftmax over its last axis, or a linear head (Gemm, or MatMul with
// an optional bias Add), seen through shape-only ops (Reshape, Flatten, Squeeze, Unsqueeze,
// Identity); with a last axis of at least 2 classes. Rank 3 under a Softmax/LogSoftmax is a
// sequence; every other such output is classes (a [N, T, V] language-model head: per position).
// Everything else (feature maps, hidden states, boxes, masks) is dense: SNR only. A user's
// --output-kind NAME=classes|sequence|dense overrides the rule.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"

namespace qs {

enum class OutputKind { Auto, Dense, Classes, Sequence };

/// "auto", "dense", "classes", "sequence".
const char* outputKindName(OutputKind k);
/// Parses one of outputKindName's names; false for anything else.
bool parseOutputKind(const std::string& name, OutputKind& out);

/// The kind of graph output `value` whose float output is `t` (docs above): `requested` unless it
/// is Auto, else the rule. A requested kind that `t` cannot have (classes need a last axis of at
/// least 2, a sequence rank 3) gives Dense.
OutputKind outputKind(const Graph& g, ValueId value, const Tensor& t, OutputKind requested = OutputKind::Auto);

struct AgreementMetrics {
  OutputKind kind = OutputKind::Dense;
  int64_t positions = 0;          // class-score rows compared (N for [N, C], N * T for [N, T, C])
  double top1 = NAN;              // fraction of positions whose argmax agrees
  double top5 = NAN;              // fraction whose float argmax is in the quantized top 5 (top C if C < 5)
  int64_t sequences = 0;          // decoded sequences compared (Sequence only)
  double sequenceAgreement = NAN; // fraction decoded identically
  double charErrorRate = NAN;     // edit distance / length of the float model's decoded sequences
  /// The figure a fallback target is checked against: sequence agreement for a sequence, top-1
  /// for classes, NaN for dense (or nothing compared).
  double primary() const;
};

/// One line for summaries: "top-1 98.4%, top-5 100.0% of 64 rows" or "7/16 sequences decoded alike,
/// CER 3.7%, top-1 97.1% of 640 steps"; "" for dense.
std::string describeAgreement(const AgreementMetrics& m);

/// The sums behind AgreementMetrics, merged over batches in order.
class AgreementAccumulator {
 public:
  /// Compares the float output `reference` with `candidate` (same shape, float) as `kind`
  /// (resolved, not Auto); Dense and tensors of another shape or dtype add nothing.
  void add(const Tensor& reference, const Tensor& candidate, OutputKind kind);
  void merge(const AgreementAccumulator& other);
  AgreementMetrics metrics() const;

 private:
  OutputKind m_kind = OutputKind::Dense;
  int64_t m_positions = 0, m_top1 = 0, m_top5 = 0;
  int64_t m_sequences = 0, m_sequencesEqual = 0, m_editDistance = 0, m_referenceLength = 0;
};

/// Greedy CTC decoding of one sequence of `steps` rows of `classes` scores: argmax per step,
/// repeats collapsed, `blank` dropped (PaddleOCR's CTCLabelDecode with blank 0).
std::vector<int32_t> ctcGreedyDecode(const float* scores, int64_t steps, int64_t classes, int32_t blank = 0);
/// Levenshtein distance between two label sequences.
int64_t editDistance(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace qs
