#include "text/format.hpp"

#include <fmt/format.h>

namespace trainshim::cli {

std::string rank_label(int rank) { return rank < 0 ? std::string("?") : std::to_string(rank); }

nlohmann::ordered_json rank_json(int rank) {
  return rank < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(rank);
}

std::string rank_words(int rank, int64_t pid) {
  return rank < 0 ? fmt::format("process {}", pid) : fmt::format("rank {}", rank);
}

std::string with_thousands(int64_t n) {
  const std::string digits = n < 0 ? std::to_string(n).substr(1) : std::to_string(n);
  std::string out = n < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string human_bytes(int64_t bytes) {
  constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  int unit = 0;
  // 1023.95 and above print as the next unit: never "1024.0 KiB".
  while (value >= 1023.95 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

std::string human_duration(int64_t ns) {
  const double v = double(ns);
  // Thresholds where the smaller unit would round up to 1000 of itself.
  if (ns >= 999'995'000) return fmt::format("{:.2f} s", v / 1e9);
  if (ns >= 999'950) return fmt::format("{:.1f} ms", v / 1e6);
  if (ns >= 1'000) return fmt::format("{:.1f} µs", v / 1e3);
  return fmt::format("{} ns", ns);
}

}  // namespace trainshim::cli
