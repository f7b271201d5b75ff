#include "core/util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace qs {

namespace fs = std::filesystem;

Status writeTemporaryFile(const std::string& path, const std::string& bytes, std::string& tmp) {
  tmp = path + ".tmp-XXXXXX";
  int fd = mkstemp(tmp.data());
  if (fd < 0) {
    tmp.clear();
    return ioError(path + ": cannot write: " + std::strerror(errno));
  }
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= (size_t)n;
  }
  int err = left ? errno : 0;
  if (!err && fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err) fchmodat(AT_FDCWD, tmp.c_str(), 0644, 0);  // mkstemp makes 0600
  if (err || left) return ioError(path + ": write failed: " + std::strerror(err ? err : EIO));
  return Status::ok();
}

Status writeFileAtomic(const std::string& path, const std::string& contents) {
  std::string tmp;
  Status st = writeTemporaryFile(path, contents, tmp);
  std::error_code ec;
  if (st) {
    fs::rename(tmp, path, ec);
    if (ec) st = ioError(path + ": cannot replace the file: " + ec.message());
  }
  if (!st && !tmp.empty()) fs::remove(tmp, ec);
  return st;
}

}  // namespace qs
