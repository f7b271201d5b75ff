// A chain of elementwise ops (Add, Sub, Mul, Div with numpy-broadcast scalars, Clip with scalar
// bounds) over one activation and each other's outputs, computed in one pass over the tensor:
// pieces of kChainPiece values, every op of a piece while it is in cache. Each op runs in its own
// loop with the float operation of its kernel (elementwise.h: AddOp ... DivOp, clipValue), so
// the outputs are the same bits as running the ops one by one; each output may be compared with
// a reference on the way, with the same sums as ErrorAccumulator::add over the whole tensor.
// What the analysis's quantized pass runs for det's Mul, Add, Add, Clip, Mul, Div, Mul, Add
// after each Conv (core/analysis/node_paths.h chooses the chains).
#pragma once

#include <cstdint>
#include <span>

#include "core/numeric/metrics.h"

namespace qs {

/// One op of a chain: out = a op b, each operand a chain value (0: the chain's input, i + 1: the
/// output of op i) or a scalar constant (-1). Ops refer only to values before their own.
struct ChainOp {
  enum Kind { kAdd, kSub, kMul, kDiv, kClip } kind = kAdd;
  int a = -1, b = -1;
  float ca = 0, cb = 0;  // the constants of constant operands
  float lo = 0, hi = 0;  // Clip's bounds (operand a only)
};

/// What becomes of one op's output (n values, the input's element count).
struct ChainOutput {
  /// Where the whole output is written; null: it lives only in a piece of scratch while its
  /// piece is in cache (an output nothing outside the chain reads).
  float* store = nullptr;
  /// With `sums`: every output value compared with reference[i] (sums.add(reference, output)).
  const float* reference = nullptr;
  ErrorAccumulator* sums = nullptr;
};

/// Values per piece: every op of a piece runs while the piece is in cache.
constexpr int64_t kChainPiece = 4096;

/// Runs `ops` over x[0, n) (float32), one ChainOutput per op. The comparisons are summed per
/// block of ErrorAccumulator::kBlock values (each block over its pieces with its vector lanes
/// kept, kChainPiece being a multiple of the lane blocks), the blocks merged in order into
/// *sums: the same sums as ErrorAccumulator::add(Tensor, Tensor) gives the whole output.
/// Single-threaded; the calling thread keeps its scratch (ops.size() pieces) for the next call.
void runElementwiseChain(std::span<const ChainOp> ops, const float* x, int64_t n, std::span<const ChainOutput> outputs);

}  // namespace qs
