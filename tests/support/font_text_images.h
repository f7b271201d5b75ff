// Printed text rendered with real TrueType fonts (DejaVu through FreeType): lines of English words,
// digits and punctuation like those of invoices and reports, dark on light, a few fonts and sizes,
// a little blur and noise. Two shapes: single lines scaled to a given height (the crops PP-OCR's
// rec reads, 48 pixels high) and pages with several lines at random positions (det's input). Each
// image comes with its ground-truth strings, so a recognizer's accuracy can be measured against
// the truth, not only against another model. Seeded, so tests are repeatable. (text_images.h is
// the older stb_easy_font set: blocky glyphs no OCR model was trained on.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qs::test {

/// RGB, row-major, width*height*3 bytes, and the text it shows: one string per line, top to bottom.
struct RenderedText {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  std::vector<std::string> lines;
};

/// The DejaVu fonts of Debian's fonts-dejavu-core (Sans, Sans Bold, Serif, Serif Bold, Sans Mono),
/// read from $QS_FONT_DIR, else /usr/share/fonts/truetype/dejavu.
class FontTextRenderer {
 public:
  /// nullptr, with a one-line `error` naming the missing file or FreeType's failure, when the fonts
  /// cannot be opened.
  static std::unique_ptr<FontTextRenderer> open(std::string* error);
  ~FontTextRenderer();
  FontTextRenderer(const FontTextRenderer&) = delete;
  FontTextRenderer& operator=(const FontTextRenderer&) = delete;

  /// One line of text, rendered at a font size of 14 to 40 pixels and scaled to `height`, on a
  /// `width` x `height` light background (the text left-aligned, at most `width` wide), as a text
  /// detector's crop would be. ASCII only: every character is in PP-OCR's dictionary.
  RenderedText renderLine(int width, int height, uint64_t seed) const;
  /// A `width` x `height` page with several lines (font sizes 12 to 26 pixels, not scaled) at random
  /// positions, not overlapping.
  RenderedText renderPage(int width, int height, uint64_t seed) const;

 private:
  struct Impl;
  explicit FontTextRenderer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

/// Writes `count` images (line_000.png, ... or page_000.png, ...; renderLine or renderPage with
/// seeds seed, seed + 1, ...) into `dir` (created if needed), and `dir`/labels.txt, one line per
/// image: the file name, a tab and its lines joined by " | ". Returns the images' lines in order;
/// empty, with `error` set, when the fonts are missing or a file cannot be written.
std::vector<std::vector<std::string>> writeFontTextImages(const std::string& dir, int count, int width, int height,
                                                          uint64_t seed, bool pages, std::string* error);

}  // namespace qs::test
