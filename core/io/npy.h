// NumPy .npy and .npz files: read and write Tensors, no Qt, no exceptions.
//
// Reading accepts format versions 1.0, 2.0 and 3.0, little- and big-endian data (swapped to
// native), fortran_order (transposed to C order) and the dtypes
//   float16 '<f2', float32 '<f4', float64 '<f8', int8 '|i1', int16 '<i2', int32 '<i4',
//   int64 '<i8', uint8 '|u1', uint16 '<u2', uint32 '<u4', uint64 '<u8', bool '|b1'.
// Everything is validated before anything large is allocated; a declared tensor larger than
// `maxBytes` is refused with StatusCode::ResourceLimit. Every error is one line:
//   "<path>: <reason>"  or, inside an npz, "<path>:<key>: <reason>".
// Status codes: IoError (file system), InvalidArgument (malformed file), Unsupported
// (a dtype or format version we do not read), ResourceLimit (size limit, out of memory).
//
// Writing produces version 1.0 headers padded to 64 bytes like numpy (2.0 only when the header
// would not fit), native little-endian data, C order. Writes are atomic: the data goes to
// "<path>.tmp-XXXXXX" in the same folder, which is renamed over <path> on success and removed on
// failure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "core/util/status.h"

namespace qs {

/// Default limit on the data size of one tensor read from a .npy/.npz: 16 GiB.
inline constexpr size_t kNpyDefaultMaxBytes = size_t(16) << 30;

// NamedTensor (name + tensor) is defined in core/ir/tensor.h.

/// Reads one .npy file.
Result<Tensor> readNpy(const std::string& path, size_t maxBytes = kNpyDefaultMaxBytes);
/// Parses a .npy image held in memory; `whereForMessages` prefixes every error message.
Result<Tensor> parseNpy(const void* data, size_t size, const std::string& whereForMessages,
                        size_t maxBytes = kNpyDefaultMaxBytes);

/// Reads every array of an .npz archive (stored or deflated), in archive order; names are the
/// member names without the ".npy" suffix. A member that is not a .npy file is an error.
Result<std::vector<NamedTensor>> readNpz(const std::string& path, size_t maxBytes = kNpyDefaultMaxBytes);
/// Same, from an archive held in memory.
Result<std::vector<NamedTensor>> parseNpz(const void* data, size_t size, const std::string& where,
                                          size_t maxBytes = kNpyDefaultMaxBytes);

/// Writes one .npy file (version 1.0 header, like np.save).
Status writeNpy(const std::string& path, const Tensor& t);
/// Writes an .npz archive with members "<name>.npy": deflated like np.savez_compressed when
/// `compress`, else stored like np.savez. Names must be non-empty and distinct.
Status writeNpz(const std::string& path, const std::vector<NamedTensor>& tensors, bool compress);

}  // namespace qs
