// IEEE-754 binary16 and bfloat16 conversions (round to nearest even), for Cast and the npy reader.
#pragma once

#include <cstdint>
#include <cstring>

namespace qs {

struct Half {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

inline float halfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t f;
  if (exp == 0) {
    if (mant == 0) {
      f = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      f = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    f = sign | 0x7f800000u | (mant << 13);
  } else {
    f = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

inline uint16_t floatToHalf(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  uint32_t sign = (f >> 16) & 0x8000;
  uint32_t absf = f & 0x7fffffff;
  if (absf >= 0x7f800000u) {  // inf or nan
    return (uint16_t)(sign | 0x7c00 | (absf > 0x7f800000u ? 0x200 : 0));
  }
  if (absf >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // rounds to inf
  if (absf < 0x38800000u) {  // subnormal half or zero
    if (absf < 0x33000000u) return (uint16_t)sign;
    uint32_t exp = absf >> 23;
    uint32_t mant = (absf & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp;  // half's subnormal unit is 2^-24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return (uint16_t)(sign | half);
  }
  uint32_t half = ((absf >> 13) - ((127 - 15) << 10));
  uint32_t rem = absf & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return (uint16_t)(sign | half);
}

inline float bf16ToFloat(uint16_t b) {
  uint32_t f = (uint32_t)b << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

inline uint16_t floatToBf16(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  if ((f & 0x7fffffff) > 0x7f800000u) return (uint16_t)((f >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((f >> 16) & 1);
  return (uint16_t)((f + rounding) >> 16);
}

}  // namespace qs
