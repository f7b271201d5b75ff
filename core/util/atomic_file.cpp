#include "core/util/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

namespace qs {

namespace fs = std::filesystem;

Status writeAtomically(const std::string& path, const std::function<Status(const std::string&)>& write) {
  std::random_device rd;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".tmp-%08x", (unsigned)rd());
  std::string tmp = path + suffix;
  Status st = write(tmp);
  std::error_code ec;
  if (!st) {
    fs::remove(tmp, ec);
    return st;
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return ioError(path + ": cannot replace the file: " + ec.message());
  }
  return Status::ok();
}

Status writeFileAtomic(const std::string& path, const std::string& contents) {
  return writeAtomically(path, [&](const std::string& tmp) -> Status {
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return ioError(path + ": cannot write: " + std::strerror(errno));
    bool ok = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
    ok = (std::fflush(f) == 0) && ok;
    ok = (fsync(fileno(f)) == 0) && ok;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) return ioError(path + ": write failed: " + std::strerror(errno));
    return Status::ok();
  });
}

}  // namespace qs
