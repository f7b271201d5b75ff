#include "core/quant/quant_types.h"

namespace qs {

std::string quantModeName(QuantMode m) { return m == QuantMode::Fp8 ? "fp8" : "int8"; }

std::string calibMethodName(CalibMethod m) {
  switch (m) {
    case CalibMethod::Max: return "max";
    case CalibMethod::Entropy: return "entropy";
    case CalibMethod::Percentile: return "percentile";
    case CalibMethod::Mse: return "mse";
  }
  return "max";
}

bool parseQuantMode(const std::string& s, QuantMode& out) {
  if (s == "int8") out = QuantMode::Int8;
  else if (s == "fp8") out = QuantMode::Fp8;
  else return false;
  return true;
}

bool parseCalibMethod(const std::string& s, CalibMethod& out) {
  for (CalibMethod m : {CalibMethod::Max, CalibMethod::Entropy, CalibMethod::Percentile, CalibMethod::Mse}) {
    if (s == calibMethodName(m)) {
      out = m;
      return true;
    }
  }
  return false;
}

}  // namespace qs
