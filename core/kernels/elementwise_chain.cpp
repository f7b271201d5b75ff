#include "core/kernels/elementwise_chain.h"

#include <algorithm>
#include <vector>

#include "core/kernels/elementwise.h"

namespace qs {

namespace {

static_assert(ErrorAccumulator::kBlock % kChainPiece == 0 && kChainPiece % (ErrorAccumulator::kLaneBlock * 16) == 0);

// o = op(A, B) over one piece, a missing operand being its constant: the loops binaryBroadcast
// runs for a contiguous row against a contiguous row or a broadcast scalar.
template <class Op>
void binaryPiece(const Op& op, const float* A, const float* B, float ca, float cb, float* o, int64_t len) {
  if (A && B) for (int64_t j = 0; j < len; ++j) o[j] = op(A[j], B[j]);
  else if (A) for (int64_t j = 0; j < len; ++j) o[j] = op(A[j], cb);
  else for (int64_t j = 0; j < len; ++j) o[j] = op(ca, B[j]);
}

void runPiece(const ChainOp& op, const float* A, const float* B, float* o, int64_t len) {
  switch (op.kind) {
    case ChainOp::kAdd: binaryPiece(ew::AddOp{}, A, B, op.ca, op.cb, o, len); break;
    case ChainOp::kSub: binaryPiece(ew::SubOp{}, A, B, op.ca, op.cb, o, len); break;
    case ChainOp::kMul: binaryPiece(ew::MulOp{}, A, B, op.ca, op.cb, o, len); break;
    case ChainOp::kDiv: binaryPiece(ew::DivOp{}, A, B, op.ca, op.cb, o, len); break;
    case ChainOp::kClip:
      for (int64_t j = 0; j < len; ++j) o[j] = ew::clipValue(A[j], op.lo, op.hi);
      break;
  }
}

}  // namespace

void runElementwiseChain(std::span<const ChainOp> ops, const float* x, int64_t n,
                         std::span<const ChainOutput> outputs) {
  const size_t K = ops.size();
  thread_local std::vector<float> pieces;
  if (pieces.size() < K * (size_t)kChainPiece) pieces.resize(K * (size_t)kChainPiece);
  // Where op i writes the piece at `off`, and chain value v (0: the input, i + 1: op i's output).
  auto target = [&](size_t i, int64_t off) -> float* {
    return outputs[i].store ? outputs[i].store + off : pieces.data() + i * kChainPiece;
  };
  auto value = [&](int v, int64_t off) -> const float* { return v == 0 ? x + off : target((size_t)v - 1, off); };
  std::vector<ErrorAccumulator> part(K);
  std::vector<ErrorAccumulator::Lanes> lanes(K);
  for (int64_t off = 0; off < n; off += kChainPiece) {
    const int64_t len = std::min(kChainPiece, n - off);
    for (size_t i = 0; i < K; ++i) {
      const ChainOp& op = ops[i];
      float* o = target(i, off);
      runPiece(op, op.a >= 0 ? value(op.a, off) : nullptr, op.b >= 0 ? value(op.b, off) : nullptr, o, len);
      if (outputs[i].sums) part[i].add(lanes[i], outputs[i].reference + off, o, len);
    }
    if ((off + len) % ErrorAccumulator::kBlock == 0 || off + len == n)
      for (size_t i = 0; i < K; ++i)
        if (outputs[i].sums) {
          part[i].flush(lanes[i]);
          outputs[i].sums->merge(part[i]);
          part[i] = ErrorAccumulator();
        }
  }
}

}  // namespace qs
