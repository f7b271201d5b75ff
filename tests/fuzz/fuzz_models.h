// Tiny ONNX models built in code, shared by the quant-files fuzzer (the model a config is matched
// against) and the seed generator.
#pragma once

#include <string>
#include <vector>

namespace qs::fuzz {

/// x[1,3,8,8] -> Conv 'conv0' (w0[4,3,3,3], b0[4]) -> Relu 'relu0' -> Conv 'conv1' (w1[2,4,1,1]) -> y.
/// Weights are deterministic (channel c of w0 has amax 0.25 * (c + 1)).
std::string convReluConvModel();

/// Small models covering the loader's features, serialized: name -> bytes.
std::vector<std::pair<std::string, std::string>> seedModels();

}  // namespace qs::fuzz
