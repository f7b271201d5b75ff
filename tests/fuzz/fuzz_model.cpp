// libFuzzer target: the model loader (protobuf parse, validation, constant folding, shape
// inference), the `info` summary and kernel creation (every factory checks its node's attributes).
// Nothing is executed. Also feeds the bytes to parseTensorProto (the conformance-suite reader).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/exec/executor.h"
#include "core/exec/kernel_registry.h"
#include "core/onnx/loader.h"
#include "core/exec/model_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::KernelRegistry registry = qs::KernelRegistry::builtin();
  qs::LoadOptions lo;
  lo.maxTensorBytes = uint64_t(64) << 20;  // small limit: the fuzzer's RSS limit is 2 GiB
  auto tensor = qs::parseTensorProto(data, size, "fuzz.pb", lo);
  (void)tensor;
  // An empty baseDir: external data is refused (no file system access while fuzzing).
  auto model = qs::loadModelFromBytes(data, size, "fuzz.onnx", "", lo);
  if (!model) return 0;
  qs::ModelInfo info = qs::describeModel(**model, registry);
  (void)info;
  qs::ExecutorOptions eo;
  eo.threads = 1;
  eo.registry = &registry;
  auto ex = qs::Executor::create(*model, eo);
  (void)ex;
  return 0;
}
