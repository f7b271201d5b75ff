#include "core/kernels/elementwise_chain.h"

#include <algorithm>
#include <vector>

#include "core/exec/parallel.h"
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

// The piece [off, off + len) of a broadcast operand, written to `o` (runs of one value for
// inner > 1, copies of the period for inner 1).
void operandPiece(const ChainOperand& e, int64_t off, int64_t len, float* o) {
  const int64_t end = off + len;
  if (e.inner == 1) {
    for (int64_t i = off; i < end;) {
      const int64_t c = i % e.period, run = std::min(end - i, e.period - c);
      std::copy(e.data + c, e.data + c + run, o + (i - off));
      i += run;
    }
    return;
  }
  for (int64_t i = off; i < end;) {
    const int64_t q = i / e.inner, run = std::min(end, (q + 1) * e.inner) - i;
    std::fill(o + (i - off), o + (i - off) + run, e.data[q % e.period]);
    i += run;
  }
}

// runElementwiseChain, and with `xf` its twin over the float input (runElementwiseChainPair): per
// piece, the float ops first (into floatStores[i] or scratch), then the ops over x, each compared
// with the float piece of its op while that is in cache.
void runChainImpl(std::span<const ChainOp> ops, const float* x, int64_t n, std::span<const ChainOutput> outputs,
                  std::span<const ChainOperand> operands, int threads, const float* xf,
                  std::span<float* const> floatStores) {
  const size_t K = ops.size(), E = operands.size(), F = xf ? K : 0;
  if (n <= 0) return;
  const int64_t blocks = (n + ErrorAccumulator::kBlock - 1) / ErrorAccumulator::kBlock;
  // Per block and op: the block's sums, merged in block order below (as ErrorAccumulator::add).
  std::vector<ErrorAccumulator> part((size_t)blocks * K);
  auto runBlocks = [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> pieces;
    if (pieces.size() < (K + E + F) * (size_t)kChainPiece) pieces.resize((K + E + F) * (size_t)kChainPiece);
    // Where op i writes the piece at `off` (and its float twin); operand e's piece (in place where
    // it has the chain's shape).
    auto target = [&](size_t i, int64_t off) -> float* {
      return outputs[i].store ? outputs[i].store + off : pieces.data() + i * kChainPiece;
    };
    auto floatTarget = [&](size_t i, int64_t off) -> float* {
      return floatStores[i] ? floatStores[i] + off : pieces.data() + (K + E + i) * kChainPiece;
    };
    auto direct = [&](const ChainOperand& e) { return e.period == 0 || (e.inner == 1 && e.period >= n); };
    // Chain value v (0: the input, i + 1: op i's output, -2 - e: operand e).
    auto value = [&](int v, int64_t off) -> const float* {
      if (v <= -2) {
        const ChainOperand& e = operands[(size_t)(-2 - v)];
        return direct(e) ? e.data + off : pieces.data() + (K + (size_t)(-2 - v)) * kChainPiece;
      }
      return v == 0 ? x + off : target((size_t)v - 1, off);
    };
    auto floatValue = [&](int v, int64_t off) -> const float* { return v == 0 ? xf + off : floatTarget((size_t)v - 1, off); };
    std::vector<ErrorAccumulator::Lanes> lanes(K);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t blockEnd = std::min(n, (b + 1) * ErrorAccumulator::kBlock);
      for (int64_t off = b * ErrorAccumulator::kBlock; off < blockEnd; off += kChainPiece) {
        const int64_t len = std::min(kChainPiece, blockEnd - off);
        for (size_t e = 0; e < E; ++e)
          if (!direct(operands[e])) operandPiece(operands[e], off, len, pieces.data() + (K + e) * kChainPiece);
        for (size_t i = 0; i < F; ++i) {
          const ChainOp& op = ops[i];
          runPiece(op, op.a != -1 ? floatValue(op.a, off) : nullptr, op.b != -1 ? floatValue(op.b, off) : nullptr,
                   floatTarget(i, off), len);
        }
        for (size_t i = 0; i < K; ++i) {
          const ChainOp& op = ops[i];
          float* o = target(i, off);
          runPiece(op, op.a != -1 ? value(op.a, off) : nullptr, op.b != -1 ? value(op.b, off) : nullptr, o, len);
          if (outputs[i].sums)
            part[(size_t)b * K + i].add(lanes[i], xf ? floatTarget(i, off) : outputs[i].reference + off, o, len);
        }
      }
      for (size_t i = 0; i < K; ++i)
        if (outputs[i].sums) part[(size_t)b * K + i].flush(lanes[i]);
    }
  };
  if (threads > 1 && blocks > 1) parallelFor(threads, blocks, 1, runBlocks);
  else runBlocks(0, blocks);
  for (int64_t b = 0; b < blocks; ++b)
    for (size_t i = 0; i < K; ++i)
      if (outputs[i].sums) outputs[i].sums->merge(part[(size_t)b * K + i]);
}

}  // namespace

void runElementwiseChain(std::span<const ChainOp> ops, const float* x, int64_t n, std::span<const ChainOutput> outputs,
                         std::span<const ChainOperand> operands, int threads) {
  runChainImpl(ops, x, n, outputs, operands, threads, nullptr, {});
}

void runElementwiseChainPair(std::span<const ChainOp> ops, const float* xf, const float* x, int64_t n,
                             std::span<float* const> floatStores, std::span<const ChainOutput> outputs, int threads) {
  runChainImpl(ops, x, n, outputs, {}, threads, xf, floatStores);
}

}  // namespace qs
