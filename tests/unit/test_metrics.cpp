// The metrics `trainshim metrics` exposes: each family's figures from the report, exactly; the
// labels bounded (the top sites and waited-for ranks named, the rest summed); one series per rank
// and host; and the two formats' differences (counter and info names, UNIT lines, "# EOF").
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "render/metrics.hpp"
#include "trainshim/version.hpp"

namespace trainshim::cli {
namespace {

constexpr int64_t kMs = 1'000'000;

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

std::size_t lines_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

SyncSite site(const std::string& file, int line, const std::string& operation, int64_t calls, int64_t blocked_ns) {
  SyncSite s;
  s.file = file;
  s.line = line;
  s.classification.operation = operation;
  s.calls = calls;
  s.blocked_ns = blocked_ns;
  return s;
}

// Two ranks on nodeA, and a second process of rank 1 there (left out); rank 0 waited for four ranks
// and has seven sync sites; rank 1 is the straggler, ended, lost records and is missing from a hang.
Report two_ranks() {
  Report r;
  r.job = R"(train "a"\b)";
  for (const int rank : {0, 1, 1}) {
    ProcessReport& p = r.processes.emplace_back();
    p.rank = rank;
    p.local_rank = rank;
    p.pid = 100 + int64_t(r.processes.size());
    p.host = "nodeA";
  }
  ProcessReport& rank_0 = r.processes[0];
  rank_0.last_progress_unix_ns = 1'700'000'000'500'000'000;
  // Steps of 4, 20 and 200 ms.
  rank_0.sync_sites.steps.starts_ns = {0, 4 * kMs, 24 * kMs, 224 * kMs};
  for (int i = 0; i < 7; ++i)
    rank_0.sync_sites.hidden.push_back(site("/src/train.py", 10 + i, "Tensor.item()", 1 + i, (7 - i) * kMs));
  SyncSite upload = site("/src/data.py", 41, "", 20, 8 * kMs);
  upload.bytes = 20 << 20;
  upload.copy_direction = Direction::HostToDevice;
  rank_0.sync_sites.pageable_copies = {upload};
  rank_0.gpu.covered_steps = 10;
  rank_0.gpu.covered_ns = 100 * kMs;
  rank_0.gpu.busy_ns = 60 * kMs;
  rank_0.gpu.idle_by_cause_ns[int(IdleCause::DataLoading)] = 30 * kMs;
  rank_0.gpu.idle_by_cause_ns[int(IdleCause::Sync)] = 10 * kMs;
  StepBreakdown breakdown;
  breakdown.step_ns = 10 * kMs;
  breakdown.parts = {{StepPart::Compute, "", -1, 6 * kMs, 0.6},
                     {StepPart::Input, "", -1, 3 * kMs, 0.3},
                     {StepPart::Sync, "/src/train.py:10", -1, 1 * kMs, 0.1}};
  rank_0.step_breakdown = breakdown;
  ProcessReport& rank_1 = r.processes[1];
  rank_1.ended = true;
  rank_1.lost.dropped_ring_full = 12;

  CollectiveAnalysis& a = r.waits.analysis;
  a.matched = 40;
  a.straggler = 1;
  RankWaits w0;
  w0.rank = 0;
  w0.waited_for_ns = {{1, 30 * kMs}, {2, 1 * kMs}, {3, 2 * kMs}, {4, 3 * kMs}};
  w0.steady_collectives = 4;
  w0.steady_lateness = 1;
  RankWaits w1;
  w1.rank = 1;
  w1.steady_collectives = 4;
  w1.steady_lateness = 4;
  a.ranks = {w0, w1};
  HangRow hang;
  hang.kind = schema::HangKind::Collective;
  hang.missing = {1};
  r.hangs = {hang};
  return r;
}

constexpr const char* kRank0 = R"(job="train \"a\"\\b",rank="0",local_rank="0",host="nodeA")";
constexpr const char* kRank1 = R"(job="train \"a\"\\b",rank="1",local_rank="1",host="nodeA")";
constexpr const char* kJob = R"(job="train \"a\"\\b")";

std::string with(const char* labels, const std::string& more) {
  std::string out(labels);
  return out + "," + more;
}

TEST(Metrics, EachFamilyGivesTheReportsFigures) {
  const std::string text = render_metrics(two_ranks(), MetricsFormat::Prometheus, 0.25);
  const std::string r0 = kRank0, r1 = kRank1, job = kJob;
  EXPECT_TRUE(has_line(text, "trainshim_job_info{" + job + ",version=\"" + std::string(kTrainshimVersion) + "\"} 1"));
  // Steps of 4, 20 and 200 ms: one in the 5 ms bucket, two by 25 ms, all three by 250 ms.
  EXPECT_TRUE(has_line(text, "trainshim_step_seconds_bucket{" + with(kRank0, R"(le="0.005")") + "} 1"));
  EXPECT_TRUE(has_line(text, "trainshim_step_seconds_bucket{" + with(kRank0, R"(le="0.025")") + "} 2"));
  EXPECT_TRUE(has_line(text, "trainshim_step_seconds_bucket{" + with(kRank0, R"(le="0.1")") + "} 2"));
  EXPECT_TRUE(has_line(text, "trainshim_step_seconds_bucket{" + with(kRank0, R"(le="0.25")") + "} 3"));
  EXPECT_TRUE(has_line(text, "trainshim_step_seconds_bucket{" + with(kRank0, R"(le="+Inf")") + "} 3"));
  EXPECT_TRUE(has_line(text, "trainshim_step_seconds_count{" + r0 + "} 3"));
  EXPECT_TRUE(has_line(text, "trainshim_step_seconds_sum{" + r0 + "} 0.224"));
  EXPECT_TRUE(has_line(text, "trainshim_step_seconds_count{" + r1 + "} 0")) << "no step whose end is known";
  EXPECT_TRUE(has_line(text, "trainshim_last_progress_timestamp_seconds{" + r0 + "} 1700000000.5"));
  EXPECT_EQ(lines_starting(text, "trainshim_last_progress_timestamp_seconds{"), 1u) << "rank 1 recorded nothing";
  EXPECT_TRUE(has_line(text, "trainshim_process_ended{" + r0 + "} 0"));
  EXPECT_TRUE(has_line(text, "trainshim_process_ended{" + r1 + "} 1"));
  // Rank 0 waited 30 ms for rank 1, 3 for rank 4, 2 for rank 3, and 1 ms for rank 2: summed as other.
  EXPECT_TRUE(
      has_line(text, "trainshim_collective_wait_seconds_total{" + with(kRank0, R"(waited_for="1")") + "} 0.03"));
  EXPECT_TRUE(
      has_line(text, "trainshim_collective_wait_seconds_total{" + with(kRank0, R"(waited_for="4")") + "} 0.003"));
  EXPECT_TRUE(
      has_line(text, "trainshim_collective_wait_seconds_total{" + with(kRank0, R"(waited_for="3")") + "} 0.002"));
  EXPECT_TRUE(
      has_line(text, "trainshim_collective_wait_seconds_total{" + with(kRank0, R"(waited_for="other")") + "} 0.001"));
  EXPECT_EQ(lines_starting(text, "trainshim_collective_wait_seconds_total{"), 4u) << "rank 1 waited for no one";
  EXPECT_TRUE(has_line(text, "trainshim_straggler_score{" + r0 + "} 0.25"));
  EXPECT_TRUE(has_line(text, "trainshim_straggler_score{" + r1 + "} 1"));
  EXPECT_TRUE(has_line(text, "trainshim_straggler_rank{" + job + "} 1"));
  EXPECT_TRUE(has_line(text, "trainshim_collectives_matched_total{" + job + "} 40"));
  EXPECT_TRUE(has_line(text, "trainshim_input_wait_ratio{" + r0 + "} 0.3"));
  EXPECT_TRUE(has_line(text, "trainshim_gpu_busy_ratio{" + r0 + "} 0.6"));
  EXPECT_TRUE(has_line(text, "trainshim_gpu_idle_ratio{" + with(kRank0, R"(cause="data_loading")") + "} 0.3"));
  EXPECT_TRUE(has_line(text, "trainshim_gpu_idle_ratio{" + with(kRank0, R"(cause="sync")") + "} 0.1"));
  EXPECT_TRUE(has_line(text, "trainshim_gpu_idle_ratio{" + with(kRank0, R"(cause="host")") + "} 0"));
  EXPECT_EQ(lines_starting(text, "trainshim_gpu_idle_ratio{"), 5u) << "rank 1 has no GPU timeline";
  // Seven sync sites: the five that blocked longest named, the last two (6 and 7 calls, 2 and 1 ms) summed.
  EXPECT_TRUE(has_line(text, "trainshim_hidden_sync_calls_total{" +
                                 with(kRank0, R"x(site="/src/train.py:10",operation="Tensor.item()")x") + "} 1"));
  EXPECT_TRUE(has_line(text, "trainshim_hidden_sync_seconds_total{" +
                                 with(kRank0, R"x(site="/src/train.py:14",operation="Tensor.item()")x") + "} 0.003"));
  EXPECT_TRUE(has_line(
      text, "trainshim_hidden_sync_calls_total{" + with(kRank0, R"(site="other",operation="other")") + "} 13"));
  EXPECT_TRUE(has_line(
      text, "trainshim_hidden_sync_seconds_total{" + with(kRank0, R"(site="other",operation="other")") + "} 0.003"));
  EXPECT_EQ(lines_starting(text, "trainshim_hidden_sync_calls_total{"), 6u);
  EXPECT_TRUE(has_line(text, "trainshim_pageable_copy_bytes_total{" +
                                 with(kRank0, R"(site="/src/data.py:41",direction="h2d")") + "} 20971520"));
  EXPECT_TRUE(has_line(text, "trainshim_pageable_copy_calls_total{" +
                                 with(kRank0, R"(site="/src/data.py:41",direction="h2d")") + "} 20"));
  EXPECT_TRUE(has_line(text, "trainshim_pageable_copy_seconds_total{" +
                                 with(kRank0, R"(site="/src/data.py:41",direction="h2d")") + "} 0.008"));
  EXPECT_TRUE(has_line(text, "trainshim_records_lost_total{" + with(kRank1, R"(cause="ring_full")") + "} 12"));
  EXPECT_TRUE(has_line(text, "trainshim_records_lost_total{" + with(kRank0, R"(cause="ring_full")") + "} 0"));
  EXPECT_TRUE(has_line(text, "trainshim_hangs_total{" + job + R"(,kind="collective"} 1)"));
  EXPECT_TRUE(has_line(text, "trainshim_hangs_total{" + job + R"(,kind="no_progress"} 0)"));
  // Rank 1 runs on this node: its host is named; rank 5 runs on another, which names it.
  EXPECT_TRUE(has_line(text, "trainshim_hang_missing_rank{" + job + R"(,rank="1",host="nodeA"} 1)"));
  Report elsewhere = two_ranks();
  elsewhere.hangs.front().missing = {5};
  EXPECT_TRUE(has_line(render_metrics(elsewhere, MetricsFormat::Prometheus, 0.25),
                       "trainshim_hang_missing_rank{" + job + R"(,rank="5"} 1)"));
  EXPECT_TRUE(has_line(text, "trainshim_metrics_compute_seconds{" + job + "} 0.25"));
}

CommunicatorCollective collective(uint64_t communicator, const std::string& op, uint32_t comm_size, int64_t calls,
                                  int64_t timed, int64_t timed_bytes, int64_t gpu_ns) {
  CommunicatorCollective c;
  c.communicator = communicator;
  c.op = op;
  c.comm_size = comm_size;
  c.calls = calls;
  c.timed = timed;
  c.timed_bytes = timed_bytes;
  c.gpu_ns = gpu_ns;
  return c;
}

// A pipeline stage's point-to-point calls: rank 0 sent 30 activations of 4 MiB and received 20
// gradients of 2 MiB, in 20 timed groups taking 0.25 s of GPU time; rank 1 made none, and has no series.
TEST(Metrics, PointToPointCallsPerRankAndDirection) {
  Report r = two_ranks();
  r.processes[0].p2p = {30, 20, 30 * (4 << 20), 20 * (2 << 20), 20, 250 * kMs};
  const std::string text = render_metrics(r, MetricsFormat::Prometheus, 0);
  EXPECT_TRUE(has_line(text, "trainshim_p2p_calls_total{" + with(kRank0, R"(direction="send")") + "} 30"));
  EXPECT_TRUE(has_line(text, "trainshim_p2p_calls_total{" + with(kRank0, R"(direction="recv")") + "} 20"));
  EXPECT_TRUE(has_line(text, "trainshim_p2p_bytes_total{" + with(kRank0, R"(direction="send")") + "} 125829120"));
  EXPECT_TRUE(has_line(text, "trainshim_p2p_bytes_total{" + with(kRank0, R"(direction="recv")") + "} 41943040"));
  EXPECT_TRUE(has_line(text, "trainshim_p2p_timed_groups_total{" + std::string(kRank0) + "} 20"));
  EXPECT_TRUE(has_line(text, "trainshim_p2p_exec_seconds_total{" + std::string(kRank0) + "} 0.25"));
  EXPECT_EQ(lines_starting(text, "trainshim_p2p_"), 6u) << text;
  EXPECT_EQ(lines_starting(render_metrics(two_ranks(), MetricsFormat::Prometheus, 0), "trainshim_p2p_"), 0u);
}

// NCCL Inspector's figures per communicator and collective: 100 all-reduces of 4 MB each over 4
// ranks in 0.4 s of GPU time move 1 GB/s of messages and 1.5 GB/s on the bus (2(n-1)/n); all-gathers
// of 1 MB pieces move the whole gathered message (4 MB) and (n-1)/n of it on the bus.
TEST(Metrics, CollectivesPerCommunicatorWithNcclInspectorsBandwidths) {
  Report r = two_ranks();
  r.processes[0].communicator_collectives = {collective(0xabc, "all_reduce", 4, 120, 100, 100 * (4 << 20), 400 * kMs),
                                             collective(0xabc, "all_gather", 4, 10, 10, 10 * (1 << 20), 20 * kMs),
                                             collective(0x1f, "broadcast", 2, 5, 0, 0, 0)};
  const std::string text = render_metrics(r, MetricsFormat::Prometheus, 0);
  const std::string reduce = with(kRank0, R"(communicator="0000000000000abc",collective="all_reduce",comm_size="4")");
  const std::string gather = with(kRank0, R"(communicator="0000000000000abc",collective="all_gather",comm_size="4")");
  const std::string broadcast = with(kRank0, R"(communicator="000000000000001f",collective="broadcast",comm_size="2")");
  EXPECT_TRUE(has_line(text, "trainshim_collective_calls_total{" + reduce + "} 120"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_timed_calls_total{" + reduce + "} 100"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_exec_seconds_total{" + reduce + "} 0.4"));
  // The messages: 100 of 4 MiB; 10 gathered messages of 4 x 1 MiB.
  EXPECT_TRUE(has_line(text, "trainshim_collective_message_bytes_total{" + reduce + "} 419430400"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_message_bytes_total{" + gather + "} 41943040"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_algorithm_bandwidth_bytes_per_second{" + reduce + "} 1048576000"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_bus_bandwidth_bytes_per_second{" + reduce + "} 1572864000"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_algorithm_bandwidth_bytes_per_second{" + gather + "} 2097152000"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_bus_bandwidth_bytes_per_second{" + gather + "} 1572864000"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_calls_total{" + broadcast + "} 5"));
  EXPECT_EQ(text.find("bandwidth_bytes_per_second{" + broadcast), std::string::npos) << "never timed: no bandwidth";
  EXPECT_EQ(lines_starting(text, "trainshim_collective_calls_total{"), 3u) << "rank 1 called no collective";
}

// Beyond the first kMetricsTopCommunicatorOps pairs by GPU time, a rank's pairs are summed into
// communicator="other", which has no bandwidth (it mixes collectives).
TEST(Metrics, CommunicatorsBeyondTheTopAreSummed) {
  Report r = two_ranks();
  for (uint64_t i = 0; i < kMetricsTopCommunicatorOps + 2; ++i)
    r.processes[1].communicator_collectives.push_back(
        collective(0x100 + i, "all_reduce", 2, 1, 1, 1024, int64_t(i + 1) * kMs));
  const std::string text = render_metrics(r, MetricsFormat::Prometheus, 0);
  const std::string other = with(kRank1, R"(communicator="other",collective="other",comm_size="other")");
  EXPECT_TRUE(has_line(text, "trainshim_collective_calls_total{" + other + "} 2"));
  EXPECT_TRUE(has_line(text, "trainshim_collective_exec_seconds_total{" + other + "} 0.003")) << "1 ms + 2 ms";
  EXPECT_EQ(lines_starting(text, "trainshim_collective_calls_total{"), kMetricsTopCommunicatorOps + 1);
  EXPECT_EQ(lines_starting(text, "trainshim_collective_bus_bandwidth_bytes_per_second{"), kMetricsTopCommunicatorOps);
  EXPECT_EQ(lines_starting(text, "trainshim_collective_message_bytes_total{"), kMetricsTopCommunicatorOps);
  EXPECT_TRUE(has_line(
      text, "trainshim_collective_calls_total{" +
                with(kRank1, R"(communicator="0000000000000109",collective="all_reduce",comm_size="2")") + "} 1"))
      << "the longest is named";
}

TEST(Metrics, OneSeriesPerRankAndHostAndTheSeriesCounted) {
  const std::string text = render_metrics(two_ranks(), MetricsFormat::Prometheus, 0);
  // The second process of rank 1 on nodeA would repeat rank 1's series: it is left out.
  EXPECT_EQ(lines_starting(text, "trainshim_process_ended{"), 2u);
  std::istringstream in(text);
  std::size_t samples = 0;
  std::string last;
  for (std::string line; std::getline(in, line);) {
    samples += !line.empty() && line[0] != '#';
    if (!line.empty()) last = line;
  }
  EXPECT_EQ(last, "trainshim_metrics_series{" + std::string(kJob) + "} " + std::to_string(samples));
}

// A node of 8 ranks with every family past its cap: more sync and copy sites, more ranks waited
// for, more (communicator, collective) pairs than are named, every loss cause, every rank missing
// from a hang: the most series a node of 8 ranks has, the bound docs/fleet.md states (959; the
// issue allows 2,000).
TEST(Metrics, EightRanksWithEveryFamilyPastItsCapStayWithinTheStatedBound) {
  Report r;
  r.job = "big";
  HangRow hang;
  hang.kind = schema::HangKind::Collective;
  for (int rank = 0; rank < 8; ++rank) {
    ProcessReport& p = r.processes.emplace_back();
    p.rank = rank;
    p.local_rank = rank;
    p.pid = 1000 + rank;
    p.host = "nodeA";
    p.last_progress_unix_ns = 1'700'000'000'000'000'000;
    p.sync_sites.steps.starts_ns = {0, 4 * kMs, 24 * kMs, 224 * kMs};
    for (int i = 0; i < 20; ++i) {
      p.sync_sites.hidden.push_back(site("/src/train.py", 10 + i, "Tensor.item()", 1 + i, (20 - i) * kMs));
      SyncSite copy = site("/src/data.py", 40 + i, "", 2, (20 - i) * kMs);
      copy.bytes = 1 << 20;
      copy.copy_direction = i % 2 ? Direction::HostToDevice : Direction::DeviceToHost;
      p.sync_sites.pageable_copies.push_back(copy);
    }
    p.gpu.covered_steps = 10;
    p.gpu.covered_ns = 100 * kMs;
    p.gpu.busy_ns = 50 * kMs;
    for (int c = 0; c < kIdleCauseCount; ++c) p.gpu.idle_by_cause_ns[c] = 10 * kMs;
    p.step_breakdown = StepBreakdown{};
    p.step_breakdown->parts = {{StepPart::Compute, "", -1, 6 * kMs, 0.6}, {StepPart::Input, "", -1, 4 * kMs, 0.4}};
#define TS_LOST(column, json_key, words, meaning) p.lost.column = 1;
#include "trainshim/counters.def"
    p.p2p = {10, 10, 10 << 20, 10 << 20, 10, 10 * kMs};
    for (uint64_t i = 0; i < kMetricsTopCommunicatorOps + 4; ++i)
      p.communicator_collectives.push_back(
          collective(0x100 + i, "all_reduce", 8, 10, 10, 10 << 20, int64_t(i + 1) * kMs));
    RankWaits& w = r.waits.analysis.ranks.emplace_back();
    w.rank = rank;
    w.collectives = 80;
    w.lateness = 2 * rank;
    w.steady_collectives = 40;
    w.steady_lateness = rank;
    for (int other = 0; other < 8; ++other)
      if (other != rank) w.waited_for_ns[other] = (other + 1) * kMs;
    hang.missing.push_back(rank);
  }
  r.waits.analysis.matched = 40;
  r.waits.analysis.straggler = 7;
  r.hangs = {hang};
  const std::string text = render_metrics(r, MetricsFormat::Prometheus, 0);
  std::size_t samples = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) samples += !line.empty() && line[0] != '#';
  EXPECT_EQ(lines_starting(text, "trainshim_hidden_sync_calls_total{"), 8 * (kMetricsTopSites + 1));
  EXPECT_EQ(lines_starting(text, "trainshim_collective_calls_total{"), 8 * (kMetricsTopCommunicatorOps + 1));
  EXPECT_EQ(lines_starting(text, "trainshim_hang_missing_rank{"), 8u);
  EXPECT_EQ(samples, 1007u) << text;
}

TEST(Metrics, TheTwoFormatsNameCountersAndInfosAsEachSays) {
  const std::string prometheus = render_metrics(two_ranks(), MetricsFormat::Prometheus, 0);
  EXPECT_TRUE(has_line(prometheus, "# TYPE trainshim_hidden_sync_seconds_total counter"));
  EXPECT_TRUE(has_line(prometheus, "# TYPE trainshim_job_info gauge"));
  EXPECT_TRUE(has_line(prometheus, "# TYPE trainshim_step_seconds histogram"));
  EXPECT_EQ(prometheus.find("# UNIT"), std::string::npos);
  EXPECT_EQ(prometheus.find("# EOF"), std::string::npos);

  const std::string open_metrics = render_metrics(two_ranks(), MetricsFormat::OpenMetrics, 0);
  EXPECT_TRUE(has_line(open_metrics, "# TYPE trainshim_hidden_sync_seconds counter"));
  EXPECT_TRUE(has_line(open_metrics, "# UNIT trainshim_hidden_sync_seconds seconds"));
  EXPECT_TRUE(has_line(open_metrics, "# TYPE trainshim_job info"));
  EXPECT_TRUE(has_line(open_metrics, "# UNIT trainshim_input_wait_ratio ratio"));
  EXPECT_TRUE(open_metrics.size() >= 6 && open_metrics.substr(open_metrics.size() - 6) == "# EOF\n");
  // The samples are the same in both.
  auto samples = [](const std::string& text) {
    std::istringstream in(text);
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') out += line + "\n";
    return out;
  };
  EXPECT_EQ(samples(prometheus), samples(open_metrics));
}

}  // namespace
}  // namespace trainshim::cli
