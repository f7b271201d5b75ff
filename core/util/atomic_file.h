// Writes files so that a reader never sees a half-written one: a temporary file in the same
// folder, flushed, then renamed over the target. On failure the temporary file is removed.
#pragma once

#include <string>

#include "core/util/status.h"

namespace qs {

/// Writes `bytes` to a new temporary file beside `path` ("<path>.tmp-XXXXXX", mode 0644, synced);
/// its name in `tmp` ("" when none was created). On failure the caller removes `tmp`.
Status writeTemporaryFile(const std::string& path, const std::string& bytes, std::string& tmp);

/// Writes `contents` to `path` atomically.
Status writeFileAtomic(const std::string& path, const std::string& contents);

}  // namespace qs
