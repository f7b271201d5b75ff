// Text forms shared by the report writers (report.cpp, remedy_report.cpp): numbers for tables
// and HTML-escaped names.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace qs {

/// `v` with `digits` decimals; "" for NaN (not applicable), "inf"/"-inf" for infinities.
inline std::string reportNumber(double v, int digits = 2) {
  if (std::isnan(v)) return "";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// `s` with <, >, & and " escaped for HTML text and attribute values.
inline std::string htmlEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

}  // namespace qs
