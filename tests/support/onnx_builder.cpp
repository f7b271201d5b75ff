#include "tests/support/onnx_builder.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace qs::test {

void OnnxBuilder::save(const std::string& path) const { writeBytes(path, bytes()); }

std::string makeTempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("qs-" + tag + "-XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), (std::streamsize)bytes.size());
}

}  // namespace qs::test
