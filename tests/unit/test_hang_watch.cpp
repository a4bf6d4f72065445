// Hang detection: only collectives that will be timed tell a waiting rank from one whose timing
// can never come (captured into a graph, no event, launched on NCCL's thread).
#include <gtest/gtest.h>

#include "hang_watch.hpp"

namespace trainshim::collector {
namespace {

constexpr int64_t kS = 1'000'000'000;
constexpr uint64_t kComm = 0xC0FFEE;

EventRecord call(Api api, uint32_t rank, uint32_t sequence, uint32_t flags = 0, uint32_t peer = 0) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.object = kComm;
  r.comm_size = 4;
  r.rank_in_comm = rank;
  r.sequence = sequence;
  r.flags = flags;
  r.peer = peer;
  return r;
}

// Ranks 0 and 1 of a four-rank communicator live on this node (2 and 3 elsewhere, never seen):
// both entered collectives 1..5 and the GPU finished 1..4 for them; the last one carries `flags`.
HangWatch two_local_ranks_in_fifth(uint32_t flags) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u}) {
    for (uint32_t seq = 1; seq <= 5; ++seq) {
      w.observe(int(rank), call(Api::ncclAllReduce, rank, seq, seq == 5 ? flags : 0), int64_t(seq) * kS, "");
      if (seq < 5) w.observe(int(rank), call(Api::ncclGpuTiming, rank, seq), int64_t(seq) * kS, "");
    }
  }
  return w;
}

TEST(HangWatch, TimedNewestCollectiveWithUnseenRanksIsAHang) {
  HangWatch w = two_local_ranks_in_fifth(0);
  const auto hangs = w.check(30 * kS);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].sequence, 5u);
  EXPECT_EQ(hangs[0].waiting, (std::vector<int>{0, 1}));
  EXPECT_TRUE(hangs[0].missing.empty());
}

TEST(HangWatch, UntimedNewestCollectiveIsNoHang) {
  for (uint32_t flags : {uint32_t{kUntimedCapturing}, uint32_t{kUntimedNoEvent}, uint32_t{kGroupInProgress}}) {
    HangWatch w = two_local_ranks_in_fifth(flags);
    EXPECT_TRUE(w.check(30 * kS).empty()) << "flags " << flags;
  }
}

// A group's collectives are recorded before its end says whether they will be timed.
TEST(HangWatch, GroupLaunchedOnNcclsThreadIsNoHang) {
  HangWatch in_progress = two_local_ranks_in_fifth(kInGroup);
  for (int rank : {0, 1}) {
    EventRecord end{};
    end.api = static_cast<uint16_t>(Api::ncclGroupEnd);
    end.flags = kGroupInProgress;
    end.detail = 1;
    in_progress.observe(rank, end, 5 * kS, "");
  }
  EXPECT_TRUE(in_progress.check(30 * kS).empty());

  HangWatch launched = two_local_ranks_in_fifth(kInGroup);
  for (int rank : {0, 1}) {
    EventRecord end{};
    end.api = static_cast<uint16_t>(Api::ncclGroupEnd);
    end.detail = 1;
    launched.observe(rank, end, 5 * kS, "");
  }
  const auto hangs = launched.check(30 * kS);
  ASSERT_EQ(hangs.size(), 1u) << "a group that was launched and timed still hangs";
  EXPECT_EQ(hangs[0].waiting, (std::vector<int>{0, 1}));
}

// A program that waits for its non-blocking launches (PyTorch) gets them timed: once one such
// timing came, a launch that never finishes is a hang again.
TEST(HangWatch, NonBlockingLaunchesOfAProgramThatWaitsForThemCanHang) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u}) {
    for (uint32_t seq = 1; seq <= 5; ++seq) {
      w.observe(int(rank), call(Api::ncclAllReduce, rank, seq, kGroupInProgress), int64_t(seq) * kS, "");
      if (seq < 5) w.observe(int(rank), call(Api::ncclGpuTiming, rank, seq, kGroupInProgress), int64_t(seq) * kS, "");
    }
  }
  const auto hangs = w.check(30 * kS);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].waiting, (std::vector<int>{0, 1}));
}

// Point-to-point numbers count sends to one peer: send #9 is no ninth collective.
TEST(HangWatch, PointToPointNumbersAreNotCollectiveNumbers) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u}) {
    for (uint32_t seq = 1; seq <= 5; ++seq) {
      w.observe(int(rank), call(Api::ncclAllReduce, rank, seq), int64_t(seq) * kS, "");
      w.observe(int(rank), call(Api::ncclGpuTiming, rank, seq), int64_t(seq) * kS, "");
    }
    w.observe(int(rank), call(Api::ncclSend, rank, 9, kPointToPoint | kSend, 1 - rank), 6 * kS, "");
  }
  EXPECT_TRUE(w.check(30 * kS).empty());
}

// Review §9: a communicator's size comes from a record. Its unseen ranks are counted, never listed
// one by one, so the largest size a record may carry costs nothing.
TEST(HangWatch, UnseenRanksOfTheLargestCommunicatorAreCountedNotListed) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u}) {
    for (uint32_t seq = 1; seq <= 2; ++seq) {
      EventRecord entered = call(Api::ncclAllReduce, rank, seq);
      entered.comm_size = kMaxCommSize;
      w.observe(int(rank), entered, int64_t(seq) * kS, "");
    }
    EventRecord first_done = call(Api::ncclGpuTiming, rank, 1);
    first_done.comm_size = kMaxCommSize;
    w.observe(int(rank), first_done, 2 * kS, "");
  }
  const auto hung = w.check(30 * kS);
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_EQ(hung[0].waiting, (std::vector<int>{0, 1}));
  EXPECT_TRUE(hung[0].missing.empty());
  EXPECT_EQ(hung[0].message, "ncclAllReduce #2 on communicator 0000000000c0ffee: ranks 0,1 waiting for 28 s; "
                             "1048574 ranks of the communicator not seen on this node");
}

// Rank 1's collectives are never timed (finished stays 0): its missing timing says nothing, so it
// is never listed as waiting; rank 0, whose collectives 1..4 were timed, is.
TEST(HangWatch, AMemberWhoseCollectivesWereNeverTimedIsNotWaiting) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u})
    for (uint32_t seq = 1; seq <= 5; ++seq) {
      w.observe(int(rank), call(Api::ncclAllReduce, rank, seq), int64_t(seq) * kS, "");
      if (rank == 0 && seq < 5) w.observe(0, call(Api::ncclGpuTiming, rank, seq), int64_t(seq) * kS, "");
    }
  const auto hangs = w.check(30 * kS);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].waiting, (std::vector<int>{0}));
  EXPECT_TRUE(hangs[0].missing.empty());
  EXPECT_EQ(hangs[0].message, "ncclAllReduce #5 on communicator 0000000000c0ffee: rank 0 waiting for 25 s; "
                              "2 ranks of the communicator not seen on this node");
}

// No member was ever timed: nobody can be told waiting, so there is no hang to report.
TEST(HangWatch, NoHangWhenNoMemberWasEverTimed) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u})
    for (uint32_t seq = 1; seq <= 5; ++seq)
      w.observe(int(rank), call(Api::ncclAllReduce, rank, seq), int64_t(seq) * kS, "");
  EXPECT_TRUE(w.check(30 * kS).empty());
}

// Every rank of a two-rank communicator is on this node; rank 1 never entered #3. It is named
// missing, with what it did last; rank 0 waits.
TEST(HangWatch, ARankThatNeverEnteredIsMissingWithItsLastActivity) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u})
    for (uint32_t seq = 1; seq <= 2; ++seq) {
      EventRecord entered = call(Api::ncclAllReduce, rank, seq);
      entered.comm_size = 2;
      w.observe(int(rank), entered, int64_t(seq) * kS, "train.py:95");
      EventRecord timed = call(Api::ncclGpuTiming, rank, seq);
      timed.comm_size = 2;
      w.observe(int(rank), timed, int64_t(seq) * kS, "");
    }
  EventRecord third = call(Api::ncclAllReduce, 0, 3);
  third.comm_size = 2;
  w.observe(0, third, 3 * kS, "train.py:95");
  w.note_activity(1, "cudaStreamSynchronize", "data.py:41", 4 * kS);

  EXPECT_TRUE(w.check(12 * kS).empty()) << "9 s: below the 10 s threshold";
  const auto hangs = w.check(30 * kS);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].sequence, 3u);
  EXPECT_EQ(hangs[0].op, "ncclAllReduce");
  EXPECT_EQ(hangs[0].waited_ns, 27 * kS);
  EXPECT_EQ(hangs[0].waiting, (std::vector<int>{0}));
  EXPECT_EQ(hangs[0].missing, (std::vector<int>{1}));
  EXPECT_EQ(hangs[0].message, "ncclAllReduce #3 on communicator 0000000000c0ffee: rank 0 waiting for 27 s; "
                              "rank 1 never entered it; rank 1's last activity: cudaStreamSynchronize at data.py:41, "
                              "26 s ago");
}

// Every rank of the communicator is here and entered it, and the GPU finished it for every one
// that is timed: no hang, however long ago it began.
TEST(HangWatch, ACollectiveFinishedEverywhereIsNoHang) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u}) {
    EventRecord entered = call(Api::ncclAllReduce, rank, 1);
    entered.comm_size = 2;
    w.observe(int(rank), entered, kS, "");
    EventRecord timed = call(Api::ncclGpuTiming, rank, 1);
    timed.comm_size = 2;
    w.observe(int(rank), timed, kS, "");
  }
  EXPECT_TRUE(w.check(100 * kS).empty());
}

// A hang is reported at every check while it lasts (the collector updates its row), but fresh
// (said to the user) only at the first; a later collective that hangs is fresh again.
TEST(HangWatch, AHangIsFreshOnlyAtTheFirstCheckThatFindsIt) {
  HangWatch w = two_local_ranks_in_fifth(0);
  const auto first = w.check(30 * kS);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(first[0].fresh);
  const auto second = w.check(40 * kS);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_FALSE(second[0].fresh);
  EXPECT_EQ(second[0].sequence, 5u);
  EXPECT_EQ(second[0].waited_ns, 35 * kS);

  for (uint32_t rank : {0u, 1u}) {
    w.observe(int(rank), call(Api::ncclGpuTiming, rank, 5), 41 * kS, "");
    w.observe(int(rank), call(Api::ncclAllReduce, rank, 6), 42 * kS, "");
  }
  EXPECT_TRUE(w.check(45 * kS).empty()) << "#6 began 3 s ago";
  const auto later = w.check(60 * kS);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].sequence, 6u);
  EXPECT_TRUE(later[0].fresh);
}

}  // namespace
}  // namespace trainshim::collector
