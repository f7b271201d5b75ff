// The number formats the simulation quantizes to. Below core/quant so that kernels and the
// fake-quant arithmetic (core/numeric) can name them.
#pragma once

#include <string>

namespace qs {

enum class QuantMode { Int8, Fp8 };

std::string quantModeName(QuantMode m);  // "int8", "fp8"
bool parseQuantMode(const std::string& s, QuantMode& out);

}  // namespace qs
