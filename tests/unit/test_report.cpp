// `trainshim report`: a run database written with the collector's Database, read back by the CLI.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "commands/commands.hpp"
#include "database.hpp"
#include "diagnose/findings.hpp"
#include "diagnose/load_report.hpp"
#include "errors.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "run_fixtures.hpp"
#include "store/run_database.hpp"
#include "store/stripped_libraries.hpp"
#include "temp_dir.hpp"

namespace trainshim::cli {
namespace {

namespace fs = std::filesystem;
using collector::Database;
using test::header_for;
using Json = nlohmann::ordered_json;

// Adds one event lasting `duration` ns.
void event(test::Records& records, int64_t process, Api api, uint64_t bytes, uint64_t duration,
           Direction d = Direction::None, HostMemory m = HostMemory::Unknown) {
  static uint64_t clock = 1'000'000;
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.bytes = bytes;
  r.direction = static_cast<uint8_t>(d);
  r.host_memory = static_cast<uint8_t>(m);
  clock += 10'000;
  records.add(process, r, clock, clock + duration);
}

class ReportTest : public test::TempDirTest {
 protected:
  // Rank 1 is added first: the report orders by rank, with unranked processes last.
  void write_two_rank_run() {
    Database db(path_, "unitjob");
    const int64_t r1 = db.add_process("seg-101", *header_for(1, 101, "nodeB"));
    const int64_t r0 = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    const int64_t stray = db.add_process("seg-50", *header_for(-1, 50, "nodeA"));
    test::Records records(db);

    // Rank 0: pageable H2D copies (the finding), pinned copies both ways, syncs, all-reduces.
    event(records, r0, Api::cudaMemcpyAsync, 1000, 100, Direction::HostToDevice, HostMemory::Pageable);
    event(records, r0, Api::cudaMemcpy, 2000, 200, Direction::HostToDevice, HostMemory::Pageable);
    event(records, r0, Api::cudaMemcpyAsync, 3000, 300, Direction::HostToDevice, HostMemory::Pageable);
    event(records, r0, Api::cudaMemcpyAsync, 4096, 50, Direction::HostToDevice, HostMemory::Pinned);
    event(records, r0, Api::cudaMemcpyAsync, 4096, 50, Direction::HostToDevice, HostMemory::Pinned);
    event(records, r0, Api::cudaMemcpy, 512, 40, Direction::DeviceToHost, HostMemory::Pinned);
    event(records, r0, Api::cudaStreamSynchronize, 0, 1000);
    event(records, r0, Api::cudaStreamSynchronize, 0, 3000);
    event(records, r0, Api::cudaDeviceSynchronize, 0, 500);
    event(records, r0, Api::ncclAllReduce, 1 << 20, 700);
    event(records, r0, Api::ncclAllReduce, 1 << 20, 300);
    event(records, r0, Api::cudaHostAlloc, 1 << 20, 9999);  // in no table
    db.update_process(r0, {.events = 12,
                           .dropped_ring_full = 5,
                           .dropped_not_ready = 1,
                           .lost_unpublished = 0,
                           .malformed = 2,
                           .ended = true});

    // Rank 1: pageable D2H copies, one sync, one all-reduce, many events lost to full rings.
    event(records, r1, Api::cudaMemcpyAsync, 100, 1000, Direction::DeviceToHost, HostMemory::Pageable);
    event(records, r1, Api::cudaMemcpy, 300, 2000, Direction::DeviceToHost, HostMemory::Pageable);
    event(records, r1, Api::cudaStreamSynchronize, 0, 2000);
    event(records, r1, Api::ncclAllReduce, 1 << 20, 1000);
    db.update_process(r1, {.events = 4,
                           .dropped_ring_full = 6200,
                           .dropped_not_ready = 0,
                           .lost_unpublished = 0,
                           .malformed = 0,
                           .ended = false});

    db.update_process(stray, {.events = 0,
                              .dropped_ring_full = 0,
                              .dropped_not_ready = 0,
                              .lost_unpublished = 0,
                              .malformed = 0,
                              .ended = true});
    records.store();
    db.commit();
  }

  // What `trainshim report ARGS...` prints, or the usage error it ends with.
  static std::string report_command(std::vector<std::string> args) {
    return command_output(add_report_command, "report", std::move(args));
  }
  // The same of `trainshim NAME ARGS...`, the command `add` adds.
  static std::string command_output(Command (*add)(CLI::App&), const std::string& name, std::vector<std::string> args) {
    CLI::App app;
    const Command command = add(app);
    std::reverse(args.begin(), args.end());  // CLI11 reads the vector from its back
    args.push_back(name);
    app.parse(std::move(args));
    testing::internal::CaptureStdout();
    try {
      command.run();
    } catch (const UsageError& e) {
      testing::internal::GetCapturedStdout();
      return e.what();
    }
    return testing::internal::GetCapturedStdout();
  }

  const std::string path_ = dir_ + "/trainshim-unitjob.db";
};

Json copy_row(const char* d, const char* m, int64_t calls, int64_t bytes, int64_t ns) {
  return {{"direction", d}, {"host_memory", m}, {"calls", calls}, {"bytes", bytes}, {"host_ns", ns}};
}
Json sync_row(const char* api, int64_t calls, int64_t ns) {
  return {{"api", api}, {"calls", calls}, {"blocked_ns", ns}};
}
Json collective_row(const char* op, int64_t calls, int64_t bytes, int64_t ns) {
  return {{"op", op}, {"calls", calls}, {"bytes", bytes}, {"host_ns", ns}};
}
const Json* find_copy(const Json& rows, const char* d, const char* m) {
  for (const auto& r : rows)
    if (r["direction"] == d && r["host_memory"] == m) return &r;
  return nullptr;
}

TEST_F(ReportTest, PerRankFiguresTotalsAndFindings) {
  write_two_rank_run();
  RunDatabase db(path_);
  const Report report = load_report(db);
  const Json doc = render_json(report);

  EXPECT_EQ(doc["format"], "trainshim-report/1");
  EXPECT_EQ(doc["job"]["id"], "unitjob");
  EXPECT_EQ(doc["job"]["database"], path_);
  EXPECT_EQ(doc["job"]["processes"], 3);
  ASSERT_EQ(doc["ranks"].size(), 3u);

  const Json& rank0 = doc["ranks"][0];
  EXPECT_EQ(rank0["rank"], 0);
  EXPECT_EQ(rank0["local_rank"], 0);
  EXPECT_EQ(rank0["world_size"], 2);
  EXPECT_EQ(rank0["pid"], 100);
  EXPECT_EQ(rank0["host"], "nodeA");
  EXPECT_EQ(rank0["command"], "python train.py --rank 0");
  EXPECT_EQ(rank0["ended"], true);
  EXPECT_EQ(rank0["events"], 12);
  EXPECT_EQ(rank0["copies"],
            Json::array({copy_row("h2d", "pinned", 2, 8192, 100), copy_row("h2d", "pageable", 3, 6000, 600),
                         copy_row("d2h", "pinned", 1, 512, 40)}));
  EXPECT_EQ(rank0["syncs"],
            Json::array({sync_row("cudaDeviceSynchronize", 1, 500), sync_row("cudaStreamSynchronize", 2, 4000)}));
  EXPECT_EQ(rank0["collectives"], Json::array({collective_row("all_reduce", 2, 2 << 20, 1000)}));
  EXPECT_EQ(rank0["dropped_events"], 8);
  EXPECT_EQ(rank0["lost"],
            (Json{{"ring_full", 5}, {"not_ready", 1}, {"unpublished", 0}, {"malformed", 2}, {"side_ring_full", 0}}));

  const Json& rank1 = doc["ranks"][1];
  EXPECT_EQ(rank1["rank"], 1);
  EXPECT_EQ(rank1["pid"], 101);
  EXPECT_EQ(rank1["ended"], false);
  EXPECT_EQ(rank1["copies"], Json::array({copy_row("d2h", "pageable", 2, 400, 3000)}));
  EXPECT_EQ(rank1["syncs"], Json::array({sync_row("cudaStreamSynchronize", 1, 2000)}));
  EXPECT_EQ(rank1["collectives"], Json::array({collective_row("all_reduce", 1, 1 << 20, 1000)}));
  EXPECT_EQ(rank1["dropped_events"], 6200);

  const Json& stray = doc["ranks"][2];  // rank -1 sorts last and reads as null
  EXPECT_TRUE(stray["rank"].is_null());
  EXPECT_TRUE(stray["local_rank"].is_null());
  EXPECT_EQ(stray["pid"], 50);
  EXPECT_EQ(stray["copies"], Json::array());
  EXPECT_EQ(stray["dropped_events"], 0);

  const Json& totals = doc["totals"];
  ASSERT_EQ(totals["copies"].size(), 4u);
  ASSERT_NE(find_copy(totals["copies"], "h2d", "pinned"), nullptr);
  EXPECT_EQ(*find_copy(totals["copies"], "h2d", "pinned"), copy_row("h2d", "pinned", 2, 8192, 100));
  EXPECT_EQ(*find_copy(totals["copies"], "h2d", "pageable"), copy_row("h2d", "pageable", 3, 6000, 600));
  EXPECT_EQ(*find_copy(totals["copies"], "d2h", "pinned"), copy_row("d2h", "pinned", 1, 512, 40));
  EXPECT_EQ(*find_copy(totals["copies"], "d2h", "pageable"), copy_row("d2h", "pageable", 2, 400, 3000));
  EXPECT_EQ(totals["syncs"],
            Json::array({sync_row("cudaDeviceSynchronize", 1, 500), sync_row("cudaStreamSynchronize", 3, 6000)}));
  EXPECT_EQ(totals["collectives"], Json::array({collective_row("all_reduce", 3, 3 << 20, 2000)}));
  EXPECT_EQ(totals["dropped_events"], 6208);

  // Most expensive first; lost-event findings cost nothing and keep their order. Syncs without
  // stacks are hidden syncs of an unknown library: checked by kind, apart from the rest.
  Json findings = Json::array(), hidden = Json::array();
  for (const auto& f : doc["findings"]) (f["kind"] == "hidden_sync" ? hidden : findings).push_back(f);
  // Rank 0's synchronous cudaMemcpy calls wait too (CUDA's API synchronization behavior), each its
  // own site: after rank 1's pageable copy and sync, 200 ns for the upload and 40 ns for the read-back.
  ASSERT_EQ(hidden.size(), 6u);
  std::vector<std::string> sync_copies;
  for (const auto& f : hidden)
    if (f["message"].get<std::string>().find("cudaMemcpy() ") != std::string::npos)
      sync_copies.push_back(
          fmt::format("{} {} {}", f["rank"].get<int>(), f["calls"].get<int>(), f["cost_ns"].get<int>()));
  EXPECT_EQ(sync_copies, (std::vector<std::string>{"0 1 200", "0 1 40"}));
  EXPECT_EQ(hidden[0]["rank"], 0);
  EXPECT_EQ(hidden[0]["calls"], 2);
  EXPECT_EQ(hidden[0]["cost_ns"], 4000);
  EXPECT_TRUE(hidden[0]["message"].get<std::string>().starts_with(
      "rank 0: cudaStreamSynchronize() in an unknown library at ? blocks the host"))
      << hidden[0]["message"];
  EXPECT_EQ(hidden[1]["rank"], 1);
  EXPECT_EQ(hidden[1]["calls"], 2);
  EXPECT_EQ(hidden[1]["cost_ns"], 3000);
  EXPECT_TRUE(hidden[1]["message"].get<std::string>().starts_with("rank 1: blocking D2H copy into pageable memory"))
      << hidden[1]["message"];
  ASSERT_EQ(findings.size(), 4u);
  EXPECT_EQ(findings[0]["kind"], "pageable_copy");
  EXPECT_EQ(findings[0]["rank"], 1);
  EXPECT_EQ(findings[0]["calls"], 2);
  EXPECT_EQ(findings[0]["bytes"], 400);
  EXPECT_EQ(findings[0]["cost_ns"], 3000);
  EXPECT_EQ(findings[0]["message"], "rank 1 copied 400 B D2H into pageable memory in 2 calls (3.0 µs of host time)");
  EXPECT_EQ(findings[1]["kind"], "pageable_copy");
  EXPECT_EQ(findings[1]["rank"], 0);
  EXPECT_EQ(findings[1]["calls"], 3);
  EXPECT_EQ(findings[1]["bytes"], 6000);
  EXPECT_EQ(findings[1]["cost_ns"], 600);
  EXPECT_EQ(findings[1]["message"], "rank 0 copied 5.9 KiB H2D from pageable memory in 3 calls (600 ns of host time)");
  EXPECT_EQ(findings[2]["kind"], "dropped_events");
  EXPECT_EQ(findings[2]["rank"], 0);
  EXPECT_EQ(findings[2]["calls"], 8);
  EXPECT_EQ(findings[2]["cost_ns"], 0);
  EXPECT_EQ(findings[2]["message"],
            "rank 0 lost 8 records (5 ring full, 1 before recording started, 0 unfinished at exit, 2 malformed, "
            "0 stacks or modules on a full side ring): its figures are lower bounds");
  EXPECT_EQ(findings[2]["advice"], loss_advice({.dropped_ring_full = 5, .dropped_not_ready = 1, .malformed = 2}));
  EXPECT_EQ(findings[3]["kind"], "dropped_events");
  EXPECT_EQ(findings[3]["rank"], 1);
  EXPECT_EQ(findings[3]["calls"], 6200);
  EXPECT_TRUE(findings[3]["message"].get<std::string>().starts_with("rank 1 lost 6,200 records ("));
  EXPECT_EQ(findings[3]["advice"],
            "ring full: raise TRAINSHIM_FIRST_RING_EVENTS (the main thread's ring), TRAINSHIM_RING_EVENTS (the other "
            "threads') or TRAINSHIM_RINGS");
}

// Larger rings help only records lost to a full ring; each cause gets its own advice, and a cause
// that lost nothing gets none.
TEST(LossAdvice, EachCauseGetsItsOwnAdvice) {
  const std::string ring =
      "ring full: raise TRAINSHIM_FIRST_RING_EVENTS (the main thread's ring), TRAINSHIM_RING_EVENTS (the other "
      "threads') or TRAINSHIM_RINGS";
  const std::string side = "side ring full: raise TRAINSHIM_SIDE_RECORDS";
  const std::string starting =
      "before recording started: other threads called CUDA while the first call set recording up, which larger "
      "rings do not change; make one CUDA call before starting threads to record them";
  const std::string unfinished =
      "unfinished at exit: a thread was inside a CUDA call when its process ended or was killed";
  const std::string malformed =
      "malformed: records that failed validation were skipped; check that nothing else writes into "
      "/dev/shm/trainshim-*";
  EXPECT_EQ(loss_advice({.dropped_ring_full = 3}), ring);
  EXPECT_EQ(loss_advice({.dropped_side_full = 1}), side);
  EXPECT_EQ(loss_advice({.dropped_not_ready = 169}), starting);
  EXPECT_EQ(loss_advice({.lost_unpublished = 2}), unfinished);
  EXPECT_EQ(loss_advice({.malformed = 4}), malformed);
  EXPECT_EQ(loss_advice({.dropped_ring_full = 1,
                         .dropped_not_ready = 1,
                         .lost_unpublished = 1,
                         .malformed = 1,
                         .dropped_side_full = 1}),
            ring + "; " + side + "; " + starting + "; " + unfinished + "; " + malformed);
  EXPECT_EQ(loss_advice({}), "");
}

TEST_F(ReportTest, TextRendering) {
  write_two_rank_run();
  RunDatabase db(path_);
  const std::string text = render_text(load_report(db));
  EXPECT_TRUE(text.starts_with("trainshim report: job unitjob (3 processes), " + path_ + "\n")) << text;
  EXPECT_NE(text.find("\nrank 0  pid 100  host nodeA\n  python train.py --rank 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nrank 1  pid 101  host nodeB  (still running)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nrank ?  pid 50  host nodeA\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  dropped events: 6,200\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  dropped events: 6,208\n"), std::string::npos) << text;  // all ranks
  EXPECT_NE(text.find("\nall ranks\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  no copies, syncs or collectives recorded\n"), std::string::npos) << text;  // rank ?
  EXPECT_NE(text.find("all_reduce"), std::string::npos) << text;
  EXPECT_NE(text.find("  * rank 0 copied 5.9 KiB H2D from pageable memory in 3 calls (600 ns of host time)\n"
                      "    -> pin the host buffer"),
            std::string::npos)
      << text;
  // Findings by cost: the list at the end.
  const std::size_t findings = text.find("\nFindings\n");
  ASSERT_NE(findings, std::string::npos) << text;
  EXPECT_LT(text.find("rank 1 copied 400 B D2H", findings), text.find("rank 0 copied 5.9 KiB H2D", findings)) << text;
}

// `report --rank N` keeps some findings: each keeps the severity of the cause it is evidence of.
TEST_F(ReportTest, AFindingKeepsItsSeverityWhenOneRankIsKept) {
  write_two_rank_run();
  RunDatabase db(path_);
  Report report = load_report(db);
  std::map<std::string, std::string> severity;  // by message
  std::set<std::string> severities;
  for (const Finding& f : report.findings) {
    severity[f.message] = cause_severity_name(f.severity);
    severities.insert(cause_severity_name(f.severity));
  }
  ASSERT_GE(severities.size(), 2u) << "the run's findings must differ in severity for the test to tell";
  ASSERT_TRUE(keep_only_rank(report, 1));
  const auto findings = render_json(report).at("findings");
  ASSERT_FALSE(findings.empty());
  ASSERT_LT(findings.size(), severity.size()) << "some findings must be left out";
  for (const auto& f : findings) EXPECT_EQ(f.at("severity"), severity.at(f.at("message"))) << f.dump();
}

// The verdict alone (--summary) and its length (--top); the golden summary adds the straggler's line.
TEST_F(ReportTest, TheVerdictShowsTheTopCauses) {
  write_two_rank_run();
  RunDatabase db(path_);
  const Report report = load_report(db);
  ASSERT_EQ(report.diagnosis.causes.size(), 9u);

  const std::string top_one = render_text(report, {.top = 1});
  EXPECT_NE(top_one.find("  1. [high] cudaStreamSynchronize() in an unknown library at ?\n"), std::string::npos)
      << top_one;
  EXPECT_EQ(top_one.find("  2. ["), std::string::npos) << top_one;
  EXPECT_NE(top_one.find("  ... 8 more below (Findings)\n"), std::string::npos) << top_one;

  const std::string summary = render_text(report, {.top = 3, .summary = true});
  EXPECT_NE(summary.find("  3. [medium] blocking uploads of the input from pageable memory\n"), std::string::npos)
      << summary;
  EXPECT_TRUE(summary.ends_with("  ... 6 more (trainshim report, without --summary)\n")) << summary;
  EXPECT_EQ(summary.find("\nrank 0  pid"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("\nFindings\n"), std::string::npos) << summary;
  const std::string full = render_text(report);
  EXPECT_EQ(full.substr(0, full.find("  ... 6 more")), summary.substr(0, summary.find("  ... 6 more")))
      << "the report opens with the verdict";
}

// A cause that costs the job's step nothing: on several ranks another rank sets the step; on one
// there is no other rank to blame.
TEST(ReportVerdict, ACauseThatCostsNothingSaysWhyForOneRankAndForMany) {
  RootCause item;
  item.kind = CauseKind::HiddenSync;
  item.title = "Tensor.item() at train.py:34 in <module>";
  item.predicted_step_ns = 2'700'000;
  item.severity = CauseSeverity::Low;
  item.evidence = {"rank 0: Tensor.item() at train.py:34 in <module> blocks the host 0.1 times per step",
                   "rank 1: Tensor.item() at train.py:34 in <module> blocks the host 0.1 times per step"};
  Report report;
  report.processes.resize(1);
  report.diagnosis = {2'700'000, -1, {item}, {}};
  const std::string one = render_text(report, {.summary = true});
  EXPECT_NE(one.find("     fixed, the step would not shorten: it cost the steps measured no time\n"), std::string::npos)
      << one;
  EXPECT_EQ(one.find("other ranks"), std::string::npos) << one;
  // The evidence under the cause does not repeat its title.
  EXPECT_NE(one.find("     - rank 0: blocks the host 0.1 times per step (1 more in Findings)\n"), std::string::npos)
      << one;
  report.processes.resize(2);
  const std::string two = render_text(report, {.summary = true});
  EXPECT_NE(two.find("     fixed alone, the job's step would not shorten: other ranks would still take 2.7 ms\n"),
            std::string::npos)
      << two;
}

// `trainshim report A B` of two runs: the same rank in both, jobs of different sizes, or two
// launches, is refused with what to do instead, unless --merge-runs; databases of two nodes of one
// job are not. `trainshim metrics A B` too.
TEST_F(ReportTest, DatabasesOfTwoRunsAreRefusedUnlessMergingIsAsked) {
  const auto write = [&](const std::string& name, std::vector<int> ranks, int world_size,
                         const std::string& launch = "torchrun:/tmp/torchelastic_k2j4x1aa/job7_q1w2e3r4") {
    const std::string path = dir_ + "/" + name;
    Database db(path, "unitjob", launch);
    for (const int rank : ranks)
      db.update_process(
          db.add_process("seg" + std::to_string(rank), *header_for(rank, 100 + rank, "nodeA", world_size)),
          {.ended = true});
    db.commit();
    return path;
  };
  const std::string first = write("first.db", {0, 1}, 2), again = write("again.db", {0, 1}, 2),
                    other = write("other.db", {2, 3}, 8), node_b = write("node_b.db", {2, 3}, 4),
                    node_a = write("node_a.db", {0, 1}, 4),
                    node_b_own_log =
                        write("node_b_own_log.db", {2, 3}, 4, "torchrun:/tmp/torchelastic_p0o9i8u7/job7_z_x_c_v_"),
                    node_b_relaunched =
                        write("node_b_relaunched.db", {2, 3}, 4, "torchrun:/tmp/torchelastic_p0o9i8u7/job8_a1s2d3f4"),
                    node_b_placeholder =
                        write("node_b_placeholder.db", {2, 3}, 4, "torchrun:/tmp/torchelastic_p0o9i8u7/none_a1s2d3f4"),
                    node_b_unknown = write("node_b_unknown.db", {2, 3}, 4, ""),
                    slurm_a = write("slurm_a.db", {0, 1}, 4, "slurm:4411"),
                    slurm_b = write("slurm_b.db", {2, 3}, 4, "slurm:4412");
  const std::string advice = "report each alone, compare two with `trainshim diff BEFORE.db AFTER.db`, or pass "
                             "--merge-runs to merge them all the same";
  EXPECT_EQ(report_command({first, again}),
            first + " and " + again + " both hold rank 0: two runs, not two nodes of one job; " + advice);
  EXPECT_EQ(report_command({first, first}),
            first + " and " + first + " both hold rank 0: two runs, not two nodes of one job; " + advice);
  EXPECT_EQ(report_command({first, other}),
            first + " holds a job of 2 ranks, " + other + " a job of 8: two runs, not two nodes of one job; " + advice);
  // Another run's second node: the ranks and the size fit, torchrun's run id does not (each node's
  // agent has a log directory of its own: only the run id in its name is the job's).
  EXPECT_EQ(report_command({node_a, node_b_relaunched}),
            node_a + " is of launch torchrun run job7, " + node_b_relaunched +
                " of launch torchrun run job8: two runs, not two nodes of one job; " + advice);
  EXPECT_EQ(report_command({slurm_a, slurm_b}), slurm_a + " is of launch slurm:4411, " + slurm_b +
                                                    " of launch slurm:4412: two runs, not two nodes of one job; " +
                                                    advice);
  // One run id in two nodes' log directories; a collector that knew no launch (no launcher in its
  // environment), or torchrun's placeholder run id, says nothing against it.
  // The exporter refuses them alike, with no option to merge.
  EXPECT_EQ(command_output(add_metrics_command, "metrics", {node_a, node_b_relaunched, "--once"}),
            node_a + " is of launch torchrun run job7, " + node_b_relaunched +
                " of launch torchrun run job8: two runs, not two nodes of one job; report each alone, compare two "
                "with `trainshim diff BEFORE.db AFTER.db`");
  EXPECT_TRUE(command_output(add_metrics_command, "metrics", {node_a, node_b, "--once"}).starts_with("# HELP"));
  for (const std::vector<std::string>& merged :
       {std::vector<std::string>{first, again, "--merge-runs"}, std::vector<std::string>{node_a, node_b},
        std::vector<std::string>{node_a, node_b_own_log}, std::vector<std::string>{node_a, node_b_unknown},
        std::vector<std::string>{node_a, node_b_placeholder},
        std::vector<std::string>{node_a, node_b_relaunched, "--merge-runs"}}) {
    const std::string out = report_command(merged);
    EXPECT_TRUE(out.starts_with("trainshim report: job unitjob (4 processes)")) << out;
  }
}

// `report --rank 1`: rank 1's block, setup and findings; the job's collective waits and the other
// ranks' totals stay. A rank the job does not have is refused with the ranks it has.
TEST_F(ReportTest, OneRankAlone) {
  write_two_rank_run();
  const Json all = Json::parse(report_command({path_, "--json"}));
  const Json one = Json::parse(report_command({path_, "--json", "--rank", "1"}));
  ASSERT_EQ(one["ranks"].size(), 1u) << one.dump(1);
  EXPECT_EQ(one["ranks"][0]["rank"], 1);
  EXPECT_EQ(one["ranks"][0], all["ranks"][1]);
  EXPECT_EQ(one["totals"], all["totals"]);
  EXPECT_EQ(one["collective_waits"], all["collective_waits"]);
  std::size_t rank1_findings = 0;
  for (const auto& f : all["findings"]) rank1_findings += f["rank"] == 1;
  ASSERT_GT(rank1_findings, 0u) << all["findings"].dump(1);
  EXPECT_LT(rank1_findings, all["findings"].size()) << all["findings"].dump(1);
  ASSERT_EQ(one["findings"].size(), rank1_findings) << one["findings"].dump(1);
  for (const auto& f : one["findings"]) EXPECT_EQ(f["rank"], 1) << f.dump(1);
  EXPECT_EQ(report_command({path_, "--rank", "7"}), "--rank 7: job unitjob has no such rank; its ranks: 0, 1");
}

// One database per node, as a multi-node job writes them: `trainshim report A B` reads both (side
// by side) into one report, ranks in order, collective waits matched across the databases.
TEST_F(ReportTest, DatabasesOfTwoNodesMergeIntoOneReport) {
  const std::string node_a = dir_ + "/trainshim-unitjob-a.db", node_b = dir_ + "/trainshim-unitjob-b.db";
  constexpr uint64_t kComm = 0xA11;
  // Rank 0's all-reduces take 5 ms on its GPU, rank 1's 1 ms: rank 0 waited 4 ms at each of 3.
  for (const auto& [path, rank, gpu_ns] : {std::tuple{node_b, 1, 1'000'000}, std::tuple{node_a, 0, 5'000'000}}) {
    Database db(path, "unitjob");
    const int64_t p = db.add_process("seg", *header_for(rank, 100 + rank, rank ? "nodeB" : "nodeA"));
    test::Records records(db);
    event(records, p, Api::cudaMemcpyAsync, 1000 * (rank + 1), 10, Direction::HostToDevice, HostMemory::Pageable);
    for (uint32_t sequence = 1; sequence <= 3; ++sequence) {
      EventRecord r{};
      r.api = static_cast<uint16_t>(Api::ncclAllReduce);
      r.object = kComm;
      r.sequence = sequence;
      r.rank_in_comm = uint32_t(rank);
      r.comm_size = 2;
      r.bytes = 4096;
      records.add(p, r, sequence * 1'000'000, sequence * 1'000'000 + 100);
      r.api = static_cast<uint16_t>(Api::ncclGpuTiming);
      r.detail = uint64_t(gpu_ns);
      records.add(p, r, sequence * 1'000'000, sequence * 1'000'000 + 100);
    }
    db.update_process(p, {.events = 7, .ended = true});
    records.store();
    db.commit();
  }
  const RunDatabase b(node_b), a(node_a);
  const Report report = load_report({&b, &a});
  EXPECT_EQ(report.job, "unitjob");
  EXPECT_EQ(report.database, node_b + ", " + node_a);
  ASSERT_EQ(report.processes.size(), 2u);
  EXPECT_EQ(report.processes[0].rank, 0);
  EXPECT_EQ(report.processes[0].host, "nodeA");
  EXPECT_EQ(report.processes[1].rank, 1);
  ASSERT_EQ(report.processes[0].copies.size(), 1u);
  EXPECT_EQ(report.processes[0].copies[0].bytes, 1000);
  EXPECT_EQ(report.processes[1].copies[0].bytes, 2000);
  ASSERT_EQ(report.total_copies.size(), 1u);
  EXPECT_EQ(report.total_copies[0].calls, 2);
  EXPECT_EQ(report.total_copies[0].bytes, 3000);
  ASSERT_EQ(report.total_collectives.size(), 1u);
  EXPECT_EQ(report.total_collectives[0].calls, 6);
  EXPECT_EQ(report.total_collectives[0].bytes, 6 * 4096);
  const CollectiveAnalysis& waits = report.waits.analysis;
  EXPECT_EQ(waits.matched, 3);
  EXPECT_EQ(waits.incomplete, 0);
  ASSERT_EQ(waits.ranks.size(), 2u);
  EXPECT_EQ(waits.ranks[0].rank, 0);
  EXPECT_EQ(waits.ranks[0].waited_ns, 12'000'000);
  EXPECT_EQ(waits.ranks[1].rank, 1);
  EXPECT_EQ(waits.ranks[1].waited_ns, 0);
  EXPECT_EQ(waits.ranks[1].last_count, 3);
  // Each rank repeats one all-reduce: three steps found on each, whichever database it came from.
  EXPECT_EQ(report.processes[0].sync_sites.steps.count, 3);
  EXPECT_EQ(report.processes[1].sync_sites.steps.count, 3);
}

TEST_F(ReportTest, EmptyRun) {
  { Database db(path_, "emptyjob"); }
  RunDatabase db(path_);
  EXPECT_EQ(db.meta("schema_version"), "8");
  const Report report = load_report(db);
  EXPECT_EQ(report.job, "emptyjob");
  EXPECT_TRUE(report.processes.empty());
  EXPECT_TRUE(report.findings.empty());
  EXPECT_EQ(report.total_lost.total(), 0);
  const std::string text = render_text(report);
  EXPECT_EQ(text, "trainshim report: job emptyjob (0 processes), " + path_ +
                      "\n\nNo process of this job made a CUDA or NCCL call that trainshim records.\n");
  const Json doc = render_json(report);
  EXPECT_EQ(doc["ranks"], Json::array());
  EXPECT_EQ(doc["findings"], Json::array());
  EXPECT_EQ(doc["totals"]["dropped_events"], 0);
}

TEST_F(ReportTest, OneCleanProcessHasNoFindings) {
  {
    Database db(path_, "clean");
    const int64_t p = db.add_process("seg", *header_for(0, 10, "n"));
    test::Records records(db);
    event(records, p, Api::cudaMemcpyAsync, 64, 10, Direction::HostToDevice, HostMemory::Pinned);
    db.update_process(p, {.events = 1,
                          .dropped_ring_full = 0,
                          .dropped_not_ready = 0,
                          .lost_unpublished = 0,
                          .malformed = 0,
                          .ended = true});
    records.store();
    db.commit();
  }
  RunDatabase db(path_);
  const std::string text = render_text(load_report(db));
  EXPECT_TRUE(text.starts_with("trainshim report: job clean (1 process), ")) << text;
  EXPECT_EQ(text.find("all ranks"), std::string::npos) << text;
  EXPECT_NE(text.find("Findings\n  none: no pageable copies and no lost events\n"), std::string::npos) << text;
}

TEST_F(ReportTest, MissingFile) {
  const std::string missing = dir_ + "/nope.db";
  try {
    RunDatabase db(missing);
    FAIL() << "opened a missing file";
  } catch (const UsageError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(missing + ": no such database")) << e.what();
  }
  EXPECT_FALSE(fs::exists(missing));  // a reader never creates the file
}

TEST_F(ReportTest, RandomBytesAreNotADatabase) {
  {
    std::ofstream out(path_, std::ios::binary);
    std::mt19937 random(99);
    for (int i = 0; i < 8192; ++i) out.put(char(random()));
  }
  try {
    RunDatabase db(path_);
    FAIL() << "opened random bytes";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path_ + ": not a trainshim database"), std::string::npos) << e.what();
  }
}

TEST_F(ReportTest, OtherSqliteDatabaseIsNotATrainshimDatabase) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE notes(text TEXT)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  try {
    RunDatabase db(path_);
    FAIL() << "opened a foreign database";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("not a trainshim database"), std::string::npos) << e.what();
  }
}

// A database with nothing but its meta table, as any trainshim writes it first.
void write_meta_only(const std::string& path, const std::string& schema_version, const std::string& writer_version) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  const std::string sql = fmt::format("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL); "
                                      "INSERT INTO meta VALUES('schema_version', '{}'), ('writer_version', '{}')",
                                      schema_version, writer_version);
  EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
}

std::string refusal(const std::string& path) {
  try {
    RunDatabase db(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "read";
}

TEST_F(ReportTest, OlderSchemaVersionIsRefusedWithWhatToDo) {
  write_meta_only(path_, "5", "0.1.0");
  EXPECT_EQ(refusal(path_), path_ + ": written by an older trainshim (schema 5); this trainshim reads schema 8 and "
                                    "newer: re-run the job, or read it with the trainshim that wrote it");
}

TEST_F(ReportTest, NewerSchemaVersionIsRefusedNamingBothVersions) {
  write_meta_only(path_, "99", "7.1.0");
  EXPECT_EQ(refusal(path_), path_ + ": written by a newer trainshim 7.1.0 (schema 99); this trainshim reads schemas "
                                    "8 to 8: read it with that trainshim or a newer one");
}

TEST_F(ReportTest, SchemaVersionThatIsNoNumberIsNotATrainshimDatabase) {
  write_meta_only(path_, "5x", "");
  EXPECT_EQ(refusal(path_), path_ + ": not a trainshim database (schema version '5x'); point at the file a trainshim "
                                    "run wrote");
}

TEST_F(ReportTest, NewerSchemaVersionIsRefused) {
  { Database db(path_, "future"); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE meta SET value = '99' WHERE key = 'schema_version'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  EXPECT_NE(refusal(path_).find("(schema 99); this trainshim reads schemas 8 to 8"), std::string::npos)
      << refusal(path_);
  // The collector refuses to add to it as well.
  EXPECT_THROW(Database(path_, "future"), std::runtime_error);
}

// A PyTorch library without .symtab is said once; one that has it, or any other library, is not.
TEST_F(ReportTest, PyTorchLibraryWithoutSymbolTableIsAFinding) {
  const std::string self = fs::read_symlink("/proc/self/exe");
  const std::string kept = dir_ + "/libtorch_cpu.so", stripped = dir_ + "/libtorch_python.so",
                    other = dir_ + "/libfoo.so";
  fs::copy_file(self, kept);
  fs::copy_file(self, other);
  std::ofstream(dir_ + "/notes.txt") << "not an ELF file";
  ASSERT_EQ(std::system(("objcopy --strip-all " + self + " " + stripped).c_str()), 0);
  fs::remove(other);
  ASSERT_EQ(std::system(("objcopy --strip-all " + self + " " + other).c_str()), 0);
  ASSERT_EQ(has_symbol_table(kept), true);
  ASSERT_EQ(has_symbol_table(stripped), false);
  EXPECT_EQ(has_symbol_table(dir_ + "/missing.so"), std::nullopt);
  EXPECT_EQ(has_symbol_table(dir_ + "/notes.txt"), std::nullopt);
  {
    Database db(path_, "unitjob");
    const int64_t r0 = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    const int64_t r1 = db.add_process("seg-101", *header_for(1, 101, "nodeA"));
    for (const int64_t p : {r0, r1}) {
      db.add_module(p, 1, kept, 0x1000, "");
      db.add_module(p, 2, stripped, 0x2000, "");
      db.add_module(p, 3, other, 0x3000, "");
      db.add_module(p, 4, dir_ + "/libtorch_cuda.so", 0x4000, "");  // not on this machine: not judged
    }
  }
  RunDatabase db(path_);
  const Json doc = render_json(load_report(db));
  std::vector<std::string> messages;
  for (const auto& f : doc["findings"])
    if (f["kind"] == "stripped_library") messages.push_back(f["message"]);
  ASSERT_EQ(messages.size(), 1u) << doc["findings"].dump(1);
  EXPECT_TRUE(messages[0].starts_with(stripped + " has no symbol table (.symtab)")) << messages[0];
}

}  // namespace
}  // namespace trainshim::cli
