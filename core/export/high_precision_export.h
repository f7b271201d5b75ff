// quantized.onnx with the float part in fp16 or bf16 (--high-precision-dtype, ModelOpt's
// --high_precision_dtype): a rewrite of the finished Q/DQ model (exporter.cpp calls it after the
// ONNX checker ran on the float32 form and the opset was raised to 19, the first whose
// QuantizeLinear/DequantizeLinear take float16/bfloat16 scales).
//
//  - Float32 initializers (the Q/DQ scales included, so DequantizeLinear outputs the high
//    precision, as TensorRT's strongly typed networks read it) and Constant/ConstantOfShape
//    values become float16/bfloat16; Cast nodes to float32 cast to the high precision instead.
//  - Graph inputs and outputs keep their float32 type: a Cast after each float32 input, a Cast
//    before each float32 output (the producer's output is renamed `<name>_<dtype>`).
//  - Inputs the operator set types float32 only (keepsFloat32Input: Resize's scales) stay float32
//    (a Cast to float32 where they are computed).
//  - value_info entries of float32 tensors are dropped (their type changed; ONNX Runtime infers).
//  - bf16: the opset is declared 22, the first where Conv, Gemm, MatMul, Relu ... take bfloat16
//    (DFT and GridSample, which changed meaning at 20, are refused).
// Subgraphs (If, Loop, Scan) are refused with one line naming the node.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "core/quant/high_precision.h"
#include "core/util/status.h"

namespace qs {

/// Rewrites `proto` as above for `p` (fp16 or bf16; fp32 leaves it as it is). `where` (the
/// source file) prefixes the messages. Unsupported for a node with subgraphs.
Status convertFloatPart(onnx::ModelProto& proto, HighPrecision p, const std::string& where);

}  // namespace qs
