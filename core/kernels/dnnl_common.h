// What the oneDNN backends (conv_dnnl.cpp, matmul_dnnl.cpp) share; only for builds with oneDNN
// (QS_HAVE_DNNL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/util/status.h"

namespace qs {

/// The process's oneDNN CPU engine.
const dnnl::engine& dnnlCpuEngine();
/// A per-thread buffer of at least n bytes, 64-byte aligned, reused across runs (grows only): the
/// scratchpad of a primitive run by one task, since a primitive's own would be shared by the tasks
/// that run it at once. On transparent huge pages, whole 2 MiB ones, unless hugePagesEnabled() is false.
char* dnnlTaskScratch(size_t n);
/// Runs body(stream, b, e) over the tasks [0, tasks) on `threads` of our pool (parallelFor, grain
/// 1), each worker with oneDNN's own OpenMP held to one thread and a stream of its own; an
/// exception oneDNN throws in any task ends as RuntimeError "<what> failed: <message>".
Status dnnlParallelFor(int threads, int64_t tasks, const std::string& what,
                       const std::function<void(dnnl::stream&, int64_t, int64_t)>& body);

}  // namespace qs
