// The collective-wait section from a run database: point-to-point calls apart from the
// collectives, collectives captured into CUDA graphs, and calls launched on NCCL's own thread.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "database.hpp"
#include "diagnose/load_report.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "run_fixtures.hpp"
#include "store/run_database.hpp"
#include "temp_dir.hpp"

namespace trainshim::cli {
namespace {

using collector::Database;

constexpr uint64_t kWorld = 0xA11, kGraphed = 0xC0;

class WaitsTest : public test::TempDirTest {
 protected:
  void add(test::Records& records, int64_t process, Api api, uint32_t rank, uint64_t comm, uint32_t sequence,
           uint32_t flags, uint32_t peer = 0, uint64_t detail = 0) {
    EventRecord r{};
    r.api = static_cast<uint16_t>(api);
    r.object = comm;
    r.comm_size = 2;
    r.rank_in_comm = rank;
    r.sequence = sequence;
    r.flags = flags;
    r.peer = peer;
    r.detail = detail;
    clock_ += 1000;
    records.add(process, r, clock_, clock_ + 100);
  }

  const std::string path_ = dir_ + "/trainshim-unitjob.db";
  uint64_t clock_ = 1'000'000;
};

TEST_F(WaitsTest, PointToPointCapturedAndInProgressAreReportedApart) {
  {
    Database db(path_, "unitjob");
    const int64_t r0 = db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
    const int64_t r1 = db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
    test::Records records(db);
    // One all-reduce, timed on both ranks: the only collective of the matching.
    for (auto [p, rank, gpu] : {std::tuple{r0, 0u, 5'000'000u}, std::tuple{r1, 1u, 9'000'000u}}) {
      add(records, p, Api::ncclAllReduce, rank, kWorld, 1, 0);
      add(records, p, Api::ncclGpuTiming, rank, kWorld, 1, 0, 0, gpu);
    }
    // Rank 0 sends twice to rank 1, rank 1 receives once; the group's point-to-point work is
    // timed once on rank 0. Its numbers (1, 2) must not meet all-reduce #1 in the matching.
    add(records, r0, Api::ncclSend, 0, kWorld, 1, kPointToPoint | kSend | kInGroup, 1);
    add(records, r0, Api::ncclSend, 0, kWorld, 2, kPointToPoint | kSend | kInGroup, 1);
    add(records, r1, Api::ncclRecv, 1, kWorld, 1, kPointToPoint | kInGroup, 0);
    add(records, r0, Api::ncclGpuTiming, 0, kWorld, 1, kPointToPoint | kSend | kInGroup, 1, 7'000'000);
    // Three collectives captured into a graph on rank 0, two on rank 1.
    for (uint32_t seq = 1; seq <= 3; ++seq) add(records, r0, Api::ncclAllReduce, 0, kGraphed, seq, kUntimedCapturing);
    for (uint32_t seq = 1; seq <= 2; ++seq) add(records, r1, Api::ncclAllReduce, 1, kGraphed, seq, kUntimedCapturing);
    // A group of 3 operations and a call of its own, all launched on NCCL's thread, never waited for.
    add(records, r1, Api::ncclGroupEnd, 0, 0, 0, kGroupInProgress, 0, 3);
    add(records, r1, Api::ncclAllReduce, 1, kWorld, 2, kGroupInProgress);
    records.store();
    db.commit();
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  const WaitReport& w = report.waits;
  EXPECT_EQ(w.analysis.matched, 1);
  EXPECT_EQ(w.analysis.incomplete, 0);
  EXPECT_EQ(w.analysis.duplicates, 0);
  EXPECT_EQ(w.analysis.communicators, 1);
  EXPECT_EQ(w.p2p.sends, 2);
  EXPECT_EQ(w.p2p.recvs, 1);
  EXPECT_EQ(w.p2p.matched, 1);
  EXPECT_EQ(w.p2p.unmatched, 1);
  EXPECT_EQ(w.p2p.timed, 1);
  EXPECT_EQ(w.p2p.gpu_ns, 7'000'000);
  EXPECT_EQ(w.launched_in_progress, 4);
  EXPECT_EQ(w.untimed_in_group_in_progress, 4);
  ASSERT_EQ(w.captured.size(), 1u);
  EXPECT_EQ(w.captured[0].communicator, kGraphed);
  EXPECT_EQ(w.captured[0].collectives, 3);
  EXPECT_EQ(w.captured[0].ranks, 2);

  const auto json = render_json(report).at("collective_waits");
  EXPECT_EQ(json.at("matched"), 1);
  EXPECT_EQ(json.at("inconsistent"), 0);
  EXPECT_EQ(json.at("untimed").at("in_group_in_progress"), 4);
  EXPECT_EQ(json.at("launched_on_nccl_thread"), 4);
  EXPECT_EQ(json.at("untimed").at("capturing"), 0) << "the header's counter, not the records'";
  ASSERT_EQ(json.at("captured").size(), 1u);
  EXPECT_EQ(json.at("captured")[0].at("communicator"), "00000000000000c0");
  EXPECT_EQ(json.at("captured")[0].at("collectives"), 3);
  EXPECT_EQ(json.at("captured")[0].at("replays_measured"), false);
  EXPECT_EQ(json.at("p2p").at("matched"), 1);
  EXPECT_EQ(json.at("p2p").at("unmatched"), 1);

  const std::string text = render_text(report);
  EXPECT_NE(text.find("communicator 00000000000000c0: 3 collectives captured into CUDA graphs; their replays are "
                      "not measured"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("4 NCCL operations were not timed"), std::string::npos) << text;
  EXPECT_NE(text.find("point-to-point: 2 sends, 1 receives, 1 pairs matched, 1 calls unmatched, 1 timed"),
            std::string::npos)
      << text;
}

TEST_F(WaitsTest, NothingCapturedNothingSaid) {
  {
    Database db(path_, "unitjob");
    const int64_t r0 = db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
    const int64_t r1 = db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
    test::Records records(db);
    for (auto [p, rank] : {std::pair{r0, 0u}, std::pair{r1, 1u}}) {
      add(records, p, Api::ncclAllReduce, rank, kWorld, 1, 0);
      add(records, p, Api::ncclGpuTiming, rank, kWorld, 1, 0, 0, 1'000'000);
    }
    records.store();
    db.commit();
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  EXPECT_TRUE(report.waits.captured.empty());
  EXPECT_EQ(report.waits.untimed_in_group_in_progress, 0);
  const std::string text = render_text(report);
  EXPECT_EQ(text.find("captured into CUDA graphs"), std::string::npos);
  EXPECT_EQ(text.find("point-to-point"), std::string::npos);
}

}  // namespace
}  // namespace trainshim::cli
