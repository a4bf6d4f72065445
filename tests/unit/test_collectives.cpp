// All-reduce wait: per-rank waits from the GPU-side durations of the collectives, and the straggler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "analyse/collectives.hpp"

namespace trainshim::cli {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kUs = 1'000;
constexpr int64_t kBase = 5 * kMs;  // a collective's duration for the last rank to arrive

// Each rank's host clock has its own origin: host times are only compared within a rank.
int64_t host_time(int32_t rank, uint32_t sequence) {
  return int64_t(rank) * 7'000'000'000 + int64_t(sequence) * 100 * kMs;
}

CollectiveTiming timing(int32_t rank, uint64_t comm, uint32_t size, uint32_t sequence, int64_t gpu_ns) {
  return {rank, comm, size, sequence, gpu_ns, host_time(rank, sequence)};
}

const RankWaits& of(const CollectiveAnalysis& a, int32_t rank) {
  auto it = std::find_if(a.ranks.begin(), a.ranks.end(), [&](const RankWaits& w) { return w.rank == rank; });
  EXPECT_NE(it, a.ranks.end()) << "rank " << rank;
  return *it;
}

// 4 ranks, one communicator, 10 steps of 3 collectives:
//   first of each step: rank 2 arrives 30 ms late, the others wait 30 ms each;
//   second: rank 0, 1, 3 in turn (step % 3) arrives 60 us late, the other three wait 60 us;
//   third: every rank the same duration (a tie: rank 0, the lowest, counts as last, imposing 0).
std::vector<CollectiveTiming> steps_with_late_rank_2() {
  std::vector<CollectiveTiming> v;
  const int32_t turn[] = {0, 1, 3};
  for (uint32_t step = 0; step < 10; ++step)
    for (int32_t rank = 0; rank < 4; ++rank) {
      const uint32_t first = step * 3 + 1;
      v.push_back(timing(rank, 0xA11, 4, first, rank == 2 ? kBase : kBase + 30 * kMs));
      v.push_back(timing(rank, 0xA11, 4, first + 1, rank == turn[step % 3] ? kBase : kBase + 60 * kUs));
      v.push_back(timing(rank, 0xA11, 4, first + 2, kBase));
    }
  return v;
}

TEST(Collectives, LateRankWaitsAndStraggler) {
  auto input = steps_with_late_rank_2();
  std::shuffle(input.begin(), input.end(), std::mt19937(7));  // order does not matter
  const CollectiveAnalysis a = analyze_collectives(input);

  EXPECT_EQ(a.matched, 30);
  EXPECT_EQ(a.incomplete, 0);
  EXPECT_EQ(a.communicators, 1);
  EXPECT_EQ(a.duplicates, 0);
  EXPECT_EQ(a.inconsistent, 0);
  ASSERT_EQ(a.ranks.size(), 4u);
  for (int32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(a.ranks[r].rank, r);
    EXPECT_EQ(a.ranks[r].collectives, 30);
  }
  // Rank 0 is last in the second collective of steps 0, 3, 6, 9; ranks 1 and 3 in 3 steps each.
  EXPECT_EQ(of(a, 0).waited_ns, 10 * 30 * kMs + 6 * 60 * kUs);
  EXPECT_EQ(of(a, 1).waited_ns, 10 * 30 * kMs + 7 * 60 * kUs);
  EXPECT_EQ(of(a, 3).waited_ns, 10 * 30 * kMs + 7 * 60 * kUs);
  EXPECT_EQ(of(a, 2).waited_ns, 10 * 60 * kUs);  // never waited in the first collective

  EXPECT_EQ(of(a, 2).last_count, 10);
  EXPECT_EQ(of(a, 0).last_count, 4 + 10);  // the ties of the third collective
  EXPECT_EQ(of(a, 1).last_count, 3);
  EXPECT_EQ(of(a, 3).last_count, 3);
  EXPECT_EQ(of(a, 2).imposed_ns, 10 * 30 * kMs);
  // Whom each waited for: rank 0 for rank 2 in every step, for ranks 1 and 3 by turns; never itself.
  EXPECT_EQ(of(a, 0).waited_for_ns, (std::map<int32_t, int64_t>{{1, 3 * 60 * kUs}, {2, 300 * kMs}, {3, 3 * 60 * kUs}}));
  EXPECT_EQ(of(a, 2).waited_for_ns,
            (std::map<int32_t, int64_t>{{0, 4 * 60 * kUs}, {1, 3 * 60 * kUs}, {3, 3 * 60 * kUs}}));
  EXPECT_EQ(of(a, 0).imposed_ns, 4 * 60 * kUs);
  EXPECT_EQ(of(a, 1).imposed_ns, 3 * 60 * kUs);
  EXPECT_EQ(of(a, 3).imposed_ns, 3 * 60 * kUs);

  // Rank 0 is last more often, but rank 2 causes the waiting.
  EXPECT_EQ(a.straggler, 2);
  // After start-up (sequences 16 to 30, steps 5 to 9): the waits each rank had, and those for rank 2.
  for (int32_t r = 0; r < 4; ++r) EXPECT_EQ(of(a, r).steady_collectives, 15);
  EXPECT_EQ(of(a, 0).steady_waited_ns, 5 * 30 * kMs + 3 * 60 * kUs);
  EXPECT_EQ(of(a, 1).steady_waited_ns, 5 * 30 * kMs + 4 * 60 * kUs);
  EXPECT_EQ(of(a, 3).steady_waited_ns, 5 * 30 * kMs + 3 * 60 * kUs);
  EXPECT_EQ(of(a, 2).steady_waited_ns, 5 * 60 * kUs);
  // Those waits by the rank each waited for: 150 ms for rank 2, the rest 60 us at a time for the
  // rank last at the second collective of each step.
  for (int32_t r : {0, 1, 3}) {
    const RankWaits& w = of(a, r);
    EXPECT_EQ(w.steady_waited_for_ns.at(2), 5 * 30 * kMs);
    EXPECT_FALSE(w.steady_waited_for_ns.contains(r)) << "a rank never waits for itself";
    int64_t all = 0;
    for (const auto& [rank, ns] : w.steady_waited_for_ns) all += ns;
    EXPECT_EQ(all, w.steady_waited_ns);
  }
  EXPECT_FALSE(of(a, 2).steady_waited_for_ns.contains(2));
  // Straggler scores over the 15 steady collectives: rank 2 last at the first of steps 5 to 9;
  // ranks 3, 0, 1, 3, 0 last at their second; the ties of the third tell nothing.
  EXPECT_DOUBLE_EQ(of(a, 2).straggler_score(), 5.0 / 15);
  EXPECT_DOUBLE_EQ(of(a, 0).straggler_score(), 2.0 / 15);
  EXPECT_DOUBLE_EQ(of(a, 1).straggler_score(), 1.0 / 15);
  EXPECT_DOUBLE_EQ(of(a, 3).straggler_score(), 2.0 / 15);
  ASSERT_EQ(a.straggler_late.size(), 10u);
  for (uint32_t step = 0; step < 10; ++step) {
    const LateCollective& late = a.straggler_late[step];  // in rank 2's host time order
    EXPECT_EQ(late.rank, 2);
    EXPECT_EQ(late.host_begin_ns, host_time(2, step * 3 + 1));
    EXPECT_EQ(late.lateness_ns, 30 * kMs);
  }
}

// Arrival jitter of up to `jitter_ns`; `late` arrives `late_ns` later in `late_share` of them.
std::vector<CollectiveTiming> jittered(int32_t ranks, uint32_t collectives, int64_t jitter_ns, int32_t late = -1,
                                       double late_share = 0, int64_t late_ns = 0) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> jitter(0, jitter_ns);
  std::bernoulli_distribution is_late(late_share);
  std::vector<CollectiveTiming> v;
  std::vector<int64_t> arrival(ranks);
  for (uint32_t seq = 1; seq <= collectives; ++seq) {
    const bool delayed = late >= 0 && is_late(rng);
    for (int32_t r = 0; r < ranks; ++r) arrival[r] = jitter(rng) + (delayed && r == late ? late_ns : 0);
    const int64_t end = *std::max_element(arrival.begin(), arrival.end()) + kBase;
    for (int32_t r = 0; r < ranks; ++r) v.push_back(timing(r, 99, uint32_t(ranks), seq, end - arrival[r]));
  }
  return v;
}

// Each rank's waits split by its own steps: a collective counts in the step whose start (on that
// rank's clock) it follows; one before the first start is in none; a rank without starts gets none.
TEST(Collectives, WaitsSplitByEachRanksSteps) {
  std::map<int32_t, std::vector<int64_t>> starts;
  for (const int32_t rank : {0, 1, 2})
    for (uint32_t step = rank == 1 ? 1 : 0; step <= 10; ++step)
      starts[rank].push_back(host_time(rank, step * 3 + 1) - 1);
  const CollectiveAnalysis a =
      analyze_collectives(steps_with_late_rank_2(), {{0, starts[0]}, {1, starts[1]}, {2, starts[2]}});

  std::vector<int64_t> rank_0, rank_1, rank_2;
  for (int64_t step = 0; step < 10; ++step) {
    rank_0.push_back(30 * kMs + (step % 3 == 0 ? 0 : 60 * kUs));
    if (step > 0) rank_1.push_back(30 * kMs + (step % 3 == 1 ? 0 : 60 * kUs));
    rank_2.push_back(60 * kUs);
  }
  EXPECT_EQ(of(a, 0).waited_by_step_ns, rank_0);
  EXPECT_EQ(of(a, 1).waited_by_step_ns, rank_1);
  EXPECT_EQ(of(a, 2).waited_by_step_ns, rank_2);
  EXPECT_TRUE(of(a, 3).waited_by_step_ns.empty());
}

TEST(Collectives, BalancedJitterHasNoStraggler) {
  for (int32_t ranks : {2, 4, 8}) {
    const CollectiveAnalysis a = analyze_collectives(jittered(ranks, 1000, 50 * kUs));
    EXPECT_EQ(a.matched, 1000);
    EXPECT_EQ(a.straggler, -1) << ranks << " ranks";
    EXPECT_TRUE(a.straggler_late.empty());
    for (const RankWaits& w : a.ranks) {
      EXPECT_GT(w.last_count, 1000 / ranks / 2);
      EXPECT_LT(w.last_count, 1000 / ranks * 2);
      EXPECT_GT(w.steady_waited_ns, 0);
      EXPECT_EQ(w.steady_waited_for_ns.size(), std::size_t(ranks - 1)) << "each other rank came last at times";
    }
  }
}

TEST(Collectives, RankLateInNearlyAllIsTheStraggler) {
  const CollectiveAnalysis a = analyze_collectives(jittered(4, 1000, 50 * kUs, 2, 0.99, 30 * kMs));
  EXPECT_EQ(a.straggler, 2);
  EXPECT_GE(of(a, 2).last_count, 970);
  EXPECT_EQ(a.straggler_late.size(), size_t(of(a, 2).last_count));
  int64_t sum = 0;
  for (const LateCollective& l : a.straggler_late) sum += l.lateness_ns;
  EXPECT_EQ(sum, of(a, 2).imposed_ns);
  EXPECT_TRUE(std::is_sorted(a.straggler_late.begin(), a.straggler_late.end(),
                             [](auto& x, auto& y) { return x.host_begin_ns < y.host_begin_ns; }));
}

// A rank's straggler score places its arrival between the first rank's (0) and the last's (1).
TEST(Collectives, StragglerScoreIsEachRanksLatenessBetweenTheFirstAndTheLast) {
  // 3 ranks, 8 collectives: rank 0 arrives first (10 ms in the collective), rank 1 3 ms later
  // (7 ms), rank 2 last (5 ms); the steady half is collectives 5 to 8.
  std::vector<CollectiveTiming> v;
  for (uint32_t seq = 1; seq <= 8; ++seq)
    for (int32_t rank = 0; rank < 3; ++rank)
      v.push_back(timing(rank, 9, 3, seq, (rank == 0 ? 10 : rank == 1 ? 7 : 5) * kMs));
  const CollectiveAnalysis a = analyze_collectives(v);
  EXPECT_EQ(of(a, 0).steady_collectives, 4);
  EXPECT_DOUBLE_EQ(of(a, 0).straggler_score(), 0.0);
  EXPECT_DOUBLE_EQ(of(a, 1).straggler_score(), 0.6);
  EXPECT_DOUBLE_EQ(of(a, 2).straggler_score(), 1.0);
  EXPECT_EQ(of(a, 0).waited_for_ns, (std::map<int32_t, int64_t>{{2, 8 * 5 * kMs}}));
  EXPECT_EQ(of(a, 2).waited_for_ns, (std::map<int32_t, int64_t>{})) << "the last to arrive waits for no one";
}

// The ranks arrive at a communicator's first collective as each finishes starting up (imports, a
// checkpoint, DDP's constructor): that one-off skew neither makes a straggler nor hides one.
TEST(Collectives, StartUpSkewAtTheFirstCollectiveNeitherMakesNorHidesAStraggler) {
  // Rank 0 starts 600 ms after rank 1; then rank 1 comes 100 ms late to each of 20 steps.
  std::vector<CollectiveTiming> late_starter;
  for (int32_t rank = 0; rank < 2; ++rank)
    late_starter.push_back(timing(rank, 7, 2, 1, rank == 0 ? kBase : kBase + 600 * kMs));
  for (uint32_t seq = 2; seq <= 21; ++seq)
    for (int32_t rank = 0; rank < 2; ++rank)
      late_starter.push_back(timing(rank, 7, 2, seq, rank == 1 ? kBase : kBase + 100 * kMs));
  const CollectiveAnalysis a = analyze_collectives(late_starter);
  EXPECT_EQ(of(a, 0).imposed_ns, 600 * kMs) << "still reported";
  EXPECT_EQ(of(a, 1).imposed_ns, 20 * 100 * kMs);
  EXPECT_EQ(of(a, 0).steady_imposed_ns, 0) << "the later half of the collectives only";
  EXPECT_EQ(of(a, 1).steady_imposed_ns, 11 * 100 * kMs) << "collectives 11 to 21";
  EXPECT_EQ(a.straggler, 1);
  EXPECT_EQ(a.straggler_late.size(), 20u);

  // Rank 1 starts 2 s late, then the two take turns arriving last by 50 us: no straggler.
  std::vector<CollectiveTiming> balanced;
  for (int32_t rank = 0; rank < 2; ++rank)
    balanced.push_back(timing(rank, 7, 2, 1, rank == 1 ? kBase : kBase + 2000 * kMs));
  for (uint32_t seq = 2; seq <= 21; ++seq)
    for (int32_t rank = 0; rank < 2; ++rank)
      balanced.push_back(timing(rank, 7, 2, seq, rank == int32_t(seq % 2) ? kBase : kBase + 50 * kUs));
  const CollectiveAnalysis b = analyze_collectives(balanced);
  EXPECT_EQ(of(b, 1).imposed_ns, 2000 * kMs + 10 * 50 * kUs);
  EXPECT_EQ(b.straggler, -1);
}

// The first step's lazy set-up held one rank once, for longer than the straggler's lateness over
// the whole run (the real PyTorch demo under load: rank 0 came 2.7 s late to the first step's third
// all-reduce): the straggler is judged on the later half of the collectives and is still named.
TEST(Collectives, AOneOffHoldUpInTheFirstStepsNeitherMakesNorHidesAStraggler) {
  // 1: DDP's broadcast; then 22 steps of two all-reduces, rank 1 100 ms late to each step's first.
  std::vector<CollectiveTiming> held_once;
  for (uint32_t seq = 1; seq <= 45; ++seq)
    for (int32_t rank = 0; rank < 2; ++rank) {
      int64_t lateness = seq % 2 == 0 ? 100 * kMs : 0;
      int32_t late = 1;
      if (seq == 4) late = 0, lateness = 2700 * kMs;
      held_once.push_back(timing(rank, 7, 2, seq, rank == late ? kBase : kBase + lateness));
    }
  const CollectiveAnalysis a = analyze_collectives(held_once);
  EXPECT_EQ(of(a, 0).imposed_ns, 2700 * kMs) << "still reported";
  EXPECT_EQ(of(a, 0).steady_imposed_ns, 0);
  EXPECT_EQ(a.straggler, 1);

  // Balanced ranks that take turns by 50 us, one held 2.7 s once in the first steps: no straggler.
  std::vector<CollectiveTiming> balanced;
  for (uint32_t seq = 1; seq <= 45; ++seq)
    for (int32_t rank = 0; rank < 2; ++rank) {
      const int64_t lateness = seq == 4 ? 2700 * kMs : 50 * kUs;
      balanced.push_back(timing(rank, 7, 2, seq, rank == int32_t(seq % 2) ? kBase : kBase + lateness));
    }
  EXPECT_EQ(analyze_collectives(balanced).straggler, -1);
}

// Four balanced ranks on shared cores: the scheduler holds one back a few times, for milliseconds
// each, all in one stretch of the run (CI: 18 ms of imposed wait over 6 collectives). The sum makes
// it dominant, but it is not late throughout: no straggler. The same rank late by as much at every
// step, all run long, is one.
TEST(Collectives, AFewHoldUpsInOneStretchAreNoStraggler) {
  auto run = [](bool throughout) {
    std::vector<CollectiveTiming> v;
    for (uint32_t seq = 1; seq <= 40; ++seq) {
      const int32_t turn = int32_t(seq % 4);  // balanced: the ranks take turns by 50 us
      const bool held = throughout ? seq % 3 == 0 : (seq >= 31 && seq <= 33);
      for (int32_t rank = 0; rank < 4; ++rank) {
        const int32_t last = held ? 1 : turn;
        const int64_t lateness = held ? 6 * kMs : 50 * kUs;
        v.push_back(timing(rank, 9, 4, seq, rank == last ? kBase : kBase + lateness));
      }
    }
    return analyze_collectives(v);
  };
  const CollectiveAnalysis stretch = run(false);
  EXPECT_EQ(of(stretch, 1).imposed_ns, 3 * 6 * kMs + 9 * 50 * kUs) << "still reported";
  EXPECT_EQ(stretch.straggler, -1);
  EXPECT_EQ(run(true).straggler, 1);
}

TEST(Collectives, IncompletePairsAreCountedAndLeftOut) {
  std::vector<CollectiveTiming> v;
  for (uint32_t seq = 1; seq <= 5; ++seq)
    for (int32_t r = 0; r < 4; ++r) {
      if (seq == 3 && r == 1) continue;  // rank 1 lost this one
      if (seq == 5 && r != 0) continue;  // only rank 0 reached the last one
      v.push_back(timing(r, 5, 4, seq, r == 0 && seq >= 3 ? kBase + 500 * kMs : kBase + r * kMs));
    }
  const CollectiveAnalysis a = analyze_collectives(v);
  EXPECT_EQ(a.matched, 3);
  EXPECT_EQ(a.incomplete, 2);
  for (int32_t r = 0; r < 4; ++r) EXPECT_EQ(of(a, r).collectives, 3);
  // Matched 1, 2, 4: rank 0 last in 1 and 2; rank 1 last in 4 (rank 0's 500 ms there count).
  EXPECT_EQ(of(a, 0).waited_ns, 500 * kMs - kMs);
  EXPECT_EQ(of(a, 1).waited_ns, 2 * kMs);
  EXPECT_EQ(of(a, 2).waited_ns, 2 * 2 * kMs + kMs);
  EXPECT_EQ(of(a, 0).last_count, 2);
  EXPECT_EQ(of(a, 1).last_count, 1);
  EXPECT_EQ(of(a, 0).imposed_ns, 2 * (1 + 2 + 3) * kMs / 3);
  EXPECT_EQ(of(a, 1).imposed_ns, (499 + 1 + 2) * kMs / 3);
}

TEST(Collectives, DuplicatesCountOnce) {
  auto input = steps_with_late_rank_2();
  const CollectiveAnalysis clean = analyze_collectives(input);
  std::vector<CollectiveTiming> doubled;
  // Rank 1's whole record set again after everything, and rank 3's first collective repeated
  // right away with another duration: the first record of each counts.
  for (const CollectiveTiming& t : input) {
    doubled.push_back(t);
    if (t.rank == 3 && t.sequence == 1) {
      doubled.push_back(t);
      doubled.back().gpu_ns = 1;
    }
  }
  for (const CollectiveTiming& t : input)
    if (t.rank == 1) doubled.push_back(t);
  const CollectiveAnalysis a = analyze_collectives(doubled);
  EXPECT_EQ(a.duplicates, 1 + 30);
  EXPECT_EQ(a.matched, clean.matched);
  EXPECT_EQ(a.straggler, 2);
  ASSERT_EQ(a.ranks.size(), clean.ranks.size());
  for (std::size_t i = 0; i < a.ranks.size(); ++i) {
    EXPECT_EQ(a.ranks[i].collectives, clean.ranks[i].collectives);
    EXPECT_EQ(a.ranks[i].waited_ns, clean.ranks[i].waited_ns);
    EXPECT_EQ(a.ranks[i].last_count, clean.ranks[i].last_count);
    EXPECT_EQ(a.ranks[i].imposed_ns, clean.ranks[i].imposed_ns);
  }
  EXPECT_EQ(a.straggler_late.size(), clean.straggler_late.size());
}

TEST(Collectives, SplitCommunicatorsMatchSeparately) {
  // Comm A: ranks 0-3, rank 3 late by 2 ms. Comm B (a split): ranks 0 and 2, rank 0 late by 1 ms.
  // Both number their collectives 1..5.
  std::vector<CollectiveTiming> v;
  for (uint32_t seq = 1; seq <= 5; ++seq) {
    for (int32_t r = 0; r < 4; ++r) v.push_back(timing(r, 0xA, 4, seq, r == 3 ? kBase : kBase + 2 * kMs));
    v.push_back(timing(0, 0xB, 2, seq, kBase));
    v.push_back(timing(2, 0xB, 2, seq, kBase + kMs));
  }
  v.push_back(timing(2, 0xB, 2, 6, kBase));  // rank 0 has not reached it yet
  const CollectiveAnalysis a = analyze_collectives(v);
  EXPECT_EQ(a.communicators, 2);
  EXPECT_EQ(a.matched, 10);
  EXPECT_EQ(a.incomplete, 1);
  EXPECT_EQ(of(a, 0).collectives, 10);
  EXPECT_EQ(of(a, 1).collectives, 5);
  EXPECT_EQ(of(a, 2).collectives, 10);
  EXPECT_EQ(of(a, 3).collectives, 5);
  EXPECT_EQ(of(a, 0).waited_ns, 5 * 2 * kMs);
  EXPECT_EQ(of(a, 1).waited_ns, 5 * 2 * kMs);
  EXPECT_EQ(of(a, 2).waited_ns, 5 * 2 * kMs + 5 * kMs);
  EXPECT_EQ(of(a, 3).waited_ns, 0);
  EXPECT_EQ(of(a, 3).last_count, 5);
  EXPECT_EQ(of(a, 3).imposed_ns, 5 * 2 * kMs);
  EXPECT_EQ(of(a, 0).last_count, 5);
  EXPECT_EQ(of(a, 0).imposed_ns, 5 * kMs);
  // Rank 3 imposes 2/3 of the waiting, but only twice as much as rank 0: no single straggler.
  EXPECT_EQ(a.straggler, -1);
}

TEST(Collectives, TiesGoToTheLowestRank) {
  std::vector<CollectiveTiming> v;
  // 1: all equal. 2: ranks 1 and 2 tie at the shortest, rank 0 waits 3 ms. Higher ranks first.
  for (int32_t r = 2; r >= 0; --r) v.push_back(timing(r, 1, 3, 1, kBase));
  for (int32_t r = 2; r >= 0; --r) v.push_back(timing(r, 1, 3, 2, r == 0 ? kBase + 3 * kMs : kBase));
  const CollectiveAnalysis a = analyze_collectives(v);
  EXPECT_EQ(a.matched, 2);
  EXPECT_EQ(of(a, 0).last_count, 1);
  EXPECT_EQ(of(a, 0).imposed_ns, 0);
  EXPECT_EQ(of(a, 1).last_count, 1);
  EXPECT_EQ(of(a, 1).imposed_ns, 3 * kMs / 2);  // the others: rank 0 waited 3 ms, rank 2 none
  EXPECT_EQ(of(a, 2).last_count, 0);
  EXPECT_EQ(of(a, 0).waited_ns, 3 * kMs);
  EXPECT_EQ(of(a, 1).waited_ns, 0);
  EXPECT_EQ(of(a, 2).waited_ns, 0);
  EXPECT_EQ(a.straggler, 1);  // all the waiting there is, 1.5 ms a time
}

TEST(Collectives, InconsistentRecordsAreLeftOut) {
  std::vector<CollectiveTiming> v;
  for (uint32_t seq = 1; seq <= 3; ++seq)
    for (int32_t r = 0; r < 2; ++r) v.push_back(timing(r, 8, 2, seq, kBase + r * kMs));
  v.push_back(timing(5, 8, 2, 1, kBase));  // a third rank in a communicator of 2
  v.push_back(timing(0, 8, 3, 4, kBase));  // another size
  v.push_back(timing(1, 8, 2, 4, -1));     // a negative duration
  v.push_back(timing(0, 9, 0, 1, kBase));  // size 0
  const CollectiveAnalysis a = analyze_collectives(v);
  EXPECT_EQ(a.inconsistent, 4);
  EXPECT_EQ(a.matched, 3);
  EXPECT_EQ(a.incomplete, 0);
  EXPECT_EQ(a.communicators, 1);
  EXPECT_EQ(of(a, 1).waited_ns, 3 * kMs);
  EXPECT_EQ(of(a, 5).collectives, 0);
}

TEST(Collectives, LargeCommunicator) {
  // 100 ranks (member bits outside the pair), rank 77 late by 5 ms in every collective, with a
  // repeated record and one rank missing from the last collective.
  std::vector<CollectiveTiming> v;
  for (uint32_t seq = 1; seq <= 20; ++seq)
    for (int32_t r = 99; r >= 0; --r) {
      if (seq == 20 && r == 64) continue;
      v.push_back(timing(r, 3, 100, seq, r == 77 ? kBase : kBase + 5 * kMs + r));
      if (r == 70) {
        const CollectiveTiming again = v.back();
        v.push_back(again);
      }
    }
  const CollectiveAnalysis a = analyze_collectives(v);
  EXPECT_EQ(a.matched, 19);
  EXPECT_EQ(a.incomplete, 1);
  EXPECT_EQ(a.duplicates, 20);
  EXPECT_EQ(a.straggler, 77);
  EXPECT_EQ(of(a, 77).last_count, 19);
  EXPECT_EQ(of(a, 70).waited_ns, 19 * (5 * kMs + 70));
  EXPECT_EQ(of(a, 64).collectives, 19);
  ASSERT_EQ(a.straggler_late.size(), 19u);
  // The others' mean wait: 5 ms plus the mean of 0..99 without 77, rounded down.
  EXPECT_EQ(a.straggler_late[0].lateness_ns, 5 * kMs + (99 * 100 / 2 - 77) / 99);
}

TEST(Collectives, StragglerLateIsCappedToTheLatest) {
  const uint32_t n = uint32_t(kMaxStragglerLate) + 1000;
  std::vector<CollectiveTiming> v;
  for (uint32_t seq = 1; seq <= n; ++seq) {
    v.push_back(timing(0, 1, 2, seq, kBase));
    v.push_back(timing(1, 1, 2, seq, kBase + 2 * kMs + seq));  // later collectives: later
  }
  const CollectiveAnalysis a = analyze_collectives(v);
  EXPECT_EQ(a.straggler, 0);
  EXPECT_EQ(of(a, 0).last_count, n);
  ASSERT_EQ(a.straggler_late.size(), kMaxStragglerLate);
  EXPECT_EQ(a.straggler_late.front().host_begin_ns, host_time(0, 1001));
  EXPECT_EQ(a.straggler_late.back().host_begin_ns, host_time(0, n));
  EXPECT_EQ(a.straggler_late.back().lateness_ns, 2 * kMs + n);
}

TEST(Collectives, EmptyAndSingleRank) {
  const CollectiveAnalysis empty = analyze_collectives({});
  EXPECT_EQ(empty.matched, 0);
  EXPECT_EQ(empty.straggler, -1);
  EXPECT_TRUE(empty.ranks.empty());
  // A communicator of one: matched, nobody waits, nobody is last.
  const CollectiveAnalysis one = analyze_collectives({timing(4, 2, 1, 1, kBase), timing(4, 2, 1, 2, kBase)});
  EXPECT_EQ(one.matched, 2);
  EXPECT_EQ(of(one, 4).collectives, 2);
  EXPECT_EQ(of(one, 4).last_count, 0);
  EXPECT_EQ(one.straggler, -1);
}

}  // namespace
}  // namespace trainshim::cli
