#pragma once
// ONNX's own shape inference (libonnx 1.12, Debian bookworm) is run on every loaded model to show
// shapes before anything executes. Many of its inference functions read past their vectors or
// through null pointers on hostile but well-formed protobufs (fuzzing found Conv, ConvTranspose,
// GatherND and STFT; ONNX's tracker lists more). So it runs in a forked child process, with a
// schema registry that wraps the Conv family's inference in a rank check (those keep the rest of
// the model's shapes); whatever the child does, the loading process only reads back the inferred
// value infos, or goes on without them.
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <string>

namespace qs {

// The default ONNX schema registry with guarded inference for the Conv family (see the .cpp).
// Thread-safe; lives for the whole process.
const onnx::ISchemaRegistry* guardedSchemaRegistry();

// Runs onnx::shape_inference::InferShapes(proto, guardedSchemaRegistry()) in a child process and
// copies the graph's value_info and outputs it produced into `proto`. Returns false, with `proto`
// unchanged and `why` saying what happened (the signal, an inference error, the timeout), when the
// child did not finish cleanly within `timeoutMs`.
bool inferShapesIsolated(onnx::ModelProto& proto, int timeoutMs, std::string* why);

}  // namespace qs
