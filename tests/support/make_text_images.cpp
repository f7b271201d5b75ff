// qs_make_text_images DIR COUNT WIDTH HEIGHT [SEED] [--flip-half]: rendered text images (PNG) for
// calibration; --flip-half turns every second one upside down.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/support/text_images.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: qs_make_text_images DIR COUNT WIDTH HEIGHT [SEED] [--flip-half]\n");
    return 2;
  }
  const bool flip = argc > 6 && std::strcmp(argv[6], "--flip-half") == 0;
  qs::test::writeTextImages(argv[1], std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]),
                            argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 1, flip);
  return 0;
}
