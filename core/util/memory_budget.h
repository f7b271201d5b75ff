// Memory budgets (issue 16, "Bounded memory"): the --memory-budget text, and the default budget
// taken from the machine's available memory.
#pragma once

#include <cstdint>
#include <string>

#include "core/util/status.h"

namespace qs {

/// Parses a byte size: a number with an optional binary suffix K, M, G or T (KiB..TiB; "B" and
/// "iB" after it are accepted, case-insensitive), e.g. "4G", "512M", "1.5GiB", "65536". Fails with
/// InvalidArgument naming `flag` and the text for anything else, zero, or a size beyond 2^63.
Status parseByteSize(const std::string& text, uint64_t& bytes, const std::string& flag = "--memory-budget");

/// "1.50 GiB", "512 MiB", "300 KiB", "12 B": the size with the largest unit that keeps it >= 1.
std::string formatByteSize(uint64_t bytes);

/// Available memory of the machine in bytes (/proc/meminfo MemAvailable), 0 when unknown.
uint64_t availableMemoryBytes();

/// The default --memory-budget: half the available memory, or 4 GiB when that is unknown.
uint64_t defaultMemoryBudgetBytes();

}  // namespace qs
