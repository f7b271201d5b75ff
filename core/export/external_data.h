// ONNX external data out: initializers moved from the ModelProto into one side file
// (`<model file>.data`, as onnx.save_model(..., save_as_external_data=True) and ModelOpt write it),
// so that a model whose weights pass protobuf's 2 GB limit can still be written. Shared by the
// INT8/FP8 exporter and the INT4 exporter.
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/graph.h"

namespace onnx {
class ModelProto;
}

namespace qs {

/// Below this, initializers stay inline (scales, zero points, shapes).
constexpr uint64_t kExternalDataMinTensorBytes = 1024;
/// Models above this size get external data even when it was not asked for: protobuf refuses to
/// serialise 2 GB, and the graph itself needs room.
constexpr uint64_t kExternalDataThresholdBytes = (uint64_t(2) << 30) - (uint64_t(64) << 20);

struct ExternalData {
  std::string name;   // file name, relative to the model's folder; empty when nothing moved
  std::string bytes;  // the side file's contents (tensors at 64-byte aligned offsets)
};

/// Moves every initializer of at least `minTensorBytes` into the side file `location` (offsets
/// aligned to 64 bytes; keys location, offset, length). Initializers held in typed fields are read
/// from `graph`'s constants when it holds them (the loader's tensor has raw_data's layout) and left
/// inline otherwise.
ExternalData moveInitializersToExternal(onnx::ModelProto& proto, const std::string& location,
                                        uint64_t minTensorBytes = kExternalDataMinTensorBytes,
                                        const Graph* graph = nullptr);

}  // namespace qs
