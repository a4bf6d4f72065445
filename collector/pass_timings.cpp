#include "pass_timings.hpp"

#include <fmt/format.h>

namespace trainshim::collector {

std::string DurationHistogram::summary() const {
  std::string out = fmt::format("{}", count_);
  if (count_ == 0) return out;
  out += fmt::format(", mean {:.3f} ms, longest {:.3f} ms", double(total_ns_) / double(count_) / 1e6,
                     double(longest_ns_) / 1e6);
  const auto ms = [](uint64_t us) { return fmt::format("{:g}", double(us) / 1000); };
  for (std::size_t i = 1; i < buckets_.size(); ++i) {
    if (buckets_[i] == 0) continue;
    out += i < kBoundsUs.size() ? fmt::format(", {}-{} ms: {}", ms(kBoundsUs[i - 1]), ms(kBoundsUs[i]), buckets_[i])
                                : fmt::format(", {} ms and more: {}", ms(kBoundsUs[i - 1]), buckets_[i]);
  }
  return out;
}

}  // namespace trainshim::collector
