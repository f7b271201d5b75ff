#include "core/ir/tensor.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <map>

#include "core/ir/half.h"
#include "core/util/huge_pages.h"

namespace qs {

size_t dtypeSize(DType t) {
  switch (t) {
    case DType::Float: case DType::Int32: case DType::UInt32: return 4;
    case DType::Double: case DType::Int64: case DType::UInt64: case DType::Complex64: return 8;
    case DType::Complex128: return 16;
    case DType::Int16: case DType::UInt16: case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int8: case DType::UInt8: case DType::Bool: case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ: case DType::Float8E5M2: case DType::Float8E5M2FNUZ: return 1;
    default: return 0;
  }
}

std::string dtypeName(DType t) {
  switch (t) {
    case DType::Float: return "float";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::UInt16: return "uint16";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::String: return "string";
    case DType::Bool: return "bool";
    case DType::Float16: return "float16";
    case DType::Double: return "double";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::Complex64: return "complex64";
    case DType::Complex128: return "complex128";
    case DType::BFloat16: return "bfloat16";
    case DType::Float8E4M3FN: return "float8e4m3fn";
    case DType::Float8E4M3FNUZ: return "float8e4m3fnuz";
    case DType::Float8E5M2: return "float8e5m2";
    case DType::Float8E5M2FNUZ: return "float8e5m2fnuz";
    default: return "undefined(" + std::to_string((int)t) + ")";
  }
}

bool dtypeSupported(DType t) {
  return dtypeSize(t) != 0 && t != DType::Complex64 && t != DType::Complex128;
}

int64_t numelOf(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t checkedNumel(const Shape& s, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d != 0 && n > limit / d) return -1;
    n *= d;
  }
  return n > limit ? -1 : n;
}

std::string shapeToString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

namespace {

// Large buffers are recycled by size class: repeated runs of a model allocate the same sizes,
// so after the first run no large allocation (and no first-touch page faulting of fresh
// mmap'd memory, which costs more than many kernels) happens in the steady state.
class BufferPool {
 public:
  static constexpr size_t kMinPooled = 64 * 1024;
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;

  // Returns a buffer of at least `bytes` and sets `bytes` to its real size. A cached buffer of
  // the same class is taken first, else the smallest cached one up to twice the size: a
  // network's activations shrink and grow again, and without this the buffers freed by the
  // early layers sit in the cache while the later ones allocate anew.
  void* take(size_t& bytes) {
    if (bytes >= kMinPooled) {
      std::lock_guard<std::mutex> lock(m_mutex);
      auto it = m_free.lower_bound(bytes);
      if (it != m_free.end() && it->first <= 2 * bytes) {
        void* p = it->second;
        bytes = it->first;
        m_free.erase(it);
        m_cached -= bytes;
        return p;
      }
    }
    // From 2 MiB on, on transparent huge pages: a network at batch 1 streams its activations as it streams
    // its weights (core/util/huge_pages.h). Fresh and zero; the same size class always takes the same path.
    if (bytes >= kHugePageBytes && hugePagesEnabled()) return allocateOnHugePages(bytes);
    return std::aligned_alloc(64, bytes);
  }
  void give(void* p, size_t bytes) {
    if (bytes >= kMinPooled) {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (m_cached + bytes <= kMaxCachedBytes) {
        m_free.emplace(bytes, p);
        m_cached += bytes;
        return;
      }
    }
    if (bytes >= kHugePageBytes && hugePagesEnabled()) freeOnHugePages(p, bytes);
    else std::free(p);
  }

 private:
  std::mutex m_mutex;
  std::multimap<size_t, void*> m_free;
  size_t m_cached = 0;
};

BufferPool& pool() {
  static BufferPool* p = new BufferPool();  // never destroyed: buffers may outlive static destruction
  return *p;
}

// Pooled sizes are rounded up to classes with 3 significant bits (steps of 1/8 to 1/4 of a power
// of two): tensors of nearby sizes then share buffers, so the pool holds roughly one buffer per
// simultaneously live tensor instead of one per distinct size ever seen (det at batch 8: peak RSS
// 859 MB with exact sizes). Costs at most 25% slack on a pooled buffer.
size_t sizeClass(size_t bytes) {
  if (bytes < BufferPool::kMinPooled) return ((bytes + 63) / 64) * 64;
  int top = 63 - __builtin_clzll((unsigned long long)bytes);
  size_t step = size_t(1) << (top - 2);
  return ((bytes + step - 1) / step) * step;
}

std::shared_ptr<void> allocateAligned(size_t bytes) {
  // Never zero bytes: keeps data() non-null for empty tensors.
  size_t rounded = sizeClass(bytes);
  if (rounded == 0) rounded = 64;
  void* p = pool().take(rounded);  // may hand back a larger cached buffer: rounded is its size
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<void>(p, [rounded](void* q) { pool().give(q, rounded); });
}
}  // namespace

Tensor::Tensor(DType dtype, Shape shape) : m_dtype(dtype), m_shape(std::move(shape)) {
  m_numel = numelOf(m_shape);
  m_buffer = allocateAligned((size_t)m_numel * dtypeSize(dtype));
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  std::memset(t.raw(), 0, t.byteSize());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.m_shape = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (empty()) return {};
  Tensor t(m_dtype, m_shape);
  std::memcpy(t.raw(), raw(), byteSize());
  return t;
}

double Tensor::valueAsDouble(int64_t i) const {
  switch (m_dtype) {
    case DType::Float: return data<float>()[i];
    case DType::Double: return data<double>()[i];
    case DType::Int64: return (double)data<int64_t>()[i];
    case DType::Int32: return data<int32_t>()[i];
    case DType::Int16: return data<int16_t>()[i];
    case DType::Int8: return data<int8_t>()[i];
    case DType::UInt8: return data<uint8_t>()[i];
    case DType::UInt16: return data<uint16_t>()[i];
    case DType::UInt32: return data<uint32_t>()[i];
    case DType::UInt64: return (double)data<uint64_t>()[i];
    case DType::Bool: return data<bool>()[i] ? 1.0 : 0.0;
    case DType::Float16: return halfToFloat(data<uint16_t>()[i]);
    case DType::BFloat16: return bf16ToFloat(data<uint16_t>()[i]);
    default: return 0.0;
  }
}

std::vector<int64_t> Tensor::toInt64Vector() const {
  std::vector<int64_t> v((size_t)m_numel);
  if (m_dtype == DType::Int64) {
    if (m_numel) std::memcpy(v.data(), raw(), byteSize());
  } else {
    for (int64_t i = 0; i < m_numel; ++i) v[(size_t)i] = (int64_t)valueAsDouble(i);
  }
  return v;
}

}  // namespace qs
