#include "tests/support/font_text_images.h"

#include <ft2build.h>
#include FT_FREETYPE_H

#include <stb/stb_image_write.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

namespace qs::test {

namespace {

constexpr const char* kFontFiles[] = {"DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf",
                                      "DejaVuSerif-Bold.ttf", "DejaVuSansMono.ttf"};
constexpr int kFonts = sizeof kFontFiles / sizeof kFontFiles[0];

// Words of invoices, reports and manuals; numbers and codes are made by nextToken.
constexpr const char* kWords[] = {
    "invoice", "total",   "amount",   "date",     "customer", "payment",  "due",      "order",    "quantity",
    "price",   "tax",     "receipt",  "account",  "number",   "address",  "street",   "phone",    "email",
    "shipping", "balance", "report",  "page",     "item",     "description", "unit",  "discount", "reference",
    "model",   "version", "data",     "the",      "of",       "and",      "for",      "to",       "in",
    "with",    "from",    "per",      "is",       "on",       "by",       "at",       "not",      "all",
    "new",     "office",  "service",  "product",  "delivery", "contact",  "company",  "limited",  "north",
    "road",    "city",    "station",  "hotel",    "market",   "bank",     "transfer", "monthly",  "annual",
    "summary", "notes",   "please",   "check",    "within",   "days",     "signature", "approved", "paid",
    "open",    "closed",  "weight",   "size",     "color",    "black",    "white",    "window",   "system",
    "power",   "input",   "output",   "memory",   "speed",    "level",    "table",    "figure",   "results"};
constexpr int kWordCount = sizeof kWords / sizeof kWords[0];

std::string nextToken(std::mt19937_64& rng) {
  auto pick = [&](int n) { return (int)(rng() % (uint64_t)n); };
  auto digits = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (char)('0' + pick(10));
    return s;
  };
  const int kind = pick(100);
  if (kind < 62) {
    std::string w = kWords[pick(kWordCount)];
    const int caps = pick(10);
    if (caps < 3) w[0] = (char)std::toupper((unsigned char)w[0]);
    if (caps == 3) std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return (char)std::toupper(c); });
    const int punct = pick(12);
    if (punct == 0) w += ",";
    if (punct == 1) w += ".";
    if (punct == 2) w += ":";
    if (punct == 3) w = "(" + w + ")";
    return w;
  }
  switch (pick(9)) {
    case 0: return digits(1 + pick(3)) + "." + digits(2);                              // 42.50
    case 1: return "$" + digits(1) + "," + digits(3) + "." + digits(2);                 // $1,299.00
    case 2: return "20" + digits(2) + "-" + "0" + std::to_string(1 + pick(9)) + "-" + std::to_string(10 + pick(18));
    case 3: return "No." + digits(4);                                                  // No.7781
    case 4: return std::to_string(1 + pick(99)) + "%";                                 // 15%
    case 5: return "#" + std::string(1, (char)('A' + pick(26))) + "-" + digits(3);     // #A-204
    case 6: return std::to_string(pick(24)) + ":" + std::to_string(pick(6)) + digits(1);  // 9:45
    case 7: return digits(3) + "-" + digits(4);                                        // 555-0199
    default: return digits(1 + pick(4));
  }
}

float gauss(std::mt19937_64& rng, float sigma) { return std::normal_distribution<float>(0.0f, sigma)(rng); }

// A grey-level canvas: 0 = paper, 1 = full ink.
struct Coverage {
  int width = 0, height = 0;
  std::vector<float> a;
};

// Bilinear resampling of `src` to w x h, averaging over the source footprint when shrinking.
Coverage resize(const Coverage& src, int w, int h) {
  Coverage dst{w, h, std::vector<float>((size_t)w * h)};
  const float sx = (float)src.width / (float)w, sy = (float)src.height / (float)h;
  const int fx = std::max(1, (int)std::ceil(sx)), fy = std::max(1, (int)std::ceil(sy));
  auto at = [&](int x, int y) {
    x = std::clamp(x, 0, src.width - 1);
    y = std::clamp(y, 0, src.height - 1);
    return src.a[(size_t)y * src.width + x];
  };
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      float sum = 0;
      for (int j = 0; j < fy; ++j) {
        for (int i = 0; i < fx; ++i) {
          const float px = ((float)x + ((float)i + 0.5f) / (float)fx) * sx - 0.5f;
          const float py = ((float)y + ((float)j + 0.5f) / (float)fy) * sy - 0.5f;
          const int x0 = (int)std::floor(px), y0 = (int)std::floor(py);
          const float dx = px - (float)x0, dy = py - (float)y0;
          sum += (1 - dy) * ((1 - dx) * at(x0, y0) + dx * at(x0 + 1, y0)) +
                 dy * ((1 - dx) * at(x0, y0 + 1) + dx * at(x0 + 1, y0 + 1));
        }
      }
      dst.a[(size_t)y * w + x] = sum / (float)(fx * fy);
    }
  }
  return dst;
}

// Paper of one random light tint with `ink` drawn at `cover`'s strength, a 3x3 blur on half of the
// images, Gaussian noise.
RenderedText compose(const Coverage& cover, std::mt19937_64& rng) {
  const int w = cover.width, h = cover.height;
  std::uniform_int_distribution<int> paper(195, 250), tint(-10, 10), ink(0, 70);
  const int base = paper(rng), inkLevel = ink(rng);
  const float bg[3] = {(float)(base + tint(rng)), (float)(base + tint(rng)), (float)(base + tint(rng))};
  const float fg[3] = {(float)(inkLevel + tint(rng) + 10), (float)(inkLevel + tint(rng) + 10),
                       (float)(inkLevel + tint(rng) + 10)};
  std::vector<float> a = cover.a;
  if (rng() % 2 == 0) {
    std::vector<float> b(a.size());
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        float s = 0;
        for (int j = -1; j <= 1; ++j)
          for (int i = -1; i <= 1; ++i)
            s += a[(size_t)std::clamp(y + j, 0, h - 1) * w + std::clamp(x + i, 0, w - 1)] * (i == 0 && j == 0 ? 4 : 1);
        b[(size_t)y * w + x] = s / 12.0f;
      }
    }
    a.swap(b);
  }
  const float sigma = 2.0f + (float)(rng() % 5);
  RenderedText out;
  out.width = w;
  out.height = h;
  out.rgb.resize((size_t)w * h * 3);
  for (size_t i = 0; i < a.size(); ++i) {
    const float n = gauss(rng, sigma), t = std::clamp(a[i], 0.0f, 1.0f);
    for (int c = 0; c < 3; ++c)
      out.rgb[i * 3 + c] = (uint8_t)std::clamp((int)std::lround(bg[c] * (1 - t) + fg[c] * t + n), 0, 255);
  }
  return out;
}

}  // namespace

struct FontTextRenderer::Impl {
  FT_Library library = nullptr;
  FT_Face faces[kFonts] = {};

  ~Impl() {
    for (FT_Face f : faces)
      if (f) FT_Done_Face(f);
    if (library) FT_Done_FreeType(library);
  }

  // The pixel width of `text` in font `font` at `px` pixels (advances, no kerning: what draw uses).
  int measure(int font, int px, const std::string& text) const {
    FT_Set_Pixel_Sizes(faces[font], 0, (FT_UInt)px);
    int pen = 0;
    for (unsigned char ch : text) {
      if (FT_Load_Char(faces[font], ch, FT_LOAD_DEFAULT) == 0) pen += (int)(faces[font]->glyph->advance.x >> 6);
    }
    return pen;
  }

  // Line height in pixels (ascender - descender) at `px`.
  int lineHeight(int font, int px) const {
    FT_Set_Pixel_Sizes(faces[font], 0, (FT_UInt)px);
    const FT_Size_Metrics& m = faces[font]->size->metrics;
    return (int)((m.ascender - m.descender) >> 6);
  }

  // Draws `text` with its line box's top-left corner at (x, y) into `c` (coverage, max-combined).
  void draw(int font, int px, const std::string& text, int x, int y, Coverage& c) const {
    FT_Face face = faces[font];
    FT_Set_Pixel_Sizes(face, 0, (FT_UInt)px);
    const int baseline = y + (int)(face->size->metrics.ascender >> 6);
    int pen = x;
    for (unsigned char ch : text) {
      if (FT_Load_Char(face, ch, FT_LOAD_RENDER) != 0) continue;
      const FT_GlyphSlot g = face->glyph;
      const FT_Bitmap& bm = g->bitmap;
      for (unsigned r = 0; r < bm.rows; ++r) {
        for (unsigned col = 0; col < bm.width; ++col) {
          const int xx = pen + g->bitmap_left + (int)col, yy = baseline - g->bitmap_top + (int)r;
          if (xx < 0 || yy < 0 || xx >= c.width || yy >= c.height) continue;
          float& dst = c.a[(size_t)yy * c.width + xx];
          dst = std::max(dst, (float)bm.buffer[r * bm.pitch + col] / 255.0f);
        }
      }
      pen += (int)(g->advance.x >> 6);
    }
  }

  // Words appended while the line stays within `maxWidth` pixels at `px`; at least one token.
  std::string makeLine(int font, int px, int maxWidth, std::mt19937_64& rng) const {
    std::string line = nextToken(rng);
    for (int tries = 0; tries < 40; ++tries) {
      const std::string next = line + " " + nextToken(rng);
      if (measure(font, px, next) > maxWidth) {
        if (rng() % 3 == 0) break;  // some lines end short of the edge
        continue;
      }
      line = next;
    }
    while (line.size() > 1 && measure(font, px, line) > maxWidth) line.pop_back();
    return line;
  }
};

FontTextRenderer::FontTextRenderer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
FontTextRenderer::~FontTextRenderer() = default;

std::unique_ptr<FontTextRenderer> FontTextRenderer::open(std::string* error) {
  const char* env = std::getenv("QS_FONT_DIR");
  const std::string dir = env ? env : "/usr/share/fonts/truetype/dejavu";
  auto impl = std::make_unique<Impl>();
  if (FT_Init_FreeType(&impl->library) != 0) {
    if (error) *error = "FreeType: FT_Init_FreeType failed";
    return nullptr;
  }
  for (int i = 0; i < kFonts; ++i) {
    const std::string path = dir + "/" + kFontFiles[i];
    if (!std::filesystem::exists(path)) {
      if (error)
        *error = path + ": font missing (install Debian's fonts-dejavu-core: scripts/setup.sh, or set QS_FONT_DIR)";
      return nullptr;
    }
    if (const FT_Error e = FT_New_Face(impl->library, path.c_str(), 0, &impl->faces[i]); e != 0) {
      if (error) *error = path + ": FreeType cannot open the font (error " + std::to_string(e) + ")";
      return nullptr;
    }
  }
  return std::unique_ptr<FontTextRenderer>(new FontTextRenderer(std::move(impl)));
}

RenderedText FontTextRenderer::renderLine(int width, int height, uint64_t seed) const {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  static constexpr int kSizes[] = {14, 18, 24, 32, 40};
  const int font = (int)(rng() % kFonts), px = kSizes[rng() % 5];
  // The line box plus a margin of 10-25 % of it above and below, scaled to `height`.
  const int box = m_impl->lineHeight(font, px);
  const int margin = (int)std::lround(box * (0.10 + 0.15 * (double)(rng() % 100) / 100.0));
  const int srcHeight = box + 2 * margin;
  const double scale = (double)height / (double)srcHeight;
  const int left = (int)(rng() % 8);
  const int maxWidth = (int)((double)(width - left - 4) / scale);
  RenderedText out;
  const std::string text = m_impl->makeLine(font, px, maxWidth, rng);
  Coverage src{(int)std::ceil((double)width / scale), srcHeight, {}};
  src.a.assign((size_t)src.width * src.height, 0.0f);
  m_impl->draw(font, px, text, (int)((double)left / scale), margin, src);
  out = compose(resize(src, width, height), rng);
  out.lines = {text};
  return out;
}

RenderedText FontTextRenderer::renderPage(int width, int height, uint64_t seed) const {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 2);
  Coverage page{width, height, std::vector<float>((size_t)width * height, 0.0f)};
  std::vector<std::string> lines;
  int y = 4 + (int)(rng() % 24);
  while (true) {
    const int font = (int)(rng() % kFonts), px = 12 + (int)(rng() % 15);
    const int box = m_impl->lineHeight(font, px);
    if (y + box > height - 4) break;
    const int x = 4 + (int)(rng() % (uint64_t)std::max(1, width / 3));
    const int maxWidth = std::max(px, (int)((double)(width - x - 4) * (0.4 + 0.6 * (double)(rng() % 100) / 100.0)));
    const std::string text = m_impl->makeLine(font, px, maxWidth, rng);
    m_impl->draw(font, px, text, x, y, page);
    lines.push_back(text);
    y += box + 2 + (int)(rng() % (uint64_t)(box * 2));
  }
  RenderedText out = compose(page, rng);
  out.lines = std::move(lines);
  return out;
}

std::vector<std::vector<std::string>> writeFontTextImages(const std::string& dir, int count, int width, int height,
                                                          uint64_t seed, bool pages, std::string* error) {
  auto renderer = FontTextRenderer::open(error);
  if (!renderer) return {};
  std::filesystem::create_directories(dir);
  std::ofstream labels(dir + "/labels.txt");
  std::vector<std::vector<std::string>> all;
  for (int i = 0; i < count; ++i) {
    const RenderedText t = pages ? renderer->renderPage(width, height, seed + (uint64_t)i)
                                 : renderer->renderLine(width, height, seed + (uint64_t)i);
    char name[64];
    std::snprintf(name, sizeof name, "%s_%03d.png", pages ? "page" : "line", i);
    if (!stbi_write_png((dir + "/" + name).c_str(), t.width, t.height, 3, t.rgb.data(), t.width * 3)) {
      if (error) *error = dir + "/" + name + ": cannot write the PNG";
      return {};
    }
    labels << name << '\t';
    for (size_t k = 0; k < t.lines.size(); ++k) labels << (k ? " | " : "") << t.lines[k];
    labels << '\n';
    all.push_back(t.lines);
  }
  if (!labels) {
    if (error) *error = dir + "/labels.txt: cannot write";
    return {};
  }
  return all;
}

}  // namespace qs::test
