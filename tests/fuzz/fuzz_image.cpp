// libFuzzer target: image decoding for calibration folders (PNG, JPEG, BMP through stb_image).
#include <cstddef>
#include <cstdint>

#include "core/io/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto img = qs::decodeImage(data, size, "fuzz.img", int64_t(1) << 20);
  if (img && img->pixels.size() != (size_t)img->width * (size_t)img->height * 3) __builtin_trap();
  return 0;
}
