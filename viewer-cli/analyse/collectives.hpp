#pragma once
// The collective-wait analysis, on timings already read (waits.hpp reads them from the databases):
// how long each rank waited in its collectives for the last rank to arrive, from the GPU-side
// duration every rank measured around every collective (timing events on its stream).
//
// For collective `sequence` of communicator `comm`, every member rank measured a duration; the
// collective completes on all ranks at about the same moment, so the rank that arrived last has
// the shortest duration, and wait(rank) = duration(rank) - min over the members. Only durations
// are compared, never clocks of different ranks, so no clock alignment across nodes is needed.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace trainshim::cli {

// One collective as one rank saw it: 40 bytes.
struct CollectiveTiming {
  int32_t rank;           // global rank of the process
  uint64_t comm;          // communicator id, the same on every rank of the communicator
  uint32_t comm_size;     // ranks in the communicator
  uint32_t sequence;      // the collective's number on that communicator (1, 2, ...), same on every rank
  int64_t gpu_ns;         // GPU-side duration
  int64_t host_begin_ns;  // host clock of that rank when it called the collective (only comparable within one rank)
};

struct RankWaits {
  int32_t rank;
  int64_t collectives = 0;  // matched collectives this rank took part in
  int64_t waited_ns = 0;    // sum of its waits
  // The same after start-up (the collectives the straggler is judged on): how many, the waits, and
  // the waits by the rank that arrived last.
  int64_t steady_collectives = 0, steady_waited_ns = 0;
  std::map<int32_t, int64_t> steady_waited_for_ns{};
  // Its waits by the rank that arrived last (the one it waited for), in every matched collective.
  std::map<int32_t, int64_t> waited_for_ns{};
  // Over its steady collectives, how late it arrived: in each, 0 when it arrived first, 1 when last,
  // in proportion between (the others' durations tell: the first to arrive waits longest), summed;
  // and the same over every matched collective, which only grows as the run goes on.
  double steady_lateness = 0, lateness = 0;
  // How often it arrived last: in matched collectives of two ranks or more, the rank with the
  // shortest duration; on a tie, the lowest rank among those with the shortest duration.
  int64_t last_count = 0;
  // Sum, over the collectives where it was last, of the mean wait of the OTHER ranks (each
  // collective's mean rounded down to the nanosecond).
  int64_t imposed_ns = 0;
  // The same after start-up: what the straggler is judged on, and what the HTML report draws.
  int64_t steady_imposed_ns = 0;
  // Its wait in each of its steps (the collectives it called within step k: from its k-th step
  // start to the next); empty when its step starts were not given.
  std::vector<int64_t> waited_by_step_ns{};

  // Its straggler score, 0 to 1: its mean lateness over its steady collectives (0 without any).
  double straggler_score() const { return steady_collectives ? steady_lateness / double(steady_collectives) : 0.0; }
  // The share of its collectives it arrived last at (0 without any).
  double last_fraction() const { return collectives ? double(last_count) / double(collectives) : 0.0; }
};

// A collective where the straggler was last: its own host time when it called the collective, and
// how late it was (the other ranks' mean wait), to cross-reference with what its host was doing.
struct LateCollective {
  int32_t rank;
  int64_t host_begin_ns;
  int64_t lateness_ns;
};

struct CollectiveAnalysis {
  int64_t matched = 0;     // (comm, sequence) pairs seen on every rank of the communicator
  int64_t incomplete = 0;  // pairs missing some rank (still running, or a rank lost data): not used for waits
  int64_t communicators = 0;
  int64_t duplicates = 0;  // records ignored: a second record of the same (rank, comm, sequence)
  // Records ignored as inconsistent: a negative duration, a communicator size of 0 or above
  // kMaxCommunicatorSize, a size other than the one of the communicator's first valid record, or a
  // rank beyond the first comm_size distinct ranks seen in the communicator.
  int64_t inconsistent = 0;
  std::vector<RankWaits> ranks;  // sorted by rank; every rank seen, even with no matched collective
  // The rank whose lateness causes most of the waiting, -1 when none. It is judged on the waits
  // after start-up: on the later half of each communicator's collectives, never its first (the
  // ranks arrive at the first ones as they finish starting up, and the first step's lazy set-up
  // can hold one rank for seconds: one-off skew that no step repeats). Among the ranks, the one with the
  // largest steady_imposed_ns (ties: the lowest rank) is the straggler when all of:
  //   1. its steady_imposed_ns is at least half of all ranks' together (it causes most of it);
  //   2. its steady_imposed_ns is at least kStragglerDominance times every other rank's (no rival);
  //   3. its steady_imposed_ns / last_count is at least kStragglerMinMeanNs (its lateness matters:
  //      balanced ranks with jitter of tens of microseconds are not stragglers, even with 2 ranks);
  //   4. it imposed the most wait in at least kStragglerQuartersLed of the kStragglerQuarters
  //      quarters of each communicator's steady collectives (it is late throughout: a balanced
  //      rank held back by the scheduler a few times, each time for milliseconds, is not), where
  //      there are kStragglerQuarterPairs steady collectives a quarter or more.
  // The rule weighs wait, not counts: a rank late by 30 ms at the first collective of every step
  // is named even if it is last in only a few of the step's collectives.
  int32_t straggler = -1;
  // The straggler's late collectives (every matched collective where it was last), at most
  // kMaxStragglerLate: the latest ones (largest lateness) are kept. In its host time order.
  std::vector<LateCollective> straggler_late;

  // The waits of `rank`, null when it has none.
  const RankWaits* waits_of(int rank) const;
};

inline constexpr uint32_t kMaxCommunicatorSize = 1u << 20;
inline constexpr int64_t kStragglerMinMeanNs = 1'000'000;
inline constexpr int64_t kStragglerDominance = 4;
inline constexpr std::size_t kStragglerQuarters = 4;
inline constexpr int kStragglerQuartersLed = 3;
inline constexpr int64_t kStragglerQuarterPairs = 2;
inline constexpr std::size_t kMaxStragglerLate = 1u << 16;

// Time and memory linear in the input, two passes over it, which is not copied. Extra memory: one
// 56-byte entry per (comm, sequence) pair plus its hash slots (~60-90 bytes in all, with the
// vectors' growth) and, for communicators of more than 64 ranks, one bit per member and pair:
// under 1 % of the input for a communicator of thousands of ranks, about the input's size again
// when every communicator has 2 ranks; per rank, one map entry per rank it waited for. A record repeated for the same
// (rank, comm, sequence) counts once (the first one in input order). step_starts: each rank's step starts on its own
// host clock, in time order, to split its waits by step (RankWaits::waited_by_step_ns); a rank without any gets none.
CollectiveAnalysis analyze_collectives(const std::vector<CollectiveTiming>& timings,
                                       const std::map<int32_t, std::span<const int64_t>>& step_starts = {});

}  // namespace trainshim::cli
