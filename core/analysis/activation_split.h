// The activation error of each activation point split in two (issue 14, docs/quality.md "Clip noise
// and rounding noise"): clip noise, from the values beyond the point's range (saturated to
// qmin * scale or qmax * scale), and rounding noise, from the values within it (rounded to the
// step). At the tensor the two are exact and add up to the point's whole error (they come from
// disjoint elements). At each consumer (layer-wise, as NodeResult::activationSnrDb: the node alone,
// float weights, its activation inputs changed) the node runs twice, once on the inputs with only
// their clipped values changed and once with only the rounded ones; the two noises then add up to
// the activation noise only up to their cross term (what the node's sums mix of the two).
//
// What it is for: deciding per tensor whether a wider range (less clipping) or a finer step (less
// rounding: smoothing, a narrower range) is what would lower its error.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>

#include "core/ir/graph.h"
#include "core/util/progress.h"
#include "core/util/status.h"

namespace qs {

class CalibrationData;
class QuantSession;

/// Sums over one activation tensor's elements (every analysed sample): sum x^2, and the squared
/// quantization error of the elements that saturate (clip) and of the others (rounding).
struct TensorNoiseSplit {
  int64_t count = 0;    // elements
  int64_t clipped = 0;  // of them, beyond the point's range
  double signal = 0, clipNoise = 0, roundingNoise = 0;

  /// 10 log10(signal / noise) of each part, and of both (the tensor's own activation SNR); +inf
  /// where the part is zero.
  double clipSnrDb() const { return db(clipNoise); }
  double roundingSnrDb() const { return db(roundingNoise); }
  double snrDb() const { return db(clipNoise + roundingNoise); }
  /// clipNoise / (clipNoise + roundingNoise); 0 without noise.
  double clipShare() const { return clipNoise + roundingNoise > 0 ? clipNoise / (clipNoise + roundingNoise) : 0; }

 private:
  double db(double noise) const {
    return noise > 0 ? 10 * std::log10(signal / noise) : (double)INFINITY;
  }
};

/// Layer-wise at one consumer: its output SNR with only the clipped values of its activation inputs
/// changed, and with only the rounded ones (float weights, the other inputs float).
struct NodeNoiseSplit {
  double clipSnrDb = NAN;
  double roundingSnrDb = NAN;
};

struct ActivationNoiseSplit {
  std::map<ValueId, TensorNoiseSplit> tensors;  // every activation point's tensor that has a scale
  std::map<NodeId, NodeNoiseSplit> nodes;       // every quantizable node with such a point
  int64_t samples = 0;
};

/// Runs the session's model over `data` in float (one batch at a time) and splits every activation
/// point's error at the session's current scales (int8 or fp8), at the tensor and at each
/// quantizable consumer. The session must be calibrated. Costs a float pass plus two runs of each
/// consumer per batch. Fails with the executor's message (naming the node), or Cancelled when
/// `progress` returns false.
Result<ActivationNoiseSplit> activationNoiseSplit(const QuantSession& session, const CalibrationData& data,
                                                  const ProgressFn& progress = {});

}  // namespace qs
