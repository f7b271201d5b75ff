// qs_make_text_images DIR COUNT WIDTH HEIGHT [SEED]: rendered text images (PNG) for calibration.
#include <cstdio>
#include <cstdlib>

#include "tests/support/text_images.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: qs_make_text_images DIR COUNT WIDTH HEIGHT [SEED]\n");
    return 2;
  }
  qs::test::writeTextImages(argv[1], std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]),
                            argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 1);
  return 0;
}
