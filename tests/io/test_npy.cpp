// Tests for core/io/npy: round trips, files written by real NumPy, NumPy reading our files, and
// corrupt inputs. NumPy is driven through /usr/bin/python3; those tests skip without it.
#include "core/io/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/ir/half.h"

namespace fs = std::filesystem;
using namespace qs;

namespace {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    m_path = fs::temp_directory_path() /
             ("qs_io_npy_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(m_path);
    fs::create_directories(m_path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  std::string file(const std::string& name) const { return (m_path / name).string(); }
  const fs::path& path() const { return m_path; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(m_path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path m_path;
};

std::string readBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), (std::streamsize)bytes.size());
}

bool havePythonNumpy() {
  static int cached = -1;
  if (cached < 0) {
    cached = ::access("/usr/bin/python3", X_OK) == 0 &&
             std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  }
  return cached == 1;
}

/// Runs a Python script (numpy imported as np, `d` = the directory) and returns its exit code;
/// the combined output goes to *output.
int runPython(const TempDir& dir, const std::string& body, std::string* output) {
  static std::atomic<int> counter{0};
  const std::string script = dir.file("script_" + std::to_string(counter++) + ".py");
  const std::string log = script + ".log";
  writeBytes(script, "import sys\nimport numpy as np\nd = sys.argv[1]\n" + body + "\n");
  const std::string cmd =
      "/usr/bin/python3 '" + script + "' '" + dir.path().string() + "' >'" + log + "' 2>&1";
  int rc = std::system(cmd.c_str());
  if (output) *output = readBytes(log);
  fs::remove(script);
  fs::remove(log);
  return rc;
}

#define REQUIRE_NUMPY()                                                       \
  do {                                                                        \
    if (!havePythonNumpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy not available"; \
  } while (0)

/// A tensor whose bytes are a deterministic function of dtype, shape and seed; bools are 0/1.
Tensor patterned(DType dt, Shape shape, int seed = 1) {
  Tensor t(dt, std::move(shape));
  auto* p = t.data<uint8_t>();
  uint32_t x = 2463534242u + (uint32_t)seed * 7919u;
  for (size_t i = 0; i < t.byteSize(); ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = dt == DType::Bool ? (uint8_t)(x & 1) : (uint8_t)x;
  }
  return t;
}

/// A tensor with element i equal to i (converted to the dtype; bools alternate).
Tensor iota(DType dt, Shape shape) {
  Tensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dt) {
      case DType::Float: t.data<float>()[i] = (float)i * 0.5f; break;
      case DType::Double: t.data<double>()[i] = (double)i * 0.25; break;
      case DType::Float16: t.data<uint16_t>()[i] = floatToHalf((float)i * 0.5f); break;
      case DType::Int64: t.data<int64_t>()[i] = i * 1000000007LL - 5; break;
      case DType::Int32: t.data<int32_t>()[i] = (int32_t)(i * 1000 - 7); break;
      case DType::Int16: t.data<int16_t>()[i] = (int16_t)(i * 100 - 7); break;
      case DType::Int8: t.data<int8_t>()[i] = (int8_t)(i - 3); break;
      case DType::UInt8: t.data<uint8_t>()[i] = (uint8_t)(i * 7); break;
      case DType::UInt16: t.data<uint16_t>()[i] = (uint16_t)(i * 300); break;
      case DType::UInt32: t.data<uint32_t>()[i] = (uint32_t)(i * 100000); break;
      case DType::UInt64: t.data<uint64_t>()[i] = (uint64_t)i * 10000000000ULL; break;
      case DType::Bool: t.data<bool>()[i] = (i % 3) == 0; break;
      default: break;
    }
  }
  return t;
}

::testing::AssertionResult sameTensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtypeName(a.dtype()) << " vs " << dtypeName(b.dtype());
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shape " << shapeToString(a.shape()) << " vs " << shapeToString(b.shape());
  if (a.byteSize() && std::memcmp(a.raw(), b.raw(), a.byteSize()) != 0)
    return ::testing::AssertionFailure() << "data differs";
  return ::testing::AssertionSuccess();
}

/// The status failed and its message is one line naming `where`.
template <class R>
::testing::AssertionResult failsNaming(const R& r, const std::string& where) {
  if (r.isOk()) return ::testing::AssertionFailure() << "unexpectedly ok";
  const std::string& m = [&]() -> const std::string& {
    if constexpr (std::is_same_v<R, Status>) return r.message();
    else return r.status().message();
  }();
  if (m.rfind(where + ":", 0) != 0)
    return ::testing::AssertionFailure() << "message does not start with '" << where << ":': " << m;
  if (m.find('\n') != std::string::npos) return ::testing::AssertionFailure() << "multi-line message: " << m;
  return ::testing::AssertionSuccess() << m;
}

template <class R>
std::string messageOf(const R& r) {
  if constexpr (std::is_same_v<R, Status>) return r.message();
  else return r.status().message();
}

/// A .npy image with the given header dict (padded like numpy) and raw data.
std::string makeNpy(const std::string& dict, const std::string& data, int major = 1) {
  std::string h = dict;
  size_t lenBytes = major == 1 ? 2 : 4;
  size_t hlen = h.size() + 1;
  size_t pad = 64 - ((6 + 2 + lenBytes + hlen) % 64);
  h.append(pad, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += (char)major;
  out += (char)0;
  for (size_t i = 0; i < lenBytes; ++i) out += (char)((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

template <class T>
std::string rawOf(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

/// Builds a zip archive in memory with libzip (stored members).
std::string makeZip(const std::vector<std::pair<std::string, std::string>>& members, const TempDir& dir) {
  const std::string path = dir.file("built.zip");
  fs::remove(path);
  int err = 0;
  zip_t* za = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  EXPECT_NE(za, nullptr);
  if (!za) return {};
  for (const auto& [name, bytes] : members) {
    zip_source_t* src = zip_source_buffer(za, bytes.data(), bytes.size(), 0);
    zip_int64_t idx = zip_file_add(za, name.c_str(), src, 0);
    EXPECT_GE(idx, 0);
    zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0);
  }
  EXPECT_EQ(zip_close(za), 0);
  std::string out = readBytes(path);
  fs::remove(path);
  return out;
}

const std::vector<DType> kAllDtypes = {DType::Float, DType::Float16, DType::Double, DType::Int64,
                                       DType::Int32, DType::Int16,   DType::Int8,   DType::UInt8,
                                       DType::UInt16, DType::UInt32, DType::UInt64, DType::Bool};
const std::vector<Shape> kShapes = {{}, {0}, {5}, {2, 3, 4}, {3, 0, 2}, {1, 1, 1, 7}};

}  // namespace

// ------------------------------------------------------------------------------------------------
// Round trips

TEST(IoNpy, RoundTripEveryDtypeAndShape) {
  TempDir dir;
  int seed = 0;
  for (DType dt : kAllDtypes) {
    for (const Shape& shape : kShapes) {
      SCOPED_TRACE(dtypeName(dt) + " " + shapeToString(shape));
      Tensor t = patterned(dt, shape, ++seed);
      const std::string path = dir.file("t.npy");
      ASSERT_TRUE(writeNpy(path, t).isOk());
      Result<Tensor> back = readNpy(path);
      ASSERT_TRUE(back.isOk()) << back.status().message();
      EXPECT_TRUE(sameTensor(t, *back));
      const std::string bytes = readBytes(path);
      EXPECT_EQ((bytes.size() - t.byteSize()) % 64, 0u) << "header not padded to a multiple of 64";
      Result<Tensor> parsed = parseNpy(bytes.data(), bytes.size(), "mem");
      ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
      EXPECT_TRUE(sameTensor(t, *parsed));
    }
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.npy"});  // no temp files left
}

TEST(IoNpy, HeaderIsVersion1PaddedTo64) {
  TempDir dir;
  Tensor t = iota(DType::Float, {2, 3});
  ASSERT_TRUE(writeNpy(dir.file("a.npy"), t).isOk());
  std::string b = readBytes(dir.file("a.npy"));
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t hlen = (unsigned char)b[8] | ((unsigned char)b[9] << 8);
  EXPECT_EQ((10 + hlen) % 64, 0u);
  EXPECT_EQ(b.size(), 10 + hlen + t.byteSize());
  EXPECT_EQ(b[10 + hlen - 1], '\n');
  EXPECT_NE(b.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), std::string::npos);
}

TEST(IoNpy, ScalarRoundTrip) {
  TempDir dir;
  Tensor s = Tensor::scalar<double>(3.25);
  ASSERT_TRUE(writeNpy(dir.file("s.npy"), s).isOk());
  Result<Tensor> back = readNpy(dir.file("s.npy"));
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->rank(), 0);
  EXPECT_EQ(back->numel(), 1);
  EXPECT_EQ(back->data<double>()[0], 3.25);
  EXPECT_NE(readBytes(dir.file("s.npy")).find("'shape': (), }"), std::string::npos);
}

TEST(IoNpy, OverwritesAtomicallyAndFailsCleanly) {
  TempDir dir;
  const std::string path = dir.file("x.npy");
  ASSERT_TRUE(writeNpy(path, iota(DType::Int32, {4})).isOk());
  ASSERT_TRUE(writeNpy(path, iota(DType::Int64, {2, 2})).isOk());
  Result<Tensor> back = readNpy(path);
  ASSERT_TRUE(back.isOk());
  EXPECT_TRUE(sameTensor(*back, iota(DType::Int64, {2, 2})));

  // An unwritable dtype fails without touching the existing file.
  const std::string before = readBytes(path);
  Tensor bf(DType::BFloat16, {3});
  EXPECT_TRUE(failsNaming(writeNpy(path, bf), path));
  EXPECT_TRUE(failsNaming(writeNpy(path, Tensor()), path));
  EXPECT_EQ(readBytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.npy"});

  // A missing folder: IoError naming the path.
  const std::string missing = dir.file("no/such/dir/y.npy");
  Status st = writeNpy(missing, iota(DType::Float, {2}));
  EXPECT_TRUE(failsNaming(st, missing));
  EXPECT_EQ(st.code(), StatusCode::IoError);
  st = writeNpz(missing, {{"a", iota(DType::Float, {2})}}, true);
  EXPECT_TRUE(failsNaming(st, missing));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.npy"});
}

TEST(IoNpz, RoundTripStoredAndDeflated) {
  TempDir dir;
  std::vector<NamedTensor> in;
  int seed = 100;
  for (DType dt : kAllDtypes) {
    in.push_back({"p_" + dtypeName(dt), patterned(dt, {3, 5}, ++seed)});
    in.push_back({"s_" + dtypeName(dt), patterned(dt, {}, ++seed)});
    in.push_back({"e_" + dtypeName(dt), patterned(dt, {0, 4}, ++seed)});
  }
  in.push_back({"zeros", Tensor::zeros(DType::Float, {64, 64})});  // compresses well
  in.push_back({"sub/dir.name", iota(DType::Float, {2})});
  for (bool compress : {false, true}) {
    SCOPED_TRACE(compress ? "deflated" : "stored");
    const std::string path = dir.file(compress ? "c.npz" : "s.npz");
    Status st = writeNpz(path, in, compress);
    ASSERT_TRUE(st.isOk()) << st.message();
    for (int fromMemory = 0; fromMemory < 2; ++fromMemory) {
      std::string bytes = readBytes(path);
      Result<std::vector<NamedTensor>> out =
          fromMemory ? parseNpz(bytes.data(), bytes.size(), "mem.npz") : readNpz(path);
      ASSERT_TRUE(out.isOk()) << out.status().message();
      ASSERT_EQ(out->size(), in.size());
      for (size_t i = 0; i < in.size(); ++i) {
        EXPECT_EQ((*out)[i].name, in[i].name);
        EXPECT_TRUE(sameTensor((*out)[i].tensor, in[i].tensor)) << in[i].name;
      }
    }
  }
  EXPECT_LT(fs::file_size(dir.file("c.npz")), fs::file_size(dir.file("s.npz")));
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"c.npz", "s.npz"}));
}

TEST(IoNpz, EmptyArchiveAndBadNames) {
  TempDir dir;
  const std::string path = dir.file("empty.npz");
  ASSERT_TRUE(writeNpz(path, {}, false).isOk());
  Result<std::vector<NamedTensor>> out = readNpz(path);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_TRUE(out->empty());

  const std::string bad = dir.file("bad.npz");
  EXPECT_TRUE(failsNaming(writeNpz(bad, {{"a", iota(DType::Float, {1})}, {"a", iota(DType::Float, {1})}}, true), bad));
  EXPECT_TRUE(failsNaming(writeNpz(bad, {{"", iota(DType::Float, {1})}}, true), bad));
  EXPECT_TRUE(failsNaming(writeNpz(bad, {{"b", Tensor(DType::BFloat16, {2})}}, true), bad + ":b"));
  EXPECT_FALSE(fs::exists(bad));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"empty.npz"});
}

// ------------------------------------------------------------------------------------------------
// Crafted files: fortran order, big-endian, header variants

TEST(IoNpy, FortranOrderIsTransposed) {
  // shape (2,3) in Fortran order: memory holds column by column.
  std::string f = makeNpy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                          rawOf(std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  Result<Tensor> t = parseNpy(f.data(), f.size(), "f.npy");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_TRUE(sameTensor(*t, Tensor::fromVector<int32_t>({0, 1, 2, 3, 4, 5}, {6}).reshaped({2, 3})));

  // 3-d, (2,3,4): element (i,j,k) = i*12 + j*4 + k at Fortran offset i + 2j + 6k.
  std::vector<double> fdata(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) fdata[(size_t)(i + 2 * j + 6 * k)] = i * 12 + j * 4 + k;
  f = makeNpy("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4), }", rawOf(fdata));
  t = parseNpy(f.data(), f.size(), "f3.npy");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  ASSERT_EQ(t->shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(t->data<double>()[i], i);
}

TEST(IoNpy, BigEndianIsSwapped) {
  std::string data;
  for (int v : {1, -2, 300}) {
    uint32_t u = (uint32_t)v;
    for (int b = 3; b >= 0; --b) data += (char)((u >> (8 * b)) & 0xff);
  }
  std::string f = makeNpy("{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", data);
  Result<Tensor> t = parseNpy(f.data(), f.size(), "be.npy");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_TRUE(sameTensor(*t, Tensor::fromVector<int32_t>({1, -2, 300}, {3})));
}

TEST(IoNpy, HeaderVariantsAccepted) {
  const std::string data = rawOf(std::vector<float>{1.f, 2.f});
  for (const char* dict : {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                           "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f4\"}",
                           "{'descr':'<f4','fortran_order':False,'shape':(2L,)}",
                           "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , ) , }"}) {
    SCOPED_TRACE(dict);
    for (int major : {1, 2, 3}) {
      std::string f = makeNpy(dict, data, major);
      Result<Tensor> t = parseNpy(f.data(), f.size(), "v.npy");
      ASSERT_TRUE(t.isOk()) << t.status().message();
      EXPECT_TRUE(sameTensor(*t, Tensor::fromVector<float>({1.f, 2.f}, {2})));
    }
  }
  // Bool bytes other than 0/1 read as true.
  std::string f = makeNpy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x02\x01", 3));
  Result<Tensor> b = parseNpy(f.data(), f.size(), "b.npy");
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(b->data<uint8_t>()[0], 0);
  EXPECT_EQ(b->data<uint8_t>()[1], 1);
  EXPECT_EQ(b->data<uint8_t>()[2], 1);
}

// ------------------------------------------------------------------------------------------------
// Corrupt inputs

TEST(IoNpyCorrupt, EmptyBadMagicTruncated) {
  TempDir dir;
  const std::string good = dir.file("good.npy");
  ASSERT_TRUE(writeNpy(good, iota(DType::Float, {4, 4})).isOk());
  const std::string bytes = readBytes(good);

  struct Case {
    const char* name;
    std::string content;
    const char* expect;
  };
  std::string hugeLen = bytes;
  hugeLen[8] = (char)0xff;
  hugeLen[9] = (char)0xff;
  std::string v2huge = makeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "abcd", 2);
  v2huge[8] = v2huge[9] = v2huge[10] = (char)0xff;
  v2huge[11] = 0x7f;
  const std::vector<Case> cases = {
      {"empty.npy", "", "empty"},
      {"magic.npy", "PK\x03\x04 definitely not numpy data", "magic"},
      {"short.npy", "\x93NUM", "truncated"},
      {"tiny.npy", std::string("\x93NUMPY\x01", 7), "truncated"},
      {"trunchdr.npy", bytes.substr(0, 30), "truncated header"},
      {"truncdata.npy", bytes.substr(0, bytes.size() - 4), "truncated data"},
      {"hdrlen.npy", hugeLen, "beyond the end"},
      {"hdrlen2.npy", v2huge, "beyond the end"},
      {"trailing.npy", bytes + "xx", "trailing"},
      {"version.npy", std::string("\x93NUMPY\x04\x00\x10\x00", 10) + std::string(16, ' '), "version 4.0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(c.name);
    writeBytes(path, c.content);
    Result<Tensor> r = readNpy(path);
    EXPECT_TRUE(failsNaming(r, path));
    EXPECT_NE(messageOf(r).find(c.expect), std::string::npos) << messageOf(r);
    Result<Tensor> m = parseNpy(c.content.data(), c.content.size(), c.name);
    EXPECT_TRUE(failsNaming(m, c.name));
  }
  Result<Tensor> missing = readNpy(dir.file("missing.npy"));
  EXPECT_TRUE(failsNaming(missing, dir.file("missing.npy")));
  EXPECT_EQ(missing.status().code(), StatusCode::IoError);
  EXPECT_TRUE(failsNaming(readNpy(dir.path().string()), dir.path().string()));  // a folder
}

TEST(IoNpyCorrupt, ShapeOverflowAndLimit) {
  // (2**40, 2**40) floats: the product overflows int64.
  std::string f = makeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }", "");
  Result<Tensor> r = parseNpy(f.data(), f.size(), "ovf.npy");
  EXPECT_TRUE(failsNaming(r, "ovf.npy"));
  EXPECT_NE(messageOf(r).find("overflow"), std::string::npos) << messageOf(r);

  // A dim that does not fit int64 at all.
  f = makeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", "");
  EXPECT_TRUE(failsNaming(parseNpy(f.data(), f.size(), "big.npy"), "big.npy"));

  // 2**20 x 2**20 float32 = 4 TiB declared: refused before allocating.
  f = makeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576), }", "");
  r = parseNpy(f.data(), f.size(), "huge.npy");
  EXPECT_TRUE(failsNaming(r, "huge.npy"));
  EXPECT_EQ(r.status().code(), StatusCode::ResourceLimit);

  // A caller-given limit.
  f = makeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }", std::string(32, '\0'));
  EXPECT_TRUE(parseNpy(f.data(), f.size(), "ok.npy", 32).isOk());
  r = parseNpy(f.data(), f.size(), "lim.npy", 31);
  EXPECT_TRUE(failsNaming(r, "lim.npy"));
  EXPECT_EQ(r.status().code(), StatusCode::ResourceLimit);
}

TEST(IoNpyCorrupt, UnsupportedDescrs) {
  for (const char* descr : {"|O", "<U5", "<c8", "<c16", "|S3", "|V8", "<M8[ns]", "<f16", "<i3", "zz"}) {
    SCOPED_TRACE(descr);
    std::string f = makeNpy(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (1,), }",
                            std::string(16, '\0'));
    Result<Tensor> r = parseNpy(f.data(), f.size(), "obj.npy");
    EXPECT_TRUE(failsNaming(r, "obj.npy"));
    EXPECT_NE(messageOf(r).find(std::string("'") + descr + "'"), std::string::npos) << messageOf(r);
  }
  std::string f = makeNpy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0'));
  EXPECT_EQ(parseNpy(f.data(), f.size(), "o.npy").status().code(), StatusCode::Unsupported);
  f = makeNpy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0'));
  Result<Tensor> r = parseNpy(f.data(), f.size(), "rec.npy");
  EXPECT_TRUE(failsNaming(r, "rec.npy"));
  EXPECT_NE(messageOf(r).find("structured"), std::string::npos);
}

TEST(IoNpyCorrupt, MalformedHeaders) {
  const std::string data = rawOf(std::vector<float>{1.f, 2.f, 3.f});
  for (const char* dict : {
           "{'descr': '<f4', 'fortran_order': False}",                                   // no shape
           "{'descr': '<f4', 'shape': (3,)}",                                            // no fortran_order
           "{'fortran_order': False, 'shape': (3,)}",                                    // no descr
           "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}",        // extra key
           "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",    // duplicate
           "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",                     // not a tuple
           "{'descr': '<f4', 'fortran_order': False, 'shape': [3]}",                     // a list
           "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}",                   // negative
           "{'descr': '<f4', 'fortran_order': False, 'shape': (3.0,)}",                  // float
           "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}",                        // not a bool
           "{'descr': <f4, 'fortran_order': False, 'shape': (3,)}",                      // unquoted
           "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} junk",               // trailing text
           "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)",                     // unclosed
           "{'descr': '<f4'\n, 'fortran_order': False, 'shape': (3,,)}",                 // double comma
           "",
       }) {
    SCOPED_TRACE(dict);
    std::string f = makeNpy(dict, data);
    Result<Tensor> r = parseNpy(f.data(), f.size(), "hdr.npy");
    EXPECT_TRUE(failsNaming(r, "hdr.npy"));
  }
}

TEST(IoNpyCorrupt, EveryTruncationAndByteFlipIsHandled) {
  TempDir dir;
  ASSERT_TRUE(writeNpy(dir.file("a.npy"), iota(DType::Int16, {3, 2})).isOk());
  const std::string bytes = readBytes(dir.file("a.npy"));
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<Tensor> r = parseNpy(bytes.data(), n, "cut.npy");
    EXPECT_TRUE(failsNaming(r, "cut.npy")) << "length " << n;
  }
  // Flipping any header byte must never crash (it may still parse).
  const size_t hdr = bytes.size() - 12;
  for (size_t i = 0; i < hdr; ++i) {
    for (unsigned char x : {0x01, 0x20, 0x80, 0xff}) {
      std::string m = bytes;
      m[i] = (char)(m[i] ^ x);
      Result<Tensor> r = parseNpy(m.data(), m.size(), "flip.npy");
      if (!r.isOk()) {
        EXPECT_TRUE(failsNaming(r, "flip.npy"));
      }
    }
  }
}

TEST(IoNpzCorrupt, NotAZipEmptyAndBadMembers) {
  TempDir dir;
  // Not a zip.
  const std::string notZip = dir.file("notzip.npz");
  writeBytes(notZip, "this is plainly not a zip archive, just some text padding it out......");
  EXPECT_TRUE(failsNaming(readNpz(notZip), notZip));
  std::string b = readBytes(notZip);
  EXPECT_TRUE(failsNaming(parseNpz(b.data(), b.size(), "mem.npz"), "mem.npz"));
  // A .npy is not an .npz.
  const std::string npy = dir.file("a.npy");
  ASSERT_TRUE(writeNpy(npy, iota(DType::Float, {3})).isOk());
  EXPECT_TRUE(failsNaming(readNpz(npy), npy));
  // Empty file and missing file.
  const std::string empty = dir.file("empty.npz");
  writeBytes(empty, "");
  EXPECT_TRUE(failsNaming(readNpz(empty), empty));
  EXPECT_TRUE(failsNaming(parseNpz("", 0, "mem0.npz"), "mem0.npz"));
  EXPECT_TRUE(failsNaming(readNpz(dir.file("nope.npz")), dir.file("nope.npz")));

  // A zip with a member that is not a .npy.
  const std::string good = readBytes(npy);
  std::string zip = makeZip({{"x.npy", good}, {"readme.txt", "hello"}}, dir);
  const std::string bad = dir.file("member.npz");
  writeBytes(bad, zip);
  Result<std::vector<NamedTensor>> r = readNpz(bad);
  EXPECT_TRUE(failsNaming(r, bad + ":readme.txt"));
  EXPECT_TRUE(failsNaming(parseNpz(zip.data(), zip.size(), "m.npz"), "m.npz:readme.txt"));

  // A .npy member that is corrupt: the message names the key.
  zip = makeZip({{"ok.npy", good}, {"broken.npy", good.substr(0, good.size() - 1)}}, dir);
  r = parseNpz(zip.data(), zip.size(), "k.npz");
  EXPECT_TRUE(failsNaming(r, "k.npz:broken"));
  EXPECT_NE(messageOf(r).find("truncated"), std::string::npos);
  std::string objNpy = makeNpy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0'));
  zip = makeZip({{"obj.npy", objNpy}}, dir);
  r = parseNpz(zip.data(), zip.size(), "o.npz");
  EXPECT_TRUE(failsNaming(r, "o.npz:obj"));
  EXPECT_NE(messageOf(r).find("'|O'"), std::string::npos);

  // Every truncation of a valid archive fails cleanly.
  ASSERT_TRUE(writeNpz(dir.file("v.npz"), {{"a", iota(DType::Int8, {5})}, {"b", iota(DType::Float, {2})}}, true).isOk());
  const std::string v = readBytes(dir.file("v.npz"));
  for (size_t n = 0; n < v.size(); ++n) {
    Result<std::vector<NamedTensor>> t = parseNpz(v.data(), n, "cut.npz");
    EXPECT_FALSE(t.isOk()) << "length " << n;
    if (!t.isOk()) {
      EXPECT_EQ(messageOf(t).rfind("cut.npz", 0), 0u) << messageOf(t);
    }
  }
}

TEST(IoNpzCorrupt, CrcMismatchDetected) {
  TempDir dir;
  const std::string path = dir.file("s.npz");
  Tensor t = iota(DType::Int32, {64});
  ASSERT_TRUE(writeNpz(path, {{"a", t}}, false).isOk());
  std::string b = readBytes(path);
  // Stored: the tensor bytes appear verbatim; corrupt one.
  std::string raw(static_cast<const char*>(t.raw()), t.byteSize());
  size_t at = b.find(raw);
  ASSERT_NE(at, std::string::npos);
  b[at + 100] ^= 0x55;
  Result<std::vector<NamedTensor>> r = parseNpz(b.data(), b.size(), "crc.npz");
  EXPECT_TRUE(failsNaming(r, "crc.npz:a"));
}

// ------------------------------------------------------------------------------------------------
// Interoperability with real NumPy

TEST(IoNumpy, ReadsNpSave) {
  REQUIRE_NUMPY();
  TempDir dir;
  std::string out;
  int rc = runPython(dir, R"PY(
import os
def p(n): return os.path.join(d, n)
np.save(p('f32.npy'), np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5)
np.save(p('f64.npy'), np.arange(6, dtype=np.float64).reshape(3, 2) * 0.25)
np.save(p('f16.npy'), (np.arange(10, dtype=np.float32) * 0.5 - 2).astype(np.float16))
np.save(p('i64.npy'), np.arange(5, dtype=np.int64) * 1000000007 - 5)
np.save(p('i32.npy'), np.arange(5, dtype=np.int32) * 1000 - 7)
np.save(p('i8.npy'), np.arange(5, dtype=np.int8) - 3)
np.save(p('u8.npy'), (np.arange(5) * 7).astype(np.uint8))
np.save(p('bool.npy'), np.array([True, False, False, True, False, True]).reshape(2, 3))
np.save(p('scalar.npy'), np.float64(3.25))
np.save(p('empty.npy'), np.zeros((0, 3), dtype=np.int64))
np.save(p('fortran.npy'), np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)))
np.save(p('fortran_i8.npy'), np.asfortranarray((np.arange(6, dtype=np.int8) - 3).reshape(2, 3)))
np.save(p('be_f4.npy'), np.arange(6, dtype='>f4').reshape(2, 3))
np.save(p('be_i8.npy'), np.arange(4, dtype='>i8') - 2)
np.save(p('be_f2.npy'), np.arange(4, dtype='>f2') * 0.5)
np.save(p('be_f8_fortran.npy'), np.asfortranarray(np.arange(6, dtype='>f8').reshape(2, 3)))
for v in [(1, 0), (2, 0), (3, 0)]:
    with open(p('v%d.npy' % v[0]), 'wb') as f:
        np.lib.format.write_array(f, np.arange(7, dtype=np.int32), version=v)
np.save(p('obj.npy'), np.array([1, 'a', None], dtype=object), allow_pickle=True)
np.save(p('uni.npy'), np.array(['ab', 'c']))
np.save(p('cplx.npy'), np.array([1 + 2j], dtype=np.complex64))
)PY",
                     &out);
  ASSERT_EQ(rc, 0) << out;

  auto load = [&](const std::string& n) {
    Result<Tensor> r = readNpy(dir.file(n));
    EXPECT_TRUE(r.isOk()) << n << ": " << r.status().message();
    return r.isOk() ? *r : Tensor();
  };
  Tensor t = load("f32.npy");
  ASSERT_EQ(t.shape(), (Shape{2, 3, 4}));
  ASSERT_EQ(t.dtype(), DType::Float);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(t.data<float>()[i], i * 0.5f);
  t = load("f64.npy");
  ASSERT_EQ(t.shape(), (Shape{3, 2}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<double>()[i], i * 0.25);
  t = load("f16.npy");
  ASSERT_EQ(t.dtype(), DType::Float16);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(halfToFloat(t.data<uint16_t>()[i]), i * 0.5f - 2);
  t = load("i64.npy");
  ASSERT_EQ(t.dtype(), DType::Int64);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.data<int64_t>()[i], i * 1000000007LL - 5);
  EXPECT_TRUE(sameTensor(load("i32.npy"), iota(DType::Int32, {5})));
  EXPECT_TRUE(sameTensor(load("i8.npy"), iota(DType::Int8, {5})));
  EXPECT_TRUE(sameTensor(load("u8.npy"), iota(DType::UInt8, {5})));
  t = load("bool.npy");
  ASSERT_EQ(t.dtype(), DType::Bool);
  ASSERT_EQ(t.shape(), (Shape{2, 3}));
  const bool expectBool[] = {true, false, false, true, false, true};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<bool>()[i], expectBool[i]);
  t = load("scalar.npy");
  EXPECT_EQ(t.rank(), 0);
  ASSERT_EQ(t.dtype(), DType::Double);
  EXPECT_EQ(t.data<double>()[0], 3.25);
  t = load("empty.npy");
  EXPECT_EQ(t.shape(), (Shape{0, 3}));
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_NE(readBytes(dir.file("fortran.npy")).find("'fortran_order': True"), std::string::npos);
  t = load("fortran.npy");
  ASSERT_EQ(t.shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(t.data<float>()[i], (float)i);
  EXPECT_TRUE(sameTensor(load("fortran_i8.npy"), iota(DType::Int8, {6}).reshaped({2, 3})));
  t = load("be_f4.npy");
  ASSERT_EQ(t.dtype(), DType::Float);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], (float)i);
  t = load("be_i8.npy");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data<int64_t>()[i], i - 2);
  t = load("be_f2.npy");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(halfToFloat(t.data<uint16_t>()[i]), i * 0.5f);
  t = load("be_f8_fortran.npy");
  ASSERT_EQ(t.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<double>()[i], (double)i);
  for (const char* v : {"v1.npy", "v2.npy", "v3.npy"}) {
    SCOPED_TRACE(v);
    std::string b = readBytes(dir.file(v));
    EXPECT_EQ((int)b[6], v[1] - '0');
    Tensor r = load(v);
    ASSERT_EQ(r.dtype(), DType::Int32);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(r.data<int32_t>()[i], i);
  }
  for (const char* n : {"obj.npy", "uni.npy", "cplx.npy"}) {
    Result<Tensor> r = readNpy(dir.file(n));
    EXPECT_TRUE(failsNaming(r, dir.file(n)));
    EXPECT_EQ(r.status().code(), StatusCode::Unsupported) << r.status().message();
  }
}

TEST(IoNumpy, ReadsNpSavezAndSavezCompressed) {
  REQUIRE_NUMPY();
  TempDir dir;
  std::string out;
  int rc = runPython(dir, R"PY(
import os
arrs = dict(w=np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5,
            half=(np.arange(10, dtype=np.float32) * 0.5 - 2).astype(np.float16),
            flag=np.array([True, False, True]),
            idx=np.arange(5, dtype=np.int64) * 1000000007 - 5,
            fort=np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)),
            be=np.arange(6, dtype='>i4').reshape(2, 3),
            s=np.float64(3.25),
            e=np.zeros((0,), dtype=np.uint8))
np.savez(os.path.join(d, 'plain.npz'), **arrs)
np.savez_compressed(os.path.join(d, 'comp.npz'), **arrs)
np.savez(os.path.join(d, 'pos.npz'), np.arange(3, dtype=np.int8), np.arange(2, dtype=np.int8))
np.savez(os.path.join(d, 'obj.npz'), good=np.arange(3), bad=np.array([None, 1], dtype=object))
)PY",
                     &out);
  ASSERT_EQ(rc, 0) << out;
  for (const char* name : {"plain.npz", "comp.npz"}) {
    SCOPED_TRACE(name);
    Result<std::vector<NamedTensor>> r = readNpz(dir.file(name));
    ASSERT_TRUE(r.isOk()) << r.status().message();
    std::string b = readBytes(dir.file(name));
    Result<std::vector<NamedTensor>> m = parseNpz(b.data(), b.size(), name);
    ASSERT_TRUE(m.isOk()) << m.status().message();
    const std::vector<std::string> keys = {"w", "half", "flag", "idx", "fort", "be", "s", "e"};
    ASSERT_EQ(r->size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ((*r)[i].name, keys[i]);
      EXPECT_TRUE(sameTensor((*r)[i].tensor, (*m)[i].tensor));
    }
    const Tensor& w = (*r)[0].tensor;
    ASSERT_EQ(w.shape(), (Shape{3, 4}));
    for (int i = 0; i < 12; ++i) EXPECT_EQ(w.data<float>()[i], i * 0.5f);
    const Tensor& h = (*r)[1].tensor;
    ASSERT_EQ(h.dtype(), DType::Float16);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(halfToFloat(h.data<uint16_t>()[i]), i * 0.5f - 2);
    EXPECT_TRUE(sameTensor((*r)[2].tensor, Tensor::fromVector<bool>({true, false, true}, {3})));
    const Tensor& idx = (*r)[3].tensor;
    for (int i = 0; i < 5; ++i) EXPECT_EQ(idx.data<int64_t>()[i], i * 1000000007LL - 5);
    const Tensor& f = (*r)[4].tensor;
    ASSERT_EQ(f.shape(), (Shape{2, 3, 4}));
    for (int i = 0; i < 24; ++i) EXPECT_EQ(f.data<float>()[i], (float)i);
    EXPECT_TRUE(sameTensor((*r)[5].tensor, Tensor::fromVector<int32_t>({0, 1, 2, 3, 4, 5}, {6}).reshaped({2, 3})));
    EXPECT_EQ((*r)[6].tensor.rank(), 0);
    EXPECT_EQ((*r)[6].tensor.data<double>()[0], 3.25);
    EXPECT_EQ((*r)[7].tensor.shape(), (Shape{0}));
  }
  Result<std::vector<NamedTensor>> pos = readNpz(dir.file("pos.npz"));
  ASSERT_TRUE(pos.isOk()) << pos.status().message();
  ASSERT_EQ(pos->size(), 2u);
  EXPECT_EQ((*pos)[0].name, "arr_0");
  EXPECT_EQ((*pos)[1].name, "arr_1");
  Result<std::vector<NamedTensor>> obj = readNpz(dir.file("obj.npz"));
  EXPECT_TRUE(failsNaming(obj, dir.file("obj.npz") + ":bad"));
  EXPECT_NE(messageOf(obj).find("'|O'"), std::string::npos) << messageOf(obj);
}

TEST(IoNumpy, NumpyReadsOurFiles) {
  REQUIRE_NUMPY();
  TempDir dir;
  std::vector<NamedTensor> all;
  for (DType dt : kAllDtypes) {
    for (const Shape& shape : kShapes) {
      std::string name = dtypeName(dt) + "_" + std::to_string(shape.size()) + "_" + std::to_string(numelOf(shape));
      Tensor t = iota(dt, shape);
      ASSERT_TRUE(writeNpy(dir.file(name + ".npy"), t).isOk());
      all.push_back({name, t});
    }
  }
  ASSERT_TRUE(writeNpz(dir.file("stored.npz"), all, false).isOk());
  ASSERT_TRUE(writeNpz(dir.file("deflated.npz"), all, true).isOk());
  ASSERT_TRUE(writeNpz(dir.file("none.npz"), {}, true).isOk());

  std::string out;
  int rc = runPython(dir, R"PY(
import os, zipfile
names = {'float': 'float32', 'float16': 'float16', 'double': 'float64', 'int64': 'int64', 'int32': 'int32',
         'int16': 'int16', 'int8': 'int8', 'uint8': 'uint8', 'uint16': 'uint16', 'uint32': 'uint32',
         'uint64': 'uint64', 'bool': 'bool'}
shapes = [(), (0,), (5,), (2, 3, 4), (3, 0, 2), (1, 1, 1, 7)]
def expected(dt, shape):
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.int64)
    if dt == 'float': v = (i.astype(np.float32) * np.float32(0.5))
    elif dt == 'double': v = i.astype(np.float64) * 0.25
    elif dt == 'float16': v = (i.astype(np.float32) * np.float32(0.5)).astype(np.float16)
    elif dt == 'int64': v = i * 1000000007 - 5
    elif dt == 'int32': v = i * 1000 - 7
    elif dt == 'int16': v = i * 100 - 7
    elif dt == 'int8': v = i - 3
    elif dt == 'uint8': v = i * 7
    elif dt == 'uint16': v = i * 300
    elif dt == 'uint32': v = i * 100000
    elif dt == 'uint64': v = i.astype(np.uint64) * np.uint64(10000000000)
    elif dt == 'bool': v = (i % 3) == 0
    return v.astype(names[dt]).reshape(shape)
def check(a, dt, shape, where):
    e = expected(dt, shape)
    assert a.dtype == e.dtype, (where, a.dtype, e.dtype)
    assert a.shape == e.shape, (where, a.shape, e.shape)
    assert np.array_equal(a, e), (where, a, e)
count = 0
for dt in names:
    for shape in shapes:
        key = '%s_%d_%d' % (dt, len(shape), int(np.prod(shape, dtype=np.int64)))
        check(np.load(os.path.join(d, key + '.npy')), dt, shape, key)
        for z in ('stored.npz', 'deflated.npz'):
            with np.load(os.path.join(d, z)) as f:
                check(f[key], dt, shape, z + ':' + key)
        count += 1
with np.load(os.path.join(d, 'stored.npz')) as f:
    assert len(f.files) == count, f.files
with zipfile.ZipFile(os.path.join(d, 'stored.npz')) as z:
    assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    assert z.testzip() is None
with zipfile.ZipFile(os.path.join(d, 'deflated.npz')) as z:
    assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    assert z.testzip() is None
with np.load(os.path.join(d, 'none.npz')) as f:
    assert len(f.files) == 0
print('checked', count)
)PY",
                     &out);
  EXPECT_EQ(rc, 0) << out;
}

TEST(IoNumpy, BytesIdenticalToNpSave) {
  REQUIRE_NUMPY();
  TempDir dir;
  ASSERT_TRUE(writeNpy(dir.file("ours_2d.npy"), iota(DType::Float, {2, 3})).isOk());
  ASSERT_TRUE(writeNpy(dir.file("ours_1d.npy"), iota(DType::Int64, {5})).isOk());
  ASSERT_TRUE(writeNpy(dir.file("ours_0d.npy"), Tensor::scalar<double>(0.0)).isOk());
  ASSERT_TRUE(writeNpy(dir.file("ours_bool.npy"), iota(DType::Bool, {1234567, 0})).isOk());
  std::string out;
  int rc = runPython(dir, R"PY(
import os
np.save(os.path.join(d, 'np_2d.npy'), np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5)
np.save(os.path.join(d, 'np_1d.npy'), np.arange(5, dtype=np.int64) * 1000000007 - 5)
np.save(os.path.join(d, 'np_0d.npy'), np.float64(0.0))
np.save(os.path.join(d, 'np_bool.npy'), np.zeros((1234567, 0), dtype=bool))
)PY",
                     &out);
  ASSERT_EQ(rc, 0) << out;
  for (const char* k : {"2d", "1d", "0d", "bool"}) {
    EXPECT_EQ(readBytes(dir.file(std::string("ours_") + k + ".npy")), readBytes(dir.file(std::string("np_") + k + ".npy")))
        << k;
  }
}
