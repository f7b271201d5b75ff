// The 'elementwise' group: numpy-broadcasting binary ops, variadic ops, Where and PRelu, plus the
// broadcast machinery (one strided row iterator, instantiated per op through functors) and the
// dtype dispatch helpers shared with activation.cpp, softmax.cpp and quantize_linear.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/exec/kernel.h"

namespace qs {

// Add, Sub, Mul, Div 7..21; Pow 7..21 (mixed base/exponent types, output has the base's type);
// Mod 10..21 (fmod attribute). All numpy-broadcasting; float16/bfloat16 computed in float32.
Result<std::unique_ptr<Kernel>> createArithmetic(const KernelInit& init);
// Equal, Less, Greater 7..21; LessOrEqual, GreaterOrEqual 12..21 -> bool.
Result<std::unique_ptr<Kernel>> createComparison(const KernelInit& init);
// And, Or, Xor 7..21 (bool).
Result<std::unique_ptr<Kernel>> createLogical(const KernelInit& init);
// Max, Min, Sum, Mean 6..21 (variadic; broadcasting over all inputs from opset 8).
Result<std::unique_ptr<Kernel>> createVariadic(const KernelInit& init);
// Where 9..21 (3-way broadcast).
Result<std::unique_ptr<Kernel>> createWhere(const KernelInit& init);
// BitShift 11..21 (direction LEFT | RIGHT; unsigned types; shifts >= the bit width give 0).
Result<std::unique_ptr<Kernel>> createBitShift(const KernelInit& init);
// PRelu 7..21 (slope broadcast unidirectionally to X).
Result<std::unique_ptr<Kernel>> createPRelu(const KernelInit& init);

namespace ew {

template <class T>
struct Tag {
  using type = T;
};

/// The element operations of Add, Sub, Mul and Div (what binaryBroadcast applies) and of Clip.
/// Shared with the elementwise chains of the analysis (elementwise_chain.h), whose outputs are
/// then the same bits as the kernels'.
struct AddOp {
  template <class T>
  T operator()(T a, T b) const { return T(a + b); }
};
struct SubOp {
  template <class T>
  T operator()(T a, T b) const { return T(a - b); }
};
struct MulOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T> && sizeof(T) >= 4) {
      using U = std::make_unsigned_t<T>;
      return T(U(a) * U(b));  // wraps without UB
    } else {
      return T(a * b);
    }
  }
};
struct DivOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (!std::is_integral_v<T>) return a / b;
    else if (b == 0) return T(0);  // integers: 0 rather than a trap
    // -a in unsigned arithmetic: MIN / -1 wraps to MIN rather than overflowing.
    else if (std::is_signed_v<T> && b == T(-1)) return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a));
    else return T(a / b);
  }
};

/// Clip of one value (bounds lo <= hi): NaN passes through.
template <class T>
T clipValue(T x, T lo, T hi) {
  const T v = x < lo ? lo : x;
  return v > hi ? hi : v;
}

/// fn(Tag<T>{}) for float, double and every integer dtype (not bool, not float16).
template <class Fn>
bool visitNumeric(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float: fn(Tag<float>{}); return true;
    case DType::Double: fn(Tag<double>{}); return true;
    case DType::Int8: fn(Tag<int8_t>{}); return true;
    case DType::UInt8: fn(Tag<uint8_t>{}); return true;
    case DType::Int16: fn(Tag<int16_t>{}); return true;
    case DType::UInt16: fn(Tag<uint16_t>{}); return true;
    case DType::Int32: fn(Tag<int32_t>{}); return true;
    case DType::UInt32: fn(Tag<uint32_t>{}); return true;
    case DType::Int64: fn(Tag<int64_t>{}); return true;
    case DType::UInt64: fn(Tag<uint64_t>{}); return true;
    default: return false;
  }
}

/// fn(Tag<T>{}) for float and double.
template <class Fn>
bool visitFloat(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float: fn(Tag<float>{}); return true;
    case DType::Double: fn(Tag<double>{}); return true;
    default: return false;
  }
}

/// float16 / bfloat16: computed by promoting to float32.
inline bool isHalfType(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

/// Promotes float16/bfloat16 to float32 (other dtypes are returned as they are).
Tensor promoteHalf(const Tensor& t, const KernelContext* ctx = nullptr);
/// Converts a float32 result back to `dtype` when it is float16/bfloat16.
Tensor demoteHalf(const Tensor& t, DType dtype, const KernelContext* ctx = nullptr);

constexpr int kMaxInputs = 4;
constexpr int64_t kGrain = 16384;  // elements per parallel chunk at least (scaled by KernelContext::parallelFor)

/// A numpy broadcast of up to kMaxInputs shapes to one output shape, with the output dims
/// collapsed: size-1 dims dropped, neighbours merged where every input is either broadcast
/// along both or contiguous along both. The innermost collapsed dim has stride 0 or 1.
struct BroadcastPlan {
  Shape outShape;
  int64_t numel = 0;
  int nIn = 0;
  std::vector<int64_t> dims;                               // collapsed output dims, >= 1 entry
  std::array<std::vector<int64_t>, kMaxInputs> strides;    // element strides per collapsed dim
  bool innerContig(int k) const { return strides[(size_t)k].back() != 0; }
};

/// Plans the broadcast of `shapes`; when `target` is given the output shape is the broadcast of
/// target and all shapes (used for in-place accumulation). False when incompatible.
bool planBroadcast(std::initializer_list<const Shape*> shapes, BroadcastPlan& plan, const Shape* target = nullptr);

/// Calls row(outOffset, inOffsets, len) for every run of the innermost collapsed dim (runs may be
/// split at chunk borders), chunks spread over ctx's threads. `row` is a template parameter:
/// the per-element work is inlined into it.
template <class Row>
void forEachRow(const BroadcastPlan& p, const KernelContext& ctx, const Row& row) {
  if (p.numel <= 0) return;
  const int r = (int)p.dims.size();
  const int nIn = p.nIn;
  auto chunk = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx((size_t)r);
    std::array<int64_t, kMaxInputs> off{};
    int64_t rem = begin;
    for (int d = r - 1; d >= 0; --d) {
      idx[(size_t)d] = rem % p.dims[(size_t)d];
      rem /= p.dims[(size_t)d];
      for (int k = 0; k < nIn; ++k) off[(size_t)k] += idx[(size_t)d] * p.strides[(size_t)k][(size_t)d];
    }
    const int64_t inner = p.dims[(size_t)r - 1];
    int64_t pos = begin;
    while (pos < end) {
      const int64_t len = std::min(inner - idx[(size_t)r - 1], end - pos);
      row(pos, off.data(), len);
      pos += len;
      if (pos >= end) break;
      // Advance the multi-index past the row just done.
      for (int k = 0; k < nIn; ++k) off[(size_t)k] -= idx[(size_t)r - 1] * p.strides[(size_t)k][(size_t)r - 1];
      idx[(size_t)r - 1] = 0;
      for (int d = r - 2; d >= 0; --d) {
        ++idx[(size_t)d];
        for (int k = 0; k < nIn; ++k) off[(size_t)k] += p.strides[(size_t)k][(size_t)d];
        if (idx[(size_t)d] < p.dims[(size_t)d]) break;
        for (int k = 0; k < nIn; ++k) off[(size_t)k] -= idx[(size_t)d] * p.strides[(size_t)k][(size_t)d];
        idx[(size_t)d] = 0;
      }
    }
  };
  if (p.numel < 2 * kGrain || ctx.threads <= 1) {
    chunk(0, p.numel);
  } else {
    ctx.parallelFor(p.numel, kGrain, chunk);
  }
}

/// out = op(a, b) with numpy broadcasting. out may alias a when a has the output's shape.
template <class TA, class TB, class TO, class Op>
void binaryBroadcast(const BroadcastPlan& p, const TA* a, const TB* b, TO* out, const Op& op, const KernelContext& ctx) {
  const bool ca = p.innerContig(0), cb = p.innerContig(1);
  forEachRow(p, ctx, [&](int64_t o, const int64_t* off, int64_t len) {
    const TA* pa = a + off[0];
    const TB* pb = b + off[1];
    TO* po = out + o;
    if (ca && cb) {
      for (int64_t i = 0; i < len; ++i) po[i] = op(pa[i], pb[i]);
    } else if (ca) {
      const TB bv = *pb;
      for (int64_t i = 0; i < len; ++i) po[i] = op(pa[i], bv);
    } else if (cb) {
      const TA av = *pa;
      for (int64_t i = 0; i < len; ++i) po[i] = op(av, pb[i]);
    } else {
      const TO v = op(*pa, *pb);
      for (int64_t i = 0; i < len; ++i) po[i] = v;
    }
  });
}

/// Runs blk(begin, end) over [0, n) in parallel chunks (flat, contiguous maps).
template <class Blk>
void parallelBlocks(const KernelContext& ctx, int64_t n, const Blk& blk, int64_t grain = kGrain) {
  if (n <= 0) return;
  if (n < 2 * grain || ctx.threads <= 1) {
    blk(0, n);
  } else {
    ctx.parallelFor(n, grain, [&](int64_t b, int64_t e) { blk(b, e); });
  }
}

}  // namespace ew
}  // namespace qs
