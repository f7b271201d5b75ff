// Shape-only and trivial data ops of the 'tensor' group, plus small helpers shared by the
// group's kernels (element-size dispatch, index reading, dtype-generic scalar writes).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/exec/kernel.h"

namespace qs {

// Reshape 5..21 (allowzero from 14), Flatten 1..21, Squeeze / Unsqueeze 1..21 (axes attribute < 13,
// input >= 13), Shape 1..21 (start/end from 15), Size 1..21, Identity 1..21, Dropout 1..21 (inference; seeded training mode),
// Expand 8..21, ConstantOfShape 9..21, Constant 1..21.
Result<std::unique_ptr<Kernel>> createReshape(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createFlatten(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createSqueeze(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createUnsqueeze(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createShape(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createSize(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createIdentity(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createDropout(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createExpand(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createConstantOfShape(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createConstant(const KernelInit& init);

namespace tensorops {

/// Calls fn.template operator()<U>() with an unsigned integer type U of `size` bytes
/// (1, 2, 4 or 8); returns false for other sizes. Used by byte-moving kernels.
template <class Fn>
bool dispatchBySize(size_t size, Fn&& fn) {
  switch (size) {
    case 1: fn.template operator()<uint8_t>(); return true;
    case 2: fn.template operator()<uint16_t>(); return true;
    case 4: fn.template operator()<uint32_t>(); return true;
    case 8: fn.template operator()<uint64_t>(); return true;
    default: return false;
  }
}

/// A copy of the node's identity (name, op, domain) for use in run(): kernels must not keep
/// references into the graph.
inline Node nodeTag(const Node& n) {
  Node t;
  t.name = n.name;
  t.opType = n.opType;
  t.domain = n.domain;
  return t;
}

/// A run-time error. The executor prefixes run() failures with the file and the node's label, so
/// (unlike nodeError, used by factories) the message does not repeat the node.
inline Status runError(const Node& /*node*/, StatusCode code, std::string message) {
  return Status(code, std::move(message));
}

inline bool isIndexType(DType t) { return t == DType::Int32 || t == DType::Int64; }

/// Element i of an int32/int64 tensor.
inline int64_t indexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::Int64 ? t.data<int64_t>()[i] : (int64_t)t.data<int32_t>()[i];
}

/// Row-major strides (in elements) of a shape.
inline std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

/// Writes `v` converted to `dtype` into `dst` (one element). Returns false for unsupported dtypes.
bool writeScalar(DType dtype, double v, void* dst);

/// Checks that `shape` is a valid, not absurdly large output shape; names it in the message.
Status checkOutputShape(const Shape& shape, const std::string& what);

/// Fills `count` elements of `elemSize` bytes at dst with the element at `value`.
void fillElements(void* dst, int64_t count, const void* value, size_t elemSize);

/// Fails naming the node when one of the first `n` inputs is missing.
Status needInputs(const Node& node, const KernelContext& ctx, size_t n);

/// Reads a 1-D (or scalar) int32/int64 tensor such as a shape, axes or pads input.
Status readShapeInput(const Node& node, const Tensor& t, const char* what, std::vector<int64_t>& out);

}  // namespace tensorops
}  // namespace qs
