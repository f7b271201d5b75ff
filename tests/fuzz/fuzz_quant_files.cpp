// libFuzzer target: the quant_cfg.json and calibration.cache readers (--load-config,
// --calibration-cache-path), and a parsed config matched against a small model
// (configForSavedStates: per-channel amax, node lists, user regexes).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/onnx/loader.h"
#include "core/export/quant_files.h"
#include "tests/fuzz/fuzz_models.h"

namespace {

const qs::Model& fuzzModel() {
  static const std::shared_ptr<qs::Model> model = [] {
    std::string bytes = qs::fuzz::convReluConvModel();
    auto m = qs::loadModelFromBytes(bytes.data(), bytes.size(), "fuzz_model.onnx", "");
    if (!m) __builtin_trap();
    return *m;
  }();
  return *model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cache = qs::parseCalibrationCache(text, "fuzz.cache");
  (void)cache;
  auto cfg = qs::parseQuantConfig(text, "quant_cfg.json");
  if (!cfg) return 0;
  auto matched = qs::configForSavedStates(*cfg, fuzzModel(), qs::QuantConfig{}, "quant_cfg.json");
  (void)matched;
  return 0;
}
