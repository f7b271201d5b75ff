// The quantization analysis of one model (reference section 4): calibration of every potential
// quantization point, then graph-wise (accumulated) and layer-wise (isolated) error per node,
// the weight-only / activation-only split, and the sensitivity of the graph outputs to each
// node alone, all as sums over every analysed sample. Toggling nodes afterwards recomputes only
// the affected downstream cone and returns results equal to a full recompute.
//
// Long calls are synchronous and take a progress callback (returning false cancels) plus the
// session's cancel flag; results are immutable snapshots (shared_ptr<const>), so a GUI can keep
// showing the previous results while a new analysis runs or after one is cancelled.
#pragma once

#include <array>
#include <cstdint>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/analysis/clip_search.h"
#include "core/analysis/node_paths.h"
#include "core/analysis/quant_state.h"
#include "core/analysis/results.h"
#include "core/numeric/metrics.h"
#include "core/util/progress.h"
#include "core/exec/executor.h"
#include "core/io/calibration_data.h"
#include "core/kernels/qconv.h"
#include "core/quant/calibrator.h"
#include "core/quant/quant_config.h"
#include "core/quant/quant_types.h"

namespace qs {

/// How the output sensitivity of each node is computed (AnalysisOptions::sensitivityMethod).
enum class SensitivityMethod {
  Exact,  // each quantizable node alone, its downstream cone re-run over every batch
  Fast,   // first-order estimate from the analysis's own sums (fast_sensitivity.h); exact on demand
};

struct AnalysisOptions {
  CalibrationSettings calibration;    // method, percentile, mode
  bool layerwise = true;              // layer-wise error and the weight/activation split
  bool sensitivity = true;            // sensitivity of the graph outputs to each node alone
  /// With `sensitivity`: the cone sweep, or the estimate (no pass of its own) with exactSensitivity()
  /// on demand. Either way NodeResult::sensitivityEstimateDb carries the estimate.
  SensitivityMethod sensitivityMethod = SensitivityMethod::Exact;
  /// With the fast method, autoFallback() computes the exact sensitivity of this many of the
  /// most sensitive quantized nodes (by the current figures) before excluding the worst.
  int fallbackExactTopK = 8;
  int threads = 0;                    // executor threads (0 = all cores)
  /// Activations kept across batches so that a toggle re-runs only the affected cone. Above this
  /// budget, a toggle re-runs the whole quantized pass (results are the same, only slower).
  uint64_t cacheBudgetBytes = uint64_t(1) << 30;
  /// Bytes of activations the analysis may hold (streaming.h): when the float tables it would
  /// keep exceed this, it keeps none and recomputes (the same figures, more time); the toggle
  /// cache takes at most half. Unbounded by default; `--memory-budget` sets it.
  uint64_t memoryBudgetBytes = UINT64_MAX;
  /// Issue 16's bound on the toggle cache (the workbench: 1.5): with a factor f > 0, analyze()
  /// keeps at most what fits under f x (the model's weights + the float activations of every
  /// analysed batch) beside what the process already holds (its RSS when analyze() starts) and
  /// one batch's two tables for the passes (streaming.h, boundedCacheBudget); the batches beyond
  /// the cache are recomputed on toggle in one float-and-quantized walk (streamingToggleBatch),
  /// the same figures. 0: no bound (cacheBudgetBytes and the memory budget alone).
  double cacheRssBound = 0;
  /// With cacheRssBound: what the cache may keep whatever the bound (a small model's bound is
  /// below the workbench's own RSS without a model), within cacheBudgetBytes.
  uint64_t cacheFloorBytes = uint64_t(64) << 20;
  /// The float graph outputs of the batches not cached, kept by analyze() for exactSensitivity()
  /// (which then re-runs only the float nodes feeding the cones, not a whole float pass): within
  /// an eighth of the cache budget, and at least within this floor (an eighth of the memory budget
  /// at most), since outputs are small beside the tables (8 bert_encoder samples: 1.5 MB).
  uint64_t keptOutputsFloorBytes = uint64_t(64) << 20;
  /// With the fast method: within the same bytes as the kept outputs, analyze() also keeps, for
  /// the batches not cached, the float values that the cones of the fallbackExactTopK nodes the
  /// estimate ranks worst read from outside themselves (their inputs, the residual branches and
  /// sibling projections they join), so that exactSensitivity() of those nodes runs the cones
  /// alone, without the float prefix. The ranking is the estimate of the first batches (those
  /// that run side by side), whose own cone inputs are not kept. Off: the outputs alone (the reference
  /// the tests compare with); the figures are the same either way.
  bool keepConeInputs = true;
  /// INT8 Convs (group 1, quantized input and weights) in integer arithmetic where the CPU has
  /// AVX-512 VNNI or AVX2 (core/kernels/qconv.h): the same integers as fake quantization, summed
  /// exactly (what TensorRT's INT8 kernels compute). Off: FP32 convolutions of the fake-quantized
  /// tensors (what ONNX Runtime computes on the Q/DQ file; the reference the tests compare with).
  /// The two differ where the FP32 sums' rounding moves a value across the next point's rounding
  /// tie: ~1e-4 dB on most figures, more on tiny outputs (docs/design.md, "Integer Convs").
  bool integerConv = true;
  /// A depthwise Conv's three layer-wise runs (both points, activations only, weights only) in
  /// one pass plane by plane, each output compared while in cache: the same output bits as
  /// running the node three times, summed in another order. Off: three runs of the node (the
  /// reference the tests compare with).
  bool planeLayerwise = true;
  /// Chains of elementwise ops with no points of their own (ElementwiseChain) computed in one
  /// pass in the analysis's quantized pass, the same output bits and sums as op by op; and the
  /// other Add, Sub, Mul, Div nodes (NodePaths::binary) compared in the pass that computes them.
  /// Off: op by op, each output compared after it (the reference the tests compare with).
  bool fuseElementwise = true;
  /// The weight/activation split of a MatMul with a weight point on a 2-D B from noise powers
  /// (<X^T X, dW dW^T> and <dX^T dX, W W^T>, core/analysis/split_gram.h) instead of the products
  /// X * Wq and Xq * W, where that costs fewer multiply-adds (K below about 2N): the same SNRs to
  /// float rounding. Off: the products (the reference the tests compare with).
  bool gramSplit = true;
  /// The fake-quantized weights of MatMuls with a 2-D B packed once per analysis for the GEMM
  /// (NodePaths::packedWq), as the executor packs the float weights at load: the same bits, one
  /// more copy of those weights held. Off: Wq packed on every run (for A/B runs and the tests).
  bool prepackWeights = true;
  /// With prepackWeights, where oneDNN runs AVX-512 matmul kernels (DnnlMatMul::preferred(); an
  /// Intel Xeon, not this project's AVX2 AMD machines) and the weight is at least 64 x 64: Wq also
  /// held in oneDNN's layout, and the layer-wise products Xq * Wq and X * Wq run by oneDNN's
  /// matmul, about twice the kernel's speed there. Their sums come in oneDNN's order: layer-wise
  /// figures move by float rounding (~1e-5 dB); graph-wise figures and sensitivities keep their
  /// bits (node_paths.h, PackedMatMulWeight). Costs one more copy of those weights. Off: the
  /// kernel's panels (the reference the bit-for-bit tests compare with).
  bool dnnlMatMul = true;
  /// Calibrate every float activation tensor (graph inputs and node outputs), not only the
  /// quantization points: AnalysisResult::tensorRanges, for TensorRT's implicit INT8.
  bool allTensorRanges = false;
  /// Graph output name -> how its agreement is measured (agreement.h); outputs not named take the
  /// rule (Auto). An unknown name fails create().
  std::map<std::string, OutputKind> outputKinds;
  /// Method `auto`: the layer-wise clip search's sample bound (core/analysis/clip_search.h).
  ClipSearchOptions clipSearch;
  /// --weight-clip-search: per weight value, the clip ratio of each channel's scale (QuantState::weightClip).
  std::map<ValueId, std::vector<float>> weightClip;
  /// --realisations N (docs/quality.md, "Realisations of the rounding noise"): besides the
  /// analysis as it is (realisation 0), N - 1 quantized passes with every activation scale
  /// multiplied by (1 + realisationDither n), n ~ N(0, 1) drawn per tensor from a seed of the
  /// realisation: values within ~1e-4 of a step of a rounding tie land on the other side, as they
  /// do where another runtime's float sums differ in the last bits. OutputResult::realisationSnrDb
  /// then holds each realisation's output SNR after analyze() and measureRealisations(), and the
  /// fallback checks its target on their mean. 1: none.
  int realisations = 1;
  double realisationDither = 1e-6;
  /// --realisations auto (docs/quality.md, "Realisations by default: the probe"): `realisations` is
  /// decided by a probe of realisationProbe realisations at the all-INT8 start (method auto: on the
  /// whole-graph table check's best table, before the choice among tables; otherwise after the
  /// analysis's pass): when the sd of the worst output's SNR across them exceeds
  /// realisationSpreadSdDb, realisations becomes realisationsWhenSpread (and method auto scores its
  /// tables on the mean of realisationProbe realisations), else 1.
  bool realisationsAuto = false;
  int realisationProbe = 4;
  int realisationsWhenSpread = 8;
  double realisationSpreadSdDb = 0.25;
  /// --what-if (QuantState::whatIf): a bound no engine runs; analysis only. With activations per
  /// channel, calibrate() also collects each per-channel point's channel max |x|. Turns off the
  /// integer Convs, the plane-wise depthwise runs and the prepacked weights (every node then goes
  /// through FakeQuantTransform::transform, which applies it).
  WhatIf whatIf = WhatIf::None;
  ChannelAmax whatIfChannelAmax = ChannelAmax::Capped;  // --what-if-channel-amax
};

struct BatchCache;
struct BatchSums;
class BatchSweep;
struct PassContext;

class QuantSession {
 public:
  ~QuantSession();
  /// Plans the quantization points of `model` and applies `config` (warnings for patterns that
  /// match nothing go to `warnings`). Fails for an invalid pattern or an executor that cannot be
  /// created.
  static Result<std::unique_ptr<QuantSession>> create(std::shared_ptr<const Model> model, const QuantConfig& config,
                                                      const AnalysisOptions& options,
                                                      std::vector<std::string>* warnings = nullptr);

  /// Collects statistics (abs max and histogram) of every potential activation point over
  /// `data`, and the per-channel amax of every weight.
  Status calibrate(const CalibrationData& data, const ProgressFn& progress = {});
  /// Uses explicit amax values instead of calibrating (a TensorRT calibration cache, a saved
  /// config): tensor name -> amax. Tensors without an entry keep calibrated values if any.
  Status setActivationAmax(const std::map<std::string, float>& amaxByTensor);

  /// --what-if-channel-amax searched: what calibrate()'s per-channel clip search found, summed over
  /// its channels (each channel's squared error over its calibration values, at capped's amax and at
  /// the one chosen). Zeros without it.
  struct ChannelClipSearch {
    int64_t points = 0;       // (value, axis) pairs searched
    int64_t channels = 0;     // their channels with a non-zero max
    int64_t belowCapped = 0;  // channels clipped below capped's amax
    double errorCapped = 0, errorSearched = 0;  // sum of squared errors over all channels
    double meanRatioDb = 0;  // mean over channels of 10 log10(capped's MSE / the searched MSE)
  };
  const ChannelClipSearch& channelClipSearch() const { return m_channelClipSearch; }

  /// --bias-correction (bias_correction.h): constants replaced where their owner node is quantized
  /// (QuantState::corrections), in every quantized pass, layer-wise run and toggle; the float
  /// model, and so every float reference, stays the original. Replaces any earlier set; the
  /// previous results are dropped (analyze() again). Fails InvalidArgument, naming the node, for a
  /// correction that is not of a float constant input of its shape, or a second one of one node.
  Status setConstantCorrections(std::vector<ConstantCorrection> corrections);

  /// Per weight value, the ratio of each channel's scale to the one its abs max gives
  /// (AnalysisOptions::weightClip, e.g. the head weight scale search of weight_clip.h), set after
  /// calibration: the weights are quantized again, the activation scales kept, the previous
  /// results dropped (analyze() again). Replaces any earlier ratios. Fails InvalidArgument, naming
  /// the tensor, for a value that is not a weight point or a ratio count that is not its channels'.
  Status setWeightClip(std::map<ValueId, std::vector<float>> ratios);

  /// Runs every analysis over `data` (the calibration set or a separate analysis set). The
  /// session keeps `data` for later incremental updates when activations exceed the cache budget.
  Result<std::shared_ptr<const AnalysisResult>> analyze(std::shared_ptr<const CalibrationData> data,
                                                        const ProgressFn& progress = {});

  /// Turns nodes on or off and recomputes only what changes (the graph-wise error of the
  /// downstream cone and the outputs). Equal to a full analyze() with the new states.
  Result<std::shared_ptr<const AnalysisResult>> setQuantized(const std::vector<std::pair<NodeId, bool>>& toggles,
                                                              const ProgressFn& progress = {});

  /// The output SNR of each graph output in `realisations` realisations of the rounding noise at
  /// the current states (AnalysisOptions::realisations): [output][k], k = 0 the current result's,
  /// k > 0 a whole quantized pass over the analysed data with every activation scale multiplied by
  /// (1 + dither n), n ~ N(0, 1) seeded by (k, tensor). Nothing of the session changes. Needs a
  /// prior analyze(); fails when cancelled.
  Result<std::vector<std::vector<double>>> realisationSnrDb(int realisations, double dither,
                                                            const ProgressFn& progress = {}) const;
  /// The state realisation `realisation` of realisationSnrDb() runs: the current one with every
  /// activation scale dithered by ditherActivationScales(realisation, dither) (0: the state as it is).
  QuantState realisationState(int realisation, double dither) const;
  /// realisationSnrDb() with the options' count and dither, put into the result's
  /// OutputResult::realisationSnrDb (the result is replaced by a copy that has them). With
  /// AnalysisOptions::realisations <= 1 the result as it is.
  Result<std::shared_ptr<const AnalysisResult>> measureRealisations(const ProgressFn& progress = {});

  /// Excludes the most sensitive quantized node, one at a time, until every graph output reaches
  /// `targetDb` or no quantized node is left. Needs a prior analyze() with sensitivity.
  Result<std::vector<FallbackStep>> autoFallback(double targetDb, const ProgressFn& progress = {});
  /// The same, until every output reaches `targetDb` (NaN: no SNR target) and every output with an
  /// agreement (AnalysisResult::worstAgreement) reaches `targetAgreement` (a fraction; NaN: none).
  /// An agreement target on a model none of whose outputs has one fails, naming the outputs.
  Result<std::vector<FallbackStep>> autoFallback(double targetDb, double targetAgreement, const ProgressFn& progress = {});

  /// The exact sensitivity of `nodes` (quantizable ones; others are refused): each node alone, its
  /// downstream cone re-run over every analysed batch (the cached float tables where kept, else a
  /// float pass per batch). The result's sensitivitySnrDb of those nodes becomes the exact figure
  /// (sensitivityExact set). Needs a prior analyze().
  Result<std::shared_ptr<const AnalysisResult>> exactSensitivity(const std::vector<NodeId>& nodes,
                                                                 const ProgressFn& progress = {});

  /// Warnings of the last calibrate(): tensors whose histograms hold too few values to be trusted.
  const std::vector<std::string>& calibrationWarnings() const { return m_calibrationWarnings; }
  /// Method `auto`: the clip search's choice per activation tensor after calibrate().
  const std::map<ValueId, ClipChoice>& clipChoices() const { return m_clipChoices; }

  /// Statistics of an activation tensor (histogram and per-method amax), or nullptr.
  const TensorStats* stats(ValueId value) const;
  std::shared_ptr<const AnalysisResult> result() const { return m_result; }
  const QuantPlan& plan() const { return m_plan; }
  /// The quantization the analysis simulates (after calibrate()): points, quantized weights (with
  /// AnalysisOptions::weightClip), activation scales with the clip search's and explicit amax,
  /// high precision. Remedies copy it for their own runs on the plain path.
  const QuantState& state() const { return m_state; }
  const Model& model() const { return *m_model; }
  const Executor& executor() const { return *m_executor; }
  const AnalysisOptions& options() const { return m_options; }
  /// The caller's cancel token: set from any thread, it stops a running call (which returns
  /// Cancelled, previous results kept). The caller resets it (or passes a new one) for the next call.
  void setCancelToken(std::shared_ptr<CancelToken> token) { m_cancelToken = std::move(token); }
  CancelToken& cancelToken() const { return *m_cancelToken; }
  /// Bytes of activations kept for incremental toggles, and the number of batches they cover.
  uint64_t cachedBytes() const { return m_cachedBytes; }
  int64_t cachedBatches() const { return (int64_t)m_cache.size(); }
  /// The cache budget the last analyze() planned with (cacheBudgetBytes within the memory budget
  /// and cacheRssBound), and one batch's float and quantized tables (0: not known).
  uint64_t cacheLimitBytes() const { return m_cacheLimit; }
  uint64_t batchTableBytes() const { return m_batchBytes; }
  /// Batches of the analysed data (0 before analyze()).
  int64_t analysedBatches() const;
  /// Whether the last analyze() streamed (AnalysisOptions::memoryBudgetBytes): toggles beyond the
  /// cache and exactSensitivity() then recompute instead of keeping a float table.
  bool streaming() const { return m_streaming; }
  /// Batches not cached whose float graph outputs are kept (exactSensitivity() then runs only
  /// the float nodes that feed the cones).
  int64_t floatOutputBatches() const {
    int64_t n = 0;
    for (const auto& o : m_floatOutputs) n += !o.empty();
    return n;
  }
  /// Batches not cached whose cone inputs (AnalysisOptions::keepConeInputs) are kept, and the
  /// nodes whose cones they serve (the estimate's worst first).
  int64_t coneInputBatches() const {
    int64_t n = 0;
    for (const auto& o : m_coneInputs) n += !o.empty();
    return n;
  }
  const std::vector<NodeId>& coneInputNodes() const { return m_coneInputNodes; }

 private:
  QuantSession() = default;
  // The points per node, the weights quantized, the fast paths chosen (once per plan).
  void indexPoints();
  std::vector<char> enabledMask() const;
  void finishResult(AnalysisResult& r, const std::vector<ErrorAccumulator>& nodeAcc,
                    const std::vector<ErrorAccumulator>& outAcc) const;
  // AnalysisOptions::keepConeInputs (exact_sensitivity.cpp): ranks the nodes by the estimate of
  // `first` (the sums of the first batches) and sets m_coneInputNodes to the fallbackExactTopK
  // worst; per value, 1 + the index there of the first of them whose cone reads it (0: none).
  std::vector<int32_t> chooseConeInputs(std::span<const BatchSums> first, const BatchSweep& sweep);
  // The fast estimate (fast_sensitivity.h) from merged graph-wise, layer-wise and output sums, with
  // this session's enabled nodes: the final result's and chooseConeInputs' ranking.
  std::vector<double> estimateFrom(const std::vector<ErrorAccumulator>& node, const std::vector<ErrorAccumulator>& layer,
                                   const std::vector<ErrorAccumulator>& out, const BatchSweep& sweep) const;
  // What the passes of batch_sweep.h read of this session.
  PassContext passContext() const;
  Status cancelled() const;

  std::shared_ptr<const Model> m_model;
  std::unique_ptr<Executor> m_executor;
  AnalysisOptions m_options;
  QuantPlan m_plan;
  std::map<ValueId, TensorStats> m_stats;
  std::map<ValueId, float> m_rangeAmax;  // calibrated amax of the tensors that are not points
  void calibrateTensorRanges();
  // After the statistics: the sparse-histogram warnings, and for method auto the clip search.
  Status searchClips(const CalibrationData& data, const ProgressFn& progress);
  // Its last step: the choices refined on the outputs (clip_refine.h), ClipSearchOptions::refine.
  Status refineClips(const CalibrationData& data, const std::map<ValueId, ClipScores>& layerScores,
                     const std::map<ValueId, ClipCandidate>& layerwise, const ProgressFn& progress);
  std::map<ValueId, float> tensorRanges() const;
  std::map<ValueId, float> m_amaxOverride;
  // --what-if activations-per-channel: each per-channel point's channel max |x| by (value, axis).
  std::map<std::pair<ValueId, int>, std::vector<double>> m_channelMax;
  // --what-if-channel-amax searched: each channel's chosen amax by (value, axis), from one float pass
  // over the calibration data after the tensors' scales (their amax is capped's candidate); kept as
  // is by setActivationAmax().
  Status searchChannelClips(const CalibrationData& data, const ProgressFn& progress);
  std::map<std::pair<ValueId, int>, std::vector<double>> m_channelSearched;
  ChannelClipSearch m_channelClipSearch;
  std::map<ValueId, ClipChoice> m_clipChoices;  // method auto: the search's amax, beneath m_amaxOverride
  RealisationProbe m_probe;  // --realisations auto: the probe, once per session
  // The probe's decision from the worst output's SNR per realisation (sets m_probe, m_options.realisations).
  void decideRealisations(std::vector<double> worst, const std::string& where, int64_t samples);
  std::vector<std::string> m_calibrationWarnings;
  // The amax overrides computeScales() applies: the clip search's choices, then the explicit ones.
  std::map<ValueId, float> scaleOverrides() const;
  QuantState m_state;  // points, weight and activation scales, fake-quantized weights
  NodePaths m_paths;   // which node takes which path
  int64_t m_calibratedSamples = 0;
  std::shared_ptr<const AnalysisResult> m_result;
  // Per-node accumulators of the last analysis, kept for incremental updates.
  std::vector<ErrorAccumulator> m_nodeAcc, m_outAcc;
  std::vector<AgreementAccumulator> m_outAgree;  // per graph output, with m_outAcc
  std::vector<OutputKind> m_outputKinds;         // per graph output, from AnalysisOptions::outputKinds
  std::vector<std::unique_ptr<BatchCache>> m_cache;  // per analysed batch, when within budget
  uint64_t m_cachedBytes = 0;
  uint64_t m_cacheLimit = 0;  // the cache budget of the last analyze()
  bool m_boundedCache = false;  // the last analyze() bounded the cache by cacheRssBound
  bool m_streaming = false;  // the memory budget holds no whole float table (streaming.h)
  uint64_t m_batchBytes = 0;  // float and quantized activations of one batch (0: not known yet)
  std::shared_ptr<const CalibrationData> m_data;
  // Per analysed batch not cached: its float graph outputs, where kept (exactSensitivity()).
  std::vector<std::vector<Tensor>> m_floatOutputs;
  // Per analysed batch not cached: the float values the cones of m_coneInputNodes read from
  // outside themselves, where kept (AnalysisOptions::keepConeInputs).
  std::vector<std::vector<std::pair<ValueId, Tensor>>> m_coneInputs;
  std::vector<NodeId> m_coneInputNodes;
  std::shared_ptr<CancelToken> m_cancelToken = std::make_shared<CancelToken>();
};

}  // namespace qs
