// NumPy .npy/.npz reader and writer. Format reference: numpy/lib/format.py (NEP 1).
// Zip archives go through libzip; nothing here parses zip structures by hand.
#include "core/io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string_view>


#include "core/io/npy_detail.h"

namespace qs::npy_detail {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr bool kNativeLittle = std::endian::native == std::endian::little;

// ---------------------------------------------------------------------------------------------
// Messages

/// Escapes control and non-ASCII bytes so that a message stays on one line.
std::string printable(std::string_view s, size_t maxLen) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= maxLen) {
      out += "...";
      break;
    }
    unsigned char c = (unsigned char)s[i];
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += (char)c;
    }
  }
  return out;
}

/// "<where>: <reason>", guaranteed to be one line.
Status fail(StatusCode code, const std::string& where, const std::string& reason) {
  return Status(code, printable(where, 4096) + ": " + printable(reason, 4096));
}

std::string errnoText(int e) { return std::strerror(e); }


// ---------------------------------------------------------------------------------------------
// Byte streams the reader pulls from: a file descriptor, a memory buffer, a zip member.

class FdStream final : public ByteStream {
 public:
  explicit FdStream(int fd) : m_fd(fd) {}
  int64_t read(void* dst, size_t n) override {
    size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    for (;;) {
      ssize_t r = ::read(m_fd, dst, chunk);
      if (r >= 0) return (int64_t)r;
      if (errno == EINTR) continue;
      m_errno = errno;
      return -1;
    }
  }
  std::string errorText() const override { return "read failed: " + errnoText(m_errno); }

 private:
  int m_fd;
  int m_errno = 0;
};

class MemoryStream final : public ByteStream {
 public:
  MemoryStream(const void* data, size_t size) : m_data(static_cast<const char*>(data)), m_size(size) {}
  int64_t read(void* dst, size_t n) override {
    size_t k = std::min(n, m_size - m_pos);
    if (k) std::memcpy(dst, m_data + m_pos, k);
    m_pos += k;
    return (int64_t)k;
  }
  std::string errorText() const override { return "read failed"; }

 private:
  const char* m_data;
  size_t m_size;
  size_t m_pos = 0;
};

// ---------------------------------------------------------------------------------------------
// Header dict: "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" — a Python literal,
// parsed strictly: exactly these three keys, each once; descr a string, fortran_order a bool,
// shape a tuple of non-negative ints.

struct NpyHeader {
  std::string descr;
  bool fortranOrder = false;
  Shape shape;
};

class HeaderParser {
 public:
  explicit HeaderParser(std::string_view s) : m_s(s) {}

  /// Empty string on success, else the reason.
  std::string parse(NpyHeader& out) {
    bool haveDescr = false, haveFortran = false, haveShape = false;
    if (!eat('{')) return "expected '{'";
    for (;;) {
      if (eat('}')) break;
      std::string key;
      if (!parseString(key)) return "expected a quoted key or '}'" + at();
      if (!eat(':')) return "expected ':' after key '" + key + "'";
      if (key == "descr") {
        if (haveDescr) return "duplicate key 'descr'";
        haveDescr = true;
        skipWs();
        if (m_i < m_s.size() && (m_s[m_i] == '[' || m_s[m_i] == '{'))
          return "structured dtypes (descr is a list) are not supported";
        if (!parseString(out.descr)) return "'descr' is not a string" + at();
      } else if (key == "fortran_order") {
        if (haveFortran) return "duplicate key 'fortran_order'";
        haveFortran = true;
        std::string id = parseIdent();
        if (id == "True") {
          out.fortranOrder = true;
        } else if (id == "False") {
          out.fortranOrder = false;
        } else {
          return "'fortran_order' is not True or False" + at();
        }
      } else if (key == "shape") {
        if (haveShape) return "duplicate key 'shape'";
        haveShape = true;
        std::string e = parseShape(out.shape);
        if (!e.empty()) return e;
      } else {
        return "unexpected key '" + key + "'";
      }
      if (eat('}')) break;
      if (!eat(',')) return "expected ',' or '}'" + at();
    }
    skipWs();
    if (m_i != m_s.size()) return "unexpected text after the closing '}'" + at();
    if (!haveDescr) return "missing key 'descr'";
    if (!haveFortran) return "missing key 'fortran_order'";
    if (!haveShape) return "missing key 'shape'";
    return {};
  }

 private:
  std::string at() const {
    return " at offset " + std::to_string(m_i) + " near '" + std::string(m_s.substr(m_i, 20)) + "'";
  }
  void skipWs() {
    while (m_i < m_s.size() && (m_s[m_i] == ' ' || m_s[m_i] == '\t' || m_s[m_i] == '\n' || m_s[m_i] == '\r')) ++m_i;
  }
  bool eat(char c) {
    skipWs();
    if (m_i < m_s.size() && m_s[m_i] == c) {
      ++m_i;
      return true;
    }
    return false;
  }
  bool parseString(std::string& out) {
    skipWs();
    if (m_i >= m_s.size() || (m_s[m_i] != '\'' && m_s[m_i] != '"')) return false;
    char q = m_s[m_i];
    size_t end = m_s.find(q, m_i + 1);
    if (end == std::string_view::npos) return false;
    std::string_view body = m_s.substr(m_i + 1, end - m_i - 1);
    if (body.find('\\') != std::string_view::npos || body.find('\n') != std::string_view::npos) return false;
    out.assign(body);
    m_i = end + 1;
    return true;
  }
  std::string parseIdent() {
    skipWs();
    size_t b = m_i;
    while (m_i < m_s.size() && (std::isalpha((unsigned char)m_s[m_i]) || m_s[m_i] == '_')) ++m_i;
    return std::string(m_s.substr(b, m_i - b));
  }
  /// Non-negative decimal integer (an old Python 2 'L' suffix is accepted).
  std::string parseDim(int64_t& out) {
    skipWs();
    size_t b = m_i;
    if (m_i < m_s.size() && m_s[m_i] == '-') return "negative dimension in 'shape'" + at();
    uint64_t v = 0;
    while (m_i < m_s.size() && m_s[m_i] >= '0' && m_s[m_i] <= '9') {
      unsigned d = (unsigned)(m_s[m_i] - '0');
      if (v > ((uint64_t)INT64_MAX - d) / 10) return "dimension in 'shape' does not fit in int64" + at();
      v = v * 10 + d;
      ++m_i;
    }
    if (m_i == b) return "'shape' is not a tuple of integers" + at();
    if (m_i < m_s.size() && m_s[m_i] == 'L') ++m_i;
    out = (int64_t)v;
    return {};
  }
  std::string parseShape(Shape& shape) {
    shape.clear();
    if (!eat('(')) return "'shape' is not a tuple" + at();
    if (eat(')')) return {};
    bool trailingComma = false;
    for (;;) {
      int64_t d = 0;
      std::string e = parseDim(d);
      if (!e.empty()) return e;
      shape.push_back(d);
      if (shape.size() > 64) return "'shape' has more than 64 dimensions";
      trailingComma = false;
      if (eat(')')) break;
      if (!eat(',')) return "expected ',' or ')' in 'shape'" + at();
      trailingComma = true;
      if (eat(')')) break;
    }
    if (shape.size() == 1 && !trailingComma) return "'shape' is not a tuple (a 1-tuple needs a trailing comma)";
    return {};
  }

  std::string_view m_s;
  size_t m_i = 0;
};

// ---------------------------------------------------------------------------------------------
// dtype descr <-> DType

struct DescrInfo {
  DType dtype = DType::Undefined;
  bool swap = false;
};

/// Empty reason on success.
std::string decodeDescr(const std::string& descr, DescrInfo& out, StatusCode& code) {
  code = StatusCode::Unsupported;
  std::string_view d = descr;
  char order = '=';
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
    order = d[0];
    d.remove_prefix(1);
  }
  std::string supported = "; supported: <f2 <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1 (and '>' variants)";
  if (d.empty()) {
    code = StatusCode::InvalidArgument;
    return "empty dtype descr '" + descr + "'";
  }
  char kind = d[0];
  std::string_view sizeText = d.substr(1);
  static const std::pair<const char*, DType> table[] = {
      {"f2", DType::Float16}, {"f4", DType::Float},  {"f8", DType::Double}, {"i1", DType::Int8},
      {"i2", DType::Int16},   {"i4", DType::Int32},  {"i8", DType::Int64},  {"u1", DType::UInt8},
      {"u2", DType::UInt16},  {"u4", DType::UInt32}, {"u8", DType::UInt64}, {"b1", DType::Bool},
  };
  for (const auto& [name, dt] : table) {
    if (d == name) {
      out.dtype = dt;
      bool fileLittle = order == '<' || (order != '>' && kNativeLittle);
      out.swap = dtypeSize(dt) > 1 && fileLittle != kNativeLittle;
      return {};
    }
  }
  const char* what = nullptr;
  switch (kind) {
    case 'O': what = "Python objects"; break;
    case 'U': what = "unicode strings"; break;
    case 'S': case 'a': what = "byte strings"; break;
    case 'c': what = "complex numbers"; break;
    case 'V': what = "raw void records"; break;
    case 'M': what = "datetime64"; break;
    case 'm': what = "timedelta64"; break;
    case 'f': what = sizeText == "16" || sizeText == "12" ? "long double" : "floating point of this size"; break;
    case 'i': case 'u': what = "integers of this size"; break;
    case 'b': what = "booleans of this size"; break;
    default: what = nullptr;
  }
  if (what) return "unsupported dtype descr '" + descr + "' (" + what + ")" + supported;
  return "unknown dtype descr '" + descr + "'" + supported;
}

// ---------------------------------------------------------------------------------------------
// Post-processing of raw data

void byteSwapInPlace(void* data, size_t count, size_t itemsize) {
  if (itemsize == 2) {
    auto* p = static_cast<uint16_t*>(data);
    for (size_t i = 0; i < count; ++i) p[i] = __builtin_bswap16(p[i]);
  } else if (itemsize == 4) {
    auto* p = static_cast<uint32_t*>(data);
    for (size_t i = 0; i < count; ++i) p[i] = __builtin_bswap32(p[i]);
  } else if (itemsize == 8) {
    auto* p = static_cast<uint64_t*>(data);
    for (size_t i = 0; i < count; ++i) p[i] = __builtin_bswap64(p[i]);
  }
}

/// dst (C order) <- src (Fortran order) for `shape`; elements are opaque words of type W.
template <class W>
void fortranToC(const W* src, W* dst, const Shape& shape) {
  const size_t r = shape.size();
  std::vector<int64_t> fstride(r, 1), idx(r, 0);
  for (size_t k = 1; k < r; ++k) fstride[k] = fstride[k - 1] * shape[k - 1];
  const int64_t inner = shape[r - 1];
  const int64_t innerStride = fstride[r - 1];
  int64_t base = 0;  // sum over k < r-1 of idx[k] * fstride[k]
  const int64_t rows = numelOf(shape) / inner;
  for (int64_t row = 0; row < rows; ++row) {
    const W* s = src + base;
    for (int64_t j = 0; j < inner; ++j) dst[j] = s[j * innerStride];
    dst += inner;
    for (int k = (int)r - 2; k >= 0; --k) {  // odometer over the outer dims
      if (++idx[(size_t)k] < shape[(size_t)k]) {
        base += fstride[(size_t)k];
        break;
      }
      base -= (idx[(size_t)k] - 1) * fstride[(size_t)k];
      idx[(size_t)k] = 0;
    }
  }
}

Tensor fortranToCTensor(const Tensor& t) {
  Tensor out(t.dtype(), t.shape());
  switch (dtypeSize(t.dtype())) {
    case 1: fortranToC(t.data<uint8_t>(), out.data<uint8_t>(), t.shape()); break;
    case 2: fortranToC(t.data<uint16_t>(), out.data<uint16_t>(), t.shape()); break;
    case 4: fortranToC(t.data<uint32_t>(), out.data<uint32_t>(), t.shape()); break;
    case 8: fortranToC(t.data<uint64_t>(), out.data<uint64_t>(), t.shape()); break;
    default: break;
  }
  return out;
}

uint32_t loadLe(const unsigned char* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---------------------------------------------------------------------------------------------
// The reader: `total` is the exact number of bytes the stream holds.

Result<Tensor> readNpyStream(ByteStream& in, uint64_t total, const std::string& where, size_t maxBytes) {
  const StatusCode bad = StatusCode::InvalidArgument;
  if (total == 0) return fail(bad, where, "empty file (0 bytes), not a .npy file");

  unsigned char pre[12];
  const size_t preWant = (size_t)std::min<uint64_t>(total, 12);
  int64_t got = in.readFully(pre, preWant);
  if (got < 0) return fail(StatusCode::IoError, where, in.errorText());
  if ((size_t)got != preWant) return fail(bad, where, "truncated file while reading the header");
  const size_t cmp = std::min<size_t>(preWant, kMagicLen);
  if (std::memcmp(pre, kMagic, cmp) != 0) return fail(bad, where, "not a .npy file (bad magic, expected \\x93NUMPY)");
  if (preWant < 8) return fail(bad, where, "truncated header (file is " + std::to_string(total) + " bytes)");
  const int major = pre[6], minor = pre[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return fail(StatusCode::Unsupported, where,
                "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                    " (supported: 1.0, 2.0, 3.0)");
  const size_t lenBytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + lenBytes;
  if (preWant < prefix) return fail(bad, where, "truncated header (file is " + std::to_string(total) + " bytes)");
  const uint64_t headerLen = loadLe(pre + 8, (int)lenBytes);
  if (prefix + headerLen > total)
    return fail(bad, where,
                "truncated header: header length " + std::to_string(headerLen) + " extends beyond the end of the " +
                    std::to_string(total) + "-byte file");
  if (headerLen > kMaxHeaderLen)
    return fail(bad, where, "header length " + std::to_string(headerLen) + " exceeds the 1 MiB limit");

  std::string headerText((size_t)headerLen, '\0');
  // The prefix buffer may already hold the first bytes of the header (version 1.0: two of them).
  size_t already = preWant - prefix;
  already = std::min<size_t>(already, (size_t)headerLen);
  std::memcpy(headerText.data(), pre + prefix, already);
  if (already < headerLen) {
    got = in.readFully(headerText.data() + already, (size_t)headerLen - already);
    if (got < 0) return fail(StatusCode::IoError, where, in.errorText());
    if ((size_t)got != headerLen - already) return fail(bad, where, "truncated header");
  }
  const size_t leftoverInPre = preWant - prefix - already;  // header shorter than what we read ahead
  if (headerText.find('\0') != std::string::npos) return fail(bad, where, "malformed header: contains a NUL byte");

  NpyHeader h;
  std::string reason = HeaderParser(headerText).parse(h);
  if (!reason.empty()) {
    StatusCode code = reason.find("not supported") != std::string::npos ? StatusCode::Unsupported : bad;
    return fail(code, where, "malformed header: " + reason + " in " + printable(headerText, 120));
  }
  DescrInfo di;
  StatusCode dcode;
  reason = decodeDescr(h.descr, di, dcode);
  if (!reason.empty()) return fail(dcode, where, reason);

  const size_t itemsize = dtypeSize(di.dtype);
  const std::string what = "shape " + shapeToString(h.shape) + " of '" + h.descr + "'";
  const int64_t numel = checkedNumel(h.shape, INT64_MAX / (int64_t)itemsize);
  if (numel < 0) return fail(bad, where, what + ": element count overflows");
  const uint64_t dataBytes = (uint64_t)numel * itemsize;
  if (dataBytes > maxBytes)
    return fail(StatusCode::ResourceLimit, where,
                what + " declares " + std::to_string(dataBytes) + " bytes, over the limit of " +
                    std::to_string(maxBytes) + " bytes");
  const uint64_t dataStart = prefix + headerLen;
  const uint64_t available = total - dataStart;
  if (available < dataBytes)
    return fail(bad, where,
                "truncated data: " + what + " needs " + std::to_string(dataBytes) + " bytes but the file holds " +
                    std::to_string(available));
  if (available > dataBytes)
    return fail(bad, where,
                what + " needs " + std::to_string(dataBytes) + " bytes but " + std::to_string(available) +
                    " bytes follow the header (trailing data)");

  Tensor t;
  try {
    t = Tensor(di.dtype, h.shape);
  } catch (const std::bad_alloc&) {
    return fail(StatusCode::ResourceLimit, where, "out of memory allocating " + std::to_string(dataBytes) + " bytes");
  }
  char* dst = static_cast<char*>(t.raw());
  size_t have = std::min<size_t>(leftoverInPre, (size_t)dataBytes);
  std::memcpy(dst, pre + prefix + already, have);
  if (have < dataBytes) {
    got = in.readFully(dst + have, (size_t)dataBytes - have);
    if (got < 0) return fail(StatusCode::IoError, where, in.errorText());
    if ((uint64_t)got != dataBytes - have)
      return fail(bad, where, "truncated data: " + what + " needs " + std::to_string(dataBytes) + " bytes");
  }
  // Read to the end: catches a file that grew, and makes libzip verify the member's CRC.
  char extra;
  got = in.read(&extra, 1);
  if (got < 0) return fail(bad, where, in.errorText());
  if (got > 0) return fail(bad, where, "trailing data after " + std::to_string(dataBytes) + " data bytes");

  if (di.dtype == DType::Bool) {
    auto* p = t.data<uint8_t>();
    for (int64_t i = 0; i < numel; ++i) p[i] = p[i] != 0;
  }
  if (di.swap) byteSwapInPlace(t.raw(), (size_t)numel, itemsize);
  if (h.fortranOrder && h.shape.size() > 1 && numel > 1) {
    try {
      t = fortranToCTensor(t);
    } catch (const std::bad_alloc&) {
      return fail(StatusCode::ResourceLimit, where,
                  "out of memory transposing a fortran_order array of " + std::to_string(dataBytes) + " bytes");
    }
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Writer helpers

Result<std::string> npyHeaderFor(const Tensor& t, const std::string& where) {
  if (t.empty()) return fail(StatusCode::InvalidArgument, where, "cannot write an empty (undefined) tensor");
  const char end = kNativeLittle ? '<' : '>';
  std::string descr;
  switch (t.dtype()) {
    case DType::Float16: descr = std::string(1, end) + "f2"; break;
    case DType::Float: descr = std::string(1, end) + "f4"; break;
    case DType::Double: descr = std::string(1, end) + "f8"; break;
    case DType::Int8: descr = "|i1"; break;
    case DType::Int16: descr = std::string(1, end) + "i2"; break;
    case DType::Int32: descr = std::string(1, end) + "i4"; break;
    case DType::Int64: descr = std::string(1, end) + "i8"; break;
    case DType::UInt8: descr = "|u1"; break;
    case DType::UInt16: descr = std::string(1, end) + "u2"; break;
    case DType::UInt32: descr = std::string(1, end) + "u4"; break;
    case DType::UInt64: descr = std::string(1, end) + "u8"; break;
    case DType::Bool: descr = "|b1"; break;
    default:
      return fail(StatusCode::Unsupported, where,
                  "dtype " + dtypeName(t.dtype()) + " has no NumPy equivalent; cannot write it to .npy");
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) {
    if (i) shape += ", ";
    shape += std::to_string(t.shape()[i]);
  }
  if (t.shape().size() == 1) shape += ",";
  shape += ")";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Like numpy: room to grow the first axis in place (GROWTH_AXIS_MAX_DIGITS = 21).
  if (!t.shape().empty()) {
    size_t digits = std::to_string(t.shape()[0]).size();
    if (digits < 21) dict.append(21 - digits, ' ');
  }
  const size_t hlen = dict.size() + 1;  // + '\n'
  int major = 1;
  size_t lenBytes = 2;
  size_t padlen = 64 - ((kMagicLen + 2 + lenBytes + hlen) % 64);
  if (hlen + padlen > 65535) {
    major = 2;
    lenBytes = 4;
    padlen = 64 - ((kMagicLen + 2 + lenBytes + hlen) % 64);
  }
  const uint64_t total = hlen + padlen;
  std::string out(kMagic, kMagicLen);
  out += (char)major;
  out += (char)0;
  for (size_t i = 0; i < lenBytes; ++i) out += (char)((total >> (8 * i)) & 0xff);
  out += dict;
  out.append(padlen, ' ');
  out += '\n';
  return out;
}

Status writeAllFd(int fd, const void* data, size_t n, const std::string& where, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return fail(StatusCode::IoError, where, "write to '" + tmp + "' failed: " + errnoText(errno));
    }
    p += w;
    n -= (size_t)w;
  }
  return Status::ok();
}

Status atomicWrite(const std::string& path, const std::function<Status(int& fd, const std::string& tmp)>& fill) {
  std::string tmpl = path + ".tmp-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = ::mkstemp(buf.data());
  if (fd < 0) return fail(StatusCode::IoError, path, "cannot create temporary file '" + tmpl + "': " + errnoText(errno));
  const std::string tmp(buf.data());
  ::fchmod(fd, 0644);  // mkstemp makes 0600; data files are normally world-readable
  Status st;
  try {
    st = fill(fd, tmp);
  } catch (const std::exception& e) {
    st = fail(StatusCode::RuntimeError, path, std::string("unexpected error: ") + e.what());
  }
  if (st.isOk() && fd >= 0 && ::fsync(fd) != 0)
    st = fail(StatusCode::IoError, path, "fsync of '" + tmp + "' failed: " + errnoText(errno));
  if (fd >= 0 && ::close(fd) != 0 && st.isOk())
    st = fail(StatusCode::IoError, path, "close of '" + tmp + "' failed: " + errnoText(errno));
  if (st.isOk() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = fail(StatusCode::IoError, path, "cannot rename '" + tmp + "' to it: " + errnoText(errno));
  if (!st.isOk()) ::unlink(tmp.c_str());
  return st;
}

}  // namespace qs::npy_detail

namespace qs {

using namespace npy_detail;

Result<Tensor> readNpy(const std::string& path, size_t maxBytes) {
  return guarded(path, [&]() -> Result<Tensor> {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(StatusCode::IoError, path, "cannot open: " + errnoText(errno));
    struct stat sb;
    if (::fstat(fd, &sb) != 0) {
      int e = errno;
      ::close(fd);
      return fail(StatusCode::IoError, path, "cannot stat: " + errnoText(e));
    }
    if (!S_ISREG(sb.st_mode)) {
      ::close(fd);
      return fail(StatusCode::IoError, path, "not a regular file");
    }
    FdStream stream(fd);
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    return readNpyStream(stream, (uint64_t)sb.st_size, path, maxBytes);
  });
}

Result<Tensor> parseNpy(const void* data, size_t size, const std::string& whereForMessages, size_t maxBytes) {
  return guarded(whereForMessages, [&]() -> Result<Tensor> {
    if (!data && size) return fail(StatusCode::InvalidArgument, whereForMessages, "null buffer");
    MemoryStream stream(data, size);
    return readNpyStream(stream, size, whereForMessages, maxBytes);
  });
}

Status writeNpy(const std::string& path, const Tensor& t) {
  return guarded(path, [&]() -> Status {
    Result<std::string> header = npyHeaderFor(t, path);
    if (!header.isOk()) return header.status();
    return atomicWrite(path, [&](int& fd, const std::string& tmp) -> Status {
      QS_RETURN_IF_ERROR(writeAllFd(fd, header->data(), header->size(), path, tmp));
      return writeAllFd(fd, t.raw(), t.byteSize(), path, tmp);
    });
  });
}

}  // namespace qs
