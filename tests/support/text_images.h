// Renders document-like test images: dark text (stb_easy_font glyphs, several sizes) on light,
// slightly noisy backgrounds, as OCR calibration data would look. Seeded, so tests are repeatable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qs::test {

/// RGB, row-major, w*h*3 bytes.
std::vector<uint8_t> renderTextImage(int width, int height, uint64_t seed);

/// Writes `count` PNG files (text_000.png, ...) into `dir` (created if needed); with `flipHalf`
/// every second image is rotated by 180 degrees (upside-down text lines, as cls classifies).
void writeTextImages(const std::string& dir, int count, int width, int height, uint64_t seed, bool flipHalf = false);

}  // namespace qs::test
