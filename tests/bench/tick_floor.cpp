// The CPU a thread spends only waking up at a rate, with the sampler's jitter (uniform in [0.5, 1.5)
// periods): what any thread ticking at that rate costs on this machine, the floor under the
// sampler's own figure (scripts/bench/sampler runs it beside each measurement).
// Usage: tick_floor HZ SECONDS; prints "floor X us per tick = Y % of one core".
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace {

uint64_t ns_of(clockid_t clock) {
  timespec now{};
  clock_gettime(clock, &now);
  return uint64_t(now.tv_sec) * 1'000'000'000ULL + uint64_t(now.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tick_floor HZ SECONDS\n");
    return 2;
  }
  const uint64_t hz = std::strtoull(argv[1], nullptr, 10);
  const double seconds = std::strtod(argv[2], nullptr);
  if (hz == 0 || seconds <= 0) return 2;
  const uint64_t interval_ns = 1'000'000'000ULL / hz;
  std::mt19937_64 random(ns_of(CLOCK_MONOTONIC));
  const uint64_t start = ns_of(CLOCK_MONOTONIC), cpu_start = ns_of(CLOCK_THREAD_CPUTIME_ID);
  const uint64_t end = start + uint64_t(seconds * 1e9);
  uint64_t ticks = 0;
  for (; ns_of(CLOCK_MONOTONIC) < end; ++ticks) {
    const uint64_t pause_ns = interval_ns / 2 + random() % interval_ns;
    timespec pause{time_t(pause_ns / 1'000'000'000ULL), long(pause_ns % 1'000'000'000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, &pause) != 0) {
    }
  }
  const double cpu = double(ns_of(CLOCK_THREAD_CPUTIME_ID) - cpu_start);
  const double elapsed = double(ns_of(CLOCK_MONOTONIC) - start);
  std::printf("floor %.1f us per tick = %.3f %% of one core\n", cpu / double(ticks) / 1e3, 100 * cpu / elapsed);
  return 0;
}
