// JSON forms shared by the report.json writers (report.cpp, fallback_report.cpp, int4_export.cpp).
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/numeric/metrics.h"

namespace qs {

/// `v` as report.json writes a number: JSON has no infinities, so +-inf become the strings
/// "inf"/"-inf"; NaN (not applicable) is null.
inline nlohmann::ordered_json jsonNumber(double v) {
  if (std::isnan(v)) return nullptr;
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

/// An error measure as report.json writes it: snr_db, cosine, mse and max_abs, through jsonNumber().
inline nlohmann::ordered_json metricsJson(const ErrorMetrics& m) {
  return nlohmann::ordered_json{{"snr_db", jsonNumber(m.snrDb)},
                                {"cosine", jsonNumber(m.cosine)},
                                {"mse", jsonNumber(m.mse)},
                                {"max_abs", jsonNumber(m.maxAbs)}};
}

}  // namespace qs
