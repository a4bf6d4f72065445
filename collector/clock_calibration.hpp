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
  // shifted_ns: added to every reading, for tests only (TRAINSHIM_TEST_CLOCK_OFFSET_NS): the host's
  // clock as another node's would read, to check that nothing compares two nodes' clocks unaligned.
  explicit ClockCalibration(int64_t shifted_ns = 0);
  void refine();
  double ticks_per_ns() const { return ticks_per_ns_; }
  // Twice per record: inline, a multiplication.
  uint64_t to_monotonic_ns(const SegmentHeader& header, uint64_t ticks) const {
    if (header.clock_kind == static_cast<uint32_t>(ClockKind::Monotonic)) return uint64_t(int64_t(ticks) + shifted_ns_);
    const double delta = double(int64_t(ticks - header.anchor_ticks)) * ns_per_tick_;
    return uint64_t(int64_t(header.anchor_monotonic_ns) + int64_t(delta) + shifted_ns_);
  }
  int64_t shifted_ns() const { return shifted_ns_; }

 private:
  int64_t shifted_ns_;
  uint64_t first_ticks_;
  uint64_t first_ns_;
  double ticks_per_ns_ = 1.0;
  double ns_per_tick_ = 1.0;  // its inverse: the per-record conversion multiplies (a division costs ~4x)
};

}  // namespace trainshim::collector
