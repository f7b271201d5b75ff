// Memory on transparent huge pages, for the large buffers every pass streams.
#pragma once

#include <cstddef>

namespace qs {

/// Size from which allocateOnHugePages maps its own memory (one transparent huge page, 2 MiB).
inline constexpr size_t kHugePageBytes = size_t(2) << 20;

/// Whether large buffers go on transparent huge pages: QS_HUGE_PAGES unset or not "0", and the system's THP mode
/// not "never". Read once per process.
bool hugePagesEnabled();

/// `bytes` (at least kHugePageBytes) of fresh, zero, 2 MiB aligned memory whose whole 2 MiB pages are advised as
/// transparent huge pages (madvise(MADV_HUGEPAGE)) before anything touches them, so that the first fault maps a
/// huge page: one page walk per 2 MiB instead of per 4 KiB for a buffer streamed from memory on every pass
/// (docs/performance.md, "resnet50 at batch 1: weights, tensors and scratch on huge pages (wt-r50b)"). A fresh
/// mapping, not malloc: malloc may hand back memory already touched in 4 KiB pages. `advised` (may be null) gets
/// the bytes advised (0 where the kernel refused: ordinary pages, the same memory otherwise). Null when the mapping
/// fails. Free with freeOnHugePages(p, bytes).
void* allocateOnHugePages(size_t bytes, size_t* advised = nullptr);
/// Frees what allocateOnHugePages(bytes) returned (null: nothing).
void freeOnHugePages(void* p, size_t bytes);

}  // namespace qs
