#include "core/exec/kernel.h"

#include <algorithm>

#include "core/exec/parallel.h"

namespace qs {

void KernelContext::parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) const {
  // Kernels state grains of a few microseconds of work; a chunk handed to another thread must be
  // worth tens of microseconds (its wake-up, the data moving to its cache, and on a busy machine
  // the chance that it is descheduled while the caller waits for it). Kernels that size their
  // own blocks (Conv, the GEMM) call qs::parallelFor directly.
  constexpr int64_t kGrainScale = 4;
  qs::parallelFor(threads, n, grain > INT64_MAX / kGrainScale ? grain : grain * kGrainScale, fn);
}

const Attribute* AttrReader::get(const std::string& key, Attribute::Type expected) {
  const Attribute* a = m_node.attr(key);
  if (!a) return nullptr;
  if (a->type != expected) {
    fail("attribute '" + key + "' has type " + attributeTypeName(a->type) + ", expected " +
         attributeTypeName(expected));
    return nullptr;
  }
  return a;
}

void AttrReader::fail(const std::string& message) {
  if (m_status.isOk()) m_status = kernelError(StatusCode::InvalidModel, message);
}

int64_t AttrReader::i(const std::string& key, int64_t def) {
  const Attribute* a = get(key, Attribute::Type::Int);
  return a ? a->i : def;
}
float AttrReader::f(const std::string& key, float def) {
  const Attribute* a = get(key, Attribute::Type::Float);
  return a ? a->f : def;
}
std::string AttrReader::s(const std::string& key, const std::string& def) {
  const Attribute* a = get(key, Attribute::Type::String);
  return a ? a->s : def;
}
std::vector<int64_t> AttrReader::ints(const std::string& key, const std::vector<int64_t>& def) {
  const Attribute* a = get(key, Attribute::Type::Ints);
  return a ? a->ints : def;
}
std::vector<float> AttrReader::floats(const std::string& key, const std::vector<float>& def) {
  const Attribute* a = get(key, Attribute::Type::Floats);
  return a ? a->floats : def;
}
std::vector<std::string> AttrReader::strings(const std::string& key, const std::vector<std::string>& def) {
  const Attribute* a = get(key, Attribute::Type::Strings);
  return a ? a->strings : def;
}
const Tensor* AttrReader::tensor(const std::string& key) {
  const Attribute* a = get(key, Attribute::Type::Tensor);
  return a ? &a->t : nullptr;
}

bool normalizeAxis(int64_t& axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  return true;
}

bool broadcastShapes(const Shape& a, const Shape& b, Shape& out) {
  size_t r = std::max(a.size(), b.size());
  Shape result(r, 1);  // separate from `out`, which may alias a or b
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) {
      result[i] = da;
    } else if (da == 1) {
      result[i] = db;
    } else {
      return false;
    }
  }
  out = std::move(result);
  return true;
}

}  // namespace qs
