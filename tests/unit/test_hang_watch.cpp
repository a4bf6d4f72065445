// Hang detection: only collectives that will be timed tell a waiting rank from one whose timing
// can never come (captured into a graph, no event, launched on NCCL's thread).
#include <gtest/gtest.h>
#include <sys/syscall.h>

#include "hang_watch.hpp"
#include "trainshim/syscall_names.hpp"

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

// --- Where the ranks are now: their main thread's latest samples ---------------------------------

EventRecord comm_init(uint32_t rank, uint32_t size) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(Api::ncclCommInitRank);
  r.object = 0x5000 + rank;  // the communicator's handle in the rank's process
  r.detail = kComm;          // its id, the same on every rank
  r.rank_in_comm = rank;
  r.comm_size = size;
  return r;
}

// A process whose sampler is on, its main thread (tid = pid) in `state` and `syscall` with stack
// `stack` since `since_s`, last sampled at `at_s`; its last record not the sampler's ended at `record_s`.
ProcessNow sampled_process(int rank, int pid, char state, int64_t syscall, uint32_t stack, int64_t since_s,
                           int64_t at_s, int64_t record_s) {
  ProcessNow p;
  p.rank = rank;
  p.pid = pid;
  p.sampled = true;
  p.last_record_ns = record_s * kS;
  p.main_sampled = true;
  p.main.state = state;
  p.main.syscall = syscall;
  p.main.python_stack = stack;
  p.main.since_ns = uint64_t(since_s * kS);
  p.main.at_ns = uint64_t(at_s * kS);
  return p;
}

// Stacks 7 and 8 of processes 1 and 2 (their database ids), as the collector words them.
StackWords name_stack(int64_t process, uint32_t stack) {
  if (process == 1 && stack == 7)
    return {
        "/job/loader.py:41 in get_batch",
        {"wait (/usr/lib/python3.11/threading.py:320)", "get_batch (/job/loader.py:41)", "<module> (/job/train.py:9)"}};
  if (process == 2 && stack == 8) return {"/job/worker.py:12 in poll_queue", {"poll_queue (/job/worker.py:12)"}};
  return {};
}

// Both ranks initialised a communicator of two; rank 0 entered all-reduce #1 at 5 s, rank 1 never
// did; both main threads sampled, rank 1's in poll_queue.
void hang_on_the_first_collective(HangWatch& w) {
  w.observe(0, comm_init(0, 2), 1 * kS, "/job/train.py:20 in main");
  w.observe(1, comm_init(1, 2), 2 * kS, "/job/train.py:20 in main");
  EventRecord first = call(Api::ncclAllReduce, 0, 1);
  first.comm_size = 2;
  w.observe(0, first, 5 * kS, "/job/train.py:30 in step");
  w.note_process(1, sampled_process(0, 100, 'S', 202, 0, 5, 29, 5));
  w.note_process(2, sampled_process(1, 101, 'S', 7, 8, 10, 29, 2));
}

// Review: a hang on a communicator's first collective. Both ranks initialised it; rank 0 entered
// all-reduce #1, rank 1 never did. No timing ever came (nothing can finish without rank 1), yet
// rank 0 waits, and rank 1 is named with where its main thread is now.
TEST(HangWatch, ARankThatInitialisedTheCommunicatorButNeverEnteredTheFirstCollectiveIsMissing) {
  HangWatch w(10 * kS);
  hang_on_the_first_collective(w);

  EXPECT_TRUE(w.check(14 * kS, name_stack).empty()) << "9 s: below the threshold";
  const auto hangs = w.check(30 * kS, name_stack);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].kind, HangKind::Collective);
  EXPECT_EQ(hangs[0].sequence, 1u);
  EXPECT_EQ(hangs[0].waiting, (std::vector<int>{0}));
  EXPECT_EQ(hangs[0].missing, (std::vector<int>{1}));
  EXPECT_EQ(hangs[0].waited_ns, 25 * kS);
  EXPECT_EQ(hangs[0].message,
            "ncclAllReduce #1 on communicator 0000000000c0ffee: rank 0 waiting for 25 s; rank 1 never entered it; "
            "rank 1's last activity: ncclCommInitRank at /job/train.py:20 in main, 28 s ago; rank 1 main thread "
            "sleeping in poll for 20 s at /job/worker.py:12 in poll_queue");
  // Every rank the message names, in rank order; rank 0's main thread has no Python stack.
  EXPECT_EQ(hangs[0].stacks, "rank 0 (pid 100) thread 100 sleeping in futex for 25 s\n"
                             "rank 1 (pid 101) thread 101 sleeping in poll for 20 s\n"
                             "    at poll_queue (/job/worker.py:12)");
  EXPECT_TRUE(hangs[0].fresh);
}

// The job stopped while it hung (its user killed it, or the launcher the other ranks): the hang,
// written again, keeps each rank's stack as last sampled; a rank still sampled gets its new one.
TEST(HangWatch, AHungRankThatIsGoneKeepsTheStackItHungIn) {
  HangWatch w(10 * kS);
  hang_on_the_first_collective(w);
  ASSERT_EQ(w.check(30 * kS, name_stack).size(), 1u);

  ProcessNow gone = sampled_process(1, 101, 'S', 7, 8, 10, 29, 2);
  gone.main_sampled = false;
  w.note_process(2, gone);
  const auto hangs = w.check(40 * kS, name_stack);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].stacks, "rank 0 (pid 100) thread 100 sleeping in futex for 35 s\n"
                             "rank 1 (pid 101) thread 101 sleeping in poll for 20 s\n"
                             "    at poll_queue (/job/worker.py:12)");
  EXPECT_FALSE(hangs[0].fresh);
}

// Without the inits, the communicator's other rank is only unseen, and nobody was ever timed:
// no rank can be told waiting, as before.
TEST(HangWatch, AFirstCollectiveWithoutTheMembersInitsIsNoHang) {
  HangWatch w(10 * kS);
  EventRecord first = call(Api::ncclAllReduce, 0, 1);
  first.comm_size = 2;
  w.observe(0, first, 5 * kS, "");
  EXPECT_TRUE(w.check(30 * kS).empty());
}

// A failed init, or a split that left the rank out, makes it no member.
TEST(HangWatch, AnInitThatMadeNoCommunicatorMakesNoMember) {
  HangWatch w(10 * kS);
  w.observe(0, comm_init(0, 2), 1 * kS, "");
  EventRecord failed = comm_init(1, 2);
  failed.result = 5;  // ncclInvalidUsage
  w.observe(1, failed, 2 * kS, "");
  EventRecord first = call(Api::ncclAllReduce, 0, 1);
  first.comm_size = 2;
  w.observe(0, first, 5 * kS, "");
  EXPECT_TRUE(w.check(30 * kS).empty());
}

// Review: a job whose every rank is stuck outside collectives (a DataLoader deadlock).
TEST(HangWatch, NoRankProgressingWithNoCollectivePendingIsANoProgressHangWithEveryRanksStack) {
  HangWatch w(10 * kS);
  w.note_process(1, sampled_process(0, 100, 'S', 202, 7, 5, 129, 2));
  w.note_process(2, sampled_process(1, 101, 'S', 7, 8, 3, 129, 4));
  EXPECT_TRUE(w.check(14 * kS, name_stack).empty()) << "rank 0's stack changed 9 s ago";
  const auto hangs = w.check(130 * kS, name_stack);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].kind, HangKind::NoProgress);
  EXPECT_EQ(hang_kind_name(hangs[0].kind), "no_progress");
  EXPECT_EQ(hangs[0].communicator, 0u);
  EXPECT_EQ(hangs[0].sequence, 0u);
  EXPECT_EQ(hangs[0].op, "");
  EXPECT_EQ(hangs[0].waiting, (std::vector<int>{0, 1}));
  EXPECT_TRUE(hangs[0].missing.empty());
  EXPECT_EQ(hangs[0].waited_ns, 125 * kS);
  EXPECT_EQ(hangs[0].message,
            "no rank progressed for 125 s and no collective is pending: rank 0 main thread sleeping in futex for "
            "125 s at /job/loader.py:41 in get_batch; rank 1 main thread sleeping in poll for 127 s at "
            "/job/worker.py:12 in poll_queue");
  EXPECT_EQ(hangs[0].stacks, "rank 0 (pid 100) thread 100 sleeping in futex for 125 s\n"
                             "    at wait (/usr/lib/python3.11/threading.py:320)\n"
                             "    at get_batch (/job/loader.py:41)\n"
                             "    at <module> (/job/train.py:9)\n"
                             "rank 1 (pid 101) thread 101 sleeping in poll for 127 s\n"
                             "    at poll_queue (/job/worker.py:12)");
  EXPECT_TRUE(hangs[0].fresh);
  const auto again = w.check(140 * kS, name_stack);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_FALSE(again[0].fresh) << "reported once";
  EXPECT_EQ(again[0].waited_ns, 135 * kS);

  // Rank 1 moves on, then stops again: a new hang, fresh again.
  w.note_process(2, sampled_process(1, 101, 'S', 7, 9, 141, 141, 4));
  EXPECT_TRUE(w.check(145 * kS, name_stack).empty());
  const auto later = w.check(160 * kS, name_stack);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_TRUE(later[0].fresh);
  EXPECT_EQ(later[0].message,
            "no rank progressed for 19 s and no collective is pending: rank 0 main thread sleeping in futex for 155 s "
            "at /job/loader.py:41 in get_batch; rank 1 main thread sleeping in poll for 19 s")
      << "stack 9 has no words";
}

// A rank whose main thread's stack, state or system call changed, or that recorded a call, made
// progress: no hang, however long the others stood still.
TEST(HangWatch, ARankWhoseStackChangesOrThatMakesCallsIsProgress) {
  for (const ProcessNow& moving : {sampled_process(1, 101, 'S', 7, 8, 125, 129, 4),      // its stack changed at 125 s
                                   sampled_process(1, 101, 'R', -1, 8, 3, 129, 128)}) {  // it recorded a call at 128 s
    HangWatch w(10 * kS);
    w.note_process(1, sampled_process(0, 100, 'S', 202, 7, 5, 129, 2));
    w.note_process(2, moving);
    EXPECT_TRUE(w.check(130 * kS, name_stack).empty());
  }
}

// A collective that some rank has not entered (or not finished) is pending: the ranks wait in it,
// which is a collective hang, never a no_progress one.
TEST(HangWatch, NoNoProgressHangWhileACollectiveIsPending) {
  HangWatch w(10 * kS);
  for (uint32_t rank : {0u, 1u}) {
    for (uint32_t seq = 1; seq <= 2; ++seq) {
      EventRecord entered = call(Api::ncclAllReduce, rank, seq);
      entered.comm_size = 2;
      w.observe(int(rank), entered, int64_t(seq) * kS, "");
      EventRecord timed = call(Api::ncclGpuTiming, rank, seq);
      timed.comm_size = 2;
      w.observe(int(rank), timed, int64_t(seq) * kS, "");
    }
  }
  EventRecord third = call(Api::ncclAllReduce, 0, 3);
  third.comm_size = 2;
  w.observe(0, third, 3 * kS, "");
  w.note_process(1, sampled_process(0, 100, 'S', 202, 7, 3, 129, 3));
  w.note_process(2, sampled_process(1, 101, 'S', 7, 8, 3, 129, 2));
  const auto hangs = w.check(130 * kS, name_stack);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].kind, HangKind::Collective);
  EXPECT_EQ(hangs[0].missing, (std::vector<int>{1}));
  EXPECT_EQ(hangs[0].stacks, "rank 0 (pid 100) thread 100 sleeping in futex for 127 s\n"
                             "    at wait (/usr/lib/python3.11/threading.py:320)\n"
                             "    at get_batch (/job/loader.py:41)\n"
                             "    at <module> (/job/train.py:9)\n"
                             "rank 1 (pid 101) thread 101 sleeping in poll for 127 s\n"
                             "    at poll_queue (/job/worker.py:12)");
}

// Only processes whose sampler is on can be seen not to progress; an ended one is no longer watched.
TEST(HangWatch, ProcessesWithoutTheSamplerOrEndedAreNotWatchedForProgress) {
  HangWatch w(10 * kS);
  ProcessNow unsampled = sampled_process(0, 100, 'S', 202, 7, 5, 129, 2);
  unsampled.sampled = false;
  w.note_process(1, unsampled);
  EXPECT_TRUE(w.check(130 * kS).empty());
  w.note_process(2, sampled_process(1, 101, 'S', 7, 8, 3, 129, 4));
  const auto hangs = w.check(130 * kS);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].waiting, (std::vector<int>{1}));
  EXPECT_EQ(hangs[0].message,
            "no rank progressed for 126 s and no collective is pending: rank 1 main thread sleeping in poll for 127 s");
  w.forget_process(2);
  EXPECT_TRUE(w.check(140 * kS).empty());
}

TEST(HangWatch, AThreadsStateAndSystemCallInWords) {
  ThreadNow t;
  t.since_ns = uint64_t(4 * kS);
  t.state = 'D';
  t.syscall = 17;
  EXPECT_EQ(thread_doing(t, 10 * kS), "disk wait in pread64 for 6 s");
  t.state = 'R';
  t.syscall = -1;
  EXPECT_EQ(thread_doing(t, 10 * kS), "running for 6 s");
  t.state = 0;
  t.syscall = 4000;
  EXPECT_EQ(thread_doing(t, 10 * kS), "in an unknown state in syscall 4000 for 6 s");
}

#if defined(__x86_64__)
// The table's numbers are the kernel's for x86-64.
TEST(SyscallNames, TheNamedNumbersAreTheKernels) {
  EXPECT_EQ(syscall_name(SYS_read), "read");
  EXPECT_EQ(syscall_name(SYS_poll), "poll");
  EXPECT_EQ(syscall_name(SYS_ioctl), "ioctl");
  EXPECT_EQ(syscall_name(SYS_select), "select");
  EXPECT_EQ(syscall_name(SYS_nanosleep), "nanosleep");
  EXPECT_EQ(syscall_name(SYS_recvfrom), "recvfrom");
  EXPECT_EQ(syscall_name(SYS_wait4), "wait4");
  EXPECT_EQ(syscall_name(SYS_futex), "futex");
  EXPECT_EQ(syscall_name(SYS_clock_nanosleep), "clock_nanosleep");
  EXPECT_EQ(syscall_name(SYS_epoll_wait), "epoll_wait");
  EXPECT_EQ(syscall_name(SYS_openat), "openat");
  EXPECT_EQ(syscall_name(SYS_pselect6), "pselect6");
  EXPECT_EQ(syscall_name(SYS_ppoll), "ppoll");
  EXPECT_EQ(syscall_name(SYS_epoll_pwait), "epoll_pwait");
  EXPECT_EQ(syscall_name(SYS_accept4), "accept4");
  EXPECT_EQ(syscall_name(SYS_futex_waitv), "futex_waitv");
  EXPECT_EQ(syscall_name(SYS_getpid), "") << "not a call a thread blocks in";
  EXPECT_EQ(syscall_words(-1), "");
  EXPECT_EQ(syscall_words(SYS_getpid), "syscall 39");
}
#endif

TEST(SyscallNames, StateLettersInWords) {
  EXPECT_EQ(thread_state_words('R'), "running");
  EXPECT_EQ(thread_state_words('S'), "sleeping");
  EXPECT_EQ(thread_state_words('D'), "disk wait");
  EXPECT_EQ(thread_state_words('t'), "tracing stop");
  EXPECT_EQ(thread_state_words('I'), "idle");
  EXPECT_EQ(thread_state_words('Q'), "");
  EXPECT_EQ(thread_state_words(0), "");
}

}  // namespace
}  // namespace trainshim::collector
