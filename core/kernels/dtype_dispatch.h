// Dtype dispatch for kernels written as template lambdas ([&]<class T>() { ... }): calls
// fn.template operator()<T>() with the C++ type of a runtime dtype. Returns false for a dtype
// outside the set, which the caller reports in its own words. (elementwise.h's visitNumeric and
// visitFloat are the same sets for callers that take a Tag<T> argument.)
#pragma once

#include <cstdint>

#include "core/ir/dtype.h"

namespace qs::tensorops {

/// float and double.
template <class Fn>
bool dispatchReal(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float: fn.template operator()<float>(); return true;
    case DType::Double: fn.template operator()<double>(); return true;
    default: return false;
  }
}

/// float, double and every integer dtype (not bool; float16/bfloat16 go through float).
template <class Fn>
bool dispatchArith(DType t, Fn&& fn) {
  switch (t) {
    case DType::Int64: fn.template operator()<int64_t>(); return true;
    case DType::Int32: fn.template operator()<int32_t>(); return true;
    case DType::Int16: fn.template operator()<int16_t>(); return true;
    case DType::Int8: fn.template operator()<int8_t>(); return true;
    case DType::UInt8: fn.template operator()<uint8_t>(); return true;
    case DType::UInt16: fn.template operator()<uint16_t>(); return true;
    case DType::UInt32: fn.template operator()<uint32_t>(); return true;
    case DType::UInt64: fn.template operator()<uint64_t>(); return true;
    default: return dispatchReal(t, fn);
  }
}

}  // namespace qs::tensorops
