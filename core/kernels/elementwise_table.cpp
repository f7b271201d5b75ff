// Kernel table of the 'elementwise' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"
#include "core/kernels/activation.h"
#include "core/kernels/cast.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/quantize_linear.h"
#include "core/kernels/softmax.h"

namespace qs {

std::vector<KernelEntry> elementwiseKernels() {
  std::vector<KernelEntry> t;
  auto add = [&](const char* op, int64_t since, KernelFactory f) { t.push_back({op, "", since, 21, std::move(f)}); };
  // Unary ops and activations (factory branches on the op type).
  for (const char* op : {"Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh", "Exp", "Log", "Sqrt",
                         "Reciprocal", "Neg", "Abs", "Floor", "Ceil"})
    add(op, 6, createUnary);
  add("Softplus", 1, createUnary);
  add("Softsign", 1, createUnary);
  add("Not", 1, createUnary);
  add("Erf", 9, createUnary);
  add("Sign", 9, createUnary);
  add("Round", 11, createUnary);
  add("HardSwish", 14, createUnary);
  add("Gelu", 20, createUnary);
  for (const char* op : {"Sin", "Cos", "Tan", "Asin", "Acos", "Atan"}) add(op, 7, createUnary);
  for (const char* op : {"Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Shrink", "IsNaN"}) add(op, 9, createUnary);
  add("ThresholdedRelu", 10, createUnary);
  add("IsInf", 10, createUnary);
  add("Celu", 12, createUnary);
  add("Mish", 18, createUnary);
  // Clip: attributes before 11, optional inputs from 11 (the factory branches on the opset).
  add("Clip", 6, createClip);
  // Binary, numpy broadcasting.
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) add(op, 7, createArithmetic);
  add("Mod", 10, createArithmetic);
  for (const char* op : {"Equal", "Less", "Greater"}) add(op, 7, createComparison);
  for (const char* op : {"LessOrEqual", "GreaterOrEqual"}) add(op, 12, createComparison);
  for (const char* op : {"And", "Or", "Xor"}) add(op, 7, createLogical);
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) add(op, 6, createVariadic);
  add("Where", 9, createWhere);
  add("PRelu", 7, createPRelu);
  add("BitShift", 11, createBitShift);
  // Softmax family: 2-D coercion before 13, single axis from 13 (the factory branches).
  add("Softmax", 1, createSoftmax);
  add("LogSoftmax", 1, createLogSoftmax);
  add("Hardmax", 1, createHardmax);
  // Conversions and quantization.
  add("Cast", 6, createCast);
  add("CastLike", 15, createCastLike);
  add("QuantizeLinear", 10, createQuantizeLinear);
  add("DequantizeLinear", 10, createDequantizeLinear);
  add("DynamicQuantizeLinear", 11, createDynamicQuantizeLinear);
  return t;
}

}  // namespace qs
