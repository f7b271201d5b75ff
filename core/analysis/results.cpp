#include "core/analysis/results.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qs {

double OutputResult::realisationMeanDb() const {
  if (realisationSnrDb.size() < 2) return NAN;
  double sum = 0;
  for (double v : realisationSnrDb) sum += v;
  return sum / (double)realisationSnrDb.size();
}

double OutputResult::realisationSdDb() const {
  if (realisationSnrDb.size() < 2) return NAN;
  const double mean = realisationMeanDb();
  double ss = 0;
  for (double v : realisationSnrDb) ss += (v - mean) * (v - mean);
  return std::sqrt(ss / (double)(realisationSnrDb.size() - 1));
}

double AnalysisResult::worstOutputSnrDb() const {
  double worst = std::numeric_limits<double>::infinity();
  for (const auto& o : outputs) worst = std::min(worst, o.metrics.snrDb);
  return worst;
}

namespace {
double lowestKnown(const std::vector<double>& v) {
  double worst = NAN;
  for (double x : v)
    if (!std::isnan(x) && (std::isnan(worst) || x < worst)) worst = x;
  return worst;
}
}  // namespace

double AnalysisResult::worstAgreement() const {
  std::vector<double> v;
  for (const auto& o : outputs) v.push_back(o.agreement.primary());
  return lowestKnown(v);
}

double FallbackStep::worstAgreement() const { return lowestKnown(outputAgreement); }

double FallbackStep::worstOutputSnrDb() const {
  double worst = std::numeric_limits<double>::infinity();
  for (double v : outputSnrDb) worst = std::min(worst, v);
  return worst;
}

}  // namespace qs
