#include "steps.hpp"

#include <fmt/format.h>

#include <map>

namespace trainshim::cli {

namespace {

struct Period {
  std::size_t length = 0;  // 0: none
  std::size_t start = 0;   // set-up before the loop (a broadcast of the weights, say)
};

// The smallest period at which the sequence repeats exactly after a set-up of at most a quarter
// of it, seen at least three times.
Period period_of(const std::vector<std::string>& sequence) {
  const std::size_t n = sequence.size();
  for (std::size_t p = 1; p * 3 <= n; ++p) {
    // The last index where the sequence breaks the period p; the loop starts after it.
    std::size_t start = 0;
    for (std::size_t i = n - p; i-- > 0;)
      if (sequence[i] != sequence[i + p]) {
        start = i + 1;
        break;
      }
    if (start * 4 <= n && (n - start) >= 3 * p) return {p, start};
  }
  return {};
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Steps with_rate(Steps s, int64_t span_ns) {
  if (s.count > 0) s.step_ns = span_ns / s.count;
  return s;
}

}  // namespace

Steps find_steps(const StepInput& in, const std::string& named) {
  if (!named.empty()) {
    // file:line names one site; a function name, the first site reached inside that function.
    std::string anchor;
    for (std::size_t i = 0; i < in.sync_sites.size() && anchor.empty(); ++i) {
      const std::string& site = in.sync_sites[i];
      const bool by_line = named.find(':') != std::string::npos && (site == named || ends_with(site, "/" + named));
      bool by_function = false;
      if (i < in.sync_functions.size())
        for (const auto& f : in.sync_functions[i]) by_function = by_function || f == named;
      if (by_line || by_function) anchor = site;
    }
    if (anchor.empty()) return {0, fmt::format("TRAINSHIM_STEP={} matched no synchronisation", named), 0};
    int64_t count = 0;
    for (const auto& site : in.sync_sites) count += site == anchor;
    return with_rate({count, fmt::format("TRAINSHIM_STEP={}: one step per sync at {}", named, anchor), 0}, in.span_ns);
  }
  if (const Period period = period_of(in.collectives); period.length) {
    const std::size_t p = period.length;
    return with_rate({int64_t((in.collectives.size() - period.start) / p),
                      fmt::format("the collective sequence repeats every {} collective{}", p, p == 1 ? "" : "s"), 0},
                     in.span_ns);
  }
  std::map<std::string, int64_t> counts;
  for (const auto& site : in.sync_sites) ++counts[site];
  std::string best;
  int64_t best_count = 0;
  for (const auto& [site, n] : counts)
    if (n > best_count) {
      best = site;
      best_count = n;
    }
  if (best_count >= 3)
    return with_rate({best_count, fmt::format("one step per call of the most frequent sync site, {}", best), 0},
                     in.span_ns);
  return {0, "no repeating structure found: rates are per second", 0};
}

}  // namespace trainshim::cli
