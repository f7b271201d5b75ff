#include "tests/support/onnx_builder.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace qs::test {

void OnnxBuilder::save(const std::string& path) const { writeBytes(path, bytes()); }

namespace {

// The folders makeTempDir() made, removed when the test process exits (QS_KEEP_TEMP=1 keeps them, to
// look at a failing test's files): every run of the suite used to leave its folders in the temp dir.
struct TempDirs {
  std::mutex mutex;
  std::vector<std::string> dirs;
  ~TempDirs() {
    const char* keep = std::getenv("QS_KEEP_TEMP");
    if (keep && *keep && std::string(keep) != "0") return;
    std::error_code ec;
    for (const std::string& d : dirs) std::filesystem::remove_all(d, ec);
  }
};

TempDirs& tempDirs() {
  static TempDirs t;
  return t;
}

}  // namespace

std::string makeTempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("qs-" + tag + "-XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  TempDirs& t = tempDirs();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.dirs.push_back(tmpl);
  return tmpl;
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), (std::streamsize)bytes.size());
}

}  // namespace qs::test
