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

}  // namespace

bool isImageFileName(const std::string& name) {
  const std::string ext = lowerExtension(name);
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

Status probeImage(const std::string& path, int* width, int* height, int64_t maxPixels) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return ioError(path + ": cannot open: " + std::strerror(errno));
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_file(f.get(), &w, &h, &comp)) return notAnImage(path);
  QS_RETURN_IF_ERROR(checkSize(path, w, h, maxPixels));
  if (width) *width = w;
  if (height) *height = h;
  return Status::ok();
}

Result<Image> decodeImage(const void* data, size_t size, const std::string& where, int64_t maxPixels) {
  if (size == 0) return invalidArgument(where + ": empty file, not an image");
  if (size > (size_t)INT32_MAX) return Status(StatusCode::ResourceLimit, where + ": image file larger than 2 GiB");
  const auto* bytes = static_cast<const stbi_uc*>(data);
  int w = 0, h = 0, comp = 0;
  // Check the declared size before stb allocates the pixels.
  if (!stbi_info_from_memory(bytes, (int)size, &w, &h, &comp)) return notAnImage(where);
  QS_RETURN_IF_ERROR(checkSize(where, w, h, maxPixels));
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
