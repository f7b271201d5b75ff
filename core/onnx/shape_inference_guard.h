#pragma once
// ONNX's own shape inference (libonnx 1.12, Debian bookworm) is run on every loaded model to show
// shapes before anything executes. Some of its inference functions index past their vectors on
// hostile but well-formed protobufs; this registry hands InferShapes the same schemas with those
// functions wrapped in checks that refuse (throw onnx::InferenceError) instead.
#include <onnx/defs/schema.h>

namespace qs {

// The default ONNX schema registry with guarded inference for the ops listed in
// shape_inference_guard.cpp. Thread-safe; lives for the whole process.
const onnx::ISchemaRegistry* guardedSchemaRegistry();

}  // namespace qs
