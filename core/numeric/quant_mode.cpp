#include "core/numeric/quant_mode.h"

namespace qs {

std::string quantModeName(QuantMode m) { return m == QuantMode::Fp8 ? "fp8" : "int8"; }

bool parseQuantMode(const std::string& s, QuantMode& out) {
  if (s == "int8") out = QuantMode::Int8;
  else if (s == "fp8") out = QuantMode::Fp8;
  else return false;
  return true;
}

}  // namespace qs
