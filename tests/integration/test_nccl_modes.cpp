// NCCL as PyTorch drives it, end to end: four ranks of tests/programs/nccl_modes.cpp on simcuda
// under `trainshim run`, each mode a way PyTorch creates communicators or issues NCCL calls.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "harness.hpp"

namespace trainshim::test {
namespace {

using nlohmann::json;

// The report of a four-rank run of one mode; the database stays in the scratch directory.
json run_mode(const Scratch& s, const std::string& mode) {
  const auto result = run("SIMNCCL_TIMEOUT_S=60 " + trainshim_cli() + " run --no-report --out " + s.db() + " -- " +
                          Paths::source + "/scripts/simrun -n 4 -- " + Paths::programs + "/nccl_modes_prog " + mode);
  EXPECT_EQ(result.exit_code, 0) << result.out;
  const auto report = run(trainshim_cli() + " report --json " + s.db());
  EXPECT_EQ(report.exit_code, 0);
  return json::parse(report.out);
}

const std::string kCollectives = "FROM events e JOIN apis a ON a.id = e.api JOIN processes p ON p.id = e.process_id "
                                 "WHERE a.class = 'collective' ";
// The collectives timed on the GPU: each timing is in its collective's row (of its operation's
// first call, for a group).
const std::string kTimings = kCollectives + "AND e.gpu_ns IS NOT NULL ";

std::string of_rank(int rank) { return " AND p.rank = " + std::to_string(rank); }

// The value of label `key` in an exposition's sample line ("" when it has none).
std::string label_of(const std::string& line, const std::string& key) {
  const std::string opening = "," + key + "=\"";
  const auto at = line.find(opening);
  if (at == std::string::npos) return "";
  const auto from = at + opening.size();
  return line.substr(from, line.find('"', from) - from);
}

// A non-blocking world communicator (init returns ncclInProgress) and a child split from it whose
// handle NCCL writes only once the split completed: both are registered, their collectives
// numbered 1..30 alike on every rank. Every call on a non-blocking communicator launches on
// NCCL's thread (ncclInProgress); the program waits for each launch with ncclCommGetAsyncError,
// as PyTorch does, and that is when each collective's end event goes on the stream.
TEST(NcclModes, NonBlockingCommunicatorAndItsSplitChildAreNumbered) {
  Scratch s;
  const json waits = run_mode(s, "nonblocking").at("collective_waits");
  EXPECT_EQ(waits.at("matched"), 90) << "30 on the world, 30 on each half";
  EXPECT_EQ(waits.at("communicators"), 3);
  EXPECT_EQ(waits.at("incomplete"), 0);
  EXPECT_EQ(waits.at("inconsistent"), 0);
  EXPECT_EQ(waits.at("untimed").at("in_group_in_progress"), 0);
  EXPECT_EQ(waits.at("launched_on_nccl_thread"), 4 * 60);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kCollectives + " AND (e.flags & 32) <> 0 AND e.result = 7"), 4 * 60);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kTimings + " AND (e.flags & 32) <> 0"), 4 * 60);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string world = kCollectives + of_rank(rank) + " AND e.comm_size = 4";
    EXPECT_EQ(query_int(s.db(), "SELECT count(DISTINCT e.sequence) " + world), 30);
    EXPECT_EQ(query_int(s.db(), "SELECT min(e.sequence) " + world), 1);
    EXPECT_EQ(query_int(s.db(), "SELECT max(e.sequence) " + world), 30);
    EXPECT_EQ(query_int(s.db(), "SELECT DISTINCT e.rank_in_comm " + world), rank);
    const std::string half = kCollectives + of_rank(rank) + " AND e.comm_size = 2";
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + half), 30) << "the lazily registered child";
    EXPECT_EQ(query_int(s.db(), "SELECT count(DISTINCT e.sequence) " + half), 30);
    EXPECT_EQ(query_int(s.db(), "SELECT max(e.sequence) " + half), 30);
    EXPECT_EQ(query_int(s.db(), "SELECT DISTINCT e.rank_in_comm " + half), rank / 2);
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kCollectives + of_rank(rank) + " AND e.sequence = 0"), 0);
  }
  EXPECT_EQ(query_int(s.db(), "SELECT count(DISTINCT e.object) " + kCollectives + " AND e.comm_size = 4"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT count(DISTINCT e.object) " + kCollectives + " AND e.comm_size = 2"), 2);
  EXPECT_EQ(query_int(s.db(),
                      "SELECT count(DISTINCT e.object) " + kCollectives + " AND e.comm_size = 2 AND p.rank IN (1, 3)"),
            1);
}

TEST(NcclModes, ScalableInitIsOneCommunicator) {
  Scratch s;
  const json waits = run_mode(s, "scalable").at("collective_waits");
  EXPECT_EQ(waits.at("matched"), 10);
  EXPECT_EQ(waits.at("incomplete"), 0);
  EXPECT_EQ(waits.at("inconsistent"), 0);
  EXPECT_EQ(waits.at("communicators"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kCollectives + " AND e.comm_size = 4 AND e.sequence > 0"), 40);
}

// Ranks 0 and 2 shrink the world without 1 and 3, passing the list in different orders.
TEST(NcclModes, ShrunkCommunicatorIsMatched) {
  Scratch s;
  const json waits = run_mode(s, "shrink").at("collective_waits");
  EXPECT_EQ(waits.at("matched"), 15) << "5 on the world, 10 on what is left of it";
  EXPECT_EQ(waits.at("incomplete"), 0);
  EXPECT_EQ(waits.at("communicators"), 2);
  for (int rank : {0, 2}) {
    const std::string rest = kCollectives + of_rank(rank) + " AND e.comm_size = 2";
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + rest), 10);
    EXPECT_EQ(query_int(s.db(), "SELECT max(e.sequence) " + rest), 10);
    EXPECT_EQ(query_int(s.db(), "SELECT DISTINCT e.rank_in_comm " + rest), rank / 2);
  }
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kCollectives + " AND e.comm_size = 2 AND p.rank IN (1, 3)"), 0);
  EXPECT_EQ(query_int(s.db(), "SELECT count(DISTINCT e.object) " + kCollectives + " AND e.comm_size = 2"), 1);
}

// Grouped calls launch at the outermost ncclGroupEnd: each group is timed as one operation, so
// the ranks that wait for the late rank 3 measure its 300 ms, not ~0 per call. The all-to-all
// exchanges with every rank and is matched as a collective; the ring is not (each rank meets only
// its neighbours), so rank 3's lateness reaches the all-to-all through rank 0, which waited for
// it in the ring: rank 0 and rank 3 then arrive at the all-to-all within microseconds of each
// other, and which is last is the scheduler's choice. Rank 3 alone is late at the coalesced
// all-reduces, so it is named the straggler when it is also last at the all-to-alls, and no one
// is when rank 0 is; rank 0, late only for waiting on rank 3, is never named.
TEST(NcclModes, GroupsAreTimedAsOneOperation) {
  Scratch s;
  const json waits = run_mode(s, "groups").at("collective_waits");
  EXPECT_EQ(waits.at("matched"), 9) << "per step: one all-reduce, one group of two all-reduces, one all-to-all";
  EXPECT_EQ(waits.at("incomplete"), 0);
  EXPECT_EQ(waits.at("duplicates"), 0);
  const json& p2p = waits.at("p2p");
  EXPECT_EQ(p2p.at("exchanges"), 4 * 3) << "one all-to-all per rank and step";
  EXPECT_EQ(p2p.at("sends"), 4 * 3 * 5) << "per rank and step: one ring send, four all-to-all sends";
  EXPECT_EQ(p2p.at("recvs"), 4 * 3 * 5);
  EXPECT_EQ(p2p.at("matched"), 4 * 3 * 5);
  EXPECT_EQ(p2p.at("unmatched"), 0);
  EXPECT_EQ(p2p.at("timed"), 4 * 3 * 2) << "one timing per group of point-to-point calls";
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kTimings + of_rank(rank) + " AND (e.flags & 8) = 0"), 6);
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kTimings + of_rank(rank) + " AND (e.flags & 12) = 12"), 6);
    if (rank < 3) {
      // The ring group right after rank 3's 300 ms of work, once per step.
      EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kTimings + of_rank(rank) +
                                      " AND (e.flags & 8) <> 0 AND e.gpu_ns >= 150000000"),
                3);
    }
  }
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kCollectives + " AND (e.flags & 4) = 0 AND (e.flags & 8) <> 0"), 0)
      << "every point-to-point call here was made in a group";
  // Rank 3 imposes the most wait (at least its 300 ms at each step's coalesced all-reduces).
  const json& ranks = waits.at("ranks");
  ASSERT_EQ(ranks.size(), 4u) << waits.dump(1);
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_GT(ranks[3].at("imposed_ns").get<int64_t>(), ranks[rank].at("imposed_ns").get<int64_t>()) << waits.dump(1);
  if (!waits.at("straggler").is_null()) {
    EXPECT_EQ(waits.at("straggler").at("rank"), 3) << waits.dump(1);
  }
}

// Ranks 0 and 1 exchange with send/recv on the collective communicator every third step; ranks 2
// and 3 do not. Their all-reduces still carry the same numbers, and the late rank 2 is named.
TEST(NcclModes, PointToPointDoesNotShiftCollectiveNumbers) {
  Scratch s;
  const json report = run_mode(s, "p2p_straggler");
  const json& waits = report.at("collective_waits");
  EXPECT_EQ(waits.at("matched"), 30);
  EXPECT_EQ(waits.at("incomplete"), 0);
  EXPECT_EQ(waits.at("inconsistent"), 0);
  ASSERT_FALSE(waits.at("straggler").is_null()) << waits.dump(1);
  EXPECT_EQ(waits.at("straggler").at("rank"), 2);
  EXPECT_EQ(waits.at("p2p").at("sends"), 20);
  EXPECT_EQ(waits.at("p2p").at("recvs"), 20);
  EXPECT_EQ(waits.at("p2p").at("matched"), 20);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string reduces = kCollectives + of_rank(rank) + " AND a.name = 'ncclAllReduce'";
    EXPECT_EQ(query_int(s.db(), "SELECT max(e.sequence) " + reduces), 30);
    EXPECT_EQ(query_int(s.db(), "SELECT count(DISTINCT e.sequence) " + reduces), 30);
    const std::string sends = kCollectives + of_rank(rank) + " AND a.name = 'ncclSend'";
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + sends), rank < 2 ? 10 : 0);
    if (rank < 2) {
      EXPECT_EQ(query_int(s.db(), "SELECT max(e.sequence) " + sends), 10);
    }
  }
  for (const auto& r : waits.at("ranks")) EXPECT_EQ(r.at("collectives"), 30) << r.dump();

  // The metrics per rank: ranks 0 and 1 each sent and received 10 messages of 4 KiB, in 10 timed
  // groups; ranks 2 and 3 made no point-to-point call and have no series.
  const Outcome metrics = run(trainshim_cli() + " metrics " + s.db() + " --once");
  ASSERT_EQ(metrics.exit_code, 0) << metrics.out;
  std::map<std::string, std::string> p2p;  // "family rank direction" -> value
  std::istringstream lines(metrics.out);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("trainshim_p2p_"))
      p2p[line.substr(0, line.find('{')) + " " + label_of(line, "rank") + " " + label_of(line, "direction")] =
          line.substr(line.rfind(' ') + 1);
  std::map<std::string, std::string> expected;
  for (const std::string rank : {"0", "1"}) {
    for (const std::string direction : {"send", "recv"}) {
      expected["trainshim_p2p_calls_total " + rank + " " + direction] = "10";
      expected["trainshim_p2p_bytes_total " + rank + " " + direction] = "40960";
    }
    expected["trainshim_p2p_timed_groups_total " + rank + " "] = "10";
    const std::string gpu_time = p2p["trainshim_p2p_exec_seconds_total " + rank + " "];
    EXPECT_GT(gpu_time.empty() ? 0 : std::stod(gpu_time), 0) << "rank " << rank;
    expected["trainshim_p2p_exec_seconds_total " + rank + " "] = gpu_time;
  }
  EXPECT_EQ(p2p, expected) << metrics.out;

  // The timeline links the all-reduces across ranks; point-to-point timings join none of them.
  ASSERT_EQ(run(trainshim_cli() + " export " + s.db() + " --format chrome -o " + s.dir + "/trace.json").exit_code, 0);
  std::ifstream trace_file(s.dir + "/trace.json");
  const json trace = json::parse(trace_file);
  int gpu_slices = 0, flow_starts = 0;
  for (const auto& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "X" && e.at("cat") == "gpu_collective") ++gpu_slices;
    flow_starts += ph == "s" && e.at("cat") == "collective";
  }
  EXPECT_EQ(gpu_slices, 4 * 30);
  EXPECT_EQ(flow_starts, 30);
}

// ncclGroupSimulateEnd launches nothing: the numbers its calls took are given back, so the real
// all-reduces after it are 1..5 on every rank and all match; nothing of the plan is timed.
TEST(NcclModes, SimulatedGroupLaunchesNothing) {
  Scratch s;
  const json waits = run_mode(s, "simulate").at("collective_waits");
  EXPECT_EQ(waits.at("matched"), 5);
  EXPECT_EQ(waits.at("incomplete"), 0);
  EXPECT_EQ(waits.at("p2p").at("timed"), 0);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM events e JOIN apis a ON a.id = e.api WHERE "
                              "a.name = 'ncclGroupSimulateEnd' AND e.flags = 64 AND e.detail = 2"),
            4)
      << "an all-reduce and the point-to-point calls: two operations";
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) " + kTimings + " AND e.sequence = 1"), 4) << "one real all-reduce #1";
}

// Collectives captured into a CUDA graph are seen once, at capture, and never timed: the report
// counts them per communicator and says their replays are not measured.
TEST(NcclModes, CapturedCollectivesAreCountedPerCommunicator) {
  Scratch s;
  const json waits = run_mode(s, "captured").at("collective_waits");
  EXPECT_EQ(waits.at("matched"), 10) << "the 5 before and the 5 after the capture";
  EXPECT_EQ(waits.at("incomplete"), 0);
  EXPECT_EQ(waits.at("untimed").at("capturing"), 4 * 3);
  ASSERT_EQ(waits.at("captured").size(), 1u);
  const json& captured = waits.at("captured")[0];
  EXPECT_EQ(captured.at("collectives"), 3);
  EXPECT_EQ(captured.at("ranks"), 4);
  EXPECT_EQ(captured.at("replays_measured"), false);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string graphed = kCollectives + of_rank(rank) + " AND (e.flags & 1) <> 0";
    EXPECT_EQ(query_int(s.db(), "SELECT min(e.sequence) " + graphed), 6);
    EXPECT_EQ(query_int(s.db(), "SELECT max(e.sequence) " + graphed), 8);
  }
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM hangs"), 0);
  const auto text = run(trainshim_cli() + " report " + s.db());
  EXPECT_NE(text.out.find(": 3 collectives captured into CUDA graphs; their replays are not measured"),
            std::string::npos)
      << text.out;
}

}  // namespace
}  // namespace trainshim::test
