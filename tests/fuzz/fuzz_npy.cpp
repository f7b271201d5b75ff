// libFuzzer target: the .npy and .npz readers (calibration data from strangers).
#include <cstddef>
#include <cstdint>

#include "core/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kMaxBytes = size_t(4) << 20;  // small: a declared tensor beyond it is refused
  auto t = qs::parseNpy(data, size, "fuzz.npy", kMaxBytes);
  (void)t;
  auto z = qs::parseNpz(data, size, "fuzz.npz", kMaxBytes);
  (void)z;
  return 0;
}
