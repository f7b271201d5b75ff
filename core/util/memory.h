// Process memory figures for profiles and benchmarks.
#pragma once

#include <cstdint>

namespace qs {

/// Peak resident set size of this process in bytes (VmHWM), 0 when unknown.
uint64_t peakRssBytes();
/// Current resident set size in bytes (VmRSS), 0 when unknown.
uint64_t currentRssBytes();

}  // namespace qs
