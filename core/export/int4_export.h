// The files of an INT4 weight-only export (core/analysis/int4_analysis.h):
// quantized.onnx and report.json, built in memory and written all or none
// (writeBundle).
//
// quantized.onnx: the original ModelProto, re-parsed from its file, where each
// quantized weight W [K, N] becomes an INT4 initializer `<w>_int4` (TensorProto
// data type 22, two values per byte, low nibble first), a float scale
// `<w>_scale` [ceil(K / block), N], and a DequantizeLinear(axis 0, block_size)
// `<w>_DequantizeLinear` feeding the MatMul (a Gemm with transB=1 keeps its [N,
// K] layout: axis 1, scale [N, ceil(K / block)]). AWQ's activation scale is a
// Mul `<x>_awq_Mul` by `<x>_awq_scale` [K] in front of the quantized consumers
// of x. The default-domain opset is raised to 21 (INT4 and block_size need it)
// and the IR version to 10: Reduce* ops below opset 18 get their `axes`
// attribute as an input, GridSample's modes are renamed (20); DFT below 20 and
// GroupNormalization below 21 are refused naming the node. libonnx 1.12 (this
// build) knows neither INT4 nor opset 21, so its checker is not run: ONNX
// Runtime is the checker (tests/export/test_int4_export.cpp).
#pragma once

#include <map>
#include <string>

#include "core/analysis/int4_analysis.h"
#include "core/export/bundle.h"
#include "core/export/external_data.h"

namespace qs {

struct Int4ExportedModel {
  std::string bytes; // the serialized ModelProto
  int64_t opsetBefore = 0, opsetAfter = 0;
  ExternalData externalData; // the side file, when the initializers went there
};

/// Where the initializers go (core/export/external_data.h): inline, or into
/// `externalDataName` beside the model when asked or when the model would pass
/// `externalDataThresholdBytes`.
struct Int4ExportOptions {
  bool externalData = false;
  std::string externalDataName = "quantized.onnx.data";
  uint64_t externalDataThresholdBytes = kExternalDataThresholdBytes;
};

/// Builds quantized.onnx for `result` from the file `model` was loaded from.
/// Fails (nothing written by anyone) for a model whose opset cannot be raised
/// to 21, naming the node and op.
Result<Int4ExportedModel> buildInt4Model(const Model &model,
                                         const Int4Result &result,
                                         const Int4ExportOptions &options = {});

/// report.json of an INT4 run (docs/report.schema.json, quantize_mode "int4").
std::string int4ReportJson(const Model &model, const Int4Result &result,
                           const std::string &calibrationData,
                           const std::vector<std::string> &warnings);

/// quantized.onnx (outputPath, or outputDir/quantized.onnx), its external
/// data file when there is one (`<model file>.data`), and, with outputDir,
/// report.json. Refuses an output that would overwrite the input model.
Result<ExportBundle> buildInt4Bundle(const Model &model,
                                     const Int4Result &result,
                                     const ExportTarget &target,
                                     const std::string &calibrationData,
                                     const std::vector<std::string> &warnings,
                                     Int4ExportOptions options = {});

} // namespace qs
