#include "core/quant/high_precision.h"

#include <cmath>
#include <limits>

#include "core/ir/half.h"

namespace qs {

const char* highPrecisionName(HighPrecision p) {
  switch (p) {
    case HighPrecision::Fp16: return "fp16";
    case HighPrecision::Bf16: return "bf16";
    default: return "fp32";
  }
}

Status parseHighPrecision(const std::string& name, HighPrecision& out) {
  if (name == "fp32" || name == "float32") out = HighPrecision::Fp32;
  else if (name == "fp16" || name == "float16") out = HighPrecision::Fp16;
  else if (name == "bf16" || name == "bfloat16") out = HighPrecision::Bf16;
  else return invalidArgument("--high-precision-dtype '" + name + "': expected fp32, fp16 or bf16");
  return Status::ok();
}

float roundToHighPrecision(float x, HighPrecision p) {
  switch (p) {
    case HighPrecision::Fp16: return halfToFloat(floatToHalf(x));
    case HighPrecision::Bf16: return bf16ToFloat(floatToBf16(x));
    default: return x;
  }
}

float roundScale(float scale, HighPrecision p) {
  if (p == HighPrecision::Fp32 || !(scale > 0) || !std::isfinite(scale)) return scale;
  float r = roundToHighPrecision(scale, p);
  if (r == 0) r = p == HighPrecision::Fp16 ? halfToFloat(0x0001) : bf16ToFloat(0x0001);
  if (std::isinf(r)) r = p == HighPrecision::Fp16 ? halfToFloat(0x7bff) : bf16ToFloat(0x7f7f);
  return r;
}

void roundInPlace(Tensor& t, HighPrecision p) {
  if (p == HighPrecision::Fp32 || t.dtype() != DType::Float) return;
  float* d = t.data<float>();
  const int64_t n = t.numel();
  if (p == HighPrecision::Fp16) {
    for (int64_t i = 0; i < n; ++i) d[i] = halfToFloat(floatToHalf(d[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = bf16ToFloat(floatToBf16(d[i]));
  }
}

bool keepsFloat32Input(std::string_view opType, size_t inputIndex) {
  return (opType == "Resize" && inputIndex == 2) || (opType == "Upsample" && inputIndex == 1);
}

}  // namespace qs
