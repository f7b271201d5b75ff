/* stb_image compiled into the image fuzzer with the sanitizers and coverage of the rest of the
 * build: Debian's libstb.so is not instrumented, so without this copy the fuzzer would be blind
 * inside the decoder. Same header as libstb (libstb-dev); the executable's definitions take
 * precedence over the shared library's. */
#define STBI_ONLY_BMP /* the only format decodeImage hands to stb */
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>
