#include "clock_calibration.hpp"

namespace trainshim::collector {

ClockCalibration::ClockCalibration() : first_ticks_(ticks()), first_ns_(clock_ns(CLOCK_MONOTONIC)) {
  if constexpr (kClockKind != ClockKind::Tsc) return;
  while (clock_ns(CLOCK_MONOTONIC) - first_ns_ < 20'000'000) {
  }
  refine();
}

void ClockCalibration::refine() {
  if constexpr (kClockKind != ClockKind::Tsc) return;
  const uint64_t now_ns = clock_ns(CLOCK_MONOTONIC);
  const uint64_t now_ticks = ticks();
  if (now_ns > first_ns_) ticks_per_ns_ = double(now_ticks - first_ticks_) / double(now_ns - first_ns_);
}

uint64_t ClockCalibration::to_monotonic_ns(const SegmentHeader& header, uint64_t t) const {
  if (header.clock_kind == static_cast<uint32_t>(ClockKind::Monotonic)) return t;
  const double delta = double(int64_t(t - header.anchor_ticks)) / ticks_per_ns_;
  return uint64_t(int64_t(header.anchor_monotonic_ns) + int64_t(delta));
}

}  // namespace trainshim::collector
