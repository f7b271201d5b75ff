// What the oneDNN backends (conv_dnnl.cpp, matmul_dnnl.cpp) share; only for builds with oneDNN
// (QS_HAVE_DNNL).
#pragma once

#include <cstddef>

#include <oneapi/dnnl/dnnl.hpp>

namespace qs {

/// The process's oneDNN CPU engine.
const dnnl::engine& dnnlCpuEngine();
/// A per-thread buffer of at least n bytes, 64-byte aligned, reused across runs (grows only): the
/// scratchpad of a primitive run by one task, since a primitive's own would be shared by the tasks
/// that run it at once.
char* dnnlTaskScratch(size_t n);

}  // namespace qs
