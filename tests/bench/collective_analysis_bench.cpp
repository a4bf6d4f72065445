// The all-reduce wait analysis on synthetic input: R ranks x C collectives of one communicator,
// rank-major (as each rank's records come), a planted straggler late by 30 ms in ~99 % of the
// collectives and up to 50 us of arrival jitter on every rank. Reports the analysis' wall time and
// the peak RSS before and after it. Usage: collective_analysis_bench [RANKS [COLLECTIVES]]
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "analyse/collectives.hpp"

namespace {

using trainshim::cli::CollectiveTiming;

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t ranks = argc > 1 ? uint32_t(std::strtoul(argv[1], nullptr, 10)) : 4096;
  const uint32_t collectives = argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 10)) : 10000;
  if (ranks < 2 || collectives < 1) {
    std::fprintf(stderr, "usage: %s [RANKS>=2 [COLLECTIVES>=1]]\n", argv[0]);
    return 2;
  }
  const int32_t straggler = int32_t(ranks / 2);
  constexpr int64_t kBase = 5'000'000, kLate = 30'000'000, kJitter = 50'000, kStep = 100'000'000;

  // A rank arrives at jitter (+ kLate for the straggler when it is late); every rank finishes at
  // kLate + kJitter + kBase, so its duration is that minus its arrival.
  const auto start_generate = std::chrono::steady_clock::now();
  std::vector<CollectiveTiming> timings;
  timings.reserve(std::size_t(ranks) * collectives);
  for (uint32_t r = 0; r < ranks; ++r)
    for (uint32_t seq = 1; seq <= collectives; ++seq) {
      const uint64_t h = splitmix(uint64_t(r) << 32 | seq);
      int64_t arrival = int64_t(h % (kJitter + 1));
      if (int32_t(r) == straggler && splitmix(seq) % 100 != 0) arrival += kLate;
      timings.push_back({int32_t(r), 0x5eed, ranks, seq, kLate + kJitter + kBase - arrival,
                         int64_t(r) * 1'000'000'000'000 + int64_t(seq) * kStep + arrival});
    }
  const double generate_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_generate).count();
  const double rss_before = peak_rss_mib();

  const auto start = std::chrono::steady_clock::now();
  const trainshim::cli::CollectiveAnalysis a = trainshim::cli::analyze_collectives(timings);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rss_after = peak_rss_mib();

  const double input_mib = double(timings.size() * sizeof(CollectiveTiming)) / (1024.0 * 1024.0);
  std::printf("ranks %u  collectives %u  timings %zu  input %.1f MiB (%zu bytes each)\n", ranks, collectives,
              timings.size(), input_mib, sizeof(CollectiveTiming));
  std::printf("  generate %.2f s  analyze %.3f s  (%.1f ns per timing)\n", generate_s, seconds,
              seconds * 1e9 / double(timings.size()));
  std::printf("  peak RSS before %.1f MiB  after %.1f MiB  (analysis +%.1f MiB, %.2f %% of the input)\n", rss_before,
              rss_after, rss_after - rss_before, 100.0 * (rss_after - rss_before) / input_mib);
  int64_t straggler_last = 0;
  for (const auto& w : a.ranks)
    if (w.rank == a.straggler) straggler_last = w.last_count;
  std::printf("  matched %lld  incomplete %lld  straggler %d (planted %d), last in %lld, %zu late collectives\n",
              (long long)a.matched, (long long)a.incomplete, a.straggler, straggler, (long long)straggler_last,
              a.straggler_late.size());
  return a.straggler == straggler && a.matched == collectives ? 0 : 1;
}
