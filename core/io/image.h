// Image files for calibration data: decode PNG, JPEG and BMP to 8-bit RGB, resize bilinearly,
// and write PNG/JPEG/BMP (tests and demos render their own images). No Qt, no exceptions.
//
// Decoding picks the format by signature, not extension: PNG through libpng, JPEG through
// libjpeg-turbo (default settings, as OpenCV and PIL decode), BMP through stb_image. No gamma or
// colour-profile conversion. Grey images are replicated to R=G=B, an alpha channel is dropped (not
// composited), 16-bit PNGs are reduced to 8 bits, corrupt JPEG data is an error, not a warning.
// Every error is one line naming the file: "<path>: <reason>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/status.h"

namespace qs {

/// An 8-bit RGB image: `pixels` holds height rows of width interleaved R,G,B bytes, no padding.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // size width*height*3

  uint8_t at(int y, int x, int c) const { return pixels[((size_t)y * (size_t)width + (size_t)x) * 3 + (size_t)c]; }
};

/// Largest image decoded by default (width*height): 2^28 pixels, 768 MiB of RGB.
inline constexpr int64_t kImageDefaultMaxPixels = int64_t(1) << 28;

/// True when the file name ends in .png, .jpg, .jpeg or .bmp (any case): the images a
/// calibration folder contributes.
bool isImageFileName(const std::string& name);

/// Reads only the header of an image file: its size, without decoding the pixels. Fails with
/// IoError when the file cannot be opened, InvalidArgument when it is not a decodable image,
/// ResourceLimit when it has more than `maxPixels` pixels.
Status probeImage(const std::string& path, int* width, int* height, int64_t maxPixels = kImageDefaultMaxPixels);

/// Decodes a PNG, JPEG or BMP file to RGB. Errors as probeImage.
Result<Image> readImage(const std::string& path, int64_t maxPixels = kImageDefaultMaxPixels);
/// Same, from encoded bytes held in memory; `where` prefixes every error message.
Result<Image> decodeImage(const void* data, size_t size, const std::string& where,
                          int64_t maxPixels = kImageDefaultMaxPixels);

/// Bilinear resize with half-pixel centres and edge clamping, as OpenCV's INTER_LINEAR
/// (src = (dst + 0.5) * in/out - 0.5; no antialiasing when shrinking). Results are rounded to
/// the nearest byte. Returns `src` unchanged when the size already matches.
/// Caller guarantees width, height > 0 and a non-empty source.
Image resizeBilinear(const Image& src, int width, int height);

/// Writes `image` as PNG, JPEG (quality 95) or BMP, chosen by the extension of `path`
/// (.png, .jpg/.jpeg, .bmp). Atomic like every writer of the core. Fails naming the path on an
/// unknown extension, an inconsistent image or a file-system error.
Status writeImage(const std::string& path, const Image& image);

}  // namespace qs
