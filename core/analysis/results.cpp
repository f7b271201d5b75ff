#include "core/analysis/results.h"

#include <algorithm>
#include <limits>

namespace qs {

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
