// qs_make_text_images DIR COUNT WIDTH HEIGHT [SEED] [--flip-half | --font-lines | --font-pages]: rendered
// text images (PNG) for calibration; --flip-half turns every second one upside down (stb_easy_font's
// glyphs); --font-lines and --font-pages render with DejaVu fonts (font_text_images.h: single lines
// scaled to HEIGHT, or pages of several lines) and write DIR/labels.txt with the ground truth.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/support/font_text_images.h"
#include "tests/support/text_images.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: qs_make_text_images DIR COUNT WIDTH HEIGHT [SEED] "
                         "[--flip-half | --font-lines | --font-pages]\n");
    return 2;
  }
  const char* mode = argc > 6 ? argv[6] : "";
  const uint64_t seed = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 1;
  const int count = std::atoi(argv[2]), width = std::atoi(argv[3]), height = std::atoi(argv[4]);
  if (std::strcmp(mode, "--font-lines") == 0 || std::strcmp(mode, "--font-pages") == 0) {
    std::string error;
    auto lines = qs::test::writeFontTextImages(argv[1], count, width, height, seed,
                                               std::strcmp(mode, "--font-pages") == 0, &error);
    if (lines.empty()) {
      std::fprintf(stderr, "qs_make_text_images: %s\n", error.c_str());
      return 1;
    }
    return 0;
  }
  qs::test::writeTextImages(argv[1], count, width, height, seed, std::strcmp(mode, "--flip-half") == 0);
  return 0;
}
