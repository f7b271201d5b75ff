// Image decoding through stb_image (compiled into Debian's libstb: no STB_*_IMPLEMENTATION here).
#include "core/io/image.h"

#include <stb_image.h>
#include <stb_image_write.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "core/util/atomic_file.h"

namespace qs {

namespace {

std::string lowerExtension(const std::string& name) {
  const size_t slash = name.find_last_of('/');
  const size_t dot = name.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return {};
  std::string ext = name.substr(dot);
  for (char& c : ext) c = (char)std::tolower((unsigned char)c);
  return ext;
}

std::string stbReason() {
  const char* r = stbi_failure_reason();
  return r ? r : "unknown error";
}

Status notAnImage(const std::string& where) {
  return invalidArgument(where + ": not a decodable PNG, JPEG or BMP image (stb_image: " + stbReason() + ")");
}

Status checkSize(const std::string& where, int w, int h, int64_t maxPixels) {
  if (w <= 0 || h <= 0) return invalidArgument(where + ": image has no pixels (" + std::to_string(w) + "x" + std::to_string(h) + ")");
  if ((int64_t)w * (int64_t)h > maxPixels) {
    return Status(StatusCode::ResourceLimit, where + ": image of " + std::to_string(w) + "x" + std::to_string(h) +
                                                 " pixels exceeds the limit of " + std::to_string(maxPixels) + " pixels");
  }
  return Status::ok();
}

/// stb_image 2.27 (Debian bookworm's libstb) writes past its Huffman tables when a JPEG DHT table
/// declares more than 256 codes (found by tests/fuzz/fuzz_image; fixed upstream in 2.28), even in
/// stbi_info. Every DHT table stb could reach is checked before stb sees the file. The walk is a
/// superset of stb's: segments skipped by their length, entropy-coded data up to the next marker
/// (0xFF then a byte other than 0x00, 0xFF or RSTn), stray bytes between segments skipped.
/// Returns the offending count (> 256), or 0 when every table is within bounds.
int jpegOversizedHuffmanTable(const unsigned char* p, size_t n) {
  auto byteAt = [&](size_t i) -> unsigned { return i < n ? p[i] : 0u; };  // stb reads 0 past the end
  size_t i = 2;  // after SOI
  while (i < n) {
    if (p[i] != 0xFF) {
      ++i;
      continue;
    }
    while (i < n && p[i] == 0xFF) ++i;
    if (i >= n) break;
    const unsigned m = p[i++];
    if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD9)) continue;  // no length field
    if (i + 2 > n) break;
    const size_t len = (size_t)p[i] << 8 | p[i + 1];
    if (m == 0xC4) {  // DHT: tables of 1 + 16 count bytes + sum(counts) values, read while L > 0
      int64_t left = (int64_t)len - 2;
      size_t q = i + 2;
      while (left > 0) {
        int sum = 0;
        for (size_t k = 1; k <= 16; ++k) sum += (int)byteAt(q + k);
        if (sum > 256) return sum;
        q += 17 + (size_t)sum;
        left -= 17 + sum;
      }
    }
    i += len;
    if (m == 0xDA) {  // SOS: the entropy-coded data runs to the next marker
      while (i < n) {
        if (p[i] != 0xFF) {
          ++i;
          continue;
        }
        size_t j = i + 1;
        while (j < n && p[j] == 0xFF) ++j;
        if (j < n && (p[j] == 0x00 || (p[j] >= 0xD0 && p[j] <= 0xD7))) {
          i = j + 1;
          continue;
        }
        break;  // i is at the 0xFF of a marker (or the end)
      }
    }
  }
  return 0;
}

/// The first PNG chunk whose declared length runs past the end of the file, or -1. stb_image grows
/// its IDAT buffer to the declared length before reading the data (found by fuzz_image: a 60-byte
/// file made it allocate 2 GiB); a file that does not hold its chunks fails in stb anyway.
int64_t pngTruncatedChunk(const unsigned char* p, size_t n) {
  size_t i = 8;
  while (i + 8 <= n) {
    const uint64_t len = (uint64_t)p[i] << 24 | (uint64_t)p[i + 1] << 16 | (uint64_t)p[i + 2] << 8 | p[i + 3];
    if (len > n - i - 8) return (int64_t)len;  // data (the CRC may be cut: stb does not need it)
    if (std::memcmp(p + i + 4, "IEND", 4) == 0) break;
    i += 8 + (size_t)len + 4;
  }
  return -1;
}

/// Refuses what stb_image must not see: anything but PNG, JPEG and BMP (stb would also try GIF,
/// PSD, PIC, PNM, HDR and TGA, formats this tool does not promise and the fuzzer does not cover),
/// and JPEGs with oversized Huffman tables (stbi_info reads those too).
Status checkEncoded(const std::string& where, const unsigned char* p, size_t n) {
  const bool png = n >= 8 && std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0;
  const bool jpeg = n >= 2 && p[0] == 0xFF && p[1] == 0xD8;
  const bool bmp = n >= 2 && p[0] == 'B' && p[1] == 'M';
  if (!png && !jpeg && !bmp) return invalidArgument(where + ": not a decodable PNG, JPEG or BMP image (unknown signature)");
  if (jpeg) {
    if (int codes = jpegOversizedHuffmanTable(p, n)) {
      return invalidArgument(where + ": corrupt JPEG: a Huffman table declares " + std::to_string(codes) +
                             " codes (at most 256)");
    }
  }
  return Status::ok();
}

}  // namespace

bool isImageFileName(const std::string& name) {
  const std::string ext = lowerExtension(name);
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

Status probeImage(const std::string& path, int* width, int* height, int64_t maxPixels) {
  // Read whole: a JPEG's Huffman tables may sit anywhere before its frame header (checkEncoded).
  std::ifstream f(path, std::ios::binary);
  if (!f) return ioError(path + ": cannot open: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return ioError(path + ": read error");
  if (bytes.empty()) return invalidArgument(path + ": empty file, not an image");
  if (bytes.size() > (size_t)INT32_MAX) return Status(StatusCode::ResourceLimit, path + ": image file larger than 2 GiB");
  const auto* p = reinterpret_cast<const stbi_uc*>(bytes.data());
  QS_RETURN_IF_ERROR(checkEncoded(path, p, bytes.size()));
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(p, (int)bytes.size(), &w, &h, &comp)) return notAnImage(path);
  QS_RETURN_IF_ERROR(checkSize(path, w, h, maxPixels));
  if (width) *width = w;
  if (height) *height = h;
  return Status::ok();
}

Result<Image> decodeImage(const void* data, size_t size, const std::string& where, int64_t maxPixels) {
  if (size == 0) return invalidArgument(where + ": empty file, not an image");
  if (size > (size_t)INT32_MAX) return Status(StatusCode::ResourceLimit, where + ": image file larger than 2 GiB");
  const auto* bytes = static_cast<const stbi_uc*>(data);
  QS_RETURN_IF_ERROR(checkEncoded(where, bytes, size));
  int w = 0, h = 0, comp = 0;
  // Check the declared size before stb allocates the pixels.
  if (!stbi_info_from_memory(bytes, (int)size, &w, &h, &comp)) return notAnImage(where);
  QS_RETURN_IF_ERROR(checkSize(where, w, h, maxPixels));
  if (bytes[0] == 0x89) {  // PNG (checkEncoded): stbi_info stops at the first IDAT, stbi_load does not
    if (int64_t len = pngTruncatedChunk(bytes, size); len >= 0) {
      return invalidArgument(where + ": corrupt or truncated " + std::to_string(w) + "x" + std::to_string(h) +
                             " image data (a PNG chunk of " + std::to_string(len) + " bytes runs past the end of the " +
                             std::to_string(size) + "-byte file)");
    }
  }
  std::unique_ptr<stbi_uc, void (*)(void*)> px(stbi_load_from_memory(bytes, (int)size, &w, &h, &comp, 3), &stbi_image_free);
  if (!px) {
    return invalidArgument(where + ": corrupt or truncated " + std::to_string(w) + "x" + std::to_string(h) +
                           " image data (stb_image: " + stbReason() + ")");
  }
  Image img;
  img.width = w;
  img.height = h;
  img.pixels.assign(px.get(), px.get() + (size_t)w * (size_t)h * 3);
  return img;
}

Result<Image> readImage(const std::string& path, int64_t maxPixels) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return ioError(path + ": cannot open: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return ioError(path + ": read error");
  return decodeImage(bytes.data(), bytes.size(), path, maxPixels);
}

Image resizeBilinear(const Image& src, int width, int height) {
  if (src.width == width && src.height == height) return src;
  // Per output column/row: the two source indices and the weight of the second, computed once.
  struct Tap {
    int i0, i1;
    float w1;
  };
  auto taps = [](int outSize, int inSize) {
    std::vector<Tap> t((size_t)outSize);
    const double scale = (double)inSize / (double)outSize;
    for (int o = 0; o < outSize; ++o) {
      double s = ((double)o + 0.5) * scale - 0.5;
      if (s < 0) s = 0;
      int i0 = (int)std::floor(s);
      if (i0 > inSize - 1) i0 = inSize - 1;
      const int i1 = std::min(i0 + 1, inSize - 1);
      t[(size_t)o] = Tap{i0, i1, (float)(s - i0)};
    }
    return t;
  };
  const std::vector<Tap> tx = taps(width, src.width), ty = taps(height, src.height);
  Image out;
  out.width = width;
  out.height = height;
  out.pixels.resize((size_t)width * (size_t)height * 3);
  for (int y = 0; y < height; ++y) {
    const Tap& ry = ty[(size_t)y];
    for (int x = 0; x < width; ++x) {
      const Tap& rx = tx[(size_t)x];
      for (int c = 0; c < 3; ++c) {
        const float top = src.at(ry.i0, rx.i0, c) * (1 - rx.w1) + src.at(ry.i0, rx.i1, c) * rx.w1;
        const float bottom = src.at(ry.i1, rx.i0, c) * (1 - rx.w1) + src.at(ry.i1, rx.i1, c) * rx.w1;
        const float v = top * (1 - ry.w1) + bottom * ry.w1;
        out.pixels[((size_t)y * (size_t)width + (size_t)x) * 3 + (size_t)c] =
            (uint8_t)std::clamp((int)std::lround(v), 0, 255);
      }
    }
  }
  return out;
}

Status writeImage(const std::string& path, const Image& image) {
  const std::string ext = lowerExtension(path);
  if (ext != ".png" && ext != ".jpg" && ext != ".jpeg" && ext != ".bmp") {
    return invalidArgument(path + ": cannot write an image with extension '" + ext + "' (use .png, .jpg, .jpeg or .bmp)");
  }
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != (size_t)image.width * (size_t)image.height * 3) {
    return invalidArgument(path + ": inconsistent image: " + std::to_string(image.width) + "x" +
                           std::to_string(image.height) + " with " + std::to_string(image.pixels.size()) + " bytes");
  }
  // Encode in memory, then write atomically (fsync + rename) like every other writer.
  std::string bytes;
  auto append = [](void* ctx, void* data, int size) { static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), (size_t)size); };
  const void* px = image.pixels.data();
  int ok = 0;
  if (ext == ".png") ok = stbi_write_png_to_func(append, &bytes, image.width, image.height, 3, px, image.width * 3);
  else if (ext == ".bmp") ok = stbi_write_bmp_to_func(append, &bytes, image.width, image.height, 3, px);
  else ok = stbi_write_jpg_to_func(append, &bytes, image.width, image.height, 3, px, 95);
  if (!ok) return runtimeError(path + ": the image encoder failed");
  return writeFileAtomic(path, bytes);
}

}  // namespace qs
