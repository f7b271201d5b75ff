// Image decoding: PNG through libpng, JPEG through libjpeg-turbo (both fuzzed continuously
// upstream, by OSS-Fuzz), BMP through stb_image; writing through stb_image_write. Debian's libstb
// ships stb compiled: no STB_*_IMPLEMENTATION here.
#include "core/io/image.h"

#include <climits>
#include <csetjmp>
#include <cstddef>
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t

#include <jpeglib.h>
#include <png.h>
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

Status checkSize(const std::string& where, int w, int h, int64_t maxPixels) {
  if (w <= 0 || h <= 0) return invalidArgument(where + ": image has no pixels (" + std::to_string(w) + "x" + std::to_string(h) + ")");
  if ((int64_t)w * (int64_t)h > maxPixels) {
    return Status(StatusCode::ResourceLimit, where + ": image of " + std::to_string(w) + "x" + std::to_string(h) +
                                                 " pixels exceeds the limit of " + std::to_string(maxPixels) + " pixels");
  }
  return Status::ok();
}

// ---- PNG: libpng -------------------------------------------------------------------------------
// The classic read API rather than png_image: it applies no gamma or colour-space conversion, so the
// bytes match what OpenCV and PIL give the user's own preprocessing (palette and low-bit grey are
// expanded, 16-bit samples keep their high byte, grey is replicated, alpha is dropped).

struct PngReader {
  const unsigned char* data;
  size_t size;
  size_t pos;
  char message[200];
};

void pngError(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg ? msg : "unknown error");
  png_longjmp(png, 1);
}

void pngWarning(png_structp, png_const_charp) {}  // benign (unknown chunks, bad ancillary CRCs)

void pngRead(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "file truncated");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

/// Decodes (pixels != nullptr) or only probes (pixels == nullptr) a PNG. Every C++ object with a
/// destructor lives in the caller: libpng's errors longjmp back into this frame.
Status decodePng(const unsigned char* p, size_t n, const std::string& where, int64_t maxPixels, int* width,
                 int* height, std::vector<uint8_t>* pixels, std::vector<png_bytep>* rows) {
  PngReader reader{p, n, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, pngError, pngWarning);
  if (!png) return runtimeError(where + ": libpng could not start");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return runtimeError(where + ": libpng could not start");
  }
  volatile int w = 0, h = 0;
  volatile int stage = 0;  // 0 header, 1 pixels
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    const std::string what = stage == 0 ? "not a decodable PNG image" : "corrupt or truncated " + std::to_string(w) +
                                                                          "x" + std::to_string(h) + " image data";
    return invalidArgument(where + ": " + what + " (libpng: " + reader.message + ")");
  }
  png_set_read_fn(png, &reader, pngRead);
  // Refuse huge dimensions in the header itself, before libpng sizes anything by them.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  w = (int)png_get_image_width(png, info);
  h = (int)png_get_image_height(png, info);
  if (Status s = checkSize(where, w, h, maxPixels); !s) {
    png_destroy_read_struct(&png, &info, nullptr);
    return s;
  }
  *width = w;
  *height = h;
  if (!pixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Status::ok();
  }
  stage = 1;
  png_set_expand(png);  // palette -> RGB, grey < 8 bits -> 8 bits, tRNS -> alpha
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != (size_t)w * 3) png_error(png, "unexpected row layout after conversion to RGB");
  pixels->resize((size_t)w * (size_t)h * 3);
  rows->resize((size_t)h);
  for (int y = 0; y < h; ++y) (*rows)[(size_t)y] = pixels->data() + (size_t)y * (size_t)w * 3;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return Status::ok();
}

// ---- JPEG: libjpeg-turbo ------------------------------------------------------------------------
// Default decoding settings (islow IDCT, fancy upsampling), as OpenCV and PIL use. Corrupt-data
// warnings are errors (TurboJPEG's TJFLAG_STOPONWARNING), progressive files are limited to
// kJpegMaxScans scans and libjpeg's working memory to a budget derived from maxPixels.

constexpr int kJpegMaxScans = 500;

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpegErrorExit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void jpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level < 0) jpegErrorExit(cinfo);  // a warning: corrupt data
}

void jpegProgress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->is_decompressor && d->input_scan_number > kJpegMaxScans) {
    auto* e = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "more than %d progressive scans", kJpegMaxScans);
    std::longjmp(e->jump, 1);
  }
}

Status decodeJpeg(const unsigned char* p, size_t n, const std::string& where, int64_t maxPixels, int* width,
                  int* height, std::vector<uint8_t>* pixels) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  jpeg_progress_mgr progress;
  std::memset(&cinfo, 0, sizeof cinfo);
  std::memset(&err, 0, sizeof err);
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpegErrorExit;
  err.mgr.emit_message = jpegEmitMessage;
  volatile int w = 0, h = 0;
  volatile int stage = 0;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    const std::string what = stage == 0 ? "not a decodable JPEG image" : "corrupt or truncated " + std::to_string(w) +
                                                                           "x" + std::to_string(h) + " image data";
    return invalidArgument(where + ": " + what + " (libjpeg: " + err.message + ")");
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = jpegProgress;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, p, (unsigned long)n);
  jpeg_read_header(&cinfo, TRUE);
  w = (int)cinfo.image_width;
  h = (int)cinfo.image_height;
  if (Status s = checkSize(where, w, h, maxPixels); !s) {
    jpeg_destroy_decompress(&cinfo);
    return s;
  }
  *width = w;
  *height = h;
  if (!pixels) {
    jpeg_destroy_decompress(&cinfo);
    return Status::ok();
  }
  stage = 1;
  // Coefficient buffers of a progressive file (2 bytes a sample, up to 4 components) plus slack.
  cinfo.mem->max_memory_to_use = (long)std::min<int64_t>((int64_t)w * h * 8 + (64 << 20), LONG_MAX);
  cinfo.out_color_space = JCS_RGB;  // grey is replicated; CMYK/YCCK files are refused by libjpeg
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3 || (int)cinfo.output_width != w || (int)cinfo.output_height != h) {
    std::snprintf(err.message, sizeof err.message, "unexpected output layout");
    std::longjmp(err.jump, 1);
  }
  pixels->resize((size_t)w * (size_t)h * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels->data() + (size_t)cinfo.output_scanline * (size_t)w * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return Status::ok();
}

// ---- BMP: stb_image ----------------------------------------------------------------------------

Status decodeBmp(const unsigned char* p, size_t n, const std::string& where, int64_t maxPixels, int* width,
                 int* height, std::vector<uint8_t>* pixels) {
  int w = 0, h = 0, comp = 0;
  // The declared size is checked before stb allocates the pixels.
  if (!stbi_info_from_memory(p, (int)n, &w, &h, &comp)) {
    return invalidArgument(where + ": not a decodable BMP image (stb_image: " + stbReason() + ")");
  }
  QS_RETURN_IF_ERROR(checkSize(where, w, h, maxPixels));
  *width = w;
  *height = h;
  if (!pixels) return Status::ok();
  std::unique_ptr<stbi_uc, void (*)(void*)> px(stbi_load_from_memory(p, (int)n, &w, &h, &comp, 3), &stbi_image_free);
  if (!px) {
    return invalidArgument(where + ": corrupt or truncated " + std::to_string(w) + "x" + std::to_string(h) +
                           " image data (stb_image: " + stbReason() + ")");
  }
  pixels->assign(px.get(), px.get() + (size_t)w * (size_t)h * 3);
  return Status::ok();
}

/// Decodes by signature (the extension is not trusted); pixels == nullptr only reads the header.
Status decodeAny(const unsigned char* p, size_t n, const std::string& where, int64_t maxPixels, int* width,
                 int* height, std::vector<uint8_t>* pixels) {
  if (n == 0) return invalidArgument(where + ": empty file, not an image");
  if (n > (size_t)INT32_MAX) return Status(StatusCode::ResourceLimit, where + ": image file larger than 2 GiB");
  if (n >= 8 && std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) {
    std::vector<png_bytep> rows;
    return decodePng(p, n, where, maxPixels, width, height, pixels, &rows);
  }
  if (n >= 2 && p[0] == 0xFF && p[1] == 0xD8) return decodeJpeg(p, n, where, maxPixels, width, height, pixels);
  if (n >= 2 && p[0] == 'B' && p[1] == 'M') return decodeBmp(p, n, where, maxPixels, width, height, pixels);
  // stb would also try GIF, PSD, PIC, PNM, HDR and TGA: formats this tool does not promise.
  return invalidArgument(where + ": not a decodable PNG, JPEG or BMP image (unknown signature)");
}

Result<std::string> readWhole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return ioError(path + ": cannot open: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return ioError(path + ": read error");
  return bytes;
}

}  // namespace

bool isImageFileName(const std::string& name) {
  const std::string ext = lowerExtension(name);
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

Status probeImage(const std::string& path, int* width, int* height, int64_t maxPixels) {
  auto bytes = readWhole(path);
  if (!bytes) return bytes.status();
  int w = 0, h = 0;
  QS_RETURN_IF_ERROR(decodeAny(reinterpret_cast<const unsigned char*>(bytes->data()), bytes->size(), path, maxPixels,
                               &w, &h, nullptr));
  if (width) *width = w;
  if (height) *height = h;
  return Status::ok();
}

Result<Image> decodeImage(const void* data, size_t size, const std::string& where, int64_t maxPixels) {
  Image img;
  QS_RETURN_IF_ERROR(decodeAny(static_cast<const unsigned char*>(data), size, where, maxPixels, &img.width,
                               &img.height, &img.pixels));
  return img;
}

Result<Image> readImage(const std::string& path, int64_t maxPixels) {
  auto bytes = readWhole(path);
  if (!bytes) return bytes.status();
  return decodeImage(bytes->data(), bytes->size(), path, maxPixels);
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
