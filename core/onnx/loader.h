// Loads an ONNX model file into the IR (core/ir/graph.h) and validates it before anything runs.
// This directory is the only place that includes protobuf headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/util/status.h"

namespace qs {

struct LoadOptions {
  /// Largest tensor (initializer, attribute tensor, external data) accepted, in bytes; larger
  /// declarations are refused before any allocation. 0 = the machine's physical memory.
  uint64_t maxTensorBytes = 0;
  /// Run ONNX's shape inference (libonnx, opsets <= 17) to fill intermediate shapes.
  bool inferShapes = true;
  /// Fold Constant nodes into initializers (weights held in Constant nodes are then weights).
  bool foldConstantNodes = true;
};

/// Loads and validates `path`. Failure messages are one line naming the file and, where one
/// is involved, the node: "m.onnx: node 'conv1' (Conv): input 'x' is not produced ...".
Result<std::shared_ptr<Model>> loadModel(const std::string& path, const LoadOptions& options = {});

/// Same, from bytes in memory (fuzzing, tests). External data is resolved against `baseDir`;
/// an empty baseDir refuses external data.
Result<std::shared_ptr<Model>> loadModelFromBytes(const void* data, size_t size, const std::string& nameForMessages,
                                                  const std::string& baseDir, const LoadOptions& options = {});

/// Parses a serialized onnx.TensorProto (e.g. the conformance suite's input_0.pb). The name is
/// the proto's name field (may be empty). External data is refused.
Result<NamedTensor> parseTensorProto(const void* data, size_t size, const std::string& where,
                                     const LoadOptions& options = {});

/// The opset range of the default domain the loader accepts.
constexpr int64_t kMinOpset = 7;
/// ONNX's shape inference runs in a child process (core/onnx/shape_inference_guard.h); past this
/// the child is killed and the model loads without inferred shapes.
constexpr int kShapeInferenceTimeoutMs = 20000;
constexpr int64_t kMaxOpset = 21;
/// Deepest nesting of subgraphs (If inside Loop inside ...) the loader accepts.
constexpr int kMaxSubgraphDepth = 16;

/// Physical memory of this machine in bytes (the default tensor size limit).
uint64_t physicalMemoryBytes();

}  // namespace qs
