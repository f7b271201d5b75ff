#include "core/util/memory_budget.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qs {

Status parseByteSize(const std::string& text, uint64_t& bytes, const std::string& flag) {
  auto bad = [&] {
    return invalidArgument(flag + " '" + text + "': expected a size such as 4G, 512M or 1.5GiB (K, M, G, T: powers of 1024)");
  };
  const char* s = text.c_str();
  char* end = nullptr;
  if (text.empty() || !(std::isdigit((unsigned char)s[0]) || s[0] == '.')) return bad();
  const double number = std::strtod(s, &end);
  if (end == s || !std::isfinite(number)) return bad();
  std::string unit(end);
  for (char& ch : unit) ch = (char)std::toupper((unsigned char)ch);
  double scale = 1;
  if (!unit.empty() && std::strchr("KMGT", unit[0])) {
    scale = std::pow(1024.0, (double)(std::strchr("KMGT", unit[0]) - "KMGT" + 1));
    unit.erase(0, 1);
    if (unit == "IB" || unit == "B") unit.clear();
  } else if (unit == "B") {
    unit.clear();
  }
  if (!unit.empty()) return bad();
  const double value = std::floor(number * scale);
  if (!(value >= 1)) return invalidArgument(flag + " '" + text + "': the budget must be at least one byte");
  if (value >= 9.2e18) return invalidArgument(flag + " '" + text + "': too large");
  bytes = (uint64_t)value;
  return Status::ok();
}

std::string formatByteSize(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  else std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : "%.0f %s", v, kUnits[u]);
  return buf;
}

uint64_t availableMemoryBytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  std::fclose(f);
  return (uint64_t)kb * 1024;
}

uint64_t defaultMemoryBudgetBytes() {
  const uint64_t available = availableMemoryBytes();
  return available > 0 ? available / 2 : uint64_t(4) << 30;
}

}  // namespace qs
