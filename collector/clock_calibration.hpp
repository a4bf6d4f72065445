#pragma once
// Converts a segment's clock readings to CLOCK_MONOTONIC nanoseconds. The time-stamp counter runs
// at one rate for every process on the host, so the collector measures that rate itself: briefly
// at start, then ever more precisely from its first reading to its latest.
#include <cstdint>

#include "trainshim/clock.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::collector {

class ClockCalibration {
 public:
  ClockCalibration();
  void refine();
  double ticks_per_ns() const { return ticks_per_ns_; }
  // Twice per record: inline, a multiplication.
  uint64_t to_monotonic_ns(const SegmentHeader& header, uint64_t ticks) const {
    if (header.clock_kind == static_cast<uint32_t>(ClockKind::Monotonic)) return ticks;
    const double delta = double(int64_t(ticks - header.anchor_ticks)) * ns_per_tick_;
    return uint64_t(int64_t(header.anchor_monotonic_ns) + int64_t(delta));
  }

 private:
  uint64_t first_ticks_;
  uint64_t first_ns_;
  double ticks_per_ns_ = 1.0;
  double ns_per_tick_ = 1.0;  // its inverse: the per-record conversion multiplies (a division costs ~4x)
};

}  // namespace trainshim::collector
