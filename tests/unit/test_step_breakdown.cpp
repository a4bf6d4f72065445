// Each rank's step split into parts that add up to it, on the GPU's records and estimated without.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/step_breakdown.hpp"

namespace trainshim::cli {
namespace {

constexpr int64_t kMs = 1'000'000;

double total_share(const StepBreakdown& b) {
  double sum = 0;
  for (const StepShare& p : b.parts) sum += p.share;
  return sum;
}

CoveredStep covered(int64_t ns, int64_t busy, int64_t communication, int64_t input, int64_t sync, int64_t host) {
  CoveredStep s;
  s.ns = ns;
  s.busy_ns = busy;
  s.communication_ns = communication;
  s.idle_by_cause_ns[int(IdleCause::DataLoading)] = input;
  s.idle_by_cause_ns[int(IdleCause::Sync)] = sync;
  s.idle_by_cause_ns[int(IdleCause::Host)] = host;
  return s;
}

// A rank that waits for the straggler (rank 1) inside its all-reduce and syncs with item() after it:
// 4 steps of 100 ms (GPU busy 70 ms, of which 50 ms in the all-reduce; idle 20 ms for input, 8 ms
// after item(), 2 ms launching) and the first step, 1 s of set-up, left out.
GpuTimelineReport timeline_waiting_for_rank_1() {
  GpuTimelineReport g;
  g.timeline = "on";
  g.steps.push_back(covered(1000 * kMs, 100 * kMs, 50 * kMs, 0, 900 * kMs, 0));
  for (int i = 0; i < 4; ++i) g.steps.push_back(covered(100 * kMs, 70 * kMs, 50 * kMs, 20 * kMs, 8 * kMs, 2 * kMs));
  for (const CoveredStep& s : g.steps) {
    ++g.covered_steps;
    g.covered_ns += s.ns;
    g.busy_ns += s.busy_ns;
    g.communication_ns += s.communication_ns;
    for (int c = 0; c < kIdleCauseCount; ++c) g.idle_by_cause_ns[c] += s.idle_by_cause_ns[c];
  }
  // 3 in 4 of the sync idle time after item(), the rest after the upload's copy.
  g.sync_idle_by_site = {{"train.py:66 in main", 699 * kMs}, {"train.py:60 in main", 233 * kMs}};
  return g;
}

RankSyncs steps_found(int64_t count, int64_t step_ns) {
  RankSyncs s;
  s.steps.count = count;
  s.steps.step_ns = step_ns;
  for (int64_t k = 0; k <= count; ++k) s.steps.starts_ns.push_back(k * step_ns);
  return s;
}

// The sampler's view: the main thread in the DataLoader `percent` % of `steps` steps of 100 ms.
HostReport sampled_input(int64_t percent, int64_t steps) {
  HostReport host;
  host.input_wait = InputWait{};
  host.input_wait->samples = 100;
  host.input_wait->wait_samples = percent;
  host.input_wait->steps = steps;
  host.input_wait->step_ns = 100 * kMs;
  return host;
}

// 8 collectives of 5 steps; after start-up, 4 of them waited 60 ms in all, 45 ms for the straggler
// (rank 1) and 15 for rank 2.
RankWaits waits_for_rank_1() {
  RankWaits w;
  w.rank = 0;
  w.collectives = 10;
  w.steady_collectives = 4;
  w.steady_waited_ns = 60 * kMs;
  w.steady_waited_for_ns = {{1, 45 * kMs}, {2, 15 * kMs}};
  return w;
}

TEST(StepBreakdown, OnTheGpusRecordsAWaitForTheStragglerIsItsOwnPartNotTheSyncs) {
  const RankWaits waits = waits_for_rank_1();
  const std::optional<StepBreakdown> b =
      step_breakdown(steps_found(5, 280 * kMs), timeline_waiting_for_rank_1(), HostReport{}, &waits, 1);
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->measured);
  EXPECT_EQ(b->steps, 4);
  EXPECT_EQ(b->long_steps, 1);
  EXPECT_EQ(b->step_ns, 100 * kMs);
  // 15 ms per collective after start-up, 10 collectives in 5 steps: 30 ms a step, 3 in 4 for rank 1.
  ASSERT_TRUE(b->part_at(StepPart::WaitingForStraggler));
  EXPECT_EQ(b->part_at(StepPart::WaitingForStraggler)->ns_per_step, 22'500'000);
  EXPECT_EQ(b->part_at(StepPart::WaitingForStraggler)->rank, 1);
  EXPECT_EQ(b->part_at(StepPart::WaitingForPeers)->ns_per_step, 7'500'000);
  EXPECT_EQ(b->part_at(StepPart::WaitingForPeers)->rank, 2) << "the peer it waited for";
  EXPECT_EQ(step_part_words(*b->part_at(StepPart::WaitingForPeers)), "waiting for rank 2");
  EXPECT_EQ(b->part_at(StepPart::Communication)->ns_per_step, 20 * kMs);
  EXPECT_EQ(b->part_at(StepPart::Compute)->ns_per_step, 20 * kMs);
  EXPECT_EQ(b->part_at(StepPart::Input)->ns_per_step, 20 * kMs);
  // item()'s share of the kept steps' 8 ms of sync idle time: its bubble, never the wait before it.
  ASSERT_TRUE(b->part_at(StepPart::Sync, "train.py:66 in main"));
  EXPECT_EQ(b->part_at(StepPart::Sync, "train.py:66 in main")->ns_per_step, 6 * kMs);
  EXPECT_EQ(b->part_at(StepPart::Sync, "train.py:60 in main")->ns_per_step, 2 * kMs);
  EXPECT_EQ(b->part_at(StepPart::LaunchBound)->ns_per_step, 2 * kMs);
  EXPECT_FALSE(b->part_at(StepPart::PageableCopy));
  EXPECT_FALSE(b->part_at(StepPart::NotToldApart));
  EXPECT_NEAR(total_share(*b), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(b->part_at(StepPart::WaitingForStraggler)->share, 0.225);
  EXPECT_EQ(b->parts.front().part, StepPart::WaitingForStraggler);  // largest first
  for (std::size_t i = 1; i < b->parts.size(); ++i) EXPECT_GE(b->parts[i - 1].share, b->parts[i].share);
}

// item() then 5 ms of logging, then the next batch: the gap from item()'s return to the upload is
// data loading on the GPU's records. The sampler saw the main thread in the DataLoader 15 ms a step:
// the input keeps 15 ms, and the 5 ms before it are item()'s bubble.
TEST(StepBreakdown, TheHostsOwnWorkAfterASyncIsTheSyncsNotTheInputs) {
  GpuTimelineReport g = timeline_waiting_for_rank_1();
  for (CoveredStep& s : g.steps) s.input_after_sync_ns = s.idle_by_cause_ns[int(IdleCause::DataLoading)];
  g.input_after_sync_by_site = {{"train.py:66 in main", 80 * kMs}};
  const auto b = step_breakdown(steps_found(5, 280 * kMs), g, sampled_input(15, 4), nullptr, -1);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->part_at(StepPart::Input)->ns_per_step, 15 * kMs);
  EXPECT_EQ(b->part_at(StepPart::Sync, "train.py:66 in main")->ns_per_step, 11 * kMs);  // 6 + 5
  EXPECT_EQ(b->part_at(StepPart::Sync, "train.py:60 in main")->ns_per_step, 2 * kMs);
  EXPECT_NEAR(total_share(*b), 1.0, 1e-12);
  // Without the sampler's measure, the gaps stay input.
  const auto unmeasured = step_breakdown(steps_found(5, 280 * kMs), g, HostReport{}, nullptr, -1);
  EXPECT_EQ(unmeasured->part_at(StepPart::Input)->ns_per_step, 20 * kMs);
}

// The straggler itself waits for no one: its all-reduce time is communication.
TEST(StepBreakdown, TheStragglersCollectiveTimeIsCommunication) {
  RankWaits waits;
  waits.rank = 1;
  waits.collectives = 10;
  waits.steady_collectives = 4;
  const auto b = step_breakdown(steps_found(5, 280 * kMs), timeline_waiting_for_rank_1(), HostReport{}, &waits, 1);
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->part_at(StepPart::WaitingForStraggler));
  EXPECT_FALSE(b->part_at(StepPart::WaitingForPeers));
  EXPECT_EQ(b->part_at(StepPart::Communication)->ns_per_step, 50 * kMs);
  EXPECT_NEAR(total_share(*b), 1.0, 1e-12);
}

// With every rank on the GPU timeline, the shortest communication per step (the last rank to arrive
// waits for no one) is the collectives' own time: 50 ms of all-reduce against 12 ms is 38 ms of
// waiting, 3 in 4 of it for the straggler as the arrivals say; and the rank's per-step communication
// is over the steps the breakdown keeps.
TEST(StepBreakdown, OnTheTimelineTheWaitsAreTheCollectivesTimeBeyondTheShortestRanks) {
  const RankWaits waits = waits_for_rank_1();
  const GpuTimelineReport g = timeline_waiting_for_rank_1();
  EXPECT_EQ(communication_ns_per_step(g), 50 * kMs);
  const auto b = step_breakdown(steps_found(5, 280 * kMs), g, HostReport{}, &waits, 1, 12 * kMs);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->part_at(StepPart::Communication)->ns_per_step, 12 * kMs);
  EXPECT_EQ(b->part_at(StepPart::WaitingForStraggler)->ns_per_step, 28'500'000);
  EXPECT_EQ(b->part_at(StepPart::WaitingForPeers)->ns_per_step, 9'500'000);
  EXPECT_NEAR(total_share(*b), 1.0, 1e-12);
  // A rank without collectives matched with others' keeps its communication.
  const auto alone = step_breakdown(steps_found(5, 280 * kMs), g, HostReport{}, nullptr, -1, 12 * kMs);
  EXPECT_EQ(alone->part_at(StepPart::Communication)->ns_per_step, 50 * kMs);
  EXPECT_EQ(communication_ns_per_step(GpuTimelineReport{}), 0);
}

// The waits for ranks other than the straggler are each the rank's own part, on the GPU's records
// and estimated alike; with no straggler, every wait is for a peer.
TEST(StepBreakdown, WaitsForPeersAreByTheRankWaitedFor) {
  RankWaits waits = waits_for_rank_1();
  waits.steady_waited_for_ns = {{1, 45 * kMs}, {2, 10 * kMs}, {3, 5 * kMs}};
  for (const bool measured : {true, false}) {
    SCOPED_TRACE(measured ? "measured" : "estimated");
    const auto b =
        step_breakdown(steps_found(5, measured ? 280 * kMs : 100 * kMs),
                       measured ? timeline_waiting_for_rank_1() : GpuTimelineReport{}, HostReport{}, &waits, 1);
    ASSERT_TRUE(b);
    std::map<int, int64_t> peers;
    for (const StepShare& part : b->parts)
      if (part.part == StepPart::WaitingForPeers) peers[part.rank] = part.ns_per_step;
    EXPECT_EQ(peers, (std::map<int, int64_t>{{2, 5 * kMs}, {3, 2'500'000}}));
    EXPECT_EQ(b->part_at(StepPart::WaitingForStraggler)->ns_per_step, 22'500'000);
    EXPECT_NEAR(total_share(*b), 1.0, 1e-12);
    const auto unjudged =
        step_breakdown(steps_found(5, measured ? 280 * kMs : 100 * kMs),
                       measured ? timeline_waiting_for_rank_1() : GpuTimelineReport{}, HostReport{}, &waits, -1);
    ASSERT_TRUE(unjudged);
    EXPECT_FALSE(unjudged->part_at(StepPart::WaitingForStraggler));
    EXPECT_EQ(unjudged->ns_per_step(StepPart::WaitingForPeers), 30 * kMs);
  }
  // Waits for many ranks: the straggler and the three waited for most by name, the rest as one.
  waits.steady_waited_for_ns = {{1, 30 * kMs}, {2, 10 * kMs}, {3, 8 * kMs}, {4, 6 * kMs}, {5, 4 * kMs}, {6, 2 * kMs}};
  const auto many = step_breakdown(steps_found(5, 280 * kMs), timeline_waiting_for_rank_1(), HostReport{}, &waits, 1);
  ASSERT_TRUE(many);
  std::map<int, int64_t> peers;
  for (const StepShare& part : many->parts)
    if (part.part == StepPart::WaitingForPeers) peers[part.rank] = part.ns_per_step;
  EXPECT_EQ(peers, (std::map<int, int64_t>{{-1, 3 * kMs}, {2, 5 * kMs}, {3, 4 * kMs}, {4, 3 * kMs}}));
  EXPECT_EQ(step_part_words(*many->part_at(StepPart::WaitingForPeers)), "waiting for rank 2");
  EXPECT_EQ(many->part_at(StepPart::WaitingForStraggler)->ns_per_step, 15 * kMs);
  EXPECT_NEAR(total_share(*many), 1.0, 1e-12);
}

// A wait measured longer than the GPU's communication time is capped at it: parts never overlap.
TEST(StepBreakdown, WaitsAreCappedAtTheCommunicationTime) {
  RankWaits waits = waits_for_rank_1();
  waits.steady_waited_ns = 400 * kMs;
  waits.steady_waited_for_ns = {{1, 400 * kMs}};
  const auto b = step_breakdown(steps_found(5, 280 * kMs), timeline_waiting_for_rank_1(), HostReport{}, &waits, 1);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->part_at(StepPart::WaitingForStraggler)->ns_per_step, 50 * kMs);
  EXPECT_FALSE(b->part_at(StepPart::Communication));
  EXPECT_NEAR(total_share(*b), 1.0, 1e-12);
}

SyncSite site(const std::string& file, int line, int64_t blocked_ns, int64_t bubble_ns) {
  SyncSite s;
  s.file = file;
  s.line = line;
  s.function = "main";
  s.blocked_ns = blocked_ns;
  s.bubble_ns = bubble_ns;
  return s;
}

// Without the GPU timeline: the collectives' waits, the input wait, each sync's bubble to the next
// launch and the pageable copies are estimated; the rest is not told apart.
TEST(StepBreakdown, WithoutTheTimelineThePartsAreEstimatesAndTheRestIsNotToldApart) {
  RankSyncs syncs = steps_found(5, 100 * kMs);
  syncs.hidden.push_back(site("train.py", 66, 300 * kMs, 25 * kMs));  // blocked 60 ms a step, 5 ms bubble
  syncs.pageable_copies.push_back(site("train.py", 60, 50 * kMs, 0));
  RankWaits waits = waits_for_rank_1();
  const auto b = step_breakdown(syncs, GpuTimelineReport{}, sampled_input(20, 5), &waits, 1);
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->measured);
  EXPECT_EQ(b->steps, 5);
  EXPECT_EQ(b->step_ns, 100 * kMs);
  EXPECT_EQ(b->part_at(StepPart::WaitingForStraggler)->ns_per_step, 22'500'000);
  EXPECT_EQ(b->part_at(StepPart::Input)->ns_per_step, 20 * kMs);
  // The sync's 60 ms of blocking is not its cost: only its bubble is.
  EXPECT_EQ(b->part_at(StepPart::Sync, "train.py:66 in main")->ns_per_step, 5 * kMs);
  EXPECT_EQ(b->part_at(StepPart::PageableCopy)->ns_per_step, 10 * kMs);
  EXPECT_EQ(b->part_at(StepPart::NotToldApart)->ns_per_step, 35 * kMs);
  EXPECT_FALSE(b->part_at(StepPart::Compute));
  EXPECT_NEAR(total_share(*b), 1.0, 1e-12);
}

// Estimates that overrun the step (clocks that disagree) are scaled down to fit it.
TEST(StepBreakdown, EstimatesOverrunningTheStepAreScaledToIt) {
  RankSyncs syncs = steps_found(5, 100 * kMs);
  syncs.pageable_copies.push_back(site("train.py", 60, 1000 * kMs, 0));  // 200 ms a step
  const auto b = step_breakdown(syncs, GpuTimelineReport{}, HostReport{}, nullptr, -1);
  ASSERT_TRUE(b);
  ASSERT_EQ(b->parts.size(), 1u);
  EXPECT_EQ(b->parts[0].part, StepPart::PageableCopy);
  EXPECT_EQ(b->parts[0].ns_per_step, 100 * kMs);
  EXPECT_DOUBLE_EQ(b->parts[0].share, 1.0);
}

TEST(StepBreakdown, NoStepsNoBreakdown) {
  EXPECT_FALSE(step_breakdown(RankSyncs{}, GpuTimelineReport{}, HostReport{}, nullptr, -1));
}

}  // namespace
}  // namespace trainshim::cli
