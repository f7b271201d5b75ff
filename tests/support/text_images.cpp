#include "tests/support/text_images.h"

#include <stb/stb_easy_font.h>
#include <stb/stb_image_write.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <random>

namespace qs::test {

std::vector<uint8_t> renderTextImage(int width, int height, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> bg(200, 250), tint(-12, 12), noise(-6, 6), ink(0, 70);
  std::vector<uint8_t> img((size_t)width * height * 3);
  int base = bg(rng), tr = tint(rng), tg = tint(rng), tb = tint(rng);
  for (int i = 0; i < width * height; ++i) {
    int n = noise(rng);
    img[(size_t)i * 3 + 0] = (uint8_t)std::clamp(base + tr + n, 0, 255);
    img[(size_t)i * 3 + 1] = (uint8_t)std::clamp(base + tg + n, 0, 255);
    img[(size_t)i * 3 + 2] = (uint8_t)std::clamp(base + tb + n, 0, 255);
  }
  static const char* words[] = {"INVOICE", "total", "2024", "Quantscope", "TEXT", "line", "Amount:", "42.50",
                                "ONNX", "int8", "calibration", "No. 7781", "Shanghai", "receipt", "PP-OCR", "hello"};
  std::uniform_int_distribution<int> pick(0, 15), scaleDist(1, std::max(1, height / 24));
  int y = 2;
  while (y < height - 8) {
    int s = std::max(1, std::min(scaleDist(rng), 4));
    std::string line;
    for (int k = 0; k < 6; ++k) line += std::string(words[pick(rng)]) + " ";
    static char buffer[99999];
    int quads = stb_easy_font_print(0, 0, line.data(), nullptr, buffer, sizeof buffer);
    int color = ink(rng);
    std::uniform_int_distribution<int> xoff(0, std::max(1, width / 8));
    int x0 = xoff(rng);
    const float* v = reinterpret_cast<const float*>(buffer);
    for (int q = 0; q < quads; ++q) {
      // each vertex: x, y, z, color (4 floats = 16 bytes); 4 vertices per quad
      const float* p = v + q * 16;
      int qx0 = x0 + (int)(p[0] * s), qy0 = y + (int)(p[1] * s), qx1 = x0 + (int)(p[8] * s), qy1 = y + (int)(p[9] * s);
      for (int yy = std::max(0, qy0); yy < std::min(height, qy1); ++yy)
        for (int xx = std::max(0, qx0); xx < std::min(width, qx1); ++xx)
          for (int c = 0; c < 3; ++c) img[((size_t)yy * width + xx) * 3 + c] = (uint8_t)color;
    }
    y += 12 * s + 4 + (int)(rng() % 6);
  }
  return img;
}

void writeTextImages(const std::string& dir, int count, int width, int height, uint64_t seed, bool flipHalf) {
  std::filesystem::create_directories(dir);
  for (int i = 0; i < count; ++i) {
    auto img = renderTextImage(width, height, seed + (uint64_t)i);
    if (flipHalf && i % 2 == 1) {  // rotated by 180 degrees: reverse the pixel order
      for (size_t a = 0, b = img.size() - 3; a < b; a += 3, b -= 3)
        for (int c = 0; c < 3; ++c) std::swap(img[a + c], img[b + c]);
    }
    char name[64];
    std::snprintf(name, sizeof name, "/text_%03d.png", i);
    stbi_write_png((dir + name).c_str(), width, height, 3, img.data(), width * 3);
  }
}

}  // namespace qs::test
