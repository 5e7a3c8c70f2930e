#include "engine/device/memory_stats.h"

#include <cctype>
#include <cstdio>

#include "engine/core/error.h"

namespace dpe {

int64_t parse_memory_size(const std::string& text, const std::string& what) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  DPE_CHECK(pos > 0 && pos <= 15, what << ": malformed memory size '" << text
                                       << "' (expected e.g. 512MiB, 2GiB, 1000000)");
  const int64_t value = std::stoll(text.substr(0, pos));
  const std::string unit = text.substr(pos);
  int64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB" || unit == "K") scale = int64_t{1} << 10;
  else if (unit == "MiB" || unit == "M") scale = int64_t{1} << 20;
  else if (unit == "GiB" || unit == "G") scale = int64_t{1} << 30;
  else if (unit == "KB") scale = 1000;
  else if (unit == "MB") scale = 1000 * 1000;
  else if (unit == "GB") scale = 1000 * 1000 * 1000;
  DPE_CHECK(scale > 0, what << ": unknown unit '" << unit << "' in '" << text
                            << "' (use B, KiB, MiB, GiB, KB, MB or GB)");
  int64_t bytes = 0;
  DPE_CHECK(!__builtin_mul_overflow(value, scale, &bytes),
            what << ": memory size '" << text << "' is too large (the limit is "
                 << INT64_MAX << " bytes)");
  return bytes;
}

std::string format_bytes(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (bytes < (1 << 20)) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024);
  else if (bytes < (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / (int64_t{1} << 30));
  return buf;
}

}  // namespace dpe
