// The quantization state of an analysis session: the points of each node, the weights' scales
// and fake-quantized copies, the activations' scales, and the input transform that applies
// them (fake quantization at the points of the enabled nodes, the fast paths of node_paths.h
// where a node takes one).
#pragma once

#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/analysis/results.h"
#include "core/exec/executor.h"
#include "core/quant/calibrator.h"
#include "core/quant/quant_types.h"

namespace qs {

struct NodePaths;
class NodeCompare;

/// --what-if (analysis only, never exported): a simulation that no INT8 engine runs, to bound what a
/// family of remedies could buy at best. WeightsFloat: every weight point left in float (the
/// activations quantized as usual), the bound of any weight-side remedy (rounding, clip search,
/// bias correction). ActivationsPerChannel: each channel of a Conv input (axis 1) and of a
/// MatMul/Gemm input (its reduction axis K) its own scale, the channel's amax the tensor's
/// calibrated amax x the channel's max / the tensor's max (the calibrator's clip fraction carries
/// over), the bound of any per-channel rescaling (equalization, smoothing, SmoothQuant) under
/// per-tensor activation scales. Both: the two at once.
enum class WhatIf { None = 0, WeightsFloat = 1, ActivationsPerChannel = 2, Both = 3 };

/// "none", "weights-float", "activations-per-channel", "both" into `out`; false for any other name.
bool parseWhatIf(const std::string& name, WhatIf& out);
/// The name parseWhatIf() reads.
const char* whatIfName(WhatIf w);
inline bool weightsFloat(WhatIf w) { return ((int)w & 1) != 0; }
/// --what-if-channel-amax: each channel's amax under WhatIf::ActivationsPerChannel. Capped (the
/// default): min(the tensor's calibrated amax, the channel's max), so no channel is clipped more
/// than per tensor and each is rounded at a step no coarser. Scaled: the tensor's amax x the
/// channel's max / the tensor's max (the calibrator's clip fraction applied to every channel,
/// which clips the channels that per tensor were not clipped at all: measured worse than per
/// tensor on det and rec, docs/quality.md "Bounds"). Searched: each channel the clip that minimises
/// its own fake-quantization MSE over the calibration data among searchedClipCandidates() (capped's
/// amax among them, so never above capped's MSE on that data): the bound of a rescaling that also
/// clips each channel at its own best point. Per-channel MSE, not the consumer's output error: under
/// errors independent across channels a Conv/MatMul output's error is a weighted sum of the channels'
/// MSEs, each channel's weight fixed, so each channel's argmin is the same (QuantSession::calibrate
/// runs one float pass more for it).
enum class ChannelAmax { Capped = 0, Scaled = 1, Searched = 2 };
bool parseChannelAmax(const std::string& name, ChannelAmax& out);
const char* channelAmaxName(ChannelAmax c);
inline bool activationsPerChannel(WhatIf w) { return ((int)w & 2) != 0; }

/// WhatIf::ActivationsPerChannel: the per-channel scales of one activation point (node, input).
struct ChannelScales {
  ValueId value = kNoValue;
  int axis = 1;              // the channel axis; < 0 counts from the end (-1: the last)
  std::vector<float> scale;  // per channel
};

/// The activation points WhatIf::ActivationsPerChannel makes per channel, keyed (node, input): a
/// Conv's input 0 (axis 1), a MatMul's inputs (A: -1, B: -2, the K axis), a Gemm's (K by transA /
/// transB). `scale` left empty; the other points stay per tensor.
std::map<std::pair<NodeId, size_t>, ChannelScales> perChannelActivationPoints(const Graph& g, const QuantPlan& plan);

/// A quantization point on input `inputIndex` of a node.
struct PointRef {
  size_t inputIndex;
  ValueId value;
  int weight;  // index into QuantState::weights, -1 for an activation point
};

/// --bias-correction (bias_correction.h): constant input `input` of node `reader` replaced by `value`
/// wherever node `owner` is quantized: a Conv's or Gemm's corrected bias (owner == reader), or the
/// running mean of the BatchNormalization that alone reads a bias-less Conv's output (reader: the
/// BatchNormalization). The float model keeps its constants, so every float reference of the
/// analysis is the original model's output, as ONNX Runtime's check of the export is.
struct ConstantCorrection {
  NodeId owner = -1;
  NodeId reader = -1;
  size_t input = 0;
  Tensor value;
  Tensor rounded;  // value rounded to QuantState::highPrecision (fp16/bf16); empty with fp32
};

/// What fake quantization needs, per plan: fixed once the plan's points are (toggles change
/// which nodes are on, not their points), the activation scales once calibrated.
struct QuantState {
  QuantMode mode = QuantMode::Int8;
  int threads = 1;  // the executor's: fake quantization of a large tensor is split over them
  std::vector<std::vector<PointRef>> pointsByNode;
  std::vector<WeightQuant> weights;
  std::vector<Tensor> fakeWeights;  // per weights entry: the weight after fake quantization
  std::map<ValueId, ActivationQuant> act;
  /// fp16/bf16: the float part of the model runs in that precision (high_precision_sim.cpp); the
  /// scales above are rounded to it and fakeWeights hold dequantized values rounded to it.
  HighPrecision highPrecision = HighPrecision::Fp32;
  /// fp16/bf16: the float constants rounded to the high precision, by value, and the executor that
  /// runs the nodes whose outputs are rounded (FakeQuantTransform takes every node over).
  std::map<ValueId, Tensor> roundedConstants;
  const Executor* executor = nullptr;
  /// --weight-clip-search (core/analysis/weight_clip.h): per weight value, a ratio per channel that
  /// multiplies the channel's abs max before its scale is computed (absent: 1).
  std::map<ValueId, std::vector<float>> weightClip;
  /// --bias-correction: the corrected constants, at most one per reader node, and per node the
  /// index of the one it reads (-1: none; empty: no corrections at all).
  std::vector<ConstantCorrection> corrections;
  std::vector<int> correctionOf;
  /// --what-if: WeightsFloat leaves fakeWeights equal to the float weights (the scales are still
  /// computed, for the report); ActivationsPerChannel reads actChannels. The fast paths of
  /// node_paths.h (integer and plane-wise Convs, prepacked Wq) are off under either.
  WhatIf whatIf = WhatIf::None;
  /// WhatIf::ActivationsPerChannel: per (node, input), the channel scales used instead of the tensor's.
  std::map<std::pair<NodeId, size_t>, ChannelScales> actChannels;

  /// The correction of input `input` of `reader`, whether or not its owner is quantized (null: none).
  const ConstantCorrection* correction(NodeId reader, size_t input) const {
    if (correctionOf.empty()) return nullptr;
    const int k = correctionOf[(size_t)reader];
    return k >= 0 && corrections[(size_t)k].input == input ? &corrections[(size_t)k] : nullptr;
  }
  /// The activation point on input 0 of `node` (kNoValue: none).
  ValueId inputActPoint(NodeId node) const;
  /// The quantization of activation `value`, or null where it has no scale (not calibrated).
  const ActivationQuant* activation(ValueId value) const;
};

/// The points of `plan` per node, activations first, then weights in the plan's order (as
/// quantizeWeights() appends them). Weight points are left to quantizeWeights().
std::vector<std::vector<PointRef>> activationPointsByNode(const Graph& g, const QuantPlan& plan);
/// Per-channel amax and scales of every weight point of `plan`, its fake-quantized copy, and its
/// PointRef on its node: appended to s.weights, s.fakeWeights and s.pointsByNode. With
/// s.highPrecision fp16/bf16 the scales and the dequantized values are rounded to it.
void quantizeWeights(const Graph& g, const QuantPlan& plan, QuantState& s);
/// The scales of the activation points: each tensor's amax by the calibration method (or the
/// override given for it), Concat groups sharing their largest amax. Tensors with neither stats
/// nor an override get no entry. Scales rounded to calibration.highPrecision (roundScale).
std::map<ValueId, ActivationQuant> computeScales(const Graph& g, const QuantPlan& plan,
                                                 const std::map<ValueId, TensorStats>& stats,
                                                 const std::map<ValueId, float>& amaxOverride,
                                                 const CalibrationSettings& calibration);

/// Realisation `realisation` of the rounding noise (QuantSession::realisationSnrDb, docs/quality.md
/// "Realisations of the rounding noise"): every scale of `act` multiplied by (1 + dither n), n ~ N(0, 1)
/// drawn per tensor by splitmix64 of (realisation, value), then Box-Muller; the product rounded to
/// float. The session's dithered passes and `quantscope export --scale-dither K` both call this, so
/// realisation K of the analysis and export K carry the same scales. realisation <= 0: unchanged.
void ditherActivationScales(std::map<ValueId, ActivationQuant>& act, int realisation, double dither);

/// WhatIf::ActivationsPerChannel: s.actChannels from the calibrated per-tensor scales (s.act) and
/// each point's channel max |x| over the calibration data, keyed (value, axis): a channel's amax
/// by `rule` (ChannelAmax); a channel that was all zeros keeps the tensor's scale. A point with no
/// tensor scale or no channel maxima is left per tensor.
/// With rule Searched each channel's amax is read from `searchedAmax` (keyed as channelMax; a point
/// without an entry stays per tensor).
void computeChannelScales(const Graph& g, const QuantPlan& plan,
                          const std::map<std::pair<ValueId, int>, std::vector<double>>& channelMax, ChannelAmax rule,
                          QuantState& s,
                          const std::map<std::pair<ValueId, int>, std::vector<double>>* searchedAmax = nullptr);

/// ChannelAmax::Searched: the candidate amax of a channel whose max |x| is `channelMax` under a tensor
/// amax `tensorAmax`: capped's min(tensorAmax, channelMax) first, then channelMax x 2^(-k/8) for
/// k = 0..kSearchedClipSteps (1 down to 1/32 of the max).
constexpr int kSearchedClipSteps = 40;
std::vector<double> searchedClipCandidates(double channelMax, double tensorAmax);
/// The scale an activation amax gets (scaleFromAmax rounded to the high precision), as
/// computeChannelScales() computes it.
float channelScale(double amax, QuantMode mode, HighPrecision hp);
/// err[c][j] += sum over channel c of `t` along `axis` (< 0: from the end) of (x - fq(x, scales[c][j]))^2,
/// fq the activations' fake quantization (kActQmin..kActQmax, or FP8); count[c] += its element count.
/// Left as is where the axis or the channel count does not fit.
void accumulateChannelClipErrors(const Tensor& t, int axis, const std::vector<std::vector<float>>& scales,
                                 QuantMode mode, std::vector<std::vector<double>>& err, std::vector<double>& count);

/// fp16/bf16: the float constants of `g` rounded to s.highPrecision into s.roundedConstants (the
/// inputs keepsFloat32Input names excepted); nothing with fp32.
void roundConstants(const Graph& g, QuantState& s);

/// Fake-quantizes node inputs at the quantization points of the enabled nodes (copyable: each
/// pass or thread that compares through it takes its own copy). With a high precision of fp16 or
/// bf16 it takes every node over (high_precision_sim.cpp): the float values that ONNX Runtime's CPU
/// provider holds in that type on the export rounded to it (graph inputs, constants, the inputs of
/// quantization points and of the nodes it runs in float16), the node run by QuantState::executor.
class FakeQuantTransform : public InputTransform {
 public:
  enum Parts { kActivations = 1, kWeights = 2, kBoth = 3 };
  // Every node whose mask entry is set.
  FakeQuantTransform(const QuantState& s, const NodePaths& paths, std::vector<char> enabled, int parts = kBoth)
      : m_s(s), m_paths(paths), m_enabled(std::move(enabled)), m_parts(parts) {}
  // One node alone (layer-wise, sensitivity): no per-node mask to build.
  FakeQuantTransform(const QuantState& s, const NodePaths& paths, NodeId only, int parts = kBoth)
      : m_s(s), m_paths(paths), m_only(only), m_parts(parts) {}
  // Outputs of taken-over nodes compared through `c` (one FakeQuantTransform per thread then).
  void setCompare(NodeCompare* c) { m_compare = c; }

  const Tensor* transform(NodeId node, size_t input, const Tensor& value, Tensor& storage) override;
  // With both kinds of points on, an integer Conv replaces fake quantization plus FP32 Conv, and
  // a depthwise Conv runs plane by plane (X fake-quantized per plane, never stored whole),
  // comparing each output plane as it goes where a NodeCompare is set.
  bool runNode(NodeId node, std::span<const Tensor* const> inputs, std::span<Tensor> outputs, Status&) override;

 private:
  bool enabled(NodeId node) const { return m_only >= 0 ? node == m_only : m_enabled[(size_t)node] != 0; }
  // The high-precision versions of transform() and runNode() (high_precision_sim.cpp).
  const Tensor* transformRounded(NodeId node, size_t input, const Tensor& value, Tensor& storage);
  bool runNodeRounded(NodeId node, std::span<const Tensor* const> inputs, std::span<Tensor> outputs, Status& status);
  // The corrected constant input `input` of `node` where its owner is enabled (QuantState::corrections).
  const ConstantCorrection* correctionFor(NodeId node, size_t input) const {
    const ConstantCorrection* c = m_s.correction(node, input);
    return c && enabled(c->owner) ? c : nullptr;
  }
  // Whether `node` reads input `input` through a Q/DQ pair (an activation point of an enabled node).
  bool readsDequantized(NodeId node, size_t input) const;
  // Whether ONNX Runtime's CPU provider runs `node` of the export in float16 (high_precision_sim.cpp).
  bool runsInFloat16(NodeId node) const;
  const QuantState& m_s;
  const NodePaths& m_paths;
  std::vector<char> m_enabled;
  NodeId m_only = -1;
  int m_parts;
  NodeCompare* m_compare = nullptr;
};

}  // namespace qs
