// NumPy .npz archives: a zip of .npy members, through libzip (nothing here parses zip
// structures by hand). The members are read and written by the .npy code (npy_detail.h).
#include "core/io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <memory>
#include <set>

#include "core/io/npy_detail.h"

namespace qs {

using namespace npy_detail;

namespace {

std::string zipErrorText(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string s = zip_error_strerror(&e);
  zip_error_fini(&e);
  return s;
}

class ZipMemberStream final : public ByteStream {
 public:
  explicit ZipMemberStream(zip_file_t* f) : m_file(f) {}
  int64_t read(void* dst, size_t n) override {
    zip_int64_t r = zip_fread(m_file, dst, n);
    return r < 0 ? -1 : (int64_t)r;
  }
  std::string errorText() const override { return std::string("corrupt archive member: ") + zip_file_strerror(m_file); }

 private:
  zip_file_t* m_file;
};

// libzip source streaming one .npy member (header then the tensor's bytes) without a copy.
struct NpyEntrySource {
  std::string header;
  const Tensor* tensor = nullptr;
  uint64_t pos = 0;
  zip_error_t error;
  NpyEntrySource() { zip_error_init(&error); }
  ~NpyEntrySource() { zip_error_fini(&error); }
  NpyEntrySource(const NpyEntrySource&) = delete;
  NpyEntrySource& operator=(const NpyEntrySource&) = delete;
  uint64_t size() const { return header.size() + tensor->byteSize(); }
};

zip_int64_t npyEntryCallback(void* userdata, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
  auto* s = static_cast<NpyEntrySource*>(userdata);
  switch (cmd) {
    case ZIP_SOURCE_OPEN:
      s->pos = 0;
      return 0;
    case ZIP_SOURCE_READ: {
      uint64_t total = s->size();
      uint64_t n = std::min<uint64_t>(len, total - s->pos);
      char* out = static_cast<char*>(data);
      uint64_t done = 0;
      if (s->pos < s->header.size()) {
        uint64_t k = std::min<uint64_t>(n, s->header.size() - s->pos);
        std::memcpy(out, s->header.data() + s->pos, (size_t)k);
        done = k;
      }
      if (done < n) {
        uint64_t off = s->pos + done - s->header.size();
        std::memcpy(out + done, static_cast<const char*>(s->tensor->raw()) + off, (size_t)(n - done));
      }
      s->pos += n;
      return (zip_int64_t)n;
    }
    case ZIP_SOURCE_CLOSE:
      return 0;
    case ZIP_SOURCE_STAT: {
      if (len < sizeof(zip_stat_t)) {
        zip_error_set(&s->error, ZIP_ER_INVAL, 0);
        return -1;
      }
      auto* st = static_cast<zip_stat_t*>(data);
      zip_stat_init(st);
      st->size = s->size();
      st->mtime = std::time(nullptr);
      st->valid |= ZIP_STAT_SIZE | ZIP_STAT_MTIME;
      return sizeof(zip_stat_t);
    }
    case ZIP_SOURCE_ERROR:
      return zip_error_to_data(&s->error, data, len);
    case ZIP_SOURCE_FREE:
      return 0;  // owned by writeNpz
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                            ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, ZIP_SOURCE_SUPPORTS, -1);
    default:
      zip_error_set(&s->error, ZIP_ER_OPNOTSUPP, 0);
      return -1;
  }
}

struct ZipDiscard {
  void operator()(zip_t* z) const {
    if (z) zip_discard(z);
  }
};
using ZipPtr = std::unique_ptr<zip_t, ZipDiscard>;

// ---------------------------------------------------------------------------------------------
// npz reading from an open archive

Result<std::vector<NamedTensor>> readArchive(zip_t* za, const std::string& where, size_t maxBytes) {
  std::vector<NamedTensor> out;
  std::set<std::string> seen;
  const zip_int64_t n = zip_get_num_entries(za, 0);
  if (n < 0) return fail(StatusCode::InvalidArgument, where, "cannot list archive entries");
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za, (zip_uint64_t)i, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) || !st.name)
      return fail(StatusCode::InvalidArgument, where,
                  "cannot read archive entry " + std::to_string(i) + ": " + zip_strerror(za));
    const std::string member = st.name;
    const std::string suffix = ".npy";
    if (member.size() <= suffix.size() || member.compare(member.size() - suffix.size(), suffix.size(), suffix) != 0)
      return fail(StatusCode::InvalidArgument, where + ":" + member, "archive member is not a .npy file");
    const std::string key = member.substr(0, member.size() - suffix.size());
    const std::string keyWhere = where + ":" + key;
    if (!seen.insert(key).second) return fail(StatusCode::InvalidArgument, keyWhere, "duplicate key in archive");
    if (!(st.valid & ZIP_STAT_SIZE)) return fail(StatusCode::InvalidArgument, keyWhere, "member size unknown");
    if (st.size > (uint64_t)maxBytes + kMaxHeaderLen + 16)
      return fail(StatusCode::ResourceLimit, keyWhere,
                  "member of " + std::to_string(st.size) + " bytes exceeds the limit of " + std::to_string(maxBytes) +
                      " bytes");
    zip_file_t* zf = zip_fopen_index(za, (zip_uint64_t)i, 0);
    if (!zf)
      return fail(StatusCode::InvalidArgument, keyWhere, std::string("cannot open archive member: ") + zip_strerror(za));
    ZipMemberStream stream(zf);
    Result<Tensor> r = readNpyStream(stream, st.size, keyWhere, maxBytes);
    zip_fclose(zf);
    if (!r.isOk()) return r.status();
    out.push_back({key, std::move(r).value()});
  }
  return out;
}

}  // namespace

Result<std::vector<NamedTensor>> readNpz(const std::string& path, size_t maxBytes) {
  return guarded(path, [&]() -> Result<std::vector<NamedTensor>> {
    struct stat sb;
    if (::stat(path.c_str(), &sb) != 0) return fail(StatusCode::IoError, path, "cannot open: " + errnoText(errno));
    if (!S_ISREG(sb.st_mode)) return fail(StatusCode::IoError, path, "not a regular file");
    if (sb.st_size == 0) return fail(StatusCode::InvalidArgument, path, "empty file (0 bytes), not a zip archive");
    int code = 0;
    ZipPtr za(zip_open(path.c_str(), ZIP_RDONLY, &code));
    if (!za) {
      if (code == ZIP_ER_NOZIP) return fail(StatusCode::InvalidArgument, path, "not a zip archive (.npz)");
      StatusCode sc = (code == ZIP_ER_OPEN || code == ZIP_ER_READ || code == ZIP_ER_NOENT || code == ZIP_ER_SEEK)
                          ? StatusCode::IoError
                          : StatusCode::InvalidArgument;
      return fail(sc, path, "cannot open zip archive: " + zipErrorText(code));
    }
    return readArchive(za.get(), path, maxBytes);
  });
}

Result<std::vector<NamedTensor>> parseNpz(const void* data, size_t size, const std::string& where, size_t maxBytes) {
  return guarded(where, [&]() -> Result<std::vector<NamedTensor>> {
    if (size == 0) return fail(StatusCode::InvalidArgument, where, "empty file (0 bytes), not a zip archive");
    if (!data) return fail(StatusCode::InvalidArgument, where, "null buffer");
    zip_error_t err;
    zip_error_init(&err);
    zip_source_t* src = zip_source_buffer_create(data, size, 0, &err);
    if (!src) {
      std::string m = zip_error_strerror(&err);
      zip_error_fini(&err);
      return fail(StatusCode::InvalidArgument, where, "cannot read zip archive: " + m);
    }
    ZipPtr za(zip_open_from_source(src, ZIP_RDONLY, &err));
    if (!za) {
      int code = zip_error_code_zip(&err);
      std::string m = zip_error_strerror(&err);
      zip_error_fini(&err);
      zip_source_free(src);
      if (code == ZIP_ER_NOZIP) return fail(StatusCode::InvalidArgument, where, "not a zip archive (.npz)");
      return fail(StatusCode::InvalidArgument, where, "cannot open zip archive: " + m);
    }
    zip_error_fini(&err);
    return readArchive(za.get(), where, maxBytes);
  });
}

Status writeNpz(const std::string& path, const std::vector<NamedTensor>& tensors, bool compress) {
  return guarded(path, [&]() -> Status {
    // Validate everything before touching the file system.
    std::vector<std::unique_ptr<NpyEntrySource>> sources;
    std::set<std::string> seen;
    for (const NamedTensor& nt : tensors) {
      const std::string where = path + ":" + nt.name;
      if (nt.name.empty()) return fail(StatusCode::InvalidArgument, where, "empty array name");
      if (nt.name.find('\0') != std::string::npos) return fail(StatusCode::InvalidArgument, where, "NUL in array name");
      if (!seen.insert(nt.name).second) return fail(StatusCode::InvalidArgument, where, "duplicate array name");
      Result<std::string> header = npyHeaderFor(nt.tensor, where);
      if (!header.isOk()) return header.status();
      auto s = std::make_unique<NpyEntrySource>();
      s->header = std::move(header).value();
      s->tensor = &nt.tensor;
      sources.push_back(std::move(s));
    }
    return atomicWrite(path, [&](int& fd, const std::string& tmp) -> Status {
      if (tensors.empty()) {
        // libzip deletes an archive left with no entries; np.savez() writes a bare
        // end-of-central-directory record, so do the same.
        static const char eocd[22] = {'P', 'K', 5, 6};
        return writeAllFd(fd, eocd, sizeof eocd, path, tmp);
      }
      ::close(fd);
      fd = -1;
      int code = 0;
      ZipPtr za(zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
      if (!za) return fail(StatusCode::IoError, path, "cannot create zip archive '" + tmp + "': " + zipErrorText(code));
      for (size_t i = 0; i < tensors.size(); ++i) {
        const std::string where = path + ":" + tensors[i].name;
        zip_source_t* src = zip_source_function(za.get(), npyEntryCallback, sources[i].get());
        if (!src) return fail(StatusCode::IoError, where, std::string("cannot add to archive: ") + zip_strerror(za.get()));
        zip_int64_t idx = zip_file_add(za.get(), (tensors[i].name + ".npy").c_str(), src, ZIP_FL_ENC_UTF_8);
        if (idx < 0) {
          zip_source_free(src);
          return fail(StatusCode::IoError, where, std::string("cannot add to archive: ") + zip_strerror(za.get()));
        }
        if (zip_set_file_compression(za.get(), (zip_uint64_t)idx, compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0)
          return fail(StatusCode::IoError, where, std::string("cannot set compression: ") + zip_strerror(za.get()));
      }
      if (zip_close(za.get()) != 0)
        return fail(StatusCode::IoError, path, "writing zip archive '" + tmp + "' failed: " + zip_strerror(za.get()));
      za.release();  // zip_close freed it
      // Flush the finished archive to disk before the rename.
      int rfd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
      if (rfd >= 0) {
        ::fsync(rfd);
        ::close(rfd);
      }
      return Status::ok();
    });
  });
}

}  // namespace qs
