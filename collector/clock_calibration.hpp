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
  uint64_t to_monotonic_ns(const SegmentHeader& header, uint64_t ticks) const;

 private:
  uint64_t first_ticks_;
  uint64_t first_ns_;
  double ticks_per_ns_ = 1.0;
};

}  // namespace trainshim::collector
