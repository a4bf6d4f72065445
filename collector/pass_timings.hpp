#pragma once
// How long the collector's passes, and the parts of them that touch the disk, took. Records leave a
// ring only once their pass is committed, so a pass that stalls longer than a ring lasts (16,384
// records: 16 ms at 1 M records/s) loses records: these figures tell which part stalled. Two clock
// reads per part and pass; summarised in the database's log when the collector stops.
#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace trainshim::collector {

class DurationHistogram {
 public:
  // Upper bounds of the buckets but the last, in microseconds.
  static constexpr std::array<uint64_t, 5> kBoundsUs{250, 1'000, 4'000, 16'000, 64'000};

  void add(std::chrono::nanoseconds d) {
    const auto ns = uint64_t(d.count() < 0 ? 0 : d.count());
    ++count_;
    total_ns_ += ns;
    if (ns > longest_ns_) longest_ns_ = ns;
    std::size_t i = 0;
    while (i < kBoundsUs.size() && ns >= kBoundsUs[i] * 1000) ++i;
    ++buckets_[i];
  }
  uint64_t count() const { return count_; }
  uint64_t longest_ns() const { return longest_ns_; }
  // Counts per bucket: below 0.25 ms, 0.25-1 ms, 1-4 ms, 4-16 ms, 16-64 ms, 64 ms and more.
  const std::array<uint64_t, kBoundsUs.size() + 1>& buckets() const { return buckets_; }
  // "N, mean M ms, longest L ms, 0.25-1 ms: a, 1-4 ms: b, ..." (empty buckets left out).
  std::string summary() const;

 private:
  uint64_t count_ = 0;
  uint64_t total_ns_ = 0;
  uint64_t longest_ns_ = 0;
  std::array<uint64_t, kBoundsUs.size() + 1> buckets_{};
};

}  // namespace trainshim::collector
