#include "core/numeric/fake_quant.h"

#include <algorithm>
#include <cmath>

#include "core/exec/parallel.h"

namespace qs {

void fakeQuantInt8(const float* x, float* y, int64_t n, float scale, int qmin, int qmax) {
  const float lo = (float)qmin, hi = (float)qmax;
  for (int64_t i = 0; i < n; ++i) {
    // nearbyint rounds half to even in the default rounding mode; clamping after rounding is
    // the same as ONNX's saturate() of the rounded value.
    float q = std::nearbyint(x[i] / scale);
    q = std::min(std::max(q, lo), hi);
    y[i] = q * scale;
  }
}

float roundToFp8E4M3(float v) {
  if (std::isnan(v)) return v;
  float a = std::fabs(v);
  if (a == 0.f) return v;
  if (a >= kFp8E4M3Max) return std::copysign(kFp8E4M3Max, v);
  int e;
  std::frexp(a, &e);            // a = m * 2^e, m in [0.5, 1): the unbiased exponent is e - 1
  int exp = std::max(e - 1, -6);  // subnormals share the spacing of the smallest normal binade
  float spacing = std::ldexp(1.f, exp - 3);  // 3 mantissa bits
  float r = std::nearbyint(a / spacing) * spacing;
  return std::copysign(std::min(r, kFp8E4M3Max), v);
}

void fakeQuantFp8(const float* x, float* y, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = roundToFp8E4M3(x[i] / scale) * scale;
}

uint8_t fp8E4M3Bits(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return sign | 0x7F;
  const float a = std::fabs(roundToFp8E4M3(v));
  if (a == 0.f) return sign;
  int e;
  std::frexp(a, &e);
  const int exp = e - 1;  // a = 2^exp * 1.mmm (normal) or 2^-6 * 0.mmm (subnormal)
  if (exp < -6) return sign | (uint8_t)std::lround(std::ldexp(a, 9));  // multiples of 2^-9
  const int mantissa = (int)std::lround((std::ldexp(a, -exp) - 1.f) * 8.f);
  return sign | (uint8_t)((exp + 7) << 3) | (uint8_t)mantissa;
}

float fp8E4M3Value(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.f : 1.f;
  const int exp = (bits >> 3) & 0xF, mantissa = bits & 0x7;
  if (exp == 0xF && mantissa == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp((float)mantissa, -9);
  return sign * std::ldexp(1.f + (float)mantissa / 8.f, exp - 7);
}

Tensor fakeQuantize(const Tensor& x, const std::vector<float>& scales, int axis, QuantMode mode, int qmin, int qmax,
                    int threads) {
  Tensor y(DType::Float, x.shape());
  const float* in = x.data<float>();
  float* out = y.data<float>();
  if (scales.size() == 1) {
    parallelFor(threads, x.numel(), 1 << 15, [&](int64_t b, int64_t e) {
      if (mode == QuantMode::Fp8) fakeQuantFp8(in + b, out + b, e - b, scales[0]);
      else fakeQuantInt8(in + b, out + b, e - b, scales[0], qmin, qmax);
    });
    return y;
  }
  int64_t outer = 1, inner = 1, channels = x.dim(axis);
  for (int i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      int64_t off = (o * channels + c) * inner;
      if (mode == QuantMode::Fp8) fakeQuantFp8(in + off, out + off, inner, scales[(size_t)c]);
      else fakeQuantInt8(in + off, out + off, inner, scales[(size_t)c], qmin, qmax);
    }
  }
  return y;
}

}  // namespace qs
