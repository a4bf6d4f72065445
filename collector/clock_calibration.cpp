#include "clock_calibration.hpp"

namespace trainshim::collector {

ClockCalibration::ClockCalibration(int64_t shifted_ns)
    : shifted_ns_(shifted_ns), first_ticks_(ticks()), first_ns_(clock_ns(CLOCK_MONOTONIC)) {
  if constexpr (kClockKind != ClockKind::Tsc) return;
  while (clock_ns(CLOCK_MONOTONIC) - first_ns_ < 20'000'000) {
  }
  refine();
}

void ClockCalibration::refine() {
  if constexpr (kClockKind != ClockKind::Tsc) return;
  const uint64_t now_ns = clock_ns(CLOCK_MONOTONIC);
  const uint64_t now_ticks = ticks();
  if (now_ns > first_ns_ && now_ticks > first_ticks_) {
    ticks_per_ns_ = double(now_ticks - first_ticks_) / double(now_ns - first_ns_);
    ns_per_tick_ = 1.0 / ticks_per_ns_;
  }
}

}  // namespace trainshim::collector
