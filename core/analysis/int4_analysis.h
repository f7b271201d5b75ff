// INT4 weight-only quantization of a model's MatMul/Gemm weights and its error
// analysis
// (`quantscope analyze|export --quantize-mode int4`), after ModelOpt's
// quantize_int4 (modelopt/onnx/quantization/int4.py):
//
//  - rtn_dq:   round to nearest, scale = block amax / 7 (core/quant/int4.h).
//  - awq_lite: activation-aware scaling. For each activation feeding quantized
//  weights (the
//              siblings Q/K/V share theirs), per input channel s = xm^a /
//              wm^(1-a) normalised by sqrt(max s * min s), with xm = mean |x|
//              over the calibration tokens and wm the mean over columns of |W|
//              / its block amax; a in {0, 0.1, ..., 1} (plus s = 1, which makes
//              the search never worse than rtn_dq on the calibration tokens)
//              chosen by the summed mean squared output error of the siblings.
//              The weights are quantized as W diag(s) and the activation is
//              multiplied by 1/s (an inserted Mul, exported as such). This is
//              ModelOpt's per-subgraph variant (one shared scale per
//              activation). Guards (ours): a sibling whose own error the
//              shared s does not reduce, a layer whose graph-wise error is
//              not below the all-RTN model's, and, while a graph output is
//              worse than all-RTN on the data, the scaled activation nearest
//              the outputs keep RTN: never worse than rtn_dq on that data.
//  - awq_clip: ModelOpt's clip search: per (block, column) the clip ratio in
//  {0.5, 0.55, ..., 1.0}
//              minimising the mean squared error of that block's partial output
//              over up to 64 calibration tokens. No activation scaling.
//
// Analysis: per layer, the layer-wise SNR (the layer's output on the
// calibration tokens with the quantized weight, its input exact) and the
// graph-wise SNR (every weight quantized), the graph outputs' SNR and, for
// logits outputs [N, T, V], the top-1 agreement (argmax over V equal). Random
// calibration inputs when no data is given (token ids uniform over their
// embedding table, other integer inputs 1), as ModelOpt does.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/io/calibration_data.h"
#include "core/ir/graph.h"
#include "core/numeric/metrics.h"
#include "core/quant/int4.h"
#include "core/quant/quant_config.h"
#include "core/util/progress.h"

namespace qs {

struct Int4Options {
  Int4Method method = Int4Method::AwqLite; // ModelOpt's default
  int64_t blockSize = 128;
  QuantConfig config; // --nodes-to-exclude, --op-types-to-exclude, ... (node
                      // names, op types)
  int threads = 0;    // executor threads (0 = all cores)
  int64_t maxTokens = 256; // calibration tokens kept per activation (strided),
                           // for the searches and layer-wise SNR
  int64_t clipTokens =
      64; // of those, the tokens of the clip search (ModelOpt's max_tokens)
};

/// One quantized weight.
struct Int4Layer {
  NodeId node = -1;
  std::string nodeName, opType, weightName, activationName;
  bool transposed = false; // Gemm transB=1: the initializer is [N, K]
  Int4Weight weight;       // [K, N], scales [ceil(K / block), N]
  std::vector<float> activationScale; // K: what the activation is multiplied by
                                      // (1/s); empty: none (rtn_dq, awq_clip)
  bool ownsActivationScale = false;   // the first layer of its activation: the
                                      // Mul's bytes are counted here
  double awqAlpha =
      NAN; // awq_lite: the chosen alpha; NaN for s = 1 or other methods
  double meanClip = 1.0;             // awq_clip: mean clip ratio
  ErrorMetrics layerwise, graphwise; // of the layer's output
  uint64_t bytesBefore = 0,
           bytesAfter =
               0; // FP32 weight; int4 values + scales (+ the Mul's scale)
};

struct Int4OutputResult {
  std::string name;
  ErrorMetrics metrics;
  double top1Agreement = NAN; // logits [N, T, V] only
};

struct Int4Result {
  Int4Method method = Int4Method::AwqLite;
  int64_t blockSize = 128;
  int64_t samples = 0;
  bool randomData = false;
  std::vector<Int4Layer> layers;
  std::vector<Int4OutputResult> outputs;
  std::vector<std::string>
      skipped; // "'name' (MatMul): reason", one per candidate left in float
  uint64_t bytesBefore = 0, bytesAfter = 0; // sums over layers
};

/// Quantizes the weights of every MatMul/Gemm with a constant 2-D float weight
/// (input B; Gemm with transA=0) and analyses the result over `data`. Fails
/// with InvalidArgument naming the node for a weight whose K is odd (two int4
/// per byte along K), for an invalid block size or pattern; Cancelled when
/// `cancel` is set. `progress` returning false cancels.
Result<Int4Result> runInt4Analysis(std::shared_ptr<const Model> model,
                                   const CalibrationData &data,
                                   const Int4Options &options,
                                   const ProgressFn &progress = {},
                                   const CancelToken *cancel = nullptr);

/// The model the exported file computes, in float: each quantized weight
/// replaced by its dequantized values and each activation scale as a Mul named
/// `<activation>_awq_Mul` in front of its consumers. Used by the analysis and
/// by tests.
Result<std::shared_ptr<Model>> int4SimulatedModel(const Model &model,
                                                  const Int4Result &result);

/// The batch `index` of `data`, with the integer inputs of random data filled
/// as `quantscope run --random-input` does (token ids uniform over their
/// embedding table, others 1).
Result<std::vector<NamedTensor>>
int4CalibrationBatch(const Model &model, const CalibrationData &data,
                     int64_t index);

} // namespace qs
