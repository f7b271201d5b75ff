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
/// output of op i), a scalar constant (-1) or an activation operand (-2 - e: operands[e] of
/// runElementwiseChain). Ops refer only to values before their own.
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

/// An activation operand besides the chain's input: value i of the chain's tensor reads
/// data[(i / inner) % period]. The same shape as the chain's values: inner 1, period 0 (or n);
/// one broadcast over trailing or leading dims, such as a squeeze-excitation scale [N, C, 1, 1]
/// against [N, C, H, W]: inner H W, period N C ([1, C, 1, 1]: inner H W, period C).
struct ChainOperand {
  const float* data = nullptr;
  int64_t inner = 1, period = 0;
};

/// Values per piece: every op of a piece runs while the piece is in cache.
constexpr int64_t kChainPiece = 4096;

/// Runs `ops` over x[0, n) (float32), one ChainOutput per op. The comparisons are summed per
/// block of ErrorAccumulator::kBlock values (each block over its pieces with its vector lanes
/// kept, kChainPiece being a multiple of the lane blocks), the blocks merged in order into
/// *sums: the same sums as ErrorAccumulator::add(Tensor, Tensor) gives the whole output.
/// `operands` are the activation operands ops refer to (x may be null where no op reads value 0).
/// Blocks go to up to `threads` threads (each keeps its scratch pieces for the next call): the
/// outputs and sums do not depend on the thread count.
void runElementwiseChain(std::span<const ChainOp> ops, const float* x, int64_t n, std::span<const ChainOutput> outputs,
                         std::span<const ChainOperand> operands = {}, int threads = 1);

/// The chain over two inputs at once, piece by piece: over xf (the float pass: op i's output to
/// floatStores[i], null: scratch only), then over x with `outputs` as runElementwiseChain, each
/// output with sums compared with the float output of its op while both pieces are in cache
/// (`reference` unused). The same bits and sums as runElementwiseChain over xf with every output
/// stored, then over x with those as references; no operands besides x.
void runElementwiseChainPair(std::span<const ChainOp> ops, const float* xf, const float* x, int64_t n,
                             std::span<float* const> floatStores, std::span<const ChainOutput> outputs, int threads = 1);

}  // namespace qs
