// Models with If, Loop and Scan built in code, shared by the control-flow tests
// (tests/exec/test_control_flow.cpp) and the model fuzzer's seeds.
#pragma once

#include "tests/support/onnx_builder.h"

namespace qs::test {

/// y = c ? (w + x) : (w - 1) with w = 2x computed outside the If and read by both branches.
/// Inputs x [2,3] float, c bool scalar; node 'branch'.
OnnxBuilder ifModel();
/// A Loop 'loop' (M from input "M", cond constant true) carrying acc [3] (from 0.5, 0, -1): each
/// step adds x * i (i even) or -x (i odd) through an If nested in the body that reads x two scopes
/// out; outputs acc_final [3] and the running acc stacked, accs [M, 3].
OnnxBuilder loopModel();
/// A Scan 'scan' (opset 11): s [2] += X[t] + Y[:, 3 - t] over X [4,2] (axis 0) and Y [2,4] (axis 1,
/// reversed); outputs s_final [2] and the per-step s stacked along axis 1, steps [2, 4].
OnnxBuilder scanModel();

}  // namespace qs::test
