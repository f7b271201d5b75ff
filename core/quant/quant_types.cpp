#include "core/quant/quant_types.h"

namespace qs {

std::string calibMethodName(CalibMethod m) {
  switch (m) {
    case CalibMethod::Max: return "max";
    case CalibMethod::Entropy: return "entropy";
    case CalibMethod::Percentile: return "percentile";
    case CalibMethod::Mse: return "mse";
    case CalibMethod::Auto: return "auto";
  }
  return "max";
}

bool parseCalibMethod(const std::string& s, CalibMethod& out) {
  for (CalibMethod m : {CalibMethod::Max, CalibMethod::Entropy, CalibMethod::Percentile, CalibMethod::Mse, CalibMethod::Auto}) {
    if (s == calibMethodName(m)) {
      out = m;
      return true;
    }
  }
  return false;
}

}  // namespace qs
