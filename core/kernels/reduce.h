// Reductions: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSumExp, ReduceLogSum (ai.onnx opsets 1..21), and ArgMax / ArgMin
// (opsets 1..21).
//
// Axes come from the 'axes' attribute before opset 13 (ReduceSum) / 18 (the others) and from
// the optional second input after; either form is accepted at any opset (the input wins).
// keepdims (default 1) and noop_with_empty_axes (default 0) follow the spec; reducing over
// an empty set yields the op's identity (0 for sums, 1 for Prod, -inf/lowest for Max,
// +inf/highest for Min, NaN for Mean, -inf for LogSum/LogSumExp).
// Dtypes: float, double, int32, int64 for every reduction; int8, uint8 and bool for
// ReduceMax/ReduceMin. ArgMax/ArgMin: float, double, int32, int64, int8, uint8; NaN counts
// as the extreme value (numpy's rule).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createReduceMean(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceSum(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceMax(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceMin(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceProd(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceL1(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceL2(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceSumSquare(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceLogSumExp(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReduceLogSum(const KernelInit& init);

Result<std::unique_ptr<Kernel>> createArgMax(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createArgMin(const KernelInit& init);

}  // namespace qs
