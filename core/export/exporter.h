// Writes quantized.onnx (reference sections 2 and 5): the original ModelProto, re-parsed from its
// file, with QuantizeLinear -> DequantizeLinear inserted at exactly the quantization points an
// analysis simulated, using that analysis's scales, so that ONNX Runtime and TensorRT compute what
// the workbench predicted.
//
//  - Activations: per tensor, int8 or FLOAT8E4M3FN (fp8), zero point 0; one Q/DQ pair per quantized tensor, shared by
//    all its quantized consumers (only their input edges are rewired: a value that is also a graph
//    output keeps the float tensor on the output edge, and float consumers keep the float tensor).
//  - Weights: per channel along the plan's axis, either an int8 initializer `<w>_quantized` with a
//    DequantizeLinear (dqOnly, the default: what TensorRT and ModelOpt prefer), or the float weight
//    with a Q/DQ pair. The int8 values are computed exactly as the simulation does
//    (clamp(rne(w / scale), -127, 127); fp8: roundToFp8E4M3(w / scale) as FLOAT8E4M3FN bytes).
//    A float weight left without consumers is removed.
//  - Names: `<tensor>_QuantizeLinear`, `<tensor>_DequantizeLinear` (nodes), `<tensor>_scale`,
//    `<tensor>_zero_point`, `<weight>_quantized` (initializers), `<tensor>_QuantizeLinear_Output`,
//    `<tensor>_DequantizeLinear_Output` (values); a name already taken gets `_1`, `_2`, ...
//  - Opset: raised to 13 (per-channel `axis`) with libonnx's version converter when lower; the
//    converter needs the rank of Softmax inputs, taken from ExportOptions::observedRanks when the
//    file does not declare it. A model it cannot convert is refused naming the op.
//  - FP8: FLOAT8E4M3FN (data type 17) zero points and weights, opset 19, IR 9. libonnx 1.12
//    predates both, but TensorProto.data_type is a plain int: the converter raises to 17, the
//    checker checks the graph with int8 stand-ins, and the 17 -> 19 step is done here (Reduce*
//    axes to an input, Split's num_outputs). ONNX Runtime 1.30 runs the result (tests/export).
//  - External data when the model would exceed protobuf's 2 GB or on request.
//  - The result passes onnx::checker::check_model before it is returned (fp8: its int8 twin).
//
// Deterministic: equal inputs give byte-identical files (a reloaded quant_cfg.json reproduces the
// export). Beside core/onnx (the loader), this is the only place that includes protobuf headers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/analysis/results.h"
#include "core/export/external_data.h"
#include "core/ir/tensor.h"
#include "core/util/status.h"

namespace qs {

class Executor;

struct ExportOptions {
  bool dqOnly = true;          // weights as int8 (fp8) initializers + DequantizeLinear
  bool externalData = false;   // always write initializers as external data
  /// File name of the external data, relative to the model file.
  std::string externalDataName = "quantized.onnx.data";
  /// Above this serialized size the initializers go to external data anyway (protobuf's limit).
  uint64_t externalDataThresholdBytes = kExternalDataThresholdBytes;
  /// Initializers at least this large go to the external file (smaller ones stay inline).
  uint64_t externalDataMinTensorBytes = kExternalDataMinTensorBytes;
  /// Ranks of tensors observed at run time (observeRanks), used where the version converter needs
  /// a rank the file does not declare. May be empty for models already at opset >= 13.
  std::map<std::string, int> observedRanks;
  /// Float initializers whose values come from `model` instead of the file (the weights and biases
  /// a remedy changed: core/analysis/remedies.h).
  std::vector<std::string> replacedInitializers;
  /// Float initializers (or Constant node outputs) written with these values, whatever `model` and
  /// the file hold: the corrected biases of the quantized nodes (--bias-correction), which the
  /// model keeps original since they change its float output. Each must match the constant's shape.
  std::map<std::string, Tensor> constantValues;
  /// Nodes of `model` that are not in the file (a remedy inserted them: depthwise smoothing's Mul),
  /// by name: written before their first reader with their constant inputs as initializers, and
  /// their readers rewired to their outputs.
  std::vector<std::string> insertedNodes;
};

/// An exported model in memory, ready to be written.
struct ExportedModel {
  std::string modelBytes;           // serialized ModelProto
  std::string externalDataName;     // empty when every tensor is inline
  std::string externalDataBytes;
  int64_t opsetBefore = 0, opsetAfter = 0;
  size_t activationPairs = 0;       // Q/DQ pairs on activation tensors
  size_t weightPoints = 0;          // quantized weights
  size_t removedFloatWeights = 0;   // float initializers no longer used
};

/// Builds quantized.onnx from the model file `sourcePath` (the file `model` was loaded from) and
/// the analysis `r` (its plan, mode, activation scales and weight scales). Fails with Unsupported
/// for an opset that cannot be raised to 13 (int8) or 19 (fp8), naming the op, or a non-float weight; InvalidModel when the
/// file cannot be parsed or does not match `model`; RuntimeError when the result fails the ONNX
/// checker (a bug). Messages name the file and the node.
Result<ExportedModel> buildQuantizedModel(const std::string& sourcePath, const Model& model, const AnalysisResult& r,
                                          const ExportOptions& options = {});

/// The rank of every value after one run of `feeds` through `executor` (for observedRanks).
Result<std::map<std::string, int>> observeRanks(const Executor& executor, const std::vector<NamedTensor>& feeds);

/// Runs ONNX's checker on a model file (external data resolved beside it). Ok or InvalidModel
/// with the checker's message, prefixed by the path.
Status checkOnnxModelFile(const std::string& path);

}  // namespace qs
