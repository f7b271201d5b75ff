// Tensor: a dtype, a shape and a shared, 64-byte aligned, contiguous row-major buffer.
// Copies share the buffer (cheap); views made by reshaped() share it too, so Reshape,
// Flatten, Squeeze and Identity cost no copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/dtype.h"

namespace qs {

using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for a scalar). Caller guarantees no overflow
/// (the loader and kernels check sizes with checkedNumel).
int64_t numelOf(const Shape& s);
/// Element count, or -1 when a dim is negative or the product overflows int64 or exceeds `limit`.
int64_t checkedNumel(const Shape& s, int64_t limit = INT64_MAX);
/// "[1,3,224,224]"
std::string shapeToString(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  /// Allocates an uninitialised buffer of numel(shape) elements of `dtype`.
  Tensor(DType dtype, Shape shape);
  /// Allocates and fills with zeros.
  static Tensor zeros(DType dtype, Shape shape);
  /// A rank-0 or rank-1 tensor holding a copy of `values`.
  template <class T>
  static Tensor fromVector(const std::vector<T>& values, Shape shape) {
    Tensor t(DTypeOf<T>::value, std::move(shape));
    T* d = t.data<T>();
    for (size_t i = 0; i < values.size() && (int64_t)i < t.numel(); ++i) d[i] = values[i];
    return t;
  }
  template <class T>
  static Tensor scalar(T v) {
    return fromVector<T>({v}, {});
  }

  bool empty() const { return m_dtype == DType::Undefined; }
  DType dtype() const { return m_dtype; }
  const Shape& shape() const { return m_shape; }
  int rank() const { return (int)m_shape.size(); }
  int64_t dim(int i) const { return m_shape[(size_t)i]; }
  int64_t numel() const { return m_numel; }
  size_t byteSize() const { return (size_t)m_numel * dtypeSize(m_dtype); }

  void* raw() { return m_buffer ? static_cast<char*>(m_buffer.get()) + m_offset : nullptr; }
  const void* raw() const { return m_buffer ? static_cast<const char*>(m_buffer.get()) + m_offset : nullptr; }
  template <class T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }

  /// Same buffer, new shape with the same element count.
  Tensor reshaped(Shape shape) const;
  /// Deep copy.
  Tensor clone() const;
  /// True when both tensors use the same buffer.
  bool sharesBufferWith(const Tensor& other) const { return m_buffer && m_buffer == other.m_buffer; }
  /// Value of element i converted to double (any numeric dtype); for shape ops and tests.
  double valueAsDouble(int64_t i) const;
  /// Reads an integer tensor (int32/int64) as a vector<int64_t>; for shape-like inputs.
  std::vector<int64_t> toInt64Vector() const;

 private:
  DType m_dtype = DType::Undefined;
  Shape m_shape;
  int64_t m_numel = 0;
  std::shared_ptr<void> m_buffer;
  size_t m_offset = 0;
};

/// A tensor with its name: graph feeds and outputs, npz entries.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

}  // namespace qs
