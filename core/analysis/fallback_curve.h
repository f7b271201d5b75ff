// The fewest exclusions (issue 14 item 4): the automatic fallback that measures instead of
// guessing. Each step ranks the quantized nodes by their sensitivity, re-measures the real output
// SNR (and agreement) of the whole model with each of the top K excluded in turn (the session's
// incremental setQuantized: toggle, read, toggle back) and excludes the one that helps most. The
// steps go on past the target, so that the report and the GUI can show the whole curve of output
// SNR against the number of excluded nodes; the session is then left at the first point of the
// curve that reaches the target.
//
// The second pass (docs/quality.md, "Fewest exclusions: the second pass"): once the target is
// reached, a backward pass re-includes each excluded node, the least useful first, and keeps it
// quantized when the target still holds. Optionally (rankByGain) the K candidates of a step are
// those whose exclusion removed most noise where an earlier step measured it, else by sensitivity.
//
// The pair step (docs/quality.md, "A pair step in the greedy pass"): when no single candidate of a
// step gains at least pairBelowDb, the pairs of the shortlist are measured too, both excluded at
// once, and the best pair is taken (as two points of the curve) when it reaches the targets where
// no single does, or gains more than twice what the best single does. It finds nodes whose errors
// partly cancel, each useless alone (det's stem convs).
//
// With AnalysisOptions::realisations > 1 (docs/quality.md, "Realisations of the rounding noise"), the
// greedy pass stops, and the backward pass keeps a node quantized, only where each output's mean SNR
// over the realisations of the rounding noise reaches the SNR target too: both passes select on the
// analysis's own figure, which is one realisation, so the point they reach on it alone is biased
// upward (rec: 1.7 dB above ONNX Runtime, which lands on the mean). The chosen point's realisations
// are left in the session's result.
//
// With K = 1, sensitivity ranking and no backward pass the choice is the old one (the most
// sensitive node), which is what the comparison in docs/quality.md runs as the baseline.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "core/analysis/results.h"
#include "core/util/progress.h"
#include "core/util/status.h"

namespace qs {

class CalibrationData;
class QuantSession;

struct FallbackOptions {
  double targetSnrDb = NAN;      // every graph output at least this SNR (NaN: no SNR target)
  double targetAgreement = NAN;  // every output with an agreement at least this fraction (NaN: none)
  /// Candidates re-measured per step, the most sensitive first; 1: exclude the most sensitive node
  /// without measuring the others (the fallback before the curve).
  int candidates = 6;
  /// Steps measured past the first point that reaches the targets (the rest of the curve); the
  /// curve also stops once a quarter of the quantizable nodes are excluded past that point.
  int extraSteps = 3;
  /// Candidates ranked by their gain measured at an earlier step (else predicted from their
  /// sensitivity), not by sensitivity alone. No effect with candidates = 1. Off by default: on
  /// mobilenet_v2 it needed 50-54 exclusions before the backward pass against 26 by sensitivity
  /// (docs/quality.md, "Fewest exclusions: the second pass").
  bool rankByGain = false;
  /// Once the target is reached, try re-including each excluded node (the one whose exclusion
  /// gained least first) and keep it quantized when the targets still hold.
  bool backward = true;
  /// Try the pairs of the shortlist (K (K - 1) / 2 more measurements) at a step where the best single
  /// exclusion gains less than pairBelowDb on the worst output SNR (with an agreement still short of
  /// its target: where it gains nothing). No effect with candidates = 1. On by default: it needed
  /// fewer or as many exclusions on det, rec, mobilenet_v2 and regnet_y_400mf (docs/quality.md).
  bool pairs = true;
  double pairBelowDb = 1.0;
  /// fallbackCurveRecalibrated() only: once the target is reached, calibrate again at the chosen point
  /// (method auto's whole-graph selection and refinement then see which nodes are excluded) and run
  /// the backward pass again at the new scales. Off by default (docs/quality.md, "Clip noise and
  /// rounding noise, and re-calibration at the fallback's point").
  bool recalibrate = false;
};

/// The curve: point 0 is the model with no exclusion, point i the model after steps[0..i).
struct FallbackCurve {
  std::vector<FallbackStep> steps;     // every measured exclusion, in order
  std::vector<double> startSnrDb;      // per graph output, before any exclusion
  std::vector<double> startAgreement;  // per graph output (NaN: dense), before any exclusion
  int quantizable = 0;                 // quantizable nodes of the plan
  int candidates = 0;                  // FallbackOptions::candidates as run
  /// The point the session was left at: the first reaching the targets, else the last point.
  int chosen = 0;
  bool reached = false;                // the chosen point reaches the targets
  /// Where the forward (greedy) pass first reached the targets (-1: never), and the nodes the
  /// backward pass re-included, in the order it did. With any re-included, `steps` holds the
  /// kept exclusions first and then the re-included ones in reverse order, so that every point
  /// is still a prefix of `steps`, measured: points kept..forwardChosen are the backward pass's
  /// states, the points before them re-measured.
  int forwardChosen = -1;
  std::vector<NodeId> reincluded;
  int pairSteps = 0;     // steps of the greedy pass that measured the pairs of their shortlist
  int pairsTaken = 0;    // of them, those that excluded a pair (two points of the curve each)
  /// FallbackOptions::recalibrate: the session was calibrated again at the chosen point of the passes
  /// above (worst output SNR there before and after), and the backward pass run again, re-including
  /// reincludedAfterRecalibration. The curve then holds the chosen exclusions and those re-included
  /// only (the points past the target were at the old scales), every point measured at the new scales.
  bool recalibrated = false;
  double recalibratedBeforeDb = NAN, recalibratedAfterDb = NAN;
  std::vector<NodeId> reincludedAfterRecalibration;

  /// Worst output SNR / agreement at point `i` (0..steps.size()).
  double worstSnrDb(int i) const;
  double worstAgreement(int i) const;
  /// The exclusions of the chosen point, in order (what the old fallback returned).
  std::vector<FallbackStep> chosenSteps() const;
};

/// Runs the fallback on `session` (analysed, with sensitivity) and leaves it at the curve's chosen
/// point. Fails for an agreement target on a model without an output that has one (the session's
/// message), or when cancelled (the session is then at whatever point it had reached).
Result<FallbackCurve> fallbackCurve(QuantSession& session, const FallbackOptions& options,
                                    const ProgressFn& progress = {});

/// fallbackCurve(), then with options.recalibrate, once it reached the targets at a point with
/// exclusions: calibrates `session` again on `calibration` with those exclusions (QuantSession::
/// calibrate checks its clip choices on the enabled nodes), analyses `analysis`, and re-runs the
/// backward pass there; point 0 is re-measured at the new scales too. Where the new scales miss the
/// targets at that point (they cannot do worse on the calibration's check samples, but can on
/// others) nothing is re-included and `reached` says so. Constant corrections (--bias-correction)
/// stay those of the first calibration.
Result<FallbackCurve> fallbackCurveRecalibrated(QuantSession& session, const CalibrationData& calibration,
                                                std::shared_ptr<const CalibrationData> analysis,
                                                const FallbackOptions& options, const ProgressFn& progress = {});

/// Moves `session` to point `point` of `curve` (0: no exclusion), toggling only the nodes whose
/// state differs. The GUI's click on a point of the plot.
Status applyFallbackPoint(QuantSession& session, const FallbackCurve& curve, int point,
                          const ProgressFn& progress = {});

}  // namespace qs
