#include "diagnose/present.hpp"

#include <fmt/format.h>

namespace trainshim::cli {

std::optional<double> per_step(double amount, int64_t steps) {
  return steps > 0 ? std::optional<double>(amount / double(steps)) : std::nullopt;
}

double per_second(double amount, int64_t span_ns) { return span_ns > 0 ? amount * 1e9 / double(span_ns) : 0; }

double share_of_span(int64_t ns, int64_t span_ns) { return span_ns > 0 ? double(ns) / double(span_ns) : 0; }

nlohmann::ordered_json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

std::string host_activity_words(const std::vector<HostActivity>& activity) {
  std::string out;
  for (std::size_t i = 0; i < activity.size() && i < 3; ++i)
    out += fmt::format("{}{}:{} in {} ({:.0f} %)", i ? ", " : "", activity[i].file, activity[i].line,
                       activity[i].function, 100 * activity[i].share);
  return out;
}

}  // namespace trainshim::cli
