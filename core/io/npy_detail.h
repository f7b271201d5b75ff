// Internals shared by the .npy reader and writer (npy.cpp) and the .npz archive code (npz.cpp):
// one-line messages, the byte streams the reader pulls from, the .npy member reader and header
// writer, and the atomic file writer. Not part of the core's API: include core/io/npy.h.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <string_view>

#include "core/ir/tensor.h"
#include "core/util/status.h"

namespace qs::npy_detail {

// Real headers are well under 1 KiB; numpy itself refuses more than 10000 bytes by default.
constexpr uint64_t kMaxHeaderLen = uint64_t(1) << 20;

/// Escapes control and non-ASCII bytes so that a message stays on one line.
std::string printable(std::string_view s, size_t maxLen = 200);
/// "<where>: <reason>", guaranteed to be one line.
Status fail(StatusCode code, const std::string& where, const std::string& reason);
std::string errnoText(int e);

/// Bytes the reader pulls from: a file descriptor, a memory buffer, a zip member.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  /// Reads up to n bytes; returns the count (less than n only at the end) or -1 on error.
  virtual int64_t read(void* dst, size_t n) = 0;
  virtual std::string errorText() const = 0;

  /// Reads until n bytes or the end; -1 on error.
  int64_t readFully(void* dst, size_t n) {
    size_t got = 0;
    char* p = static_cast<char*>(dst);
    while (got < n) {
      int64_t r = read(p + got, n - got);
      if (r < 0) return -1;
      if (r == 0) break;
      got += (size_t)r;
    }
    return (int64_t)got;
  }
};

/// Reads one .npy image of `total` bytes from `in`; every message starts with `where`.
Result<Tensor> readNpyStream(ByteStream& in, uint64_t total, const std::string& where, size_t maxBytes);
/// The version 1.0 (2.0 when needed) header of `t`, padded to 64 bytes like numpy.
Result<std::string> npyHeaderFor(const Tensor& t, const std::string& where);
/// Writes all of `data` to `fd` (the temporary file `tmp` of `where`).
Status writeAllFd(int fd, const void* data, size_t n, const std::string& where, const std::string& tmp);
/// Creates "<path>.tmp-XXXXXX", lets `fill` write it (given its fd and name), then renames it
/// over `path`. On any failure the temporary file is removed. `fill` may close the fd itself
/// by setting it to -1.
Status atomicWrite(const std::string& path, const std::function<Status(int& fd, const std::string& tmp)>& fill);

/// Runs `f`, turning an exception into a one-line Status.
template <class F>
auto guarded(const std::string& where, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(StatusCode::ResourceLimit, where, "out of memory");
  } catch (const std::exception& e) {
    return fail(StatusCode::RuntimeError, where, std::string("unexpected error: ") + e.what());
  }
}

}  // namespace qs::npy_detail
