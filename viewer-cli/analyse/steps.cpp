#include "analyse/steps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace trainshim::cli {

namespace {

using Sync = StepInput::Sync;

struct Period {
  std::size_t length = 0;  // 0: none
  std::size_t start = 0;   // set-up before the loop (a broadcast of the weights, say)
};

// The smallest period at which the sequence repeats exactly after a set-up of at most a quarter
// of it, seen at least three times.
template <class T>
Period period_of(const std::vector<T>& sequence) {
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

// When each call of `site` returned: the steps it marks start there.
std::vector<int64_t> sync_returns(const StepInput& in, uint32_t site) {
  std::vector<int64_t> out;
  for (const Sync& sync : in.syncs)
    if (sync.site == site) out.push_back(sync.end_ns);
  return out;
}

Steps with_rate(Steps s, int64_t span_ns) {
  if (s.count > 0) s.step_ns = span_ns / s.count;
  return s;
}

}  // namespace

StepInput::Sync StepInput::intern(const std::string& site, const std::vector<std::string>& functions) {
  const auto [s, new_site] = site_ids_.try_emplace(site, uint32_t(sites.size()));
  if (new_site) sites.push_back(site);
  std::string joined;
  for (const auto& f : functions) (joined += f) += '\n';
  const auto [f, new_functions] = function_ids_.try_emplace(joined, uint32_t(frame_functions.size()));
  if (new_functions) frame_functions.push_back(functions);
  return {s->second, f->second};
}

Steps find_steps(const StepInput& in, const std::string& named) {
  if (!named.empty()) {
    // file:line names one site; a function name, the first site reached inside that function.
    auto matches = [&](const Sync& sync) {
      const std::string& site = in.sites[sync.site];
      if (named.find(':') != std::string::npos && (site == named || ends_with(site, "/" + named))) return true;
      for (const auto& f : in.frame_functions[sync.functions])
        if (f == named) return true;
      return false;
    };
    const auto anchor = std::find_if(in.syncs.begin(), in.syncs.end(), matches);
    if (anchor == in.syncs.end()) return {0, fmt::format("the step named {} matched no synchronisation", named), 0, {}};
    const int64_t count =
        std::count_if(in.syncs.begin(), in.syncs.end(), [&](const Sync& s) { return s.site == anchor->site; });
    return with_rate({count, fmt::format("the step named {}: one step per sync at {}", named, in.sites[anchor->site]),
                      0, sync_returns(in, anchor->site)},
                     in.span_ns);
  }
  if (const Period period = period_of(in.collectives); period.length) {
    const std::size_t p = period.length;
    std::vector<int64_t> starts;
    for (std::size_t i = period.start; i < in.collectives.size(); i += p) starts.push_back(in.collectives[i].begin_ns);
    return with_rate({int64_t((in.collectives.size() - period.start) / p),
                      fmt::format("the collective sequence repeats every {} collective{}", p, p == 1 ? "" : "s"), 0,
                      std::move(starts)},
                     in.span_ns);
  }
  std::vector<int64_t> counts(in.sites.size());
  for (const Sync& sync : in.syncs) ++counts[sync.site];
  // The most frequent site; between equals, the first in name order.
  const std::string* best = nullptr;
  uint32_t best_site = 0;
  int64_t best_count = 0;
  for (std::size_t site = 0; site < counts.size(); ++site)
    if (counts[site] > best_count || (counts[site] == best_count && best && in.sites[site] < *best)) {
      best = &in.sites[site];
      best_site = uint32_t(site);
      best_count = counts[site];
    }
  if (best_count >= 3)
    return with_rate({best_count, fmt::format("one step per call of the most frequent sync site, {}", *best), 0,
                      sync_returns(in, best_site)},
                     in.span_ns);
  return {0, "no repeating structure found: rates are per second", 0, {}};
}

}  // namespace trainshim::cli
