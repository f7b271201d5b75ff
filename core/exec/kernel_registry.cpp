#include "core/exec/kernel_registry.h"

namespace qs {

KernelRegistry KernelRegistry::builtin() {
  KernelRegistry r;
  for (auto* group : {&nnKernels, &elementwiseKernels, &tensorKernels, &reduceKernels, &recurrentKernels,
                      &visionKernels, &signalKernels, &controlFlowKernels, &contribKernels})
    for (auto& e : (*group)()) r.m_entries.push_back(std::move(e));
  return r;
}

void KernelRegistry::add(KernelEntry entry) {
  // Later entries win in find(), so an application can override a built-in.
  m_entries.push_back(std::move(entry));
}

static bool sameDomain(const std::string& a, const std::string& b) {
  auto norm = [](const std::string& d) { return d == "ai.onnx" ? std::string() : d; };
  return norm(a) == norm(b);
}

const KernelEntry* KernelRegistry::find(const std::string& opType, const std::string& domain, int64_t opset) const {
  for (auto it = m_entries.rbegin(); it != m_entries.rend(); ++it) {
    if (it->opType == opType && sameDomain(it->domain, domain) && opset >= it->sinceVersion &&
        opset <= it->untilVersion)
      return &*it;
  }
  return nullptr;
}

bool KernelRegistry::knowsOp(const std::string& opType, const std::string& domain) const {
  for (const auto& e : m_entries)
    if (e.opType == opType && sameDomain(e.domain, domain)) return true;
  return false;
}

}  // namespace qs
