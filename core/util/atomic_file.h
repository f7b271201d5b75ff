// Writes files so that a reader never sees a half-written one: a temporary file in the same
// folder, flushed, then renamed over the target. On failure the temporary file is removed.
#pragma once

#include <functional>
#include <string>

#include "core/util/status.h"

namespace qs {

/// Writes `contents` to `path` atomically.
Status writeFileAtomic(const std::string& path, const std::string& contents);

/// Creates a temporary file beside `path`, calls write(tmpPath) to fill it, then renames it to
/// `path`. If write fails, the temporary file is removed and its Status returned.
Status writeAtomically(const std::string& path, const std::function<Status(const std::string& tmpPath)>& write);

}  // namespace qs
