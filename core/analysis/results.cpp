#include "core/analysis/results.h"

#include <algorithm>
#include <limits>

namespace qs {

double AnalysisResult::worstOutputSnrDb() const {
  double worst = std::numeric_limits<double>::infinity();
  for (const auto& o : outputs) worst = std::min(worst, o.metrics.snrDb);
  return worst;
}

double FallbackStep::worstOutputSnrDb() const {
  double worst = std::numeric_limits<double>::infinity();
  for (double v : outputSnrDb) worst = std::min(worst, v);
  return worst;
}

}  // namespace qs
