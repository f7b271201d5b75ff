#include "core/quant/int4.h"

#include <algorithm>
#include <cmath>

namespace qs {

std::string int4MethodName(Int4Method m) {
  switch (m) {
  case Int4Method::RtnDq:
    return "rtn_dq";
  case Int4Method::AwqLite:
    return "awq_lite";
  case Int4Method::AwqClip:
    return "awq_clip";
  }
  return "?";
}

Status parseInt4Method(const std::string &s, Int4Method &out) {
  for (Int4Method m :
       {Int4Method::RtnDq, Int4Method::AwqLite, Int4Method::AwqClip}) {
    if (s == int4MethodName(m)) {
      out = m;
      return Status::ok();
    }
  }
  return invalidArgument(
      "--calibration-method '" + s +
      "': expected rtn_dq, awq_lite or awq_clip for --quantize-mode int4");
}

Status checkInt4BlockSize(int64_t block) {
  if (block < 16 || (block & (block - 1)) != 0) {
    return invalidArgument(
        "--block-size " + std::to_string(block) +
        ": expected a power of two >= 16 (16, 32, 64, 128, ...)");
  }
  return Status::ok();
}

Int4Weight quantizeInt4(const float *w, int64_t k, int64_t n, int64_t block,
                        const float *clip) {
  Int4Weight r;
  r.k = k;
  r.n = n;
  r.block = block;
  const int64_t nb = r.blocks();
  r.scale.assign((size_t)(nb * n), 0.0f);
  r.q.assign((size_t)(k * n), 0);
  std::vector<float> amax((size_t)n);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t k0 = b * block, k1 = std::min(k, k0 + block);
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (int64_t kk = k0; kk < k1; ++kk)
      for (int64_t j = 0; j < n; ++j)
        amax[(size_t)j] = std::max(amax[(size_t)j], std::fabs(w[kk * n + j]));
    float *s = &r.scale[(size_t)(b * n)];
    for (int64_t j = 0; j < n; ++j) {
      const float c = clip ? clip[b * n + j] : 1.0f;
      s[j] = amax[(size_t)j] * c / 7.0f;
    }
    for (int64_t kk = k0; kk < k1; ++kk) {
      for (int64_t j = 0; j < n; ++j) {
        if (s[j] == 0.0f)
          continue;
        const float v = std::nearbyint(
            w[kk * n + j] / s[j]); // default rounding mode: half to even
        r.q[(size_t)(kk * n + j)] = (int8_t)std::clamp(v, -8.0f, 7.0f);
      }
    }
  }
  return r;
}

void dequantizeInt4(const Int4Weight &w, float *out) {
  for (int64_t kk = 0; kk < w.k; ++kk) {
    const float *s = &w.scale[(size_t)((kk / w.block) * w.n)];
    for (int64_t j = 0; j < w.n; ++j)
      out[kk * w.n + j] = (float)w.q[(size_t)(kk * w.n + j)] * s[j];
  }
}

std::vector<uint8_t> packInt4(const std::vector<int8_t> &values) {
  std::vector<uint8_t> out((values.size() + 1) / 2, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint8_t nib = (uint8_t)values[i] & 0x0F;
    out[i / 2] |= (i % 2 == 0) ? nib : (uint8_t)(nib << 4);
  }
  return out;
}

std::vector<int8_t> unpackInt4(const std::vector<uint8_t> &packed,
                               size_t count) {
  std::vector<int8_t> out(count);
  for (size_t i = 0; i < count && i / 2 < packed.size(); ++i) {
    const uint8_t nib =
        (i % 2 == 0) ? (packed[i / 2] & 0x0F) : (packed[i / 2] >> 4);
    out[i] = (int8_t)(nib >= 8 ? (int)nib - 16 : (int)nib);
  }
  return out;
}

} // namespace qs
